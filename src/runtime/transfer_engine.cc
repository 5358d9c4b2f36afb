// TransferEngine: two worker threads draining FIFO queues of swaps. See transfer_engine.h.
#include "runtime/transfer_engine.h"

#include <system_error>

#include <fmt/format.h>

#include "common/units.h"

namespace ferry {

Result<std::unique_ptr<TransferEngine>> TransferEngine::create(Backend& backend, TransferEngineOptions options) {
  std::unique_ptr<TransferEngine> engine(new TransferEngine(backend, std::move(options)));
  try {
    for (int q : {kOut, kIn, kHost}) engine->queues_[q].thread = std::thread([e = engine.get(), q] { e->worker(q); });
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
  const Queue& q = queues_[ticket.id & 3];
  const uint64_t sequence = ticket.id >> 2;
  FERRY_CHECK(sequence <= q.issued, "ticket {} was not issued by this engine", ticket.id);
  return sequence <= q.completed;
}

TransferTicket TransferEngine::issue(int queue, Job job, TensorId tensor) {
  Queue& q = queues_[queue];
  job.sequence = ++q.issued;
  job.issue_us = now_us();
  TransferTicket ticket{(job.sequence << 2) | static_cast<uint64_t>(queue)};
  if (queue != kHost) {
    SlotTickets& tickets = slot_tickets_[{job.tier, tensor}];
    (queue == kOut ? tickets.out : tickets.in) = ticket;
  }
  q.jobs.push_back(std::move(job));
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
    job.depends_on.push_back(it->second.out);
  return issue(kIn, job, tensor);
}

TransferTicket TransferEngine::run_on_host(std::function<Status()> task, const std::vector<SlotRef>& reads,
                                           const std::vector<SlotRef>& writes) {
  std::lock_guard lock(mu_);
  if (!error_.ok() || stopping_) return {};
  Job job;
  job.task = std::move(task);
  for (const auto* refs : {&reads, &writes})
    for (const SlotRef& r : *refs)
      if (auto it = slot_tickets_.find({r.tier, r.tensor}); it != slot_tickets_.end())
        for (TransferTicket t : {it->second.out, it->second.in})
          if (!done_locked(t)) job.depends_on.push_back(t);
  const TransferTicket ticket = issue(kHost, std::move(job), kNoTensor);
  for (const SlotRef& r : reads) slot_tickets_[{r.tier, r.tensor}].host = ticket;
  for (const SlotRef& r : writes) slot_tickets_[{r.tier, r.tensor}].out = ticket;
  return ticket;
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
  done_cv_.wait(lock, [&] {
    return queues_[kOut].jobs.empty() && queues_[kIn].jobs.empty() && queues_[kHost].jobs.empty();
  });
  return error_;
}

Status TransferEngine::discard(TensorId tensor, SwapTier& tier) {
  std::unique_lock lock(mu_);
  if (auto it = slot_tickets_.find({&tier, tensor}); it != slot_tickets_.end()) {
    const SlotTickets tickets = it->second;
    done_cv_.wait(lock,
                  [&] { return done_locked(tickets.out) && done_locked(tickets.in) && done_locked(tickets.host); });
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
    const Job& job = q.jobs.front();
    for (TransferTicket dep : job.depends_on)
      done_cv_.wait(lock, [&] { return stopping_ || done_locked(dep); });
    const bool skip = stopping_ || !error_.ok();
    const double start_us = now_us();
    Status st;
    if (!skip) {
      lock.unlock();
      if (queue == kHost) st = job.task();
      else st = job.direction == Direction::kSwapOut ? job.tier->write(job.slot, backend_, job.device)
                                                     : job.tier->read(job.slot, backend_, job.device);
      lock.lock();
    }
    const double end_us = now_us();
    if (!st.ok()) fail(queue == kHost ? st.with_context("host task") : st.with_context(std::string(to_string(job.direction))));
    const bool ok = !skip && st.ok();
    if (queue == kHost) {
      if (ok) {
        ++stats_.host_tasks;
        stats_.host_busy_us += end_us - start_us;
      }
      const uint64_t done_sequence = job.sequence;
      q.jobs.pop_front();
      q.completed = done_sequence;
      done_cv_.notify_all();
      continue;
    }
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
      records_.push_back(TransferRecord{.ticket = {(job.sequence << 2) | static_cast<uint64_t>(queue)},
                                        .direction = job.direction,
                                        .tensor = job.slot.tensor,
                                        .tier = job.tier->name(),
                                        .bytes = job.slot.bytes,
                                        .issue_us = job.issue_us,
                                        .start_us = start_us,
                                        .end_us = end_us,
                                        .ok = ok});
    const uint64_t done_sequence = job.sequence;
    q.jobs.pop_front();
    q.completed = done_sequence;
    done_cv_.notify_all();
  }
}

}  // namespace ferry
