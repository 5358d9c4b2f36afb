#include "schedule/placement.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "memory/sharing_plan.h"
#include "common/units.h"

namespace ferry {

Result<ProgramPlacement> place_program(const Graph& g, const Program& p, uint64_t alignment,
                                       uint64_t good_enough_bytes, bool refine) {
  ProgramPlacement out;
  out.offset.assign(p.instructions.size(), 0);
  const OpId last_step = p.num_steps == 0 ? 0 : static_cast<OpId>(p.num_steps - 1);
  std::vector<int32_t> open(g.tensors.size(), -1);  // tensor -> its current block
  std::vector<size_t> opened_by;                     // block -> instruction that opened it
  std::vector<size_t> empty_persistent;              // instructions allocating 0-byte persistent tensors
  int32_t scratch_block = -1;
  const std::vector<bool> resident = p.device_resident(g);
  // Swapped tensors: their blocks are page-aligned, whatever the tier (see the header).
  std::vector<bool> direct_io(g.tensors.size(), false);
  for (const Instruction& in : p.instructions)
    if ((in.kind == InstrKind::kSwapOut || in.kind == InstrKind::kSwapIn) && in.tensor != kNoTensor)
      direct_io[static_cast<size_t>(in.tensor)] = true;
  auto add_tensor = [&](Buffer& b, TensorId t) {
    b.tensors.push_back(t);
    if (direct_io[static_cast<size_t>(t)] && b.bytes > 0 && g.tensor(t).bytes >= kDirectIoMinBytes) {
      b.offset_alignment = std::max(alignment, kDirectIoAlignment);
    }
  };
  auto open_block = [&](size_t k, const Instruction& in, TensorId t, OpId scratch_of) {
    Buffer b;
    b.id = static_cast<int32_t>(out.blocks.size());
    b.bytes = in.bytes;
    b.first_step = in.step;
    b.last_step = last_step;
    if (t != kNoTensor) add_tensor(b, t);
    b.scratch_of = scratch_of;
    out.blocks.push_back(std::move(b));
    opened_by.push_back(k);
    return out.blocks.back().id;
  };
  for (size_t k = 0; k < p.instructions.size(); ++k) {
    const Instruction& in = p.instructions[k];
    switch (in.kind) {
      case InstrKind::kAlloc: {
        if (resident[in.tensor]) {
          if (in.bytes == 0) {
            empty_persistent.push_back(k);
            break;
          }
          out.offset[k] = out.persistent_region_bytes;
          out.persistent_region_bytes += align_up(in.bytes, alignment);
          break;
        }
        if (in.inherit != kNoTensor) {
          int32_t b = open[in.inherit];
          if (b < 0) return Status::Internal(fmt::format("instruction {}: in-place input has no block", k));
          open[in.inherit] = -1;
          open[in.tensor] = b;
          add_tensor(out.blocks[b], in.tensor);
          break;
        }
        open[in.tensor] = open_block(k, in, in.tensor, kNoOp);
        break;
      }
      case InstrKind::kAllocScratch: scratch_block = open_block(k, in, kNoTensor, in.op); break;
      case InstrKind::kFreeScratch:
        if (scratch_block < 0) return Status::Internal(fmt::format("instruction {}: no scratch to free", k));
        out.blocks[scratch_block].last_step = in.step;
        scratch_block = -1;
        break;
      case InstrKind::kFree:
      case InstrKind::kRelease: {
        if (resident[in.tensor]) break;
        int32_t b = open[in.tensor];
        if (b < 0) return Status::Internal(fmt::format("instruction {}: frees '{}', which has no block", k,
                                                       g.tensor(in.tensor).name));
        out.blocks[b].last_step = in.step;
        open[in.tensor] = -1;
        break;
      }
      default: break;
    }
  }
  if (pages_align_swapped_blocks(p))
    out.persistent_region_bytes = align_up(out.persistent_region_bytes, kDirectIoAlignment);
  const uint64_t transient_good_enough =
      good_enough_bytes > out.persistent_region_bytes ? good_enough_bytes - out.persistent_region_bytes : 0;
  out.plan = plan_memory_sharing(out.blocks, alignment, transient_good_enough, refine, &p.placement_hint);
  out.arena_bytes = out.persistent_region_bytes + out.plan.arena_bytes;
  // Empty blocks hold nothing; they all sit at the end of the arena, where no block holding
  // bytes starts (OffsetAllocator's rule for zero-byte blocks).
  for (size_t b = 0; b < out.blocks.size(); ++b)
    out.offset[opened_by[b]] =
        out.blocks[b].bytes == 0 ? out.arena_bytes : out.persistent_region_bytes + out.plan.offsets[b];
  for (size_t k : empty_persistent) out.offset[k] = out.arena_bytes;
  return out;
}

bool pages_align_swapped_blocks(const Program& p) {
  return std::any_of(p.instructions.begin(), p.instructions.end(), [](const Instruction& in) {
    return (in.kind == InstrKind::kSwapOut || in.kind == InstrKind::kSwapIn) && in.tensor != kNoTensor &&
           in.bytes >= kDirectIoMinBytes;
  });
}

ProgramLivePeak program_live_peak(const Graph& g, const Program& p, uint64_t alignment) {
  ProgramLivePeak peak;
  uint64_t live = 0, scratch = 0;
  std::vector<uint64_t> held(g.tensors.size(), 0);
  const std::vector<bool> resident = p.device_resident(g);
  for (size_t k = 0; k < p.instructions.size(); ++k) {
    const Instruction& in = p.instructions[k];
    switch (in.kind) {
      case InstrKind::kAlloc:
        if (in.inherit != kNoTensor) {
          held[in.tensor] = std::exchange(held[in.inherit], 0);
        } else if (held[in.tensor] == 0) {
          held[in.tensor] = align_up(in.bytes, alignment);
          live += held[in.tensor];
        }
        break;
      case InstrKind::kAllocScratch:
        scratch = align_up(in.bytes, alignment);
        live += scratch;
        break;
      case InstrKind::kFreeScratch: live -= std::exchange(scratch, 0); break;
      case InstrKind::kFree:
      case InstrKind::kRelease:
        if (!resident[in.tensor]) live -= std::exchange(held[in.tensor], 0);
        break;
      default: break;
    }
    if (live > peak.bytes) peak = {live, k};
  }
  return peak;
}

}  // namespace ferry
