// Swapping and recomputation never change the numbers, never exceed the budget, and run exactly
// as predicted: for every policy, on a small ResNet, DenseNet and transformer, at 100% and 50% of
// the no-plan peak and at the policy's own minimum, on both tiers, three training iterations give
// bitwise the losses, the final weights and the final optimizer state of training without a plan.
// Every case asserts that the plan really moved bytes or recomputed ops, as the executor counted
// them (a case in which nothing moves proves nothing, and is not claimed: budget-aware policies
// keep everything at 100%, so that budget is skipped for them, and vdnn-conv has nothing to move
// in a model without convolutions). Memory is measured by the executor's own accounting and
// compared with the simulator's prediction: the live peak equal, the highest byte written no
// higher than the predicted arena, both within the budget. A few cases compile the convolutions
// as Winograd, whose scratch (MiBs per kernel) the plans must place like any other.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "backend/backend.h"
#include "cost/cost_model.h"
#include "cost/profile.h"
#include "data/data.h"
#include "graph/zoo/zoo.h"
#include "plan/policies.h"
#include "runtime/executor.h"
#include "sim/simulator.h"
#include "training_run.h"

namespace ferry {
namespace {

constexpr int kIters = 3;

struct Outcome {
  std::vector<float> losses;
  std::vector<std::vector<std::byte>> persistent;  // weights and optimizer state, in tensor order
  uint64_t predicted_peak = 0;   // the plan's arena (for the reference: the no-swap peak)
  uint64_t measured_peak = 0;    // live bytes, the executor's accounting
  uint64_t measured_extent = 0;  // highest byte written, an arena scan
  uint64_t swapped_bytes = 0;    // transfer engine: bytes that went out
  size_t recomputed_ops = 0;     // kernels run again, summed over iterations
  uint64_t ssd_disk_bytes_written = 0;  // the SSD tier's counters: bytes that crossed the disk
  uint64_t ssd_disk_bytes_read = 0;
  SsdIoStats ssd_io;                       // all of the SSD tier's counters (in-place bytes too)
  std::vector<CodecFigure> codec_figures;  // measured by the SSD tier (ssd_measure_codecs)
  HostIoStats host_io;                     // the host tier's counters: bytes its memory took
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
Result<Outcome> train(const Graph& g, const Schedule* schedule, uint64_t budget, const BackendOptions& bo,
                      bool measure_codecs = false, CodecId host_codec = CodecId::kNone) {
  ExecutorOptions o;
  o.seed = 11;
  o.budget_bytes = budget;
  o.checksum = true;  // every swapped byte is verified on its way back
  o.ssd_dir = std::filesystem::temp_directory_path().string();
  o.ssd_measure_codecs = measure_codecs;
  o.host_codec = host_codec;
  FERRY_ASSIGN_OR_RETURN(test::TrainingRun run, test::run_training(g, schedule, o, kIters, bo));
  const Executor& ex = *run.executor;
  Outcome out;
  out.losses = std::move(run.losses);
  out.persistent = std::move(run.persistent);
  out.recomputed_ops = run.recomputed_ops;
  out.predicted_peak = ex.predicted_peak_bytes();
  out.measured_peak = ex.measured_peak_bytes();
  FERRY_ASSIGN_OR_RETURN(out.measured_extent, ex.measured_extent_bytes());
  out.swapped_bytes = ex.transfer_stats().bytes_out;
  out.ssd_disk_bytes_written = ex.ssd_io_stats().disk_bytes_written;
  out.ssd_disk_bytes_read = ex.ssd_io_stats().disk_bytes_read;
  out.ssd_io = ex.ssd_io_stats();
  out.codec_figures = ex.ssd_codec_figures();
  out.host_io = ex.host_io_stats();
  return out;
}

// `g` with the CPU backend's tensor sizes and per-op scratch: what plans for the executor see.
struct BackendSized {
  Graph graph;
  std::vector<uint64_t> scratch;
};
BackendSized backend_sized(const Graph& g, const BackendOptions& bo) {
  auto backend = make_backend("cpu", bo).value();
  auto compiled = backend->compile(g).value();
  return {with_backend_sizes(g, *compiled), compiled->all_scratch_bytes()};
}

struct Case {
  const char* model;
  const char* policy;
  ConvAlgorithm conv = ConvAlgorithm::kAuto;
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.model << " with " << c.policy << ", convolutions " << to_string(c.conv);
}

bool budget_aware(const std::string& policy) {
  for (const PolicyInfo& p : list_policies())
    if (p.name == policy) return p.budget_aware;
  return false;
}

class SwapIdentity : public ::testing::TestWithParam<Case> {};

TEST_P(SwapIdentity, BitwiseIdenticalWithinBudgetAsPredicted) {
  const Case c = GetParam();
  const Graph g = model(c.model);
  const BackendOptions bo{.conv_algorithm = c.conv};
  Result<Outcome> reference = train(g, nullptr, 0, bo);
  ASSERT_TRUE(reference.ok()) << reference.status().message();

  // Plan with the backend's real sizes, as `ferry train` does.
  const auto [sized, scratch] = backend_sized(g, bo);
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
      if (fraction == 1.0 && budget_aware(c.policy)) continue;  // nothing would move
      const uint64_t budget =
          fraction > 0 ? static_cast<uint64_t>(static_cast<double>(reference->predicted_peak) * fraction) : *min_budget;
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
      EXPECT_TRUE(run->swapped_bytes > 0 || run->recomputed_ops > 0)
          << "the plan moved nothing: the case proves nothing";
      EXPECT_LE(run->measured_peak, budget);
      EXPECT_LE(run->measured_extent, budget);
      EXPECT_EQ(run->measured_peak, predicted->peak_in_use_bytes);
      EXPECT_LE(run->measured_extent, predicted->peak_device_bytes);
      ASSERT_EQ(run->losses.size(), reference->losses.size());
      EXPECT_EQ(0, std::memcmp(run->losses.data(), reference->losses.data(), sizeof(float) * kIters));
      ASSERT_EQ(run->persistent.size(), reference->persistent.size());
      for (size_t i = 0; i < run->persistent.size(); ++i)
        EXPECT_TRUE(run->persistent[i] == reference->persistent[i]) << "persistent tensor " << i << " differs";
    }
  }
  EXPECT_GE(ran, 2) << "the policy must run at least at its minimum budget on both tiers";
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (const char* m : {"resnet-mini", "densenet-mini", "gpt2-mini"})
    for (const char* p : {"vdnn-all", "vdnn-conv", "lru", "lms", "capuchin", "checkpoint-sqrt", "checkmate"}) {
      if (std::string(m) == "gpt2-mini" && std::string(p) == "vdnn-conv") continue;  // no convolutions
      v.push_back({m, p});
    }
  for (const char* p : {"lru", "capuchin"}) v.push_back({"resnet-mini", p, ConvAlgorithm::kWinograd});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Policies, SwapIdentity, ::testing::ValuesIn(cases()), [](const auto& info) {
  std::string n = info.param.conv == ConvAlgorithm::kAuto
                      ? fmt::format("{}_{}", info.param.model, info.param.policy)
                      : fmt::format("{}_{}_{}", info.param.model, info.param.policy, to_string(info.param.conv));
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

// Every lossless codec on the SSD tier, forced on every swapped tensor and as the planner chooses
// them per tensor from measured figures (--codec auto), keeps training bitwise identical (losses,
// weights, optimizer state); on a ReLU network the zero-mask codecs move fewer bytes across the
// disk than raw, as the tier counted them.
TEST(CodecSwapIdentity, LosslessCodecsOnTheSsdTierAreBitwiseIdentical) {
  for (const char* m : {"resnet-mini", "gpt2-mini"}) {
    const Graph g = model(m);
    const BackendOptions bo;
    Result<Outcome> reference = train(g, nullptr, 0, bo);
    ASSERT_TRUE(reference.ok()) << reference.status().message();
    const BackendSized sized = backend_sized(g, bo);
    HardwareProfile hw = load_profile("cpu-local").value();
    const CostModel cost(hw);
    PlanContext ctx{.graph = sized.graph, .cost = cost, .budget_bytes = 0, .tier = Tier::kSsd,
                    .op_scratch_bytes = sized.scratch};
    Result<uint64_t> min_budget = find_min_budget("vdnn-all", ctx);  // swaps the most
    ASSERT_TRUE(min_budget.ok()) << min_budget.status().message();
    const uint64_t budget = *min_budget;
    ctx.budget_bytes = budget;
    uint64_t raw_written = 0;
    std::vector<CodecFigure> figures;
    for (int k = 0; k <= static_cast<int>(std::size(kLosslessCodecs)); ++k) {
      const bool automatic = k == static_cast<int>(std::size(kLosslessCodecs));  // last: --codec auto
      const CodecId codec = automatic ? CodecId::kNone : kLosslessCodecs[k];
      SCOPED_TRACE(::testing::Message() << m << ", codec " << (automatic ? "auto" : to_string(codec)));
      // auto: planned on the figures the raw run measured, with a disk slow enough (100 MB/s)
      // that coding the ReLU outputs pays.
      hw.storage.read_bytes_per_s = hw.storage.write_bytes_per_s = 100e6;
      const CostModel measured(hw, CostOptions{.codecs = figures});
      PlanContext c = ctx;
      c.ssd_codec = automatic ? std::nullopt : std::optional<CodecId>(codec);
      PlanContext with_figures{.graph = sized.graph, .cost = measured, .budget_bytes = budget, .tier = Tier::kSsd,
                               .op_scratch_bytes = sized.scratch};
      Result<PlanReport> plan = plan_policy("vdnn-all", automatic ? with_figures : c);
      ASSERT_TRUE(plan.ok()) << plan.status().message();
      if (codec == CodecId::kNone && !automatic) {
        EXPECT_TRUE(plan->schedule.ssd_codecs.empty());
      } else if (!automatic || std::string(m) == "resnet-mini") {  // gpt2-mini has no ReLU
        EXPECT_FALSE(plan->schedule.ssd_codecs.empty()) << "nothing is coded: the case proves little";
      }
      Result<Outcome> run = train(g, &plan->schedule, budget, bo, /*measure_codecs=*/!automatic);
      ASSERT_TRUE(run.ok()) << run.status().message();
      if (codec == CodecId::kNone && !automatic) {
        figures = run->codec_figures;
        EXPECT_FALSE(figures.empty()) << "the tier measured no codec";
      }
      ASSERT_GT(run->swapped_bytes, 0u) << "the plan moved nothing: the case proves nothing";
      ASSERT_GT(run->ssd_disk_bytes_written, 0u);
      EXPECT_GT(run->ssd_disk_bytes_read, 0u);
      EXPECT_LE(run->measured_peak, budget);
      EXPECT_EQ(0, std::memcmp(run->losses.data(), reference->losses.data(), sizeof(float) * kIters));
      ASSERT_EQ(run->persistent.size(), reference->persistent.size());
      for (size_t i = 0; i < run->persistent.size(); ++i)
        EXPECT_TRUE(run->persistent[i] == reference->persistent[i]) << "persistent tensor " << i << " differs";
      if (codec == CodecId::kNone && !automatic) {
        raw_written = run->ssd_disk_bytes_written;
        // Raw copies of page-aligned blocks move in place (Note [In-place transfers]), and the
        // numbers above are still bitwise those of the run without a plan.
        EXPECT_GT(run->ssd_io.in_place_bytes_written, run->ssd_disk_bytes_written / 2);
        EXPECT_GT(run->ssd_io.in_place_bytes_read, run->ssd_disk_bytes_read / 2);
        EXPECT_LE(run->ssd_io.in_place_bytes_read, run->ssd_disk_bytes_read);
      } else {
        EXPECT_LE(run->ssd_disk_bytes_written, raw_written);  // a chunk never grows
      }
      if (std::string(m) == "resnet-mini" &&
          (automatic || codec == CodecId::kZeroMask || codec == CodecId::kZeroMaskLz4)) {
        EXPECT_LT(run->ssd_disk_bytes_written, raw_written);  // ReLU outputs are half zeros
      }
    }
  }
}

// Every lossless codec on the host tier (ExecutorOptions::host_codec, `--tier host --codec NAME`)
// keeps training bitwise identical (losses, weights, optimizer state) under the plan that swaps the
// most; on a ReLU network the zero-mask codecs store fewer bytes in host memory than raw, as the
// tier counted them, and no codec stores more.
TEST(CodecSwapIdentity, LosslessCodecsOnTheHostTierAreBitwiseIdentical) {
  for (const char* m : {"resnet-mini", "gpt2-mini"}) {
    const Graph g = model(m);
    const BackendOptions bo;
    Result<Outcome> reference = train(g, nullptr, 0, bo);
    ASSERT_TRUE(reference.ok()) << reference.status().message();
    const BackendSized sized = backend_sized(g, bo);
    const CostModel cost(load_profile("cpu-local").value());
    PlanContext ctx{.graph = sized.graph, .cost = cost, .budget_bytes = 0, .tier = Tier::kHost,
                    .op_scratch_bytes = sized.scratch};
    Result<uint64_t> budget = find_min_budget("vdnn-all", ctx);  // swaps the most
    ASSERT_TRUE(budget.ok()) << budget.status().message();
    ctx.budget_bytes = *budget;
    Result<PlanReport> plan = plan_policy("vdnn-all", ctx);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    uint64_t raw_stored = 0;
    for (CodecId codec : kLosslessCodecs) {  // kNone first: the raw reference
      SCOPED_TRACE(::testing::Message() << m << ", host codec " << to_string(codec));
      Result<Outcome> run = train(g, &plan->schedule, *budget, bo, /*measure_codecs=*/false, codec);
      ASSERT_TRUE(run.ok()) << run.status().message();
      ASSERT_GT(run->swapped_bytes, 0u) << "the plan moved nothing: the case proves nothing";
      ASSERT_GT(run->host_io.medium_bytes_written, 0u);
      EXPECT_GT(run->host_io.medium_bytes_read, 0u);
      EXPECT_LE(run->measured_peak, *budget);
      EXPECT_EQ(0, std::memcmp(run->losses.data(), reference->losses.data(), sizeof(float) * kIters));
      ASSERT_EQ(run->persistent.size(), reference->persistent.size());
      for (size_t i = 0; i < run->persistent.size(); ++i)
        EXPECT_TRUE(run->persistent[i] == reference->persistent[i]) << "persistent tensor " << i << " differs";
      if (codec == CodecId::kNone) {
        raw_stored = run->host_io.medium_bytes_written;
        EXPECT_EQ(raw_stored, run->swapped_bytes);  // raw: the tier stores what went out
      } else {
        EXPECT_LE(run->host_io.medium_bytes_written, raw_stored);  // a chunk never grows
      }
      if (std::string(m) == "resnet-mini" && (codec == CodecId::kZeroMask || codec == CodecId::kZeroMaskLz4)) {
        EXPECT_LT(run->host_io.medium_bytes_written, raw_stored);  // ReLU outputs are half zeros
      }
    }
  }
}

}  // namespace
}  // namespace ferry
