// TransferEngine: two worker threads draining FIFO queues of swaps. See transfer_engine.h.
#include "runtime/transfer_engine.h"

#include <system_error>

#include <fmt/format.h>

#include "common/units.h"

namespace ferry {

Result<std::unique_ptr<TransferEngine>> TransferEngine::create(Backend& backend, TransferEngineOptions options) {
  std::unique_ptr<TransferEngine> engine(new TransferEngine(backend, std::move(options)));
  try {
    for (int q : {kOut, kIn}) engine->queues_[q].thread = std::thread([e = engine.get(), q] { e->worker(q); });
  } catch (const std::system_error& e) {
    return Status::Internal(fmt::format("transfer engine: cannot start a worker thread: {}", e.what()));
  }
  return engine;
}

TransferEngine::TransferEngine(Backend& backend, TransferEngineOptions options)
    : backend_(backend), options_(std::move(options)) {
  if (options_.epoch == std::chrono::steady_clock::time_point{}) options_.epoch = std::chrono::steady_clock::now();
}

TransferEngine::~TransferEngine() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  for (auto& cv : work_cv_) cv.notify_all();
  done_cv_.notify_all();  // an in-thread may wait for a swap-out that will now be skipped
  for (Queue& q : queues_)
    if (q.thread.joinable()) q.thread.join();
}

double TransferEngine::now_us() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - options_.epoch).count();
}

void TransferEngine::fail(Status st) {
  if (error_.ok() && !st.ok()) error_ = std::move(st);
}

bool TransferEngine::done_locked(TransferTicket ticket) const {
  if (!ticket) return true;
  const Queue& q = queues_[ticket.id & 1];
  const uint64_t sequence = ticket.id >> 1;
  FERRY_CHECK(sequence <= q.issued, "ticket {} was not issued by this engine", ticket.id);
  return sequence <= q.completed;
}

TransferTicket TransferEngine::issue(int queue, Job job, TensorId tensor) {
  Queue& q = queues_[queue];
  job.sequence = ++q.issued;
  job.issue_us = now_us();
  TransferTicket ticket{(job.sequence << 1) | static_cast<uint64_t>(queue)};
  SlotTickets& tickets = slot_tickets_[{job.tier, tensor}];
  (queue == kOut ? tickets.out : tickets.in) = ticket;
  q.jobs.push_back(job);
  work_cv_[queue].notify_one();
  return ticket;
}

TransferTicket TransferEngine::swap_out(TensorId tensor, DevicePtr src, uint64_t bytes, SwapTier& tier) {
  std::lock_guard lock(mu_);
  if (!error_.ok() || stopping_) return {};
  Result<SwapSlot> slot = tier.reserve(tensor, bytes);
  if (!slot.ok()) {
    fail(slot.status().with_context("swap-out"));
    return {};
  }
  Job job;
  job.direction = Direction::kSwapOut;
  job.tier = &tier;
  job.slot = *slot;
  job.device = src;
  return issue(kOut, job, tensor);
}

TransferTicket TransferEngine::swap_in(TensorId tensor, DevicePtr dst, uint64_t bytes, SwapTier& tier) {
  std::lock_guard lock(mu_);
  if (!error_.ok() || stopping_) return {};
  std::optional<SwapSlot> slot = tier.find(tensor);
  if (!slot) {
    fail(Status::InvalidArgument(
        fmt::format("swap-in of tensor {} from the {} tier: the tier holds no copy of it", tensor, tier.name())));
    return {};
  }
  if (slot->bytes != bytes) {
    fail(Status::InvalidArgument(fmt::format("swap-in of tensor {} from the {} tier: asked for {} bytes, the copy has {}",
                                             tensor, tier.name(), bytes, slot->bytes)));
    return {};
  }
  Job job;
  job.direction = Direction::kSwapIn;
  job.tier = &tier;
  job.slot = *slot;
  job.device = dst;
  if (auto it = slot_tickets_.find({&tier, tensor}); it != slot_tickets_.end() && !done_locked(it->second.out))
    job.depends_on = it->second.out;
  return issue(kIn, job, tensor);
}

Status TransferEngine::wait(TransferTicket ticket) {
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [&] { return done_locked(ticket); });
  return error_;
}

bool TransferEngine::done(TransferTicket ticket) const {
  std::lock_guard lock(mu_);
  return done_locked(ticket);
}

Status TransferEngine::drain() {
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [&] { return queues_[kOut].jobs.empty() && queues_[kIn].jobs.empty(); });
  return error_;
}

Status TransferEngine::discard(TensorId tensor, SwapTier& tier) {
  std::unique_lock lock(mu_);
  if (auto it = slot_tickets_.find({&tier, tensor}); it != slot_tickets_.end()) {
    const SlotTickets tickets = it->second;
    done_cv_.wait(lock, [&] { return done_locked(tickets.out) && done_locked(tickets.in); });
    slot_tickets_.erase({&tier, tensor});
  }
  if (std::optional<SwapSlot> slot = tier.find(tensor)) tier.release(*slot);
  return error_;
}

Status TransferEngine::status() const {
  std::lock_guard lock(mu_);
  return error_;
}

std::vector<TransferRecord> TransferEngine::take_records() {
  std::lock_guard lock(mu_);
  return std::exchange(records_, {});
}

size_t TransferEngine::records_held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_.size();
}

TransferEngineStats TransferEngine::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void TransferEngine::worker(int queue) {
  Queue& q = queues_[queue];
  std::unique_lock lock(mu_);
  for (;;) {
    work_cv_[queue].wait(lock, [&] { return stopping_ || !q.jobs.empty(); });
    if (q.jobs.empty()) return;  // stopping, nothing left
    const Job job = q.jobs.front();
    if (job.depends_on) done_cv_.wait(lock, [&] { return stopping_ || done_locked(job.depends_on); });
    const bool skip = stopping_ || !error_.ok();
    const double start_us = now_us();
    Status st;
    if (!skip) {
      lock.unlock();
      st = job.direction == Direction::kSwapOut ? job.tier->write(job.slot, backend_, job.device)
                                              : job.tier->read(job.slot, backend_, job.device);
      lock.lock();
    }
    const double end_us = now_us();
    if (!st.ok()) fail(st.with_context(std::string(to_string(job.direction))));
    const bool ok = !skip && st.ok();
    if (ok) {
      if (job.direction == Direction::kSwapOut) {
        ++stats_.swap_outs;
        stats_.bytes_out += job.slot.bytes;
        stats_.out_busy_us += end_us - start_us;
      } else {
        ++stats_.swap_ins;
        stats_.bytes_in += job.slot.bytes;
        stats_.in_busy_us += end_us - start_us;
      }
    }
    if (options_.keep_records)
      records_.push_back(TransferRecord{.ticket = {(job.sequence << 1) | static_cast<uint64_t>(queue)},
                                        .direction = job.direction,
                                        .tensor = job.slot.tensor,
                                        .tier = job.tier->name(),
                                        .bytes = job.slot.bytes,
                                        .issue_us = job.issue_us,
                                        .start_us = start_us,
                                        .end_us = end_us,
                                        .ok = ok});
    q.jobs.pop_front();
    q.completed = job.sequence;
    done_cv_.notify_all();
  }
}

}  // namespace ferry
