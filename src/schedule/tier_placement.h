// Static placement of a Program's copies in a swap tier: an offset in the tier for every tensor
// the program keeps a copy of there, so that a tier of a fixed capacity (a host-memory budget)
// never fragments and what the plan says it needs is what the tier holds.
//
// Design
// - A copy's lifetime is an interval of instruction indices. It opens at the tensor's first
//   kSwapOut to the tier and closes where the runtime drops the tensor's copies: the kFree of the
//   tensor, or the kAlloc of an in-place output that takes over its block. A copy that nothing
//   closes lives to the end of the program.
// - Persistent tensors (weights, optimizer state) keep a copy across iteration boundaries (an
//   offloaded tensor lives in its tier between iterations; a swapped weight's copy lasts until its
//   update), so their copies live for the whole program: [0, end]. This over-approximates a
//   weight's copy, which is dropped at its update, and never lets two copies that coexist in some
//   iteration share bytes.
// - A tensor has one interval per tier (its first swap-out to its drop); swapping it out again
//   after an in-iteration drop (a persistent tensor updated, then offloaded) lands in the same
//   slot, which its interval already covers.
// - The intervals are placed by the same memory-sharing planner as the device arena
//   (memory/sharing_plan.h), every slot aligned to kTierSlotAlignment (4 KiB: what the SSD tier's
//   direct I/O needs, and a multiple of the host tier's 64 bytes). `bytes` is the tier capacity
//   the program needs; `live_peak_bytes` the most aligned copy bytes alive at once, which no
//   placement can beat.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "common/transfer.h"
#include "graph/graph.h"
#include "memory/sharing_plan.h"
#include "schedule/program.h"

namespace ferry {

inline constexpr uint64_t kTierSlotAlignment = 4096;

// One tensor's copy in a tier: its bytes and the instructions during which it may exist.
struct TierCopy {
  TensorId tensor = kNoTensor;
  uint64_t bytes = 0;              // the tensor's bytes (unaligned)
  size_t first_instruction = 0;    // its first swap-out (0 for persistent tensors)
  size_t last_instruction = 0;     // where its copies are dropped (inclusive)
};

struct TierPlacement {
  Tier tier = Tier::kHost;
  std::vector<TierCopy> copies;     // by first instruction, then tensor id
  std::vector<uint64_t> offsets;    // per copy: its slot's offset in the tier
  uint64_t bytes = 0;               // the tier capacity the placement needs
  uint64_t live_peak_bytes = 0;     // max over instructions of the aligned bytes of live copies
};

// The copies `p` (lowered for `g`) keeps in `tier`, with their lifetimes (unplaced).
std::vector<TierCopy> tier_copies(const Graph& g, const Program& p, Tier tier);

// Places `copies` (as tier_copies() returns them, or a subset) in one tier.
TierPlacement place_tier_copies(std::vector<TierCopy> copies, Tier tier);

// tier_copies() placed.
TierPlacement place_tier(const Graph& g, const Program& p, Tier tier);

// The placement as buffers of the memory-sharing planner (one per copy, lifetimes in instruction
// indices), for checks.
std::vector<Buffer> tier_buffers(const std::vector<TierCopy>& copies);

}  // namespace ferry
