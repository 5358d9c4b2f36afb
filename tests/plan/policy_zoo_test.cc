// Every policy on the three small zoo models at 100% and 50% of the `none` plan's device bytes
// and at the policy's own minimum: plans must lower, fit what they claim, and infeasible requests
// must name the smallest budget that fits.
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "graph/zoo/zoo.h"
#include "plan/policies.h"
#include "plan/policy_test_util.h"

namespace ferry {
namespace {

using policy_test::legal_and_measured;
using policy_test::round_cost;

using Case = std::tuple<std::string, std::string>;  // model, policy

class PolicyZooTest : public ::testing::TestWithParam<Case> {};

TEST_P(PolicyZooTest, PlansLowerAndFitAtFullHalfAndMinimumBudgets) {
  const auto& [model, policy] = GetParam();
  ModelConfig config;
  config.batch = 2;
  Result<Graph> g = build_model(model, config);
  ASSERT_TRUE(g.ok()) << g.status().message();
  const CostModel cost = round_cost();
  PlanContext ctx{.graph = *g, .cost = cost};
  // A node limit, not a time limit: the same MILP gets the same answer on any machine.
  ctx.options.checkmate_max_nodes = 5;
  ctx.options.checkmate_time_limit_s = 600;
  ctx.tier = policy == "lms" ? Tier::kSsd : Tier::kHost;
  ctx.op_scratch_bytes = policy_test::backend_like_scratch(*g);

  Result<PlanReport> none = plan_policy("none", ctx);
  ASSERT_TRUE(none.ok()) << none.status().message();
  const uint64_t full = none->device_bytes;
  Result<uint64_t> min = find_min_budget(policy, ctx);
  ASSERT_TRUE(min.ok()) << min.status().message();
  EXPECT_EQ(*min % ctx.alignment, 0u);
  const bool budget_aware = [&] {
    for (const PolicyInfo& p : list_policies())
      if (p.name == policy) return p.budget_aware;
    return false;
  }();
  if (budget_aware) {
    EXPECT_LE(*min, full);
  }

  for (uint64_t budget : {full, full / 2, *min}) {
    SCOPED_TRACE(fmt::format("{} {} budget {} ({:.1f}% of none)", model, policy, budget, 100.0 * budget / full));
    ctx.budget_bytes = budget;
    Result<PlanReport> r = plan_policy(policy, ctx);
    if (r.ok()) {
      EXPECT_EQ(r->schedule.policy, policy);
      EXPECT_EQ(r->schedule.budget_bytes, budget);
      EXPECT_LE(r->device_bytes, budget);
      EXPECT_LE(r->live_peak_bytes, r->device_bytes);
      EXPECT_TRUE(legal_and_measured(*g, *r, ctx.op_scratch_bytes));
      if (budget_aware && budget >= full) {
        EXPECT_EQ(r->schedule.num_actions(), 0u) << "nothing needs to move when everything fits";
      }
    } else {
      EXPECT_EQ(r.status().code(), StatusCode::kOutOfMemory) << r.status().message();
      EXPECT_LT(budget, *min);
      EXPECT_TRUE(plan_test::contains(r.status().message(), fmt::format("{} bytes", *min)));
    }
    if (budget == *min) {
      EXPECT_TRUE(r.ok()) << "the minimum budget must fit";
    }
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  // ferry-exact solves a MILP per probe (minutes on these graphs): tests/plan/ferry_planner_test.cc
  // checks it on small graphs.
  for (const char* model : {"resnet-mini", "densenet-mini", "gpt2-mini"})
    for (const PolicyInfo& p : list_policies())
      if (p.name != "ferry-exact") out.emplace_back(model, p.name);
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, PolicyZooTest, ::testing::ValuesIn(cases()), [](const auto& info) {
  return policy_test::param_name(std::get<0>(info.param) + "_" + std::get<1>(info.param));
});

TEST(PolicyRegistryTest, ListsThePoliciesWithTheirPapers) {
  std::vector<std::string> names;
  for (const PolicyInfo& p : list_policies()) {
    names.push_back(p.name);
    EXPECT_FALSE(p.paper.empty());
    EXPECT_FALSE(p.summary.empty());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"none", "ferry", "ferry-exact", "vdnn-all", "vdnn-conv", "lru", "lms",
                                             "capuchin", "checkpoint-sqrt", "checkmate"}));
}

TEST(PolicyRegistryTest, UnknownPolicyListsTheKnownOnes) {
  policy_test::Chain c({1024, 1024}, {0, 1});
  const CostModel cost = round_cost();
  const PlanContext ctx{.graph = c.g(), .cost = cost};
  Result<Schedule> s = make_schedule("fifo", ctx);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(plan_test::contains(s.status().message(), "unknown policy 'fifo'"));
  EXPECT_TRUE(plan_test::contains(s.status().message(), "checkpoint-sqrt"));
}

TEST(PolicyRegistryTest, NoneIsTheEmptySchedule) {
  policy_test::Chain c({1024, 2048, 1024}, {0, 1, 1});
  const CostModel cost = round_cost();
  const PlanContext ctx{.graph = c.g(), .cost = cost};
  Result<Schedule> s = make_schedule("none", ctx);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->num_actions(), 0u);
  EXPECT_EQ(s->policy, "none");
}

TEST(PolicyRegistryTest, ScratchSizesMustMatchTheGraph) {
  policy_test::Chain c({1024, 2048, 1024}, {0, 1, 1});
  const CostModel cost = round_cost();
  PlanContext ctx{.graph = c.g(), .cost = cost};
  ctx.op_scratch_bytes = {1, 2, 3};
  Result<PlanReport> r = plan_policy("lru", ctx);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ferry
