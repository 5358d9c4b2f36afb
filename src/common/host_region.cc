// HostRegion: mapping, alignment and pre-faulting of anonymous host memory.
//
// Note [Prefaulting]
//   A fresh anonymous mapping costs a page fault per page on first touch. Paying that inside a
//   training step would distort every op time the planner measures, so every region training
//   uses (the runtime's host tier, the CPU backend's device memory) is faulted
//   once, at creation. Two ways, measured for 1 GiB on the 2-core development VM (THP mode
//   "madvise"; bench/allocator_bench.cc, BM_RegionPrefault):
//     - kPopulate, MAP_POPULATE: the kernel faults 4 KiB pages one by one on the calling thread;
//       the mapping cannot be advised MADV_HUGEPAGE before mmap populates it.
//     - kTouch: MADV_HUGEPAGE, then two threads write one byte per 4 KiB page; the first write in
//       each 2 MiB extent faults in a whole zeroed huge page (512x fewer faults), so the cost is
//       mostly zeroing memory, split over the threads.
//                                        MAP_POPULATE    kTouch (huge pages, 2 threads)
//     idle machine, memory reused (*)     1.7-4.3 GiB/s   2.5-15.3 GiB/s (3 of 5 runs >= 14)
//     machine at load 3-4, memory reused  2.6-3.8 GiB/s   2.4-5.8 GiB/s (median 5.5)
//     memory the VM never touched (*)     0.36-0.46 GiB/s 0.70-0.73 GiB/s
//   (*) a standalone prototype of the same two methods. The last row is what the hypervisor
//   charges for the first touch of guest memory (~0.4 s/GiB); it applies once per VM boot.
//   kTouch wins or ties everywhere and also gives huge pages, which spare the TLB during
//   training, so it is the default.
#include "common/host_region.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/fault_guard.h"
#include "common/units.h"

namespace ferry {

namespace {

constexpr uint64_t kHugePageBytes = 2ull << 20;
// Below this much memory per thread, starting a thread costs more than it saves.
constexpr uint64_t kMinTouchBytesPerThread = 64ull << 20;

std::string bytes_both(uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} bytes", bytes);
  return fmt::format("{} ({} bytes)", format_bytes(bytes), bytes);
}

// MemAvailable from /proc/meminfo: what the kernel estimates can be allocated without swapping.
std::optional<uint64_t> mem_available_bytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return std::nullopt;
  char line[256];
  std::optional<uint64_t> result;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long long kib = 0;
    if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
      result = static_cast<uint64_t>(kib) * 1024;
      break;
    }
  }
  std::fclose(f);
  return result;
}

// Writes one byte per page of [begin, begin + bytes). The region is freshly mapped and zero, so
// writing zero keeps its contents; volatile keeps the compiler from dropping the stores.
void touch_pages(std::byte* begin, uint64_t bytes, uint64_t page_bytes) {
  volatile std::byte* p = begin;
  for (uint64_t i = 0; i < bytes; i += page_bytes) p[i] = std::byte{0};
}

// Touches every page with up to `threads` threads, each owning a contiguous, huge-page-aligned
// chunk so that no two threads fault the same huge page.
void touch_pages_parallel(std::byte* data, uint64_t bytes, uint64_t page_bytes, int threads) {
  uint64_t max_threads = std::max<uint64_t>(1, bytes / kMinTouchBytesPerThread);
  uint64_t n = std::clamp<uint64_t>(static_cast<uint64_t>(std::max(threads, 1)), 1, max_threads);
  uint64_t chunk = align_up((bytes + n - 1) / n, kHugePageBytes);
  std::vector<std::thread> workers;
  uint64_t next = chunk;  // chunk 0 is this thread's
  try {
    for (; next < bytes; next += chunk) {
      uint64_t len = std::min(chunk, bytes - next);
      workers.emplace_back(touch_pages, data + next, len, page_bytes);
    }
  } catch (const std::exception&) {
    // No thread available: touch what is left here rather than fail the arena.
    touch_pages(data + next, bytes - next, page_bytes);
  }
  touch_pages(data, std::min(chunk, bytes), page_bytes);
  for (std::thread& t : workers) t.join();
}

}  // namespace

Result<HostRegion> HostRegion::map(uint64_t bytes, const HostRegionOptions& options) {
  const std::string name = options.name.empty() ? "region" : options.name;
  if (bytes == 0)
    return Status::InvalidArgument(fmt::format("capacity of '{}' must be positive, got 0 bytes", name));
  const uint64_t min_alignment = options.min_alignment;
  if ((min_alignment & (min_alignment - 1)) != 0)
    return Status::InvalidArgument(
        fmt::format("alignment of '{}' must be a power of two, got {}", name, min_alignment));

  const uint64_t page_bytes = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (options.guard_bytes > 0 && min_alignment > page_bytes)
    return Status::InvalidArgument(fmt::format("'{}': guard pages need an alignment of at most a page ({}), got {}",
                                               name, page_bytes, min_alignment));
  const bool huge = options.huge_pages && bytes >= kHugePageBytes;
  const uint64_t base_alignment = std::max({huge ? kHugePageBytes : page_bytes, page_bytes, min_alignment});
  const uint64_t slack = base_alignment - page_bytes;  // mmap already gives page alignment
  auto too_large = [&](const std::string& why) {
    return Status::OutOfMemory(fmt::format("cannot obtain {} for '{}': {}", bytes_both(bytes), name, why));
  };
  const uint64_t guard = options.guard_bytes > 0 ? align_up(std::min<uint64_t>(options.guard_bytes, 1ull << 30),
                                                            page_bytes)
                                                 : 0;
  if (bytes > UINT64_MAX / 2 - page_bytes - slack - 2 * guard) return too_large("the size overflows the address space");
  const uint64_t mapped_bytes = align_up(bytes, page_bytes);  // the accessible body

  if (options.prefault != PrefaultMethod::kNone && options.check_available_memory) {
    std::optional<uint64_t> available = mem_available_bytes();
    if (available && mapped_bytes > *available)
      return too_large(
          fmt::format("only {} of host memory is available (MemAvailable), and pre-faulting "
                      "more would swap or invoke the OOM killer",
                      bytes_both(*available)));
  }

  auto start = std::chrono::steady_clock::now();
  int flags = MAP_PRIVATE | MAP_ANONYMOUS;
  if (options.prefault == PrefaultMethod::kPopulate) flags |= MAP_POPULATE;
  const uint64_t total = guard + mapped_bytes + guard + slack;
  void* raw = mmap(nullptr, total, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (raw == MAP_FAILED) {
    int err = errno;
    return too_large(fmt::format("mmap of {} failed: {}", bytes_both(total), std::strerror(err)));
  }
  // Trim the slack so exactly [body - guard, body + mapped_bytes + guard) stays mapped.
  auto raw_addr = reinterpret_cast<uintptr_t>(raw);
  uintptr_t body = align_up(raw_addr + guard, base_alignment);
  uintptr_t map_begin = body - guard;
  if (map_begin > raw_addr) munmap(raw, map_begin - raw_addr);
  uintptr_t tail = body + mapped_bytes + guard;
  if (raw_addr + total > tail) munmap(reinterpret_cast<void*>(tail), raw_addr + total - tail);

  HostRegion region;
  region.map_begin_ = reinterpret_cast<std::byte*>(map_begin);
  region.map_bytes_ = mapped_bytes + 2 * guard;
  region.size_ = bytes;
  region.base_alignment_ = base_alignment;
  region.data_ = reinterpret_cast<std::byte*>(body);
  region.accessible_bytes_ = mapped_bytes;
  region.name_ = std::make_unique<char[]>(name.size() + 1);
  std::memcpy(region.name_.get(), name.c_str(), name.size() + 1);
  if (guard > 0) {
    // The usable bytes end flush with the guard after them (to the end alignment).
    const uint64_t end_alignment = std::max<uint64_t>(min_alignment, 64);
    const uint64_t lead = mapped_bytes - align_up(bytes, end_alignment);
    region.data_ = reinterpret_cast<std::byte*>(body + lead);
    region.accessible_bytes_ = mapped_bytes - lead;
    region.base_alignment_ = end_alignment;
    if (mprotect(reinterpret_cast<void*>(map_begin), guard, PROT_NONE) != 0 ||
        mprotect(reinterpret_cast<void*>(body + mapped_bytes), guard, PROT_NONE) != 0) {
      int err = errno;
      return Status::Internal(fmt::format("'{}': mprotect of its guard pages failed: {}", name, std::strerror(err)));
    }
    const auto usable_begin = reinterpret_cast<uintptr_t>(region.data_);
    const uintptr_t usable_end = usable_begin + bytes;
    region.guard_handles_[0] = register_guard_range(map_begin, body, usable_begin, usable_end, region.name_.get());
    region.guard_handles_[1] =
        register_guard_range(body + mapped_bytes, tail, usable_begin, usable_end, region.name_.get());
  }
  // Best effort: without transparent huge pages the region still works, with 4 KiB pages.
  if (huge) madvise(reinterpret_cast<void*>(body), mapped_bytes, MADV_HUGEPAGE);
  if (options.prefault == PrefaultMethod::kTouch)
    touch_pages_parallel(reinterpret_cast<std::byte*>(body), mapped_bytes, page_bytes, options.prefault_threads);
  if (options.prefault != PrefaultMethod::kNone)
    region.prefault_seconds_ =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return region;
}

HostRegion::HostRegion(HostRegion&& other) noexcept { *this = std::move(other); }

HostRegion& HostRegion::operator=(HostRegion&& other) noexcept {
  if (this != &other) {
    unmap();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    accessible_bytes_ = std::exchange(other.accessible_bytes_, 0);
    map_begin_ = std::exchange(other.map_begin_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    base_alignment_ = std::exchange(other.base_alignment_, 0);
    prefault_seconds_ = std::exchange(other.prefault_seconds_, 0);
    name_ = std::move(other.name_);
    for (int i = 0; i < 2; ++i) guard_handles_[i] = std::exchange(other.guard_handles_[i], -1);
  }
  return *this;
}

HostRegion::~HostRegion() { unmap(); }

void HostRegion::unmap() {
  for (int& h : guard_handles_) {
    unregister_guard_range(h);
    h = -1;
  }
  if (map_begin_ != nullptr) munmap(map_begin_, map_bytes_);
  data_ = map_begin_ = nullptr;
  size_ = accessible_bytes_ = map_bytes_ = 0;
}

}  // namespace ferry
