// The executor's memory figures are measurements, not the plan's numbers, and its checks catch a
// corrupt plan by what happens in memory (Note [Measured memory] in runtime/executor.h):
// - a plan corrupted after the prediction holds more than predicted, and the measurement says so;
// - overlapping placement, a tensor freed before its last reader and a swap-in after its consumer
//   are each stopped by the runtime's own bookkeeping, with the op and the tensor named;
// - --verify-memory's guard bytes, poison and content checksums each catch the bug they exist for
//   (a kernel writing past a tensor the backend under-reported, a write into freed memory, a
//   swap-in that never filled its block), which the unverified run misses;
// - the arena's end is enforced by the OS: a write past it dies naming the op.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "backend/backend.h"
#include "common/fault_guard.h"
#include "common/units.h"
#include "cost/cost_model.h"
#include "cost/profile.h"
#include "data/data.h"
#include "graph/zoo/zoo.h"
#include "plan/policies.h"
#include "runtime/executor.h"

namespace ferry {
namespace {

Graph mini(const std::string& name = "resnet-mini") {
  ModelConfig c;
  c.batch = 2;
  c.train.optimizer = OptimizerKind::kAdam;
  c.train.lr = 1e-3f;
  if (name.rfind("gpt2", 0) == 0) c.seq = 16;
  return build_model(name, c).value();
}

struct Outcome {  // one training run
  Status status;
  std::vector<float> losses;
  uint64_t measured_peak = 0, predicted_live = 0, predicted = 0, extent = 0;
};

Outcome train(const Graph& g, ExecutorOptions o, const Schedule* schedule = nullptr, int iters = 2) {
  Outcome r;
  auto backend = make_backend("cpu").value();
  o.seed = 5;
  o.ssd_dir = std::filesystem::temp_directory_path().string();
  auto ex = Executor::create(g, *backend, o, schedule);
  if (!ex.ok()) {
    r.status = ex.status();
    return r;
  }
  r.predicted = (*ex)->predicted_peak_bytes();
  r.predicted_live = (*ex)->predicted_live_peak_bytes();
  r.status = (*ex)->initialize();
  auto data = make_synthetic_data(5);
  for (int i = 0; i < iters && r.status.ok(); ++i) {
    auto st = (*ex)->run_iteration(i, *data);
    if (!st.ok()) {
      r.status = st.status();
      break;
    }
    r.losses.push_back(st->loss);
  }
  r.measured_peak = (*ex)->measured_peak_bytes();
  r.extent = (*ex)->measured_extent_bytes().value();
  return r;
}

// A swap plan for resnet-mini at 60% of its peak (vdnn-all moves every layer's input to the host).
Schedule swap_plan(const Graph& g) {
  auto backend = make_backend("cpu").value();
  auto compiled = backend->compile(g).value();
  const Graph sized = with_backend_sizes(g, *compiled);
  const CostModel cost(load_profile("cpu-local").value());
  PlanContext ctx{.graph = sized, .cost = cost, .budget_bytes = 0, .tier = Tier::kHost,
                  .op_scratch_bytes = compiled->all_scratch_bytes()};
  return plan_policy("vdnn-all", ctx).value().schedule;
}

void expect_error(const Outcome& r, const std::vector<std::string>& parts) {
  ASSERT_FALSE(r.status.ok()) << "the corruption went unnoticed";
  for (const std::string& p : parts)
    EXPECT_NE(r.status.message().find(p), std::string::npos) << "'" << p << "' missing in: " << r.status.message();
}

TEST(MemoryTruth, UncorruptedRunMeasuresWhatThePlanPredicts) {
  Graph g = mini();
  for (bool verify : {false, true}) {
    Outcome r = train(g, {.verify_memory = verify});
    ASSERT_TRUE(r.status.ok()) << r.status.message();
    EXPECT_EQ(r.measured_peak, r.predicted_live) << "verify " << verify;
    if (!verify) {
      EXPECT_LE(r.extent, r.predicted);
    }
  }
}

// The measurement is not the prediction: with a free delayed to the end of the iteration (the
// program placed again so that it runs), the executor holds more than the plan said, and the
// losses are unchanged (a late free changes no value).
TEST(MemoryTruth, DelayedFreeIsMeasuredAbovePrediction) {
  Graph g = mini();
  Outcome clean = train(g, {});
  ASSERT_TRUE(clean.status.ok()) << clean.status.message();
  Outcome r = train(g, {.budget_bytes = clean.predicted * 2, .corruption = PlanCorruption::kDelayFree});
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(r.predicted_live, clean.predicted_live);
  EXPECT_GT(r.measured_peak, r.predicted_live);
  EXPECT_EQ(r.losses, clean.losses);
}

TEST(MemoryTruth, OverlappingPlacementIsRefused) {
  for (bool verify : {false, true}) {
    Outcome r = train(mini(), {.verify_memory = verify, .corruption = PlanCorruption::kOverlapPlacement});
    expect_error(r, {"memory plan is corrupt", "overlaps", "which is still live"});
  }
}

TEST(MemoryTruth, TensorFreedBeforeItsLastReaderIsCaught) {
  for (bool verify : {false, true}) {
    Outcome r = train(mini(), {.verify_memory = verify, .corruption = PlanCorruption::kEarlyFree});
    expect_error(r, {"memory plan is corrupt", "reads tensor", "not on the device", "it left at step"});
  }
}

TEST(MemoryTruth, SwapInAfterItsConsumerIsCaught) {
  Graph g = mini();
  const Schedule plan = swap_plan(g);
  for (bool verify : {false, true}) {
    Outcome r = train(g, {.verify_memory = verify, .corruption = PlanCorruption::kLateSwapIn}, &plan);
    expect_error(r, {"memory plan is corrupt", "reads tensor", "not on the device"});
  }
}

// A backend that reports half a tensor's size: the kernel writes the whole tensor, past what the
// executor placed. Only the guard bytes see it; the unverified run completes unaware.
TEST(MemoryTruth, GuardBytesCatchAKernelWritingPastItsTensor) {
  Outcome quiet = train(mini(), {.corruption = PlanCorruption::kUndersizeTensor});
  EXPECT_TRUE(quiet.status.ok()) << quiet.status.message();
  Outcome r = train(mini(), {.verify_memory = true, .corruption = PlanCorruption::kUndersizeTensor});
  expect_error(r, {"memory check", "wrote past the end of tensor"});
}

// A runtime that frees a block but keeps its address: its producer writes into freed memory.
TEST(MemoryTruth, PoisonCatchesAWriteIntoFreedMemory) {
  Outcome r = train(mini(), {.verify_memory = true, .corruption = PlanCorruption::kWriteAfterFree});
  expect_error(r, {"memory check", "wrote into freed memory"});
}

// A swap-in whose copy is never issued: the consumer reads whatever the block held. Unverified,
// training silently computes other numbers; verified, the content checksum stops it.
TEST(MemoryTruth, ContentChecksumsCatchABlockThatWasNeverFilled) {
  Graph g = mini();
  const Schedule plan = swap_plan(g);
  Outcome clean = train(g, {}, &plan);
  ASSERT_TRUE(clean.status.ok()) << clean.status.message();
  Outcome quiet = train(g, {.corruption = PlanCorruption::kDropSwapIn}, &plan);
  ASSERT_TRUE(quiet.status.ok()) << quiet.status.message();
  EXPECT_NE(quiet.losses, clean.losses) << "a block never filled changed nothing: the test cannot fail";
  Outcome r = train(g, {.verify_memory = true, .corruption = PlanCorruption::kDropSwapIn}, &plan);
  expect_error(r, {"memory check", "whose bytes differ from what was written"});
}

// With verification on, a real swap plan runs clean and bitwise like the unverified run.
TEST(MemoryTruth, VerifiedSwapPlanIsCleanAndIdentical) {
  Graph g = mini();
  const Schedule plan = swap_plan(g);
  Outcome plain = train(g, {}, &plan);
  Outcome verified = train(g, {.verify_memory = true}, &plan);
  ASSERT_TRUE(plain.status.ok()) << plain.status.message();
  ASSERT_TRUE(verified.status.ok()) << verified.status.message();
  EXPECT_EQ(plain.losses, verified.losses);
  EXPECT_EQ(plain.measured_peak, verified.measured_peak);
}

// Transfer records do not accumulate (a long run's memory stays flat): after every iteration the
// engine holds none, and the executor keeps exactly the last iteration's, one per swap instruction.
TEST(MemoryTruth, TransferRecordsAreKeptForOneIterationOnly) {
  Graph g = mini();
  const Schedule plan = swap_plan(g);
  auto backend = make_backend("cpu").value();
  auto ex = Executor::create(g, *backend, {.seed = 5}, &plan).value();
  ASSERT_TRUE(ex->initialize().ok());
  size_t swaps = 0;
  for (const Instruction& in : ex->program().instructions)
    swaps += in.kind == InstrKind::kSwapOut || in.kind == InstrKind::kSwapIn;
  ASSERT_GT(swaps, 0u);
  auto data = make_synthetic_data(5);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(ex->run_iteration(i, *data).ok());
    EXPECT_EQ(ex->transfer_records_pending(), 0u) << "iteration " << i;
    EXPECT_EQ(ex->last_transfers().size(), swaps) << "iteration " << i;
    for (const TransferRecord& r : ex->last_transfers()) {
      EXPECT_GE(r.start_us, 0.0);  // iteration time
      EXPECT_GE(r.end_us, r.start_us);
    }
  }
}

// Bytes past the arena do not exist: a write there dies with the running activity's name.
TEST(MemoryTruthDeathTest, WritePastTheArenaFaultsNamingTheOp) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto backend = make_backend("cpu").value();
  const uint64_t bytes = 10000;  // not a multiple of a page: the guard starts at 10048 (64-aligned)
  DevicePtr arena = backend->allocate(bytes).value();
  const std::vector<std::byte> one(1);
  // Inside (up to the 64-byte rounding) is fine.
  ASSERT_TRUE(backend->copy_to_device(arena + (align_up(bytes, 64) - 1), one).ok());
  EXPECT_EXIT(
      {
        ScopedFaultActivity activity("op 'conv9' (step 9)");
        (void)backend->copy_to_device(arena + align_up(bytes, 64), one);
      },
      ::testing::ExitedWithCode(1), "ferry: error: op 'conv9' \\(step 9\\) touched a guard page");
  backend->free(arena);
}

}  // namespace
}  // namespace ferry
