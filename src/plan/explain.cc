// See explain.h.
#include "plan/explain.h"

#include <algorithm>
#include <unordered_map>

#include <fmt/format.h>

#include "common/units.h"

namespace ferry {

std::vector<TensorDecision> explain_schedule(const Graph& g, const CostModel& cost, const Schedule& s,
                                             const SimResult* sim) {
  const int32_t n = static_cast<int32_t>(g.ops.size());
  std::vector<OpId> producer(g.tensors.size(), kNoOp);
  for (const Op& op : g.ops)
    for (TensorId t : op.outputs)
      if (producer[static_cast<size_t>(t)] == kNoOp) producer[static_cast<size_t>(t)] = op.id;
  std::unordered_map<TensorId, CodecId> codec_of;
  for (const TensorCodec& c : s.ssd_codecs) codec_of[c.tensor] = c.codec;
  const std::vector<std::string> classes = codec_of.empty() ? std::vector<std::string>{} : tensor_classes(g);
  // The cost model's time of one copy of t, its SSD codec included.
  auto link_us = [&](Direction dir, Tier tier, TensorId t) {
    const auto it = codec_of.find(t);
    if (it == codec_of.end()) return cost.transfer_us(dir, tier, g.tensor(t).bytes);
    return cost.transfer_us(dir, tier, g.tensor(t).bytes, it->second, classes[static_cast<size_t>(t)]);
  };
  std::unordered_map<TensorId, TensorDecision> by_tensor;
  std::unordered_map<TensorId, int32_t> away_since;  // released, not back yet
  std::unordered_map<TensorId, Tier> tier_of;
  auto entry = [&](TensorId t) -> TensorDecision& {
    TensorDecision& d = by_tensor[t];
    d.tensor = t;
    d.bytes = g.tensor(t).bytes;
    return d;
  };
  for (const Offload& o : s.offloaded) {
    entry(o.tensor).move = "offload";
    away_since[o.tensor] = 0;
    tier_of[o.tensor] = o.tier;
  }
  auto apply = [&](const Action& a, int32_t step, bool before) {
    TensorDecision& d = entry(a.tensor);
    switch (a.kind) {
      case ActionKind::kSwapOut:
        ++d.swap_outs;
        d.link_us += link_us(Direction::kSwapOut, a.tier, a.tensor);
        tier_of[a.tensor] = a.tier;
        break;
      case ActionKind::kRelease: away_since[a.tensor] = before ? step : step + 1; break;
      case ActionKind::kSwapIn:
      case ActionKind::kRecompute: {
        if (a.kind == ActionKind::kSwapIn) {
          ++d.swap_ins;
          d.link_us += link_us(Direction::kSwapIn, a.tier, a.tensor);
          tier_of[a.tensor] = a.tier;
        } else {
          ++d.recomputes;
          const OpId p = producer[static_cast<size_t>(a.tensor)];
          if (p != kNoOp) d.recompute_us += cost.op_time_us(g, g.op(p));
        }
        if (auto it = away_since.find(a.tensor); it != away_since.end()) {
          d.away_steps += std::max(0, step - it->second);
          away_since.erase(it);
        }
        break;
      }
      case ActionKind::kHostUpdate: d.move = "host-update"; break;
    }
  };
  for (int32_t step = 0; step < n; ++step) {
    if (static_cast<size_t>(step) < s.before.size())
      for (const Action& a : s.before[static_cast<size_t>(step)]) apply(a, step, true);
    if (static_cast<size_t>(step) < s.after.size())
      for (const Action& a : s.after[static_cast<size_t>(step)]) apply(a, step, false);
  }
  for (const auto& [t, since] : away_since) by_tensor[t].away_steps += std::max(0, n - since);

  std::vector<TensorDecision> out;
  for (auto& [t, d] : by_tensor) {
    if (d.swap_outs == 0 && d.swap_ins == 0 && d.recomputes == 0 && d.move.empty()) continue;  // a bare release
    const Tier tier = tier_of.contains(t) ? tier_of[t] : Tier::kHost;
    const double swap_us = link_us(Direction::kSwapOut, tier, t) + link_us(Direction::kSwapIn, tier, t);
    if (tier == Tier::kSsd)
      if (auto it = codec_of.find(t); it != codec_of.end()) d.ssd_codec = it->second;
    const OpId p = producer[static_cast<size_t>(t)];
    const bool recomputable = !g.tensor(t).persistent() && p != kNoOp && g.op(p).phase == Phase::kForward;
    const std::string keep = fmt::format("keep: {} more device memory over {} steps", format_bytes(d.bytes), d.away_steps);
    if (d.move != "offload" && d.move != "host-update")
      d.move = d.recomputes > 0 ? (d.swap_ins > 0 ? "swap+recompute" : "recompute") : "swap";
    if (d.move == "host-update") {
      d.alternative = fmt::format("update on the device: the weight, this gradient and the optimizer state on the "
                                  "device at the update; or {}", keep);
    } else if (d.move == "recompute") {
      d.alternative = fmt::format("swap to {}: {:.3f} ms of link time (out and in); or {}", to_string(tier),
                                  swap_us / 1e3, keep);
    } else if (d.move == "swap" && recomputable) {
      d.alternative = fmt::format("recompute: {:.3f} ms for its producer {} (more where its inputs are gone too); or {}",
                                  cost.op_time_us(g, g.op(p)) / 1e3, g.op(p).name, keep);
    } else {
      d.alternative = keep;
    }
    if (sim != nullptr) {
      const size_t i = static_cast<size_t>(t);
      if (i < sim->swap_in_wait_us.size()) d.wait_us += sim->swap_in_wait_us[i];
      if (i < sim->swap_out_wait_us.size()) d.wait_us += sim->swap_out_wait_us[i];
    }
    out.push_back(std::move(d));
  }
  std::sort(out.begin(), out.end(), [](const TensorDecision& a, const TensorDecision& b) {
    if (a.exposed_us() != b.exposed_us()) return a.exposed_us() > b.exposed_us();
    return a.link_us != b.link_us ? a.link_us > b.link_us : a.tensor < b.tensor;
  });
  return out;
}

}  // namespace ferry
