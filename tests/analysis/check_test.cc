// check_memory_plan: accepts valid plans and names what is wrong with bad ones (overlap,
// misalignment, out of bounds, malformed input); agrees with an all-pairs check on random plans.

#include <random>
#include <string>

#include <gtest/gtest.h>

#include "analysis/analysis.h"
#include "analysis/analysis_test_util.h"

namespace ferry {
namespace {

using analysis_test::brute_force_disjoint;
using analysis_test::HandGraph;
using analysis_test::contains;

Buffer buffer(int32_t id, uint64_t bytes, OpId first, OpId last, std::vector<TensorId> tensors = {}) {
  Buffer b;
  b.id = id;
  b.bytes = bytes;
  b.first_step = first;
  b.last_step = last;
  b.tensors = std::move(tensors);
  return b;
}

MemoryPlan plan(std::vector<uint64_t> offsets, uint64_t arena, uint64_t alignment = 64) {
  MemoryPlan p;
  p.offsets = std::move(offsets);
  p.arena_bytes = arena;
  p.alignment = alignment;
  return p;
}

TEST(CheckMemoryPlan, AcceptsReuseAcrossTimeAndNeighboursInMemory) {
  // b0 and b1 never coexist, so they may share bytes; b2 coexists with both and sits right above.
  const std::vector<Buffer> bufs = {buffer(0, 128, 0, 2), buffer(1, 128, 3, 5), buffer(2, 64, 0, 5)};
  EXPECT_TRUE(check_memory_plan(bufs, plan({0, 0, 128}, 192)).ok());
}

TEST(CheckMemoryPlan, AcceptsEmptyPlanAndZeroByteBuffersAnywhere) {
  EXPECT_TRUE(check_memory_plan({}, plan({}, 0)).ok());
  const std::vector<Buffer> bufs = {buffer(0, 128, 0, 5), buffer(1, 0, 0, 5)};
  EXPECT_TRUE(check_memory_plan(bufs, plan({0, 64}, 128)).ok());
}

TEST(CheckMemoryPlan, OverlapNamesBothBuffersTheirRangesAndTheStep) {
  // b0 holds [0, 128) during steps 0..5; b1 holds [64, 128) during steps 5..9: they share step 5.
  const std::vector<Buffer> bufs = {buffer(0, 128, 0, 5, {3}), buffer(1, 64, 5, 9, {7, 8})};
  const Status st = check_memory_plan(bufs, plan({0, 64}, 128));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(st.message(), "buffer 0 (tensor 3; 128 bytes at offset 0; steps [0, 5])"));
  EXPECT_TRUE(contains(st.message(), "buffer 1 (tensors 7, 8; 64 bytes at offset 64; steps [5, 9])"));
  EXPECT_TRUE(contains(st.message(), "at step 5"));
  // Lifetimes that only touch (b1 from step 6) do not conflict.
  const std::vector<Buffer> apart = {buffer(0, 128, 0, 5), buffer(1, 64, 6, 9)};
  EXPECT_TRUE(check_memory_plan(apart, plan({0, 64}, 128)).ok());
}

TEST(CheckMemoryPlan, OverlapMessageUsesTensorAndOpNamesWhenGivenTheGraph) {
  HandGraph h;
  const TensorId x = h.tensor("image", 128, TensorRole::kInput);
  const TensorId y = h.tensor("conv1.out", 128);
  h.op("conv1", Phase::kForward, {x}, {y});
  Buffer scratch = buffer(1, 64, 0, 0);
  scratch.scratch_of = 0;
  const std::vector<Buffer> bufs = {buffer(0, 128, 0, 0, {x, y}), scratch};
  const Status st = check_memory_plan(h.graph(), bufs, plan({0, 64}, 128));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(contains(st.message(), "tensors 'image', 'conv1.out'"));
  EXPECT_TRUE(contains(st.message(), "scratch of op 'conv1'"));
}

TEST(CheckMemoryPlan, FindsAnOverlapHiddenAmongManyBuffers) {
  // A staircase of 64-byte buffers, each at its own offset, all live across steps 0..99, and one
  // short buffer at step 50 that lands on buffer 37's bytes. Not neighbours in input order.
  std::vector<Buffer> bufs;
  std::vector<uint64_t> offsets;
  for (int i = 0; i < 80; ++i) {
    bufs.push_back(buffer(i, 64, 0, 99));
    offsets.push_back(64 * static_cast<uint64_t>(i));
  }
  bufs.push_back(buffer(80, 32, 50, 50));
  offsets.push_back(64 * 37);
  const Status st = check_memory_plan(bufs, plan(offsets, 64 * 80));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(contains(st.message(), "buffer 80"));
  EXPECT_TRUE(contains(st.message(), "buffer 37"));
  // Moved to step 100, after the staircase dies, it is fine.
  bufs.back().first_step = bufs.back().last_step = 100;
  EXPECT_TRUE(check_memory_plan(bufs, plan(offsets, 64 * 80)).ok());
}

TEST(CheckMemoryPlan, RejectsMisalignedOffsets) {
  const std::vector<Buffer> bufs = {buffer(0, 64, 0, 1), buffer(1, 64, 0, 1)};
  const Status st = check_memory_plan(bufs, plan({0, 96}, 192));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(contains(st.message(), "buffer 1"));
  EXPECT_TRUE(contains(st.message(), "not aligned to 64 bytes"));
  // The same offsets are fine at alignment 32.
  EXPECT_TRUE(check_memory_plan(bufs, plan({0, 96}, 192, 32)).ok());
}

TEST(CheckMemoryPlan, RejectsBuffersPastTheArena) {
  const std::vector<Buffer> bufs = {buffer(0, 64, 0, 1), buffer(1, 128, 0, 1)};
  const Status st = check_memory_plan(bufs, plan({0, 64}, 128));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(contains(st.message(), "buffer 1"));
  EXPECT_TRUE(contains(st.message(), "ends past the arena of 128 bytes"));
  // An offset so large that offset + bytes wraps around 64 bits is out of bounds too.
  const Status wrap = check_memory_plan({buffer(0, 128, 0, 0)}, plan({~uint64_t{63}}, 128));
  EXPECT_FALSE(wrap.ok());
}

TEST(CheckMemoryPlan, RejectsMalformedPlans) {
  const std::vector<Buffer> bufs = {buffer(0, 64, 0, 1), buffer(1, 64, 2, 3)};
  const Status count = check_memory_plan(bufs, plan({0}, 64));
  EXPECT_TRUE(contains(count.message(), "places 1 buffers but there are 2"));
  const Status align = check_memory_plan(bufs, plan({0, 0}, 64, 48));
  EXPECT_TRUE(contains(align.message(), "alignment 48 is not a power of two"));
  EXPECT_FALSE(check_memory_plan(bufs, plan({0, 0}, 64, 0)).ok());
  const std::vector<Buffer> backwards = {buffer(0, 64, 3, 2)};
  EXPECT_TRUE(contains(check_memory_plan(backwards, plan({0}, 64)).message(), "empty or negative lifetime"));
}

TEST(CheckMemoryPlan, AgreesWithAllPairsCheckOnRandomPlans) {
  std::mt19937_64 rng(20240611);
  int rejected = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 12);
    std::vector<Buffer> bufs;
    std::vector<uint64_t> offsets;
    for (int i = 0; i < n; ++i) {
      const OpId first = static_cast<OpId>(rng() % 10);
      const OpId last = first + static_cast<OpId>(rng() % 4);
      bufs.push_back(buffer(i, (rng() % 4) * 48, first, last));  // 0, 48, 96 or 144 bytes
      offsets.push_back((rng() % 8) * 16);
    }
    const Status st = check_memory_plan(bufs, plan(offsets, 1024, 16));
    const bool expected = brute_force_disjoint(bufs, offsets);
    ASSERT_EQ(st.ok(), expected) << "trial " << trial << ": " << st.message();
    rejected += expected ? 0 : 1;
  }
  // Both outcomes were exercised.
  EXPECT_GT(rejected, 200);
  EXPECT_LT(rejected, 1800);
}

}  // namespace
}  // namespace ferry
