// LMS: IBM's Large Model Support for TensorFlow (Le et al., "TFLMS: Large Model Support in
// TensorFlow by Graph Rewriting", 2018).
//
// Design
// - TFLMS rewrites the training graph: for every forward tensor that a backward op reads, it adds
//   a swap-out op fed by the tensor's producer and a swap-in op feeding the backward consumer.
//   TensorFlow runs the swap-out as soon as the tensor exists, in parallel with its forward
//   consumers, and frees the device copy when the last of them (and the swap-out) is done. The
//   swap-in is triggered by a control edge from the op `swapin_ahead` (k) steps before the
//   backward consumer in execution order, so k trades stalls against memory. Tensors smaller
//   than a threshold are left alone: their copies cost latency and save little.
// - Ferry: for every saved activation X (produced by a forward op, read again in backward) of at
//   least lms_threshold_bytes, with p = its producer, j = its last forward use (p when forward
//   does not read it) and b = its first backward reader:
//       after[p]: swap_out(X)   after[j]: release(X)   before[b - k]: swap_in(X)
//   A tensor with b - k <= j is left alone (it would be swapped in before it left). Data inputs
//   are not activations and stay. The plan does not depend on the budget. Cost: O(tensors).

#include "plan/policy_common.h"

namespace ferry {

Result<PlanAttempt> plan_lms(const PlanContext& ctx, const PlanFacts& facts) {
  const Graph& g = facts.g();
  const PolicyOptions& o = ctx.options;
  Schedule s = empty_schedule(ctx, "lms");
  for (const Tensor& x : g.tensors) {
    if (!facts.saved(x.id) || !facts.recomputable(x.id) || x.bytes < o.lms_threshold_bytes) continue;
    const OpId producer = facts.producer[static_cast<size_t>(x.id)];
    const OpId last_forward = facts.forward_end(x.id);
    const OpId swap_in_at = facts.info(x.id).first_backward_use - o.lms_swapin_ahead;
    if (swap_in_at <= last_forward) continue;
    add_after(s, producer, swap_out_action(x.id, ctx.tier));
    add_after(s, last_forward, release_action(x.id));
    add_before(s, swap_in_at, swap_in_action(x.id, ctx.tier));
  }
  return finish_attempt(ctx, facts, std::move(s));
}

}  // namespace ferry
