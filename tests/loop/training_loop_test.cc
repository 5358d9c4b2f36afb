// The dynamic loop (loop/training_loop.h): re-planning at iteration boundaries never changes a
// number, the first plan is re-made from what the first iterations measured, drift is decided
// from a streak of iterations, and a slower disk's figures move the plan away from the disk.
#include "loop/training_loop.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <gtest/gtest.h>

#include "cost/profile.h"
#include "graph/zoo/zoo.h"
#include "plan/policies.h"

namespace ferry {
namespace {

constexpr int kIters = 6;

Graph model() {
  ModelConfig c;
  c.batch = 4;
  c.train.optimizer = OptimizerKind::kAdam;
  c.train.lr = 1e-3f;
  return build_model("resnet-mini", c).value();
}

struct Sized {
  Graph graph;
  std::vector<uint64_t> scratch;
  uint64_t none_bytes = 0;
};

Sized sized_of(const Graph& g, Backend& backend) {
  auto compiled = backend.compile(g).value();
  Sized s{.graph = with_backend_sizes(g, *compiled), .scratch = compiled->all_scratch_bytes()};
  const CostModel cost(load_profile("cpu-local").value());
  PlanContext ctx{.graph = s.graph, .cost = cost, .op_scratch_bytes = s.scratch};
  s.none_bytes = plan_policy("none", ctx).value().device_bytes;
  return s;
}

PlanFunction planner(const std::vector<uint64_t>& scratch, uint64_t budget, Tier tier,
                     std::vector<std::string> policies) {
  auto calls = std::make_shared<size_t>(0);
  return [=](const Graph& timed, const CostModel& cost) -> Result<Schedule> {
    PlanContext ctx{.graph = timed, .cost = cost, .budget_bytes = budget, .tier = tier, .op_scratch_bytes = scratch};
    const std::string& policy = policies[(*calls)++ % policies.size()];
    FERRY_ASSIGN_OR_RETURN(PlanReport r, plan_policy(policy, ctx));
    return r.schedule;
  };
}

// The options the loop tests share: the budget, seed 3, cpu-local and the backend's op scratch.
LoopOptions loop_options(const Sized& s, uint64_t budget) {
  LoopOptions o;
  o.executor.budget_bytes = budget;
  o.executor.seed = 3;
  o.profile = load_profile("cpu-local").value();
  o.op_scratch_bytes = s.scratch;
  return o;
}

// The losses of kIters iterations of the loop on the synthetic set of seed 3 (fewer where one
// fails: the failure is reported).
std::vector<float> run_losses(TrainingLoop& loop) {
  auto data = make_synthetic_data(3);
  std::vector<float> losses;
  for (int i = 0; i < kIters; ++i) {
    Result<LoopIteration> it = loop.run_iteration(i, *data);
    if (!it.ok()) {
      ADD_FAILURE() << "iteration " << i << ": " << it.status().message();
      break;
    }
    losses.push_back(it->stats.loss);
  }
  return losses;
}

struct Outcome {
  std::vector<float> losses;
  std::vector<std::vector<std::byte>> persistent;
};

Outcome reference(const Graph& g, Backend& backend) {
  auto e = Executor::create(g, backend, ExecutorOptions{.seed = 3}).value();
  EXPECT_TRUE(e->initialize().ok());
  auto data = make_synthetic_data(3);
  Outcome o;
  for (int i = 0; i < kIters; ++i) o.losses.push_back(e->run_iteration(i, *data).value().loss);
  for (const Tensor& t : g.tensors)
    if (t.persistent()) o.persistent.push_back(e->read_persistent(t.id).value());
  return o;
}

// The loop re-plans at every boundary and the planner alternates policies, so the executor is
// rebuilt every time: the numbers are those of a run without a plan.
TEST(TrainingLoop, ReplanningAtEveryBoundaryChangesNoNumber) {
  const Graph g = model();
  auto backend = make_backend("cpu").value();
  const Outcome want = reference(g, *backend);
  const Sized s = sized_of(g, *backend);
  const uint64_t budget = s.none_bytes * 85 / 100;  // every policy of the three fits
  for (Tier tier : {Tier::kHost, Tier::kSsd}) {
    SCOPED_TRACE(std::string(to_string(tier)));
    LoopOptions o = loop_options(s, budget);
    o.executor.checksum = true;
    o.executor.ssd_dir = std::filesystem::temp_directory_path().string();
    o.measure_iterations = 1;
    o.replan_every = 1;
    o.keep_faster_current = false;  // every new plan runs, faster or not
    auto loop = TrainingLoop::create(g, s.graph, *backend, planner(s.scratch, budget, tier, {"vdnn-all", "capuchin", "lru"}),
                                     o);
    ASSERT_TRUE(loop.ok()) << loop.status().message();
    ASSERT_TRUE((*loop)->initialize().ok());
    auto data = make_synthetic_data(3);
    std::vector<float> losses;
    uint64_t largest_run = 0;  // the largest prediction of an executor that ran an iteration
    for (int i = 0; i < kIters; ++i) {
      largest_run = std::max(largest_run, (*loop)->executor().predicted_live_peak_bytes());
      Result<LoopIteration> it = (*loop)->run_iteration(i, *data);
      ASSERT_TRUE(it.ok()) << it.status().message();
      losses.push_back(it->stats.loss);
      EXPECT_LE((*loop)->executor().measured_peak_bytes(), budget);
    }
    // Over the run, measured and predicted are maxima over every executor, not the last plan's
    // (the last, made after the last iteration, has run nothing): each plan's peak is exact.
    EXPECT_EQ((*loop)->measured_peak_bytes(), largest_run);
    EXPECT_EQ((*loop)->predicted_live_peak_bytes(),
              std::max(largest_run, (*loop)->executor().predicted_live_peak_bytes()));
    int rebuilt = 0;
    for (const PlanVersion& v : (*loop)->plan_versions()) rebuilt += v.new_executor ? 1 : 0;
    EXPECT_GE(rebuilt, kIters - 1) << "the executor must really have been replaced";
    EXPECT_EQ((*loop)->plan_versions()[1].figures_source, "measured");
    EXPECT_EQ((*loop)->plan_versions()[1].from_iteration, 1);
    EXPECT_LE((*loop)->measured_peak_bytes(), budget);
    EXPECT_EQ(0, std::memcmp(losses.data(), want.losses.data(), sizeof(float) * kIters));
    size_t k = 0;
    for (const Tensor& t : g.tensors) {
      if (!t.persistent()) continue;
      Result<std::vector<std::byte>> w = (*loop)->executor().read_persistent(t.id);
      ASSERT_TRUE(w.ok());
      EXPECT_TRUE(*w == want.persistent[k++]) << t.name << " differs";
    }
  }
}

// The planners are heuristics: a re-plan whose new plan is not predicted faster on the new figures
// than the plan running keeps the running one (no new executor); a faster one replaces it. Here the
// planner alternates between a policy that keeps the link busy and ferry's planner.
TEST(TrainingLoop, KeepsThePlanRunningWhenTheNewOneIsNotPredictedFaster) {
  const Graph g = model();
  auto backend = make_backend("cpu").value();
  const Outcome want = reference(g, *backend);
  const Sized s = sized_of(g, *backend);
  const uint64_t budget = s.none_bytes * 7 / 10;
  LoopOptions o = loop_options(s, budget);
  o.measure_iterations = 1;
  o.replan_every = 1;
  auto loop = TrainingLoop::create(g, s.graph, *backend, planner(s.scratch, budget, Tier::kHost, {"lru", "ferry"}), o);
  ASSERT_TRUE(loop.ok()) << loop.status().message();
  ASSERT_TRUE((*loop)->initialize().ok());
  const std::vector<float> losses = run_losses(**loop);
  ASSERT_EQ(losses.size(), static_cast<size_t>(kIters));
  int kept = 0, replaced = 0;
  const std::vector<PlanVersion>& versions = (*loop)->plan_versions();
  for (size_t i = 1; i < versions.size(); ++i) {
    const PlanVersion& v = versions[i];
    SCOPED_TRACE(v.reason);
    if (v.kept_current) {
      ++kept;
      EXPECT_FALSE(v.new_executor);
      EXPECT_GE(v.new_plan_ms, v.predicted_ms);
      EXPECT_NE(v.reason.find("the current one stays"), std::string::npos);
    } else {
      replaced += v.new_executor ? 1 : 0;
    }
  }
  EXPECT_GE(kept, 1) << "an lru plan after a ferry plan is predicted slower";
  EXPECT_GE(replaced, 1) << "the ferry plan after the first lru plan is predicted faster";
  EXPECT_EQ(0, std::memcmp(losses.data(), want.losses.data(), sizeof(float) * kIters));
}

// Codecs enter the loop's plans from what it measured: the first plan runs raw while the SSD tier
// measures every codec per class of tensor; the re-plan from those figures (on a disk slowed 20x,
// where coding pays) codes what shrinks, the ReLU outputs among them, and training stays bitwise that of a run
// without a plan.
TEST(TrainingLoop, MeasuredCodecFiguresCodeTheNextPlan) {
  const Graph g = model();
  auto backend = make_backend("cpu").value();
  const Outcome want = reference(g, *backend);
  const Sized s = sized_of(g, *backend);
  const uint64_t budget = s.none_bytes * 85 / 100;
  LoopOptions o = loop_options(s, budget);
  o.executor.checksum = true;
  o.executor.ssd_dir = std::filesystem::temp_directory_path().string();
  o.executor.ssd_measure_codecs = true;
  o.measure_iterations = 1;
  o.drift_threshold = 0;
  o.slowdown_from = 0;
  o.slowdown_factor = 20;
  auto loop = TrainingLoop::create(g, s.graph, *backend, planner(s.scratch, budget, Tier::kSsd, {"vdnn-all"}), o);
  ASSERT_TRUE(loop.ok()) << loop.status().message();
  ASSERT_TRUE((*loop)->initialize().ok());
  EXPECT_TRUE((*loop)->schedule().ssd_codecs.empty()) << "no figures yet: the first plan runs raw";
  const std::vector<float> losses = run_losses(**loop);
  ASSERT_EQ(losses.size(), static_cast<size_t>(kIters));
  ASSERT_TRUE((*loop)->measured().has_value());
  EXPECT_FALSE((*loop)->measured()->codecs.empty());
  ASSERT_GE((*loop)->plan_versions().size(), 2u);
  EXPECT_TRUE((*loop)->plan_versions()[1].new_executor);
  const std::vector<std::string> classes = tensor_classes(g);
  ASSERT_FALSE((*loop)->schedule().ssd_codecs.empty()) << "the measured figures coded nothing";
  bool relu = false;
  for (const TensorCodec& c : (*loop)->schedule().ssd_codecs) {
    const std::string& cls = classes[static_cast<size_t>(c.tensor)];
    relu = relu || cls == "relu/activation";
    double ratio = 1;
    for (const CodecFigure& f : (*loop)->measured()->codecs)
      if (f.tensor_class == cls && f.codec == c.codec) ratio = f.estimate.ratio;
    EXPECT_LT(ratio, 1.0) << cls << " coded with " << to_string(c.codec) << ", which does not shrink it";
  }
  EXPECT_TRUE(relu) << "the ReLU outputs (half zeros) are not coded";
  EXPECT_LE((*loop)->measured_peak_bytes(), budget);
  EXPECT_EQ(0, std::memcmp(losses.data(), want.losses.data(), sizeof(float) * kIters));
}

TEST(TrainingLoop, KnownFiguresAreNotMeasuredAgain) {
  const Graph g = model();
  auto backend = make_backend("cpu").value();
  const Sized s = sized_of(g, *backend);
  LoopOptions o;
  o.executor.budget_bytes = s.none_bytes * 7 / 10;
  o.profile = load_profile("cpu-local").value();
  o.op_scratch_bytes = s.scratch;
  o.drift_threshold = 0;  // no drift re-plans either
  MeasuredFigures f;
  f.op_us.assign(g.ops.size(), 100.0);
  o.figures = f;
  o.figures_source = "cache";
  auto loop = TrainingLoop::create(g, s.graph, *backend, planner(s.scratch, o.executor.budget_bytes, Tier::kHost, {"ferry"}), o);
  ASSERT_TRUE(loop.ok()) << loop.status().message();
  ASSERT_TRUE((*loop)->initialize().ok());
  auto data = make_synthetic_data(1);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*loop)->run_iteration(i, *data).ok());
  ASSERT_EQ((*loop)->plan_versions().size(), 1u);
  EXPECT_EQ((*loop)->plan_versions()[0].figures_source, "cache");
  // Its prediction used the known op times: 100 us per op plus transfers and stalls.
  EXPECT_GE((*loop)->plan_versions()[0].predicted_ms, 0.1 * static_cast<double>(g.ops.size()) - 1e-9);
  EXPECT_TRUE((*loop)->measured().has_value()) << "iterations are still measured";
}

// A link the run stops using keeps the figure it measured: the first plan swaps to the SSD tier
// and its iteration fits the disk's links; every later plan recomputes only, so the iterations
// after it move nothing. The plans made after those iterations must still see the disk as it was
// measured, not as the device profile has it (which a later drift re-plan would otherwise trust,
// and the profile cache would keep).
TEST(TrainingLoop, LinksTheRunStopsUsingKeepTheirMeasuredFigures) {
  const Graph g = model();
  auto backend = make_backend("cpu").value();
  const Sized s = sized_of(g, *backend);
  const uint64_t budget = s.none_bytes * 95 / 100;  // where recomputing fits on any op times
  LoopOptions o = loop_options(s, budget);
  o.executor.ssd_dir = std::filesystem::temp_directory_path().string();
  o.measure_iterations = 1;
  o.replan_every = 1;
  o.keep_faster_current = false;
  struct Call {
    double ssd_write_us = 0, ssd_read_us = 0;
    size_t swapped = 0;
  };
  auto calls = std::make_shared<std::vector<Call>>();
  PlanFunction plan = [&s, budget, calls](const Graph& timed, const CostModel& cost) -> Result<Schedule> {
    // The first plan swaps to the disk, every later one only recomputes (as --tier none plans).
    PlanContext ctx{.graph = timed, .cost = cost, .budget_bytes = budget,
                    .tier = calls->empty() ? Tier::kSsd : Tier::kHost, .op_scratch_bytes = s.scratch};
    ctx.recompute_only = !calls->empty();
    ctx.options.first_fit = true;  // any plan that fits will do
    FERRY_ASSIGN_OR_RETURN(PlanReport r, plan_policy(calls->empty() ? "vdnn-all" : "ferry", ctx));
    calls->push_back({.ssd_write_us = cost.link(Link::kSsdWrite).time_us(1 << 20),
                      .ssd_read_us = cost.link(Link::kSsdRead).time_us(1 << 20),
                      .swapped = r.schedule.distinct_tensors(ActionKind::kSwapOut)});
    return r.schedule;
  };
  auto loop = TrainingLoop::create(g, s.graph, *backend, plan, o);
  ASSERT_TRUE(loop.ok()) << loop.status().message();
  ASSERT_TRUE((*loop)->initialize().ok());
  ASSERT_EQ(run_losses(**loop).size(), static_cast<size_t>(kIters));
  // Calls: 0 at creation (the profile), 1 after iteration 0 (its SSD copies measured), then one
  // after each later iteration; from call 3 on, the last two iterations moved nothing.
  ASSERT_GE(calls->size(), 4u);
  ASSERT_GT((*calls)[0].swapped, 0u);
  const Call& measured = (*calls)[1];
  EXPECT_NE(measured.ssd_write_us, (*calls)[0].ssd_write_us) << "the disk's links were measured in iteration 0";
  EXPECT_NE(measured.ssd_read_us, (*calls)[0].ssd_read_us);
  for (size_t i = 1; i < calls->size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ((*calls)[i].swapped, 0u);
    EXPECT_EQ((*calls)[i].ssd_write_us, measured.ssd_write_us);
    EXPECT_EQ((*calls)[i].ssd_read_us, measured.ssd_read_us);
  }
  ASSERT_TRUE((*loop)->measured().has_value());
  EXPECT_TRUE((*loop)->measured()->links[static_cast<size_t>(Link::kSsdWrite)].has_value());
  EXPECT_TRUE((*loop)->measured()->links[static_cast<size_t>(Link::kSsdRead)].has_value());
}

TEST(DriftWatch, NeedsAStreakOfDriftingIterations) {
  DriftWatch w(0.15, 2);
  w.expect(100);
  EXPECT_FALSE(w.add(130));  // one
  EXPECT_FALSE(w.add(110));  // back within 15%: the streak ends
  EXPECT_FALSE(w.add(80));
  EXPECT_TRUE(w.add(70));    // two in a row, either way
  EXPECT_DOUBLE_EQ(w.streak_mean_ms(), 75);
  w.expect(75);
  EXPECT_FALSE(w.add(80));
  EXPECT_FALSE(w.add(76));
  DriftWatch off(0, 2);
  off.expect(100);
  EXPECT_FALSE(off.add(1000));
  EXPECT_FALSE(off.add(1000));
  EXPECT_DOUBLE_EQ(off.effective_threshold(), 0) << "not watched: no threshold to report";
}

TEST(DriftWatch, ADriftIsOneWay) {
  DriftWatch w(0.15, 2);
  w.expect(100);
  EXPECT_FALSE(w.add(130));
  EXPECT_FALSE(w.add(75)) << "one slower, one faster: noise, not a drift";
  EXPECT_EQ(w.streak(), 1) << "the faster one starts a streak of its own";
  EXPECT_TRUE(w.add(70));
  EXPECT_DOUBLE_EQ(w.streak_mean_ms(), 72.5);
}

// Iteration times that vary by about 20% from one to the next (a shared machine) raise the
// threshold to twice their noise: a 20% streak is no drift there, a 2x slowdown still is. On a
// quiet machine the threshold stays the configured one.
TEST(DriftWatch, NoisyIterationsRaiseTheThresholdToTwiceTheirNoise) {
  DriftWatch w(0.15, 2);
  w.expect(100);
  EXPECT_DOUBLE_EQ(w.noise(), 0) << "no estimate before any iteration";
  const double noisy[] = {100, 118, 96, 121, 94, 115, 99, 122, 97, 117};
  for (double ms : noisy) w.add(ms);
  EXPECT_GT(w.noise(), 0.1);
  EXPECT_LT(w.noise(), 0.3);
  EXPECT_GT(w.effective_threshold(), 0.25);
  EXPECT_FALSE(w.add(122));
  EXPECT_FALSE(w.add(123)) << "two iterations 22% slower are within this run's noise";
  EXPECT_FALSE(w.add(200));
  EXPECT_TRUE(w.add(210)) << "a 2x slowdown is a drift whatever the noise";

  DriftWatch quiet(0.15, 2);
  quiet.expect(100);
  for (double ms : {100.0, 101.0, 99.5, 100.5, 100.0, 99.0}) quiet.add(ms);
  EXPECT_LT(quiet.noise(), 0.02);
  EXPECT_DOUBLE_EQ(quiet.effective_threshold(), 0.15);
  EXPECT_FALSE(quiet.add(120));
  EXPECT_TRUE(quiet.add(121)) << "two iterations 20% slower on a quiet machine are a drift";

  // A steady model error (every iteration 40% slower than expected) is no noise: the differences
  // of consecutive iterations cancel it.
  DriftWatch biased(0.15, 50);
  biased.expect(100);
  for (int i = 0; i < 10; ++i) biased.add(140 + (i % 2));
  EXPECT_LT(biased.noise(), 0.02);
}

TEST(DriftWatch, FiguresExplainADriftWhenThePlanPredictedOnThemClosesHalfTheGap) {
  // Measured 150 ms, the plan predicted 100: figures that predict 140 explain it, 110 do not.
  EXPECT_TRUE(figures_explain(150, 1.0, 100, 140));
  EXPECT_TRUE(figures_explain(150, 1.0, 100, 125));
  EXPECT_FALSE(figures_explain(150, 1.0, 100, 110));
  EXPECT_FALSE(figures_explain(150, 1.0, 100, 100)) << "unchanged figures never explain a drift";
  // With a learnt scale of 1.5 (the simulator predicts 2/3 of the truth), 100 -> 150 expected.
  EXPECT_FALSE(figures_explain(225, 1.5, 100, 100));
  EXPECT_FALSE(figures_explain(150, 1.5, 100, 100)) << "no gap, nothing to explain";
  EXPECT_TRUE(figures_explain(300, 1.5, 100, 190));
  EXPECT_TRUE(figures_explain(60, 1.0, 100, 65)) << "faster, too";
}

// What the loop re-plans from when the disk slows down: with the SSD links four times slower the
// planner moves fewer bytes through the disk, and its plan is predicted faster on those figures
// than the plan made for the fast disk. (Without compute interference: with cpu-local's, the
// greedy's plan for the slow disk is predicted 2.6% slower than the fast disk's plan on the slow
// figures; the loop then keeps the plan running, TrainingLoop.KeepsThePlanRunningWhenTheNewOneIsNotPredictedFaster)
TEST(TrainingLoop, SlowerDiskFiguresMoveThePlanOffTheDisk) {
  const Graph g = model();
  auto backend = make_backend("cpu").value();
  const Sized s = sized_of(g, *backend);
  HardwareProfile base = load_profile("cpu-local").value();
  for (LinkDirection* d : {&base.host_link.device_to_host, &base.host_link.host_to_device}) d->compute_interference = 0;
  base.storage.read_compute_interference = base.storage.write_compute_interference = 0;
  MeasuredFigures fast;
  fast.op_us = CostModel(base).op_times_us(s.graph);
  const CostModel base_cost(base);
  fast.links[static_cast<size_t>(Link::kSsdWrite)] = LinkFit{.bytes_per_s = base.storage.write_bytes_per_s};
  fast.links[static_cast<size_t>(Link::kSsdRead)] = LinkFit{.bytes_per_s = base.storage.read_bytes_per_s};
  MeasuredFigures slow = fast;
  slow.links[static_cast<size_t>(Link::kSsdWrite)]->bytes_per_s /= 4;
  slow.links[static_cast<size_t>(Link::kSsdRead)]->bytes_per_s /= 4;
  const uint64_t budget = s.none_bytes * 7 / 10;
  const PlanFunction plan = planner(s.scratch, budget, Tier::kSsd, {"ferry"});
  auto timed = [&](const MeasuredFigures& f) {
    Graph t = s.graph;
    apply_op_times(f, t);
    return t;
  };
  const Graph tf = timed(fast), ts = timed(slow);
  const CostModel fast_cost(apply_links(fast, base)), slow_cost(apply_links(slow, base));
  Result<Schedule> for_fast = plan(tf, fast_cost);
  Result<Schedule> for_slow = plan(ts, slow_cost);
  ASSERT_TRUE(for_fast.ok()) << for_fast.status().message();
  ASSERT_TRUE(for_slow.ok()) << for_slow.status().message();
  SimOptions so{.budget_bytes = budget, .op_scratch_bytes = s.scratch, .record_timeline = false};
  const SimResult old_on_slow = simulate(ts, *for_fast, slow_cost, so).value();
  const SimResult new_on_slow = simulate(ts, *for_slow, slow_cost, so).value();
  EXPECT_TRUE(old_on_slow.feasible && new_on_slow.feasible);
  EXPECT_LE(new_on_slow.bytes_ssd_write, old_on_slow.bytes_ssd_write);
  EXPECT_LE(new_on_slow.iteration_us, old_on_slow.iteration_us);
}

}  // namespace
}  // namespace ferry
