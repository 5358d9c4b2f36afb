// Static placement of a Program's device memory: an offset for every block it allocates.
//
// Design
// - Every kAlloc (not inheriting) and kAllocScratch opens a block; the kFree/kRelease/
//   kFreeScratch that ends it closes it; an in-place kAlloc extends its input's block. A block
//   that is never closed (the loss) lives to the last step. Block lifetimes are step intervals,
//   [step of the opening instruction, step of the closing one], which over-approximates the
//   order inside a step and so never lets two blocks that coexist share bytes.
// - Persistent tensors (weights, optimizer state) that live on the device between iterations are
//   laid out first, in tensor-id order, each at an aligned offset: the persistent region
//   [0, persistent_region_bytes). Offloaded ones (Schedule::offloaded) come and go like transient
//   tensors: a block per stay on the device.
// - The other blocks are placed by the analysis' memory-sharing planner (memory/sharing_plan.h)
//   after the persistent region. For the keep plan (policy none) these blocks are exactly the
//   analysis' buffers, so the placement equals the analysis' static plan byte for byte.
// - Blocks that hold a tensor of at least kDirectIoMinBytes (64 KiB) that the program swaps out or
//   in start at multiples of kDirectIoAlignment (4 KiB; their sizes keep the device alignment), and
//   so does the first transient byte when there is such a block: the arena's base is
//   page-aligned (the executor asks for whole pages), so these tensors' addresses are too, and the
//   SSD tier moves them with direct I/O in place (runtime/ssd_tier.h). Host-tier copies
//   get the same alignment, although a memcpy needs none: a copy's tier can then change (the
//   host-budget cascade, plan/tier_cascade.h) without moving anything on the device. The executor,
//   the simulator and the planners place the same program, so all see the padding this costs.
// - A zero-byte block (an empty tensor) holds nothing: it is placed at arena_bytes, the end of
//   the arena, where no block holding bytes starts, and changes no offset and no size, so a
//   program with empty tensors places exactly like one without them.
// - The executor and the simulator both allocate at these offsets (OffsetAllocator::allocate_at),
//   so they see the same addresses and the same peak; a plan fits a budget iff arena_bytes <= it.
#pragma once

#include <cstdint>
#include <vector>

#include "analysis/analysis.h"
#include "common/status.h"
#include "graph/graph.h"
#include "schedule/program.h"

namespace ferry {

struct ProgramPlacement {
  // Per instruction: the offset of the block a kAlloc (not inheriting) or kAllocScratch opens;
  // unused for other instructions.
  std::vector<uint64_t> offset;
  uint64_t persistent_region_bytes = 0;
  uint64_t arena_bytes = 0;  // device bytes the program needs: persistent region + transient blocks
  std::vector<Buffer> blocks;  // transient blocks with step lifetimes (for checks and reports)
  MemoryPlan plan;             // offsets of `blocks` relative to the end of the persistent region
};

// Places every block of `p`. With `good_enough_bytes` the search for the smallest arena stops at
// the first placement within it; without `refine` it tries the orders only (plan_memory_sharing).
// Errors: a program that frees what it did not allocate (Internal).
Result<ProgramPlacement> place_program(const Graph& g, const Program& p, uint64_t alignment,
                                       uint64_t good_enough_bytes = 0, bool refine = true);

// The most bytes `p` holds at once, in program order (every kAlloc that opens a block and every
// kAllocScratch adds its bytes rounded up to `alignment`, every kFree/kRelease/kFreeScratch of a
// transient block subtracts them; persistent tensors are allocated once), and the index of the
// instruction after which that peak is first reached. This is the plan's prediction of the live
// bytes the executor will measure.
struct ProgramLivePeak {
  uint64_t bytes = 0;
  size_t instruction = 0;
};
ProgramLivePeak program_live_peak(const Graph& g, const Program& p, uint64_t alignment);

// Whether place_program may page-align blocks of `p` (it swaps a tensor of at least
// kDirectIoMinBytes), and so rounds its persistent region up to kDirectIoAlignment.
bool pages_align_swapped_blocks(const Program& p);

}  // namespace ferry
