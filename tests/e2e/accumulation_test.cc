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
#include "data/data.h"
#include "graph/zoo/zoo.h"
#include "plan/policies.h"
#include "runtime/executor.h"

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

  struct Run {
    std::vector<float> losses;
    std::vector<std::vector<std::byte>> persistent;
    uint64_t measured_peak = 0, moved = 0;
    size_t recomputed = 0;
  };
  auto train = [&](const Schedule* s, uint64_t budget) -> Result<Run> {
    FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, make_backend("cpu", BackendOptions{}));
    ExecutorOptions o;
    o.seed = 5;
    o.budget_bytes = budget;
    o.checksum = true;
    o.ssd_dir = std::filesystem::temp_directory_path().string();
    FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Executor> ex, Executor::create(two, *backend, o, s));
    FERRY_RETURN_IF_ERROR(ex->initialize());
    auto data = make_synthetic_data(5);
    Run out;
    for (int i = 0; i < 2; ++i) {
      FERRY_ASSIGN_OR_RETURN(IterationStats st, ex->run_iteration(i, *data));
      out.losses.push_back(st.loss);
      out.recomputed += ex->last_recomputed_ops();
    }
    for (const Tensor& t : two.tensors)
      if (t.persistent()) {
        FERRY_ASSIGN_OR_RETURN(std::vector<std::byte> w, ex->read_persistent(t.id));
        out.persistent.push_back(std::move(w));
      }
    out.measured_peak = ex->measured_peak_bytes();
    out.moved = ex->transfer_stats().bytes_out;
    return out;
  };
  Result<Run> base = train(nullptr, 0);
  ASSERT_TRUE(base.ok()) << base.status().message();
  Result<Run> planned = train(&plan->schedule, ctx.budget_bytes);
  ASSERT_TRUE(planned.ok()) << planned.status().message();
  EXPECT_GT(planned->moved + planned->recomputed, 0u) << "the plan must move or recompute something";
  EXPECT_LE(planned->measured_peak, ctx.budget_bytes);
  ASSERT_EQ(base->losses.size(), planned->losses.size());
  for (size_t i = 0; i < base->losses.size(); ++i)
    EXPECT_EQ(std::memcmp(&base->losses[i], &planned->losses[i], sizeof(float)), 0) << "iteration " << i;
  EXPECT_TRUE(base->persistent == planned->persistent) << "weights and optimizer state bitwise equal";
}

}  // namespace
}  // namespace ferry
