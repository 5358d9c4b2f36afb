// The BasicArena instantiations: a HostRegion (common/host_region.h) carved up by an
// OffsetAllocator.
#include "runtime/device_arena.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

namespace ferry {

namespace {

template <typename Ptr>
Ptr to_ptr(std::byte* p) {
  if constexpr (std::is_same_v<Ptr, DevicePtr>) {
    return DevicePtr{static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p))};
  } else {
    return p;
  }
}

template <typename Ptr>
uintptr_t raw_address(Ptr p) {
  if constexpr (std::is_same_v<Ptr, DevicePtr>) {
    return static_cast<uintptr_t>(p.address);
  } else {
    return reinterpret_cast<uintptr_t>(p);
  }
}

}  // namespace

template <typename Ptr>
Result<BasicArena<Ptr>> BasicArena<Ptr>::create(uint64_t capacity, ArenaOptions options) {
  HostRegionOptions& region_options = options.region;
  if (region_options.name.empty()) region_options.name = std::is_same_v<Ptr, DevicePtr> ? "device" : "host";
  const uint64_t alignment = options.alignment;
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    return Status::InvalidArgument(
        fmt::format("alignment of '{}' must be a power of two, got {}", region_options.name, alignment));
  // Block offsets are multiples of `alignment`, so the base must be too for addresses to be.
  region_options.min_alignment = std::max(region_options.min_alignment, alignment);
  FERRY_ASSIGN_OR_RETURN(HostRegion region, HostRegion::map(capacity, region_options));
  OffsetAllocator allocator(capacity, alignment, region_options.name);
  return BasicArena(std::move(region), std::move(allocator));
}

template <typename Ptr>
Ptr BasicArena<Ptr>::base() const {
  return to_ptr<Ptr>(region_.data());
}

template <typename Ptr>
Ptr BasicArena<Ptr>::pointer_at(uint64_t offset) const {
  FERRY_CHECK(offset <= capacity(), "offset {} is outside arena '{}' of {} bytes", offset, name(),
              capacity());
  return to_ptr<Ptr>(region_.data() + offset);
}

template <typename Ptr>
std::byte* BasicArena<Ptr>::host_address(Ptr ptr) const {
  uintptr_t base = reinterpret_cast<uintptr_t>(region_.data());
  uintptr_t address = raw_address(ptr);
  FERRY_CHECK(region_.data() != nullptr && address >= base && address - base <= capacity(),
              "address {:#x} is outside arena '{}' [{:#x}, +{})", address, name(), base, capacity());
  return region_.data() + (address - base);
}

template <typename Ptr>
AllocResult<typename BasicArena<Ptr>::Block> BasicArena<Ptr>::allocate(uint64_t bytes) {
  AllocResult<uint64_t> offset = allocator_.allocate(bytes);
  if (!offset.ok()) return offset.failure();
  return Block{*offset, bytes, pointer_at(*offset)};
}

template <typename Ptr>
std::optional<typename BasicArena<Ptr>::Block> BasicArena<Ptr>::allocate_at(uint64_t offset, uint64_t bytes) {
  if (!allocator_.allocate_at(offset, bytes)) return std::nullopt;
  return Block{offset, bytes, pointer_at(offset)};
}

template <typename Ptr>
void BasicArena<Ptr>::free(const Block& block) {
  FERRY_CHECK(block.offset <= capacity() && block.ptr == pointer_at(block.offset),
              "free of a block at offset {} that does not belong to arena '{}'", block.offset, name());
  allocator_.free(block.offset);
}

template class BasicArena<DevicePtr>;
template class BasicArena<std::byte*>;

}  // namespace ferry
