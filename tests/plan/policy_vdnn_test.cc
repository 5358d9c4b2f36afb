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

Chain six_layers() { return Chain({4096, 4096, 8192, 4096, 8192, 4096, 4096}, {0, 10, 20, 10, 20, 10, 10}); }

// For every layer input X of f_i: swap out before f_i (its last forward reader), release after
// it, swap in before the backward step that precedes b_i. Nothing else.
void expect_layer_offload(const Chain& c, const Schedule& s, const std::vector<int>& layers, Tier tier) {
  std::vector<TensorId> inputs;
  for (int i : layers) {
    const TensorId x = c.a[static_cast<size_t>(i - 1)];
    inputs.push_back(x);
    const OpId fwd = c.forward[static_cast<size_t>(i)];
    const OpId bwd = c.backward[static_cast<size_t>(i)];
    const std::vector<Placed> out = policy_test::actions_of(s, ActionKind::kSwapOut, x);
    const std::vector<Placed> rel = policy_test::actions_of(s, ActionKind::kRelease, x);
    const std::vector<Placed> in = policy_test::actions_of(s, ActionKind::kSwapIn, x);
    ASSERT_EQ(out.size(), 1u) << c.g().tensor(x).name;
    ASSERT_EQ(rel.size(), 1u) << c.g().tensor(x).name;
    ASSERT_EQ(in.size(), 1u) << c.g().tensor(x).name;
    EXPECT_EQ(out[0].step, fwd);
    EXPECT_TRUE(out[0].before);
    EXPECT_EQ(out[0].action.tier, tier);
    EXPECT_EQ(rel[0].step, fwd);
    EXPECT_FALSE(rel[0].before);
    EXPECT_EQ(in[0].step, bwd - 1) << "prefetch one layer ahead of " << c.g().op(bwd).name;
    EXPECT_TRUE(in[0].before);
    EXPECT_EQ(in[0].action.tier, tier);
  }
  std::sort(inputs.begin(), inputs.end());
  EXPECT_EQ(tensors_with(s, ActionKind::kSwapOut), inputs);
  EXPECT_EQ(tensors_with(s, ActionKind::kSwapIn), inputs);
  EXPECT_EQ(tensors_with(s, ActionKind::kRelease), inputs);
  EXPECT_TRUE(tensors_with(s, ActionKind::kRecompute).empty());
  EXPECT_EQ(actions_of(s).size(), 3 * inputs.size());
}

TEST(PolicyVdnnTest, AllOffloadsEveryLayerInputAndPrefetchesOneLayerAhead) {
  Chain c = six_layers();
  const CostModel cost = round_cost();
  const PlanContext ctx{.graph = c.g(), .cost = cost};
  const PlanReport r = must_plan("vdnn-all", ctx);
  EXPECT_EQ(r.schedule.policy, "vdnn-all");
  // Layers 1..6 (the data input included). a6, the loss op's input, is read by backward right
  // after the loss: there is no step between its release and its prefetch, so it stays.
  expect_layer_offload(c, r.schedule, {1, 2, 3, 4, 5, 6}, Tier::kHost);
  EXPECT_EQ(r.swapped_tensors, 6u);
  EXPECT_TRUE(legal_and_measured(c.g(), r));
}

TEST(PolicyVdnnTest, ConvOffloadsOnlyTheInputsOfConvolutions) {
  Chain c = six_layers();
  c.mutable_graph().ops[static_cast<size_t>(c.forward[2])].type = OpType::kConv2d;
  c.mutable_graph().ops[static_cast<size_t>(c.forward[5])].type = OpType::kConv2d;
  const CostModel cost = round_cost();
  PlanContext ctx{.graph = c.g(), .cost = cost};
  ctx.tier = Tier::kSsd;
  const PlanReport r = must_plan("vdnn-conv", ctx);
  expect_layer_offload(c, r.schedule, {2, 5}, Tier::kSsd);
  EXPECT_TRUE(legal_and_measured(c.g(), r));
}

TEST(PolicyVdnnTest, SavesMemoryAndIgnoresTheBudgetWhenChoosing) {
  Chain c = six_layers();
  const CostModel cost = round_cost();
  PlanContext ctx{.graph = c.g(), .cost = cost};
  const PlanReport none = must_plan("none", ctx);
  const PlanReport unlimited = must_plan("vdnn-all", ctx);
  EXPECT_LT(unlimited.device_bytes, none.device_bytes);
  ctx.budget_bytes = none.device_bytes;
  EXPECT_EQ(must_plan("vdnn-all", ctx).schedule.before, unlimited.schedule.before);
}

TEST(PolicyVdnnTest, TooSmallABudgetNamesTheBudgetThatFits) {
  Chain c = six_layers();
  const CostModel cost = round_cost();
  PlanContext ctx{.graph = c.g(), .cost = cost};
  const uint64_t needs = must_plan("vdnn-all", ctx).device_bytes;
  Result<uint64_t> min = find_min_budget("vdnn-all", ctx);
  ASSERT_TRUE(min.ok()) << min.status().message();
  EXPECT_EQ(*min, needs);
  ctx.budget_bytes = needs - 64;
  Result<PlanReport> r = plan_policy("vdnn-all", ctx);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfMemory);
  EXPECT_TRUE(plan_test::contains(r.status().message(), fmt::format("{} bytes", needs)));
  EXPECT_TRUE(plan_test::contains(r.status().message(), "smallest budget"));
  ctx.budget_bytes = needs;
  EXPECT_TRUE(plan_policy("vdnn-all", ctx).ok());
}

}  // namespace
}  // namespace ferry
