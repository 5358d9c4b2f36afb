// The simulator's single pass over a Program (the model is described in simulator.h).
//
// Per tensor it keeps: its device block, when its device contents are ready, until when a
// swap-out is still reading its block, and when each tier's copy is complete. Per resource it
// keeps the time the resource becomes free. Each instruction moves these times forward; the
// compute stream's clock `now_` is the issuing thread's clock.

#include "sim/simulator.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <unordered_map>

#include <fmt/format.h>

#include "common/units.h"
#include "schedule/placement.h"

namespace ferry {

namespace {

constexpr uint64_t kUnlimitedBytes = uint64_t{1} << 63;  // graphs hold at most 2^62 bytes (Graph::validate)
constexpr int32_t kMaxQueueDepth = 1024;

// An SSD queue: `slots` requests in flight, one data channel.
struct SsdQueue {
  std::vector<double> slot_free_us;
  double channel_free_us = 0;
  LinkCost link;

  // Schedules one request that may start at `ready_us` and whose data phase takes `data_us`;
  // returns {start, end}.
  std::pair<double, double> submit(double ready_us, double data_us) {
    auto slot = std::min_element(slot_free_us.begin(), slot_free_us.end());
    const double start = std::max(ready_us, *slot);
    const double data_start = std::max(start + link.latency_us, channel_free_us);
    const double end = data_start + data_us;
    channel_free_us = end;
    *slot = end;
    return {start, end};
  }
  double last_end() const { return channel_free_us; }
};

// The data phases of one link's copies, when that link slows compute (LinkCost::interference).
// A link's copies run one after another, so the intervals are disjoint and in start order; the
// copies that overlap an op were all issued before it (a copy starts at or after its issue).
struct Interferer {
  double factor = 0;
  std::vector<std::pair<double, double>> busy;  // [start, end)
  size_t next = 0;                              // the earlier ones end before the compute clock
  void add(double start, double end) {
    if (factor > 0 && end > start) busy.emplace_back(start, end);
  }
};

// When an op of `work_us` that starts at `start` ends, while each interferer slows it by
// (1 + the sum of the factors of the links busy at each moment).
double stretched_end(std::array<Interferer, kNumLinks>& links, double start, double work_us) {
  double t = start, left = work_us;
  for (;;) {
    double slow = 0, change = INFINITY;
    for (Interferer& l : links) {
      while (l.next < l.busy.size() && l.busy[l.next].second <= t) ++l.next;
      if (l.next == l.busy.size()) continue;
      const auto [b, e] = l.busy[l.next];
      if (b <= t) {
        slow += l.factor;
        change = std::min(change, e);
      } else {
        change = std::min(change, b);
      }
    }
    const double needed = left * (1 + slow);
    if (t + needed <= change) return t + needed;
    left -= (change - t) / (1 + slow);
    t = change;
  }
}

struct TensorSim {
  uint64_t offset = 0;
  double ready_us = 0;          // device contents complete
  double swap_out_until_us = 0; // a swap-out reads the current block until then
  std::array<double, 2> copy_ready_us{0, 0};
  std::array<bool, 2> has_copy{false, false};
};

size_t tier_index(Tier t) { return t == Tier::kHost ? 0 : 1; }

class Simulation {
 public:
  Simulation(const Graph& g, const Program& p, const CostModel& cost, const SimOptions& o,
             const std::vector<double>& op_us, const std::vector<double>& host_us, const ProgramPlacement& placement,
             uint64_t capacity, int32_t queue_depth)
      : g_(g), p_(p), cost_(cost), o_(o), op_us_(op_us), host_us_(host_us), placement_(placement),
        alloc_(capacity, o.alignment, "device") {
    tensors_.resize(g.tensors.size());
    d2h_ = &stream_free_[0];
    h2d_ = cost.copy_directions_concurrent() ? &stream_free_[1] : &stream_free_[0];
    ssd_write_.slot_free_us.assign(static_cast<size_t>(queue_depth), 0.0);
    ssd_read_.slot_free_us.assign(static_cast<size_t>(queue_depth), 0.0);
    ssd_write_.link = cost.link(Link::kSsdWrite);
    ssd_read_.link = cost.link(Link::kSsdRead);
    interfere_ = cost.has_interference();
    for (size_t l = 0; l < kNumLinks; ++l) interferers_[l].factor = cost.link(static_cast<Link>(l)).interference;
    if (interfere_) r_.op_stretch.assign(g.ops.size(), 1.0);
    // A coded tensor's SSD legs take the codec pipeline's time (CostModel::ssd_data_us): the disk
    // channel is held for it, as the tier's channel is while it codes chunk by chunk.
    if (!p.ssd_codecs.empty()) {
      const std::vector<std::string> classes = tensor_classes(g);
      for (const TensorCodec& c : p.ssd_codecs) {
        const size_t t = static_cast<size_t>(c.tensor);
        const uint64_t bytes = g.tensors[t].bytes;
        coded_us_[t] = {cost.ssd_data_us(Direction::kSwapOut, bytes, c.codec, classes[t]),
                        cost.ssd_data_us(Direction::kSwapIn, bytes, c.codec, classes[t])};
      }
    }
    r_.budget_bytes = capacity == kUnlimitedBytes ? 0 : capacity;
    if (o.record_waits) {
      r_.step_start_us.assign(p.num_steps, 0.0);
      r_.swap_in_wait_us.assign(g.tensors.size(), 0.0);
      r_.swap_out_wait_us.assign(g.tensors.size(), 0.0);
    }
    // Offloaded persistent tensors begin the iteration in their tier, their copy complete.
    for (const Offload& o : p.offloaded) {
      const size_t tier = tier_index(o.tier);
      ts(o.tensor).has_copy[tier] = true;
      host_copy(tier, g.tensor(o.tensor).bytes, true);
    }
  }

  // Runs the program; returns the result, and sets `failure` at the first failed allocation.
  SimResult run(std::optional<SimFailure>& failure) {
    for (size_t k = 0; k < p_.instructions.size(); ++k) {
      if (!step(k, failure)) break;
    }
    finish();
    return std::move(r_);
  }

 private:
  TensorSim& ts(TensorId t) { return tensors_[static_cast<size_t>(t)]; }
  Interferer& interferer(Link l) { return interferers_[static_cast<size_t>(l)]; }
  bool timeline() const { return o_.record_timeline; }

  void event(SimStream s, EventKind k, std::string name, OpId step, OpId op, TensorId t, uint64_t bytes,
             double start, double end) {
    r_.busy_us[static_cast<size_t>(s)] += end - start;
    if (timeline()) r_.events.push_back({s, k, std::move(name), step, op, t, bytes, start, end});
  }

  void sample() {
    const AllocatorStats s = alloc_.stats();
    r_.peak_in_use_bytes = std::max(r_.peak_in_use_bytes, s.in_use_bytes);
    if (timeline()) r_.memory.push_back({now_, s.in_use_bytes, s.high_water_bytes});
  }

  void stall(StallReason reason, OpId step, OpId op, TensorId t, double until) {
    const double wait = until - now_;
    r_.stall_us += wait;
    ++r_.num_stalls;
    if (o_.record_waits)
      (reason == StallReason::kWaitSwapIn ? r_.swap_in_wait_us : r_.swap_out_wait_us)[static_cast<size_t>(t)] += wait;
    stalls_.push_back({reason, step, op, t, {}, {}, now_, wait});
    if (timeline())
      r_.events.push_back({SimStream::kCompute, EventKind::kStall,
                           fmt::format("wait {} {}", reason == StallReason::kWaitSwapIn ? "swap-in" : "swap-out",
                                       g_.tensor(t).name),
                           step, op, t, 0, now_, until});
    now_ = until;
  }

  void host_copy(size_t tier, uint64_t bytes, bool add) {
    uint64_t& live = tier == 0 ? host_live_ : ssd_live_;
    live = add ? live + bytes : live - bytes;
    uint64_t& peak = tier == 0 ? r_.peak_host_bytes : r_.peak_ssd_bytes;
    peak = std::max(peak, live);
  }
  void drop_copies(TensorId t) {
    TensorSim& s = ts(t);
    for (size_t tier = 0; tier < 2; ++tier)
      if (s.has_copy[tier]) {
        host_copy(tier, g_.tensor(t).bytes, false);
        s.has_copy[tier] = false;
      }
  }

  bool allocate(size_t k, const Instruction& in, std::optional<SimFailure>& failure, uint64_t& offset) {
    if (o_.timing_only) return true;
    // Every block goes where the static placement put it (schedule/placement.h), as in the executor.
    const uint64_t at = placement_.offset[k];
    if (!alloc_.allocate_at(at, in.bytes)) {
      const AllocatorStats st = alloc_.stats();
      AllocationFailure af;
      af.arena = "device";
      af.requested_bytes = in.bytes;
      af.rounded_bytes = alloc_.rounded_size(in.bytes);
      af.capacity_bytes = st.capacity_bytes;
      af.in_use_bytes = st.in_use_bytes;
      af.free_bytes = st.free_bytes;
      af.largest_free_bytes = st.largest_free_bytes;
      SimFailure f;
      f.step = in.step;
      f.instruction = k;
      f.tensor = in.kind == InstrKind::kAlloc ? in.tensor : kNoTensor;
      f.op = in.kind == InstrKind::kAllocScratch ? in.op : kNoOp;
      f.time_us = now_;
      f.what = f.tensor != kNoTensor ? fmt::format("tensor '{}'", g_.tensor(f.tensor).name)
                                     : fmt::format("scratch of op '{}'", g_.op(f.op).name);
      f.allocation = af;
      failure = std::move(f);
      return false;
    }
    offset = at;
    sample();
    return true;
  }

  bool step(size_t k, std::optional<SimFailure>& failure) {
    const Instruction& in = p_.instructions[k];
    switch (in.kind) {
      case InstrKind::kAlloc: {
        TensorSim& s = ts(in.tensor);
        if (in.inherit != kNoTensor) {
          const TensorSim& from = ts(in.inherit);
          s.offset = from.offset;
          s.swap_out_until_us = from.swap_out_until_us;
          drop_copies(in.inherit);
          return true;
        }
        if (!allocate(k, in, failure, s.offset)) return false;
        s.ready_us = now_;
        s.swap_out_until_us = 0;
        return true;
      }
      case InstrKind::kAllocScratch: {
        uint64_t offset = 0;
        if (!allocate(k, in, failure, offset)) return false;
        scratch_offset_ = offset;
        return true;
      }
      case InstrKind::kFreeScratch:
        if (o_.timing_only) return true;
        alloc_.free(scratch_offset_);
        sample();
        return true;
      case InstrKind::kFree:
      case InstrKind::kRelease: {
        TensorSim& s = ts(in.tensor);
        if (s.swap_out_until_us > now_) stall(StallReason::kWaitSwapOut, in.step, kNoOp, in.tensor, s.swap_out_until_us);
        if (!o_.timing_only) {
          alloc_.free(s.offset);
          sample();
        }
        if (in.kind == InstrKind::kFree) drop_copies(in.tensor);
        return true;
      }
      case InstrKind::kRun:
        run_op(in);
        return true;
      case InstrKind::kSwapOut:
        swap_out(in);
        return true;
      case InstrKind::kSwapIn:
        swap_in(in);
        return true;
      case InstrKind::kHostRun:
        host_run(in);
        return true;
      case InstrKind::kDrop:
        drop_copies(in.tensor);
        return true;
    }
    return true;
  }

  // An update on the host lane: after its issue, its operands' copies and the previous host update.
  // The copies it writes (its persistent outputs) are ready when it ends; one it only reads (AMP's
  // loss scale) stays ready, as in the executor, which writes back only the outputs.
  void host_run(const Instruction& in) {
    const Op& op = g_.op(in.op);
    double start = std::max({now_, host_free_, ts(in.tensor).copy_ready_us[tier_index(in.tier)]});
    for (const auto* list : {&op.inputs, &op.outputs})
      for (TensorId t : *list)
        if (g_.tensor(t).persistent())
          if (const std::optional<Tier> home = p_.home_tier(t))
            start = std::max(start, ts(t).copy_ready_us[tier_index(*home)]);
    const double end = start + host_us_[static_cast<size_t>(op.id)];
    host_free_ = end;
    for (TensorId t : op.outputs)
      if (g_.tensor(t).persistent())
        if (const std::optional<Tier> home = p_.home_tier(t)) ts(t).copy_ready_us[tier_index(*home)] = end;
    r_.host_update_us += end - start;
    ++r_.num_host_updates;
    event(SimStream::kHost, EventKind::kHostUpdate, op.name + " (host)", in.step, op.id, in.tensor, 0, start, end);
  }

  void run_op(const Instruction& in) {
    const Op& op = g_.op(in.op);
    double start = now_;
    TensorId waited_for = kNoTensor;
    StallReason reason = StallReason::kWaitSwapIn;
    for (TensorId t : op.inputs)
      if (ts(t).ready_us > start) {
        start = ts(t).ready_us;
        waited_for = t;
        reason = StallReason::kWaitSwapIn;
      }
    for (TensorId t : op.outputs)
      if (ts(t).swap_out_until_us > start) {
        start = ts(t).swap_out_until_us;
        waited_for = t;
        reason = StallReason::kWaitSwapOut;
      }
    if (waited_for != kNoTensor) stall(reason, in.step, op.id, waited_for, start);
    if (o_.record_waits && !in.recompute) r_.step_start_us[static_cast<size_t>(in.step)] = now_;
    const double work = op_us_[static_cast<size_t>(op.id)];
    const double end = interfere_ ? stretched_end(interferers_, now_, work) : now_ + work;
    const double dur = end - now_;
    if (interfere_) {
      r_.interference_us += dur - work;
      if (!in.recompute && work > 0) r_.op_stretch[static_cast<size_t>(op.id)] = dur / work;
    }
    for (TensorId t : op.outputs) {
      ts(t).ready_us = end;
      if (g_.tensor(t).persistent()) drop_copies(t);  // an update makes every copy stale
    }
    r_.compute_busy_us += dur;
    if (in.recompute) {
      r_.recompute_us += dur;
      ++r_.num_recomputes;
    }
    event(SimStream::kCompute, in.recompute ? EventKind::kRecompute : EventKind::kOp,
          in.recompute ? "recompute " + op.name : op.name, in.step, op.id, kNoTensor, 0, now_, end);
    now_ = end;
  }

  // The data phase of `in`'s SSD leg (direction 0: write, 1: read).
  double ssd_data_us(const Instruction& in, size_t direction) const {
    if (auto it = coded_us_.find(in.tensor); it != coded_us_.end()) return it->second[direction];
    return (direction == 0 ? ssd_write_ : ssd_read_).link.data_us(in.bytes);
  }

  // Whether `in`'s SSD copy moves in place, with no device<->host leg (raw, on a device_direct
  // profile: CostModel::transfer_us).
  bool in_place(const Instruction& in) const {
    return in.tier == Tier::kSsd && cost_.ssd_direct() && in.bytes >= kDirectIoMinBytes &&
           !coded_us_.contains(in.tensor);
  }

  void swap_out(const Instruction& in) {
    TensorSim& s = ts(in.tensor);
    const std::string& name = g_.tensor(in.tensor).name;
    ++r_.num_swap_outs;
    const size_t tier = tier_index(in.tier);
    const bool direct = in_place(in);
    // In place the SSD write starts when the tensor is ready; otherwise after the device->host leg.
    double copy_ready = std::max(now_, s.ready_us);
    if (!direct) {
      const double start = std::max(copy_ready, *d2h_);
      const double end = start + cost_.link(Link::kDeviceToHost).time_us(in.bytes);
      *d2h_ = end;
      interferer(Link::kDeviceToHost).add(start, end);
      s.swap_out_until_us = std::max(s.swap_out_until_us, end);
      r_.bytes_d2h += in.bytes;
      event(SimStream::kDeviceToHost, EventKind::kSwapOut, fmt::format("{} -> {}", name, to_string(in.tier)), in.step,
            kNoOp, in.tensor, in.bytes, start, end);
      copy_ready = end;
    }
    if (in.tier == Tier::kSsd) {
      const double w_data = ssd_data_us(in, 0);
      auto [w_start, w_end] = ssd_write_.submit(copy_ready, w_data);
      interferer(Link::kSsdWrite).add(w_end - w_data, w_end);
      if (direct) s.swap_out_until_us = std::max(s.swap_out_until_us, w_end);  // it reads the block itself
      r_.bytes_ssd_write += in.bytes;
      event(SimStream::kSsdWrite, EventKind::kSsdWrite, fmt::format("{} -> ssd{}", name, direct ? " (in place)" : ""),
            in.step, kNoOp, in.tensor, in.bytes, w_start, w_end);
      copy_ready = w_end;
    }
    s.copy_ready_us[tier] = copy_ready;
    s.has_copy[tier] = true;
    host_copy(tier, in.bytes, true);
  }

  void swap_in(const Instruction& in) {
    TensorSim& s = ts(in.tensor);
    const std::string& name = g_.tensor(in.tensor).name;
    const size_t tier = tier_index(in.tier);
    double ready = std::max(now_, s.copy_ready_us[tier]);
    if (in.tier == Tier::kSsd) {
      const double r_data = ssd_data_us(in, 1);
      auto [r_start, r_end] = ssd_read_.submit(ready, r_data);
      interferer(Link::kSsdRead).add(r_end - r_data, r_end);
      r_.bytes_ssd_read += in.bytes;
      event(SimStream::kSsdRead, EventKind::kSsdRead, fmt::format("ssd -> {}", name), in.step, kNoOp, in.tensor,
            in.bytes, r_start, r_end);
      ready = r_end;
    }
    ++r_.num_swap_ins;
    if (in_place(in)) {  // the read itself landed it on the device
      s.ready_us = ready;
      return;
    }
    const double start = std::max(ready, *h2d_);
    const double end = start + cost_.link(Link::kHostToDevice).time_us(in.bytes);
    *h2d_ = end;
    interferer(Link::kHostToDevice).add(start, end);
    s.ready_us = end;
    r_.bytes_h2d += in.bytes;
    event(SimStream::kHostToDevice, EventKind::kSwapIn, fmt::format("{} -> device", name), in.step, kNoOp, in.tensor,
          in.bytes, start, end);
  }

  void finish() {
    r_.compute_end_us = now_;
    r_.iteration_us =
        std::max({now_, stream_free_[0], stream_free_[1], ssd_write_.last_end(), ssd_read_.last_end(), host_free_});
    const AllocatorStats s = alloc_.stats();
    r_.peak_device_bytes = s.peak_high_water_bytes;
    r_.peak_in_use_bytes = std::max(r_.peak_in_use_bytes, s.peak_in_use_bytes);
    const size_t keep = std::min(o_.max_top_stalls, stalls_.size());
    std::partial_sort(stalls_.begin(), stalls_.begin() + static_cast<std::ptrdiff_t>(keep), stalls_.end(),
                      [](const Stall& a, const Stall& b) {
                        return a.wait_us != b.wait_us ? a.wait_us > b.wait_us : a.start_us < b.start_us;
                      });
    stalls_.resize(keep);
    for (Stall& st : stalls_) {
      if (st.op != kNoOp) st.op_name = g_.op(st.op).name;
      st.tensor_name = g_.tensor(st.tensor).name;
    }
    r_.top_stalls = std::move(stalls_);
    if (timeline())
      std::stable_sort(r_.events.begin(), r_.events.end(), [](const SimEvent& a, const SimEvent& b) {
        return a.stream != b.stream ? a.stream < b.stream : a.start_us < b.start_us;
      });
  }

  const Graph& g_;
  const Program& p_;
  const CostModel& cost_;
  const SimOptions& o_;
  const std::vector<double>& op_us_;
  const std::vector<double>& host_us_;  // per op: its time as a host update (ops that run there)
  std::unordered_map<TensorId, std::array<double, 2>> coded_us_;  // coded tensors' SSD data phases
  const ProgramPlacement& placement_;
  OffsetAllocator alloc_;
  std::vector<TensorSim> tensors_;
  double now_ = 0;
  std::array<double, 2> stream_free_{0, 0};  // d2h, h2d (one shared entry when not concurrent)
  double* d2h_ = nullptr;
  double* h2d_ = nullptr;
  SsdQueue ssd_write_, ssd_read_;
  bool interfere_ = false;                        // some link slows compute
  std::array<Interferer, kNumLinks> interferers_;  // by Link
  uint64_t scratch_offset_ = 0;
  double host_free_ = 0;  // the host lane (host updates)
  uint64_t host_live_ = 0, ssd_live_ = 0;
  std::vector<Stall> stalls_;
  SimResult r_;
};

}  // namespace

std::string_view to_string(SimStream s) {
  switch (s) {
    case SimStream::kCompute: return "compute";
    case SimStream::kDeviceToHost: return to_string(Link::kDeviceToHost);
    case SimStream::kHostToDevice: return to_string(Link::kHostToDevice);
    case SimStream::kSsdWrite: return to_string(Link::kSsdWrite);
    case SimStream::kSsdRead: return to_string(Link::kSsdRead);
    case SimStream::kHost: return "host";
  }
  return "?";
}

std::string_view to_string(EventKind k) {
  switch (k) {
    case EventKind::kOp: return "op";
    case EventKind::kRecompute: return "recompute";
    case EventKind::kSwapOut: return "swap_out";
    case EventKind::kSwapIn: return "swap_in";
    case EventKind::kSsdWrite: return "ssd_write";
    case EventKind::kSsdRead: return "ssd_read";
    case EventKind::kStall: return "stall";
    case EventKind::kHostUpdate: return "host_update";
  }
  return "?";
}

std::string_view to_string(StallReason r) {
  return r == StallReason::kWaitSwapIn ? "wait_swap_in" : "wait_swap_out";
}

Result<SimResult> simulate_program(const Graph& g, const Program& program, const CostModel& cost,
                                   const SimOptions& opts) {
  if (program.num_steps != g.ops.size())
    return Status::InvalidArgument(fmt::format("program has {} steps but graph '{}' has {} ops", program.num_steps,
                                               g.info.model, g.ops.size()));
  if (opts.alignment == 0 || !std::has_single_bit(opts.alignment))
    return Status::InvalidArgument(fmt::format("simulator alignment {} is not a power of two", opts.alignment));
  if (opts.ssd_queue_depth < 0 || opts.ssd_queue_depth > kMaxQueueDepth)
    return Status::InvalidArgument(
        fmt::format("ssd_queue_depth {} is not in [0, {}] (0 = the profile's)", opts.ssd_queue_depth, kMaxQueueDepth));
  const int32_t depth = opts.ssd_queue_depth > 0 ? opts.ssd_queue_depth : cost.profile().storage.queue_depth;

  std::vector<double> op_us = cost.op_times_us(g);
  for (const Op& op : g.ops) {
    const double t = op_us[static_cast<size_t>(op.id)];
    if (!std::isfinite(t) || t < 0)
      return Status::InvalidArgument(fmt::format("op '{}' (step {}) has time {} us; op times must be finite and >= 0",
                                                 op.name, op.id, t));
  }

  std::vector<double> host_us(g.ops.size(), 0.0);
  for (const Instruction& in : program.instructions) {
    if (in.kind != InstrKind::kHostRun) continue;
    const std::optional<double> t = cost.host_update_us(g, g.op(in.op));
    if (!t)
      return Status::InvalidArgument(fmt::format(
          "plan '{}' runs update '{}' on the host, but profile '{}' has no host optimizer rate "
          "(host.optimizer_bytes_per_s)",
          program.policy, g.op(in.op).name, cost.profile().name));
    host_us[static_cast<size_t>(in.op)] = *t;
  }

  uint64_t capacity = opts.budget_bytes != 0 ? opts.budget_bytes : program.budget_bytes;
  if (capacity == 0) capacity = kUnlimitedBytes;

  ProgramPlacement placement;
  if (opts.timing_only) {
    capacity = kUnlimitedBytes;
  } else {
    FERRY_ASSIGN_OR_RETURN(placement, place_program(g, program, opts.alignment));
  }
  std::optional<SimFailure> failure;
  SimResult r = Simulation(g, program, cost, opts, op_us, host_us, placement, capacity, depth).run(failure);
  if (failure) {
    // Rerun without the limit: the user sees the whole iteration and how much it needs.
    std::optional<SimFailure> unlimited_failure;
    r = Simulation(g, program, cost, opts, op_us, host_us, placement, kUnlimitedBytes, depth).run(unlimited_failure);
    r.budget_bytes = capacity;
    failure->required_bytes = r.peak_device_bytes;
    r.feasible = false;
    const AllocationFailure& a = failure->allocation;
    // Blocks sit at static offsets (schedule/placement.h), so an allocation fails only where its
    // block reaches past the budget.
    r.reason = fmt::format(
        "does not fit in {} ({} bytes): the plan needs {} ({} bytes) of device memory; the first block past the "
        "budget is at step {} ('{}') allocating {} of {} ({} in use then)",
        format_bytes(capacity), capacity, format_bytes(r.peak_device_bytes), r.peak_device_bytes, failure->step,
        g.op(failure->step).name, failure->what, format_bytes(a.requested_bytes), format_bytes(a.in_use_bytes));
    if (unlimited_failure) r.reason += " (it also fails without a limit: sizes overflow the address space)";
    r.failure = std::move(failure);
  }
  r.model = g.info.model;
  r.device = cost.profile().name;
  r.policy = program.policy;
  r.persistent_bytes = program.persistent_bytes;
  r.num_instructions = program.instructions.size();
  return r;
}

Result<SimResult> simulate(const Graph& g, const Schedule& s, const CostModel& cost, const SimOptions& opts) {
  ProgramOptions po;
  po.op_scratch_bytes = opts.op_scratch_bytes;
  po.allow_inplace = opts.allow_inplace;
  FERRY_ASSIGN_OR_RETURN(Program program, lower_schedule(g, s, po));
  return simulate_program(g, program, cost, opts);
}

}  // namespace ferry
