#include "runtime/plan_corruption.h"

#include <algorithm>

#include <fmt/format.h>

namespace ferry {

namespace {

Status no_victim(PlanCorruption c, std::string_view why) {
  return Status::Internal(fmt::format("plan corruption {}: {}", static_cast<int>(c), why));
}

bool reads(const Graph& g, const Instruction& in, TensorId t) {
  if (in.kind != InstrKind::kRun) return false;
  const std::vector<TensorId>& ins = g.op(in.op).inputs;
  return std::find(ins.begin(), ins.end(), t) != ins.end();
}

// Moves instructions [from, from + count) to just before position `to` (to > from + count - 1).
// The caller sets the moved instructions' steps (placement reads lifetimes from them).
void move_range(Program& p, size_t from, size_t count, size_t to) {
  auto& v = p.instructions;
  std::rotate(v.begin() + static_cast<long>(from), v.begin() + static_cast<long>(from + count),
              v.begin() + static_cast<long>(to));
}

Result<TensorId> early_free(const Graph& g, Program& p) {
  for (size_t k = 0; k < p.instructions.size(); ++k) {
    const Instruction& in = p.instructions[k];
    if (in.kind != InstrKind::kFree || g.tensor(in.tensor).persistent()) continue;
    // Its readers before the free: the first one, and whether a later one exists.
    size_t first = 0, readers = 0;
    for (size_t j = 0; j < k; ++j)
      if (reads(g, p.instructions[j], in.tensor) && readers++ == 0) first = j;
    if (readers < 2) continue;
    const TensorId t = in.tensor;
    // The free moves back to just after the first reader, into its step.
    std::rotate(p.instructions.begin() + static_cast<long>(first + 1), p.instructions.begin() + static_cast<long>(k),
                p.instructions.begin() + static_cast<long>(k + 1));
    p.instructions[first + 1].step = p.instructions[first].step;
    return t;
  }
  return no_victim(PlanCorruption::kEarlyFree, "no tensor is read twice before it is freed");
}

Result<TensorId> late_swap_in(const Graph& g, Program& p) {
  for (size_t k = 1; k < p.instructions.size(); ++k) {
    const Instruction& in = p.instructions[k];
    if (in.kind != InstrKind::kSwapIn) continue;
    for (size_t j = k + 1; j < p.instructions.size(); ++j) {
      if (!reads(g, p.instructions[j], in.tensor)) continue;
      const TensorId t = in.tensor;
      const OpId step = p.instructions[j].step;
      move_range(p, k - 1, 2, j + 1);  // its kAlloc and kSwapIn, after the reader, in its step
      p.instructions[j - 1].step = p.instructions[j].step = step;
      return t;
    }
  }
  return no_victim(PlanCorruption::kLateSwapIn, "the plan swaps nothing in");
}

Result<TensorId> delay_free(const Graph& g, Program& p) {
  const ProgramLivePeak peak = program_live_peak(g, p, 64);
  TensorId best = kNoTensor;
  size_t best_k = 0;
  for (size_t k = 0; k < peak.instruction; ++k) {
    const Instruction& in = p.instructions[k];
    if (in.kind != InstrKind::kFree || g.tensor(in.tensor).persistent() || in.bytes == 0) continue;
    if (best == kNoTensor || in.bytes > g.tensor(best).bytes) {
      best = in.tensor;
      best_k = k;
    }
  }
  if (best == kNoTensor) return no_victim(PlanCorruption::kDelayFree, "nothing is freed before the peak");
  move_range(p, best_k, 1, p.instructions.size());
  p.instructions.back().step = p.num_steps == 0 ? 0 : static_cast<OpId>(p.num_steps - 1);
  return best;
}

}  // namespace

Result<TensorId> corrupt_program(PlanCorruption c, const Graph& g, Program& p) {
  switch (c) {
    case PlanCorruption::kEarlyFree: return early_free(g, p);
    case PlanCorruption::kLateSwapIn: return late_swap_in(g, p);
    case PlanCorruption::kDelayFree: return delay_free(g, p);
    default: return kNoTensor;
  }
}

Result<TensorId> corrupt_placement(PlanCorruption c, const Graph& g, const Program& p, ProgramPlacement& placement) {
  if (c != PlanCorruption::kOverlapPlacement) return kNoTensor;
  // The j-th instruction that opens a transient block opens placement.blocks[j].
  std::vector<size_t> opened_by;
  const std::vector<bool> resident = p.device_resident(g);
  for (size_t k = 0; k < p.instructions.size(); ++k) {
    const Instruction& in = p.instructions[k];
    if ((in.kind == InstrKind::kAlloc && in.inherit == kNoTensor && !resident[in.tensor]) ||
        in.kind == InstrKind::kAllocScratch)
      opened_by.push_back(k);
  }
  const std::vector<Buffer>& b = placement.blocks;
  for (size_t j = 0; j < b.size(); ++j) {
    if (b[j].tensors.empty() || b[j].bytes == 0) continue;
    for (size_t i = 0; i < j; ++i) {
      if (b[i].tensors.empty() || b[i].bytes == 0 || b[i].last_step < b[j].first_step) continue;
      placement.offset[opened_by[j]] = placement.offset[opened_by[i]];
      return b[j].tensors.front();
    }
  }
  return no_victim(c, "no two transient blocks are live at once");
}

Result<TensorId> corruption_victim(PlanCorruption c, const Graph& g, const Program& p) {
  for (const Instruction& in : p.instructions) {
    if (c == PlanCorruption::kDropSwapIn && in.kind == InstrKind::kSwapIn) return in.tensor;
    if ((c == PlanCorruption::kUndersizeTensor || c == PlanCorruption::kWriteAfterFree) &&
        in.kind == InstrKind::kRun && !in.recompute) {
      for (TensorId t : g.op(in.op).outputs)
        if (!g.tensor(t).persistent() && g.tensor(t).bytes >= 1024) return t;
    }
  }
  if (c == PlanCorruption::kDropSwapIn) return no_victim(c, "the plan swaps nothing in");
  if (c == PlanCorruption::kUndersizeTensor || c == PlanCorruption::kWriteAfterFree)
    return no_victim(c, "no kernel writes a transient tensor of 1 KiB or more");
  return kNoTensor;
}

}  // namespace ferry
