// Placement of a Program's swap-tier copies. See tier_placement.h for the design.
#include "schedule/tier_placement.h"

#include <algorithm>
#include <unordered_map>

namespace ferry {

std::vector<TierCopy> tier_copies(const Graph& g, const Program& p, Tier tier) {
  const size_t end = p.instructions.empty() ? 0 : p.instructions.size() - 1;
  std::unordered_map<TensorId, size_t> index;  // tensor -> position in `copies`
  std::vector<TierCopy> copies;
  auto open = [&](TensorId t, uint64_t bytes, size_t at) {
    if (bytes == 0 || index.contains(t)) return;  // an empty tensor needs no slot
    const bool persistent = g.tensor(t).persistent();
    index.emplace(t, copies.size());
    copies.push_back({.tensor = t, .bytes = bytes, .first_instruction = persistent ? 0 : at, .last_instruction = end});
  };
  for (const Offload& o : p.offloaded)
    if (o.tier == tier) open(o.tensor, g.tensor(o.tensor).bytes, 0);
  // A transient copy closes at the first drop after it opened; a later swap-out of the same
  // tensor (it cannot have one: transient tensors die once) would reopen nothing.
  std::vector<bool> closed(copies.size(), false);
  for (size_t k = 0; k < p.instructions.size(); ++k) {
    const Instruction& in = p.instructions[k];
    if (in.kind == InstrKind::kSwapOut && in.tier == tier) {
      open(in.tensor, in.bytes, k);
      closed.resize(copies.size(), false);
      continue;
    }
    TensorId dies = kNoTensor;
    if (in.kind == InstrKind::kFree || in.kind == InstrKind::kDrop) dies = in.tensor;
    if (in.kind == InstrKind::kAlloc && in.inherit != kNoTensor) dies = in.inherit;
    if (dies == kNoTensor) continue;
    auto it = index.find(dies);
    if (it == index.end() || closed[it->second] || g.tensor(dies).persistent()) continue;
    copies[it->second].last_instruction = k;
    closed[it->second] = true;
  }
  std::stable_sort(copies.begin(), copies.end(), [](const TierCopy& a, const TierCopy& b) {
    return a.first_instruction != b.first_instruction ? a.first_instruction < b.first_instruction
                                                       : a.tensor < b.tensor;
  });
  return copies;
}

std::vector<Buffer> tier_buffers(const std::vector<TierCopy>& copies) {
  std::vector<Buffer> buffers;
  buffers.reserve(copies.size());
  for (const TierCopy& c : copies)
    buffers.push_back({.id = static_cast<int32_t>(buffers.size()),
                       .bytes = c.bytes,
                       .first_step = static_cast<OpId>(c.first_instruction),
                       .last_step = static_cast<OpId>(c.last_instruction),
                       .tensors = {c.tensor}});
  return buffers;
}

TierPlacement place_tier_copies(std::vector<TierCopy> copies, Tier tier) {
  TierPlacement tp;
  tp.tier = tier;
  const std::vector<Buffer> buffers = tier_buffers(copies);
  tp.copies = std::move(copies);
  if (buffers.empty()) return tp;
  const MemoryPlan plan = plan_memory_sharing(buffers, kTierSlotAlignment);
  tp.offsets = plan.offsets;
  tp.bytes = plan.arena_bytes;
  tp.live_peak_bytes = aligned_live_lower_bound(buffers, kTierSlotAlignment);
  return tp;
}

TierPlacement place_tier(const Graph& g, const Program& p, Tier tier) {
  return place_tier_copies(tier_copies(g, p, tier), tier);
}

}  // namespace ferry
