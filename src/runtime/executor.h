// Executor: runs training iterations of a graph on a backend inside one device arena of a fixed
// capacity (the budget), following the static memory-sharing plan of the analysis.
//
// Design
// - Measure first, then allocate (as ggml's graph allocator): the backend compiles the graph and
//   reports the bytes of every tensor in its own layout and the scratch of every op; the analysis
//   runs on those sizes and produces the sharing plan; the arena is then allocated once at the
//   budget. A budget below what the plan needs fails in create(), before any kernel runs, with a
//   message that says how much is needed.
// - Arena layout: [persistent region: weights and optimizer state, each at an aligned offset |
//   transient region: the sharing plan's buffers at their planned offsets]. Every placement goes
//   through the same OffsetAllocator the simulator uses (allocate_at at the planned offset when a
//   buffer comes alive, free after its last step), so the measured peak is a real count of the
//   bytes the allocator handed out, and it equals the analysis prediction byte for byte.
// - The executor owns all memory; kernels get addresses and never allocate.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "analysis/analysis.h"
#include "backend/backend.h"
#include "common/status.h"
#include "data/data.h"
#include "graph/graph.h"
#include "runtime/allocator.h"

namespace ferry {

struct ExecutorOptions {
  uint64_t budget_bytes = 0;  // device arena capacity; 0 = exactly what the plan needs
  uint64_t seed = 1;          // weight initialisation and dropout masks
};

struct IterationStats {
  int64_t iteration = 0;
  float loss = 0;
  double time_ms = 0;
};

class Executor {
 public:
  // Compiles `graph` on `backend`, analyses it with the backend's sizes, checks the plan and
  // allocates the arena. Errors: kOutOfMemory when the budget is below required_bytes() (the
  // message gives the needed bytes), InvalidArgument for graphs the backend cannot run.
  static Result<std::unique_ptr<Executor>> create(const Graph& graph, Backend& backend,
                                                  const ExecutorOptions& options);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Deterministic initial weights from options.seed (He-uniform for convolutions, N(0, 0.02)-like
  // uniform for transformer matrices, 1/0 for norm scales/shifts, 0 for biases) and zero
  // optimizer state.
  Status initialize();
  // Runs one training iteration (forward, backward, update) on the batch `data` yields for it.
  Result<IterationStats> run_iteration(int64_t iteration, DataSource& data);

  // The graph with the backend's tensor sizes, and its analysis.
  const Graph& graph() const { return graph_; }
  const Analysis& analysis() const { return analysis_; }
  uint64_t persistent_region_bytes() const { return persistent_region_bytes_; }
  // Bytes the plan needs: persistent region + sharing-plan arena.
  uint64_t required_bytes() const { return persistent_region_bytes_ + analysis_.plan.arena_bytes; }
  uint64_t budget_bytes() const { return budget_bytes_; }
  // Highest arena address handed out so far (the bytes of device memory actually used).
  uint64_t peak_device_bytes() const { return allocator_.stats().peak_high_water_bytes; }
  const AllocatorStats allocator_stats() const { return allocator_.stats(); }

  // Plain row-major copy of a persistent tensor (weights, optimizer state), for checks.
  Result<std::vector<std::byte>> read_persistent(TensorId t);

 private:
  Executor(Graph graph, Backend& backend, std::unique_ptr<CompiledGraph> compiled, Analysis analysis,
           const ExecutorOptions& options, uint64_t budget);
  DevicePtr address_of(TensorId t) const;

  Graph graph_;
  Backend& backend_;
  std::unique_ptr<CompiledGraph> compiled_;
  Analysis analysis_;
  ExecutorOptions options_;
  uint64_t budget_bytes_ = 0;
  uint64_t persistent_region_bytes_ = 0;
  DevicePtr arena_{};
  OffsetAllocator allocator_;
  std::vector<uint64_t> persistent_offset_;  // per tensor; only meaningful for persistent ones
  std::vector<std::vector<int32_t>> buffers_starting_;  // per step
  std::vector<std::vector<int32_t>> buffers_ending_;    // per step
  std::vector<int32_t> scratch_buffer_;                 // per op, -1 when none
  int64_t optimizer_step_ = 0;
};

}  // namespace ferry
