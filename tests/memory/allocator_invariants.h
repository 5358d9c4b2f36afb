// Invariants every OffsetAllocator satisfies after any sequence of operations. Shared by the
// allocator and arena tests, and meant for every test that drives an allocator (simulator,
// executor): check after each step and a bug shows up at the step that caused it.
//
//   AllocatorInvariantChecker checker(alloc);
//   LiveSet live;                         // your own record: offset -> bytes requested
//   auto r = alloc.allocate(n); if (r.ok()) live[*r] = n;
//   ASSERT_TRUE(checker.check(&live));    // after every operation
//   alloc.reset_peaks(); checker.on_reset_peaks();   // tell it about resets
//
// check() verifies, and reports the first violation with its numbers:
// - the allocator's own indices agree (OffsetAllocator::validate);
// - live blocks: aligned, non-empty, sizes a multiple of the alignment, inside the capacity,
//   no two overlap;
// - free blocks: aligned, non-empty, inside the capacity, fully coalesced (no two touch);
// - live and free blocks together tile [0, capacity) exactly: no byte leaked or double-counted;
// - stats agree with the blocks: in use, requested, free, largest free, block counts, high water
//   (end of the highest live block), fragmentation = 1 - largest_free / free;
// - given the caller's record: the same set of offsets, each reserving exactly the requested size
//   rounded up to the alignment (computed here, independently of the allocator), and in-use
//   bytes equal to the sum of those;
// - across calls: peaks never decrease and equal the maximum of the values seen since the last
//   reset (>= when the checker is told it does not see every state), counters never decrease.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "memory/offset_allocator.h"

namespace ferry::test {

// The caller's own record of live allocations: offset -> bytes requested.
using LiveSet = std::map<uint64_t, uint64_t>;

// Bytes an allocation of `requested` must reserve: rounded up to the alignment (0 for 0).
inline uint64_t expected_reserved_bytes(uint64_t requested, uint64_t alignment) {
  return (requested + alignment - 1) / alignment * alignment;
}

// Every invariant that depends only on the current state (see the top of this file).
inline ::testing::AssertionResult allocator_state_is_valid(const OffsetAllocator& a,
                                                           const LiveSet* expected_live = nullptr) {
  auto fail = [&](const std::string& what) {
    return ::testing::AssertionFailure() << "allocator '" << a.name() << "': " << what;
  };
  if (Status st = a.validate(); !st.ok()) return fail(st.message());

  const uint64_t cap = a.capacity(), align = a.alignment();
  const std::vector<AllocatorBlock> live = a.live_blocks();
  const std::vector<AllocatorBlock> free = a.free_blocks();
  const AllocatorStats s = a.stats();

  uint64_t live_sum = 0, requested_sum = 0, high_water = 0;
  for (size_t i = 0; i < live.size(); ++i) {
    const AllocatorBlock& b = live[i];
    if (b.offset % align != 0)
      return fail(fmt::format("live block at {} is not {}-aligned", b.offset, align));
    if (b.bytes == 0 || b.bytes % align != 0)
      return fail(fmt::format("live block at {} has size {}, not a positive multiple of {}", b.offset,
                              b.bytes, align));
    if (b.offset > cap || b.bytes > cap - b.offset)
      return fail(fmt::format("live block [{}, +{}) exceeds capacity {}", b.offset, b.bytes, cap));
    if (i > 0 && live[i - 1].offset + live[i - 1].bytes > b.offset)
      return fail(fmt::format("live blocks [{}, +{}) and [{}, +{}) overlap", live[i - 1].offset,
                              live[i - 1].bytes, b.offset, b.bytes));
    live_sum += b.bytes;
    requested_sum += b.requested_bytes;
    high_water = std::max(high_water, b.offset + b.bytes);
  }

  uint64_t free_sum = 0, largest_free = 0;
  for (size_t i = 0; i < free.size(); ++i) {
    const AllocatorBlock& b = free[i];
    if (b.offset % align != 0)
      return fail(fmt::format("free block at {} is not {}-aligned", b.offset, align));
    if (b.bytes == 0) return fail(fmt::format("empty free block at {}", b.offset));
    if (b.offset > cap || b.bytes > cap - b.offset)
      return fail(fmt::format("free block [{}, +{}) exceeds capacity {}", b.offset, b.bytes, cap));
    if (i > 0 && free[i - 1].offset + free[i - 1].bytes >= b.offset)
      return fail(fmt::format("free blocks [{}, +{}) and [{}, +{}) touch or overlap: not coalesced",
                              free[i - 1].offset, free[i - 1].bytes, b.offset, b.bytes));
    free_sum += b.bytes;
    largest_free = std::max(largest_free, b.bytes);
  }

  // Live and free blocks, merged by offset, must cover [0, cap) without gap or overlap.
  std::vector<AllocatorBlock> all = live;
  all.insert(all.end(), free.begin(), free.end());
  std::sort(all.begin(), all.end(),
            [](const AllocatorBlock& x, const AllocatorBlock& y) { return x.offset < y.offset; });
  uint64_t cursor = 0;
  for (const AllocatorBlock& b : all) {
    if (b.offset != cursor)
      return fail(fmt::format("blocks do not tile the range: expected a block at {}, found one at {}", cursor,
                              b.offset));
    cursor += b.bytes;
  }
  if (cursor != cap) return fail(fmt::format("blocks end at {}, capacity is {}", cursor, cap));

  if (s.capacity_bytes != cap)
    return fail(fmt::format("stats capacity {} != capacity() {}", s.capacity_bytes, cap));
  if (s.in_use_bytes != live_sum)
    return fail(fmt::format("stats in use {} != sum of live blocks {}", s.in_use_bytes, live_sum));
  if (a.in_use_bytes() != live_sum)
    return fail(fmt::format("in_use_bytes() {} != sum of live blocks {}", a.in_use_bytes(), live_sum));
  if (s.requested_bytes != requested_sum)
    return fail(
        fmt::format("stats requested {} != sum of live requests {}", s.requested_bytes, requested_sum));
  if (s.free_bytes != free_sum)
    return fail(fmt::format("stats free {} != sum of free blocks {}", s.free_bytes, free_sum));
  if (s.largest_free_bytes != largest_free)
    return fail(
        fmt::format("stats largest free {} != largest free block {}", s.largest_free_bytes, largest_free));
  if (s.num_live_blocks != live.size() || s.num_free_blocks != free.size())
    return fail(fmt::format("stats count {} live / {} free blocks, found {} / {}", s.num_live_blocks,
                            s.num_free_blocks, live.size(), free.size()));
  if (s.high_water_bytes != high_water)
    return fail(
        fmt::format("stats high water {} != end of highest live block {}", s.high_water_bytes, high_water));
  if (s.peak_in_use_bytes < s.in_use_bytes || s.peak_high_water_bytes < s.high_water_bytes)
    return fail(fmt::format("a peak is below its current value: in use {} peak {}, high water {} peak {}",
                            s.in_use_bytes, s.peak_in_use_bytes, s.high_water_bytes,
                            s.peak_high_water_bytes));
  double fragmentation =
      free_sum == 0 ? 0.0 : 1.0 - static_cast<double>(largest_free) / static_cast<double>(free_sum);
  if (std::abs(s.fragmentation - fragmentation) > 1e-12)
    return fail(fmt::format("stats fragmentation {} != 1 - {}/{} = {}", s.fragmentation, largest_free,
                            free_sum, fragmentation));
  if (s.num_allocations - s.num_frees != live.size() + s.num_empty_blocks)
    return fail(fmt::format("{} allocations - {} frees != {} live blocks + {} empty ones", s.num_allocations,
                            s.num_frees, live.size(), s.num_empty_blocks));

  if (expected_live != nullptr) {
    if (expected_live->size() != live.size())
      return fail(fmt::format("{} live blocks, the caller holds {}", live.size(), expected_live->size()));
    uint64_t expected_in_use = 0;
    size_t i = 0;
    for (const auto& [offset, requested] : *expected_live) {
      const AllocatorBlock& b = live[i++];
      uint64_t reserved = expected_reserved_bytes(requested, align);
      if (b.offset != offset)
        return fail(
            fmt::format("the caller holds a block at {}, the allocator has one at {}", offset, b.offset));
      if (b.bytes != reserved || b.requested_bytes != requested)
        return fail(fmt::format("block at {}: reserved {} for {} requested, expected {} for {}", offset,
                                b.bytes, b.requested_bytes, reserved, requested));
      expected_in_use += reserved;
    }
    if (s.in_use_bytes != expected_in_use)
      return fail(
          fmt::format("in use {} != {} reserved by the caller's blocks", s.in_use_bytes, expected_in_use));
  }
  return ::testing::AssertionSuccess();
}

// allocator_state_is_valid plus the history: peaks and counters across calls.
class AllocatorInvariantChecker {
 public:
  // Create it on a new or just-reset allocator. `sees_every_state`: check() is called after
  // every operation, so peaks must equal the maxima observed exactly; otherwise only >=.
  explicit AllocatorInvariantChecker(const OffsetAllocator& allocator, bool sees_every_state = true)
      : allocator_(allocator), sees_every_state_(sees_every_state) {
    on_reset();
  }

  ::testing::AssertionResult check(const LiveSet* expected_live = nullptr) {
    ::testing::AssertionResult state = allocator_state_is_valid(allocator_, expected_live);
    if (!state) return state;
    const AllocatorStats s = allocator_.stats();
    auto fail = [&](const std::string& what) {
      return ::testing::AssertionFailure() << "allocator '" << allocator_.name() << "': " << what;
    };
    max_in_use_ = std::max(max_in_use_, s.in_use_bytes);
    max_high_water_ = std::max(max_high_water_, s.high_water_bytes);
    if (s.peak_in_use_bytes < last_.peak_in_use_bytes ||
        s.peak_high_water_bytes < last_.peak_high_water_bytes)
      return fail(fmt::format("a peak decreased: in use {} -> {}, high water {} -> {}",
                              last_.peak_in_use_bytes, s.peak_in_use_bytes, last_.peak_high_water_bytes,
                              s.peak_high_water_bytes));
    if (s.num_allocations < last_.num_allocations || s.num_frees < last_.num_frees ||
        s.num_failed_allocations < last_.num_failed_allocations)
      return fail("a counter decreased without a reset");
    bool peaks_ok = sees_every_state_
                        ? s.peak_in_use_bytes == max_in_use_ && s.peak_high_water_bytes == max_high_water_
                        : s.peak_in_use_bytes >= max_in_use_ && s.peak_high_water_bytes >= max_high_water_;
    if (!peaks_ok)
      return fail(fmt::format("peaks (in use {}, high water {}) disagree with the maxima observed ({}, {})",
                              s.peak_in_use_bytes, s.peak_high_water_bytes, max_in_use_, max_high_water_));
    last_ = s;
    return ::testing::AssertionSuccess();
  }

  // Call after OffsetAllocator::reset(): every counter restarts.
  void on_reset() {
    last_ = AllocatorStats{};
    max_in_use_ = max_high_water_ = 0;
    on_reset_peaks();
  }
  // Call after OffsetAllocator::reset_peaks(): the peak windows restart at the current values.
  void on_reset_peaks() {
    const AllocatorStats s = allocator_.stats();
    max_in_use_ = s.in_use_bytes;
    max_high_water_ = s.high_water_bytes;
    last_.peak_in_use_bytes = s.peak_in_use_bytes;
    last_.peak_high_water_bytes = s.peak_high_water_bytes;
  }

 private:
  const OffsetAllocator& allocator_;
  bool sees_every_state_;
  AllocatorStats last_;
  uint64_t max_in_use_ = 0;
  uint64_t max_high_water_ = 0;
};

}  // namespace ferry::test
