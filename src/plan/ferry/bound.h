// A lower bound on the iteration time of every plan in Ferry's decision space (keep, swap,
// recompute any gap of any tensor, offload persistent tensors, at any time) at a budget: no plan
// the simulator can time is faster. docs/planner.md derives it; in short, a linear program over
//   x_c, y_c in [0,1]: gap c is away by swap / by recompute (fractions: the relaxation),
//   o_t: tensor t's swap-out happened (x_c <= o_t), f_s: bytes away by swap at step s,
//   T: the iteration time, minimised, subject to
//   memory   keep(s) - sum_{c ∋ s} b_c y_c - f_s <= budget          (every step s)
//            f_s <= sum_{c ∋ s} b_c x_c
//   transfer f_s <= rate * (T - suffix(s)),  f_s - g_s <= rate * (T - prefix(s))   (transient
//            bytes away at s went out before s began and come back after it, on links of that
//            rate; g_s: the swapped gradients of host updates, which the host consumes)
//   links    T >= total time each link (d2h, h2d, SSD write, SSD read) is busy
//   compute  T >= sum of op times + sum_c y_c * (producer time of c)
//            + for each input u of that producer that no other op reads (gone by the gap):
//              y_c <= z + k + w, z charged u's producer time, k u's bytes over the gap, w u's
//              copy's link time (Note [Dead sources] in bound.cc)
//   host     T >= r_k + sum_{j: r_j >= r_k} host_j * h_j   (every update k that may run on the host:
//            it starts after its gradient's producer p_k ran, r_k = prefix(p_k + 1), and the host
//            lane runs one update at a time)
//   cyclic   T >= prefix(w + 1) + d2h time of the cyclic swap-outs of tensors last written at w
//            or later;  T >= h2d time of the cyclic swap-ins of tensors first read at f or
//            earlier + compute from f on  (links run one copy at a time, from idle)
// Every real plan gives a feasible point with objective <= its simulated time (memory credited
// for whole gaps, a recompute charged its producer and one link of its chain only, transfers
// only their link time: all optimistic), so the LP optimum is a lower bound. Intervals are
// encoded with running sums, so the LP has O(gaps + steps) non-zeros.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "plan/ferry/gaps.h"
#include "plan/ferry/lp.h"
#include "plan/policy_common.h"

namespace ferry {

struct LowerBound {
  double us = 0;                // no plan at this budget is faster (infinity: none fits)
  std::string method;           // "lp" (the relaxation above) or "compute" (op times alone)
  double solve_seconds = 0;
  size_t lp_rows = 0, lp_columns = 0;
  // With LowerBoundOptions::keep_solution and an optimal LP: per gap of find_gaps() (gaps.h), the
  // fractions of it the relaxation takes away by swap (x_c; a cyclic gap: the offload) and by
  // recompute (y_c), -1 where the LP has no such column. The planner's LP-guided variants read
  // them (ferry_planner.cc, Note [LP-guided greedy]); the bound itself does not depend on them.
  struct GapValue {
    planner::GapSpec gap;
    float swap = -1, recompute = -1;
  };
  std::vector<GapValue> solution;
};

struct LowerBoundOptions {
  // The memory constraint is kept at this many of the steps where the keep plan exceeds the
  // budget (evenly spread, the peak included): fewer constraints make a smaller LP and a weaker,
  // still valid, bound.
  size_t max_constrained_steps = 256;
  double time_limit_s = 30;
  // The host lane's release times (bound.cc): an update on the host starts no earlier than the
  // device has produced its gradient. Off, the lane is charged its total only (a weaker bound;
  // tests compare).
  bool host_release_times = true;
  // The cyclic copies' release and deadline rows (bound.cc): a persistent tensor offloaded between
  // iterations leaves after its last write and is back before its first access.
  bool cyclic_copy_times = true;
  // At most this many rows per chain of timing rows (Note [Chained timing rows] in bound.cc); 0:
  // one per distinct release or step (a bound as high or higher, a larger LP, slower to solve).
  size_t max_timing_rows = 64;
  // A recompute whose producer reads an input no other op reads pays for that input too: its
  // recompute, its bytes kept on the device, or its copy's link time (Note [Dead sources] in
  // bound.cc). Off: the producer's time only (a weaker bound; tests compare).
  bool dead_sources = true;
  // Fill LowerBound::solution (the relaxation's primal values per gap).
  bool keep_solution = false;
};

// Per update in facts.host_updatable, the earliest time it can start on the host in any plan: its
// gradient is off the device only after the gradient's producer ran, and the compute stream
// reaches that no earlier than the sum of the device times of the ops up to it (updates counted
// as on the host). The simulator's host lane never starts an update before (kHostRun waits for
// the compute stream and the gradient's copy); the bound's host rows rest on that.
std::vector<double> host_update_release_us(const PlanFacts& facts);

// The bound under way: its LP built, solving in its own process (plan/contained.h), or already
// known (no LP needed, or none can be solved). wait() answers it.
class PendingLowerBound {
 public:
  Result<LowerBound> wait();

 private:
  friend Result<PendingLowerBound> start_lower_bound(const PlanContext&, const PlanFacts&, const LowerBoundOptions&);
  explicit PendingLowerBound(LowerBound known) : out_(std::move(known)) {}
  LowerBound out_;  // the compute bound, and the LP's size where one is solving
  std::optional<planner::LinearProgram::Pending> solve_;
  std::vector<planner::GapSpec> gaps_;
  std::vector<std::pair<int, int>> gap_cols_;  // per gap: its swap and recompute columns (-1: none)
  bool keep_solution_ = false;
  std::chrono::steady_clock::time_point start_;
};

// Builds the bound's LP for ctx (its budget, tier and recompute_only) and starts its solve, which
// runs beside the caller's work until wait(). It forks: call it where no other thread of the
// process runs (plan/contained.h).
Result<PendingLowerBound> start_lower_bound(const PlanContext& ctx, const PlanFacts& facts,
                                            const LowerBoundOptions& o = {});

// The bound for ctx: start_lower_bound(...).wait(). Without COIN-OR, or when the solver does not
// finish in time, the compute bound (sum of op times), which is valid but weak.
Result<LowerBound> plan_lower_bound(const PlanContext& ctx, const PlanFacts& facts, const LowerBoundOptions& o = {});

}  // namespace ferry
