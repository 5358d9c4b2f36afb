// vDNN (Rhu et al., "vDNN: Virtualized Deep Neural Networks for Scalable, Memory-Efficient
// Neural Network Design", MICRO 2016), policies vDNN-all and vDNN-conv.
//
// Design
// - vDNN manages memory layer by layer. During forward propagation it offloads a layer's input
//   feature map (X) to host memory: the copy starts when the layer that last reads X in forward
//   starts (it overlaps that layer's computation) and X's device memory is released once both
//   have finished. During backward it prefetches X one layer ahead: when the backward step
//   before X's first backward reader starts.
// - Ferry's layers are ops, so for every forward op i (vdnn-conv: every convolution) and every
//   transient input X of i that backward reads again, with j = X's last forward reader and
//   b = X's first backward reader:
//       before[j]: swap_out(X)   after[j]: release(X)   before[b - 1]: swap_in(X)
//   A tensor with no step between j and b - 1 (b - 1 <= j) is left alone: it would come back
//   before it could leave. Weights and other persistent tensors stay (vDNN offloads feature maps).
// - The plan does not depend on the budget: vDNN-all and vDNN-conv are static policies; the
//   budget is only checked. Cost: O(ops + op inputs).

#include "plan/policy_common.h"

namespace ferry {

Result<PlanAttempt> plan_vdnn(const PlanContext& ctx, const PlanFacts& facts, bool conv_only) {
  const Graph& g = facts.g();
  Schedule s = empty_schedule(ctx, conv_only ? "vdnn-conv" : "vdnn-all");
  std::vector<bool> chosen(g.tensors.size(), false);
  for (OpId i = 0; i < facts.num_forward; ++i) {
    const Op& op = g.op(i);
    if (conv_only && op.type != OpType::kConv2d) continue;
    for (TensorId x : op.inputs) {
      if (chosen[static_cast<size_t>(x)] || !facts.saved(x)) continue;
      const OpId last_forward = facts.forward_end(x);
      const OpId prefetch = facts.info(x).first_backward_use - 1;
      if (prefetch <= last_forward) continue;
      chosen[static_cast<size_t>(x)] = true;
      add_before(s, last_forward, swap_out_action(x, ctx.tier));
      add_after(s, last_forward, release_action(x));
      add_before(s, prefetch, swap_in_action(x, ctx.tier));
    }
  }
  return finish_attempt(ctx, facts, std::move(s));
}

}  // namespace ferry
