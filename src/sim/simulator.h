// Discrete-event simulator: predicts the time and memory of one training iteration that runs a
// Schedule on a hardware profile, before anything runs.
//
// Model
// - The schedule is lowered to a Program (schedule/program.h), the instruction list the executor
//   runs too. Memory follows it exactly: device memory is an OffsetAllocator (src/memory) of
//   capacity = the budget, every block at the offset the program's placement gives it, and every
//   kAlloc/kFree/kRelease/scratch instruction applied in program order.
// - Streams (resources), each first-in first-out in program order, as CUDA streams are:
//     compute       ops and recomputes; it also issues every instruction (see below)
//     d2h, h2d      one copy stream per direction. When the profile says both directions cannot
//                   run at once they share one channel: a copy waits for the other direction too.
//     ssd_write, ssd_read
//                   queues with `ssd_queue_depth` requests in flight. A request pays its latency
//                   in parallel with the others in flight, but its data phase uses the SSD's
//                   bandwidth exclusively, so queue depth hides latency and never multiplies
//                   bandwidth. A tensor the schedule codes (Schedule::ssd_codecs) holds the data
//                   channel for the codec pipeline's time (CostModel::ssd_data_us) instead.
// - Events and dependencies: an op starts when the compute stream is free, every tensor it reads
//   is ready (its swap-in has landed) and no swap-out is still reading a block it writes. A
//   swap-out starts when its stream is free and the tensor is ready; device->SSD is a d2h copy
//   then an SSD write of the whole tensor. A swap-in starts when its stream is free and the copy
//   it reads is complete; SSD->device is an SSD read then an h2d copy. kRelease/kFree wait for a
//   swap-out in flight from the block they free. Waits of the compute stream are stalls.
// - Compute interference: where the profile says a link's copies slow the kernels (the CPU
//   backend, whose copies share its cores and memory bus), an op runs (1 + f) times slower for as
//   long as a copy of a link with interference f moves data beside it (factors add up). The copies
//   themselves keep their own time. Every copy that overlaps an op was issued before it (a copy
//   starts at or after its issue), so one pass still suffices.
// - Since every stream is FIFO in program order and the compute stream issues everything (as the
//   executor's issuing thread does), the event simulation is one pass over the program with a
//   busy-until time per resource: no event queue is needed, and the result is exact for this
//   model. Cost: O(instructions x log(free blocks)).
//
// Infeasible plans: the first allocation that fails makes the result infeasible (feasible =
// false, `failure` says where and by how much). The simulation is then repeated with unlimited
// memory, and every other field describes that run, so the user sees the peak the plan needs and
// the timeline it would have.
//
// Usage:
//   FERRY_ASSIGN_OR_RETURN(HardwareProfile hw, load_profile("a100-40gb-pcie4"));
//   CostModel cost(hw);
//   SimOptions opts;
//   opts.budget_bytes = hw.memory_capacity_bytes;
//   FERRY_ASSIGN_OR_RETURN(SimResult r, simulate(graph, Schedule::keep_all(graph.ops.size()), cost, opts));
//   fmt::print("{:.2f} ms, peak {}\n", r.iteration_us / 1e3, format_bytes(r.peak_device_bytes));
//   FERRY_RETURN_IF_ERROR(write_chrome_trace(r, "iteration.json"));       // timeline.h
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "cost/cost_model.h"
#include "graph/graph.h"
#include "schedule/program.h"
#include "schedule/schedule.h"
#include "memory/offset_allocator.h"

namespace ferry {

struct SimOptions {
  // Device capacity. 0 = the schedule's budget_bytes; when that is 0 too, unlimited.
  uint64_t budget_bytes = 0;
  std::vector<uint64_t> op_scratch_bytes;  // per op, or empty (as AnalysisOptions)
  bool allow_inplace = true;
  uint64_t alignment = OffsetAllocator::kDefaultAlignment;  // the runtime's device alignment
  int32_t ssd_queue_depth = 0;    // requests in flight per SSD queue; 0 = the profile's queue_depth
  bool record_timeline = true;    // fill SimResult::events and ::memory
  // Time only: no placement and no device memory (the memory fields stay 0, the budget is not
  // checked). Timing never depends on memory, so planners that compare times use it.
  bool timing_only = false;
  bool record_waits = false;      // fill SimResult::step_start_us and ::swap_in_wait_us (planners)
  size_t max_top_stalls = 10;     // how many of the longest stalls to keep
};

// kHost: the host lane on which optimizer updates run on the host CPU (kHostUpdate).
enum class SimStream : uint8_t { kCompute, kDeviceToHost, kHostToDevice, kSsdWrite, kSsdRead, kHost };
inline constexpr size_t kNumSimStreams = 6;
std::string_view to_string(SimStream s);

enum class EventKind : uint8_t { kOp, kRecompute, kSwapOut, kSwapIn, kSsdWrite, kSsdRead, kStall, kHostUpdate };
std::string_view to_string(EventKind k);

// One interval on one stream.
struct SimEvent {
  SimStream stream = SimStream::kCompute;
  EventKind kind = EventKind::kOp;
  std::string name;            // op name, or "<tensor> -> host" for copies, "wait <tensor>" for stalls
  OpId step = 0;
  OpId op = kNoOp;
  TensorId tensor = kNoTensor;
  uint64_t bytes = 0;
  double start_us = 0;
  double end_us = 0;
};

// Device memory right after an allocation or free.
struct MemorySample {
  double time_us = 0;
  uint64_t in_use_bytes = 0;      // the allocator's in-use bytes (blocks rounded to the alignment)
  uint64_t high_water_bytes = 0;  // end of the highest live block
};

enum class StallReason : uint8_t {
  kWaitSwapIn,   // an op or recompute waited for a tensor it reads to arrive
  kWaitSwapOut,  // a release/free, or an op writing the block, waited for a swap-out to finish
};
std::string_view to_string(StallReason r);

struct Stall {
  StallReason reason = StallReason::kWaitSwapIn;
  OpId step = 0;
  OpId op = kNoOp;             // the op that waited (kNoOp for a release/free)
  TensorId tensor = kNoTensor; // the tensor it waited for (the last one to become ready)
  std::string op_name;         // empty for a release/free
  std::string tensor_name;
  double start_us = 0;
  double wait_us = 0;
};

// Where and why an allocation failed.
struct SimFailure {
  OpId step = 0;
  size_t instruction = 0;      // index into the program
  TensorId tensor = kNoTensor; // the tensor being allocated, or kNoTensor for op scratch
  OpId op = kNoOp;             // the op whose scratch was being allocated
  double time_us = 0;          // when, on the timeline (timing never depends on the budget)
  std::string what;            // "tensor 'conv3.out'" or "scratch of op 'conv3'"
  AllocationFailure allocation;
  uint64_t required_bytes = 0; // device high-water mark of the same program with unlimited memory
};

struct SimResult {
  bool feasible = true;
  std::string reason;                 // empty when feasible; one line with the numbers otherwise
  std::optional<SimFailure> failure;  // set when !feasible

  std::string model;                  // Graph::info.model
  std::string device;                 // HardwareProfile::name
  std::string policy;                 // Schedule::policy
  uint64_t budget_bytes = 0;          // capacity used (0 = unlimited)

  double iteration_us = 0;      // end of the last event on any stream
  double compute_busy_us = 0;   // sum of op and recompute times
  double recompute_us = 0;      // the recompute part of compute_busy_us
  double host_update_us = 0;    // time the host lane spent on updates (kHostRun)
  size_t num_host_updates = 0;
  double stall_us = 0;          // compute-stream time spent waiting
  double compute_end_us = 0;    // end of the last instruction on the compute stream
  // Compute time added by copies running beside the ops (the links' compute interference; part
  // of compute_busy_us), and per op its run's time over its cost-model time (empty when no link
  // of the profile interferes; 1 for ops nothing overlapped; recomputes not included).
  double interference_us = 0;
  std::vector<double> op_stretch;
  std::array<double, kNumSimStreams> busy_us{};  // per stream: time occupied (data + latency)

  uint64_t persistent_bytes = 0;
  uint64_t peak_device_bytes = 0;   // allocator high-water mark (the device memory the plan needs)
  uint64_t peak_in_use_bytes = 0;   // max bytes allocated at once (rounded), <= peak_device_bytes
  uint64_t peak_host_bytes = 0;     // max bytes of host copies alive at once
  uint64_t peak_ssd_bytes = 0;      // max bytes of SSD copies alive at once

  uint64_t bytes_d2h = 0;           // including the d2h leg of SSD swap-outs
  uint64_t bytes_h2d = 0;           // including the h2d leg of SSD swap-ins
  uint64_t bytes_ssd_write = 0;
  uint64_t bytes_ssd_read = 0;
  size_t num_swap_outs = 0, num_swap_ins = 0, num_recomputes = 0;

  size_t num_stalls = 0;
  std::vector<Stall> top_stalls;     // the longest, longest first

  size_t num_instructions = 0;
  // record_waits only: when each step's op starts (not its recomputes), and per tensor the total
  // time ops and recomputes waited for its swap-ins to land, and the total time anything waited
  // for its swap-outs to finish (a release, or an op writing the block it leaves).
  std::vector<double> step_start_us;
  std::vector<double> swap_in_wait_us;
  std::vector<double> swap_out_wait_us;
  std::vector<SimEvent> events;      // by start time per stream; empty unless record_timeline
  std::vector<MemorySample> memory;  // in program order; empty unless record_timeline
};

// Simulates one iteration of `s` on `g`. Errors (InvalidArgument): an invalid graph or schedule
// (lower_schedule), options that do not match the graph. An infeasible budget is not an error:
// it is a result with feasible = false.
Result<SimResult> simulate(const Graph& g, const Schedule& s, const CostModel& cost, const SimOptions& opts = {});

// The same for an already lowered program (planners that simulate one program under several
// budgets or profiles lower once). `program` must come from lower_schedule(g, ...) with
// opts.op_scratch_bytes and opts.allow_inplace; opts.budget_bytes = 0 means program.budget_bytes.
Result<SimResult> simulate_program(const Graph& g, const Program& program, const CostModel& cost,
                                   const SimOptions& opts = {});

}  // namespace ferry
