// Lossy stashing (`ferry train --lossy bf16`, ExecutorOptions::ssd_lossy_activations): a plan that
// swaps activations to the SSD tier with bf16 stashing trains within its budget, moves about half
// the disk bytes of the lossless run, and stays close to the lossless losses without being
// bitwise equal to them (the rounding is real); the same plan without lossy stashing is bitwise
// the run without a plan; combining it with the memory checks is refused up front.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "backend/backend.h"
#include "cost/cost_model.h"
#include "cost/profile.h"
#include "graph/zoo/zoo.h"
#include "plan/policies.h"
#include "runtime/executor.h"
#include "training_run.h"

namespace ferry {
namespace {

TEST(LossyStashing, Bf16ActivationsOnTheSsdTierTrainCloseToLossless) {
  ModelConfig c;
  c.batch = 8;
  const Graph g = build_model("resnet-mini", c).value();
  auto backend = make_backend("cpu").value();
  auto compiled = backend->compile(g).value();
  const Graph sized = with_backend_sizes(g, *compiled);
  const CostModel cost(load_profile("cpu-local").value());
  PlanContext ctx{.graph = sized, .cost = cost, .budget_bytes = 0, .tier = Tier::kSsd,
                  .op_scratch_bytes = compiled->all_scratch_bytes()};
  Result<PlanReport> plan = plan_policy("vdnn-all", ctx);  // every conv input swapped out
  ASSERT_TRUE(plan.ok()) << plan.status().message();

  ExecutorOptions o;
  o.seed = 4;
  o.ssd_dir = std::filesystem::temp_directory_path().string();
  o.checksum = true;
  constexpr int kIters = 4;
  Result<test::TrainingRun> reference = test::run_training(g, nullptr, o, kIters);
  ASSERT_TRUE(reference.ok()) << reference.status().message();
  Result<test::TrainingRun> lossless = test::run_training(g, &plan->schedule, o, kIters);
  ASSERT_TRUE(lossless.ok()) << lossless.status().message();
  EXPECT_EQ(lossless->losses, reference->losses);
  o.ssd_lossy_activations = true;
  Result<test::TrainingRun> lossy = test::run_training(g, &plan->schedule, o, kIters);
  ASSERT_TRUE(lossy.ok()) << lossy.status().message();

  const SsdIoStats exact_io = lossless->executor->ssd_io_stats(), lossy_io = lossy->executor->ssd_io_stats();
  ASSERT_GT(exact_io.disk_bytes_written, 0u);
  EXPECT_LT(lossy_io.disk_bytes_written, exact_io.disk_bytes_written * 6 / 10);  // activations halved
  EXPECT_LE(lossy->executor->measured_peak_bytes(), lossy->executor->budget_bytes());
  ASSERT_EQ(lossy->losses.size(), reference->losses.size());
  EXPECT_EQ(lossy->losses.front(), reference->losses.front());  // the first forward pass reads nothing swapped
  EXPECT_NE(lossy->losses, reference->losses);                  // later ones train on rounded gradients
  for (size_t i = 0; i < lossy->losses.size(); ++i)
    EXPECT_NEAR(lossy->losses[i], reference->losses[i], 0.02 * std::abs(reference->losses[i])) << "iteration " << i;

  o.verify_memory = true;
  Result<test::TrainingRun> refused = test::run_training(g, &plan->schedule, o, 1);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ferry
