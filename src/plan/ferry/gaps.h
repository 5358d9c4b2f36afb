// Gaps: the intervals in which a tensor could leave the device, the unit of every decision of
// the Ferry planner, its lower bound and its exact MILP.
//
// A tensor's accesses are the steps that read it, produce it or (persistent tensors) update it.
// Between two consecutive accesses with at least one step between them lies a gap: steps
// from+1 .. to-1, during which no op touches the tensor. A persistent tensor also has a cyclic
// gap from its last access of one iteration to its first access of the next (steps last+1 .. n-1
// and 0 .. first-1): leaving it means living in a tier between iterations (offload). The loss
// and 0-byte tensors have no gaps.
#pragma once

#include <vector>

#include "graph/graph.h"
#include "plan/policy_common.h"

namespace ferry::planner {

struct GapSpec {
  TensorId tensor = kNoTensor;
  OpId from = kNoOp;  // access before (cyclic: the iteration's last access)
  OpId to = kNoOp;    // access after (cyclic: the iteration's first access)
  bool cyclic = false;
};

struct TensorAccesses {
  std::vector<std::vector<OpId>> steps;  // per tensor: sorted, unique
  std::vector<bool> written;             // per tensor: a persistent tensor some op updates
};

TensorAccesses collect_accesses(const Graph& g);

// Every gap, per tensor in id order, in order of `from` (a persistent tensor's cyclic gap first).
// Without swaps only gaps of recomputable tensors exist.
std::vector<GapSpec> find_gaps(const PlanFacts& facts, const TensorAccesses& accesses, bool swaps_allowed);

}  // namespace ferry::planner
