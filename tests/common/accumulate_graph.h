// A zoo graph turned into an iteration with gradient accumulation over two micro-batches: what
// trace format v2 expresses with several forward/backward passes and storage versions.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace ferry::test {

// `one` (a zoo graph: forward, backward, update) as an iteration of two micro-batches: forward and
// backward of the first, forward and backward of the second on its own data inputs, each of the
// second pass's weight gradients added into the first's by an accumulation op right after it is
// made (a new version of the first's storage, as PyTorch's AccumulateGrad does), then the update.
inline Graph accumulate_two(const Graph& one) {
  Graph g = one;
  g.ops.clear();
  std::vector<TensorId> copy(one.tensors.size(), kNoTensor);
  auto add_tensor = [&](Tensor t, const std::string& name) {
    t.id = static_cast<TensorId>(g.tensors.size());
    t.name = name;
    g.tensors.push_back(std::move(t));
    return g.tensors.back().id;
  };
  for (const Tensor& t : one.tensors)
    if (!t.persistent()) copy[static_cast<size_t>(t.id)] = add_tensor(t, t.name + "#2");
  for (size_t i = one.tensors.size(); i < g.tensors.size(); ++i) {
    Tensor& t = g.tensors[i];
    if (t.grad_of != kNoTensor && copy[static_cast<size_t>(t.grad_of)] != kNoTensor)
      t.grad_of = copy[static_cast<size_t>(t.grad_of)];
  }
  auto push = [&](Op op) {
    op.id = static_cast<OpId>(g.ops.size());
    g.ops.push_back(std::move(op));
    return g.ops.back().id;
  };
  std::map<OpId, OpId> second;  // op of `one` -> its copy in the second pass
  for (const Op& op : one.ops)
    if (op.phase != Phase::kUpdate) push(op);
  std::vector<TensorId> final_grad(one.tensors.size(), kNoTensor);
  for (const Op& op : one.ops) {
    if (op.phase == Phase::kUpdate) continue;
    Op c = op;
    c.name += "#2";
    auto remap = [&](std::vector<TensorId>& ids) {
      for (TensorId& t : ids)
        if (copy[static_cast<size_t>(t)] != kNoTensor) t = copy[static_cast<size_t>(t)];
    };
    remap(c.inputs);
    remap(c.outputs);
    if (c.forward_op != kNoOp) c.forward_op = second.at(c.forward_op);
    second[op.id] = push(c);
    for (TensorId t : op.outputs) {
      if (one.tensor(t).role != TensorRole::kWeightGradient) continue;
      Tensor acc = one.tensor(t);
      const TensorId sum = add_tensor(acc, acc.name + ".acc");
      g.tensors[static_cast<size_t>(sum)].overwrites = t;
      Op a;
      a.name = "accumulate." + one.tensor(t).name;
      a.type = OpType::kGradAccumulate;
      a.phase = Phase::kBackward;
      a.inputs = {t, copy[static_cast<size_t>(t)]};
      a.outputs = {sum};
      a.bytes_read = 2 * acc.bytes;
      a.bytes_written = acc.bytes;
      a.inplace_capable = true;
      push(a);
      final_grad[static_cast<size_t>(t)] = sum;
    }
  }
  for (const Op& op : one.ops) {
    if (op.phase != Phase::kUpdate) continue;
    Op u = op;
    for (TensorId& t : u.inputs)
      if (final_grad[static_cast<size_t>(t)] != kNoTensor) t = final_grad[static_cast<size_t>(t)];
    push(u);
  }
  g.loss = copy[static_cast<size_t>(one.loss)];
  return g;
}

}  // namespace ferry::test
