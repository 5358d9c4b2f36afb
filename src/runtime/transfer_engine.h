// TransferEngine: swap-outs and swap-ins running on two threads beside compute, in the shape of
// CUDA copy streams and events.
//
// Design
// - Two FIFO queues, each drained by its own worker thread: "out" (device -> tier) and "in"
//   (tier -> device), like a device-to-host and a host-to-device copy stream. Transfers in one
//   queue run one after another in issue order; the two queues run at the same time, and both run
//   concurrently with compute on the issuing thread.
// - A third queue, "host", runs host tasks (optimizer updates on tier copies, ZeRO-Offload's
//   placement: run_on_host) one after another on its own thread. A task waits for the transfers
//   of the slots it names; later swap-ins and discards of those slots wait for the task.
// - swap_out/swap_in return at once with a TransferTicket, the analogue of a recorded event;
//   wait(ticket) blocks until that transfer is complete (cudaEventSynchronize) and done(ticket)
//   polls (cudaEventQuery). A ticket is (sequence number, queue), and a queue completes in order,
//   so a ticket is done when its queue's completed count has reached it: no per-ticket state.
// - Slots: swap_out reserves the tensor's slot in the tier on the issuing thread (so the tier's
//   space follows program order, as the device arena does), swap_in finds it, discard() drops it.
//   A swap-in issued while a swap-out of the same tensor to the same tier is still queued or
//   running waits for it on the in-thread, and discard() waits for both, so no transfer can see a
//   half-written copy or a freed slot, whatever the caller's order.
// - Errors are sticky, like CUDA's: the first failure (an I/O error, a checksum mismatch, a tier
//   that is full) is kept; every later wait() and drain() returns it, queued transfers are
//   skipped, and new ones are refused (their tickets are null, and waiting on them returns the
//   error). A run that failed a swap must end, not continue on wrong bytes.
// - Every completed transfer leaves a TransferRecord (issue, start and end times, bytes) for the
//   timeline and to measure how much of the transfer time was hidden behind compute.
//
// Contract with the executor (who owns the device memory and orders compute against transfers)
// - Between swap_out(t, src, ...) and the completion of its ticket, nothing may write the bytes at
//   src, and they must stay allocated: wait on the ticket before an op overwrites the block (an
//   update op, an in-place output), before freeing or reusing it (kRelease, kFree).
// - Between swap_in(t, dst, ...) and the completion of its ticket, nothing may read or write the
//   bytes at dst, and they must stay allocated: wait on the ticket before the first op that reads t.
// - Reading src while a swap-out runs is allowed: the engine only reads it.
// - The backend's copy_to_host/copy_to_device must be callable from the engine's threads while
//   compute runs on another (true for the CPU backend; a CUDA backend gives each thread a stream).
// - The tiers and the backend outlive the engine.
// - One issuing thread at a time is expected, as one executor drives one engine; the methods are
//   nonetheless safe to call from several.
//
// Usage:
//   Result<std::unique_ptr<TransferEngine>> engine = TransferEngine::create(backend);
//   TransferTicket out = (*engine)->swap_out(t, ptr, bytes, host_tier);
//   ... compute that does not write ptr ...
//   FERRY_RETURN_IF_ERROR((*engine)->wait(out));        // now ptr may be released
//   TransferTicket in = (*engine)->swap_in(t, new_ptr, bytes, host_tier);
//   FERRY_RETURN_IF_ERROR((*engine)->wait(in));         // now t may be read
//   FERRY_RETURN_IF_ERROR((*engine)->discard(t, host_tier));  // t died: drop its copy
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/device_ptr.h"
#include "common/status.h"
#include "graph/graph.h"
#include "runtime/tiers.h"

namespace ferry {

// An issued transfer. The null ticket (id 0) stands for no transfer, or for one the engine refused
// because an earlier transfer failed; it is always done, and waiting on it returns the engine's
// status.
struct TransferTicket {
  uint64_t id = 0;  // (sequence << 2) | queue, sequence from 1
  explicit operator bool() const { return id != 0; }
  bool operator==(const TransferTicket&) const = default;
};

// One completed (or skipped) transfer. Times are microseconds since the engine's epoch.
struct TransferRecord {
  TransferTicket ticket;
  Direction direction = Direction::kSwapOut;
  TensorId tensor = kNoTensor;
  std::string tier;
  uint64_t bytes = 0;
  double issue_us = 0;  // swap_out/swap_in called
  double start_us = 0;  // the worker began moving bytes
  double end_us = 0;    // the transfer completed (or failed, or was skipped)
  bool ok = true;       // false: it failed, or it was skipped after an earlier failure
};

struct TransferEngineStats {
  uint64_t swap_outs = 0;  // completed successfully
  uint64_t swap_ins = 0;
  uint64_t bytes_out = 0;
  uint64_t bytes_in = 0;
  double out_busy_us = 0;  // time the out-thread spent moving bytes
  double in_busy_us = 0;
  uint64_t host_tasks = 0;  // completed successfully
  double host_busy_us = 0;  // time the host thread spent running tasks
};

struct TransferEngineOptions {
  // Time zero of the records, e.g. the executor's iteration clock; default: the engine's creation.
  std::chrono::steady_clock::time_point epoch{};
  bool keep_records = true;  // keep a TransferRecord of every transfer (take_records())
};

class TransferEngine {
 public:
  // Starts the two worker threads. Errors: kInternal when a thread cannot be started.
  static Result<std::unique_ptr<TransferEngine>> create(Backend& backend, TransferEngineOptions options = {});
  // Skips the transfers still queued, waits for the two running ones to finish, and joins the
  // threads. Safe with transfers in flight; the caller must not wait on the engine concurrently.
  ~TransferEngine();
  TransferEngine(const TransferEngine&) = delete;
  TransferEngine& operator=(const TransferEngine&) = delete;

  // Queues a copy of `bytes` bytes at `src` into a new slot for `tensor` in `tier`. The slot is
  // reserved now; when that fails (the tier is full, the tensor already has a copy there) the
  // engine takes the failure as its error and the ticket is null.
  TransferTicket swap_out(TensorId tensor, DevicePtr src, uint64_t bytes, SwapTier& tier);
  // Queues a copy of `tensor`'s copy in `tier` to `dst` (`bytes` must be the copy's size). The
  // copy stays in the tier. A tensor with no slot there, or another size, is an error as above.
  TransferTicket swap_in(TensorId tensor, DevicePtr dst, uint64_t bytes, SwapTier& tier);

  // A slot of a tier a host task reads or writes.
  struct SlotRef {
    SwapTier* tier = nullptr;
    TensorId tensor = kNoTensor;
  };
  // Queues `task` on the host thread. It starts when the transfers of every slot in `reads` and
  // `writes` issued so far are done (and the host tasks before it); swap-ins from and discards of
  // those slots issued later wait for it. A failed task is the engine's error, as a failed transfer.
  TransferTicket run_on_host(std::function<Status()> task, const std::vector<SlotRef>& reads,
                             const std::vector<SlotRef>& writes);

  // Blocks until `ticket`'s transfer is done; returns the engine's status (the first error of any
  // transfer, sticky).
  Status wait(TransferTicket ticket);
  // Whether `ticket`'s transfer is done (completed, failed or skipped).
  bool done(TransferTicket ticket) const;
  // Blocks until both queues are empty; returns the engine's status.
  Status drain();
  // Waits for the transfers of `tensor`'s slot in `tier`, then drops the copy. Ok when the tensor
  // has no slot there; otherwise returns the engine's status.
  Status discard(TensorId tensor, SwapTier& tier);
  // The first error of any transfer, or ok.
  Status status() const;

  // The records of the transfers completed since the last call, in completion order. Records
  // accumulate until taken: a long-running owner must take them (the executor does, every
  // iteration) or create the engine with keep_records = false.
  std::vector<TransferRecord> take_records();
  // Records held now (not yet taken).
  size_t records_held() const;
  TransferEngineStats stats() const;
  // Microseconds since the epoch, on the records' clock.
  double now_us() const;

 private:
  static constexpr int kOut = 0;
  static constexpr int kIn = 1;
  static constexpr int kHost = 2;
  static constexpr int kQueues = 3;
  struct Job {
    uint64_t sequence = 0;
    Direction direction = Direction::kSwapOut;
    SwapTier* tier = nullptr;
    SwapSlot slot;
    DevicePtr device{};
    std::vector<TransferTicket> depends_on;  // swap-in: the swap-out (or host task) that produces the copy
    std::function<Status()> task;             // host queue only
    double issue_us = 0;
  };
  struct Queue {
    std::deque<Job> jobs;     // jobs.front() is the one running, if any
    uint64_t issued = 0;      // sequence of the last job queued
    uint64_t completed = 0;   // sequence of the last job done
    std::thread thread;
  };
  // The last transfers of one slot, so later ones (and discard) can wait for them.
  struct SlotTickets {
    TransferTicket out;   // the last write of the slot: a swap-out or a host task
    TransferTicket in;
    TransferTicket host;  // the last host task reading it
  };

  TransferEngine(Backend& backend, TransferEngineOptions options);
  TransferTicket issue(int queue, Job job, TensorId tensor);
  void fail(Status st);  // records the first error; requires mu_
  bool done_locked(TransferTicket ticket) const;
  void worker(int queue);

  Backend& backend_;
  TransferEngineOptions options_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_[kQueues];
  mutable std::condition_variable done_cv_;
  Queue queues_[kQueues];
  std::map<std::pair<const SwapTier*, TensorId>, SlotTickets> slot_tickets_;
  Status error_;
  bool stopping_ = false;
  std::vector<TransferRecord> records_;
  TransferEngineStats stats_;
};

}  // namespace ferry
