// LRU: on-demand swapping, the behaviour of SuperNeurons' LRU tensor cache (Wang et al., PPoPP
// 2018) and of CUDA unified-memory paging, without their prefetchers.
//
// Design
// - Walk the steps in order, keeping the set of tensors on the device and when each was last
//   touched (produced, read, or brought back). Before step i, compute the bytes step i holds
//   (placement's step-interval model: everything on the device after step i-1, what op i brings
//   back, its new outputs and its scratch). While that exceeds the target, evict the least
//   recently used tensor that op i does not read (ties: the larger, then the lower id): swap it
//   out (unless the tier still holds a valid copy of it) and release it, after step i-1, the
//   latest point at which its block can end before step i. Whatever op i reads that is off the
//   device is swapped in right before it runs: fetch on access, no prefetch.
// - Only transient tensors are evicted; weights and optimizer state stay (SuperNeurons caches
//   activations; paging weights would stall every update).
// - The step model counts bytes, not addresses. After the walk the plan is placed exactly; when
//   fragmentation makes the arena exceed the budget, the walk is repeated with the target lowered
//   by the excess (a few rounds).
// - Cost per walk: O(steps x resident tensors) for victim selection; planning is not a hot path.

#include <algorithm>

#include "common/units.h"
#include "plan/policy_common.h"

namespace ferry {

namespace {

constexpr int kMaxRounds = 10;

// One walk for `target` bytes; `stuck` is set when some step cannot fit however much is evicted.
Schedule walk(const PlanContext& ctx, const PlanFacts& facts, uint64_t target, bool& stuck) {
  stuck = false;
  const Graph& g = facts.g();
  const size_t n = g.ops.size();
  Schedule s = empty_schedule(ctx, "lru");
  std::vector<bool> resident(g.tensors.size(), false), has_copy(g.tensors.size(), false);
  std::vector<OpId> touched(g.tensors.size(), -1);
  uint64_t resident_bytes = 0;
  auto scratch = [&](OpId i) {
    const auto& v = facts.program_options.op_scratch_bytes;
    return v.empty() || v[static_cast<size_t>(i)] == 0 ? uint64_t{0}
                                                       : align_up(v[static_cast<size_t>(i)], facts.alignment);
  };
  auto transient = [&](TensorId t) { return !g.tensor(t).persistent(); };
  for (const Tensor& t : g.tensors)
    if (t.role == TensorRole::kInput) {
      resident[static_cast<size_t>(t.id)] = true;
      resident_bytes += facts.aligned_bytes(t.id);
    }
  for (OpId i = 0; i < static_cast<OpId>(n); ++i) {
    const Op& op = g.op(i);
    const std::vector<TensorId>& reads = facts.analysis.step_inputs[static_cast<size_t>(i)];
    uint64_t need = facts.analysis.persistent_region_bytes + resident_bytes + scratch(i);
    std::vector<TensorId> fetch;
    for (TensorId t : reads)
      if (transient(t) && !resident[static_cast<size_t>(t)]) {
        fetch.push_back(t);
        need += facts.aligned_bytes(t);
      }
    for (size_t k = 0; k < op.outputs.size(); ++k) {
      const TensorId t = op.outputs[k];
      if (!transient(t)) continue;
      const bool in_place = k == 0 && !op.inputs.empty() && facts.info(t).buffer >= 0 &&
                            facts.info(t).buffer == facts.info(op.inputs[0]).buffer;
      if (!in_place) need += facts.aligned_bytes(t);
    }
    if (need > target && i == 0) stuck = true;
    while (need > target && i > 0) {
      TensorId victim = kNoTensor;
      for (const Tensor& t : g.tensors) {
        const size_t v = static_cast<size_t>(t.id);
        if (!resident[v] || t.id == g.loss || std::find(reads.begin(), reads.end(), t.id) != reads.end()) continue;
        if (victim == kNoTensor) {
          victim = t.id;
          continue;
        }
        const size_t w = static_cast<size_t>(victim);
        if (touched[v] < touched[w] || (touched[v] == touched[w] && t.bytes > g.tensor(victim).bytes)) victim = t.id;
      }
      if (victim == kNoTensor) {  // cannot fit: keep going, the measure reports the excess
        stuck = true;
        break;
      }
      const size_t v = static_cast<size_t>(victim);
      if (!has_copy[v]) add_after(s, i - 1, swap_out_action(victim, ctx.tier));
      add_after(s, i - 1, release_action(victim));
      has_copy[v] = true;
      resident[v] = false;
      resident_bytes -= facts.aligned_bytes(victim);
      need -= facts.aligned_bytes(victim);
    }
    for (TensorId t : fetch) {
      add_before(s, i, swap_in_action(t, ctx.tier));
      resident[static_cast<size_t>(t)] = true;
      resident_bytes += facts.aligned_bytes(t);
    }
    for (TensorId t : reads) touched[static_cast<size_t>(t)] = i;
    for (TensorId t : op.outputs) {
      if (!transient(t)) continue;
      resident[static_cast<size_t>(t)] = true;
      resident_bytes += facts.aligned_bytes(t);
      touched[static_cast<size_t>(t)] = i;
      has_copy[static_cast<size_t>(t)] = false;
    }
    // Tensors whose last use is this step die here (in place or not, their bytes leave).
    auto die = [&](TensorId t) {
      const size_t v = static_cast<size_t>(t);
      if (!transient(t) || t == g.loss || !resident[v] || facts.info(t).last_use != i) return;
      resident[v] = false;
      resident_bytes -= facts.aligned_bytes(t);
    };
    for (TensorId t : reads) die(t);
    for (TensorId t : op.outputs) die(t);
    if (i == 0)
      for (const Tensor& t : g.tensors)
        if (t.role == TensorRole::kInput) die(t.id);
  }
  return s;
}

}  // namespace

Result<PlanAttempt> plan_lru(const PlanContext& ctx, const PlanFacts& facts) {
  if (ctx.budget_bytes == 0) return finish_attempt(ctx, facts, empty_schedule(ctx, "lru"));
  uint64_t target = ctx.budget_bytes;
  PlanAttempt best;
  for (int round = 0; round < kMaxRounds; ++round) {
    bool stuck = false;
    FERRY_ASSIGN_OR_RETURN(PlanAttempt a, finish_attempt(ctx, facts, walk(ctx, facts, target, stuck)));
    if (a.fits) return a;
    const uint64_t excess = a.measure.device_bytes - ctx.budget_bytes;
    if (round == 0 || a.measure.device_bytes < best.measure.device_bytes) best = std::move(a);
    // Fragmentation: lower the target by the excess (more each round: a new target changes the
    // evictions, and with them the fragmentation) and walk again.
    const uint64_t step = std::max(excess, facts.alignment) * static_cast<uint64_t>(round + 1);
    if (stuck || step >= target) break;
    target -= step;
  }
  return best;
}

}  // namespace ferry
