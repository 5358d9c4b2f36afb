#include <gtest/gtest.h>

#include "plan/policies.h"
#include "plan/policy_test_util.h"

namespace ferry {
namespace {

using plan_test::HandGraph;
using policy_test::actions_of;
using policy_test::legal_and_measured;
using policy_test::must_plan;
using policy_test::round_cost;
using policy_test::tensors_with;

// Two saved tensors of 100 KiB each; a copy of either takes 10 + 102400 / 1000 = 112.4 us each
// way on the round profile.
// - B: made by an expensive op (1000 us), then idle across ~1000 us of compute before backward
//   reads it at step 7: its copies hide entirely (a free swap).
// - A: made by a cheap op (1 us) from the data input, idle for 2 us before backward reads it at
//   step 6: a swap would stall ~220 us, a recompute costs 1 us.
// Steps 4 and 5 (A, B and the 200 KiB P) are the peak; both must leave to fit the budget below.
struct TwoCandidates {
  HandGraph h{"two"};
  TensorId x, a, b, p, loss;
  TwoCandidates() {
    x = h.input("x", 1024);
    b = h.tensor("B", 102400);
    const TensorId c1 = h.tensor("c1", 1024);
    a = h.tensor("A", 102400);
    const TensorId hh = h.tensor("h", 1024);
    p = h.tensor("P", 204800);
    loss = h.tensor("loss", 64);
    const TensorId da = h.tensor("dA", 1024, TensorRole::kGradient);
    const TensorId db = h.tensor("dB", 1024, TensorRole::kGradient);
    h.op("fB", {x}, {b}, 1000.0);
    h.op("g1", {b}, {c1}, 1000.0);
    h.op("fA", {x}, {a}, 1.0);
    h.op("hop", {a, c1}, {hh}, 1.0);
    h.op("big", {hh}, {p}, 1.0);
    h.op("loss_op", {p}, {loss}, 1.0);
    h.op("bA", {a, loss}, {da}, 1000.0, Phase::kBackward);
    h.op("bB", {b, da, x}, {db}, 1.0, Phase::kBackward);
    h.set_loss(loss);
  }
  const Graph& g() const { return h.graph(); }
};

TEST(PolicyCapuchinTest, RecomputesCheapTensorsAndSwapsThoseWhoseIdleTimeHidesTheCopy) {
  TwoCandidates t;
  const CostModel cost = round_cost();
  PlanContext ctx{.graph = t.g(), .cost = cost};
  const uint64_t none = must_plan("none", ctx).device_bytes;
  ctx.budget_bytes = none - 102400 - 51200;  // one of A and B leaving is not enough
  const PlanReport r = must_plan("capuchin", ctx);
  EXPECT_EQ(tensors_with(r.schedule, ActionKind::kRecompute), std::vector<TensorId>{t.a});
  EXPECT_EQ(tensors_with(r.schedule, ActionKind::kSwapOut), std::vector<TensorId>{t.b});
  EXPECT_EQ(tensors_with(r.schedule, ActionKind::kSwapIn), std::vector<TensorId>{t.b});
  EXPECT_LE(r.device_bytes, ctx.budget_bytes);
  EXPECT_TRUE(legal_and_measured(t.g(), r));
}

TEST(PolicyCapuchinTest, PrefetchIsTimedToLandJustBeforeTheBackwardAccess) {
  TwoCandidates t;
  const CostModel cost = round_cost();
  PlanContext ctx{.graph = t.g(), .cost = cost};
  ctx.budget_bytes = must_plan("none", ctx).device_bytes - 102400 - 51200;
  const PlanReport r = must_plan("capuchin", ctx);
  const auto in = actions_of(r.schedule, ActionKind::kSwapIn, t.b);
  ASSERT_EQ(in.size(), 1u);
  // bB (step 7) reads B; the 1000 us of bA (step 6) cover the 112 us copy, and no later trigger
  // exists, so the swap-in is issued before step 6, not earlier.
  EXPECT_EQ(in[0].step, 6);
  EXPECT_TRUE(in[0].before);
  // The swap-out starts as soon as B exists.
  const auto out = actions_of(r.schedule, ActionKind::kSwapOut, t.b);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].step, 0);
  EXPECT_FALSE(out[0].before);
}

TEST(PolicyCapuchinTest, SlowLinkMakesRecomputationWinForTheExpensiveTensorToo) {
  // With a link 1000x slower, not even B's idle time hides its copy; recomputing B (1000 us)
  // then frees more bytes per second of overhead than a ~100 ms stall.
  TwoCandidates t;
  HardwareProfile slow = cost_test::round_profile();
  slow.host_link.host_to_device.nominal_bytes_per_s /= 1000;
  slow.host_link.device_to_host.nominal_bytes_per_s /= 1000;
  const CostModel cost(slow);
  PlanContext ctx{.graph = t.g(), .cost = cost};
  ctx.budget_bytes = must_plan("none", ctx).device_bytes - 102400 - 51200;
  const PlanReport r = must_plan("capuchin", ctx);
  EXPECT_TRUE(tensors_with(r.schedule, ActionKind::kSwapOut).empty());
  EXPECT_EQ(tensors_with(r.schedule, ActionKind::kRecompute), (std::vector<TensorId>{t.b, t.a}));
  EXPECT_TRUE(legal_and_measured(t.g(), r));
}

TEST(PolicyCapuchinTest, UnlimitedOrAmpleBudgetMovesNothing) {
  TwoCandidates t;
  const CostModel cost = round_cost();
  PlanContext ctx{.graph = t.g(), .cost = cost};
  EXPECT_EQ(must_plan("capuchin", ctx).schedule.num_actions(), 0u);
  ctx.budget_bytes = must_plan("none", ctx).device_bytes;
  EXPECT_EQ(must_plan("capuchin", ctx).schedule.num_actions(), 0u);
}

}  // namespace
}  // namespace ferry
