// Ferry's own planner (policy `ferry`): every tensor may be kept, swapped or recomputed, weights
// and optimizer state included. docs/planner.md describes the method; this header its interface
// to the policy registry.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "plan/policy_common.h"

namespace ferry {

// What the planner decided for one interval of one tensor, and why (`ferry plan --explain`).
struct PlanDecision {
  TensorId tensor = kNoTensor;
  std::string move;          // "swap", "recompute", "offload" (a persistent tensor lives in the tier)
  OpId leaves_after = kNoOp; // released after this step
  OpId back_before = kNoOp;  // swapped in / recomputed before this step (kNoOp: stays away)
  uint64_t bytes = 0;        // freed while away
  int32_t away_steps = 0;    // steps it is away
  double cost_us = 0;        // estimated time it adds: recompute time, or link time it occupies
  std::string alternative;   // the option not taken and its estimated cost
};

// The planner's tuning, for experiments and tests (defaults are what `ferry` uses).
struct FerryTuning {
  // Link-time weights tried: a swap's score is weight x link time per byte, a recompute's the
  // recompute time per byte; the plan with the best simulated time wins. 0 prefers swaps the
  // link can hide, larger values keep the link for what cannot be recomputed cheaply.
  std::vector<double> link_weights = {0.0, 1.0, 4.0};
  int repair_rounds = 6;           // polish rounds: stalled swaps fetched earlier, recomputed or kept
  int max_polish_simulations = 96; // tries each polish may spend (plans lowered, simulated when they fit)
  // Then the winner's costliest recomputes, kept or swapped instead, and its late host-update
  // weights (Planner::polish), in at most this many tries (0: not at all); on graphs over 2,000
  // ops proportionally fewer (at least 16), as each try lowers and simulates the whole graph.
  int max_recompute_polish_tries = 192;
  // After that pass, the swapped activations whose swap-outs the compute stream waits for (their
  // release waits for the copy) are released later, recomputed or kept where that is faster (at
  // most 96 tries more, and no more than that pass's own tries on large graphs).
  bool polish_swap_out_waits = true;
  // Every polish ends with the order of the copies on the simulated link, which serves them in
  // issue order: releases that wait for their copy (host updates' gradients, swapped activations)
  // move to where it is done, and the host updates' weights coming back are issued in the order
  // they are first read (each kept only where the plan fits and simulates faster; at most 96
  // tries more, no more than the polish's own on large graphs).
  bool polish_copy_order = true;
  // A candidate more than this many times slower than the fastest other one is not polished
  // (Note [Far behind] in ferry_planner.cc); 0: every candidate is.
  double polish_far_behind = 1.5;
  // Also plan with the optimizer updates on the host (ZeRO-Offload, plan/ferry/host_updates.h) where
  // the profile has a host optimizer rate, and keep whichever simulates faster.
  bool host_updates = true;
  // Also plan every host set with the host updates' weights kept on the device between their
  // forward and backward reads (their inner gaps not offered), and keep whichever simulates faster.
  bool host_inner_variants = true;
  // Also plan every link weight (with the fastest plan's host updates, their weights' inner gaps
  // open and closed) with recomputes that read what is on the device: small forward-only inputs
  // kept to the recompute instead of recomputed along, and a recompute's source that another
  // recompute took away recomputed before it; keep whichever simulates faster.
  bool kept_source_variants = true;
  // Also plan every host/link split with the device-updated tensors' inner gaps offered from the
  // start, each reached by offloading the tensor first (Note [Inner offloads] in
  // ferry_planner.cc); a split's time is the faster of the two.
  bool inner_offload_variants = true;
  // Then the winner's variant once more with the transients whose copies its simulation waits for
  // longest kept on the device (Note [Stall bans] in ferry_planner.cc), so that its greedy takes
  // other gaps at those peaks; taken only where it fits and simulates faster after its own polish.
  bool stall_ban_variant = true;
  // Also plan every link weight (with the host updates of the fastest plans so far, kept sources
  // and the host updates' weights' inner gaps each off and on) guided by the lower bound's LP
  // relaxation: a move of a gap the relaxation does not take is scored up to 1 + penalty times as
  // costly, for each penalty listed (Note [LP-guided greedy] in ferry_planner.cc); the fastest is
  // polished and taken only where it is then faster than the winner. Graphs over
  // lp_guided_max_ops ops skip it (the LP's solve grows with the graph).
  bool lp_guided = true;
  std::vector<float> lp_guide_penalties = {3, 10};
  size_t lp_guided_max_ops = 8000;
};

struct LowerBound;

// Whether plan_ferry with `tuning` runs its LP-guided variants on ctx, and so needs the lower
// bound's LP solution (plan_lower_bound with LowerBoundOptions::keep_solution).
bool ferry_wants_lp_solution(const PlanContext& ctx, const PlanFacts& facts, const FerryTuning& tuning = {});

// Plans ctx with the Ferry planner. Returns the best attempt (which may not fit: the registry
// reports that). `decisions`, when not null, receives the winning plan's decisions. `bound`, when
// not null, is the bound with its LP solution that the guided variants read (the caller solved
// it); null, plan_ferry solves it itself where ferry_wants_lp_solution(). The LP solves in a forked
// child (plan/contained.h), so a caller planning on several threads solves it before they start:
// a child forked while another thread allocates can inherit a lock that no thread of its own will
// release (ASan's allocator's, in CI: the child hung).
Result<PlanAttempt> plan_ferry(const PlanContext& ctx, const PlanFacts& facts, const FerryTuning& tuning = {},
                               std::vector<PlanDecision>* decisions = nullptr, const LowerBound* bound = nullptr);

}  // namespace ferry
