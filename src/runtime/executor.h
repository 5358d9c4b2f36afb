// Executor: runs training iterations of a graph on a backend inside one device arena of a fixed
// capacity (the budget), executing a Schedule (schedule/schedule.h) lowered to a Program.
//
// Design
// - Measure first, then allocate (as ggml's graph allocator): the backend compiles the graph and
//   reports the bytes of every tensor in its own layout and the scratch of every op; the analysis
//   runs on those sizes and produces the sharing plan; the arena is then allocated once at the
//   budget. A budget below what the plan needs fails in create(), before any kernel runs, with a
//   message that says how much is needed.
// - The Schedule is lowered to a Program (schedule/program.h) and every block of the program gets a
//   static offset (schedule/placement.h): [persistent region: weights and optimizer state | transient
//   blocks placed by the analysis' sharing planner]. The executor interprets the program,
//   allocating each block at its offset through the same OffsetAllocator the simulator uses, so
//   the measured peak is a real count of the bytes the allocator handed out. For the keep plan
//   it equals the analysis prediction byte for byte; for any plan it equals the simulator's.
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
#include "schedule/placement.h"
#include "schedule/program.h"
#include "schedule/schedule.h"
#include "memory/offset_allocator.h"
#include "runtime/ssd_tier.h"
#include "runtime/tiers.h"
#include "runtime/transfer_engine.h"

namespace ferry {

struct ExecutorOptions {
  uint64_t budget_bytes = 0;  // device arena capacity; 0 = exactly what the plan needs
  uint64_t seed = 1;          // weight initialisation and dropout masks
  bool record_op_times = false;  // time every op of every iteration (op_times_us())
  // Swap tiers, made only when the schedule swaps to them. Capacities default to the bytes of
  // every tensor the program swaps there (an upper bound on the copies alive at once).
  std::string ssd_dir = "/tmp";   // the SSD tier's files go to a temporary directory under it
  uint64_t host_tier_bytes = 0;
  uint64_t ssd_tier_bytes = 0;
  bool checksum = false;          // verify every swapped byte on its way back
  SsdFault ssd_fault = {};        // fault injection, for tests
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
  // `schedule` defaults to the keep plan (policy none). Errors of an invalid schedule:
  // InvalidArgument naming the step and tensor.
  static Result<std::unique_ptr<Executor>> create(const Graph& graph, Backend& backend,
                                                  const ExecutorOptions& options, const Schedule* schedule = nullptr);
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
  const Program& program() const { return program_; }
  const CompiledGraph& compiled() const { return *compiled_; }
  uint64_t persistent_region_bytes() const { return placement_.persistent_region_bytes; }
  // Device bytes the plan needs: persistent region + placed transient blocks.
  uint64_t required_bytes() const { return placement_.arena_bytes; }
  uint64_t budget_bytes() const { return budget_bytes_; }
  // Highest arena address handed out so far (the bytes of device memory actually used).
  uint64_t peak_device_bytes() const { return allocator_.stats().peak_high_water_bytes; }
  const AllocatorStats allocator_stats() const { return allocator_.stats(); }
  // Transfer counters (zero when the schedule swaps nothing).
  TransferEngineStats transfer_stats() const { return engine_ ? engine_->stats() : TransferEngineStats{}; }
  // Seconds the compute thread waited for transfers in the last iteration.
  double last_stall_seconds() const { return stall_seconds_; }

  // Wall time of every op in the last iteration, in microseconds (record_op_times only).
  const std::vector<double>& op_times_us() const { return op_times_us_; }

  // Plain row-major copy of a persistent tensor (weights, optimizer state), for checks.
  Result<std::vector<std::byte>> read_persistent(TensorId t);

 private:
  Executor(Graph graph, Backend& backend, std::unique_ptr<CompiledGraph> compiled, Analysis analysis,
           Program program, ProgramPlacement placement, const ExecutorOptions& options, uint64_t budget);
  DevicePtr address_of(TensorId t) const;
  Status run_op(OpId op, const RunContext& ctx, DevicePtr scratch);

  Graph graph_;
  Backend& backend_;
  std::unique_ptr<CompiledGraph> compiled_;
  Analysis analysis_;
  ExecutorOptions options_;
  uint64_t budget_bytes_ = 0;
  Program program_;
  ProgramPlacement placement_;
  DevicePtr arena_{};
  OffsetAllocator allocator_;
  static constexpr uint64_t kNoBlock = ~uint64_t{0};
  std::vector<uint64_t> block_;  // per tensor: offset of its device block, or kNoBlock
  std::vector<DevicePtr> in_ptrs_, out_ptrs_;
  Status make_tiers();
  SwapTier& tier(Tier t) { return t == Tier::kHost ? *host_tier_ : *ssd_tier_; }
  Status wait_out(TensorId t);
  Status wait_in(TensorId t);
  Status drop_copies(TensorId t);
  std::unique_ptr<SwapTier> host_tier_, ssd_tier_;
  std::unique_ptr<TransferEngine> engine_;
  std::vector<TransferTicket> out_ticket_, in_ticket_;  // per tensor, pending transfers
  std::vector<uint8_t> has_copy_;                       // per tensor: bit 0 host, bit 1 ssd
  double stall_seconds_ = 0;
  int64_t optimizer_step_ = 0;
  std::vector<double> op_times_us_;
};

}  // namespace ferry
