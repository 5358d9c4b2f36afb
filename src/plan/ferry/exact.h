// ferry-exact: the joint swap + recompute plan of smallest stage time, by a mixed-integer
// program solved with CBC, for graphs of up to a few hundred ops (POET, Patil et al. 2022, states
// the same kind of program). The reference the Ferry planner is measured against.
//
// Model (stages are steps; every decision happens in a stage)
//   P[t,s]  tensor t is on the device while op s runs      (fixed 1 where op s reads or writes t)
//   R[t,s]  t is recomputed before op s                     (its producer's inputs on the device)
//   I[t,s]  t is swapped in before op s                     (needs a copy: O[t], or t offloaded)
//   O[t,s]  transient t is swapped out after op s (at most once, where it is on the device; a
//           swap-in needs one a stage before it)            Z[p]: persistent p lives in the tier
//   P[t,s] <= P[t,s-1] + R[t,s] + I[t,s]            (present only if it stayed or came back)
//   a swap-in lands during its stage (no I at a step that reads t: the op would wait for it); a
//   swap-out runs in the next stage if t stays on the device then, else in its own stage, serial
//   (t's release waits for it); the schedule takes a swap-in or recompute only where the
//   solution has t present
//   sum_t bytes(t) P[t,s] + scratch(s) <= budget    (every step)
//   d[s] >= op time + recompute time in stage s,  d[s] >= swap-in time in s,  d[s] >= swap-out time
//   in s
//   (the sum of both when the copy directions share a channel); minimise sum_s d[s].
// A tensor may stay on the device past its last use only to feed a recompute (chains). The
// stage time is an upper bound of what the simulator gives the same plan (transfers never
// overlap stage boundaries here); stage_time() evaluates any schedule in this model, so "the
// MILP optimum is at most the stage time of every plan in its space" can be checked.
#pragma once

#include "common/status.h"
#include "plan/policy_common.h"

namespace ferry {

struct ExactOptions {
  size_t max_ops = 300;       // larger graphs are refused (Unsupported)
  double time_limit_s = 60;   // CBC's wall-clock limit
  int max_nodes = 0;          // CBC's node limit (0: none); deterministic where time is not
};

// Plans ctx exactly. The attempt's notes give the solver's status, objective, bound and gap;
// solve_seconds, mip_gap and proven_optimal are set. A solution whose live bytes fit but whose
// placement does not (fragmentation) is solved again with the memory rows lowered by the excess,
// at most twice ("memory rows lowered by N bytes" in the notes: its optimum is of that narrower
// space; solve_seconds counts every solve). Errors: Unsupported without CBC or above
// max_ops; an infeasible budget is an attempt that does not fit.
Result<PlanAttempt> plan_exact(const PlanContext& ctx, const PlanFacts& facts, const ExactOptions& options = {});

// The stage time of `schedule` in the model above (microseconds).
Result<double> stage_time(const PlanContext& ctx, const PlanFacts& facts, const Schedule& schedule);

}  // namespace ferry
