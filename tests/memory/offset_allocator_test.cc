#include "memory/offset_allocator.h"

#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "common/units.h"
#include "memory/allocator_invariants.h"

namespace ferry {
namespace {

using test::AllocatorInvariantChecker;
using test::LiveSet;

constexpr uint64_t kU = 64;  // one alignment unit of the default allocator

std::vector<AllocatorBlock> blocks(std::initializer_list<std::pair<uint64_t, uint64_t>> list) {
  std::vector<AllocatorBlock> out;
  for (auto [offset, bytes] : list) out.push_back({offset, bytes, 0});
  return out;
}

// Allocates `bytes`, asserting success, and returns the offset.
uint64_t must_allocate(OffsetAllocator& a, uint64_t bytes) {
  AllocResult<uint64_t> r = a.allocate(bytes);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : UINT64_MAX;
}

TEST(OffsetAllocatorTest, AllocationsPackUpwardAndRoundToAlignment) {
  OffsetAllocator a(64 * kU);
  EXPECT_EQ(must_allocate(a, 100), 0u);   // reserves 128
  EXPECT_EQ(must_allocate(a, 64), 128u);  // reserves 64
  EXPECT_EQ(must_allocate(a, 1), 192u);   // reserves 64
  EXPECT_EQ(a.block_bytes(0), 128u);
  EXPECT_EQ(a.block_bytes(128), 64u);
  EXPECT_EQ(a.block_bytes(192), 64u);
  EXPECT_EQ(a.block_bytes(64), std::nullopt);  // inside a block, not the start of one
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.in_use_bytes, 256u);
  EXPECT_EQ(s.requested_bytes, 165u);
  EXPECT_EQ(s.high_water_bytes, 256u);
  EXPECT_EQ(s.num_allocations, 3u);
  EXPECT_EQ(a.free_blocks(), blocks({{256, 64 * kU - 256}}));
  EXPECT_TRUE(test::allocator_state_is_valid(a));
}

TEST(OffsetAllocatorTest, ZeroBytesReserveNothing) {
  OffsetAllocator a(4 * kU);
  EXPECT_EQ(must_allocate(a, 0), 4 * kU);  // the end of the range, where no real block starts
  EXPECT_EQ(must_allocate(a, 0), 4 * kU);
  EXPECT_EQ(a.rounded_size(0), 0u);
  EXPECT_EQ(must_allocate(a, 4 * kU), 0u);  // the whole range is still free
  EXPECT_EQ(a.stats().num_empty_blocks, 2u);
  EXPECT_EQ(a.stats().num_live_blocks, 1u);
  EXPECT_TRUE(test::allocator_state_is_valid(a));
  EXPECT_FALSE(a.allocate_at(0, 0)) << "a real block starts there: free(0) would be ambiguous";
  ASSERT_TRUE(a.allocate_at(2 * kU, 0)) << "inside a live block is fine: it holds no byte";
  a.free(2 * kU);
  a.free(4 * kU);
  a.free(4 * kU);
  a.free(0);
  EXPECT_EQ(a.stats().in_use_bytes, 0u);
  EXPECT_EQ(a.stats().num_empty_blocks, 0u);
  ASSERT_TRUE(a.allocate_at(kU, 0));
  EXPECT_FALSE(a.allocate_at(kU, kU)) << "a real block may not start where an empty one lives";
  EXPECT_FALSE(a.allocate_at(5 * kU, 0)) << "past the capacity";
  a.free(kU);
  EXPECT_TRUE(test::allocator_state_is_valid(a));
  OffsetAllocator empty(0);
  EXPECT_EQ(must_allocate(empty, 0), 0u);
  empty.free(0);
  EXPECT_TRUE(test::allocator_state_is_valid(empty));
}

TEST(OffsetAllocatorTest, CapacityRoundsDownToAlignment) {
  OffsetAllocator a(1000, 64);
  EXPECT_EQ(a.capacity(), 960u);
  EXPECT_EQ(must_allocate(a, 960), 0u);
  EXPECT_FALSE(a.allocate(1).ok());
  OffsetAllocator tiny(63, 64);
  EXPECT_EQ(tiny.capacity(), 0u);
  EXPECT_FALSE(tiny.allocate(1).ok());
  EXPECT_TRUE(test::allocator_state_is_valid(tiny));

  OffsetAllocator coarse(10000, 4096, "coarse");
  EXPECT_EQ(coarse.capacity(), 8192u);
  EXPECT_EQ(coarse.rounded_size(1), 4096u);
  EXPECT_EQ(must_allocate(coarse, 1), 0u);
  EXPECT_EQ(must_allocate(coarse, 4096), 4096u);
}

TEST(OffsetAllocatorTest, FreeMergesWithBothNeighbours) {
  OffsetAllocator a(4 * kU);
  for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(must_allocate(a, kU), i * kU);
  EXPECT_TRUE(a.free_blocks().empty());
  a.free(0);
  a.free(2 * kU);
  EXPECT_EQ(a.free_blocks(), blocks({{0, kU}, {2 * kU, kU}}));
  a.free(kU);  // merges left and right into one block
  EXPECT_EQ(a.free_blocks(), blocks({{0, 3 * kU}}));
  a.free(3 * kU);  // merges left only
  EXPECT_EQ(a.free_blocks(), blocks({{0, 4 * kU}}));

  for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(must_allocate(a, kU), i * kU);
  a.free(3 * kU);
  a.free(2 * kU);  // merges right only
  EXPECT_EQ(a.free_blocks(), blocks({{2 * kU, 2 * kU}}));
  EXPECT_TRUE(test::allocator_state_is_valid(a));
}

// Free blocks of 8, 4 and 6 units, separated by live one-unit blocks.
class BestFitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    //  [0,8) A  [8,9) s  [9,13) B  [13,14) s  [14,20) C  [20,21) s  [21,32) D
    for (uint64_t units : {8, 1, 4, 1, 6, 1, 11}) must_allocate(a_, units * kU);
    ASSERT_EQ(a_.stats().free_bytes, 0u);
    a_.free(0);
    a_.free(9 * kU);
    a_.free(14 * kU);
    ASSERT_EQ(a_.free_blocks(), blocks({{0, 8 * kU}, {9 * kU, 4 * kU}, {14 * kU, 6 * kU}}));
  }
  OffsetAllocator a_{32 * kU};
};

TEST_F(BestFitTest, ChoosesSmallestFreeBlockThatFits) {
  EXPECT_EQ(must_allocate(a_, 5 * kU), 14 * kU);  // C (6), not the first fit A (8)
  EXPECT_EQ(must_allocate(a_, 4 * kU), 9 * kU);   // B exactly
  EXPECT_EQ(must_allocate(a_, 1), 19 * kU);       // C's one-unit remainder beats A
  EXPECT_EQ(must_allocate(a_, 8 * kU), 0u);       // A, the only one left
  EXPECT_TRUE(test::allocator_state_is_valid(a_));
}

TEST_F(BestFitTest, FailsWhenNoSingleBlockFits) {
  AllocResult<uint64_t> r = a_.allocate(9 * kU);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.failure().largest_free_bytes, 8 * kU);
  EXPECT_EQ(r.failure().free_bytes, 18 * kU);
  EXPECT_TRUE(r.failure().fragmented());  // 18 units are free, just not in one piece
  EXPECT_NE(r.status().message().find("fragmented"), std::string::npos) << r.status().message();
  EXPECT_EQ(a_.stats().num_failed_allocations, 1u);
}

TEST(OffsetAllocatorTest, BestFitTiesGoToLowestOffset) {
  OffsetAllocator a(9 * kU);
  for (uint64_t units : {2, 1, 2, 1, 2, 1}) must_allocate(a, units * kU);
  // Free in an order unlike address order, so insertion order cannot explain the choice.
  a.free(6 * kU);
  a.free(0);
  a.free(3 * kU);
  EXPECT_EQ(must_allocate(a, 2 * kU), 0u);
  EXPECT_EQ(must_allocate(a, 2 * kU), 3 * kU);
  EXPECT_EQ(must_allocate(a, 2 * kU), 6 * kU);
}

TEST(OffsetAllocatorTest, AllocateAtPlacesAtExactOffsetAndRejectsConflicts) {
  OffsetAllocator a(16 * kU);
  AllocatorInvariantChecker checker(a);
  LiveSet live;
  ASSERT_TRUE(a.allocate_at(5 * kU, 3 * kU));
  live[5 * kU] = 3 * kU;
  EXPECT_EQ(a.free_blocks(), blocks({{0, 5 * kU}, {8 * kU, 8 * kU}}));
  ASSERT_TRUE(checker.check(&live));

  EXPECT_FALSE(a.allocate_at(4 * kU, 2 * kU));              // overlaps the start of the live block
  EXPECT_FALSE(a.allocate_at(7 * kU, 1));                   // inside it
  EXPECT_FALSE(a.allocate_at(3 * kU, 10 * kU));             // covers it
  EXPECT_FALSE(a.allocate_at(0, 5 * kU + 1));               // rounds up into it
  EXPECT_FALSE(a.allocate_at(kU + 1, 1));                   // not aligned
  EXPECT_FALSE(a.allocate_at(15 * kU, 2 * kU));             // runs past the capacity
  EXPECT_FALSE(a.allocate_at(16 * kU, 1));                  // starts at the capacity
  EXPECT_FALSE(a.allocate_at(UINT64_MAX & ~(kU - 1), kU));  // offset far beyond
  EXPECT_FALSE(a.allocate_at(0, UINT64_MAX));               // size that would wrap around
  ASSERT_TRUE(checker.check(&live));                        // failures change nothing
  EXPECT_EQ(a.stats().num_allocations, 1u);

  ASSERT_TRUE(a.allocate_at(8 * kU, 8 * kU));  // adjacent to the live block, to the end
  live[8 * kU] = 8 * kU;
  ASSERT_TRUE(checker.check(&live));
  EXPECT_EQ(must_allocate(a, 5 * kU), 0u);  // best fit still works around placed blocks
  live[0] = 5 * kU;
  ASSERT_TRUE(checker.check(&live));
  for (uint64_t offset : {5 * kU, 0ul, 8 * kU}) {
    a.free(offset);
    live.erase(offset);
    ASSERT_TRUE(checker.check(&live));
  }
  EXPECT_EQ(a.free_blocks(), blocks({{0, 16 * kU}}));
}

TEST(OffsetAllocatorTest, OutOfMemoryReportsTheNumbers) {
  const uint64_t capacity = 1 << 20;
  OffsetAllocator a(capacity, 64, "device");
  must_allocate(a, 768 << 10);
  AllocResult<uint64_t> r = a.allocate(512 << 10);
  ASSERT_FALSE(r.ok());
  const AllocationFailure& f = r.failure();
  EXPECT_EQ(f.arena, "device");
  EXPECT_EQ(f.requested_bytes, 512u << 10);
  EXPECT_EQ(f.rounded_bytes, 512u << 10);
  EXPECT_EQ(f.capacity_bytes, capacity);
  EXPECT_EQ(f.in_use_bytes, 768u << 10);
  EXPECT_EQ(f.free_bytes, 256u << 10);
  EXPECT_EQ(f.largest_free_bytes, 256u << 10);
  EXPECT_FALSE(f.fragmented());

  Status st = r.status();
  EXPECT_EQ(st.code(), StatusCode::kOutOfMemory);
  const std::string& msg = st.message();
  for (uint64_t n : {512ull << 10, 1ull << 20, 768ull << 10, 256ull << 10}) {
    EXPECT_NE(msg.find(std::to_string(n)), std::string::npos) << n << " missing from: " << msg;
    EXPECT_NE(msg.find(format_bytes(n)), std::string::npos) << format_bytes(n) << " missing from: " << msg;
  }
  EXPECT_NE(msg.find("'device'"), std::string::npos) << msg;
  EXPECT_EQ(a.stats().in_use_bytes, 768u << 10);  // the failure changed nothing
}

TEST(OffsetAllocatorTest, RequestLargerThanCapacityFailsWithoutOverflow) {
  OffsetAllocator a(4 * kU);
  for (uint64_t bytes : {4 * kU + 1, UINT64_MAX - 1, UINT64_MAX}) {
    AllocResult<uint64_t> r = a.allocate(bytes);
    ASSERT_FALSE(r.ok()) << bytes;
    EXPECT_GE(r.failure().rounded_bytes, bytes);
    EXPECT_NE(r.status().message().find("larger than the whole capacity"), std::string::npos)
        << r.status().message();
  }
  EXPECT_EQ(a.stats().num_failed_allocations, 3u);
  EXPECT_TRUE(test::allocator_state_is_valid(a));
}

TEST(OffsetAllocatorTest, FragmentationStatisticOnCraftedLayout) {
  OffsetAllocator a(6 * kU);
  for (int i = 0; i < 6; ++i) must_allocate(a, kU);
  EXPECT_EQ(a.stats().fragmentation, 0.0);  // nothing free
  a.free(0);
  a.free(2 * kU);
  a.free(4 * kU);
  // Three free units, the largest one unit: 1 - 1/3.
  EXPECT_DOUBLE_EQ(a.stats().fragmentation, 2.0 / 3.0);
  EXPECT_EQ(a.stats().largest_free_bytes, kU);
  a.free(kU);
  // Free: [0,3) and [4,5): 1 - 3/4.
  EXPECT_DOUBLE_EQ(a.stats().fragmentation, 0.25);
  a.free(3 * kU);
  a.free(5 * kU);
  EXPECT_EQ(a.stats().fragmentation, 0.0);  // one free block
}

TEST(OffsetAllocatorTest, HighWaterTracksEndOfHighestLiveBlock) {
  OffsetAllocator a(8 * kU);
  must_allocate(a, kU);      // [0,1)
  must_allocate(a, 2 * kU);  // [1,3)
  must_allocate(a, kU);      // [3,4)
  EXPECT_EQ(a.stats().high_water_bytes, 4 * kU);
  a.free(3 * kU);
  EXPECT_EQ(a.stats().high_water_bytes, 3 * kU);
  a.free(0);
  EXPECT_EQ(a.stats().high_water_bytes, 3 * kU);  // a hole below does not lower it
  a.free(kU);
  EXPECT_EQ(a.stats().high_water_bytes, 0u);
  EXPECT_EQ(a.stats().peak_high_water_bytes, 4 * kU);
  EXPECT_EQ(a.stats().peak_in_use_bytes, 4 * kU);

  a.reset_peaks();
  EXPECT_EQ(a.stats().peak_high_water_bytes, 0u);
  EXPECT_EQ(a.stats().peak_in_use_bytes, 0u);
  ASSERT_TRUE(a.allocate_at(6 * kU, 2 * kU));  // a placed block counts too, up to the capacity
  EXPECT_EQ(a.stats().high_water_bytes, 8 * kU);
  EXPECT_EQ(a.stats().peak_high_water_bytes, 8 * kU);
  EXPECT_EQ(a.stats().peak_in_use_bytes, 2 * kU);
}

TEST(OffsetAllocatorTest, ResetFreesEverythingAndZeroesCounters) {
  OffsetAllocator a(8 * kU);
  must_allocate(a, 3 * kU);
  must_allocate(a, kU);
  a.free(0);
  EXPECT_FALSE(a.allocate(8 * kU).ok());
  a.reset();
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(s.peak_in_use_bytes, 0u);
  EXPECT_EQ(s.peak_high_water_bytes, 0u);
  EXPECT_EQ(s.num_allocations, 0u);
  EXPECT_EQ(s.num_frees, 0u);
  EXPECT_EQ(s.num_failed_allocations, 0u);
  EXPECT_EQ(a.free_blocks(), blocks({{0, 8 * kU}}));
  EXPECT_EQ(must_allocate(a, 8 * kU), 0u);
}

TEST(OffsetAllocatorTest, AllocResultConvertsToResult) {
  OffsetAllocator a(2 * kU, 64, "pool");
  Result<uint64_t> ok = a.allocate(kU);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 0u);
  Result<uint64_t> bad = a.allocate(2 * kU);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(bad.status().message().find("'pool'"), std::string::npos);

  auto place = [&](uint64_t bytes, uint64_t* out) -> Status {
    FERRY_ASSIGN_OR_RETURN(*out, a.allocate(bytes));
    return Status::Ok();
  };
  uint64_t offset = 0;
  EXPECT_TRUE(place(kU, &offset).ok());
  EXPECT_EQ(offset, kU);
  EXPECT_EQ(place(kU, &offset).code(), StatusCode::kOutOfMemory);
}

TEST(OffsetAllocatorDeathTest, DoubleFreeAborts) {
  OffsetAllocator a(4 * kU, 64, "device");
  uint64_t offset = must_allocate(a, kU);
  a.free(offset);
  EXPECT_DEATH(a.free(offset), "not a live block");
}

TEST(OffsetAllocatorDeathTest, FreeOfForeignOffsetAborts) {
  OffsetAllocator a(4 * kU);
  must_allocate(a, 2 * kU);
  EXPECT_DEATH(a.free(kU), "not a live block");  // inside a live block, not its start
  EXPECT_DEATH(a.free(3 * kU), "not a live block");
}

TEST(OffsetAllocatorDeathTest, AlignmentMustBeAPowerOfTwo) {
  EXPECT_DEATH(OffsetAllocator(1024, 48), "power of two");
  EXPECT_DEATH(OffsetAllocator(1024, 0), "power of two");
}

// --- Random operations against a reference model --------------------------------------------

// The allocator's contract, written the slow and obvious way: the free space is the gaps
// between live blocks; best fit is the smallest gap that holds the request, lowest offset first.
class ReferenceAllocator {
 public:
  ReferenceAllocator(uint64_t capacity, uint64_t alignment)
      : capacity_(capacity / alignment * alignment), alignment_(alignment) {}

  uint64_t reserved(uint64_t bytes) const { return test::expected_reserved_bytes(bytes, alignment_); }

  std::vector<std::pair<uint64_t, uint64_t>> gaps() const {
    std::vector<std::pair<uint64_t, uint64_t>> out;
    uint64_t cursor = 0;
    for (auto [offset, size] : live_) {
      if (offset > cursor) out.push_back({cursor, offset - cursor});
      cursor = offset + size;
    }
    if (capacity_ > cursor) out.push_back({cursor, capacity_ - cursor});
    return out;
  }
  std::optional<uint64_t> best_fit(uint64_t bytes) const {
    if (bytes > capacity_) return std::nullopt;
    uint64_t need = reserved(bytes);
    std::optional<std::pair<uint64_t, uint64_t>> best;
    for (auto gap : gaps())
      if (gap.second >= need && (!best || gap.second < best->second)) best = gap;
    if (!best) return std::nullopt;
    return best->first;
  }
  bool range_free(uint64_t offset, uint64_t bytes) const {
    if (offset % alignment_ != 0 || bytes > capacity_ || offset > capacity_ - reserved(bytes)) return false;
    uint64_t end = offset + reserved(bytes);
    for (auto [o, size] : live_)
      if (o < end && offset < o + size) return false;
    return true;
  }
  void add(uint64_t offset, uint64_t bytes) { live_[offset] = reserved(bytes); }
  void remove(uint64_t offset) { live_.erase(offset); }
  void clear() { live_.clear(); }

 private:
  uint64_t capacity_, alignment_;
  std::map<uint64_t, uint64_t> live_;  // offset -> reserved bytes
};

struct RandomCase {
  uint64_t seed;
  uint64_t alignment;
};

void PrintTo(const RandomCase& c, std::ostream* os) {
  *os << "seed " << c.seed << ", alignment " << c.alignment;
}

class OffsetAllocatorRandomTest : public ::testing::TestWithParam<RandomCase> {};

TEST_P(OffsetAllocatorRandomTest, MatchesReferenceAndKeepsInvariants) {
  const RandomCase param = GetParam();
  const uint64_t capacity = (1 << 20) + 100;  // not a multiple of the alignment
  OffsetAllocator a(capacity, param.alignment, "random");
  ReferenceAllocator ref(capacity, param.alignment);
  AllocatorInvariantChecker checker(a);
  LiveSet live;
  std::mt19937_64 rng(param.seed);
  auto uniform = [&](uint64_t lo, uint64_t hi) {
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
  };
  auto random_size = [&]() -> uint64_t {
    uint64_t kind = uniform(0, 99);
    if (kind < 10) return uniform(1, 63);  // empty blocks have their own test
    if (kind < 70) return uniform(64, 8 << 10);
    if (kind < 95) return uniform(8 << 10, 64 << 10);
    return uniform(64 << 10, 256 << 10);
  };

  int allocations = 0, out_of_memory = 0, fragmented = 0, placed = 0, place_conflicts = 0;
  size_t max_live = 0;
  for (int step = 0; step < 6000; ++step) {
    uint64_t op = uniform(0, 999);
    if (op < 450) {
      uint64_t bytes = random_size();
      std::optional<uint64_t> expected = ref.best_fit(bytes);
      AllocResult<uint64_t> r = a.allocate(bytes);
      ASSERT_EQ(r.ok(), expected.has_value()) << "step " << step << ", " << bytes << " bytes";
      if (r.ok()) {
        ASSERT_EQ(*r, *expected) << "step " << step << ": best fit of " << bytes << " bytes";
        ref.add(*r, bytes);
        live[*r] = bytes;
        ++allocations;
      } else {
        ++out_of_memory;
        if (r.failure().fragmented()) ++fragmented;
        EXPECT_EQ(r.status().code(), StatusCode::kOutOfMemory);
      }
    } else if (op < 850) {
      if (live.empty()) continue;
      auto it = std::next(live.begin(), static_cast<long>(uniform(0, live.size() - 1)));
      a.free(it->first);
      ref.remove(it->first);
      live.erase(it);
    } else if (op < 970) {
      // Half the time aim at the start of a gap, so that placements often succeed.
      uint64_t bytes = random_size(), offset;
      auto gaps = ref.gaps();
      if (!gaps.empty() && uniform(0, 1) == 0) {
        auto gap = gaps[uniform(0, gaps.size() - 1)];
        offset = gap.first + uniform(0, gap.second / param.alignment) * param.alignment;
      } else {
        offset = uniform(0, capacity + 4096);
        if (uniform(0, 3) != 0) offset &= ~(param.alignment - 1);
      }
      bool expected = ref.range_free(offset, bytes);
      ASSERT_EQ(a.allocate_at(offset, bytes), expected)
          << "step " << step << ": place " << bytes << " at " << offset;
      if (expected) {
        ref.add(offset, bytes);
        live[offset] = bytes;
        ++placed;
      } else {
        ++place_conflicts;
      }
    } else if (op < 999) {
      a.reset_peaks();
      checker.on_reset_peaks();
    } else {
      a.reset();
      ref.clear();
      live.clear();
      checker.on_reset();
    }
    max_live = std::max(max_live, live.size());
    ASSERT_TRUE(checker.check(&live)) << "after step " << step;
  }
  // The sequence must have exercised what it is meant to test.
  RecordProperty("allocations", allocations);
  RecordProperty("out_of_memory", out_of_memory);
  RecordProperty("fragmented", fragmented);
  RecordProperty("placed", placed);
  RecordProperty("place_conflicts", place_conflicts);
  RecordProperty("max_live", static_cast<int>(max_live));
  EXPECT_GT(allocations, 500);
  EXPECT_GT(out_of_memory, 10);
  EXPECT_GT(fragmented, 0);
  EXPECT_GT(placed, 20);
  EXPECT_GT(place_conflicts, 20);
  EXPECT_GT(max_live, 50u);
  for (auto [offset, bytes] : live) a.free(offset);
  EXPECT_EQ(a.free_blocks(), blocks({{0, a.capacity()}}));
}

INSTANTIATE_TEST_SUITE_P(Seeds, OffsetAllocatorRandomTest,
                         ::testing::Values(RandomCase{1, 64}, RandomCase{2, 64}, RandomCase{3, 64},
                                           RandomCase{4, 512}, RandomCase{5, 4096}),
                         [](const ::testing::TestParamInfo<RandomCase>& info) {
                           return "seed" + std::to_string(info.param.seed) + "_align" +
                                  std::to_string(info.param.alignment);
                         });

}  // namespace
}  // namespace ferry
