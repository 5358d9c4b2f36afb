// DeviceArena and HostPool: one pre-faulted host memory region carved up by an OffsetAllocator.
//
// Design
// - The CPU backend has no device memory, so "device memory" is one host region of exactly
//   `capacity` bytes, obtained once and never grown: the memory budget is a hard limit, as a
//   GPU's memory is, and the allocator inside sees the fragmentation a GPU arena would see.
// - HostRegion (common/host_region.h) is the mechanism: an anonymous mmap, 2 MiB-aligned and
//   advised MADV_HUGEPAGE when it is at least 2 MiB, pre-faulted once at creation so that no
//   training step pays page faults later. See Note [Prefaulting] in common/host_region.cc.
// - BasicArena<Ptr> = HostRegion + OffsetAllocator. The pointer type says where memory lives:
//     DeviceArena = BasicArena<DevicePtr> (backend/device_ptr.h): addresses are opaque. Code
//       outside the backend may compare, offset and print a DevicePtr but never dereference it,
//       because a CUDA arena's addresses are not host addresses. host_address() converts, with a
//       bounds check, for the CPU backend and tests only.
//     HostPool = BasicArena<std::byte*>: the pinned-memory stand-in (host memory under any
//       backend), with its own capacity. Its pointers are plain host pointers.
//   Distinct types mean a device block cannot be passed where a host block is expected, which
//   keeps the direction of every swap copy checked by the compiler.
// - Move-only; the region is unmapped in the destructor. Not thread-safe, like OffsetAllocator.
//
// Usage:
//   Result<DeviceArena> arena = DeviceArena::create(budget_bytes);
//   if (!arena.ok()) return arena.status();           // kOutOfMemory with the numbers
//   AllocResult<DeviceArena::Block> block = arena->allocate(tensor_bytes);
//   if (!block.ok()) ... block.failure() ...           // evict, or report block.status()
//   std::byte* data = arena->host_address(block->ptr); // CPU backend only
//   arena->free(*block);
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "backend/device_ptr.h"
#include "common/host_region.h"
#include "common/status.h"
#include "runtime/allocator.h"

namespace ferry {

struct ArenaOptions {
  // How the region is obtained. An empty region.name means "device" for a DeviceArena and
  // "host" for a HostPool; it names the arena in errors and allocator messages too.
  HostRegionOptions region = {};  // "= {}": lets {.alignment = n} omit it without a warning
  // Of every block (a power of two); the region's base is aligned to it as well, so that block
  // addresses are.
  uint64_t alignment = OffsetAllocator::kDefaultAlignment;
};

// A HostRegion managed by an OffsetAllocator. Ptr is DevicePtr or std::byte* (see top of file).
template <typename Ptr>
class BasicArena {
 public:
  struct Block {
    uint64_t offset = 0;  // from base()
    uint64_t bytes = 0;   // as requested (the allocator reserves it rounded up to the alignment)
    Ptr ptr{};            // base() + offset
  };

  // Obtains a region of exactly `capacity` bytes. Errors as HostRegion::map; kInvalidArgument
  // for an alignment that is not a power of two.
  static Result<BasicArena> create(uint64_t capacity, ArenaOptions options = {});

  BasicArena(BasicArena&&) noexcept = default;
  BasicArena& operator=(BasicArena&&) noexcept = default;
  BasicArena(const BasicArena&) = delete;
  BasicArena& operator=(const BasicArena&) = delete;

  Ptr base() const;
  uint64_t capacity() const { return region_.size(); }
  const std::string& name() const { return allocator_.name(); }
  const HostRegion& region() const { return region_; }

  // A best-fit block of `bytes` bytes, or an AllocationFailure naming this arena.
  AllocResult<Block> allocate(uint64_t bytes);
  // A block at exactly `offset` (following a static memory plan), or nullopt when any byte of
  // the range is live or beyond the capacity, or the offset is not aligned.
  std::optional<Block> allocate_at(uint64_t offset, uint64_t bytes);
  // Releases a live block of this arena. FERRY_CHECKs that it is one (no double free, no block
  // of another arena).
  void free(const Block& block);
  void free(uint64_t offset) { allocator_.free(offset); }
  // Frees every block and zeroes the counters; the memory itself stays mapped and faulted.
  void reset() { allocator_.reset(); }

  // base() + offset, for offsets in [0, capacity()].
  Ptr pointer_at(uint64_t offset) const;
  // The host address of `ptr`, which must lie in [base(), base() + capacity()]. For the CPU
  // backend and for tests; a CUDA device arena will not offer it.
  std::byte* host_address(Ptr ptr) const;

  const OffsetAllocator& allocator() const { return allocator_; }
  AllocatorStats stats() const { return allocator_.stats(); }

 private:
  BasicArena(HostRegion region, OffsetAllocator allocator)
      : region_(std::move(region)), allocator_(std::move(allocator)) {}

  HostRegion region_;
  OffsetAllocator allocator_;
};

extern template class BasicArena<DevicePtr>;
extern template class BasicArena<std::byte*>;

using DeviceArena = BasicArena<DevicePtr>;
using HostPool = BasicArena<std::byte*>;

}  // namespace ferry
