// The dynamic loop: profile -> plan -> run -> observe -> re-plan, at iteration boundaries only.
//
// Design
// - Plan from what is known. The first plan is made from measured figures (loop/figures.h) when
//   the caller has them (the profile cache, a --profile file), else from the device profile's
//   model. Any plan fits the budget: feasibility depends on sizes, never on times, so the first
//   plan is a safe one to measure under.
// - Measure while training. Every iteration records every op's wall time and every transfer's;
//   with online measurement and no figures yet, the first `measure_iterations` iterations are
//   measured (per op the smaller time: the first iteration pays one-time costs), and the loop
//   re-plans from them before the next iteration.
// - Watch for drift. Each iteration's measured time is compared with what is expected of its
//   plan. When they differ the same way by more than `drift_threshold` (or twice the run's
//   iteration-time noise, where larger: DriftWatch) in `drift_iterations` iterations in a
//   row, the loop fits figures to those iterations and predicts the current plan on them. If that
//   prediction closes at least half of the gap, the figures explain the drift (a slower disk, a
//   contended link, slower kernels): the machine changed, so the loop re-plans from them. If it
//   does not, the figures are right and the simulator is what is off on this machine (on a CPU
//   backend the transfer threads take cycles from compute, which the model does not charge):
//   re-planning would give the same plan, so the loop learns the ratio of measured to simulated
//   time and scales every later expectation by it (recorded as an event). This keeps it from
//   re-planning on a steady model error; the noise threshold, from re-planning on noise.
// - Re-plan without changing a number. A new plan means a new executor (the program, its
//   placement and tiers are fixed at creation): the loop saves the training state (every
//   persistent tensor's plain bytes and the optimizer step, Executor::save_state), destroys the
//   old executor (its arena and tiers are freed first, so device memory never holds two), creates
//   the new one and restores the state. Layout conversions are exact copies, so training
//   continues bitwise as if nothing had happened. A re-plan that yields the same schedule keeps
//   the executor.
// - Report. plan_versions() lists every plan: when it took effect, why, from which figures,
//   its prediction and planning time; each iteration carries the prediction it was judged by.
//   Measured memory is the maximum over every executor the run used.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "common/status.h"
#include "cost/cost_model.h"
#include "cost/profile.h"
#include "data/data.h"
#include "graph/graph.h"
#include "loop/figures.h"
#include "runtime/executor.h"
#include "schedule/schedule.h"
#include "sim/simulator.h"

namespace ferry {

// Makes a plan for the run's budget from `timed` (the graph with the backend's sizes and, where
// measured, op times) and `cost` (the device profile with measured links in place of its own).
using PlanFunction = std::function<Result<Schedule>(const Graph& timed, const CostModel& cost)>;

// Decides when measured iteration times have drifted from the expected time: `iterations`
// iterations in a row off the same way (all slower or all faster) by more than the threshold,
// relative. The threshold is `threshold` or, where the iteration times are noisier than that,
// twice their noise: a shared machine whose iterations vary by 20% from one to the next is not
// drifting when two of them in a row are 20% off. The noise is estimated from the differences of
// consecutive iterations' log(measured / expected) under the same expectation (a steady model
// error cancels out), the last kNoiseWindow of them, robustly (median absolute difference); it
// counts once kMinNoiseSamples are in. threshold <= 0: never.
class DriftWatch {
 public:
  static constexpr size_t kNoiseWindow = 16;
  static constexpr size_t kMinNoiseSamples = 4;
  DriftWatch(double threshold, int iterations) : threshold_(threshold), iterations_(std::max(iterations, 1)) {}
  // A new expectation (a new plan, a rebase); clears the streak.
  void expect(double ms) {
    expected_ms_ = ms;
    streak_.clear();
    last_log_ratio_.reset();
  }
  // Adds an iteration's time; true when it completes a streak of drifting iterations (their mean
  // is then streak_mean_ms() and the streak is cleared by the next expect()).
  bool add(double ms);
  double expected_ms() const { return expected_ms_; }
  double streak_mean_ms() const;
  int streak() const { return static_cast<int>(streak_.size()); }
  // The standard deviation of one iteration's log(measured / expected), estimated; 0 until
  // kMinNoiseSamples differences are in.
  double noise() const;
  // The relative drift an iteration must exceed now: max(threshold, exp(2 noise) - 1); 0 when
  // drift is not watched (threshold <= 0).
  double effective_threshold() const;

 private:
  double threshold_;
  int iterations_;
  double expected_ms_ = 0;
  std::vector<double> streak_;
  std::optional<double> last_log_ratio_;  // the previous iteration's, under this expectation
  std::vector<double> differences_;       // |consecutive log-ratio differences|, newest last
};

// Whether new figures explain a drift: predicting the current plan on them (`new_ms`, instead of
// `old_ms` on the plan's own figures), times the learnt model scale, closes at least half of the
// gap to the measured time.
bool figures_explain(double measured_ms, double model_scale, double old_ms, double new_ms);

struct LoopOptions {
  ExecutorOptions executor;                 // record_op_times is turned on
  HardwareProfile profile;                  // what is not measured comes from here
  std::vector<uint64_t> op_scratch_bytes;   // the backend's, for predictions
  std::optional<MeasuredFigures> figures;   // known figures (cache, file); nullopt: none yet
  std::string figures_source = "profile";   // where `figures` came from: "cache", "file"
  bool measure_online = true;               // measure the first iterations and re-plan from them
  int measure_iterations = 2;
  double drift_threshold = 0.15;            // relative; 0: never re-plan on drift
  int drift_iterations = 2;
  // Re-plan from the newest figures after every `replan_every` iterations whatever the drift
  // (0: only on drift). Tests use it to replace the executor at every boundary.
  int replan_every = 0;
  // A re-plan keeps the plan running when the new one is not predicted faster on the new figures
  // (PlanVersion::kept_current). false: always switch (tests that replace the executor).
  bool keep_faster_current = true;
  // Called with the figures whenever new ones were measured (to cache them); may be empty.
  std::function<void(const MeasuredFigures&)> on_figures;
  // Tests and benchmarks: from iteration `slowdown_from`, the tier's transfers take
  // `slowdown_factor` times as long (SwapTier::set_slowdown). -1: never.
  int64_t slowdown_from = -1;
  Tier slowdown_tier = Tier::kSsd;
  double slowdown_factor = 1;
};

struct PlanVersion {
  int version = 0;
  int64_t from_iteration = 0;      // the first iteration it ran
  std::string reason;              // why it was made
  std::string figures_source;      // "profile", "measured", "cache", "file"
  double predicted_ms = 0;         // the simulator on its figures
  double planning_seconds = 0;     // planning and simulating (measured)
  size_t swapped_tensors = 0;
  size_t recomputed_tensors = 0;
  bool new_executor = false;       // the schedule changed, so the executor was rebuilt
  // A re-plan whose new plan was not predicted faster on its figures than the plan running: that
  // plan stays (predicted_ms is its prediction on the new figures; new_plan_ms the new one's).
  bool kept_current = false;
  double new_plan_ms = 0;
};

// What happened at an iteration boundary besides re-planning.
struct LoopEvent {
  int64_t after_iteration = 0;
  std::string what;
};

struct LoopIteration {
  IterationStats stats;
  double expected_ms = 0;  // what it was judged against: its plan's prediction, or a rebase
  // The relative drift it had to exceed to count (DriftWatch::effective_threshold() when it
  // started: --drift, or twice the run's noise); 0: drift is not watched.
  double drift_threshold = 0;
  int plan_version = 0;
};

class TrainingLoop {
 public:
  // Plans (PlanFunction) and creates the first executor for `graph` (`sized`: the same graph with
  // the backend's tensor sizes). Errors: the planner's, the executor's.
  static Result<std::unique_ptr<TrainingLoop>> create(const Graph& graph, const Graph& sized, Backend& backend,
                                                      PlanFunction plan, LoopOptions options);
  Status initialize();
  // Variable shapes (loop/shapes.h) keep one loop per shape bucket and one executor at a time:
  // suspend() saves the training state and frees the executor (arena, tiers; the compiled kernels
  // and the plan are kept), resume() makes it again from them and restores `state`.
  Result<TrainingState> suspend();
  Status resume(const TrainingState& state);
  bool suspended() const { return executor_ == nullptr; }
  // Runs one iteration, observes it, and re-plans for the next when the design says so.
  Result<LoopIteration> run_iteration(int64_t iteration, DataSource& data);

  Executor& executor() { return *executor_; }
  const Executor& executor() const { return *executor_; }
  const Schedule& schedule() const { return schedule_; }
  const SimResult& prediction() const { return prediction_; }
  const std::vector<PlanVersion>& plan_versions() const { return versions_; }
  const std::vector<LoopEvent>& events() const { return events_; }
  // The newest measured figures (nullopt before the first measurement).
  const std::optional<MeasuredFigures>& measured() const { return measured_; }

  // Measurements over every executor the run used (Note [Measured memory] in executor.h).
  uint64_t measured_peak_bytes() const;
  Result<uint64_t> measured_extent_bytes() const;
  // Their predicted counterparts: the largest live peak and arena any of those executors' plans
  // predicted (a re-plan may predict less than an earlier plan the run also executed).
  uint64_t predicted_live_peak_bytes() const;
  uint64_t predicted_peak_bytes() const;
  uint64_t tier_peak_bytes(Tier t) const;
  // Bytes that crossed the disk so far, summed over every executor (the SSD tiers' own counters).
  SsdIoStats ssd_io_stats() const;
  // Bytes the host tiers' memory took and gave back so far (coded or raw), summed likewise.
  HostIoStats host_io_stats() const;
  // Bytes the transfers of every iteration so far moved in `d` (completed transfers).
  uint64_t bytes_moved(Direction d) const { return bytes_moved_[d == Direction::kSwapOut ? 0 : 1]; }

 private:
  TrainingLoop(const Graph& graph, const Graph& sized, Backend& backend, PlanFunction plan, LoopOptions options);
  // Plans from `figures` (nullopt: the profile's model) and predicts the plan.
  // `incumbent`: the plan running, kept when the new plan is not predicted faster on `figures`.
  Status make_plan(const std::optional<MeasuredFigures>& figures, const std::string& source,
                   const Schedule* incumbent = nullptr);
  // Re-plans from `figures` and swaps the executor when the schedule changed.
  Status replan(int64_t next_iteration, const MeasuredFigures& figures, const std::string& source,
                const std::string& reason);
  Status observe(int64_t iteration, double time_ms);
  // The simulator's time of `schedule` on `figures` (timing only).
  Result<double> predict_ms(const Schedule& schedule, const MeasuredFigures& figures) const;
  // Saves the state, keeps the measurements of the executor and frees it (its kernels are kept).
  Result<TrainingState> retire_executor();

  const Graph& graph_;
  Graph sized_;
  Backend& backend_;
  PlanFunction plan_;
  LoopOptions options_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<CompiledGraph> compiled_;  // while suspended
  Schedule schedule_;
  SimResult prediction_;
  std::optional<MeasuredFigures> plan_figures_;  // what the current plan was made from
  std::optional<MeasuredFigures> measured_;      // the newest figures
  std::optional<MeasuredFigures> previous_;      // the previous iteration's own figures
  DriftWatch drift_;
  int measuring_ = 0;  // iterations measured for the first re-plan
  // Measured / simulated iteration time of the current plan, learnt at a drift the figures did
  // not explain: expected times are the simulator's times this much.
  double model_scale_ = 1;
  std::vector<PlanVersion> versions_;
  std::vector<LoopEvent> events_;
  // Of executors already replaced.
  uint64_t bytes_moved_[2] = {0, 0};
  uint64_t retired_peak_bytes_ = 0, retired_extent_bytes_ = 0, retired_tier_peak_[2] = {0, 0};
  uint64_t retired_predicted_live_bytes_ = 0, retired_predicted_arena_bytes_ = 0;
  SsdIoStats retired_ssd_io_;
  HostIoStats retired_host_io_;
};

}  // namespace ferry
