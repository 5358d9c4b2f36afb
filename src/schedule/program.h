// Program: a Schedule lowered to one flat list of instructions in program order, which the
// simulator (src/sim) and the executor (src/runtime) both interpret. Lowering is where the
// Schedule's semantics (schedule.h) are decided, once; the interpreters only carry them out, so
// both see the same allocations and frees in the same order and get the same addresses and peak.
//
// Order of one iteration
//   prologue (step 0): kAlloc of every persistent tensor in tensor-id order, then of every data
//                      input in tensor-id order.
//   step i:            before[i] actions, in order
//                      kAlloc of op i's transient outputs in output order (an output may
//                        inherit an input's block: in-place, below)
//                      kAllocScratch(i) when op i has scratch
//                      kRun(i)
//                      kFreeScratch(i)
//                      kFree of the tensors whose last use is op i: its inputs in input order,
//                        then outputs that nobody reads (not the loss), then tensors whose
//                        release point (free_after) is op i, in id order
//                      after[i] actions, in order
//   end:               kDrop of every gradient a host update consumed (its copy lives until every
//                        host update has finished)
//   Persistent tensors and the loss are never freed: they are still allocated after the last
//   instruction (the caller reads the loss, then frees it before the next iteration). Offloaded
//   persistent tensors (Schedule::offloaded) get no prologue kAlloc: they start off the device
//   with a valid copy in their tier, come in with kAlloc + kSwapIn, leave with kRelease.
//
// Actions
//   kSwapOut(t, tier) -> kSwapOut                      (t must be on the device)
//   kRelease(t)       -> kRelease                      (t must be on the device)
//   kSwapIn(t, tier)  -> kAlloc t, kSwapIn             (t must be off the device, with a copy in tier)
//   kRecompute(t)     -> kAlloc t (recompute), kAlloc of each other output of t's producer that is
//                        off the device (a temporary), kAllocScratch, kRun (recompute),
//                        kFreeScratch, kRelease of the temporaries (kFree where they are dead),
//                        kFree of producer inputs whose last use was this recompute.
//   kHostUpdate(g, tier) -> kHostRun (the update op, reading g's copy in tier); the op's own step
//                        emits nothing, and g dies here (its kDrop is at the end).
//
// Rules (violations are InvalidArgument naming the step, the action and the tensor)
// - Last use counts every read in program order: ops and the producer inputs of recomputes. A
//   tensor is freed right after its last use; no action may name it after that.
// - An op (or recompute) may read only tensors on the device. A swap-in needs a copy in that tier;
//   a copy is made by kSwapOut, survives kRelease and re-swap-in, and is dropped when the tensor
//   dies or, for a persistent tensor, when an update op writes it. Swapping out to a tier that
//   already holds a valid copy is an error (it would move the bytes twice).
// - A recompute re-runs the producer out of place and writes all of its outputs; outputs that are
//   on the device are overwritten with identical values (ops are deterministic), the others get
//   a temporary block. Data inputs, persistent tensors and outputs of update ops cannot be
//   recomputed.
// - A host update (kHostUpdate) needs its gradient off the device with a copy in the action's tier,
//   and every persistent tensor its op reads or writes offloaded, with a copy in its home tier and
//   in no other tier, and off the device if the op writes it (one it only reads may stay); an op
//   may be host-updated once. It reads its gradient there (the gradient's last read); afterwards
//   no action may bring a tensor it wrote back.
// - Persistent tensors and the loss must be on the device when the iteration ends, except
//   offloaded persistent tensors, which must be off it with a valid copy in their tier. Only
//   offloaded persistent tensors may be released.
// - In-place (ProgramOptions::allow_inplace): an output of op i takes over an input's block (its
//   kAlloc inherits it) under the rule of analysis.h (Graph::in_place_sources: the first output of
//   an inplace_capable op, or an output that overwrites the input) when the input's last use is
//   op i itself.
//
// Timing rules the interpreters share (the program itself is timing-free)
// - kRun waits for every tensor it reads to be ready (a swap-in in flight) and for any swap-out
//   in flight from a block it writes (update ops, in-place outputs, recompute overwrites).
// - kRelease and kFree wait for any swap-out in flight from the block they free.
// - kHostRun runs on a host lane, one update at a time in program order, beside compute and the
//   copies: it starts when it is issued, its gradient's swap-out has reached the tier and the
//   previous host update has finished. The copies it writes are complete when it ends; the
//   iteration ends when every host update has.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "graph/graph.h"
#include "schedule/schedule.h"

namespace ferry {

enum class InstrKind : uint8_t {
  kAlloc,         // allocate `tensor`'s device block (or take over `inherit`'s block)
  kFree,          // `tensor` dies: free its block, drop its host/SSD copies
  kRelease,       // free `tensor`'s block, keep its copies (it comes back, or is a recompute temporary)
  kAllocScratch,  // allocate `op`'s scratch
  kFreeScratch,   // free `op`'s scratch
  kRun,           // run `op` on the compute stream
  kSwapOut,       // start copying `tensor` to `tier`
  kSwapIn,        // start copying `tensor` from `tier` into the block its kAlloc just made
  kHostRun,       // run update op `op` on the host lane, from tier copies; `tensor`: its gradient,
                  // whose copy is in `tier`
  kDrop,          // `tensor` (off the device, dead) drops its copies
};
std::string_view to_string(InstrKind k);

struct Instruction {
  InstrKind kind = InstrKind::kRun;
  Tier tier = Tier::kHost;       // kSwapOut, kSwapIn, kHostRun
  bool recompute = false;        // kAlloc, kAllocScratch, kRun, kFreeScratch, kRelease/kFree of a
                                 // temporary: part of a kRecompute action
  OpId step = 0;                 // the step whose part of the program emitted it
  OpId op = kNoOp;               // kRun, kAllocScratch, kFreeScratch, kHostRun
  TensorId tensor = kNoTensor;   // kAlloc, kFree, kRelease, kSwapOut, kSwapIn, kHostRun, kDrop
  TensorId inherit = kNoTensor;  // kAlloc only: in-place, `tensor` takes over this tensor's block
                                 // (which dies here, dropping its copies)
  uint64_t bytes = 0;            // the tensor's or the scratch's bytes
  bool operator==(const Instruction&) const = default;
};

struct ProgramOptions {
  std::vector<uint64_t> op_scratch_bytes;  // per op, or empty for none (as AnalysisOptions)
  bool allow_inplace = true;
};

struct Program {
  std::vector<Instruction> instructions;
  std::string policy;             // Schedule::policy
  uint64_t budget_bytes = 0;      // Schedule::budget_bytes
  size_t num_steps = 0;
  uint64_t persistent_bytes = 0;  // sum of persistent tensor bytes allocated by the prologue
  size_t num_actions = 0;         // schedule actions lowered
  size_t num_host_updates = 0;    // kHostRun instructions
  std::vector<Offload> offloaded;  // Schedule::offloaded, sorted by tensor (as lower_schedule makes it)
  std::vector<TensorCodec> ssd_codecs;  // Schedule::ssd_codecs
  PlacementHint placement_hint;         // Schedule::placement_hint

  // Where persistent tensor `t` lives between iterations: nullopt for the device. O(log n):
  // `offloaded` must be sorted by tensor.
  std::optional<Tier> home_tier(TensorId t) const {
    auto it = std::lower_bound(offloaded.begin(), offloaded.end(), t,
                               [](const Offload& o, TensorId x) { return o.tensor < x; });
    if (it != offloaded.end() && it->tensor == t) return it->tier;
    return std::nullopt;
  }
  // Per tensor: whether it is persistent and lives on the device between iterations (placed in the
  // persistent region, never freed).
  std::vector<bool> device_resident(const Graph& g) const;

  // One line per instruction ("step 3  alloc  conv1.out  4.00 MiB  (inherits bn1.out)"),
  // for tests, debugging and `ferry plan --explain`.
  std::string to_text(const Graph& g) const;
};

// Lowers `s` for `g` (which must validate). An empty schedule (no before/after vectors) means
// keep-all. Errors (InvalidArgument): schedule sizes that do not match the graph, scratch sizes
// that do not match, tensor ids out of range, and every rule violation listed above.
Result<Program> lower_schedule(const Graph& g, const Schedule& s, const ProgramOptions& options = {});

// The same for a graph the caller has validated (Graph::validate; the planners' PlanFacts are
// made from an analysed graph), without validating it again: planning lowers one graph hundreds
// of times.
Result<Program> lower_schedule_for_valid_graph(const Graph& g, const Schedule& s, const ProgramOptions& options = {});

}  // namespace ferry
