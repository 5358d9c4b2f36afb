// Liveness extraction, the first half of analyze(): uses of every tensor, the buffers left after
// in-place merging, and live bytes per step. Internal to the analysis module.
#pragma once

#include "analysis/analysis.h"

namespace ferry {

// Fills everything in `out` that does not depend on the sharing plan: step_inputs, tensors,
// buffers, the byte totals, both live-bytes series, and the keep-all, free-at-last-use and
// lower-bound peaks. `g` must validate and have at least one op; `options` must be checked.
// Errors (InvalidArgument): byte counts (with alignment padding) summing past 2^64.
Status compute_liveness(const Graph& g, const AnalysisOptions& options, Analysis& out);

}  // namespace ferry
