// HostRegion: one anonymous host memory mapping, 2 MiB-aligned and pre-faulted.
//
// Design
// - Memory that training touches must not page-fault during training: a fault inside a kernel
//   distorts the op times the planner measures, and a fault on memory the host has not got ends
//   in the OOM killer instead of an error. So a region is faulted once, at creation, and refused
//   up front (kOutOfMemory, with the numbers) when the host's MemAvailable cannot hold it.
// - An anonymous mmap, 2 MiB-aligned and advised MADV_HUGEPAGE when it is at least 2 MiB, so that
//   pre-faulting and training both see huge pages (fewer faults, fewer TLB misses). See
//   Note [Prefaulting] in host_region.cc for the measured choice of method.
// - Lives in common, below every module that needs memory of its own: the runtime's host tier
//   (runtime/tiers.h) and the CPU backend's device memory.
// - Optional guard pages (guard_bytes): PROT_NONE pages before and after the usable bytes, and the
//   usable bytes end flush with the guard after them (to 64 bytes), so the first access past the
//   end faults; common/fault_guard.h turns that fault into an error naming what was running. The
//   device arena uses them: bytes past the budget do not exist.
// - Move-only; the region is unmapped in the destructor.
//
// Usage:
//   Result<HostRegion> region = HostRegion::map(bytes, {.name = "activations"});
//   if (!region.ok()) return region.status();   // kOutOfMemory names the region and the numbers
//   std::byte* data = region->data();           // region->size() bytes, zero, resident
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace ferry {

enum class PrefaultMethod : uint8_t {
  kNone,      // pages fault on first use (tests that want a lazily backed region)
  kTouch,     // worker threads write one byte per page after MADV_HUGEPAGE (default, fastest)
  kPopulate,  // MAP_POPULATE: the kernel faults every page inside mmap, on one thread, with
              // 4 KiB pages, since MADV_HUGEPAGE can only be applied after the mapping exists
};

struct HostRegionOptions {
  // Names the memory in error messages; empty means "region".
  std::string name = "";
  // The base address is aligned to at least this (0 or a power of two), besides the page size
  // and, with huge pages, 2 MiB.
  uint64_t min_alignment = 0;
  PrefaultMethod prefault = PrefaultMethod::kTouch;
  int prefault_threads = 2;  // kTouch only; capped to one thread per 64 MiB
  bool huge_pages = true;    // 2 MiB alignment + MADV_HUGEPAGE for regions >= 2 MiB
  // Refuse (kOutOfMemory) a pre-faulted region larger than the host's MemAvailable, rather
  // than let pre-faulting push the machine into swap or the OOM killer.
  bool check_available_memory = true;
  // Inaccessible bytes (rounded up to whole pages) mapped before and after the usable ones; 0 for
  // none. With guards, data() is aligned to max(min_alignment, 64) and min_alignment must not
  // exceed the page size; the bytes from data() + size() up to the next multiple of that
  // alignment are the only accessible ones past the end.
  uint64_t guard_bytes = 0;
};

// One anonymous memory mapping of exactly `size()` usable bytes. Move-only; unmaps when destroyed.
class HostRegion {
 public:
  // Maps and pre-faults `bytes` bytes as `options` say. Errors: kInvalidArgument for 0 bytes or
  // a min_alignment that is not a power of two, kOutOfMemory when the memory cannot be obtained
  // (the message names the region and the numbers).
  static Result<HostRegion> map(uint64_t bytes, const HostRegionOptions& options = {});

  HostRegion() = default;
  HostRegion(HostRegion&& other) noexcept;
  HostRegion& operator=(HostRegion&& other) noexcept;
  HostRegion(const HostRegion&) = delete;
  HostRegion& operator=(const HostRegion&) = delete;
  ~HostRegion();

  std::byte* data() const { return data_; }
  uint64_t size() const { return size_; }
  // Alignment the base address was mapped at (2 MiB with huge pages, else the page size, or
  // min_alignment when that is larger).
  uint64_t base_alignment() const { return base_alignment_; }
  // Seconds spent pre-faulting at creation (0 for PrefaultMethod::kNone).
  double prefault_seconds() const { return prefault_seconds_; }
  // Accessible bytes from data() on: size() rounded up to the page size, or with guard pages to
  // the end alignment (see HostRegionOptions::guard_bytes).
  uint64_t accessible_bytes() const { return accessible_bytes_; }

 private:
  void unmap();

  std::byte* data_ = nullptr;
  uint64_t size_ = 0;
  uint64_t accessible_bytes_ = 0;
  std::byte* map_begin_ = nullptr;  // the whole mapping, guards included
  uint64_t map_bytes_ = 0;
  uint64_t base_alignment_ = 0;
  double prefault_seconds_ = 0;
  std::unique_ptr<char[]> name_;  // stable storage for the fault guard's message
  int guard_handles_[2] = {-1, -1};
};

}  // namespace ferry
