// Gradient accumulation (two forward/backward passes in one iteration, weight gradients summed
// into a chain of storage versions: trace format v2) trained on the CPU executor under a plan.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "backend/backend.h"
#include "common/accumulate_graph.h"
#include "cost/cost_model.h"
#include "cost/profile.h"
#include "graph/zoo/zoo.h"
#include "plan/policies.h"
#include "runtime/executor.h"
#include "training_run.h"

namespace ferry {
namespace {

// Training on the CPU executor with gradient accumulation under a ferry plan at 60% of the
// no-plan peak gives bitwise the losses and weights of training it without a plan, within budget.
TEST(AccumulationTraining, FerryPlanIsBitwiseIdenticalWithinBudget) {
  ModelConfig c;
  c.batch = 2;
  c.train.optimizer = OptimizerKind::kAdam;
  c.train.lr = 1e-3f;
  const Graph two = test::accumulate_two(build_model("resnet-mini", c).value());
  // Plan with the backend's real sizes and scratch, as `ferry train` does.
  auto backend = make_backend("cpu", BackendOptions{}).value();
  auto compiled = backend->compile(two).value();
  const Graph sized = with_backend_sizes(two, *compiled);
  const CostModel cost(load_profile("cpu-local").value());
  PlanContext ctx{.graph = sized, .cost = cost, .op_scratch_bytes = compiled->all_scratch_bytes()};
  Result<PlanReport> none = plan_policy("none", ctx);
  ASSERT_TRUE(none.ok());
  ctx.budget_bytes = none->device_bytes * 6 / 10;
  Result<PlanReport> plan = plan_policy("ferry", ctx);
  ASSERT_TRUE(plan.ok()) << plan.status().message();

  auto train = [&](const Schedule* s, uint64_t budget) {
    ExecutorOptions o;
    o.seed = 5;
    o.budget_bytes = budget;
    o.checksum = true;
    o.ssd_dir = std::filesystem::temp_directory_path().string();
    return test::run_training(two, s, o, 2);
  };
  Result<test::TrainingRun> base = train(nullptr, 0);
  ASSERT_TRUE(base.ok()) << base.status().message();
  Result<test::TrainingRun> planned = train(&plan->schedule, ctx.budget_bytes);
  ASSERT_TRUE(planned.ok()) << planned.status().message();
  EXPECT_GT(planned->executor->transfer_stats().bytes_out + planned->recomputed_ops, 0u)
      << "the plan must move or recompute something";
  EXPECT_LE(planned->executor->measured_peak_bytes(), ctx.budget_bytes);
  ASSERT_EQ(base->losses.size(), planned->losses.size());
  for (size_t i = 0; i < base->losses.size(); ++i)
    EXPECT_EQ(std::memcmp(&base->losses[i], &planned->losses[i], sizeof(float)), 0) << "iteration " << i;
  EXPECT_TRUE(base->persistent == planned->persistent) << "weights and optimizer state bitwise equal";
}

}  // namespace
}  // namespace ferry
