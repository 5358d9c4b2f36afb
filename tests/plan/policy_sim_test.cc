// The policies' plans in the simulator: a plan that a planner says fits a budget is feasible in
// the simulator at that budget, and the simulator's device peak equals the planner's measure
// (both place the program the same way, schedule/placement.h).
#include <string>

#include <gtest/gtest.h>

#include "cost/test_profile.h"
#include "graph/zoo/zoo.h"
#include "plan/policies.h"
#include "sim/simulator.h"

namespace ferry {
namespace {

class PolicySimTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PolicySimTest, PlansAtTheirMinimumBudgetRunInTheSimulator) {
  const std::string policy = GetParam();
  ModelConfig config;
  config.batch = 2;
  Result<Graph> g = build_model("gpt2-mini", config);
  ASSERT_TRUE(g.ok()) << g.status().message();
  const CostModel cost(cost_test::round_profile());
  PlanContext ctx{.graph = *g, .cost = cost};
  ctx.options.checkmate_max_nodes = 5;
  ctx.options.checkmate_time_limit_s = 600;
  Result<PlanReport> none = plan_policy("none", ctx);
  ASSERT_TRUE(none.ok());
  Result<uint64_t> min = find_min_budget(policy, ctx);
  ASSERT_TRUE(min.ok()) << min.status().message();
  for (uint64_t budget : {*min, none->device_bytes}) {
    ctx.budget_bytes = budget;
    Result<PlanReport> r = plan_policy(policy, ctx);
    ASSERT_TRUE(r.ok()) << r.status().message();
    SimOptions o;
    o.budget_bytes = budget;
    o.record_timeline = false;
    Result<SimResult> sim = simulate(*g, r->schedule, cost, o);
    ASSERT_TRUE(sim.ok()) << sim.status().message();
    EXPECT_TRUE(sim->feasible) << policy << ": " << sim->reason;
    EXPECT_EQ(sim->peak_device_bytes, r->device_bytes) << policy;
    EXPECT_EQ(sim->num_swap_outs > 0, r->swapped_tensors > 0) << policy;
    EXPECT_EQ(sim->num_recomputes > 0, r->recomputed_tensors > 0) << policy;
    // A budget one alignment unit below what the plan needs is infeasible for the same plan.
    o.budget_bytes = r->device_bytes - 64;
    Result<SimResult> tight = simulate(*g, r->schedule, cost, o);
    ASSERT_TRUE(tight.ok());
    EXPECT_FALSE(tight->feasible) << policy;
  }
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, PolicySimTest,
                         ::testing::Values("none", "ferry", "vdnn-all", "vdnn-conv", "lru", "lms", "capuchin",
                                           "checkpoint-sqrt", "checkmate"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace ferry
