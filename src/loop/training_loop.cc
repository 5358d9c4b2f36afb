// The dynamic loop. See training_loop.h for the design.
#include "loop/training_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

namespace ferry {

TrainingLoop::TrainingLoop(const Graph& graph, const Graph& sized, Backend& backend, PlanFunction plan,
                           LoopOptions options)
    : graph_(graph),
      sized_(sized),
      backend_(backend),
      plan_(std::move(plan)),
      options_(std::move(options)),
      drift_(options_.drift_threshold, options_.drift_iterations) {
  options_.executor.record_op_times = true;
}

Result<std::unique_ptr<TrainingLoop>> TrainingLoop::create(const Graph& graph, const Graph& sized, Backend& backend,
                                                           PlanFunction plan, LoopOptions options) {
  if (sized.ops.size() != graph.ops.size() || sized.tensors.size() != graph.tensors.size())
    return Status::InvalidArgument("the sized graph is not the graph");
  std::unique_ptr<TrainingLoop> loop(new TrainingLoop(graph, sized, backend, std::move(plan), std::move(options)));
  const std::optional<MeasuredFigures> known = loop->options_.figures;
  const std::string source = known ? loop->options_.figures_source : "profile";
  Status first = loop->make_plan(known, source);
  if (!first.ok() && known && first.code() == StatusCode::kOutOfMemory) {
    // The planner's heuristics depend on times: with the known figures it found no plan within the
    // budget. The device profile's figures may give one; it is measured and re-planned from anyway.
    loop->events_.push_back({.after_iteration = -1,
                             .what = "no plan within the budget from the " + source +
                                     " figures; planned from the device profile instead (" + first.message() + ")"});
    first = loop->make_plan(std::nullopt, "profile");
  }
  FERRY_RETURN_IF_ERROR(first);
  loop->versions_.back().reason = loop->plan_figures_
                                       ? "first plan, from figures measured earlier (" + source + ")"
                                       : "first plan, from the device profile '" + loop->options_.profile.name + "'";
  FERRY_ASSIGN_OR_RETURN(loop->executor_,
                         Executor::create(graph, backend, loop->options_.executor, &loop->schedule_));
  loop->versions_.back().new_executor = true;
  return loop;
}

Status TrainingLoop::initialize() { return executor_->initialize(); }

Status TrainingLoop::make_plan(const std::optional<MeasuredFigures>& figures, const std::string& source,
                               const Schedule* incumbent) {
  const auto start = std::chrono::steady_clock::now();
  Graph timed = sized_;
  HardwareProfile profile = options_.profile;
  if (figures) {
    apply_op_times(*figures, timed);
    profile = apply_links(*figures, std::move(profile));
    FERRY_RETURN_IF_ERROR(validate_profile(profile));
  }
  const CostModel cost(profile, figures ? cost_options(*figures) : CostOptions{});
  FERRY_ASSIGN_OR_RETURN(Schedule schedule, plan_(timed, cost));
  SimOptions so;
  so.budget_bytes = options_.executor.budget_bytes;
  so.op_scratch_bytes = options_.op_scratch_bytes;
  FERRY_ASSIGN_OR_RETURN(SimResult predicted, simulate(timed, schedule, cost, so));
  PlanVersion v;
  if (incumbent != nullptr) {
    // The planners are heuristics: on new figures the plan running may still be the faster one.
    FERRY_ASSIGN_OR_RETURN(SimResult current, simulate(timed, *incumbent, cost, so));
    if (current.feasible && current.iteration_us <= predicted.iteration_us) {
      v.kept_current = true;
      v.new_plan_ms = predicted.iteration_us / 1e3;
      schedule = *incumbent;
      predicted = std::move(current);
    }
  }
  v.version = static_cast<int>(versions_.size());
  v.figures_source = source;
  v.predicted_ms = predicted.iteration_us / 1e3;
  v.planning_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  v.swapped_tensors = schedule.distinct_tensors(ActionKind::kSwapOut);
  v.recomputed_tensors = schedule.distinct_tensors(ActionKind::kRecompute);
  v.new_executor = !versions_.empty() && !schedule.same_actions(schedule_);
  versions_.push_back(v);
  schedule_ = std::move(schedule);
  prediction_ = std::move(predicted);
  plan_figures_ = figures;
  drift_.expect(model_scale_ * v.predicted_ms);
  return Status::Ok();
}

Status TrainingLoop::replan(int64_t next_iteration, const MeasuredFigures& figures, const std::string& source,
                            const std::string& reason) {
  const size_t versions = versions_.size();
  // make_plan reads the incumbent before it replaces schedule_, so the running plan needs no copy.
  if (Status st = make_plan(figures, source, options_.keep_faster_current ? &schedule_ : nullptr); !st.ok()) {
    if (st.code() != StatusCode::kOutOfMemory) return st;
    // The planner found no plan within the budget on these figures (its heuristics depend on
    // times): the current plan still fits, so it stays, judged by what it measures from now on.
    FERRY_CHECK(versions_.size() == versions, "a failed plan was recorded");
    events_.push_back({.after_iteration = next_iteration - 1,
                       .what = reason + "; no plan within the budget on these figures, the current plan stays (" +
                               st.message() + ")"});
    plan_figures_ = figures;
    if (drift_.streak() > 0) drift_.expect(drift_.streak_mean_ms());
    return Status::Ok();
  }
  PlanVersion& v = versions_.back();
  v.from_iteration = next_iteration;
  v.reason = reason;
  if (v.kept_current)
    v.reason += fmt::format("; a new plan was predicted at {:.1f} ms on these figures, the current one at {:.1f} ms: "
                            "the current one stays",
                            v.new_plan_ms, v.predicted_ms);
  if (!v.new_executor) return Status::Ok();
  // The state leaves the old executor, which is destroyed before the new one allocates.
  FERRY_ASSIGN_OR_RETURN(TrainingState state, retire_executor());
  return resume(state);
}

Result<TrainingState> TrainingLoop::retire_executor() {
  FERRY_CHECK(executor_ != nullptr, "the training loop is suspended");
  FERRY_ASSIGN_OR_RETURN(TrainingState state, executor_->save_state());
  retired_peak_bytes_ = std::max(retired_peak_bytes_, executor_->measured_peak_bytes());
  retired_predicted_live_bytes_ = std::max(retired_predicted_live_bytes_, executor_->predicted_live_peak_bytes());
  retired_predicted_arena_bytes_ = std::max(retired_predicted_arena_bytes_, executor_->predicted_peak_bytes());
  FERRY_ASSIGN_OR_RETURN(uint64_t extent, executor_->measured_extent_bytes());
  retired_extent_bytes_ = std::max(retired_extent_bytes_, extent);
  retired_tier_peak_[0] = std::max(retired_tier_peak_[0], executor_->host_tier_stats().peak_in_use_bytes);
  retired_tier_peak_[1] = std::max(retired_tier_peak_[1], executor_->ssd_tier_stats().peak_in_use_bytes);
  retired_ssd_io_ += executor_->ssd_io_stats();
  retired_host_io_ += executor_->host_io_stats();
  // The compiled kernels do not depend on the plan: the next executor reuses them.
  compiled_ = executor_->take_compiled();
  executor_.reset();
  return state;
}

Result<TrainingState> TrainingLoop::suspend() { return retire_executor(); }

Status TrainingLoop::resume(const TrainingState& state) {
  FERRY_CHECK(executor_ == nullptr && compiled_ != nullptr, "resume of a training loop that is not suspended");
  FERRY_ASSIGN_OR_RETURN(executor_,
                         Executor::create(graph_, backend_, options_.executor, &schedule_, std::move(compiled_)));
  return executor_->restore_state(state);
}

Result<LoopIteration> TrainingLoop::run_iteration(int64_t iteration, DataSource& data) {
  if (options_.slowdown_from >= 0 && iteration >= options_.slowdown_from)
    executor_->set_tier_slowdown(options_.slowdown_tier, options_.slowdown_factor);
  LoopIteration li;
  li.expected_ms = drift_.expected_ms();
  li.drift_threshold = drift_.effective_threshold();
  li.plan_version = versions_.back().version;
  FERRY_ASSIGN_OR_RETURN(li.stats, executor_->run_iteration(iteration, data));
  for (const TransferRecord& r : executor_->last_transfers())
    if (r.ok) bytes_moved_[r.direction == Direction::kSwapOut ? 0 : 1] += r.bytes;
  FERRY_RETURN_IF_ERROR(observe(iteration, li.stats.time_ms));
  return li;
}

Status TrainingLoop::observe(int64_t iteration, double time_ms) {
  const CostModel base(plan_figures_ ? apply_links(*plan_figures_, options_.profile) : options_.profile);
  // The ops ran beside this plan's copies: where the profile says copies slow compute, the
  // simulator stretched each op by the copies it predicted beside it. Divided out here, the
  // figures are the ops' own times, which the next prediction stretches for its own plan.
  const MeasuredFigures fig =
      fit_figures(unstretched_op_times(executor_->op_times_us(), prediction_.op_stretch), executor_->last_transfers(),
                  base, executor_->ssd_codec_figures(), schedule_.ssd_codecs);
  const std::optional<MeasuredFigures> previous = std::exchange(previous_, fig);

  // Online measurement: plan from what the first iterations measured.
  if (options_.measure_online && !plan_figures_) {
    // Iteration numbers are the run's: a shape bucket's loop may start at any of them.
    measured_ = measured_ ? merge_figures(*measured_, fig) : fig;
    if (++measuring_ < options_.measure_iterations) return Status::Ok();
    if (options_.on_figures) options_.on_figures(*measured_);
    return replan(iteration + 1, *measured_, "measured",
                  measuring_ == 1 ? fmt::format("measured on this machine in iteration {}", iteration)
                                  : fmt::format("measured on this machine in {} iterations up to {}", measuring_,
                                                iteration));
  }
  measured_ = previous ? merge_figures(*previous, fig) : fig;
  if (plan_figures_) measured_ = with_known_links(std::move(*measured_), *plan_figures_);
  if (options_.measure_online && plan_figures_ && plan_figures_->codecs.empty() && !fig.codecs.empty()) {
    // The known figures (a cache written by a run that measured no codecs) lack what this run's
    // SSD tier measured of the codecs: plan once more with them.
    MeasuredFigures with = *plan_figures_;
    with.codecs = fig.codecs;
    if (options_.on_figures) options_.on_figures(with);
    return replan(iteration + 1, with, "measured",
                  fmt::format("codec figures measured on this machine in iteration {}", iteration));
  }
  if (options_.replan_every > 0 && (iteration + 1) % options_.replan_every == 0)
    return replan(iteration + 1, *measured_, "measured",
                  fmt::format("periodic re-plan after iteration {} (every {})", iteration, options_.replan_every));
  if (!drift_.add(time_ms)) return Status::Ok();
  // A streak of drifting iterations: do the new figures explain it? Predict the current plan on
  // them; if that closes at least half of the gap, the machine changed: re-plan. Otherwise the
  // simulator is what is off here: rescale the expectation and keep the plan.
  const double measured_ms = drift_.streak_mean_ms();
  const double old_ms = prediction_.iteration_us / 1e3;
  FERRY_ASSIGN_OR_RETURN(const double new_ms, predict_ms(schedule_, *measured_));
  const double beyond = drift_.effective_threshold();
  const std::string took =
      fmt::format("iterations {}-{} took {:.1f} ms on average against {:.1f} ms expected (more than {:.0f}% off{})",
                  iteration + 1 - drift_.streak(), iteration, measured_ms, drift_.expected_ms(), 100 * beyond,
                  beyond > options_.drift_threshold ? ", twice the noise of this run's iteration times" : "");
  const FiguresChange change = plan_figures_ ? compare_figures(*plan_figures_, *measured_)
                                             : FiguresChange{.relative = INFINITY, .what = "first measurement"};
  if (figures_explain(measured_ms, model_scale_, old_ms, new_ms)) {
    if (options_.on_figures) options_.on_figures(*measured_);
    return replan(iteration + 1, *measured_, "measured",
                  fmt::format("{}; {}: the current plan predicted {:.1f} ms on the new figures", took,
                              change.what.empty() ? "figures changed" : change.what, model_scale_ * new_ms));
  }
  const double predicted_new_ms = model_scale_ * new_ms;  // as judged, before the scale is learnt
  model_scale_ = old_ms > 0 ? measured_ms / old_ms : 1;
  events_.push_back({.after_iteration = iteration,
                     .what = took + fmt::format("; the new figures ({}) predict {:.1f} ms for this plan, which does not "
                                                "explain it: the simulator is off by {:.2f}x on this machine, expected "
                                                "times are scaled by it, no re-plan",
                                                change.what.empty() ? "no change" : change.what, predicted_new_ms,
                                                model_scale_)});
  drift_.expect(measured_ms);
  return Status::Ok();
}

Result<double> TrainingLoop::predict_ms(const Schedule& schedule, const MeasuredFigures& figures) const {
  Graph timed = sized_;
  apply_op_times(figures, timed);
  const HardwareProfile profile = apply_links(figures, options_.profile);
  FERRY_RETURN_IF_ERROR(validate_profile(profile));
  SimOptions so;
  so.budget_bytes = options_.executor.budget_bytes;
  so.op_scratch_bytes = options_.op_scratch_bytes;
  so.timing_only = true;
  so.record_timeline = false;
  FERRY_ASSIGN_OR_RETURN(SimResult r, simulate(timed, schedule, CostModel(profile, cost_options(figures)), so));
  return r.iteration_us / 1e3;
}

bool figures_explain(double measured_ms, double model_scale, double old_ms, double new_ms) {
  const double gap_old = std::abs(measured_ms - model_scale * old_ms);
  return gap_old > 0 && std::abs(measured_ms - model_scale * new_ms) <= 0.5 * gap_old;
}

bool DriftWatch::add(double ms) {
  if (threshold_ <= 0 || expected_ms_ <= 0 || ms <= 0) return false;
  const double ratio = ms / expected_ms_;
  const double log_ratio = std::log(ratio);
  if (last_log_ratio_) {
    differences_.push_back(std::abs(log_ratio - *last_log_ratio_));
    if (differences_.size() > kNoiseWindow) differences_.erase(differences_.begin());
  }
  last_log_ratio_ = log_ratio;
  if (std::abs(ratio - 1) <= effective_threshold()) {
    streak_.clear();
    return false;
  }
  // A drift is one way: an iteration off the other way starts a new streak.
  if (!streak_.empty() && (streak_.back() > expected_ms_) != (ms > expected_ms_)) streak_.clear();
  streak_.push_back(ms);
  return static_cast<int>(streak_.size()) >= iterations_;
}

double DriftWatch::noise() const {
  if (differences_.size() < kMinNoiseSamples) return 0;
  std::vector<double> d = differences_;
  std::nth_element(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(d.size() / 2), d.end());
  // For a difference of two independent N(0, s^2), the median of its absolute value is
  // 0.6745 * sqrt(2) * s.
  return d[d.size() / 2] / (0.6745 * std::sqrt(2.0));
}

double DriftWatch::effective_threshold() const {
  return threshold_ <= 0 ? 0 : std::max(threshold_, std::exp(2 * noise()) - 1);
}

double DriftWatch::streak_mean_ms() const {
  return streak_.empty() ? 0 : std::accumulate(streak_.begin(), streak_.end(), 0.0) / static_cast<double>(streak_.size());
}

uint64_t TrainingLoop::predicted_live_peak_bytes() const {
  if (!executor_) return retired_predicted_live_bytes_;
  return std::max(retired_predicted_live_bytes_, executor_->predicted_live_peak_bytes());
}

uint64_t TrainingLoop::predicted_peak_bytes() const {
  if (!executor_) return retired_predicted_arena_bytes_;
  return std::max(retired_predicted_arena_bytes_, executor_->predicted_peak_bytes());
}

uint64_t TrainingLoop::measured_peak_bytes() const {
  if (!executor_) return retired_peak_bytes_;
  return std::max(retired_peak_bytes_, executor_->measured_peak_bytes());
}

Result<uint64_t> TrainingLoop::measured_extent_bytes() const {
  if (!executor_) return retired_extent_bytes_;
  FERRY_ASSIGN_OR_RETURN(uint64_t extent, executor_->measured_extent_bytes());
  return std::max(retired_extent_bytes_, extent);
}

SsdIoStats TrainingLoop::ssd_io_stats() const {
  SsdIoStats s = retired_ssd_io_;
  if (executor_) s += executor_->ssd_io_stats();
  return s;
}

HostIoStats TrainingLoop::host_io_stats() const {
  HostIoStats s = retired_host_io_;
  if (executor_) s += executor_->host_io_stats();
  return s;
}

uint64_t TrainingLoop::tier_peak_bytes(Tier t) const {
  const uint64_t retired = retired_tier_peak_[t == Tier::kHost ? 0 : 1];
  if (!executor_) return retired;
  const TierStats s = t == Tier::kHost ? executor_->host_tier_stats() : executor_->ssd_tier_stats();
  return std::max(retired, s.peak_in_use_bytes);
}

}  // namespace ferry
