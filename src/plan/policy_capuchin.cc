// Capuchin (Peng et al., "Capuchin: Tensor-based GPU Memory Management for Deep Learning",
// ASPLOS 2020).
//
// Design
// - Capuchin profiles one iteration (here: the cost model's op times, measured ones first) and
//   then decides per tensor between swapping and recomputation, evicting a tensor right after
//   its last forward access and bringing it back just before its first backward access.
// - Candidates are the saved activations (and data inputs, which can only be swapped). The plan
//   is grown greedily: measure the plan's live bytes per step; while the peak exceeds the target,
//   take the largest undecided candidate that is off the device at the peak step if evicted
//   (released after its last forward use, back at its first backward use) and decide:
//     * swap when it is free: the swap-out, started when the tensor is produced, ends before the
//       release, and the swap-in, triggered time-driven at the latest step from which it lands
//       before the backward access, still leaves the tensor off the device at the peak;
//     * otherwise compare the memory saved per second of overhead (MSPS) of both: swap overhead
//       = the stall its copies would cause, recompute overhead = the op times of its recompute
//       chain (its producer plus every dropped ancestor it needs, as Capuchin's recompute
//       sources); take the higher MSPS (recompute when the swap is impossible, and vice versa).
// - Time-driven prefetch with feedback: after the plan fits, the simulator
//   (simulate_for_planning) finds swap-ins that still stall (copies queue behind each other on the
//   link), and moves their triggers one step earlier per round as long as the plan still fits,
//   which is Capuchin's runtime feedback on in-trigger times done at plan time.
// - The live-bytes measure counts bytes; the exact placement decides acceptance, and a plan that
//   fits in bytes but not once placed continues the greedy loop with the target lowered by the
//   excess.
// - Cost: a swap of a tensor that no recomputation reads only takes its bytes away between its
//   last forward use and its swap-in, so its measure is updated in O(steps) (subtract_away); any
//   other decision lowers the schedule, O(ops + actions).

#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "plan/policy_common.h"

namespace ferry {

namespace {

constexpr int kFeedbackRounds = 16;

enum class Choice : uint8_t { kUndecided, kSwap, kRecompute, kSkip };

class Capuchin {
 public:
  Capuchin(const PlanContext& ctx, const PlanFacts& facts) : ctx_(ctx), f_(facts), g_(facts.g()) {
    const size_t n = g_.ops.size();
    start_us_.assign(n + 1, 0);
    for (size_t i = 0; i < n; ++i) start_us_[i + 1] = start_us_[i] + f_.op_us[i];
    choice_.assign(g_.tensors.size(), Choice::kUndecided);
    pinned_.assign(g_.tensors.size(), false);
    swap_in_at_.assign(g_.tensors.size(), kNoOp);
    recompute_read_.assign(g_.tensors.size(), false);
  }

  Result<PlanAttempt> run() {
    if (ctx_.budget_bytes == 0) return finish_attempt(ctx_, f_, empty_schedule(ctx_, "capuchin"));
    uint64_t target = ctx_.budget_bytes;
    FERRY_ASSIGN_OR_RETURN(PlanMeasure m, live_measure());
    for (;;) {
      if (m.live_peak_bytes <= target) {
        FERRY_ASSIGN_OR_RETURN(PlanAttempt a, finish_attempt(ctx_, f_, intent()));
        if (a.fits) {
          FERRY_RETURN_IF_ERROR(feedback(target, a));
          a.notes = summary();
          return a;
        }
        // Fragmentation: the live bytes must come down by the excess; go on choosing.
        const uint64_t excess = std::max(a.measure.device_bytes - ctx_.budget_bytes, f_.alignment);
        if (excess >= m.live_peak_bytes) return a;
        target = std::min(target, m.live_peak_bytes - excess);
        continue;
      }
      const TensorId t = pick(m.peak_step);
      if (t == kNoTensor) {
        // Prefetches that land at the peak start later instead (memory over time, as Capuchin
        // trades them when memory is short).
        FERRY_ASSIGN_OR_RETURN(bool delayed, delay_prefetch(m));
        if (delayed) continue;
        // Nothing left that frees memory at the peak: report what the plan needs.
        FERRY_ASSIGN_OR_RETURN(PlanAttempt a, finish_attempt(ctx_, f_, intent()));
        a.notes = fmt::format("{}; nothing else can leave the device at step {}", summary(), m.peak_step);
        return a;
      }
      FERRY_ASSIGN_OR_RETURN(m, decide(t, m));
    }
  }

 private:
  size_t idx(TensorId t) const { return static_cast<size_t>(t); }
  OpId back_access(TensorId t) const { return f_.info(t).first_backward_use; }
  bool candidate(TensorId t) const {
    return f_.saved(t) && (f_.recomputable(t) || g_.tensor(t).role == TensorRole::kInput);
  }

  std::string summary() const {
    const auto swaps = std::count(choice_.begin(), choice_.end(), Choice::kSwap);
    const auto recomputes = std::count(choice_.begin(), choice_.end(), Choice::kRecompute);
    return fmt::format("{} tensors swapped, {} recomputed", swaps, recomputes);
  }

  // The largest undecided candidate that would be off the device at `peak` (ties: the longer
  // idle time, then the lower id).
  TensorId pick(OpId peak) const {
    TensorId best = kNoTensor;
    for (const Tensor& t : g_.tensors) {
      if (choice_[idx(t.id)] != Choice::kUndecided || pinned_[idx(t.id)] || !candidate(t.id)) continue;
      if (!(f_.forward_end(t.id) < peak && peak < back_access(t.id))) continue;
      if (best == kNoTensor || t.bytes > g_.tensor(best).bytes ||
          (t.bytes == g_.tensor(best).bytes && idle_us(t.id) > idle_us(best)))
        best = t.id;
    }
    return best;
  }

  double idle_us(TensorId t) const {
    return start_us_[static_cast<size_t>(back_access(t))] - start_us_[static_cast<size_t>(f_.forward_end(t)) + 1];
  }

  // Latest step in (forward_end, back_access) from which a swap-in of `in_us` lands in time;
  // the earliest such step when none does.
  OpId swap_in_trigger(TensorId t, double in_us) const {
    const OpId back = back_access(t);
    for (OpId s = back - 1; s > f_.forward_end(t); --s)
      if (start_us_[static_cast<size_t>(back)] - start_us_[static_cast<size_t>(s)] >= in_us) return s;
    return f_.forward_end(t) + 1;
  }

  // What a recompute of t reads from the device: the saved tensors reached through its producer's
  // inputs and, transitively, through forward-only inputs (which are recomputed along). Ops on
  // the way are returned in `ops`.
  std::vector<TensorId> recompute_sources(TensorId t, std::vector<OpId>* ops = nullptr) const {
    std::vector<bool> seen(g_.ops.size(), false);
    std::vector<TensorId> work{t}, sources;
    while (!work.empty()) {
      const TensorId u = work.back();
      work.pop_back();
      const OpId p = f_.producer[idx(u)];
      if (seen[static_cast<size_t>(p)]) continue;
      seen[static_cast<size_t>(p)] = true;
      if (ops != nullptr) ops->push_back(p);
      for (TensorId in : g_.op(p).inputs) {
        if (g_.tensor(in).persistent() || g_.tensor(in).role == TensorRole::kInput) continue;
        if (f_.recomputable(in) && f_.info(in).first_backward_use == kNoOp)
          work.push_back(in);
        else
          sources.push_back(in);
      }
    }
    return sources;
  }

  // Recomputation reads only resident sources (no chains through evicted tensors): a chain of
  // recomputes all materialises in one step, which the step-interval placement charges in full.
  bool can_recompute(TensorId t) const {
    if (!f_.recomputable(t)) return false;
    for (TensorId u : recompute_sources(t))
      if (choice_[idx(u)] == Choice::kSwap || choice_[idx(u)] == Choice::kRecompute) return false;
    return true;
  }

  double recompute_us(TensorId t) const {
    std::vector<OpId> ops;
    recompute_sources(t, &ops);
    double us = 0;
    for (OpId p : ops) us += f_.op_us[static_cast<size_t>(p)];
    return us;
  }

  // When no candidate frees the peak: swap-ins that land at or before a step at the peak start
  // later instead, right after the last such step in their window (the largest tensor first;
  // Capuchin trades prefetch earliness for memory the same way). Kept if the peak, or else the
  // number of steps at the peak, goes down; updates m.
  Result<bool> delay_prefetch(PlanMeasure& m) {
    auto at_peak = [](const PlanMeasure& x) {
      return std::count(x.live_bytes.begin(), x.live_bytes.end(), x.live_peak_bytes);
    };
    std::vector<TensorId> movable;
    for (const Tensor& t : g_.tensors)
      if (choice_[idx(t.id)] == Choice::kSwap) movable.push_back(t.id);
    std::stable_sort(movable.begin(), movable.end(),
                     [&](TensorId a, TensorId b) { return g_.tensor(a).bytes > g_.tensor(b).bytes; });
    for (TensorId t : movable) {
      const OpId was = swap_in_at_[idx(t)];
      OpId last_peak = kNoOp;
      for (OpId j = was; j < back_access(t); ++j)
        if (m.live_bytes[static_cast<size_t>(j)] >= m.live_peak_bytes) last_peak = j;
      if (last_peak == kNoOp) continue;
      swap_in_at_[idx(t)] = last_peak + 1;
      FERRY_ASSIGN_OR_RETURN(PlanMeasure after, live_measure());
      if (after.live_peak_bytes < m.live_peak_bytes ||
          (after.live_peak_bytes == m.live_peak_bytes && at_peak(after) < at_peak(m))) {
        m = std::move(after);
        return true;
      }
      swap_in_at_[idx(t)] = was;
    }
    return false;
  }

  // Capuchin's choice for t, then applied and kept only if the peak does not grow (else the
  // other choice, else none). Returns the measure of the plan with the kept choice.
  Result<PlanMeasure> decide(TensorId t, const PlanMeasure& before) {
    const uint64_t bytes = g_.tensor(t).bytes;
    const double out_us = f_.transfer_us(ctx_.cost, Direction::kSwapOut, ctx_.tier, t);
    const double in_us = f_.transfer_us(ctx_.cost, Direction::kSwapIn, ctx_.tier, t);
    const OpId trigger = swap_in_trigger(t, in_us);
    const OpId producer = f_.producer[idx(t)];
    const double out_end = (producer == kNoOp ? 0 : start_us_[static_cast<size_t>(producer) + 1]) + out_us;
    const double release_stall = std::max(0.0, out_end - start_us_[static_cast<size_t>(f_.forward_end(t)) + 1]);
    const double in_stall = std::max(0.0, in_us - (start_us_[static_cast<size_t>(back_access(t))] -
                                                   start_us_[static_cast<size_t>(trigger)]));
    const bool swap_ok = before.peak_step < trigger;  // off the device at the peak
    const double swap_overhead = release_stall + in_stall;
    std::vector<Choice> order;
    if (swap_ok && swap_overhead == 0) {
      order = {Choice::kSwap};
      if (can_recompute(t)) order.push_back(Choice::kRecompute);
    } else if (can_recompute(t)) {
      const double msps_rec = static_cast<double>(bytes) / std::max(recompute_us(t), 1e-9);
      const double msps_swap = swap_ok ? static_cast<double>(bytes) / swap_overhead : 0;
      order = msps_rec >= msps_swap ? std::vector<Choice>{Choice::kRecompute} : std::vector<Choice>{Choice::kSwap};
      if (swap_ok) order.push_back(order[0] == Choice::kSwap ? Choice::kRecompute : Choice::kSwap);
    } else if (swap_ok) {
      order = {Choice::kSwap};
    }
    for (Choice c : order) {
      choice_[idx(t)] = c;
      swap_in_at_[idx(t)] = c == Choice::kSwap ? trigger : kNoOp;
      PlanMeasure after;
      if (c == Choice::kSwap && f_.single_pass && !recompute_read_[idx(t)]) {
        // Nothing touches t between its last forward use and the swap-in (no recompute does): it
        // only leaves over that interval, so the measure is updated without lowering, exactly.
        after = before;
        subtract_away(f_, after, t, f_.forward_end(t) + 1, trigger - 1);
      } else {
        FERRY_ASSIGN_OR_RETURN(after, live_measure());
      }
      if (after.live_peak_bytes <= before.live_peak_bytes) {
        if (c == Choice::kRecompute) {
          for (TensorId u : recompute_sources(t)) pinned_[idx(u)] = true;
          mark_recompute_reads();
        }
        return after;
      }
    }
    choice_[idx(t)] = Choice::kSkip;
    swap_in_at_[idx(t)] = kNoOp;
    return before;
  }

  // recompute_read_: the tensors that a recomputation in the current plan reads or writes (inputs
  // and outputs of the producers of every dropped tensor, as intent() drops them), which are on
  // the device while it runs.
  void mark_recompute_reads() {
    const std::vector<bool> dropped = dropped_tensors();
    for (const Tensor& t : g_.tensors)
      if (dropped[idx(t.id)] && f_.producer[idx(t.id)] != kNoOp) {
        const Op& p = g_.op(f_.producer[idx(t.id)]);
        for (const auto* list : {&p.inputs, &p.outputs})
          for (TensorId u : *list) recompute_read_[idx(u)] = true;
      }
  }

  // Live bytes per step of the current choices (no placement: cheap).
  Result<PlanMeasure> live_measure() const {
    FERRY_ASSIGN_OR_RETURN(Schedule s, complete_schedule(f_, intent()));
    return measure_schedule(f_, s, false);
  }

  // The tensors the plan releases without a copy: those chosen for recomputation and the
  // forward-only ancestors a recompute reads (close_recompute_sources).
  std::vector<bool> dropped_tensors() const {
    std::vector<bool> dropped(g_.tensors.size(), false);
    for (const Tensor& t : g_.tensors) dropped[idx(t.id)] = choice_[idx(t.id)] == Choice::kRecompute;
    close_recompute_sources(f_, dropped);
    return dropped;
  }

  Schedule intent() const {
    Schedule s = empty_schedule(ctx_, "capuchin");
    for (const Tensor& t : g_.tensors) {
      const size_t v = idx(t.id);
      if (choice_[v] != Choice::kSwap) continue;
      const OpId p = f_.producer[v];
      if (p == kNoOp)
        add_before(s, 0, swap_out_action(t.id, ctx_.tier));
      else
        add_after(s, p, swap_out_action(t.id, ctx_.tier));
      add_before(s, swap_in_at_[v], swap_in_action(t.id, ctx_.tier));
    }
    const std::vector<bool> dropped = dropped_tensors();
    // Releases after the swap-outs of the same step, so that copies issued there overlap.
    for (const Tensor& t : g_.tensors)
      if (dropped[idx(t.id)] || choice_[idx(t.id)] == Choice::kSwap)
        add_after(s, f_.forward_end(t.id), release_action(t.id));
    return s;
  }

  // Moves the triggers of swap-ins that stall one step earlier per round while the plan fits.
  Status feedback(uint64_t target, PlanAttempt& accepted) {
    for (int round = 0; round < kFeedbackRounds; ++round) {
      Result<SimResult> sim = simulate_for_planning(ctx_, f_, accepted.schedule);
      if (!sim.ok()) return Status::Internal(sim.status().message());  // its own schedule: a bug
      const SimResult& e = *sim;
      std::vector<OpId> before = swap_in_at_;
      bool moved = false;
      for (const Tensor& t : g_.tensors) {
        const size_t v = idx(t.id);
        if (choice_[v] != Choice::kSwap || e.swap_in_wait_us[v] <= 0) continue;
        if (swap_in_at_[v] - 1 > f_.forward_end(t.id)) {
          --swap_in_at_[v];
          moved = true;
        }
      }
      if (!moved) return Status::Ok();
      FERRY_ASSIGN_OR_RETURN(PlanMeasure m, live_measure());
      if (m.live_peak_bytes <= target) {
        FERRY_ASSIGN_OR_RETURN(PlanAttempt a, finish_attempt(ctx_, f_, intent()));
        if (a.fits) {
          accepted = std::move(a);
          continue;
        }
      }
      swap_in_at_ = std::move(before);
      return Status::Ok();
    }
    return Status::Ok();
  }

  const PlanContext& ctx_;
  const PlanFacts& f_;
  const Graph& g_;
  std::vector<double> start_us_;   // compute-only start time of each step (and the end, at n)
  std::vector<Choice> choice_;
  std::vector<bool> pinned_;       // kept on the device: a recomputed tensor reads it
  std::vector<OpId> swap_in_at_;
  std::vector<bool> recompute_read_;  // mark_recompute_reads()
};

}  // namespace

Result<PlanAttempt> plan_capuchin(const PlanContext& ctx, const PlanFacts& facts) {
  return Capuchin(ctx, facts).run();
}

}  // namespace ferry
