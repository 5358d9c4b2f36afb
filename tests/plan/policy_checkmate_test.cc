#include <gtest/gtest.h>

#include "plan/policies.h"
#include "plan/policy_test_util.h"

namespace ferry {
namespace {

using plan_test::HandGraph;
using policy_test::actions_of;
using policy_test::Chain;
using policy_test::legal_and_measured;
using policy_test::must_plan;
using policy_test::Placed;
using policy_test::round_cost;
using policy_test::tensors_with;

// x -> f1 -> a1 -> f2 -> a2 -> f3 -> a3 -> loss; backward b3 reads a3 (and writes a 2 KiB
// gradient), b2 reads a2, b1 reads a1 and x. All activations are 1 KiB.
//   step:  0 f1  1 f2  2 f3  3 loss  4 b3  5 b2  6 b1
//   live:  x+a1 .. x+a1+a2+a3 (4096) .. 4096+64 .. peak at b3: x+a1+a2+a3+d3+loss = 6208
//          b2: x+a1+a2+d3+d2+loss = 5248,  b1: x+a1+d2+d1+loss = 2240
// With a budget of 5700, b3's step must lose 1 KiB: a1 or a2 (a3 is read there; x is a data
// input). Dropping a2 means recomputing f2 at b2; dropping a1 means recomputing f1 at b1. Both
// fit, so the optimum recomputes whichever op is cheaper, once.
struct Tiny {
  HandGraph h{"tiny"};
  TensorId x, a1, a2, a3;
  Tiny(double f1_us, double f2_us) {
    x = h.input("x", 1024);
    a1 = h.tensor("a1", 1024);
    a2 = h.tensor("a2", 1024);
    a3 = h.tensor("a3", 1024);
    const TensorId loss = h.tensor("loss", 64);
    const TensorId d3 = h.tensor("d3", 2048, TensorRole::kGradient);
    const TensorId d2 = h.tensor("d2", 64, TensorRole::kGradient);
    const TensorId d1 = h.tensor("d1", 64, TensorRole::kGradient);
    h.op("f1", {x}, {a1}, f1_us);
    h.op("f2", {a1}, {a2}, f2_us);
    h.op("f3", {a2}, {a3}, 3.0);
    h.op("loss_op", {a3}, {loss}, 1.0);
    h.op("b3", {a3}, {d3}, 1.0, Phase::kBackward);
    h.op("b2", {d3, a2}, {d2}, 1.0, Phase::kBackward);
    h.op("b1", {d2, a1, x}, {d1}, 1.0, Phase::kBackward);
    h.set_loss(loss);
  }
  const Graph& g() const { return h.graph(); }
};

TEST(PolicyCheckmateTest, FindsTheHandComputedOptimumOnATinyChain) {
  const CostModel cost = round_cost();
  // f2 cheap: recompute a2 right before b2 (step 5); a1 stays.
  {
    Tiny t(5.0, 1.0);
    PlanContext ctx{.graph = t.g(), .cost = cost};
    ASSERT_EQ(must_plan("none", ctx).live_peak_bytes, 6208u);
    ctx.budget_bytes = 5700;
    const PlanReport r = must_plan("checkmate", ctx);
    EXPECT_TRUE(r.proven_optimal) << r.notes;
    EXPECT_EQ(r.mip_gap, 0.0);
    EXPECT_EQ(tensors_with(r.schedule, ActionKind::kRecompute), std::vector<TensorId>{t.a2});
    const std::vector<Placed> rec = actions_of(r.schedule, ActionKind::kRecompute, t.a2);
    ASSERT_EQ(rec.size(), 1u);
    EXPECT_EQ(rec[0].step, 5);
    const std::vector<Placed> rel = actions_of(r.schedule, ActionKind::kRelease, t.a2);
    ASSERT_EQ(rel.size(), 1u);
    EXPECT_EQ(rel[0].step, 2);  // after f3, its last forward reader
    EXPECT_TRUE(actions_of(r.schedule, ActionKind::kRelease, t.a1).empty());
    EXPECT_LE(r.device_bytes, ctx.budget_bytes);
    EXPECT_TRUE(legal_and_measured(t.g(), r));
    EXPECT_TRUE(plan_test::contains(r.notes, "optimal")) << r.notes;
  }
  // f1 cheap: recompute a1 right before b1 (step 6) instead.
  {
    Tiny t(1.0, 5.0);
    PlanContext ctx{.graph = t.g(), .cost = cost};
    ctx.budget_bytes = 5700;
    const PlanReport r = must_plan("checkmate", ctx);
    EXPECT_TRUE(r.proven_optimal) << r.notes;
    EXPECT_EQ(tensors_with(r.schedule, ActionKind::kRecompute), std::vector<TensorId>{t.a1});
    const std::vector<Placed> rec = actions_of(r.schedule, ActionKind::kRecompute, t.a1);
    ASSERT_EQ(rec.size(), 1u);
    EXPECT_EQ(rec[0].step, 6);
    EXPECT_TRUE(legal_and_measured(t.g(), r));
  }
}

TEST(PolicyCheckmateTest, NothingIsRecomputedWhenEverythingFits) {
  Tiny t(5.0, 1.0);
  const CostModel cost = round_cost();
  PlanContext ctx{.graph = t.g(), .cost = cost};
  ctx.budget_bytes = must_plan("none", ctx).device_bytes;
  const PlanReport r = must_plan("checkmate", ctx);
  EXPECT_EQ(r.schedule.num_actions(), 0u);
  EXPECT_TRUE(r.proven_optimal);
}

TEST(PolicyCheckmateTest, AnImpossibleBudgetIsOutOfMemoryWithTheSmallestThatFits) {
  // b3 alone reads a3 and writes d3 next to the data input x, which backward still needs.
  Tiny t(5.0, 1.0);
  const CostModel cost = round_cost();
  PlanContext ctx{.graph = t.g(), .cost = cost};
  ctx.budget_bytes = 3000;
  Result<PlanReport> r = plan_policy("checkmate", ctx);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfMemory);
  Result<uint64_t> min = find_min_budget("checkmate", ctx);
  ASSERT_TRUE(min.ok()) << min.status().message();
  EXPECT_LT(*min, 6208u);
  EXPECT_TRUE(plan_test::contains(r.status().message(), fmt::format("{} bytes", *min)));
  ctx.budget_bytes = *min;
  const PlanReport at_min = must_plan("checkmate", ctx);
  EXPECT_LE(at_min.device_bytes, *min);
  EXPECT_TRUE(legal_and_measured(t.g(), at_min));
}

TEST(PolicyCheckmateTest, RefusesGraphsAboveTheLimit) {
  Chain c(std::vector<uint64_t>(13, 1024), std::vector<double>(13, 1.0));
  const CostModel cost = round_cost();
  PlanContext ctx{.graph = c.g(), .cost = cost};
  ctx.budget_bytes = must_plan("none", ctx).device_bytes - 1024;  // something must be recomputed
  ctx.options.checkmate_max_ops = 10;
  Result<PlanReport> r = plan_policy("checkmate", ctx);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
  EXPECT_TRUE(plan_test::contains(r.status().message(),
                                  fmt::format("graph too large for checkmate ({} ops > limit 10)", c.g().ops.size())))
      << r.status().message();
}

}  // namespace
}  // namespace ferry
