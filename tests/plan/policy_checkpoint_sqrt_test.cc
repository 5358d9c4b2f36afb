#include <cmath>

#include <gtest/gtest.h>

#include "plan/policies.h"
#include "plan/policy_test_util.h"

namespace ferry {
namespace {

using policy_test::actions_of;
using policy_test::Chain;
using policy_test::legal_and_measured;
using policy_test::must_plan;
using policy_test::Placed;
using policy_test::round_cost;
using policy_test::tensors_with;

Chain uniform_chain(int n) {
  return Chain(std::vector<uint64_t>(static_cast<size_t>(n) + 1, 4096),
               std::vector<double>(static_cast<size_t>(n) + 1, 10.0));
}

// In a chain every a_i is an articulation point (the only tensor alive across the cut after
// f_i), so there are m = n candidate boundaries.
class CheckpointSqrtTest : public ::testing::TestWithParam<int> {};

TEST_P(CheckpointSqrtTest, KeepsAboutSqrtNBoundariesAndRecomputesTheRest) {
  const int n = GetParam();
  Chain c = uniform_chain(n);
  const CostModel cost = round_cost();
  const PlanContext ctx{.graph = c.g(), .cost = cost};
  const PlanReport r = must_plan("checkpoint-sqrt", ctx);
  const std::vector<TensorId> dropped = tensors_with(r.schedule, ActionKind::kRelease);
  ASSERT_FALSE(dropped.empty());
  // The kept activations up to the one after the last dropped are the checkpoints.
  std::vector<int> checkpoints;
  int last_dropped = 0;
  for (int i = 1; i <= n; ++i)
    if (std::binary_search(dropped.begin(), dropped.end(), c.a[static_cast<size_t>(i)])) last_dropped = i;
  for (int i = 1; i <= last_dropped + 1; ++i)
    if (!std::binary_search(dropped.begin(), dropped.end(), c.a[static_cast<size_t>(i)])) checkpoints.push_back(i);
  const double root = std::sqrt(static_cast<double>(n));
  EXPECT_NEAR(static_cast<double>(checkpoints.size()), root - 1, 1.0) << "n = " << n;
  // Segments between checkpoints are about sqrt(n) long.
  for (size_t k = 1; k < checkpoints.size(); ++k)
    EXPECT_NEAR(checkpoints[k] - checkpoints[k - 1], root, 1.0);
  // The data input is never dropped, and the last segment (backward starts there) is kept.
  EXPECT_FALSE(std::binary_search(dropped.begin(), dropped.end(), c.x));
  EXPECT_FALSE(std::binary_search(dropped.begin(), dropped.end(), c.a[static_cast<size_t>(n)]));
  // Every dropped a_i leaves after its last forward reader f_{i+1} and is recomputed no later
  // than its backward reader b_{i+1}.
  for (TensorId t : dropped) {
    const int i = static_cast<int>(std::find(c.a.begin(), c.a.end(), t) - c.a.begin());
    const std::vector<Placed> rel = actions_of(r.schedule, ActionKind::kRelease, t);
    const std::vector<Placed> rec = actions_of(r.schedule, ActionKind::kRecompute, t);
    ASSERT_EQ(rel.size(), 1u);
    ASSERT_EQ(rec.size(), 1u) << c.g().tensor(t).name;
    EXPECT_EQ(rel[0].step, c.forward[static_cast<size_t>(i) + 1]);
    EXPECT_GT(rec[0].step, c.forward.back());
    EXPECT_LE(rec[0].step, c.backward[static_cast<size_t>(i) + 1]);
  }
  EXPECT_TRUE(tensors_with(r.schedule, ActionKind::kSwapOut).empty());
  // Fewer activations live at once than keeping all of them.
  EXPECT_LT(r.live_peak_bytes, must_plan("none", ctx).live_peak_bytes);
  EXPECT_TRUE(legal_and_measured(c.g(), r));
}

INSTANTIATE_TEST_SUITE_P(Lengths, CheckpointSqrtTest, ::testing::Values(9, 16, 25, 36));

TEST(CheckpointSqrtPolicyTest, RecomputesEachSegmentBeforeItsBackward) {
  // n = 16: checkpoints a4, a8, a12; segments {a1..a3}, {a5..a7}, {a9..a11} are dropped. Each
  // segment's recomputation ends right before the backward step that first reads one of them.
  Chain c = uniform_chain(16);
  const CostModel cost = round_cost();
  const PlanContext ctx{.graph = c.g(), .cost = cost};
  const PlanReport r = must_plan("checkpoint-sqrt", ctx);
  std::vector<TensorId> expected;
  for (int i : {1, 2, 3, 5, 6, 7, 9, 10, 11}) expected.push_back(c.a[static_cast<size_t>(i)]);
  EXPECT_EQ(tensors_with(r.schedule, ActionKind::kRelease), expected);
  for (int first : {1, 5, 9}) {
    // b_{first+3} reads a_{first+2}, the segment's last tensor, first.
    const OpId deadline = c.backward[static_cast<size_t>(first) + 3];
    for (int i = first; i < first + 3; ++i) {
      const auto rec = actions_of(r.schedule, ActionKind::kRecompute, c.a[static_cast<size_t>(i)]);
      ASSERT_EQ(rec.size(), 1u);
      EXPECT_EQ(rec[0].step, deadline - (first + 2 - i)) << "a" << i;  // one per step, in forward order
    }
  }
}

}  // namespace
}  // namespace ferry
