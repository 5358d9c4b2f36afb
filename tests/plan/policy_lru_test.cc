#include <optional>

#include <gtest/gtest.h>

#include "plan/policies.h"
#include "plan/policy_test_util.h"
#include "common/units.h"
#include "graph/zoo/zoo.h"

namespace ferry {
namespace {

using plan_test::HandGraph;
using policy_test::actions_of;
using policy_test::legal_and_measured;
using policy_test::must_plan;
using policy_test::Placed;
using policy_test::round_cost;
using policy_test::tensors_with;

// t1 is produced first but read again at step 3; t2 is last read at step 2. Step 4 is the peak
// (t1..t4 and the 4 KiB t5); backward reads t5, then t2, then t1.
struct Reuse {
  HandGraph h{"reuse"};
  TensorId x, t1, t2, t3, t4, t5, loss;
  Reuse() {
    x = h.input("x", 1024);
    t1 = h.tensor("t1", 1024);
    t2 = h.tensor("t2", 1024);
    t3 = h.tensor("t3", 1024);
    t4 = h.tensor("t4", 1024);
    t5 = h.tensor("t5", 4096);
    loss = h.tensor("loss", 64);
    const TensorId d5 = h.tensor("d5", 64, TensorRole::kGradient);
    const TensorId d2 = h.tensor("d2", 64, TensorRole::kGradient);
    const TensorId d1 = h.tensor("d1", 64, TensorRole::kGradient);
    h.op("p0", {x}, {t1}, 1.0);
    h.op("p1", {t1}, {t2}, 1.0);
    h.op("p2", {t2}, {t3}, 1.0);
    h.op("p3", {t1}, {t4}, 1.0);
    h.op("p4", {t3, t4}, {t5}, 1.0);
    h.op("loss_op", {t5}, {loss}, 1.0);
    h.op("b5", {t5}, {d5}, 1.0, Phase::kBackward);
    h.op("b2", {d5, t2}, {d2}, 1.0, Phase::kBackward);
    h.op("b1", {d2, t1}, {d1}, 1.0, Phase::kBackward);
    h.set_loss(loss);
  }
  const Graph& g() const { return h.graph(); }
};

TEST(PolicyLruTest, EvictsTheLeastRecentlyUsedTensorAndFetchesItOnAccess) {
  Reuse r;
  const CostModel cost = round_cost();
  PlanContext ctx{.graph = r.g(), .cost = cost};
  const PlanReport none = must_plan("none", ctx);
  ASSERT_EQ(none.live_peak_bytes, 8192u);
  ctx.budget_bytes = 8192 - 512;  // one 1 KiB tensor must leave for step 4
  const PlanReport lru = must_plan("lru", ctx);
  // t2 (last used at step 2) goes, not t1 (produced earlier, but used at step 3).
  EXPECT_EQ(tensors_with(lru.schedule, ActionKind::kSwapOut), std::vector<TensorId>{r.t2});
  const std::vector<Placed> out = actions_of(lru.schedule, ActionKind::kSwapOut, r.t2);
  const std::vector<Placed> rel = actions_of(lru.schedule, ActionKind::kRelease, r.t2);
  const std::vector<Placed> in = actions_of(lru.schedule, ActionKind::kSwapIn, r.t2);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(rel.size(), 1u);
  ASSERT_EQ(in.size(), 1u);
  // Evicted when step 4's allocation would exceed the budget: its block must end at step 3.
  EXPECT_EQ(out[0].step, 3);
  EXPECT_FALSE(out[0].before);
  EXPECT_EQ(rel[0].step, 3);
  EXPECT_FALSE(rel[0].before);
  // Fetched on access: right before b2 (step 7) reads it, not earlier.
  EXPECT_EQ(in[0].step, 7);
  EXPECT_TRUE(in[0].before);
  EXPECT_LE(lru.device_bytes, ctx.budget_bytes);
  EXPECT_TRUE(legal_and_measured(r.g(), lru));
}

TEST(PolicyLruTest, DoesNothingWhenEverythingFits) {
  Reuse r;
  const CostModel cost = round_cost();
  PlanContext ctx{.graph = r.g(), .cost = cost};
  ctx.budget_bytes = must_plan("none", ctx).device_bytes;
  EXPECT_EQ(must_plan("lru", ctx).schedule.num_actions(), 0u);
}

TEST(PolicyLruTest, ReportsTheSmallestBudgetWhenAStepCannotFit) {
  Reuse r;
  const CostModel cost = round_cost();
  PlanContext ctx{.graph = r.g(), .cost = cost};
  // Step 4 reads t3 and t4 and writes t5: 6 KiB that no eviction can free.
  ctx.budget_bytes = 5000;
  Result<PlanReport> p = plan_policy("lru", ctx);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kOutOfMemory);
  Result<uint64_t> min = find_min_budget("lru", ctx);
  ASSERT_TRUE(min.ok()) << min.status().message();
  EXPECT_GE(*min, 6144u);
  EXPECT_LT(*min, 8192u);
  EXPECT_TRUE(plan_test::contains(p.status().message(), fmt::format("{} bytes", *min)));
  ctx.budget_bytes = *min;
  const PlanReport at_min = must_plan("lru", ctx);
  EXPECT_LE(at_min.device_bytes, *min);
  EXPECT_TRUE(legal_and_measured(r.g(), at_min));
}

TEST(PolicyLruTest, ReEvictsWithoutCopyingTwice) {
  // `a` is read at steps 1, 4 and 7 and must be off the device at the peaks of steps 2 and 5.
  // The second eviction only releases it: its host copy is still valid (a swap-out to a tier
  // that holds a valid copy would move the bytes twice, and lowering rejects it).
  HandGraph h("twice");
  const TensorId x = h.input("x", 1024);
  const TensorId a = h.tensor("a", 2048);
  const TensorId p = h.tensor("p", 4096);
  const TensorId q = h.tensor("q", 4096);
  const TensorId loss = h.tensor("loss", 64);
  const TensorId g1 = h.tensor("g1", 64, TensorRole::kGradient);
  const TensorId g2 = h.tensor("g2", 8192, TensorRole::kGradient);
  const TensorId g2b = h.tensor("g2b", 64, TensorRole::kGradient);
  const TensorId g3 = h.tensor("g3", 64, TensorRole::kGradient);
  h.op("fa", {x}, {a}, 1.0);
  h.op("fp", {a}, {p}, 1.0);
  h.op("fq", {p}, {q}, 1.0);
  h.op("loss_op", {q}, {loss}, 1.0);
  h.op("b1", {q, a}, {g1}, 1.0, Phase::kBackward);
  h.op("b2", {g1}, {g2}, 1.0, Phase::kBackward);
  h.op("b2b", {g2}, {g2b}, 1.0, Phase::kBackward);
  h.op("b3", {g2b, a}, {g3}, 1.0, Phase::kBackward);
  h.set_loss(loss);
  const CostModel cost = round_cost();
  PlanContext ctx{.graph = h.graph(), .cost = cost};
  ctx.budget_bytes = 9000;
  const PlanReport r = must_plan("lru", ctx);
  EXPECT_EQ(actions_of(r.schedule, ActionKind::kSwapOut, a).size(), 1u);
  EXPECT_EQ(actions_of(r.schedule, ActionKind::kRelease, a).size(), 2u);
  const std::vector<Placed> in = actions_of(r.schedule, ActionKind::kSwapIn, a);
  ASSERT_EQ(in.size(), 2u);
  EXPECT_EQ(in[0].step, 4);
  EXPECT_EQ(in[1].step, 7);
  EXPECT_TRUE(legal_and_measured(h.graph(), r));
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

// lru on resnet-mini at batch 3, where its feasibility is not monotone in the budget: the keep
// plan (none) and find_min_budget's answer (min).
class PolicyLruResnetMini : public ::testing::Test {
 protected:
  void SetUp() override {
    ModelConfig config;
    config.batch = 3;
    Result<Graph> g = build_model("resnet-mini", config);
    ASSERT_TRUE(g.ok());
    graph_ = std::move(*g);
    ctx_.emplace(PlanContext{.graph = graph_, .cost = cost_});
    Result<PlanReport> none = plan_policy("none", *ctx_);
    ASSERT_TRUE(none.ok());
    none_bytes_ = none->device_bytes;
    Result<uint64_t> min = find_min_budget("lru", *ctx_);
    ASSERT_TRUE(min.ok()) << min.status().message();
    min_ = *min;
  }
  Graph graph_;
  const CostModel cost_ = policy_test::round_cost();
  std::optional<PlanContext> ctx_;
  uint64_t none_bytes_ = 0;
  uint64_t min_ = 0;
};

// lru's feasibility is not monotone in the budget (a different budget changes which tensor is
// evicted first). On resnet-mini at batch 3 a bisection alone answered 55.9% of the keep plan
// while 54.9% fits: find_min_budget's answer must fit, and no budget a whole number of 1% steps
// below it may.
TEST_F(PolicyLruResnetMini, MinBudgetIsTheLowestThatFitsOnTheOnePercentGrid) {
  PlanContext& ctx = *ctx_;
  const uint64_t min = min_, none_bytes = none_bytes_;
  ctx.budget_bytes = min;
  EXPECT_TRUE(plan_policy("lru", ctx).ok()) << "the answer must fit";
  const uint64_t step = align_up(none_bytes / 100, ctx.alignment);
  int below = 0;
  for (uint64_t b = min; b > step; ++below) {
    b -= step;
    ctx.budget_bytes = b;
    Result<PlanReport> r = plan_policy("lru", ctx);
    EXPECT_FALSE(r.ok()) << b << " bytes (" << 100.0 * b / none_bytes << "% of none) fits, below the answer "
                         << min << " (" << 100.0 * min / none_bytes << "%)";
  }
  EXPECT_GT(below, 10);
}

// Above the smallest budget every budget fits, although lru's own search at some of them finds no
// plan (its choices change with the budget): plan_policy then answers with the plan it makes for a
// budget between the smallest and this one, which fits this one too, and says so in its notes.
// (ferry.torch met this with ferry's planner on a recorded step: a budget midway between the
// smallest and the unplanned need was refused, 32 bytes over.)
TEST_F(PolicyLruResnetMini, EveryBudgetAboveTheSmallestFits) {
  PlanContext& ctx = *ctx_;
  const uint64_t min = min_, none_bytes = none_bytes_;
  const uint64_t step = align_up(none_bytes / 400, ctx.alignment);
  int fell_back = 0;
  for (uint64_t b = min; b < none_bytes; b += step) {
    ctx.budget_bytes = b;
    Result<PlanReport> r = plan_policy("lru", ctx);
    ASSERT_TRUE(r.ok()) << b << " bytes (" << 100.0 * b / none_bytes << "% of none), above the smallest "
                        << min << ": " << r.status().message();
    EXPECT_LE(r->device_bytes, b);
    if (r->notes.find("no plan found at the budget itself") != std::string::npos) ++fell_back;
  }
  EXPECT_GT(fell_back, 0) << "no budget needed the fallback: the test shows nothing";
}

}  // namespace
}  // namespace ferry

