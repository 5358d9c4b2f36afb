// Calibration: fit a hardware profile's efficiencies to measured op times (`ferry profile
// --calibrate TRACE --device PROFILE`), for example a trace recorded on a real GPU.
//
// Design
// - The model is the cost model's roofline (cost_model.h): an op of class c on unit u takes
//       t = L + max(a / e[c][u], b / m[c])
//   where a = f * flops / peak_flops(u) and b = bytes / mem_bw are its times at efficiency 1, L the
//   profile's launch overhead (kept, not fitted). Calibration chooses e[c][u] and m[c] in (0, 1]
//   to minimise the squared log error of r = t - L over the class's timed ops: log errors weigh a
//   10 us and a 10 ms op alike, as relative errors should.
// - Per class the fit alternates two steps until nothing changes: assign every op to the roof
//   that binds it under the current parameters, then set each parameter to its least-squares
//   value over the ops assigned to it (in log space that is the geometric mean of a / r or b / r,
//   r = t - L, each op weighted by (r / t)^2: an op that is mostly launch overhead says little).
//   Hard assignment keeps noise in memory-bound ops from being explained by an absurdly low
//   compute efficiency.
// - It runs from two starts and keeps the better: the starting profile's view of which roof binds
//   each op, and the bounds the ops imply (an op that takes r cannot have e < a / r, and for a
//   compute-bound op e = a / r exactly, so on times the model itself produced this start is exact
//   and the true efficiencies are a fixed point). The second replaces the first only when it
//   halves the squared log error: when all ops of a class move as many flops per byte, either roof
//   explains the times equally, and the data cannot overrule the profile. Likewise on the ridge
//   (an op whose two roofs are equal) the roof that binds under the starting profile is taken.
// - A parameter no op depends on cannot be fitted: when every op of a class is memory-bound, its
//   compute efficiency only has to stay above the bound the ops imply (the profile's value is
//   kept, raised to the bound if it is below); likewise for memory. The report says so.
// - Ops without a measured time, and ops whose time is not above the launch overhead (they carry
//   no information about efficiency), are left out and counted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "cost/profile.h"
#include "graph/graph.h"

namespace ferry {

// One fitted parameter.
struct FittedEfficiency {
  OpClass op_class = OpClass::kOther;
  bool memory = false;                      // the memory efficiency, else compute on `unit`
  ComputeDType unit = ComputeDType::kFp32;  // compute only
  double before = 0, after = 0;             // the profile's value and the fitted one
  bool determined = false;                  // false: no op depends on it (value kept, see above)
  int bound_ops = 0;                        // ops bound by this roof at the fit
};

// Errors of one op class, before and after the fit, over its timed ops.
struct ClassCalibration {
  OpClass op_class = OpClass::kOther;
  int ops = 0;                     // timed ops used
  double measured_us = 0;          // sum of their measured times
  double total_error_before = 0;   // sum of modelled / sum of measured - 1
  double total_error_after = 0;
  double median_abs_error_before = 0;  // median over ops of |modelled / measured - 1|
  double median_abs_error_after = 0;
};

struct CalibrationReport {
  HardwareProfile profile;  // the input profile with the fitted efficiencies
  std::vector<FittedEfficiency> parameters;
  std::vector<ClassCalibration> classes;  // classes with timed ops, in OpClass order
  int timed_ops = 0;                      // ops with a measured time
  int skipped_ops = 0;                    // of those, ops not above the launch overhead
  double iteration_error_before = 0;      // sum over timed ops of modelled / measured - 1
  double iteration_error_after = 0;
};

// Fits `start`'s efficiencies to the measured op times (Op::time_us) of `g`. Ops run on the units
// the cost model assigns them (the graph's precision decides tf32). Errors: InvalidArgument when
// no op has a usable measured time, or `start` does not validate.
Result<CalibrationReport> calibrate_profile(const Graph& g, const HardwareProfile& start);

}  // namespace ferry
