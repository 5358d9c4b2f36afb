// See host_updates.h.
#include "plan/ferry/host_updates.h"

#include <algorithm>
#include <limits>

namespace ferry::planner {

std::vector<OpId> by_gradient_order(const PlanFacts& f, std::vector<OpId> ops) {
  const Graph& g = f.g();
  std::sort(ops.begin(), ops.end(), [&](OpId a, OpId b) {
    return f.producer[static_cast<size_t>(g.op(a).inputs[1])] < f.producer[static_cast<size_t>(g.op(b).inputs[1])];
  });
  return ops;
}

std::vector<OpId> host_ops_in_shadow(const PlanContext& ctx, const PlanFacts& f, const std::vector<OpId>& ops) {
  const Graph& g = f.g();
  std::vector<bool> host(g.ops.size(), false);
  for (OpId u : ops) host[static_cast<size_t>(u)] = true;
  std::vector<double> end(g.ops.size(), 0);  // device timeline without the host updates
  double now = 0;
  for (const Op& op : g.ops) {
    if (!host[static_cast<size_t>(op.id)]) now += f.op_us[static_cast<size_t>(op.id)];
    end[static_cast<size_t>(op.id)] = now;
  }
  const std::vector<OpId> sorted = by_gradient_order(f, ops);
  std::vector<OpId> out;
  double lane = 0;
  for (OpId u : sorted) {
    const TensorId grad = g.op(u).inputs[1];
    const double ready = end[static_cast<size_t>(f.producer[static_cast<size_t>(grad)])] +
                         ctx.cost.transfer_us(Direction::kSwapOut, Tier::kHost, g.tensor(grad).bytes);
    const double finish = std::max(lane, ready) + ctx.cost.host_update_us(g, g.op(u)).value_or(0);
    if (finish > now) continue;
    lane = finish;
    out.push_back(u);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<OpId> host_split_order(const PlanContext& ctx, const PlanFacts& f, const std::vector<OpId>& ops) {
  const Graph& g = f.g();
  std::vector<bool> update(g.ops.size(), false);
  for (OpId u : ops) update[static_cast<size_t>(u)] = true;
  double device_us = 0, host_us = 0;  // the device's compute without these updates; the host lane's
  for (const Op& op : g.ops)
    if (!update[static_cast<size_t>(op.id)]) device_us += f.op_us[static_cast<size_t>(op.id)];
  for (OpId u : ops) host_us += ctx.cost.host_update_us(g, g.op(u)).value_or(0);
  if (ops.size() < 2 || host_us <= device_us) return {};
  return by_gradient_order(f, ops);
}

size_t balanced_host_split(const PlanContext& ctx, const PlanFacts& f, const std::vector<OpId>& order) {
  const Graph& g = f.g();
  const size_t n = order.size();
  std::vector<double> host(n + 1, 0), grads(n + 1, 0), state(n + 1, 0);  // prefix sums
  for (size_t i = 0; i < n; ++i) {
    const Op& u = g.op(order[i]);
    host[i + 1] = host[i] + ctx.cost.host_update_us(g, u).value_or(0);
    grads[i + 1] = grads[i] + ctx.cost.transfer_us(Direction::kSwapOut, Tier::kHost, g.tensor(u.inputs[1]).bytes);
    uint64_t bytes = 0;
    for (TensorId t : u.outputs)
      if (g.tensor(t).persistent()) bytes += g.tensor(t).bytes;
    state[i + 1] = state[i] + ctx.cost.transfer_us(Direction::kSwapIn, Tier::kHost, bytes);
  }
  size_t best = 0;
  double best_us = std::numeric_limits<double>::infinity();
  for (size_t k = 0; k <= n; ++k) {
    const double us = std::max(host[k], grads[k] + state[n] - state[k]);
    if (us < best_us) best_us = us, best = k;
  }
  return best;
}

Schedule with_host_updates(const PlanFacts& f, Schedule s, const std::vector<OpId>& ops,
                           const std::vector<OpId>* at_step) {
  const Graph& g = f.g();
  const OpId last = static_cast<OpId>(g.ops.size()) - 1;
  std::vector<bool> chosen(g.ops.size(), false), gradient(g.tensors.size(), false), operand(g.tensors.size(), false);
  for (OpId u : ops) {
    chosen[static_cast<size_t>(u)] = true;
    gradient[static_cast<size_t>(g.op(u).inputs[1])] = true;
    for (const auto* list : {&g.op(u).inputs, &g.op(u).outputs})
      for (TensorId t : *list)
        if (g.tensor(t).persistent()) operand[static_cast<size_t>(t)] = true;
  }
  // The last device step reading each operand (ops that stay on the device).
  std::vector<OpId> last_read(g.tensors.size(), kNoOp);
  for (const Op& op : g.ops)
    if (!chosen[static_cast<size_t>(op.id)])
      for (TensorId t : op.inputs) last_read[static_cast<size_t>(t)] = op.id;
  for (auto* lists : {&s.before, &s.after})
    for (auto& list : *lists)
      std::erase_if(list, [&](const Action& a) {
        return gradient[static_cast<size_t>(a.tensor)] ||
               (operand[static_cast<size_t>(a.tensor)] && a.kind == ActionKind::kSwapOut);
      });
  for (Offload& o : s.offloaded)
    if (operand[static_cast<size_t>(o.tensor)]) o.tier = Tier::kHost;
  std::vector<bool> offloaded(g.tensors.size(), false);
  for (const Offload& o : s.offloaded) offloaded[static_cast<size_t>(o.tensor)] = true;
  std::vector<OpId> first_read(g.tensors.size(), kNoOp);
  for (const Op& op : g.ops)
    for (TensorId t : op.inputs)
      if (first_read[static_cast<size_t>(t)] == kNoOp) first_read[static_cast<size_t>(t)] = op.id;
  std::vector<std::pair<OpId, TensorId>> prefetch;  // (first read, weight) of weights new to the tier
  for (const Tensor& t : g.tensors) {
    if (!operand[static_cast<size_t>(t.id)] || offloaded[static_cast<size_t>(t.id)]) continue;
    s.offloaded.push_back({t.id, Tier::kHost});
    if (first_read[static_cast<size_t>(t.id)] != kNoOp && !chosen[static_cast<size_t>(first_read[static_cast<size_t>(t.id)])])
      prefetch.emplace_back(first_read[static_cast<size_t>(t.id)], t.id);
  }
  // A weight comes back where `at_step` says; otherwise complete_schedule fetches it before its
  // first read.
  if (at_step != nullptr)
    for (auto [read, t] : prefetch)
      if ((*at_step)[static_cast<size_t>(t)] != kNoOp)
        add_before(s, std::min((*at_step)[static_cast<size_t>(t)], read), swap_in_action(t, Tier::kHost));
  for (OpId u : ops) {
    const Op& op = g.op(u);
    const TensorId grad = op.inputs[1];
    const OpId p = f.producer[static_cast<size_t>(grad)];
    OpId at = std::min<OpId>(p + 1, last);
    if (at_step != nullptr && (*at_step)[static_cast<size_t>(grad)] != kNoOp)
      at = std::clamp((*at_step)[static_cast<size_t>(grad)], p, last);
    // Not before the device's last read of what it writes (a tensor it only reads, such as AMP's
    // loss scale that every update reads, does not hold it back).
    for (TensorId t : op.outputs)
      if (g.tensor(t).persistent() && last_read[static_cast<size_t>(t)] != kNoOp)
        at = std::max(at, last_read[static_cast<size_t>(t)]);
    add_after(s, p, swap_out_action(grad, Tier::kHost));
    add_after(s, at, release_action(grad));
    add_after(s, at, Action{ActionKind::kHostUpdate, grad, Tier::kHost});
  }
  return s;
}

}  // namespace ferry::planner
