// Test-only corruptions of a lowered, placed plan (ExecutorOptions::corruption), internal to the
// runtime. They model the bugs a planner, a lowering pass or a backend could have, so tests can
// show that the executor's own measurements and checks catch each one (Note [Measured memory] in
// runtime/executor.h). Each picks its victim deterministically: the first that qualifies.
#pragma once

#include "common/status.h"
#include "graph/graph.h"
#include "runtime/executor.h"
#include "schedule/placement.h"
#include "schedule/program.h"

namespace ferry {

// Program-level corruptions (kEarlyFree, kLateSwapIn, kDelayFree) rewrite `p`; the caller places
// it again. Returns the victim tensor, kNoTensor for corruptions that are not program-level.
// Errors: Internal when the plan has no victim that qualifies (e.g. kLateSwapIn without swaps).
Result<TensorId> corrupt_program(PlanCorruption c, const Graph& g, Program& p);

// kOverlapPlacement: moves a transient block onto another block live at the same time. Returns
// the moved block's tensor.
Result<TensorId> corrupt_placement(PlanCorruption c, const Graph& g, const Program& p, ProgramPlacement& placement);

// The victim of an executor-level corruption (kUndersizeTensor, kWriteAfterFree: the first
// transient output of a kernel, at least 1 KiB; kDropSwapIn: the first tensor swapped in).
Result<TensorId> corruption_victim(PlanCorruption c, const Graph& g, const Program& p);

}  // namespace ferry
