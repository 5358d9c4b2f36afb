#include "graph/update_order.h"

#include <fmt/format.h>

namespace ferry {

// Note [Interleaved updates]
//   An update op reads its weight, its gradient and its state and writes the weight and the state
//   in place. Moving it earlier past an op j keeps every value the same iff j and the update do not
//   conflict: j writes nothing the update reads (the gradient's last accumulation, a loss scale)
//   and reads and writes nothing the update writes (the weight's last backward read). So each
//   update is anchored to the latest earlier op it conflicts with (updates included, in their
//   original order, so two updates of a shared tensor keep theirs) and emitted right after it; the
//   ops after the anchor that it passes are exactly the ones it does not conflict with. One pass
//   over the ops with each tensor's last writer and last access: O(ops + their operands).
//   On GPT-2 medium (Adam, batch 1, seq 1024) the first update (the final layer norm's bias) moves
//   from step 972 to step 417, four steps into the backward pass, and the 292 updates spread over
//   it. Where it pays: a device update's state can stream in while the backward pass still
//   computes, and each weight gradient dies at once instead of at the end. It can also cost: the
//   predicted figures of both kinds are in the README (`--update-order`).

std::string_view to_string(UpdateOrder o) { return o == UpdateOrder::kEnd ? "end" : "interleaved"; }

std::optional<UpdateOrder> update_order_from_string(std::string_view s) {
  if (s == "end") return UpdateOrder::kEnd;
  if (s == "interleaved") return UpdateOrder::kInterleaved;
  return std::nullopt;
}

UpdateOrder update_order_of(const Graph& g) {
  bool seen_update = false;
  for (const Op& op : g.ops) {
    if (op.phase == Phase::kUpdate)
      seen_update = true;
    else if (seen_update)
      return UpdateOrder::kInterleaved;
  }
  return UpdateOrder::kEnd;
}

Result<Graph> interleave_updates(const Graph& g) {
  const size_t n = g.ops.size();
  std::vector<OpId> last_writer(g.tensors.size(), kNoOp), last_access(g.tensors.size(), kNoOp);
  // after[a + 1]: the updates anchored right after op a (a = -1: before every op).
  std::vector<std::vector<OpId>> after(n + 1);
  std::vector<bool> anchored(n, false);
  for (size_t i = 0; i < n; ++i) {
    const Op& op = g.ops[i];
    const OpId id = static_cast<OpId>(i);
    if (op.phase == Phase::kUpdate) {
      OpId anchor = kNoOp;
      for (TensorId t : op.inputs) anchor = std::max(anchor, last_writer[static_cast<size_t>(t)]);
      for (TensorId t : op.outputs) anchor = std::max(anchor, last_access[static_cast<size_t>(t)]);
      after[static_cast<size_t>(anchor + 1)].push_back(id);
      anchored[i] = true;
    }
    for (TensorId t : op.inputs) last_access[static_cast<size_t>(t)] = id;
    for (TensorId t : op.outputs) last_access[static_cast<size_t>(t)] = last_writer[static_cast<size_t>(t)] = id;
  }
  // Emit: every op that is not moved in its order, each followed by the updates anchored to it
  // (and, depth first, by those anchored to them).
  std::vector<OpId> order;
  order.reserve(n);
  auto emit = [&](auto&& self, OpId a) -> void {
    for (OpId u : after[static_cast<size_t>(a + 1)]) {
      order.push_back(u);
      self(self, u);
    }
  };
  emit(emit, kNoOp);
  for (size_t i = 0; i < n; ++i)
    if (!anchored[i]) {
      order.push_back(static_cast<OpId>(i));
      emit(emit, static_cast<OpId>(i));
    }
  if (order.size() != n)
    return Status::Internal(fmt::format("interleaving the updates placed {} of {} ops", order.size(), n));
  std::vector<OpId> new_id(n, kNoOp);
  for (size_t k = 0; k < n; ++k) new_id[static_cast<size_t>(order[k])] = static_cast<OpId>(k);
  Graph out;
  out.info = g.info;
  out.loss = g.loss;
  out.tensors = g.tensors;
  for (Tensor& t : out.tensors)
    if (t.free_after != kNoOp) t.free_after = new_id[static_cast<size_t>(t.free_after)];
  out.ops.reserve(n);
  for (size_t k = 0; k < n; ++k) {
    Op op = g.ops[static_cast<size_t>(order[k])];
    op.id = static_cast<OpId>(k);
    if (op.forward_op != kNoOp) op.forward_op = new_id[static_cast<size_t>(op.forward_op)];
    out.ops.push_back(std::move(op));
  }
  FERRY_RETURN_IF_ERROR(out.validate());
  return out;
}

}  // namespace ferry
