// Structure analysis of one training iteration (the seed design's first module).
//
// Steps are the ops in execution order, numbered 0..n-1. For every step: the tensors it reads.
// For every tensor: producer, consumers, first and last use, and for saved activations the idle
// interval between the last forward use and the first backward use. Live bytes per step and three
// peaks: keep everything, free at last use, and in-place reuse plus a static memory-sharing plan.
//
// Memory model (shared with the executor and simulator, so that predictions are exact):
// - Persistent tensors (weights, optimizer state) occupy their own region for the whole run.
// - A transient tensor occupies memory from the step that produces it (step 0 for data inputs)
//   through its last use (inclusive). During a step, its inputs and outputs coexist.
// - Op scratch (oneDNN scratchpad, reorder buffers) is a pseudo-tensor live during its op only.
// - In-place: an op with `inplace_capable` writes its first output into its first input's buffer,
//   and any output that `overwrites` a tensor (a new version of its storage) into that tensor's,
//   when that input is transient, not a data input, has the same byte size, and dies at this op
//   (Graph::in_place_sources). The two tensors then form one buffer whose lifetime is the union.
// - A tensor with a release point (`free_after`) lives at least through that step.
//
// Conventions (the executor and simulator follow them too):
// - Live bytes and peaks count each tensor's `bytes` as is; alignment padding exists only in the
//   sharing plan, where every buffer occupies [offset, offset + bytes) with an aligned offset.
// - A transient tensor that no op reads is live during its producer's step only (a data input
//   that no op reads: during step 0). A transient tensor that is neither a data input nor produced
//   by any op never exists: no buffer, first_use = last_use = kNoOp.
// - The loss (Graph::loss) stays live through the final step: the caller reads it after the
//   iteration.
// - Persistent tensors have first_use = 0 and last_use = the final step, and no buffer.
// - Keep-all frees nothing but op scratch, which exists during its op only.
// - Buffers are numbered in the order they come alive (data inputs first, then by step; at one
//   step: the op's outputs in order, then its scratch if non-zero), so `buffers` is sorted by
//   first_step.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "graph/graph.h"
#include "memory/sharing_plan.h"

namespace ferry {

struct AnalysisOptions {
  // Extra bytes live only during each op (size ops.size(), or empty for none).
  std::vector<uint64_t> op_scratch_bytes;
  bool allow_inplace = true;
  uint64_t alignment = 64;  // every offset in the sharing plan is a multiple of this
};

struct TensorInfo {
  OpId producer = kNoOp;          // kNoOp for inputs and persistent tensors
  std::vector<OpId> consumers;    // ops reading it, in execution order (no duplicates)
  OpId first_use = kNoOp;         // step it becomes live (producer, or 0 for data inputs)
  OpId last_use = kNoOp;          // last step that reads it (= producer if never read)
  // Saved activations: first backward step reading it, the last forward step reading it before
  // that, and idle_steps = first_backward_use - last_forward_use (0 when not saved for backward).
  // With several forward/backward passes in one iteration this is the gap of the first pass that
  // reads it in backward.
  // The step a transient tensor comes alive counts as a use, so a tensor produced in forward and
  // read only in backward (max-pool indices, batch-norm statistics) is saved too. Either step is
  // kNoOp when there is none.
  OpId last_forward_use = kNoOp;
  OpId first_backward_use = kNoOp;
  int32_t idle_steps = 0;
  // Buffer identity after in-place merging: tensors sharing a buffer have the same buffer id.
  int32_t buffer = -1;
};

struct Analysis {
  std::vector<std::vector<TensorId>> step_inputs;  // per op: distinct tensors read, in input order
  std::vector<TensorInfo> tensors;                 // per tensor
  std::vector<Buffer> buffers;                     // transient buffers after in-place merging
  MemoryPlan plan;                                 // static memory-sharing plan over `buffers`

  uint64_t persistent_bytes = 0;   // weights + optimizer state
  // The persistent region as the executor lays it out: every persistent tensor at an offset aligned
  // to AnalysisOptions::alignment, in tensor-id order (sum of the aligned sizes).
  uint64_t persistent_region_bytes = 0;
  uint64_t weight_bytes = 0;
  uint64_t activation_bytes = 0;   // all kActivation + kWorkspace tensors of one iteration, summed
  // Live transient bytes during each step, without and with in-place sharing (both include scratch).
  std::vector<uint64_t> live_bytes_free_at_last_use;
  std::vector<uint64_t> live_bytes_shared;
  // Peaks, all including persistent_bytes:
  uint64_t peak_bytes_keep_all = 0;          // (a) nothing freed before the end of the iteration
  uint64_t peak_bytes_free_at_last_use = 0;  // (b) freed at last use, no in-place
  uint64_t lower_bound_bytes = 0;            // max over steps of live bytes with in-place
  uint64_t peak_bytes_shared = 0;            // (c) persistent_region_bytes + plan.arena_bytes
  // The irreducible minimum of any plan that runs every op on the device: the largest working set
  // of one op (its distinct inputs and outputs, weights included, at the alignment, plus its
  // scratch). Over the ops that are not optimizer updates, and separately over the updates (which a
  // plan may run on the host instead: their working set then needs no device memory).
  uint64_t op_working_set_bytes = 0;
  OpId op_working_set_op = kNoOp;
  uint64_t update_working_set_bytes = 0;
  double analysis_seconds = 0;               // wall time of analyze()
};

// Runs the whole analysis. The graph must validate. Errors: invalid graph, options size mismatch.
Result<Analysis> analyze(const Graph& g, const AnalysisOptions& options = {});

}  // namespace ferry
