#include "plan/ferry/gaps.h"

#include <algorithm>

namespace ferry::planner {

TensorAccesses collect_accesses(const Graph& g) {
  TensorAccesses a;
  a.steps.assign(g.tensors.size(), {});
  a.written.assign(g.tensors.size(), false);
  for (const Op& op : g.ops) {
    for (TensorId t : op.inputs) a.steps[static_cast<size_t>(t)].push_back(op.id);
    for (TensorId t : op.outputs) {
      a.steps[static_cast<size_t>(t)].push_back(op.id);
      if (g.tensor(t).persistent()) a.written[static_cast<size_t>(t)] = true;
    }
  }
  for (std::vector<OpId>& s : a.steps) {
    std::sort(s.begin(), s.end());
    s.erase(std::unique(s.begin(), s.end()), s.end());
  }
  return a;
}

std::vector<GapSpec> find_gaps(const PlanFacts& facts, const TensorAccesses& accesses, bool swaps_allowed) {
  const Graph& g = facts.g();
  std::vector<GapSpec> out;
  for (const Tensor& t : g.tensors) {
    if (t.id == g.loss || t.bytes == 0) continue;
    const std::vector<OpId>& a = accesses.steps[static_cast<size_t>(t.id)];
    if (a.empty()) continue;
    if (t.persistent()) {
      if (!swaps_allowed || !facts.gap_allowed(t.id, a.back(), a.front(), true)) continue;
      out.push_back({t.id, a.back(), a.front(), true});
    } else if (!swaps_allowed && !facts.recomputable(t.id)) {
      continue;
    }
    for (size_t k = 0; k + 1 < a.size(); ++k)
      if (a[k + 1] - a[k] >= 2 && facts.gap_allowed(t.id, a[k], a[k + 1], false))
        out.push_back({t.id, a[k], a[k + 1], false});
  }
  return out;
}

}  // namespace ferry::planner
