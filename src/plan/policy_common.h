// What the policies share (internal to src/plan): facts about the graph computed once, the exact
// memory measure of a schedule, a byte-count estimate of live memory per step, the completion
// pass that turns a policy's intent into a schedule lower_schedule accepts, and the simulator's
// timing for the time-driven policies.
//
// Design
// - A policy states intent: which tensors leave the device and where (kSwapOut + kRelease, or
//   kRelease alone for a tensor to be recomputed), and where it wants them back (kSwapIn,
//   kRecompute). complete_schedule() then walks the program in order with lowering's state
//   machine and makes the intent legal: it fetches on demand what an op or a recompute reads but
//   is not on the device (swap-in from its copy, else a recompute chain), drops actions that
//   became redundant (a swap-out to a tier that already holds a copy, a prefetch of a tensor that
//   is on the device), actions on empty (0-byte) tensors, which free nothing, and actions naming
//   tensors that are dead by then. Policies stay short and
//   cannot emit an illegal schedule by forgetting a prerequisite.
// - Memory is judged as the executor places it (schedule/placement.h): blocks with step-interval
//   lifetimes. live_bytes_per_step() counts those blocks per step without placing them (cheap,
//   used inside greedy loops); measure_schedule() also places them (exact, used to accept a plan).
// - Time is judged by the simulator (src/sim), the same model `ferry plan` reports.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "analysis/analysis.h"
#include "common/status.h"
#include "cost/cost_model.h"
#include "graph/graph.h"
#include "plan/policies.h"
#include "schedule/program.h"
#include "schedule/schedule.h"
#include "sim/simulator.h"

namespace ferry {

// Facts about one graph that every policy reads; built once per planning request.
struct PlanFacts {
  const Graph* graph = nullptr;
  Analysis analysis;                  // uses, lifetimes, in-place buffers of the keep plan
  std::vector<OpId> producer;         // per tensor: the op producing it (kNoOp: input, persistent)
  std::vector<double> op_us;          // per op: the cost model's time
  OpId num_forward = 0;               // ops [0, num_forward) are the forward phase (of the first pass)
  // Every forward op comes before every backward op: one forward/backward pass. False for an
  // iteration of several passes (gradient accumulation, trace format v2), whose later passes the
  // seed policies' "the turn of the iteration" does not describe.
  bool single_pass = true;
  ProgramOptions program_options;     // scratch and in-place, as the simulator lowers
  uint64_t alignment = 64;
  uint64_t none_device_bytes = 0;     // device bytes of the keep plan (policy none)
  std::vector<bool> framework_saved;  // PlanContext::framework_saved
  bool allow_recompute = true;        // PlanContext::allow_recompute
  std::vector<bool> replayable_ops;   // PlanContext::replayable_ops
  // Update ops a plan may run on the host (ZeRO-Offload's placement, a kHostUpdate action):
  // sgd_update / adam_update whose gradient has a producer and no other reader and whose weight
  // and state no other op writes. Empty when the profile has no host optimizer rate
  // (host.optimizer_bytes_per_s), swaps are not allowed (`--tier none`) or the executor is a
  // framework's (PlanContext::restricts_executor: it runs no updates itself).
  std::vector<OpId> host_updatable;

  // Per tensor: its class (graph.h tensor_classes) and the codec its SSD copies get
  // (ssd_codec_choice); empty classes when no tensor is coded.
  std::vector<CodecId> ssd_codec;
  std::vector<std::string> tensor_class;

  const Graph& g() const { return *graph; }
  const TensorInfo& info(TensorId t) const { return analysis.tensors[static_cast<size_t>(t)]; }
  // Time of one swap of t between the device and `tier`, its SSD codec included.
  double transfer_us(const CostModel& cost, Direction d, Tier tier, TensorId t) const;
  // The compute time that swap adds beside the kernels (CostModel::interference_us), same codec.
  double interference_us(const CostModel& cost, Direction d, Tier tier, TensorId t) const;
  uint64_t aligned_bytes(TensorId t) const;
  // Transient, produced by a forward op or a data input, read in forward or produced there, and
  // read again in backward: what swapping and recomputation can free between the two phases.
  bool saved(TensorId t) const;
  // A forward op's output that is not the loss (and recomputation allowed): kRecompute may
  // regenerate it.
  bool recomputable(TensorId t) const;
  // Whether a plan may free t between its accesses at steps `from` and `to` (`cyclic`: across the
  // iteration boundary, persistent tensors): always, unless framework_saved restricts it to a
  // saved tensor's gap from forward to backward.
  bool gap_allowed(TensorId t, OpId from, OpId to, bool cyclic) const;
  // The last forward step that reads t, or its producer's step when no forward op reads it.
  OpId forward_end(TensorId t) const;
};

Result<PlanFacts> make_plan_facts(const PlanContext& ctx);

// Per tensor, the codec its SSD copies get under `ctx` (PlanContext::ssd_codec): the forced codec,
// or CostModel::best_ssd_codec for the tensor's class and size. All kNone with recompute_only.
std::vector<CodecId> ssd_codec_choice(const PlanContext& ctx);
// Sets s.ssd_codecs: the tensors `s` swaps out to the SSD tier or offloads there whose codec in
// `codecs` (per tensor, as ssd_codec_choice) is not kNone, in tensor order.
void attach_ssd_codecs(const std::vector<CodecId>& codecs, Schedule& s);

// How `ctx`'s schedules lower (scratch, in-place), as the simulator and the executor lower them.
ProgramOptions program_options_of(const PlanContext& ctx);

// Live device bytes per step as placement counts them: the persistent region plus every block
// whose step interval covers the step (aligned sizes). Its maximum is a lower bound on the arena.
std::vector<uint64_t> live_bytes_per_step(const PlanFacts& facts, const Program& program);

struct PlanMeasure {
  uint64_t device_bytes = 0;          // placement arena (what must fit the budget)
  uint64_t live_peak_bytes = 0;       // max of live_bytes
  OpId peak_step = 0;                 // first step where live_bytes is maximal
  std::vector<uint64_t> live_bytes;   // per step
  size_t swapped_tensors = 0;
  size_t recomputed_tensors = 0;
  PlacementHint placement;            // how the placement was found (when placed)
};

// `m` (live bytes of a schedule in which tensor t is resident from its production to its last
// use, and no other decision touches it) with t instead away over steps [first, last]: released
// after step first - 1 and back from step last + 1, as a swap's release and swap-in place it.
// The live bytes drop by t's aligned size over those steps; the peak and its step are updated.
// Exactly what measure_schedule(place = false) gives for the schedule with the swap added
// (tested): policies that try one swap at a time update their measure in O(steps).
void subtract_away(const PlanFacts& facts, PlanMeasure& m, TensorId t, OpId first, OpId last);

// Lowers `s` and places it (unless !place: live bytes only). With `good_enough_bytes` (a budget)
// device_bytes is the first placement found within it, not necessarily the smallest: enough to
// say "fits"; without `refine`, the placement tries its orders only (plan_memory_sharing): a
// larger device_bytes at times, never a smaller one. Errors: lower_schedule's (a policy bug: the
// message names the rule).
Result<PlanMeasure> measure_schedule(const PlanFacts& facts, const Schedule& s, bool place = true,
                                     uint64_t good_enough_bytes = 0, bool refine = true);
// The same for `s` already lowered with facts.program_options (lower_for_planning), for a caller
// that measures, simulates and places one schedule without lowering it each time.
Result<Program> lower_for_planning(const PlanFacts& facts, const Schedule& s);
Result<PlanMeasure> measure_program(const PlanFacts& facts, const Schedule& s, const Program& program, bool place = true,
                                    uint64_t good_enough_bytes = 0, bool refine = true);

// Makes a policy's intent legal (see the design note); an on-demand fetch swaps in from the
// tier holding the copy (host first), or recomputes when there is none. Errors: Internal when
// the intent contradicts itself (a swap-in with no copy anywhere, an action on a tensor that
// does not exist yet, a release of the loss or a persistent tensor, a release without a copy of
// a tensor that cannot be recomputed).
Result<Schedule> complete_schedule(const PlanFacts& facts, Schedule intent);

// Forward-only producer inputs that a recompute of `dropped` tensors would read after their
// natural death: dropping them too (release after their last forward use, recompute on demand)
// keeps recomputation from pinning them for the whole idle interval. Adds them to `dropped`
// (a per-tensor flag) and returns how many were added. `kept(u, t)`, when given, names the
// sources u that stay on the device until the recompute of t reads them instead.
size_t close_recompute_sources(const PlanFacts& facts, std::vector<bool>& dropped,
                               const std::function<bool(TensorId, TensorId)>& kept = {});

// The simulator's prediction of `schedule`, lowered with the facts' program options (no timeline;
// per-step starts and per-tensor swap-in waits recorded): the one timing model, shared with
// `ferry plan`. A schedule without SSD codecs is predicted with those plan_policy will give it
// (attach_ssd_codecs with facts.ssd_codec); facts without codecs predict every copy raw.
// `lowered`: `schedule` lowered by lower_for_planning(), used when the prediction needs no other
// codecs than the schedule has (else the schedule is lowered again with them).
Result<SimResult> simulate_for_planning(const PlanContext& ctx, const PlanFacts& facts, const Schedule& schedule,
                                        const Program* lowered = nullptr);

// With `--codec auto` (ctx.ssd_codec unset), plan_policy keeps a plan made with codecs only when
// the simulator predicts its iteration more than this much faster than the plan the same policy
// makes with every copy raw (on the same facts without codecs); else it returns the raw plan.
// Coding a copy whose transfer hides behind compute gains nothing and, on a CPU backend, takes
// cores from the compute threads (which the model does not charge).
inline constexpr double kCodecMinGain = 0.01;

// What one policy run produced: a complete schedule, its measure, and notes. `fits` compares
// the measure with the budget (always true for an unlimited budget).
struct PlanAttempt {
  Schedule schedule;
  PlanMeasure measure;
  std::string notes;
  double solve_seconds = 0;
  double mip_gap = 0;
  bool proven_optimal = false;
  bool fits = false;
  // The lower bound at the attempt's context, where the planner solved it on the way (ferry's
  // portfolio, for its LP-guided variants); null otherwise. lower_bound() of that context gives
  // the same figure.
  std::shared_ptr<const LowerBound> bound;
};

// Completes, measures and wraps an intent.
Result<PlanAttempt> finish_attempt(const PlanContext& ctx, const PlanFacts& facts, Schedule intent);

// The policies (one file each). Each returns its best attempt; an attempt that does not fit is
// not an error here (the registry turns it into OutOfMemory with the smallest budget).
Result<PlanAttempt> plan_vdnn(const PlanContext& ctx, const PlanFacts& facts, bool conv_only);
Result<PlanAttempt> plan_lru(const PlanContext& ctx, const PlanFacts& facts);
Result<PlanAttempt> plan_lms(const PlanContext& ctx, const PlanFacts& facts);
Result<PlanAttempt> plan_capuchin(const PlanContext& ctx, const PlanFacts& facts);
Result<PlanAttempt> plan_checkpoint_sqrt(const PlanContext& ctx, const PlanFacts& facts);
Result<PlanAttempt> plan_checkmate(const PlanContext& ctx, const PlanFacts& facts);
// plan_ferry (the Ferry planner) is declared in plan/ferry/ferry_planner.h.
// Checkmate's smallest budget: bisection whose probes stop at CBC's first feasible solution.
Result<uint64_t> checkmate_min_budget(const PlanContext& ctx, const PlanFacts& facts);

// A budget no plan fits below: the persistent region plus the largest set of transient
// tensors one op reads at once; for a planner whose persistent tensors may leave the device
// (ferry's offload), the largest set of tensors one op needs at once, persistent included.
uint64_t min_budget_lower_bound(const PlanContext& ctx, const PlanFacts& facts, bool persistent_may_leave = false);
// The grid lowest_fit_below() probes: 1% of the keep plan's device bytes, aligned.
uint64_t min_budget_scan_step(const PlanContext& ctx, const PlanFacts& facts);

// The smallest budget at which `fits` holds, by bisection between min_budget_lower_bound() and
// the keep plan's device bytes (raised by 25% up to four times while it does not fit), to within
// 0.5% of the latter. The answer fits; it is the smallest only if `fits` is monotone in the
// budget (see lowest_fit_below() for planners that are not).
Result<uint64_t> bisect_min_budget(const PlanContext& ctx, const PlanFacts& facts,
                                   const std::function<Result<bool>(uint64_t)>& fits,
                                   bool persistent_may_leave = false);

// For a `fits` that is not monotone (a greedy planner: a smaller budget can lead it to other,
// better choices): probes found - k * min_budget_scan_step() for k = 1, 2, ... down to
// min_budget_lower_bound() and returns the lowest budget that fits, or `found` when none does.
// `found` must fit. The answer B then fits and no B - k * step (k >= 1) does.
// With `workers` > 1 the probes are independent and run on that many threads (`fits` must then be
// safe to call concurrently); the answer, or the error (that of the highest budget whose probe
// failed, as probing one after another from the top reports it), is the same for every `workers`.
Result<uint64_t> lowest_fit_below(const PlanContext& ctx, const PlanFacts& facts,
                                  const std::function<Result<bool>(uint64_t)>& fits, uint64_t found,
                                  bool persistent_may_leave = false, int workers = 1);

// Appends `a` to the before / after list of `step`.
inline void add_before(Schedule& s, OpId step, Action a) { s.before[static_cast<size_t>(step)].push_back(a); }
inline void add_after(Schedule& s, OpId step, Action a) { s.after[static_cast<size_t>(step)].push_back(a); }
inline Action swap_out_action(TensorId t, Tier tier) { return {ActionKind::kSwapOut, t, tier}; }
inline Action release_action(TensorId t) { return {ActionKind::kRelease, t, Tier::kHost}; }
inline Action swap_in_action(TensorId t, Tier tier) { return {ActionKind::kSwapIn, t, tier}; }
inline Action recompute_action(TensorId t) { return {ActionKind::kRecompute, t, Tier::kHost}; }

// An empty schedule for the graph, named and budgeted.
Schedule empty_schedule(const PlanContext& ctx, std::string_view policy);

}  // namespace ferry
