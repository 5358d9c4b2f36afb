// A host-memory budget (--host-budget): the plan's copies beyond the budget cascade to the SSD
// tier (plan/tier_cascade.h), the executor sizes the host tier at the budget and fixes every copy
// where the tier placement puts it (schedule/tier_placement.h). Training then gives bitwise the
// losses, weights and optimizer state of training without a plan, the host tier's measured peak
// (its own space accounting) stays within the budget, and the SSD tier really carries the rest.
// A host tier smaller than the plan needs is refused before anything runs.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "backend/backend.h"
#include "cost/cost_model.h"
#include "cost/profile.h"
#include "data/data.h"
#include "graph/zoo/zoo.h"
#include "plan/policies.h"
#include "plan/tier_cascade.h"
#include "runtime/executor.h"
#include "training_run.h"

namespace ferry {
namespace {

constexpr int kIters = 3;

struct Trained {
  std::vector<float> losses;
  std::vector<std::vector<std::byte>> persistent;
  TierStats host, ssd;
  uint64_t predicted_host_bytes = 0;
};

Result<Trained> train(const Graph& g, const Schedule* s, uint64_t budget, uint64_t host_tier_bytes) {
  ExecutorOptions o;
  o.seed = 5;
  o.budget_bytes = budget;
  o.host_tier_bytes = host_tier_bytes;
  o.checksum = true;
  o.ssd_dir = std::filesystem::temp_directory_path().string();
  FERRY_ASSIGN_OR_RETURN(test::TrainingRun run, test::run_training(g, s, o, kIters));
  Trained r;
  r.losses = std::move(run.losses);
  r.persistent = std::move(run.persistent);
  r.host = run.executor->host_tier_stats();
  r.ssd = run.executor->ssd_tier_stats();
  r.predicted_host_bytes = run.executor->tier_placement(Tier::kHost).bytes;
  return r;
}

class HostBudget : public ::testing::TestWithParam<const char*> {};

TEST_P(HostBudget, SpillsToSsdWithinTheBudgetAndTrainsBitwiseTheSame) {
  ModelConfig c;
  c.batch = 4;
  c.train.optimizer = OptimizerKind::kAdam;
  c.train.lr = 1e-3f;
  const std::string name = GetParam();
  if (name.rfind("gpt2", 0) == 0) c.seq = 32;
  const Graph g = build_model(name, c).value();
  Result<Trained> reference = train(g, nullptr, 0, 0);
  ASSERT_TRUE(reference.ok()) << reference.status().message();

  auto backend = make_backend("cpu").value();
  auto compiled = backend->compile(g).value();
  const Graph sized = with_backend_sizes(g, *compiled);
  const CostModel cost(load_profile("cpu-local").value());
  PlanContext ctx{.graph = sized, .cost = cost, .tier = Tier::kHost, .op_scratch_bytes = compiled->all_scratch_bytes()};
  const uint64_t none = plan_policy("none", ctx).value().device_bytes;
  Result<PlanReport> plan = Status::Internal("unplanned");
  uint64_t budget = 0;
  for (double f : {0.5, 0.6, 0.7, 0.8}) {  // the first budget ferry fits
    budget = static_cast<uint64_t>(static_cast<double>(none) * f);
    ctx.budget_bytes = budget;
    plan = plan_policy("ferry", ctx);
    if (plan.ok()) break;
  }
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  const TierNeeds uncapped = tier_needs(ctx, plan->schedule).value();
  ASSERT_GT(uncapped.host_bytes, 0u);

  // The uncapped plan does not fit a host tier of half its need: refused before anything runs.
  const uint64_t host_budget = uncapped.host_bytes / 2;
  Result<Trained> refused = train(g, &plan->schedule, budget, host_budget);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(refused.status().message().find("host tier"), std::string::npos) << refused.status().message();

  Schedule spilled = plan->schedule;
  Result<CascadeReport> cascade = cascade_to_ssd(ctx, spilled, host_budget);
  ASSERT_TRUE(cascade.ok()) << cascade.status().message();
  ASSERT_GT(cascade->moved_tensors, 0u);
  Result<Trained> run = train(g, &spilled, budget, host_budget);
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_EQ(run->host.capacity_bytes, host_budget);
  EXPECT_GT(run->host.peak_in_use_bytes, 0u);
  EXPECT_LE(run->host.peak_in_use_bytes, host_budget);
  EXPECT_LE(run->host.peak_in_use_bytes, run->predicted_host_bytes);
  EXPECT_EQ(run->predicted_host_bytes, cascade->after.host_bytes);
  EXPECT_GT(run->ssd.bytes_written, 0u);
  EXPECT_GT(run->ssd.bytes_read, 0u);
  EXPECT_EQ(0, std::memcmp(run->losses.data(), reference->losses.data(), sizeof(float) * kIters));
  ASSERT_EQ(run->persistent.size(), reference->persistent.size());
  for (size_t i = 0; i < run->persistent.size(); ++i)
    EXPECT_TRUE(run->persistent[i] == reference->persistent[i]) << "persistent tensor " << i << " differs";
}

INSTANTIATE_TEST_SUITE_P(Models, HostBudget, ::testing::Values("resnet-mini", "gpt2-mini"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace ferry
