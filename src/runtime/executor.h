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
//   static offset (schedule/placement.h). The executor interprets the program and puts every block
//   at its planned offset. The executor owns all memory; kernels get addresses and never allocate.
// - What the executor reports about memory is measured from what it does, never copied from the
//   plan (Note [Measured memory]). The plan's own figures are reported beside the measurements as
//   predictions, so a disagreement shows.
//
// Note [Measured memory]
//   - Live bytes: the executor keeps its own table of the blocks it holds (offset -> bytes, owner)
//     and updates it at every allocation and free it performs: materialised outputs, swap-ins,
//     recomputed tensors and temporaries, op scratch (oneDNN's scratchpads come from the arena:
//     scratchpad_mode::user), data inputs and the persistent region. Sizes are the backend's
//     (CompiledGraph::tensor_bytes / scratch_bytes), rounded to the device alignment. The
//     high-water mark is measured_peak_bytes(). The table refuses a block that overlaps a live one
//     or ends past the arena, naming both tensors: a corrupt plan stops with an error instead of
//     running on clobbered data.
//   - Extent: the arena is filled with a pattern when it is created; measured_extent_bytes() scans
//     it for the highest byte that no longer holds the pattern (the highest byte any kernel,
//     transfer or initialisation wrote). It cannot see a write of the pattern's own value, so it is
//     a lower bound, exact up to such a coincidence at the very top.
//   - The arena's end is enforced by the operating system: the backend maps guard pages after it
//     (Backend::allocate), so a kernel writing past the budget faults, and the fault handler
//     (common/fault_guard.h) names the op that was running.
//   - Residency: every op checks that the tensors it reads and writes are on the device; a read of
//     a tensor that was freed, released or not yet swapped in is an error naming the op, the
//     tensor and where it went.
//   - verify_memory adds the checks of runtime/memory_verifier.h (guard bytes around every block,
//     poisoned free memory, content checksums of every tensor between its write and its reads).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "analysis/analysis.h"
#include "backend/backend.h"
#include "common/status.h"
#include "data/data.h"
#include "graph/graph.h"
#include "runtime/memory_verifier.h"
#include "runtime/ssd_tier.h"
#include "runtime/tiers.h"
#include "runtime/transfer_engine.h"
#include "schedule/placement.h"
#include "schedule/program.h"
#include "schedule/schedule.h"
#include "schedule/tier_placement.h"

namespace ferry {

// Test-only corruptions of a lowered, placed plan, applied inside create() after the prediction
// is made, to show that the runtime's own measurements catch what the planner would not
// (tests/runtime/memory_truth_test.cc). Each picks its victim itself (the first that qualifies).
enum class PlanCorruption : uint8_t {
  kNone,
  kOverlapPlacement,  // a transient block is moved onto another block live at the same time
  kEarlyFree,         // a tensor's kFree moves to right after its first reader (before its last)
  kLateSwapIn,        // a swap-in (and its allocation) moves after the op that reads it
  kDelayFree,         // a kFree moves to the end of the iteration; the program is placed again,
                      // so it runs, holding more memory than the prediction says
  kUndersizeTensor,   // the executor believes a tensor is half its size (a backend misreport)
  kWriteAfterFree,    // a tensor's block is freed right after its allocation, its address kept
  kDropSwapIn,        // a swap-in's copy is never issued: its block is allocated but not filled
};

struct ExecutorOptions {
  uint64_t budget_bytes = 0;  // device arena capacity; 0 = exactly what the plan needs
  uint64_t seed = 1;          // weight initialisation and dropout masks
  bool record_op_times = false;  // time every op of every iteration (op_times_us())
  // Swap tiers, made only when the schedule swaps to them. Capacities default to the bytes of
  // every tensor the program swaps there (an upper bound on the copies alive at once).
  std::string ssd_dir = "/tmp";   // the SSD tier's files go to a temporary directory under it
  // host_tier_bytes caps the host tier (a host-memory budget): create() fails with kOutOfMemory
  // when the plan's copies, as schedule/tier_placement.h places them, need more. 0 = what they
  // need. ssd_tier_bytes likewise caps the SSD tier's file (0 = what the copies need).
  uint64_t host_tier_bytes = 0;
  uint64_t ssd_tier_bytes = 0;
  bool checksum = false;          // verify every swapped byte on its way back
  SsdFault ssd_fault = {};        // fault injection, for tests
  bool ssd_in_place = true;       // SsdTierOptions::in_place: direct I/O straight from the arena
  // The SSD tier codes each tensor's copies as the plan says (Schedule::ssd_codecs). With this,
  // it also measures every lossless codec on each class of tensor (graph.h tensor_classes), the
  // figures a plan chooses codecs from (ssd_codec_figures()).
  bool ssd_measure_codecs = false;
  // Lossy stashing (`--lossy bf16`, Gist-style): the SSD tier stores forward activations (f32
  // tensors of role activation) rounded to bfloat16 (SsdTierOptions::lossy_tensors). Training is
  // then no longer bitwise that of a run without a plan; verify_memory cannot be combined with it.
  bool ssd_lossy_activations = false;
  // How the host tier stores every copy (HostTierOptions::codec): kNone raw, or a lossless codec.
  // The user's choice (`--tier host --codec NAME`); plans predict host copies raw.
  CodecId host_codec = CodecId::kNone;
  // Guard bytes, poisoned free memory and content checksums, checked after every op
  // (runtime/memory_verifier.h). The arena grows by the guards; the budget still bounds the
  // measured live bytes.
  bool verify_memory = false;
  PlanCorruption corruption = PlanCorruption::kNone;  // tests only
};

// A run's state between iterations, held outside any executor: the plain (row-major) value of
// every persistent tensor (weights, optimizer state) and the optimizer's step count. Moving it
// from one executor to another, e.g. one running a new plan, changes no number: the layouts'
// conversions are exact copies.
struct TrainingState {
  std::vector<std::vector<std::byte>> persistent;  // per tensor id; empty for non-persistent tensors
  int64_t optimizer_step = 0;
};

struct IterationStats {
  int64_t iteration = 0;
  float loss = 0;
  double time_ms = 0;
};

class Executor {
 public:
  // Compiles `graph` on `backend`, analyses it with the backend's sizes, checks the plan and
  // allocates the arena. Errors: kOutOfMemory when the budget is below predicted_peak_bytes() (the
  // message gives the needed bytes), InvalidArgument for graphs the backend cannot run.
  // `schedule` defaults to the keep plan (policy none). Errors of an invalid schedule:
  // InvalidArgument naming the step and tensor.
  static Result<std::unique_ptr<Executor>> create(const Graph& graph, Backend& backend,
                                                  const ExecutorOptions& options, const Schedule* schedule = nullptr);
  // The same with `graph` already compiled on `backend` (compiled kernels do not depend on the
  // plan: a new plan reuses them, see take_compiled()).
  static Result<std::unique_ptr<Executor>> create(const Graph& graph, Backend& backend,
                                                  const ExecutorOptions& options, const Schedule* schedule,
                                                  std::unique_ptr<CompiledGraph> compiled);
  // Hands the compiled graph to a successor and destroys what this executor holds (transfers
  // drained, tiers and arena freed); the executor must not be used afterwards.
  std::unique_ptr<CompiledGraph> take_compiled();
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Deterministic initial weights from options.seed (He-uniform for convolutions, N(0, 0.02)-like
  // uniform for transformer matrices, 1/0 for norm scales/shifts, 0 for biases) and zero
  // optimizer state.
  Status initialize();
  // The state after the last iteration (drains the transfers first), and a state restored in
  // place of initialize(). restore_state errors: InvalidArgument when the state does not match
  // this graph's persistent tensors (count or bytes).
  Result<TrainingState> save_state();
  Status restore_state(const TrainingState& state);
  // Runs one training iteration (forward, backward, update) on the batch `data` yields for it.
  // Errors: the backend's, the transfer engine's, and Internal naming the op and tensor when the
  // runtime's own checks find the plan corrupt (Note [Measured memory]).
  Result<IterationStats> run_iteration(int64_t iteration, DataSource& data);

  // The graph with the backend's tensor sizes, and its analysis.
  const Graph& graph() const { return graph_; }
  const Analysis& analysis() const { return analysis_; }
  const Program& program() const { return program_; }
  const CompiledGraph& compiled() const { return *compiled_; }
  uint64_t budget_bytes() const { return budget_bytes_; }

  // Predictions: the plan's figures, computed from the program before anything runs.
  // Device bytes the plan needs (persistent region + placed transient blocks): what must fit.
  uint64_t predicted_peak_bytes() const { return predicted_peak_bytes_; }
  // The most bytes the program holds at once (blocks rounded to the device alignment).
  uint64_t predicted_live_peak_bytes() const { return predicted_live_peak_bytes_; }
  uint64_t persistent_region_bytes() const { return placement_.persistent_region_bytes; }

  // Measurements (Note [Measured memory]): high-water of the bytes the executor held, from its
  // own allocations and frees since create().
  uint64_t measured_peak_bytes() const { return peak_live_bytes_; }
  // The highest byte of the arena written so far, + 1 (scans the arena from the top: O(arena
  // bytes above the extent)). With verify_memory the arena holds guards too.
  Result<uint64_t> measured_extent_bytes() const;
  // The swap tiers' counters (zero when the schedule does not use the tier): peaks are measured
  // by the tiers' own space accounting.
  TierStats host_tier_stats() const { return host_tier_ ? host_tier_->stats() : TierStats{}; }
  TierStats ssd_tier_stats() const { return ssd_tier_ ? ssd_tier_->stats() : TierStats{}; }
  // The bytes that really crossed the disk (coded or raw), by the SSD tier's own counters.
  SsdIoStats ssd_io_stats() const {
    const auto* ssd = dynamic_cast<const SsdTier*>(ssd_tier_.get());
    return ssd ? ssd->io_stats() : SsdIoStats{};
  }
  // The bytes the host tier's memory really took and gave back (coded with host_codec, or raw).
  HostIoStats host_io_stats() const {
    const auto* host = dynamic_cast<const HostTier*>(host_tier_.get());
    return host ? host->io_stats() : HostIoStats{};
  }
  // With ssd_measure_codecs: the codecs measured per class of tensor so far.
  std::vector<CodecFigure> ssd_codec_figures() const {
    const auto* ssd = dynamic_cast<const SsdTier*>(ssd_tier_.get());
    return ssd ? ssd->codec_figures() : std::vector<CodecFigure>{};
  }

  // The plan's placement of the copies in each tier (predicted: TierPlacement::bytes is what the
  // tier must hold; the tiers' stats above are what they held).
  const TierPlacement& tier_placement(Tier t) const { return tier_placement_[t == Tier::kHost ? 0 : 1]; }

  // Transfer counters (zero when the schedule swaps nothing).
  TransferEngineStats transfer_stats() const { return engine_ ? engine_->stats() : TransferEngineStats{}; }
  // The transfers of the last iteration, times in microseconds since that iteration started.
  // Only the last iteration's are kept (a long run's memory stays flat).
  const std::vector<TransferRecord>& last_transfers() const { return last_transfers_; }
  // Records the transfer engine holds beyond last_transfers() (0 between iterations).
  size_t transfer_records_pending() const { return engine_ ? engine_->records_held() : 0; }
  // Seconds the compute thread waited for transfers in the last iteration.
  double last_stall_seconds() const { return stall_seconds_; }
  // Kernels the last iteration ran again to rematerialise a tensor (recomputes), counted as run.
  size_t last_recomputed_ops() const { return recomputed_ops_; }
  // Optimizer updates the last iteration ran on the host (Note [Host updates] in executor.cc).
  size_t last_host_updates() const { return host_updates_; }

  // Wall time of every op in the last iteration, in microseconds (record_op_times only).
  const std::vector<double>& op_times_us() const { return op_times_us_; }

  // Tests and benchmarks: the tier's transfers take `factor` times as long from now on
  // (SwapTier::set_slowdown); nothing when the plan does not use the tier.
  void set_tier_slowdown(Tier t, double factor) {
    if (SwapTier* where = t == Tier::kHost ? host_tier_.get() : ssd_tier_.get()) where->set_slowdown(factor);
  }

  // Plain row-major copy of a persistent tensor (weights, optimizer state), for checks; an
  // offloaded one is read from its tier.
  Result<std::vector<std::byte>> read_persistent(TensorId t);

 private:
  Executor(Graph graph, Backend& backend, std::unique_ptr<CompiledGraph> compiled, Analysis analysis,
           Program program, ProgramPlacement placement, const ExecutorOptions& options, uint64_t budget);
  Status setup_arena();
  Status make_tiers();

  // The block table (Note [Measured memory]).
  struct LiveBlock {
    uint64_t block_bytes = 0;    // with guards in verify mode
    uint64_t payload_bytes = 0;  // the tensor's or scratch's bytes, as the backend reports them
    TensorId tensor = kNoTensor; // kNoTensor for scratch
    OpId scratch_of = kNoOp;
  };
  uint64_t payload_bytes_of(TensorId t) const;
  std::string block_name(const LiveBlock& b) const;
  Status acquire(uint64_t block_offset, const LiveBlock& b, OpId step);
  Status release(uint64_t block_offset, OpId step);

  Status run_instruction(size_t k, const Instruction& in, const RunContext& ctx, const std::vector<TensorId>& inputs,
                         const std::vector<std::vector<std::byte>>& host_inputs);
  Status alloc_tensor(size_t k, const Instruction& in);
  Status load_input(TensorId t, const std::vector<TensorId>& inputs,
                    const std::vector<std::vector<std::byte>>& host_inputs);
  Status free_tensor(const Instruction& in);
  Status run_kernel(const Instruction& in, const RunContext& ctx);
  Status check_resident(const Op& op, OpId step) const;
  Status run_op(OpId op, const RunContext& ctx, DevicePtr scratch);
  Status host_update(const Instruction& in, const RunContext& ctx);  // Note [Host updates]
  DevicePtr address_of(TensorId t) const { return arena_ + block_[t]; }
  SwapTier& tier(Tier t) { return t == Tier::kHost ? *host_tier_ : *ssd_tier_; }
  Status wait_out(TensorId t);
  Status wait_in(TensorId t);
  Status drop_copies(TensorId t);
  Status end_iteration();
  // Writes an offloaded persistent tensor's initial value to its home tier.
  Status write_home_copy(TensorId t, std::span<const std::byte> plain);
  // Writes a persistent tensor's plain value where it lives between iterations (device or tier).
  Status store_persistent(TensorId t, std::span<const std::byte> plain);

  Graph graph_;
  Backend& backend_;
  std::unique_ptr<CompiledGraph> compiled_;
  Analysis analysis_;
  ExecutorOptions options_;
  uint64_t budget_bytes_ = 0;
  Program program_;
  ProgramPlacement placement_;
  uint64_t predicted_peak_bytes_ = 0;
  uint64_t predicted_live_peak_bytes_ = 0;
  uint64_t guard_bytes_ = 0;  // per side of every block (verify_memory)
  uint64_t arena_bytes_ = 0;
  DevicePtr arena_{};
  std::map<uint64_t, LiveBlock> live_;  // by block offset
  uint64_t live_bytes_ = 0, peak_live_bytes_ = 0;
  static constexpr uint64_t kNoBlock = ~uint64_t{0};
  std::vector<uint64_t> block_;       // per tensor: payload offset of its device block, or kNoBlock
  std::vector<uint64_t> block_of_;    // per tensor: offset of its block in live_ (kNoBlock: none)
  std::vector<int32_t> gone_at_;      // per tensor: step it last left the device (-1: never)
  TensorId victim_ = kNoTensor;          // of an executor-level corruption (tests)
  std::vector<std::string> op_labels_;   // "op 'conv1' (step 3)", for the fault guard
  uint64_t scratch_block_ = kNoBlock;
  std::vector<TensorId> inherited_;  // inputs whose block an output of the coming kRun took over
  std::unique_ptr<MemoryVerifier> verifier_;
  std::vector<DevicePtr> in_ptrs_, out_ptrs_;
  std::unique_ptr<SwapTier> host_tier_, ssd_tier_;
  TierPlacement tier_placement_[2];  // host, ssd
  std::unique_ptr<TransferEngine> engine_;
  std::vector<TransferTicket> out_ticket_, in_ticket_;  // per tensor, pending transfers
  std::vector<uint8_t> has_copy_;                       // per tensor: bit 0 host, bit 1 ssd
  std::vector<bool> resident_;  // per tensor: persistent and on the device between iterations
  std::vector<TransferRecord> last_transfers_;
  double iteration_start_us_ = 0;
  double stall_seconds_ = 0;
  size_t recomputed_ops_ = 0;
  size_t host_updates_ = 0;
  // Memory checks: (tensor, hash of the bytes a host update wrote to its copy), from the host
  // thread; applied to the verifier at the end of the iteration.
  std::mutex host_records_mu_;
  std::vector<std::pair<TensorId, uint64_t>> host_records_;
  int64_t optimizer_step_ = 0;
  std::vector<double> op_times_us_;
};

}  // namespace ferry
