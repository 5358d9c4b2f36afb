// Swapping and recomputation never change the numbers, never exceed the budget, and run exactly
// as predicted: for every policy, on a small ResNet, DenseNet and transformer, at 100% and 50% of
// the no-plan peak and at the policy's own minimum, on both tiers, three training iterations give
// bitwise the losses and final weights of training without a plan; the arena's measured peak is
// at most the budget and equals the simulator's prediction. A few cases compile the convolutions
// as Winograd, whose scratch (MiBs per kernel) the plans must place like any other.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "backend/backend.h"
#include "cost/cost_model.h"
#include "cost/profile.h"
#include "data/data.h"
#include "graph/zoo/zoo.h"
#include "plan/policies.h"
#include "runtime/executor.h"
#include "sim/simulator.h"

namespace ferry {
namespace {

constexpr int kIters = 3;

struct Outcome {
  std::vector<float> losses;
  std::vector<std::vector<std::byte>> weights;
  uint64_t peak = 0;
  uint64_t swapped_bytes = 0;
};

Graph model(const std::string& name) {
  ModelConfig c;
  c.batch = 4;
  c.train.optimizer = OptimizerKind::kAdam;
  c.train.lr = 1e-3f;
  if (name.rfind("gpt2", 0) == 0) c.seq = 32;
  return build_model(name, c).value();
}

// The tier is part of the schedule's actions; the executor makes the tiers the program uses.
Result<Outcome> train(const Graph& g, const Schedule* schedule, uint64_t budget, const BackendOptions& bo) {
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, make_backend("cpu", bo));
  ExecutorOptions o;
  o.seed = 11;
  o.budget_bytes = budget;
  o.checksum = true;  // every swapped byte is verified on its way back
  o.ssd_dir = std::filesystem::temp_directory_path().string();
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Executor> ex, Executor::create(g, *backend, o, schedule));
  FERRY_RETURN_IF_ERROR(ex->initialize());
  auto data = make_synthetic_data(11);
  Outcome out;
  for (int i = 0; i < kIters; ++i) {
    FERRY_ASSIGN_OR_RETURN(IterationStats st, ex->run_iteration(i, *data));
    out.losses.push_back(st.loss);
  }
  for (const Tensor& t : g.tensors)
    if (t.role == TensorRole::kWeight) {
      FERRY_ASSIGN_OR_RETURN(std::vector<std::byte> w, ex->read_persistent(t.id));
      out.weights.push_back(std::move(w));
    }
  out.peak = ex->peak_device_bytes();
  out.swapped_bytes = ex->transfer_stats().bytes_out;
  return out;
}

struct Case {
  const char* model;
  const char* policy;
  ConvAlgorithm conv = ConvAlgorithm::kAuto;
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.model << " with " << c.policy << ", convolutions " << to_string(c.conv);
}

class SwapIdentity : public ::testing::TestWithParam<Case> {};

TEST_P(SwapIdentity, BitwiseIdenticalWithinBudgetAsPredicted) {
  const Case c = GetParam();
  const Graph g = model(c.model);
  const BackendOptions bo{.conv_algorithm = c.conv};
  Result<Outcome> reference = train(g, nullptr, 0, bo);
  ASSERT_TRUE(reference.ok()) << reference.status().message();

  // Plan with the backend's real sizes, as `ferry train` does.
  Graph sized = g;
  auto backend = make_backend("cpu", bo).value();
  auto compiled = backend->compile(g).value();
  for (Tensor& t : sized.tensors) t.bytes = compiled->tensor_bytes(t.id);
  const std::vector<uint64_t> scratch = compiled->all_scratch_bytes();
  const CostModel cost(load_profile("cpu-local").value());
  PlanContext ctx{.graph = sized, .cost = cost, .budget_bytes = 0, .tier = Tier::kHost, .op_scratch_bytes = scratch};
  // Checkmate: a node limit instead of a time limit keeps CBC's answer the same on a loaded machine.
  ctx.options.checkmate_time_limit_s = 600;
  ctx.options.checkmate_max_nodes = 200;

  int ran = 0;
  for (Tier tier : {Tier::kHost, Tier::kSsd}) {
    // The minimum depends on the tier for time-driven policies (capuchin weighs transfer times).
    ctx.tier = tier;
    Result<uint64_t> min_budget = find_min_budget(c.policy, ctx);
    if (!min_budget.ok() && min_budget.status().code() == StatusCode::kUnsupported)
      GTEST_SKIP() << min_budget.status().message();
    ASSERT_TRUE(min_budget.ok()) << min_budget.status().message();
    for (double fraction : {1.0, 0.5, 0.0}) {
      const uint64_t budget =
          fraction > 0 ? static_cast<uint64_t>(static_cast<double>(reference->peak) * fraction) : *min_budget;
      PlanContext at = ctx;
      at.budget_bytes = budget;
      at.tier = tier;
      Result<PlanReport> plan = plan_policy(c.policy, at);
      if (!plan.ok()) {
        // Only a budget below the policy's minimum may be refused, and it must say so.
        ASSERT_EQ(plan.status().code(), StatusCode::kOutOfMemory) << plan.status().message();
        ASSERT_LT(budget, *min_budget) << plan.status().message();
        continue;
      }
      SCOPED_TRACE(::testing::Message() << c.policy << " on " << c.model << ", budget " << budget << " ("
                                        << fraction * 100 << "%), tier " << to_string(tier));
      SimOptions so;
      so.budget_bytes = budget;
      so.op_scratch_bytes = scratch;
      so.record_timeline = false;
      Result<SimResult> predicted = simulate(sized, plan->schedule, cost, so);
      ASSERT_TRUE(predicted.ok()) << predicted.status().message();
      EXPECT_TRUE(predicted->feasible) << predicted->reason;

      Result<Outcome> run = train(g, &plan->schedule, budget, bo);
      ASSERT_TRUE(run.ok()) << run.status().message();
      ++ran;
      EXPECT_LE(run->peak, budget);
      EXPECT_EQ(run->peak, predicted->peak_device_bytes);
      ASSERT_EQ(run->losses.size(), reference->losses.size());
      EXPECT_EQ(0, std::memcmp(run->losses.data(), reference->losses.data(), sizeof(float) * kIters));
      EXPECT_TRUE(run->weights == reference->weights) << "final weights differ";
    }
  }
  EXPECT_GE(ran, 2) << "the policy must run at least at its minimum budget on both tiers";
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (const char* m : {"resnet-mini", "densenet-mini", "gpt2-mini"})
    for (const char* p : {"vdnn-all", "vdnn-conv", "lru", "lms", "capuchin", "checkpoint-sqrt", "checkmate"})
      v.push_back({m, p});
  for (const char* p : {"lru", "capuchin"}) v.push_back({"resnet-mini", p, ConvAlgorithm::kWinograd});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Policies, SwapIdentity, ::testing::ValuesIn(cases()), [](const auto& info) {
  std::string n = std::string(info.param.model) + "_" + info.param.policy;
  if (info.param.conv != ConvAlgorithm::kAuto) n += "_" + std::string(to_string(info.param.conv));
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

}  // namespace
}  // namespace ferry
