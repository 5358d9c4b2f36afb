// The Ferry planner against the seed policies on the zoo's small models: wherever a seed policy's
// plan fits, ferry's fits too and is simulated at least as fast (ties allowed); and ferry's
// feasibility is monotone in the budget above its --find-min-budget answer.
#include <algorithm>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/units.h"
#include "graph/zoo/zoo.h"
#include "plan/policies.h"
#include "plan/policy_test_util.h"

namespace ferry {
namespace {

using policy_test::simulated_us;

// A small zoo model at batch 2 with the round cost model and backend-like scratch; `full` is the
// keep plan's device bytes.
class SmallModelPlan : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ModelConfig config;
    config.batch = 2;
    Result<Graph> g = build_model(GetParam(), config);
    ASSERT_TRUE(g.ok()) << g.status().message();
    graph_ = std::move(*g);
    ctx_.emplace(PlanContext{.graph = graph_, .cost = cost_});
    ctx_->options.checkmate_max_nodes = 5;  // deterministic on any machine
    ctx_->options.checkmate_time_limit_s = 600;
    ctx_->op_scratch_bytes = policy_test::backend_like_scratch(graph_);
    Result<PlanReport> none = plan_policy("none", *ctx_);
    ASSERT_TRUE(none.ok());
    full_ = none->device_bytes;
  }
  Graph graph_;
  const CostModel cost_ = policy_test::round_cost();
  std::optional<PlanContext> ctx_;
  uint64_t full_ = 0;
};

class FerryVsSeeds : public SmallModelPlan {};

TEST_P(FerryVsSeeds, FitsWhereverASeedPolicyFitsAndIsAtLeastAsFast) {
  PlanContext& ctx = *ctx_;
  const uint64_t full = full_;
  for (Tier tier : {Tier::kHost, Tier::kSsd}) {
    ctx.tier = tier;
    for (double fraction : {0.8, 0.6, 0.4}) {
      ctx.budget_bytes = static_cast<uint64_t>(fraction * static_cast<double>(full));
      Result<PlanReport> ferry = plan_policy("ferry", ctx);
      const double ferry_us = ferry.ok() ? simulated_us(ctx, ferry->schedule) : 0;
      for (const PolicyInfo& p : list_policies()) {
        if (p.name == "none" || p.name == "ferry" || p.name == "ferry-exact") continue;
        SCOPED_TRACE(fmt::format("{} at {:.0f}% on {}: {}", GetParam(), 100 * fraction, to_string(tier), p.name));
        Result<PlanReport> seed = plan_policy(p.name, ctx);
        if (!seed.ok()) continue;
        ASSERT_TRUE(ferry.ok()) << "ferry must fit where " << p.name << " does: " << ferry.status().message();
        const double seed_us = simulated_us(ctx, seed->schedule);
        EXPECT_LE(ferry_us, seed_us * (1 + 1e-9)) << "ferry " << ferry_us << " us, " << p.name << " " << seed_us;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(SmallModels, FerryVsSeeds,
                         ::testing::Values("resnet-mini", "densenet-mini", "gpt2-mini"),
                         [](const auto& info) { return policy_test::param_name(info.param); });

// The seed portfolio planned on a second thread (PolicyOptions::parallel_portfolio) gives the plan
// the sequential portfolio gives. Cases where a seed's plan wins with the round cost model
// (checkmate's, capuchin's), one where ferry's own does, and one where only its tight variants fit
// (densenet-mini at 50%: lru's plan won there before they existed).
class FerryPortfolio : public SmallModelPlan {};

TEST_P(FerryPortfolio, TheSecondThreadChangesNoPlan) {
  PlanContext& ctx = *ctx_;
  struct Case {
    Tier tier;
    double fraction;
    const char* winner;  // the portfolio's winner, as its notes name it ("" for ferry's own)
  };
  std::vector<Case> cases;
  if (GetParam() == "gpt2-mini") cases = {{Tier::kSsd, 0.75, "checkmate"}, {Tier::kSsd, 0.5, ""}};
  if (GetParam() == "densenet-mini") cases = {{Tier::kHost, 0.5, ""}};
  if (GetParam() == "resnet-mini") cases = {{Tier::kSsd, 0.9, "capuchin"}};
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{} at {:.0f}% on {}", GetParam(), 100 * c.fraction, to_string(c.tier)));
    ctx.tier = c.tier;
    ctx.budget_bytes = static_cast<uint64_t>(c.fraction * static_cast<double>(full_));
    ctx.options.parallel_portfolio = false;
    Result<PlanReport> sequential = plan_policy("ferry", ctx);
    ctx.options.parallel_portfolio = true;
    Result<PlanReport> parallel = plan_policy("ferry", ctx);
    ASSERT_TRUE(sequential.ok()) << sequential.status().message();
    ASSERT_TRUE(parallel.ok()) << parallel.status().message();
    EXPECT_TRUE(sequential->schedule.same_actions(parallel->schedule));
    EXPECT_EQ(sequential->device_bytes, parallel->device_bytes);
    // Which plan won (checkmate's notes carry its solve time, which differs between runs).
    const auto winner = [](const std::string& notes) -> std::string {
      const std::string prefix = "the plan of seed policy ";
      if (notes.rfind(prefix, 0) != 0) return "";
      return notes.substr(prefix.size(), notes.find(" was faster") - prefix.size());
    };
    EXPECT_EQ(winner(sequential->notes), c.winner) << sequential->notes;
    EXPECT_EQ(winner(parallel->notes), c.winner) << parallel->notes;
  }
}

INSTANTIATE_TEST_SUITE_P(SmallModels, FerryPortfolio, ::testing::Values("resnet-mini", "gpt2-mini", "densenet-mini"),
                         [](const auto& info) { return policy_test::param_name(info.param); });

class FerryMinBudget : public SmallModelPlan {};

// The search's probes stop at the first plan that fits (PolicyOptions::first_fit); the plans here
// are whole searches, so they check its answer. At each budget a first-fit plan fits exactly where
// the whole search does, and within its budget.
TEST_P(FerryMinBudget, FeasibilityIsMonotoneAboveTheMinimumBudget) {
  PlanContext& ctx = *ctx_;
  const uint64_t full = full_;
  Result<uint64_t> min = find_min_budget("ferry", ctx);
  ASSERT_TRUE(min.ok()) << min.status().message();
  EXPECT_LT(*min, full);
  ctx.name_smallest_budget = false;
  auto fits = [&](uint64_t budget) {
    ctx.budget_bytes = budget;
    PlanContext probe = ctx;
    probe.options.first_fit = true;
    Result<PlanReport> whole = plan_policy("ferry", ctx), first = plan_policy("ferry", probe);
    EXPECT_EQ(whole.ok(), first.ok()) << "a first-fit probe at " << budget << " bytes disagrees: "
                                      << (whole.ok() ? first : whole).status().message();
    if (first.ok()) {
      EXPECT_LE(first->device_bytes, budget);
    }
    if (!whole.ok()) {
      EXPECT_EQ(whole.status().code(), StatusCode::kOutOfMemory) << whole.status().message();
    }
    return whole.ok();
  };
  // Every budget from the minimum up to the full peak, in steps of 4% of it, fits.
  for (uint64_t budget = *min; budget <= full; budget += full / 25)
    EXPECT_TRUE(fits(budget)) << fmt::format("{}: ferry fits at {} bytes but not at {}", GetParam(), *min, budget);
  // Below it, on the 1% grid the search scans, none does (find_min_budget's contract).
  const uint64_t step = align_up(std::max<uint64_t>(full / 100, 1), ctx.alignment);
  for (uint64_t k = 1; k <= 2 && k * step < *min; ++k)
    EXPECT_FALSE(fits(*min - k * step)) << "fits " << k << "% below the minimum";
}

// densenet-mini takes two minutes of planning here; these two cover a CNN and a transformer.
INSTANTIATE_TEST_SUITE_P(SmallModels, FerryMinBudget, ::testing::Values("resnet-mini", "gpt2-mini"),
                         [](const auto& info) { return policy_test::param_name(info.param); });

}  // namespace
}  // namespace ferry
