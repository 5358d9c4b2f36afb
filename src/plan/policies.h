// Policies: planners that turn (graph, cost model, memory budget) into a Schedule (schedule.h),
// each following one published system. docs/policies.md describes every policy, the paper it
// follows, what Ferry implements and where it deviates.
//
//   none             keep everything, free at last use (the empty schedule)
//   vdnn-all         vDNN (Rhu et al., MICRO 2016): offload every layer's input, prefetch one layer ahead
//   vdnn-conv        vDNN, offloading only the inputs of convolutions
//   lru              on-demand eviction of the least recently used tensor, fetch on access
//   lms              IBM Large Model Support (Le et al., 2018): swap out above a size threshold,
//                    swap in `swapin_ahead` ops ahead
//   capuchin         Capuchin (Peng et al., ASPLOS 2020): swap or recompute per tensor by idle
//                    time and memory saved per second of overhead; time-driven prefetch
//   checkpoint-sqrt  Chen et al. 2016: keep every ~sqrt(n)-th segment boundary, recompute the rest
//   checkmate        Checkmate (Jain et al., MLSys 2020): optimal rematerialisation by MILP (CBC)
//
// Feasibility. A plan fits a budget when its device memory, as the simulator and the executor
// place it (schedule/placement.h: persistent region + statically placed blocks), is at most the
// budget. Planners measure that exactly (they lower their schedule and place it; they never run
// the simulator, which depends on this module). vdnn-*, lms and checkpoint-sqrt ignore the budget
// when choosing what to move (as the papers do) and only check it; lru, capuchin and checkmate
// plan for it.
//
// Usage:
//   PlanContext ctx{.graph = g, .cost = cost, .budget_bytes = 512 << 20};
//   ctx.op_scratch_bytes = compiled->all_scratch_bytes();       // sizes from the backend
//   Result<PlanReport> r = plan_policy("capuchin", ctx);
//   if (!r.ok()) return r.status();  // OutOfMemory names the smallest budget that fits
//   FERRY_ASSIGN_OR_RETURN(SimResult sim, simulate(g, r->schedule, cost, {.budget_bytes = ctx.budget_bytes}));
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "cost/cost_model.h"
#include "graph/graph.h"
#include "schedule/schedule.h"

namespace ferry {

struct PolicyOptions {
  int32_t lms_swapin_ahead = 1;            // lms: swap in this many ops before the first backward use (>= 1)
  uint64_t lms_threshold_bytes = 0;        // lms: swap only tensors of at least this many bytes
  double checkmate_time_limit_s = 60;      // checkmate: CBC wall-clock limit per solve (a plan takes
                                           // 1-6 solves; find_min_budget ~10 more)
  int32_t checkmate_max_nodes = 0;         // checkmate: CBC branch-and-bound node limit per solve
                                           // (0 = none); unlike time, it is deterministic
  size_t checkmate_max_ops = 400;          // checkmate: larger graphs are refused
  size_t checkmate_max_variables = 60000;  // checkmate: larger MILPs are refused
  // ferry: make its own plans and its seed portfolio's on two workers (when the process may use two
  // cores), and probe lru's and capuchin's smallest-budget scan on the cores the process may use.
  // The answer is the same either way: the plans are compared in one order.
  bool parallel_portfolio = true;
  // For budget searches, which ask only whether a policy fits: ferry may return its first plan
  // that fits instead of its fastest (its variants in their order, and the portfolio's seeds only
  // where none of ferry's own fits). Whether it fits is the same either way; the plan is not.
  bool first_fit = false;
};

// Everything a planner reads. `graph` carries the backend's tensor sizes (Tensor::bytes) and
// `op_scratch_bytes` the backend's scratch per op, so that plans are made for the real sizes.
struct PlanContext {
  const Graph& graph;
  const CostModel& cost;                   // op times (measured ones win) and transfer times
  uint64_t budget_bytes = 0;               // device capacity incl. persistent tensors; 0 = unlimited
  Tier tier = Tier::kHost;                 // where swapped tensors go
  bool recompute_only = false;             // --tier none: no swapping, only recomputation
  std::vector<uint64_t> op_scratch_bytes{};  // per op, or empty for none
  bool allow_inplace = true;               // as ProgramOptions::allow_inplace
  uint64_t alignment = 64;                 // device block alignment (OffsetAllocator's)
  PolicyOptions options{};
  // When a plan does not fit, name the smallest budget at which the policy fits (a search of
  // 10-100 plans); false: say only what the plan needs (sweeps, which probe many budgets).
  bool name_smallest_budget = true;
  // For executors that act only through a framework's saved tensors (the PyTorch adapter,
  // python/ferry): when non-empty, indexed by TensorId, a tensor may be freed and brought back only
  // if it is marked here, and only in its gap from its last forward access to its first backward
  // access (where the framework holds it only for backward). Honoured by `ferry` alone; other
  // policies refuse a context that sets it or clears allow_recompute.
  std::vector<bool> framework_saved{};
  bool allow_recompute = true;  // false: swaps only (an executor that cannot re-run ops)
  // When non-empty, indexed by OpId: the ops an executor can run again to recompute their outputs
  // (a framework's op that mutates state or draws random numbers cannot). Honoured by `ferry` only.
  std::vector<bool> replayable_ops{};
  // How SSD copies are coded (Schedule::ssd_codecs): nullopt (`--codec auto`) gives each tensor the
  // codec the cost model predicts fastest for its class and size (CostModel::best_ssd_codec: raw
  // without measured codec figures); a value codes every SSD copy with it (kNone: all raw).
  // Every policy's plan carries the choice, and the planners' transfer times include it.
  std::optional<CodecId> ssd_codec{};
  // Whether any of the three executor restrictions above is set (only `ferry` plans for them).
  bool restricts_executor() const { return !framework_saved.empty() || !allow_recompute || !replayable_ops.empty(); }
};

struct LowerBound;  // plan/ferry/bound.h

// A plan and what the planner knows about it.
struct PlanReport {
  Schedule schedule;
  uint64_t device_bytes = 0;     // device memory the plan needs (placement arena, persistent included)
  uint64_t live_peak_bytes = 0;  // max over steps of live bytes (aligned blocks); <= device_bytes
  size_t swapped_tensors = 0;    // distinct tensors swapped out
  size_t recomputed_tensors = 0; // distinct tensors recomputed
  std::string notes;             // policy-specific, one line (checkmate: solve time, status, gap)
  // checkmate only: CBC's wall time, the relative gap between the solution and the best bound
  // (0 = proven optimal), and whether optimality was proven.
  double solve_seconds = 0;
  double mip_gap = 0;
  bool proven_optimal = false;
  // The lower bound at the plan's context (what lower_bound(ctx) returns), where the planner
  // solved it on the way (ferry's portfolio, for its LP-guided variants), so that a caller
  // reporting the bound need not solve the LP again; null otherwise.
  std::shared_ptr<const LowerBound> bound;
};

struct PolicyInfo {
  std::string name;
  std::string paper;       // the publication it follows
  std::string summary;     // one line
  bool budget_aware;       // whether what it moves depends on the budget
};

// The policies, in the order above.
const std::vector<PolicyInfo>& list_policies();

// Plans `policy` for ctx. Errors: InvalidArgument for an unknown policy (the message lists them),
// bad options or an invalid graph; OutOfMemory when no plan fits ctx.budget_bytes, with the device
// bytes the best one needs and (ctx.name_smallest_budget) the smallest budget at which this policy
// fits; Unsupported for checkmate when Ferry was built without CBC or the graph exceeds its limits.
// A budget-aware policy whose own search misses at a budget at or above find_min_budget's answer
// (its feasibility need not be monotone) answers with its plan for a smaller budget that fits,
// noted in PlanReport::notes; that costs a find_min_budget search.
Result<PlanReport> plan_policy(std::string_view policy, const PlanContext& ctx);

// plan_policy(...).schedule.
Result<Schedule> make_schedule(std::string_view policy, const PlanContext& ctx);

// A time no plan in Ferry's decision space beats at ctx's budget, tier and recompute_only
// (plan/ferry/bound.h: an LP relaxation, or the sum of op times where the LP is not available).
struct LowerBound;
Result<LowerBound> lower_bound(const PlanContext& ctx);

// lower_bound(ctx) for a caller that then plans ctx with `policy`, started so that it solves
// beside the planning (its LP in a child process; PendingLowerBound::wait() answers it); nullopt
// where plan_policy(policy, ctx) solves it itself for its plan (PlanReport::bound: ferry's
// LP-guided variants). It forks: call it before any other thread of the process starts.
class PendingLowerBound;
Result<std::optional<PendingLowerBound>> start_bound_beside(std::string_view policy, const PlanContext& ctx);

// The smallest budget (bytes, a multiple of ctx.alignment) at which `policy` produces a plan that
// fits, ignoring ctx.budget_bytes. Budget-oblivious policies: the device bytes of their one plan.
// Budget-aware ones search on the planners' exact measure (no simulation needed: the
// simulator's feasibility is the same placement). lru and capuchin: their feasibility is not
// monotone in the budget, so a bisection (between a bound no plan beats and the `none` plan's
// device bytes, to 0.5% of the latter) finds a budget B that fits and a scan below it returns
// the lowest that fits in steps of 1% of the `none` plan's bytes: the answer fits, and no budget
// below it by a whole number of those steps does. checkmate: bisection only, with probes that
// stop at CBC's first feasible solution; its MILP's feasibility is monotone (the budget is only
// a right-hand side), but CBC's limits and placement fragmentation are not, and a scan would
// cost one CBC solve per point. Errors: those of plan_policy other than OutOfMemory.
Result<uint64_t> find_min_budget(std::string_view policy, const PlanContext& ctx);

}  // namespace ferry
