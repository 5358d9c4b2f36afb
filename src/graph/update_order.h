// Where the optimizer's update ops run in the iteration (`--update-order`).
//
//   Graph g = build_model(...).value();                 // updates after the backward pass
//   Graph h = interleave_updates(g).value();             // each right after its last dependency
//
// A graph built by autodiff runs every update after the whole backward pass, as a framework's
// optimizer.step() after loss.backward() does. Each update only needs its weight gradient complete
// and its weight (and state) read for the last time in this iteration; interleave_updates moves
// every update op to just after the last op it depends on (Note [Interleaved updates] in
// update_order.cc), as PyTorch's optimizer-in-backward hooks and ZeRO-Offload's overlapped step
// do. The ops and their inputs are the same, so training computes bitwise the same numbers; what
// changes is when each gradient dies and when each weight's state must be on the device, which is
// what the planners and the simulator see.
#pragma once

#include <optional>
#include <string_view>

#include "common/status.h"
#include "graph/graph.h"

namespace ferry {

enum class UpdateOrder : uint8_t { kEnd, kInterleaved };

std::string_view to_string(UpdateOrder o);  // "end", "interleaved"
std::optional<UpdateOrder> update_order_from_string(std::string_view s);

// The order a graph has: kInterleaved when some non-update op runs after an update op.
UpdateOrder update_order_of(const Graph& g);

// `g` with every update op (Phase::kUpdate) moved to just after the latest earlier op it conflicts
// with: one that writes a tensor the update reads, or reads or writes a tensor the update writes.
// Every other op keeps its relative order; ops are renumbered, tensors keep their ids, and the
// ops' forward_op links and the tensors' free_after steps follow their ops. A graph without update
// ops comes back unchanged. Errors: whatever Graph::validate() says of the result (it cannot fail
// on a valid graph; checked all the same).
Result<Graph> interleave_updates(const Graph& g);

}  // namespace ferry
