// checkpoint-sqrt: Chen, Xu, Zhang and Guestrin, "Training Deep Nets with Sublinear Memory
// Cost" (2016).
//
// Design
// - Chen et al. split the forward chain into segments, keep only each segment's output (the
//   checkpoint) through the forward pass, and in backward re-run each segment's forward from the
//   previous checkpoint right before the segment's backward. With n layers and ~sqrt(n) segments
//   of ~sqrt(n) layers the activation memory is O(sqrt(n)) for one extra forward pass.
// - Segment boundaries must cut the graph: a boundary is an articulation point of the forward
//   chain, a tensor that is the only forward tensor alive across the cut after its step (every
//   forward consumer of everything produced before it runs before the cut, except its own).
//   Boundaries are found with one difference array over the forward steps, counting the tensors
//   that cross each cut (and summing their ids to name the single one). Only boundaries that
//   backward reads anyway qualify: keeping any other tensor would add memory.
// - With m candidate boundaries, every round(sqrt(m))-th is kept as a checkpoint. Every other
//   saved activation of a segment before the last checkpoint is dropped (released after its last
//   forward use). The segment after the last checkpoint is not dropped: its backward starts as
//   soon as forward ends, so recomputing it would only cost time (as in PyTorch's
//   checkpoint_sequential). A small side output (less than a quarter of its producer's largest
//   output: batch-norm statistics) stays, since recomputing it re-runs the whole producer.
// - Forward-only tensors that a recompute reads (a batch norm's output feeding an in-place ReLU)
//   are dropped too, so recomputation does not pin them (close_recompute_sources).
// - In backward, the first backward use of any dropped tensor of a segment triggers the
//   recomputation of all of them, in forward order; complete_schedule() inserts the forward-only
//   intermediates each recompute needs.
// - The plan does not depend on the budget. Cost: O(ops + tensors).

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "plan/policy_common.h"

namespace ferry {

Result<PlanAttempt> plan_checkpoint_sqrt(const PlanContext& ctx, const PlanFacts& facts) {
  const Graph& g = facts.g();
  const OpId nf = facts.num_forward;
  Schedule s = empty_schedule(ctx, "checkpoint-sqrt");
  if (nf < 2) return finish_attempt(ctx, facts, std::move(s));

  // Tensors crossing each cut c (between forward steps c and c+1): produced at or before c, read
  // by a forward op after c. Data inputs are always on the device and do not count.
  std::vector<int64_t> count(static_cast<size_t>(nf) + 1, 0), id_sum(static_cast<size_t>(nf) + 1, 0);
  for (const Tensor& t : g.tensors) {
    if (t.persistent() || t.role == TensorRole::kInput) continue;
    const OpId p = facts.producer[static_cast<size_t>(t.id)];
    if (p == kNoOp || p >= nf) continue;
    const OpId last = facts.forward_end(t.id);
    if (last <= p) continue;
    count[static_cast<size_t>(p)] += 1;
    count[static_cast<size_t>(last)] -= 1;
    id_sum[static_cast<size_t>(p)] += t.id;
    id_sum[static_cast<size_t>(last)] -= t.id;
  }
  std::vector<TensorId> candidates;
  int64_t crossing = 0, ids = 0;
  for (OpId c = 0; c + 1 < nf; ++c) {
    crossing += count[static_cast<size_t>(c)];
    ids += id_sum[static_cast<size_t>(c)];
    if (crossing != 1) continue;
    const TensorId t = static_cast<TensorId>(ids);
    if (!facts.saved(t)) continue;
    if (candidates.empty() || candidates.back() != t) candidates.push_back(t);
  }
  if (candidates.empty()) {
    FERRY_ASSIGN_OR_RETURN(PlanAttempt a, finish_attempt(ctx, facts, std::move(s)));
    a.notes = "no articulation point in the forward chain: nothing to drop";
    return a;
  }
  const size_t m = candidates.size();
  const size_t stride = std::max<size_t>(1, static_cast<size_t>(std::lround(std::sqrt(static_cast<double>(m)))));
  std::vector<bool> checkpoint(g.tensors.size(), false);
  std::vector<OpId> boundary_steps;  // producer step of each kept checkpoint, ascending
  // Counted from the loss backwards, so that the kept last segment is as long as the others.
  for (size_t k = m - 1; k >= stride; k -= stride) {
    checkpoint[static_cast<size_t>(candidates[k - stride])] = true;
    boundary_steps.push_back(facts.producer[static_cast<size_t>(candidates[k - stride])]);
  }
  std::reverse(boundary_steps.begin(), boundary_steps.end());
  if (boundary_steps.empty()) {
    FERRY_ASSIGN_OR_RETURN(PlanAttempt a, finish_attempt(ctx, facts, std::move(s)));
    a.notes = fmt::format("{} candidate boundaries: too few to form a segment before the last", m);
    return a;
  }
  const OpId last_boundary = boundary_steps.back();

  // Drop every saved activation of the segments up to the last checkpoint.
  std::vector<bool> dropped(g.tensors.size(), false);
  std::vector<uint64_t> largest_output(g.ops.size(), 0);
  for (const Op& op : g.ops)
    for (TensorId t : op.outputs)
      largest_output[static_cast<size_t>(op.id)] =
          std::max(largest_output[static_cast<size_t>(op.id)], g.tensor(t).bytes);
  for (const Tensor& t : g.tensors) {
    const size_t v = static_cast<size_t>(t.id);
    if (!facts.saved(t.id) || !facts.recomputable(t.id) || checkpoint[v]) continue;
    const OpId p = facts.producer[v];
    if (p > last_boundary || t.bytes * 4 < largest_output[static_cast<size_t>(p)]) continue;
    dropped[v] = true;
  }
  std::vector<bool> saved_drops = dropped;
  close_recompute_sources(facts, dropped);
  for (const Tensor& t : g.tensors)
    if (dropped[static_cast<size_t>(t.id)]) add_after(s, facts.forward_end(t.id), release_action(t.id));

  // Segment k holds the steps (boundary_steps[k-1], boundary_steps[k]]. Its recomputation ends
  // right before the first backward step that reads one of its dropped saved tensors; the
  // recomputes (forward-only intermediates included) run one per step, ending there.
  size_t dropped_count = 0;
  for (size_t k = 0; k < boundary_steps.size(); ++k) {
    const OpId lo = k == 0 ? -1 : boundary_steps[k - 1];
    const OpId hi = boundary_steps[k];
    std::vector<TensorId> members;
    OpId first_use = kNoOp;
    for (const Tensor& t : g.tensors) {
      const size_t v = static_cast<size_t>(t.id);
      if (!dropped[v] || facts.producer[v] <= lo || facts.producer[v] > hi) continue;
      members.push_back(t.id);
      if (!saved_drops[v]) continue;
      ++dropped_count;
      const OpId b = facts.info(t.id).first_backward_use;
      first_use = first_use == kNoOp ? b : std::min(first_use, b);
    }
    if (first_use == kNoOp) continue;
    std::stable_sort(members.begin(), members.end(), [&](TensorId a, TensorId b) {
      return facts.producer[static_cast<size_t>(a)] < facts.producer[static_cast<size_t>(b)];
    });
    for (size_t i = 0; i < members.size(); ++i) {
      const OpId at = std::max<OpId>(facts.num_forward, first_use - static_cast<OpId>(members.size() - 1 - i));
      add_before(s, at, recompute_action(members[i]));
    }
  }
  FERRY_ASSIGN_OR_RETURN(PlanAttempt a, finish_attempt(ctx, facts, std::move(s)));
  a.notes = fmt::format("{} checkpoints kept of {} candidate boundaries (every {}), {} saved activations dropped",
                        boundary_steps.size(), m, stride, dropped_count);
  return a;
}

}  // namespace ferry
