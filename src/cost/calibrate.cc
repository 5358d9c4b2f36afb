// Calibration of a profile's efficiencies to measured op times; the method is described in
// calibrate.h. The op times at efficiency 1 come from the cost model itself (a profile whose
// efficiencies are all 1), so the fit and the predictions use one timing model.
#include "cost/calibrate.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "cost/cost_model.h"

namespace ferry {

namespace {

constexpr double kMinEfficiency = 1e-4;
constexpr int kMaxIterations = 100;
constexpr double kTie = 1e-6;  // relative difference below which the two roofs of an op are equal

// One timed op: its times at efficiency 1 on its unit (a: compute, b: memory) and r, the measured
// time less the launch overhead.
struct Sample {
  size_t unit = 0;
  double a = 0, b = 0, r = 0, measured = 0, overhead = 0;
};

// The parameters of one class: compute efficiency per unit and the memory efficiency.
struct ClassParams {
  std::array<double, kNumComputeDTypes> e{1, 1, 1, 1};
  double m = 1;
  double model_us(const Sample& s) const {
    return std::max(s.a > 0 ? s.a / e[s.unit] : 0.0, s.b > 0 ? s.b / m : 0.0);
  }
  double compute_us(const Sample& s) const { return s.a > 0 ? s.a / e[s.unit] : 0.0; }
  double memory_us(const Sample& s) const { return s.b > 0 ? s.b / m : 0.0; }
  // Which roof binds `s`. On the ridge (both roofs equal within kTie) the data cannot tell, and
  // the roof that binds under `tie_break` (the starting profile) is taken.
  bool compute_bound(const Sample& s, const ClassParams& tie_break) const {
    const double c = compute_us(s), mem = memory_us(s);
    if (c > mem * (1 + kTie)) return true;
    if (mem > c * (1 + kTie)) return false;
    return tie_break.compute_us(s) >= tie_break.memory_us(s);
  }
};

double clamp_efficiency(double v) { return std::clamp(v, kMinEfficiency, 1.0); }

// The weighted geometric mean of (ratio, weight) pairs: the efficiency minimising the weighted
// squared log error of the ops one roof binds (log r = log a - log e, so log e is the mean of
// log(a / r)).
std::optional<double> log_mean(const std::vector<std::pair<double, double>>& ratios) {
  double sum = 0, weights = 0;
  for (const auto& [x, w] : ratios) {
    sum += w * std::log(x);
    weights += w;
  }
  if (weights <= 0) return std::nullopt;
  return clamp_efficiency(std::exp(sum / weights));
}

// How much an op's time says about its efficiency: a relative error d in the measured time t is
// an error d * t / r in r = t - L, so the log error's variance grows as (t / r)^2, and an op
// that is mostly launch overhead weighs little.
double weight(const Sample& s) { return (s.r / s.measured) * (s.r / s.measured); }

// Weighted squared log error of `p` over the samples.
double log_error(const std::vector<Sample>& samples, const ClassParams& p) {
  double sum = 0;
  for (const Sample& s : samples) {
    const double d = std::log(p.model_us(s) / s.r);
    sum += weight(s) * d * d;
  }
  return sum;
}

// The least-squares parameters for a given assignment of ops to roofs (true: compute). A
// parameter without ops keeps the starting value, raised until its roof binds none of the ops.
ClassParams fit_assignment(const std::vector<Sample>& samples, const std::vector<bool>& on_compute,
                           const ClassParams& start) {
  std::array<std::vector<std::pair<double, double>>, kNumComputeDTypes> e_ratios;
  std::vector<std::pair<double, double>> m_ratios;
  for (size_t i = 0; i < samples.size(); ++i) {
    const Sample& s = samples[i];
    if (on_compute[i]) e_ratios[s.unit].emplace_back(s.a / s.r, weight(s));
    else m_ratios.emplace_back(s.b / s.r, weight(s));
  }
  ClassParams p = start;
  if (std::optional<double> m = log_mean(m_ratios)) p.m = *m;
  for (size_t u = 0; u < kNumComputeDTypes; ++u)
    if (std::optional<double> e = log_mean(e_ratios[u])) p.e[u] = *e;
  for (size_t u = 0; u < kNumComputeDTypes; ++u) {
    if (!e_ratios[u].empty()) continue;
    for (const Sample& s : samples)
      if (s.unit == u && s.a > 0 && s.b > 0) p.e[u] = std::max(p.e[u], s.a * p.m / s.b);
    p.e[u] = clamp_efficiency(p.e[u]);
  }
  if (m_ratios.empty()) {
    for (const Sample& s : samples)
      if (s.a > 0 && s.b > 0) p.m = std::max(p.m, s.b * p.e[s.unit] / s.a);
    p.m = clamp_efficiency(p.m);
  }
  return p;
}

// Alternates from `p`: assign every op to the roof that binds it, refit, until the assignment
// stops changing.
ClassParams alternate(const std::vector<Sample>& samples, ClassParams p, const ClassParams& start) {
  std::vector<bool> on_compute(samples.size()), previous;
  for (int iteration = 0; iteration < kMaxIterations; ++iteration) {
    for (size_t i = 0; i < samples.size(); ++i) on_compute[i] = p.compute_bound(samples[i], start);
    if (on_compute == previous) break;
    previous = on_compute;
    p = fit_assignment(samples, on_compute, start);
  }
  return p;
}

// Two starts: the starting profile's own view of which roof binds each op, and the bounds the ops
// imply (an op that takes r cannot have e < a / r; for a compute-bound op e = a / r exactly, so on
// times the model itself produced this start is exact and the true parameters a fixed point). The
// bound start replaces the profile's view only when it halves the squared log error: when every op
// of a class moves as many flops per byte, either roof explains the times and the data cannot
// overrule the profile.
ClassParams fit_class(const std::vector<Sample>& samples, const ClassParams& start) {
  const ClassParams from_profile = alternate(samples, start, start);
  ClassParams bounds = start;
  for (size_t u = 0; u < kNumComputeDTypes; ++u) {
    double bound = 0;
    for (const Sample& s : samples)
      if (s.unit == u && s.a > 0) bound = std::max(bound, s.a / s.r);
    if (bound > 0) bounds.e[u] = clamp_efficiency(bound);
  }
  double m_bound = 0;
  for (const Sample& s : samples)
    if (s.b > 0) m_bound = std::max(m_bound, s.b / s.r);
  if (m_bound > 0) bounds.m = clamp_efficiency(m_bound);
  const ClassParams from_bounds = alternate(samples, bounds, start);
  return log_error(samples, from_bounds) < 0.5 * log_error(samples, from_profile) ? from_bounds : from_profile;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

namespace {

// The timed ops of `g` per class: `all` of them, and in `fitted` those that carry information
// (time above the launch overhead, some work). Counts go to `report`.
void collect_samples(const Graph& g, const HardwareProfile& start, CalibrationReport& report,
                     std::array<std::vector<Sample>, kNumOpClasses>& fitted,
                     std::array<std::vector<Sample>, kNumOpClasses>& all) {
  // Times at efficiency 1 from the cost model itself.
  HardwareProfile unit_profile = start;
  for (OpEfficiency& e : unit_profile.efficiency) e = OpEfficiency{};
  const CostModel unit_cost(unit_profile, CostOptions{.use_measured_times = false});
  for (const Op& op : g.ops) {
    if (!op.time_us) continue;
    ++report.timed_ops;
    const OpCost c = unit_cost.op_cost(g, op);
    const Sample s{static_cast<size_t>(c.unit), c.compute_us, c.memory_us, *op.time_us - c.overhead_us,
                   *op.time_us, c.overhead_us};
    all[static_cast<size_t>(c.op_class)].push_back(s);
    if (s.r > 0 && (s.a > 0 || s.b > 0)) fitted[static_cast<size_t>(c.op_class)].push_back(s);
    else ++report.skipped_ops;
  }
}

// Fits one class, records its parameters in `report` and writes them into `eff`; returns the
// class's parameters before and after.
std::pair<ClassParams, ClassParams> fit_and_record(OpClass cls, const std::vector<Sample>& samples,
                                                   const HardwareProfile& start, OpEfficiency& eff,
                                                   CalibrationReport& report) {
  const OpEfficiency old = eff;
  std::array<bool, kNumComputeDTypes> units{};
  bool has_memory = false;
  for (const Sample& s : samples) {
    units[s.unit] = units[s.unit] || s.a > 0;
    has_memory = has_memory || s.b > 0;
  }
  ClassParams before;
  for (size_t u = 0; u < kNumComputeDTypes; ++u) before.e[u] = old.compute_for(static_cast<ComputeDType>(u));
  before.m = old.memory;
  const ClassParams chosen = fit_class(samples, before);
  // The ops each roof binds at the fit: the data determine exactly the parameters with ops.
  std::array<int, kNumComputeDTypes> compute_bound{};
  int memory_bound = 0;
  for (const Sample& s : samples) (chosen.compute_bound(s, before) ? compute_bound[s.unit] : memory_bound)++;
  for (size_t u = 0; u < kNumComputeDTypes; ++u)
    if (units[u])
      report.parameters.push_back({cls, false, static_cast<ComputeDType>(u), before.e[u], chosen.e[u],
                                   compute_bound[u] > 0, compute_bound[u]});
  if (has_memory)
    report.parameters.push_back({cls, true, ComputeDType::kFp32, before.m, chosen.m, memory_bound > 0, memory_bound});
  // Per-unit compute efficiencies when the device has more than fp32 (the other units keep theirs).
  const bool several_units = std::count_if(start.peak_flops.begin(), start.peak_flops.end(),
                                           [](const std::optional<double>& p) { return p.has_value(); }) > 1;
  for (size_t u = 0; u < kNumComputeDTypes; ++u) {
    const auto unit = static_cast<ComputeDType>(u);
    const double value = units[u] ? chosen.e[u] : old.compute_for(unit);
    if (unit == ComputeDType::kFp32) eff.compute = value;
    else if (several_units && start.peak_flops[u]) eff.compute_by_unit[u] = value;
  }
  if (has_memory) eff.memory = chosen.m;
  return {before, chosen};
}

// Errors of one class's ops under the parameters before and after the fit.
ClassCalibration class_errors(OpClass cls, const std::vector<Sample>& all, const ClassParams& before,
                              const ClassParams& after, double& sum_before, double& sum_after) {
  ClassCalibration cc;
  cc.op_class = cls;
  std::vector<double> err_before, err_after;
  sum_before = sum_after = 0;
  for (const Sample& s : all) {
    const double tb = s.overhead + before.model_us(s), ta = s.overhead + after.model_us(s);
    sum_before += tb;
    sum_after += ta;
    cc.measured_us += s.measured;
    if (s.measured > 0) {
      err_before.push_back(std::fabs(tb / s.measured - 1));
      err_after.push_back(std::fabs(ta / s.measured - 1));
    }
  }
  cc.ops = static_cast<int>(all.size());
  cc.total_error_before = cc.measured_us > 0 ? sum_before / cc.measured_us - 1 : 0;
  cc.total_error_after = cc.measured_us > 0 ? sum_after / cc.measured_us - 1 : 0;
  cc.median_abs_error_before = median(err_before);
  cc.median_abs_error_after = median(err_after);
  return cc;
}

}  // namespace

Result<CalibrationReport> calibrate_profile(const Graph& g, const HardwareProfile& start) {
  if (Status v = validate_profile(start); !v.ok()) return v.with_context(fmt::format("hardware profile '{}'", start.name));
  CalibrationReport report;
  std::array<std::vector<Sample>, kNumOpClasses> samples, all;
  collect_samples(g, start, report, samples, all);
  if (report.timed_ops == report.skipped_ops)
    return Status::InvalidArgument(fmt::format(
        "no op of '{}' has a measured time above the launch overhead of {} us (time_us of {} ops): nothing to fit",
        g.info.model, start.launch_overhead_us, report.timed_ops));

  report.profile = start;
  double measured_total = 0, before_total = 0, after_total = 0;
  for (size_t c = 0; c < kNumOpClasses; ++c) {
    if (all[c].empty()) continue;
    const auto cls = static_cast<OpClass>(c);
    const auto [before, after] = fit_and_record(cls, samples[c], start, report.profile.efficiency[c], report);
    double sum_before = 0, sum_after = 0;
    report.classes.push_back(class_errors(cls, all[c], before, after, sum_before, sum_after));
    measured_total += report.classes.back().measured_us;
    before_total += sum_before;
    after_total += sum_after;
  }
  report.iteration_error_before = measured_total > 0 ? before_total / measured_total - 1 : 0;
  report.iteration_error_after = measured_total > 0 ? after_total / measured_total - 1 : 0;
  report.profile.sources["compute.efficiency"] = fmt::format(
      "Fitted by calibrate_profile (least squares on log op times, src/cost/calibrate.h) to the {} measured op times "
      "of '{}' (batch {}, {}), starting from profile '{}'; summed op time {:+.1f}% before, {:+.1f}% after the fit",
      report.timed_ops - report.skipped_ops, g.info.model, g.info.batch, to_string(g.info.precision), start.name,
      100 * report.iteration_error_before, 100 * report.iteration_error_after);
  FERRY_RETURN_IF_ERROR(validate_profile(report.profile));
  return report;
}

}  // namespace ferry
