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

// a1..a5 of different sizes; a_i is produced at step i-1, last read in forward at step i (by
// f_{i+1}) and first read in backward at step 11-i (by b_{i+1}); a5 feeds the loss.
Chain five_layers() { return Chain({2048, 1024, 8192, 2048, 16384, 4096}, {0, 5, 5, 5, 5, 5}); }

// Expects lms to swap exactly `tensors` (indices i of a_i), each out after its producer, released
// after its last forward reader, back `k` steps before its first backward reader.
void expect_lms(const Chain& c, const Schedule& s, const std::vector<int>& tensors, int k) {
  std::vector<TensorId> ids;
  for (int i : tensors) {
    const TensorId t = c.a[static_cast<size_t>(i)];
    ids.push_back(t);
    const std::vector<Placed> out = actions_of(s, ActionKind::kSwapOut, t);
    const std::vector<Placed> rel = actions_of(s, ActionKind::kRelease, t);
    const std::vector<Placed> in = actions_of(s, ActionKind::kSwapIn, t);
    ASSERT_EQ(out.size(), 1u);
    ASSERT_EQ(rel.size(), 1u);
    ASSERT_EQ(in.size(), 1u);
    EXPECT_EQ(out[0].step, c.forward[static_cast<size_t>(i)]);  // right after the producer
    EXPECT_FALSE(out[0].before);
    EXPECT_EQ(rel[0].step, c.forward[static_cast<size_t>(i) + 1]);  // after the last forward reader
    EXPECT_FALSE(rel[0].before);
    EXPECT_EQ(in[0].step, c.backward[static_cast<size_t>(i) + 1] - k) << c.g().tensor(t).name;
    EXPECT_TRUE(in[0].before);
  }
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(tensors_with(s, ActionKind::kSwapOut), ids);
  EXPECT_EQ(tensors_with(s, ActionKind::kSwapIn), ids);
  EXPECT_EQ(tensors_with(s, ActionKind::kRelease), ids);
}

TEST(PolicyLmsTest, SwapsActivationsAboveTheThresholdKOpsAhead) {
  Chain c = five_layers();
  const CostModel cost = round_cost();
  PlanContext ctx{.graph = c.g(), .cost = cost};
  ctx.options.lms_threshold_bytes = 4096;
  ctx.options.lms_swapin_ahead = 2;
  const PlanReport r = must_plan("lms", ctx);
  // a2 (8192) and a4 (16384) pass the threshold; a1 and a3 (1024, 2048) do not; a5 feeds the
  // loss and is read right after it; the data input x is not an activation.
  expect_lms(c, r.schedule, {2, 4}, 2);
  EXPECT_TRUE(legal_and_measured(c.g(), r));
}

TEST(PolicyLmsTest, ZeroThresholdSwapsEverySavedActivationThatCanLeave) {
  Chain c = five_layers();
  const CostModel cost = round_cost();
  PlanContext ctx{.graph = c.g(), .cost = cost};
  const PlanReport r = must_plan("lms", ctx);
  expect_lms(c, r.schedule, {1, 2, 3, 4}, 1);
  EXPECT_TRUE(legal_and_measured(c.g(), r));
}

TEST(PolicyLmsTest, ATensorThatWouldComeBackBeforeItLeftStays) {
  // With k = 4: a_i is released after step i and would be swapped in before step 11-i-4 = 7-i,
  // which is after step i for a1..a3 but not for a4 (7-4 = 3 <= 4).
  Chain c = five_layers();
  const CostModel cost = round_cost();
  PlanContext ctx{.graph = c.g(), .cost = cost};
  ctx.options.lms_swapin_ahead = 4;
  const PlanReport r = must_plan("lms", ctx);
  expect_lms(c, r.schedule, {1, 2, 3}, 4);
  EXPECT_TRUE(legal_and_measured(c.g(), r));
}

TEST(PolicyLmsTest, LargerKHoldsSwappedTensorsLonger) {
  Chain c = five_layers();
  const CostModel cost = round_cost();
  PlanContext ctx{.graph = c.g(), .cost = cost};
  ctx.options.lms_swapin_ahead = 1;
  const PlanReport near = must_plan("lms", ctx);
  ctx.options.lms_swapin_ahead = 3;
  const PlanReport far = must_plan("lms", ctx);
  EXPECT_GE(far.live_peak_bytes, near.live_peak_bytes);
}

TEST(PolicyLmsTest, RejectsANonPositiveK) {
  Chain c = five_layers();
  const CostModel cost = round_cost();
  PlanContext ctx{.graph = c.g(), .cost = cost};
  ctx.options.lms_swapin_ahead = 0;
  Result<PlanReport> r = plan_policy("lms", ctx);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(plan_test::contains(r.status().message(), "swapin_ahead"));
}

}  // namespace
}  // namespace ferry
