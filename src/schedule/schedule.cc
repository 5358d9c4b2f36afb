#include "schedule/schedule.h"

#include <algorithm>

namespace ferry {

std::string_view to_string(ActionKind k) {
  switch (k) {
    case ActionKind::kSwapOut: return "swap_out";
    case ActionKind::kRelease: return "release";
    case ActionKind::kSwapIn: return "swap_in";
    case ActionKind::kRecompute: return "recompute";
    case ActionKind::kHostUpdate: return "host_update";
  }
  return "?";
}

size_t Schedule::distinct_tensors(ActionKind kind) const {
  std::vector<TensorId> ts;
  for (const auto* steps : {&before, &after})
    for (const auto& actions : *steps)
      for (const Action& a : actions)
        if (a.kind == kind) ts.push_back(a.tensor);
  std::sort(ts.begin(), ts.end());
  return static_cast<size_t>(std::unique(ts.begin(), ts.end()) - ts.begin());
}

UpdateOps::UpdateOps(const Graph& g) {
  for (const Op& op : g.ops)
    if ((op.type == OpType::kSgdUpdate || op.type == OpType::kAdamUpdate) && op.inputs.size() > 1)
      by_gradient_.emplace(op.inputs[1], op.id);
}


}  // namespace ferry
