// analyze(): checks its inputs, extracts liveness (liveness.cc), plans memory sharing
// (sharing_plan.cc), and verifies the plan (check.cc) before handing it out: the executor places
// tensors at these offsets, so a wrong plan would corrupt memory rather than fail loudly.

#include <bit>
#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "analysis/analysis.h"
#include "common/units.h"
#include "analysis/liveness.h"
#include "memory/sharing_plan.h"

namespace ferry {

Result<Analysis> analyze(const Graph& g, const AnalysisOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (options.alignment == 0 || !std::has_single_bit(options.alignment))
    return Status::InvalidArgument(fmt::format("analysis alignment {} is not a power of two", options.alignment));
  if (!options.op_scratch_bytes.empty() && options.op_scratch_bytes.size() != g.ops.size())
    return Status::InvalidArgument(fmt::format("op_scratch_bytes has {} entries but graph '{}' has {} ops",
                                               options.op_scratch_bytes.size(), g.info.model, g.ops.size()));
  if (Status st = g.validate(); !st.ok()) return st.with_context(fmt::format("analyze graph '{}'", g.info.model));
  if (g.ops.empty()) return Status::InvalidArgument(fmt::format("graph '{}' has no ops to analyze", g.info.model));

  Analysis a;
  FERRY_RETURN_IF_ERROR(compute_liveness(g, options, a));
  a.plan = plan_memory_sharing(a.buffers, options.alignment);
  if (Status st = check_memory_plan(g, a.buffers, a.plan); !st.ok())
    return Status::Internal("memory-sharing plan is invalid: " + st.message());
  a.peak_bytes_shared = a.persistent_region_bytes + a.plan.arena_bytes;
  for (const Op& op : g.ops) {
    std::vector<TensorId> set = op.inputs;
    set.insert(set.end(), op.outputs.begin(), op.outputs.end());
    std::sort(set.begin(), set.end());
    set.erase(std::unique(set.begin(), set.end()), set.end());
    uint64_t bytes = options.op_scratch_bytes.empty() ? 0 : align_up(options.op_scratch_bytes[static_cast<size_t>(op.id)], options.alignment);
    for (TensorId t : set) bytes += align_up(g.tensor(t).bytes, options.alignment);
    if (op.type == OpType::kSgdUpdate || op.type == OpType::kAdamUpdate) {
      a.update_working_set_bytes = std::max(a.update_working_set_bytes, bytes);
    } else if (bytes > a.op_working_set_bytes) {
      a.op_working_set_bytes = bytes;
      a.op_working_set_op = op.id;
    }
  }
  a.analysis_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return a;
}

}  // namespace ferry
