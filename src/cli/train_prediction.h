// `ferry train`'s prediction beside its measurement: the simulator's figures for the exact
// schedule the executor runs, from a cost model the run does not feed (a hardware profile and,
// optionally, op times measured by an earlier `ferry profile`), so that bench/fidelity.sh can
// compare predicted with measured per iteration, per peak and per transfer.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "cost/cost_model.h"
#include "graph/graph.h"
#include "runtime/transfer_engine.h"
#include "schedule/schedule.h"
#include "sim/simulator.h"

namespace ferry::cli {

// Copies the measured op times of the trace at `path` (written by `ferry profile` for the same
// model and shape) into `g`. Errors (InvalidArgument): a trace of another graph (op count, names
// or types differ), or one without a time for every op.
Status apply_op_times(Graph& g, const std::string& path);

// Simulates `schedule` on `sized` (the backend's sizes) with the given scratch and budget.
Result<SimResult> predict_iteration(const Graph& sized, const Schedule& schedule, const CostModel& cost,
                                    uint64_t budget_bytes, const std::vector<uint64_t>& op_scratch_bytes);

// Per transfer of one iteration (the n-th swap-out / swap-in of a tensor, in program order), the
// simulator's time (the sum of its legs, latency included, queueing excluded) and the measured
// median over `iterations` of the engine's start-to-end time.
nlohmann::json transfer_comparison(const Graph& g, const SimResult& predicted,
                                   const std::vector<std::vector<TransferRecord>>& iterations);

}  // namespace ferry::cli
