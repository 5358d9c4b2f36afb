#include "memory/offset_allocator.h"

#include <algorithm>
#include <iterator>

#include "common/units.h"

namespace ferry {

namespace {

// "1.50 MiB (1572864 bytes)": readable and exact, so a user can compare with their own numbers.
std::string bytes_both(uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} bytes", bytes);
  return fmt::format("{} ({} bytes)", format_bytes(bytes), bytes);
}

}  // namespace

Status AllocationFailure::to_status() const {
  std::string msg = fmt::format(
      "out of memory in '{}': cannot allocate {}; capacity {}, in use {}, free {}, largest free block {}",
      arena, bytes_both(requested_bytes), bytes_both(capacity_bytes), bytes_both(in_use_bytes),
      bytes_both(free_bytes), bytes_both(largest_free_bytes));
  if (rounded_bytes != requested_bytes)
    msg += fmt::format(" (request rounded up to {})", bytes_both(rounded_bytes));
  if (rounded_bytes > capacity_bytes)
    msg += "; the request is larger than the whole capacity";
  else if (fragmented())
    msg += "; enough bytes are free, but fragmented into blocks smaller than the request";
  return Status::OutOfMemory(std::move(msg));
}

OffsetAllocator::OffsetAllocator(uint64_t capacity, uint64_t alignment, std::string name)
    : alignment_(alignment), name_(std::move(name)) {
  FERRY_CHECK(alignment != 0 && (alignment & (alignment - 1)) == 0,
              "alignment of allocator '{}' must be a power of two, got {}", name_, alignment);
  capacity_ = capacity & ~(alignment - 1);
  reset();
}

uint64_t OffsetAllocator::rounded_size(uint64_t bytes) const {
  if (bytes == 0) return 0;
  // Saturate instead of wrapping: a request near UINT64_MAX must fail, not become tiny.
  if (bytes > UINT64_MAX - (alignment_ - 1)) return UINT64_MAX;
  return align_up(bytes, alignment_);
}

void OffsetAllocator::insert_free(uint64_t offset, uint64_t bytes) {
  free_by_size_.emplace(bytes, offset);
  free_by_offset_.emplace(offset, bytes);
}

void OffsetAllocator::erase_free(std::map<uint64_t, uint64_t>::iterator it) {
  free_by_size_.erase({it->second, it->first});
  free_by_offset_.erase(it);
}

void OffsetAllocator::mark_live(uint64_t offset, uint64_t bytes, uint64_t requested) {
  live_.emplace(offset, LiveBlock{bytes, requested});
  in_use_bytes_ += bytes;
  requested_bytes_ += requested;
  peak_in_use_bytes_ = std::max(peak_in_use_bytes_, in_use_bytes_);
  peak_high_water_bytes_ = std::max(peak_high_water_bytes_, offset + bytes);
  ++num_allocations_;
}

void OffsetAllocator::mark_empty_live(uint64_t offset) {
  ++empty_live_[offset];
  ++num_empty_live_;
  ++num_allocations_;
}

AllocResult<uint64_t> OffsetAllocator::allocate(uint64_t bytes) {
  if (bytes == 0) {
    mark_empty_live(capacity_);
    return capacity_;
  }
  uint64_t size = rounded_size(bytes);
  // Smallest free block of at least `size` bytes; among equals, the lowest offset.
  auto fit = free_by_size_.lower_bound({size, 0});
  if (fit == free_by_size_.end()) {
    ++num_failed_allocations_;
    return make_failure(bytes, size);
  }
  auto [block_size, offset] = *fit;
  free_by_size_.erase(fit);
  auto by_offset = free_by_offset_.find(offset);
  if (block_size == size) {
    free_by_offset_.erase(by_offset);
  } else {
    // The remainder keeps its neighbour relations: its right neighbour was live (free blocks
    // never touch), and its left neighbour is the block being allocated now.
    auto hint = free_by_offset_.erase(by_offset);
    free_by_offset_.emplace_hint(hint, offset + size, block_size - size);
    free_by_size_.emplace(block_size - size, offset + size);
  }
  mark_live(offset, size, bytes);
  return offset;
}

bool OffsetAllocator::allocate_at(uint64_t offset, uint64_t bytes) {
  if (bytes == 0) {
    if (offset > capacity_ || live_.contains(offset)) return false;
    mark_empty_live(offset);
    return true;
  }
  uint64_t size = rounded_size(bytes);
  if (offset % alignment_ != 0 || offset > capacity_ || size > capacity_ - offset) return false;
  if (empty_live_.contains(offset)) return false;  // free(offset) could not tell the two apart
  // The free block that would contain `offset`: the last one starting at or before it.
  auto it = free_by_offset_.upper_bound(offset);
  if (it == free_by_offset_.begin()) return false;
  --it;
  uint64_t free_offset = it->first, free_size = it->second;
  if (offset + size > free_offset + free_size) return false;  // some byte is live
  erase_free(it);
  if (offset > free_offset) insert_free(free_offset, offset - free_offset);
  if (offset + size < free_offset + free_size)
    insert_free(offset + size, free_offset + free_size - offset - size);
  mark_live(offset, size, bytes);
  return true;
}

void OffsetAllocator::free(uint64_t offset) {
  auto live = live_.find(offset);
  if (live == live_.end()) {
    if (auto empty = empty_live_.find(offset); empty != empty_live_.end()) {
      if (--empty->second == 0) empty_live_.erase(empty);
      --num_empty_live_;
      ++num_frees_;
      return;
    }
  }
  FERRY_CHECK(live != live_.end(),
              "free of offset {} in allocator '{}', which is not a live block (double free, or an "
              "offset this allocator did not return)",
              offset, name_);
  uint64_t start = offset, size = live->second.bytes;
  in_use_bytes_ -= size;
  requested_bytes_ -= live->second.requested_bytes;
  live_.erase(live);
  ++num_frees_;

  // Merge with the right neighbour, then the left one, so the free block stays maximal.
  auto next = free_by_offset_.lower_bound(offset);
  auto prev = next == free_by_offset_.begin() ? free_by_offset_.end() : std::prev(next);
  if (next != free_by_offset_.end() && next->first == offset + size) {
    size += next->second;
    erase_free(next);
  }
  if (prev != free_by_offset_.end() && prev->first + prev->second == offset) {
    start = prev->first;
    size += prev->second;
    erase_free(prev);
  }
  insert_free(start, size);
}

void OffsetAllocator::reset() {
  free_by_size_.clear();
  free_by_offset_.clear();
  live_.clear();
  empty_live_.clear();
  num_empty_live_ = 0;
  if (capacity_ > 0) insert_free(0, capacity_);
  in_use_bytes_ = requested_bytes_ = 0;
  peak_in_use_bytes_ = peak_high_water_bytes_ = 0;
  num_allocations_ = num_frees_ = num_failed_allocations_ = 0;
}

void OffsetAllocator::reset_peaks() {
  peak_in_use_bytes_ = in_use_bytes_;
  peak_high_water_bytes_ = high_water_bytes();
}

std::optional<uint64_t> OffsetAllocator::block_bytes(uint64_t offset) const {
  auto it = live_.find(offset);
  if (it == live_.end()) return std::nullopt;
  return it->second.bytes;
}

uint64_t OffsetAllocator::high_water_bytes() const {
  if (live_.empty()) return 0;
  // Free blocks are maximal, so if the top of the range is free, that one free block spans
  // from the end of the highest live block to the capacity.
  if (!free_by_offset_.empty()) {
    auto last = std::prev(free_by_offset_.end());
    if (last->first + last->second == capacity_) return last->first;
  }
  return capacity_;
}

AllocationFailure OffsetAllocator::make_failure(uint64_t requested, uint64_t rounded) const {
  AllocationFailure f;
  f.arena = name_;
  f.requested_bytes = requested;
  f.rounded_bytes = rounded;
  f.capacity_bytes = capacity_;
  f.in_use_bytes = in_use_bytes_;
  f.free_bytes = capacity_ - in_use_bytes_;
  f.largest_free_bytes = free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
  return f;
}

AllocatorStats OffsetAllocator::stats() const {
  AllocatorStats s;
  s.capacity_bytes = capacity_;
  s.in_use_bytes = in_use_bytes_;
  s.peak_in_use_bytes = peak_in_use_bytes_;
  s.requested_bytes = requested_bytes_;
  s.high_water_bytes = high_water_bytes();
  s.peak_high_water_bytes = peak_high_water_bytes_;
  s.free_bytes = capacity_ - in_use_bytes_;
  s.largest_free_bytes = free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
  s.num_live_blocks = live_.size();
  s.num_empty_blocks = num_empty_live_;
  s.num_free_blocks = free_by_offset_.size();
  s.num_allocations = num_allocations_;
  s.num_frees = num_frees_;
  s.num_failed_allocations = num_failed_allocations_;
  s.fragmentation = s.free_bytes == 0
                        ? 0.0
                        : 1.0 - static_cast<double>(s.largest_free_bytes) / static_cast<double>(s.free_bytes);
  return s;
}

std::vector<AllocatorBlock> OffsetAllocator::live_blocks() const {
  std::vector<AllocatorBlock> blocks;
  blocks.reserve(live_.size());
  for (const auto& [offset, b] : live_) blocks.push_back({offset, b.bytes, b.requested_bytes});
  std::sort(blocks.begin(), blocks.end(),
            [](const AllocatorBlock& a, const AllocatorBlock& b) { return a.offset < b.offset; });
  return blocks;
}

std::vector<AllocatorBlock> OffsetAllocator::free_blocks() const {
  std::vector<AllocatorBlock> blocks;
  blocks.reserve(free_by_offset_.size());
  for (const auto& [offset, bytes] : free_by_offset_) blocks.push_back({offset, bytes, 0});
  return blocks;
}

Status OffsetAllocator::validate() const {
  auto fail = [&](std::string what) {
    return Status::Internal(fmt::format("allocator '{}' is inconsistent: {}", name_, what));
  };
  if (free_by_size_.size() != free_by_offset_.size())
    return fail(
        fmt::format("{} free blocks by size but {} by offset", free_by_size_.size(), free_by_offset_.size()));
  uint64_t free_sum = 0;
  for (const auto& [offset, bytes] : free_by_offset_) {
    if (!free_by_size_.contains({bytes, offset}))
      return fail(fmt::format("free block [{}, +{}) missing from the size index", offset, bytes));
    free_sum += bytes;
  }
  uint64_t live_sum = 0, requested_sum = 0;
  for (const auto& [offset, b] : live_) {
    if (free_by_offset_.contains(offset)) return fail(fmt::format("offset {} is both live and free", offset));
    live_sum += b.bytes;
    requested_sum += b.requested_bytes;
  }
  if (live_sum != in_use_bytes_)
    return fail(fmt::format("live blocks sum to {} bytes but in_use_bytes is {}", live_sum, in_use_bytes_));
  if (requested_sum != requested_bytes_)
    return fail(fmt::format("live requests sum to {} bytes but requested_bytes is {}", requested_sum,
                            requested_bytes_));
  if (live_sum + free_sum != capacity_)
    return fail(fmt::format("live {} + free {} bytes != capacity {}", live_sum, free_sum, capacity_));
  uint64_t empty_sum = 0;
  for (const auto& [offset, count] : empty_live_) {
    if (count == 0) return fail(fmt::format("an empty-block count of 0 is kept at offset {}", offset));
    if (live_.contains(offset)) return fail(fmt::format("offset {} holds both an empty block and a live one", offset));
    if (offset > capacity_) return fail(fmt::format("empty block at {} past the capacity {}", offset, capacity_));
    empty_sum += count;
  }
  if (empty_sum != num_empty_live_)
    return fail(fmt::format("empty blocks count {} but num_empty_live is {}", empty_sum, num_empty_live_));
  if (num_allocations_ - num_frees_ != live_.size() + num_empty_live_)
    return fail(fmt::format("{} allocations - {} frees != {} live blocks + {} empty ones", num_allocations_,
                            num_frees_, live_.size(), num_empty_live_));
  return Status::Ok();
}

}  // namespace ferry
