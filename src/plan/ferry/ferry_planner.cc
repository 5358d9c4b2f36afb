// The Ferry planner (docs/planner.md).
//
// Design
// - Candidates are gaps: intervals between two consecutive accesses of a tensor (its production
//   or a read) in which no op touches it, so it could leave the device. Transient tensors
//   (activations, gradients, workspaces, data inputs) leave a gap by swapping (out once, after
//   production; in before the gap's end, as late as the link allows) or by recomputation
//   (released after the gap's start, rematerialised before its end with its producer and any
//   forward-only ancestors that died meanwhile). A persistent tensor (weight, optimizer state)
//   can be offloaded: it then lives in the tier between iterations (its cyclic gap from the last
//   access of one iteration to the first of the next), is swapped in before its accesses and out
//   after an update, and may also leave its inner gaps.
// - Memory is a profile of live bytes per step (StepTree, from the keep plan's exact program);
//   every decision subtracts the bytes over the steps where the tensor is really away: a swap's
//   copies take time, so a swapped tensor leaves only after its swap-out is done and is back from
//   the start of its swap-in.
// - Time is modelled where it decides: compute time per step (the cost model; measured op times
//   first) and two fluid links (LinkBook), one per copy direction (one shared when the profile says
//   the directions cannot run at once), in which every swap books its transfer. A swap that its
//   window cannot hold is not offered; everything the links hold is assumed hidden.
// - Greedy: while the profile's peak exceeds the target, take the peak step and choose, among the
//   candidates away at that step, the option with the lowest estimated cost per byte: recompute
//   time per byte, or `link weight` x link time per byte for a swap (CandidateIndex finds them in
//   O(log n); keys are lower bounds refreshed lazily). Then the plan is built, completed
//   (complete_schedule makes chains legal) and measured exactly as placed; when placement or the
//   estimates leave it over budget, the profile is replaced by the measured one and the greedy
//   continues with the target lowered by the excess.
// - Several link weights are tried (FerryTuning); the simulator times each fitting plan, stalled
//   prefetches are moved earlier where memory allows, and the fastest plan wins.
// - Cost: O((gaps + steps) log steps) per greedy pass plus a few lowerings and simulations.

#include "plan/ferry/ferry_planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <tuple>

#include <fmt/format.h>

#include "common/units.h"
#include "plan/ferry/bound.h"
#include "plan/ferry/candidate_index.h"
#include "plan/ferry/gaps.h"
#include "plan/ferry/host_updates.h"
#include "plan/ferry/link_book.h"
#include "plan/ferry/step_tree.h"

namespace ferry {

namespace planner {
namespace {

enum class Move : uint8_t { kKeep, kSwap, kRecompute };

// One way to take a gap away, evaluated against the current bookings.
struct Option {
  Move move = Move::kKeep;
  bool ok = false;
  int64_t lo1 = 0, hi1 = -1, lo2 = 0, hi2 = -1;  // steps away (a cyclic gap has two ranges)
  double cost_us = 0;
  double score = std::numeric_limits<double>::infinity();
  OpId release_after = kNoOp, fetch_before = kNoOp;
  LinkBook::Booking out, in;
  double link_us = 0;
  double in_interference_us = 0;  // the part of cost_us the swap-in adds beside the kernels
  int offload_gap = -1;  // a persistent tensor's cyclic gap, offloaded first (evaluate)
  int64_t at = -1;       // with offload_gap, not tight: the step the option was asked to be away at
  bool covers(int64_t s) const { return (lo1 <= s && s <= hi1) || (lo2 <= s && s <= hi2); }
  int32_t steps_away() const {
    return static_cast<int32_t>(std::max<int64_t>(0, hi1 - lo1 + 1) + std::max<int64_t>(0, hi2 - lo2 + 1));
  }
};

// The fraction of a copy of `total_us` that runs in its window when `remainder_us` does not.
double hidden(double remainder_us, double total_us) {
  return total_us > 0 ? std::clamp(1 - remainder_us / total_us, 0.0, 1.0) : 0.0;
}

struct Gap {
  TensorId tensor = kNoTensor;
  OpId from = kNoOp;  // access before the gap (cyclic: the iteration's last access)
  OpId to = kNoOp;    // access after the gap (cyclic: the iteration's first access)
  bool cyclic = false;
  // The decision (move kKeep: none) and what it costs; decided.out is set when this gap's
  // decision booked the tensor's swap-out.
  Option decided;
  Move move() const { return decided.move; }
  OpId release_after() const { return decided.release_after; }
  OpId fetch_before() const { return decided.fetch_before; }
  std::string alternative;
  int version = 0;
  // LP-guided variants (Note [LP-guided greedy]): what a swap's / a recompute's score is
  // multiplied by (1: no guidance, or the relaxation takes the gap away that way entirely).
  float swap_factor = 1, recompute_factor = 1;
};

// Note [Inner offloads]
//   A persistent tensor updated on the device (a weight, its optimizer state) has a cyclic gap
//   (from its update to its first read of the next iteration) and inner gaps (between its reads
//   within one). An inner gap can only be away once the tensor is offloaded, since its swap-in
//   needs the copy the offload's swap-out made in the previous iteration; so the greedy indexes
//   inner gaps only once the cyclic gap is decided (apply()), and before that only in the tight
//   fallback, with forced (waited-for) copies. At a peak that no cyclic gap of these tensors
//   covers, that order cannot get there: under a host/link split the device updates run after the whole
//   backward pass, and at the first of them (GPT-2's tied embedding, 824 MB with its gradient and
//   Adam state) the weights of the later device updates are on the device from their backward
//   read on. The cyclic gaps do not cover that step, the inner gaps are not candidates yet, and
//   the greedy is stuck: on GPT-2 medium at 10% on the H100 profile no split with fewer than 248
//   of 292 updates on the host fitted. A variant with inner offloads indexes the inner gaps from
//   the start and offers, for one that covers the peak, the offload (swap_option on the cyclic
//   gap, asked to be away at the iteration's last step) and then the inner swap (swap_option at
//   the peak), their costs summed; apply() books the offload, then the inner swap against the
//   bookings that include it. Run only for the host/link splits, beside the plain variant of each
//   split tried. Which k the later rounds try depends on the faster of the two at each k, so the
//   plans compared can differ from before; over the benchmark's matrix (2026-12-03) no cell got
//   slower and only the cell above moved (bench/results/planner-inner-offloads-2026-12-03.md).

// Note [LP-guided greedy]
//   The greedy decides at the peak step one gap at a time by cost per byte; the LP relaxation of
//   the lower bound (bound.h) decides all gaps at once, in fractions. An LP-guided variant reads
//   the relaxation's primal values per gap (x_c swapped, y_c recomputed) and multiplies the score
//   of each option by 1 + penalty * (1 - v), v the fraction the relaxation gives that move of that
//   gap: a move the relaxation takes entirely is scored as before, one it never takes `1 +
//   penalty` times as costly. It is a rounding of the relaxation by the greedy: the peak steps,
//   the bookings, the measured placement and every polish are the greedy's, so the plan is as
//   legal and as measured as every other variant's, and it competes with them on simulated time
//   only (taken where it is faster after its polish). Gaps the relaxation has no column for (a
//   host update's operands, whose accesses the host variant changes) are not weighted.
//   Where it pays: on ResNet-152 (batch 16) at 33% on the V100 profile the greedy recomputed 31
//   bottlenecks' first 1x1 convolutions (178 MiB for 5.1 ms) and stalled 3.4 ms on swaps; guided,
//   it recomputes 43 conv3 outputs instead (735 MiB for 6.6 ms), swaps some conv1 and conv2
//   outputs and stalls none: 138.24 -> 132.41 ms (predicted; bound 126.53). Penalties 3 and 10
//   each won cells the other lost (bench/results/planner-lp-guided-2026-12-01.md).
// The relaxation's (swap, recompute) fractions per gap, keyed by (tensor, from, to, cyclic): a
// host variant's planner has other gaps for the host updates' operands than find_gaps() gives the
// bound, so gaps are matched by what they are, not by their index.
using LpValues = std::map<std::tuple<TensorId, OpId, OpId, bool>, std::pair<float, float>>;
LpValues lp_values(const LowerBound& bound) {
  LpValues values;
  for (const LowerBound::GapValue& v : bound.solution)
    values.emplace(std::make_tuple(v.gap.tensor, v.gap.from, v.gap.to, v.gap.cyclic),
                   std::make_pair(v.swap, v.recompute));
  return values;
}
struct LpGuide {
  const LpValues* values;  // shared by every penalty's guide
  float penalty;
  float factor(float v) const { return v < 0 ? 1.0f : 1.0f + penalty * (1.0f - std::clamp(v, 0.0f, 1.0f)); }
};

struct TensorState {
  std::vector<int> gaps;
  bool has_copy = false;       // transient: a swap-out is planned; persistent: offloaded
  int swapped_gaps = 0;        // decided swaps relying on the copy
  LinkBook::Booking out;       // the swap-out's booking
  OpId out_after = kNoOp;      // swap-out after this step (kNoOp: before step 0)
  // Recomputation (transient, recomputable): the ops a recompute runs and what it reads.
  bool recomputable = false;
  double chain_us = 0;
  uint64_t chain_temp_bytes = 0;
  std::vector<TensorId> sources;
};

class Planner {
 public:
  // `host_ops`: update ops that run on the host (host_updates.h); empty: every update on the device.
  // `count_interference`: a swap's score includes what its copies add to the ops beside them
  // (CostModel::interference_us); without, hidden copies are free (what a GPU's DMA engines make
  // them).
  // `tight`: the fallback where no plan fitted (plan_ferry): a forced swap may issue the tensor's
  // swap-out earlier than its booking (forced_option). `recompute`: false plans swaps only.
  Planner(const PlanContext& ctx, const PlanFacts& facts, double link_weight, std::vector<OpId> host_ops = {},
          bool count_interference = true, bool tight = false, bool recompute = true, bool host_inner_gaps = true,
          bool kept_sources = false, const LpGuide* guide = nullptr, bool inner_offloads = false)
      : ctx_(ctx), f_(facts), g_(facts.g()), n_(g_.ops.size()), link_weight_(link_weight),
        count_interference_(count_interference), tight_(tight), recompute_(recompute),
        host_inner_gaps_(host_inner_gaps), kept_sources_(kept_sources), inner_offloads_(inner_offloads),
        guide_(guide), host_ops_(std::move(host_ops)) {}

  // Tensors whose gaps are never candidates (Note [Stall bans]): they stay on the device. Before run().
  void ban(const std::vector<TensorId>& tensors) {
    banned_.assign(g_.tensors.size(), false);
    for (TensorId t : tensors) banned_[idx(t)] = true;
  }

  Result<PlanAttempt> run(std::vector<PlanDecision>* decisions) {
    if (ctx_.budget_bytes == 0) return finish_attempt(ctx_, f_, empty_schedule(ctx_, "ferry"));
    setup();
    uint64_t target = ctx_.budget_bytes;
    std::optional<PlanAttempt> best;
    for (int round = 0; round < kMaxRounds; ++round) {
      const size_t decided_before = decided_;
      greedy(static_cast<int64_t>(target));
      // Live bytes first (cheap); the placement only once they fit.
      PlanAttempt a;
      FERRY_ASSIGN_OR_RETURN(a.schedule, complete_schedule(f_, intent()));
      a.schedule.placement_hint = hint_;
      FERRY_ASSIGN_OR_RETURN(const Program program, lower_for_planning(f_, a.schedule));
      FERRY_ASSIGN_OR_RETURN(a.measure, measure_program(f_, a.schedule, program, /*place=*/false));
      if (a.measure.live_peak_bytes <= ctx_.budget_bytes) {
        FERRY_ASSIGN_OR_RETURN(a.measure, measure_program(f_, a.schedule, program, /*place=*/true, ctx_.budget_bytes));
        a.fits = a.measure.device_bytes <= ctx_.budget_bytes;
        if (a.fits) hint_ = a.measure.placement;
      }
      const bool progress = decided_ > decided_before;
      if (std::getenv("FERRY_PLANNER_DEBUG"))
        std::fprintf(stderr, "weight %g round %d: target %llu live %llu placed %llu decisions %zu\n", link_weight_, round,
                     static_cast<unsigned long long>(target), static_cast<unsigned long long>(a.measure.live_peak_bytes),
                     static_cast<unsigned long long>(a.measure.device_bytes), decided_);
      if (a.fits) {
        best = std::move(a);
        break;
      }
      // The estimate was optimistic (placement, chains, transfer windows): continue from the
      // measured profile, aiming lower by what placement adds on top of the live bytes.
      sync_profile(a.measure.live_bytes);
      const uint64_t excess = a.measure.device_bytes - std::min(a.measure.device_bytes, ctx_.budget_bytes);
      const uint64_t live = a.measure.live_peak_bytes;
      target = live > ctx_.budget_bytes ? ctx_.budget_bytes
                                        : (live > excess + f_.alignment ? live - excess - f_.alignment : 0);
      if (!best || a.measure.device_bytes < best->measure.device_bytes) best = std::move(a);
      if (!progress && round > 0) break;  // nothing more can leave the device
    }
    if (decisions != nullptr) *decisions = explain();
    if (std::getenv("FERRY_PLANNER_DEBUG") && std::string(std::getenv("FERRY_PLANNER_DEBUG")) == "decisions")
      for (const PlanDecision& d : explain())
        std::fprintf(stderr, "w%g %-10s %-36s %9.2f MB cost %8.1f us away %d (%s)\n", link_weight_, d.move.c_str(),
                     g_.tensor(d.tensor).name.c_str(), d.bytes / 1e6, d.cost_us, d.away_steps, d.alternative.c_str());
    best->notes = summary();
    return std::move(*best);
  }

  // (internal: the class lives in an anonymous namespace; polish() and explain() are used by plan_ferry)
  static constexpr int kMaxRounds = 24;
  static constexpr size_t kPolishTensorsPerRound = 8;
  static constexpr size_t kPolishRecomputesPerRound = 32;
  static constexpr int kSwapOutWaitTries = 96;  // the second polish's swap-out waits (Planner::polish)
  double best_us_ = 0;
  int polish_tries_ = 0, polish_simulated_ = 0;  // over every polish of this planner (notes)
  // Where the next placement starts (memory/sharing_plan.h, Note [Warm start]): how the last plan
  // accepted was placed. Every schedule this planner builds carries it.
  PlacementHint hint_;
  size_t idx(TensorId t) const { return static_cast<size_t>(t); }
  uint64_t bytes_of(TensorId t) const { return f_.aligned_bytes(t); }
  bool swaps_allowed() const { return !ctx_.recompute_only; }

  // ---- setup ----

  void setup() {
    start_us_.assign(n_ + 1, 0);
    for (size_t i = 0; i < n_; ++i) start_us_[i + 1] = start_us_[i] + f_.op_us[i];
    out_link_.emplace(f_.op_us);
    if (ctx_.cost.copy_directions_concurrent()) in_link_.emplace(f_.op_us);
    Schedule keep = empty_schedule(ctx_, "none");
    if (!host_ops_.empty()) {
      book_host_traffic();
      keep = complete_schedule(f_, with_host_updates(f_, keep, host_ops_, &host_at_)).value();
    }
    Program program = lower_schedule(g_, keep, f_.program_options).value();
    const std::vector<uint64_t> live = live_bytes_per_step(f_, program);
    std::vector<int64_t> values(live.begin(), live.end());
    tree_.emplace(values);
    index_.emplace(n_);
    collect_accesses();
    pins_.assign(g_.tensors.size(), {});
    extended_until_.assign(g_.tensors.size(), kNoOp);
    make_gaps();
    exact_stamp_.assign(gaps_.size(), 0);
  }

  const LinkBook& in_book() const { return in_link_ ? *in_link_ : *out_link_; }
  LinkBook& in_book() { return in_link_ ? *in_link_ : *out_link_; }

  // Host updates move every gradient out after its producer and every weight in before its first
  // read (host_updates.h): booked on the links first, so the greedy sees what time is left; each
  // weight's swap-in is issued where its booking starts, each gradient released where its copy is
  // booked to be done.
  void book_host_traffic() {
    host_at_.assign(g_.tensors.size(), kNoOp);
    std::vector<bool> host_op(n_, false);
    for (OpId u : host_ops_) host_op[static_cast<size_t>(u)] = true;
    std::vector<OpId> first_read(g_.tensors.size(), kNoOp);
    for (const Op& op : g_.ops)
      if (!host_op[static_cast<size_t>(op.id)])
        for (TensorId t : op.inputs)
          if (first_read[idx(t)] == kNoOp) first_read[idx(t)] = op.id;
    std::vector<std::pair<OpId, TensorId>>& weights = host_weights_;
    weights.clear();
    // Swap-outs leave in FIFO order: in producer order, a gradient's copy is done no earlier than
    // the copies issued before it.
    const std::vector<OpId> by_producer = by_gradient_order(f_, host_ops_);
    OpId done = 0;
    for (OpId u : by_producer) {
      const TensorId grad = g_.op(u).inputs[1];
      const OpId p = f_.producer[idx(grad)];
      const double out_us = ctx_.cost.transfer_us(Direction::kSwapOut, Tier::kHost, g_.tensor(grad).bytes);
      if (static_cast<size_t>(p) + 1 < n_) {
        const LinkBook::Booking b =
            out_link_->book_forward(static_cast<size_t>(p) + 1, n_ - static_cast<size_t>(p) - 1, out_us, true);
        out_link_->commit(b);
        if (!b.parts.empty()) done = std::max(done, static_cast<OpId>(b.last));
        host_at_[idx(grad)] = std::min<OpId>(std::max(done, p) + 1, static_cast<OpId>(n_) - 1);
      }
      for (TensorId t : g_.op(u).inputs)
        if (g_.tensor(t).persistent() && first_read[idx(t)] != kNoOp) weights.emplace_back(first_read[idx(t)], t);
    }
    std::sort(weights.begin(), weights.end());
    weights.erase(std::unique(weights.begin(), weights.end()), weights.end());
    for (auto [read, t] : weights) {
      if (read == 0) {
        host_at_[idx(t)] = 0;
        continue;
      }
      const double in_us = ctx_.cost.transfer_us(Direction::kSwapIn, Tier::kHost, g_.tensor(t).bytes);
      const LinkBook::Booking b = in_book().book_backward(static_cast<size_t>(read) - 1, static_cast<size_t>(read), in_us, true);
      in_book().commit(b);
      host_at_[idx(t)] = b.parts.empty() ? 0 : static_cast<OpId>(b.first);
    }
  }

  // Persistent: an op of the iteration writes it.
  bool written(TensorId t) const { return acc_.written[idx(t)]; }

  void collect_accesses() {
    ts_.assign(g_.tensors.size(), TensorState{});
    acc_ = planner::collect_accesses(g_);
    host_operand_.assign(g_.tensors.size(), false);
    for (OpId u : host_ops_) {  // the device never sees these updates
      for (const auto* list : {&g_.op(u).inputs, &g_.op(u).outputs})
        for (TensorId t : *list) {
          std::erase(acc_.steps[idx(t)], u);
          if (g_.tensor(t).persistent()) {
            acc_.written[idx(t)] = false;
            host_operand_[idx(t)] = true;
          }
        }
    }
    for (const Tensor& t : g_.tensors)
      if (f_.recomputable(t.id)) chain_facts(t.id);
  }

  // Whether a recompute of t reads its forward-only input u where it is (kept on the device from
  // its last forward use to the recompute) instead of recomputing it along.
  bool extended(TensorId u, TensorId t) const { return kept_sources_ && 4 * bytes_of(u) <= bytes_of(t); }

  // The ops a recompute of t runs: its producer and, through inputs that are forward-only
  // intermediates (dead by then in the keep plan) and not extended, theirs; everything else it
  // reads is a source.
  void chain_facts(TensorId t) {
    TensorState& s = ts_[idx(t)];
    s.recomputable = true;
    std::vector<TensorId> work{t};
    std::vector<OpId> seen;
    while (!work.empty()) {
      const TensorId u = work.back();
      work.pop_back();
      const OpId p = f_.producer[idx(u)];
      if (std::find(seen.begin(), seen.end(), p) != seen.end()) continue;
      seen.push_back(p);
      s.chain_us += f_.op_us[static_cast<size_t>(p)];
      if (u != t) s.chain_temp_bytes += bytes_of(u);
      for (TensorId in : g_.op(p).inputs) {
        if (f_.recomputable(in) && f_.info(in).first_backward_use == kNoOp && seen.size() < 64 && !extended(in, u))
          work.push_back(in);
        else
          s.sources.push_back(in);
      }
    }
    std::sort(s.sources.begin(), s.sources.end());
    s.sources.erase(std::unique(s.sources.begin(), s.sources.end()), s.sources.end());
  }

  // Note [Sources a recompute keeps]
  //   A recompute reads its sources where they are; a source whose last access comes before the
  //   recompute (a forward-only tensor the chain does not run again: extended, not recomputable
  //   in this context, as a framework's unsaved intermediates are, or a data input) stays on the
  //   device until the recompute, since lowering frees a tensor after its last read. The profile
  //   gets those bytes when the recompute is decided (apply), and a recompute is not offered at a
  //   peak step where the sources it would keep there weigh as much as its tensor: a recompute of
  //   a 32 KB attention head from its unsaved 96 KB QKV projection frees nothing there, it costs
  //   64 KB. Without this the greedy took such recomputes (the cheapest per byte), found the kept
  //   sources in the measured profile and had no gap left to take them away with; on the PyTorch
  //   adapter's recorded GPT-2 it then fell back to swapping only (docs/planner.md, "Where it
  //   loses"). Where the sources weigh less, the score stays per byte of the tensor: scoring by
  //   the net bytes instead made DenseNet-264's kept-source plans slower (the first recompute to
  //   keep a concat's inputs pays for every later one that reads them), 96.58 -> 98.77 ms at 50%
  //   on the A100 profile (predicted).
  // The last step the profile has transient `u` on the device: its last access, or later where a
  // decided recompute reads it. kNoOp: it is never freed (persistent, the loss).
  OpId live_until(TensorId u) const {
    if (g_.tensor(u).persistent() || u == g_.loss) return kNoOp;
    const std::vector<OpId>& a = acc_.steps[idx(u)];
    const OpId last = a.empty() ? 0 : a.back();
    const OpId until = extended_until_[idx(u)];
    return until == kNoOp ? last : std::max(until, last);
  }

  // The bytes of t's sources that a recompute of t (reading them at its gap's end) would keep on
  // the device at step s.
  uint64_t held_at(TensorId t, int64_t s) const {
    uint64_t held = 0;
    for (TensorId u : ts_[idx(t)].sources)
      if (const OpId until = live_until(u); until != kNoOp && until < s) held += bytes_of(u);
    return held;
  }

  // The candidates are find_gaps()'s (gaps.h); a persistent tensor's gaps inside the iteration are
  // only reachable after it was offloaded, so only its cyclic gap enters the candidate index.
  void make_gaps() {
    for (const GapSpec& gap : find_gaps(f_, acc_, swaps_allowed())) {
      // A host update's operands live in the host tier already: their inner gaps are open (unless
      // this variant keeps them on the device between their reads), their cyclic gap is not a choice.
      if (host_operand_[idx(gap.tensor)]) {
        if (!gap.cyclic) add_gap(gap.tensor, gap.from, gap.to, false, host_inner_gaps_);
        continue;
      }
      // Tight or with inner offloads: a persistent tensor's inner gaps too, reached by offloading
      // it first (evaluate).
      add_gap(gap.tensor, gap.from, gap.to, gap.cyclic,
              gap.cyclic || !g_.tensor(gap.tensor).persistent() || tight_ || inner_offloads_);
    }
  }

  void add_gap(TensorId t, OpId from, OpId to, bool cyclic, bool index) {
    Gap gap;
    gap.tensor = t;
    gap.from = from;
    gap.to = to;
    gap.cyclic = cyclic;
    if (guide_ != nullptr)
      if (auto v = guide_->values->find(std::make_tuple(t, from, to, cyclic)); v != guide_->values->end()) {
        gap.swap_factor = guide_->factor(v->second.first);
        gap.recompute_factor = guide_->factor(v->second.second);
      }
    const int id = static_cast<int>(gaps_.size());
    gaps_.push_back(gap);
    ts_[idx(t)].gaps.push_back(id);
    if (index) index_gap(id, static_key(id));
  }

  // Where a gap could be away, before any booking.
  void index_gap(int id, CandidateKey key) {
    const Gap& gap = gaps_[static_cast<size_t>(id)];
    if (!banned_.empty() && banned_[idx(gap.tensor)]) return;
    if (gap.cyclic) {
      index_->insert(id, gap.version, gap.from + 1, static_cast<int64_t>(n_) - 1, key);
      index_->insert(id, gap.version, 0, gap.to - 1, key);
    } else {
      index_->insert(id, gap.version, gap.from + 1, gap.to - 1, key);
    }
  }

  double out_us(TensorId t) const { return f_.transfer_us(ctx_.cost, Direction::kSwapOut, ctx_.tier, t); }
  double in_us(TensorId t) const { return f_.transfer_us(ctx_.cost, Direction::kSwapIn, ctx_.tier, t); }
  // What a copy adds to compute when it runs beside the kernels (0 unless the links interfere).
  double out_interference_us(TensorId t) const {
    return count_interference_ ? f_.interference_us(ctx_.cost, Direction::kSwapOut, ctx_.tier, t) : 0;
  }
  double in_interference_us(TensorId t) const {
    return count_interference_ ? f_.interference_us(ctx_.cost, Direction::kSwapIn, ctx_.tier, t) : 0;
  }

  // A lower bound of the gap's score: its cheapest option with no booking conflicts.
  CandidateKey static_key(int id) const {
    const Gap& gap = gaps_[static_cast<size_t>(id)];
    const TensorState& s = ts_[idx(gap.tensor)];
    const double b = static_cast<double>(std::max<uint64_t>(bytes_of(gap.tensor), 1));
    double score = std::numeric_limits<double>::infinity();
    // A swap-in either runs beside the kernels (slowing them by its interference) or stalls them.
    if (swaps_allowed())
      score = gap.swap_factor *
              (link_weight_ * in_us(gap.tensor) + std::min(in_us(gap.tensor), in_interference_us(gap.tensor))) / b;
    if (!gap.cyclic && s.recomputable && recompute_) score = std::min(score, gap.recompute_factor * s.chain_us / b);
    return {score, bytes_of(gap.tensor)};
  }

  // ---- options ----

  // Where a gap really ends: its next access, or earlier where a decided recompute reads the
  // tensor (a pin): the tensor must be on the device for that recompute.
  OpId end_of(const Gap& gap) const {
    OpId end = gap.to;
    for (OpId p : pins_[idx(gap.tensor)]) {
      if (gap.cyclic) {
        if (p < gap.to) end = std::min(end, p);
      } else if (p > gap.from && p < end) {
        end = p;
      }
    }
    return end;
  }

  // A swap that has the tensor away at step s. The swap-out (when the tensor has no valid copy
  // yet) is booked on its link as soon as possible after the tensor is produced and must be done
  // before s; the swap-in as late as possible before the gap's end and after s. What a window
  // cannot hold is a stall: the release waits for the rest of the swap-out, the reader for the
  // rest of the swap-in. A persistent tensor's cyclic gap is its offload: away from its last
  // access (after the swap-out of its update) to its first access of the next iteration.
  Option swap_option(const Gap& gap, int64_t s) const {
    Option o;
    o.move = Move::kSwap;
    const TensorId t = gap.tensor;
    const TensorState& st = ts_[idx(t)];
    const bool persistent = g_.tensor(t).persistent();
    const int64_t n = static_cast<int64_t>(n_);
    const OpId end = end_of(gap);
    const bool needs_out = persistent ? gap.cyclic && written(t) : !st.has_copy;
    // The swap-out's window: from the tensor's last write to the step before s (for an offload
    // seen at the start of the iteration: to the end of the previous one).
    int64_t out_first = persistent ? gap.from + 1 : (f_.producer[idx(t)] == kNoOp ? 0 : f_.producer[idx(t)] + 1);
    int64_t out_last = s - 1;
    if (gap.cyclic && s < end) out_last = n - 1;
    // A copy made by another gap's swap-out is there once that swap-out is issued.
    OpId release = st.has_copy && !persistent ? std::max(gap.from, st.out_after) : gap.from;
    double stall_us = 0, link_us = in_us(t), interference_us = 0;
    std::optional<LinkBook> shared;
    const LinkBook* in_link = &in_book();
    if (needs_out) {
      link_us += out_us(t);
      const int64_t window = out_last - out_first + 1;
      o.out = out_link_->book_forward(static_cast<size_t>(std::min(out_first, n - 1)),
                                      static_cast<size_t>(std::max<int64_t>(window, 0)), out_us(t), /*partial=*/true);
      if (o.out.remainder_us > 0 || o.out.parts.empty()) {
        release = static_cast<OpId>(std::max<int64_t>(gap.from, out_last));  // waits for the rest
        stall_us += o.out.parts.empty() ? out_us(t) : o.out.remainder_us;
        if (!o.out.parts.empty()) interference_us += hidden(o.out.remainder_us, out_us(t)) * out_interference_us(t);
      } else {
        interference_us += out_interference_us(t);
        release = static_cast<OpId>(std::max<int64_t>(gap.from, static_cast<int64_t>(o.out.last)));
      }
      if (!in_link_ && !o.out.parts.empty()) {
        shared.emplace(*out_link_);
        shared->commit(o.out);
        in_link = &*shared;
      }
    }
    // The swap-in's window: after s (or, for an offload seen after the last access, from the
    // start of the next iteration) to the step before the gap's end.
    const int64_t in_first = gap.cyclic && s > gap.from ? 0 : s + 1;
    const int64_t in_window = end - in_first;
    OpId back = end;
    if (in_window > 0) {
      o.in = in_link->book_backward(static_cast<size_t>(end - 1), static_cast<size_t>(in_window), in_us(t),
                                    /*partial=*/true);
      back = o.in.remainder_us > 0 || o.in.parts.empty() ? static_cast<OpId>(in_first) : static_cast<OpId>(o.in.first);
      stall_us += o.in.parts.empty() ? in_us(t) : o.in.remainder_us;
      if (!o.in.parts.empty()) o.in_interference_us = hidden(o.in.remainder_us, in_us(t)) * in_interference_us(t);
    } else {
      stall_us += in_us(t);  // on demand, right before its reader
    }
    if (gap.cyclic) {
      o.lo1 = release + 1;
      o.hi1 = n - 1;
      o.lo2 = 0;
      o.hi2 = back - 1;
    } else {
      o.lo1 = release + 1;
      o.hi1 = back - 1;
    }
    if (!o.covers(s)) return Option{};
    o.release_after = release;
    o.fetch_before = back;
    o.link_us = link_us;
    o.cost_us = link_weight_ * link_us + stall_us + interference_us + o.in_interference_us;
    o.ok = true;
    return o;
  }

  // `s`: the peak step it is to free (a pull that brings a source back there is not offered).
  Option recompute_option(const Gap& gap, int64_t peak = -1) const {
    Option o;
    o.move = Move::kRecompute;
    const TensorState& s = ts_[idx(gap.tensor)];
    if (!recompute_ || !s.recomputable || gap.cyclic || g_.tensor(gap.tensor).persistent()) return o;
    const OpId end = end_of(gap);
    // Its sources must be on the device when it runs (they are pinned there once it is decided),
    // or be recomputed themselves by then: a source's decided recompute is moved forward to it.
    for (TensorId u : s.sources)
      if (const Gap* away = away_gap(u, end); away != nullptr && !pullable(*away, end, peak)) return o;
    o.lo1 = gap.from + 1;
    o.hi1 = end - 1;
    o.release_after = gap.from;
    o.fetch_before = end;
    o.cost_us = s.chain_us;
    o.ok = o.lo1 <= o.hi1;
    // It frees nothing at the peak step where the sources it keeps there weigh as much.
    if (peak >= 0 && held_at(gap.tensor, peak) >= bytes_of(gap.tensor)) o.ok = false;
    return o;
  }

  // Whether a decided recompute that has its tensor away at `step` can run before `step` instead
  // (its own sources on the device there), so that another recompute reads it at `step`.
  bool pullable(const Gap& away, OpId step, int64_t peak) const {
    if (!kept_sources_) return false;
    if (away.move() != Move::kRecompute || away.cyclic || away.decided.lo1 >= step) return false;
    if (peak >= step && peak <= away.decided.hi1) return false;
    for (TensorId w : ts_[idx(away.tensor)].sources)
      if (away_gap(w, step) != nullptr) return false;
    return true;
  }

  // Recomputes the tensor of a decided recompute gap before `step` instead of at its end: it is
  // back on the device from there, and its sources are pinned there.
  void pull(Gap& away, OpId step) {
    const TensorState& s = ts_[idx(away.tensor)];
    Option& d = away.decided;
    tree_->add(step, d.hi1, static_cast<int64_t>(bytes_of(away.tensor)));
    tree_->add(d.fetch_before, d.fetch_before, -static_cast<int64_t>(s.chain_temp_bytes));
    tree_->add(step, step, static_cast<int64_t>(s.chain_temp_bytes));
    d.hi1 = step - 1;
    d.fetch_before = step;
    for (TensorId w : s.sources) pins_[idx(w)].push_back(step);
    ++pulled_;
  }

  // The decided gap of u that has it away at `step`, if any.
  Gap* away_gap(TensorId u, OpId step) {
    return const_cast<Gap*>(static_cast<const Planner*>(this)->away_gap(u, step));
  }
  const Gap* away_gap(TensorId u, OpId step) const {
    for (int id : ts_[idx(u)].gaps) {
      const Gap& g = gaps_[static_cast<size_t>(id)];
      if (g.move() != Move::kKeep && g.decided.covers(step)) return &g;
    }
    return nullptr;
  }

  // A decided swap whose prefetch (or swap-out) keeps the tensor on the device at some steps of
  // its gap: fetch it on demand instead, right before its access, paying the transfer as a stall.
  Option late_option(const Gap& gap) const {
    Option o = gap.decided;
    o.in = {};
    o.out = {};
    o.move = Move::kSwap;
    o.fetch_before = end_of(gap);
    if (gap.cyclic) {
      o.hi2 = o.fetch_before - 1;
    } else {
      o.hi1 = o.fetch_before - 1;
    }
    o.cost_us =
        gap.decided.cost_us - link_weight_ * in_us(gap.tensor) - gap.decided.in_interference_us + in_us(gap.tensor);
    o.in_interference_us = 0;
    o.link_us = gap.decided.link_us;
    o.ok = o.steps_away() > 0;
    return o;
  }

  // Away for its whole gap whatever the links can hide: released right after the access before
  // the gap (waiting for its swap-out when the copy is not there yet) and fetched on demand right
  // before the access after it. It costs stalls, and it is what makes every budget above the
  // largest working set (plus what cannot leave) reachable.
  Option forced_option(const Gap& gap) const {
    Option o;
    o.move = Move::kSwap;
    const TensorId t = gap.tensor;
    const TensorState& s = ts_[idx(t)];
    const bool persistent = g_.tensor(t).persistent();
    const OpId end = end_of(gap);
    // Tight: a transient's swap-out is issued at the gap's start at the latest (apply() moves it
    // up: a link saturated by earlier copies books it late, which would keep the tensor on the
    // device), and waited for. Otherwise, and for an offload, not before it is issued.
    const bool early = tight_ && !persistent && s.has_copy && s.out_after > gap.from;
    double stall_us = in_us(t);
    if (persistent ? (gap.cyclic && written(t)) : !s.has_copy) stall_us += out_us(t);
    else if (early || (gap.move() == Move::kSwap && gap.decided.release_after > gap.from && gap.decided.out.ok))
      stall_us += out_us(t);  // its swap-out is not done by then
    const bool owns_out = !persistent || gap.cyclic;
    const OpId release = s.has_copy && owns_out && !early ? std::max(gap.from, s.out_after) : gap.from;
    o.release_after = release;
    o.fetch_before = end;
    if (gap.cyclic) {
      o.lo1 = release + 1;
      o.hi1 = static_cast<int64_t>(n_) - 1;
      o.lo2 = 0;
      o.hi2 = end - 1;
    } else {
      o.lo1 = release + 1;
      o.hi1 = end - 1;
    }
    o.link_us = in_us(t) + (s.has_copy ? 0 : out_us(t));
    o.cost_us = stall_us + link_weight_ * o.link_us;
    o.ok = o.steps_away() > 0;
    return o;
  }

  // The best option of a gap that has it away at step s. For a decided gap: the best change that
  // has it away at s, scored by what it costs on top of the current decision.
  Option evaluate(int id, int64_t s) const {
    const Gap& gap = gaps_[static_cast<size_t>(id)];
    const double b = static_cast<double>(std::max<uint64_t>(bytes_of(gap.tensor), 1));
    Option best;
    const double current = gap.move() == Move::kKeep ? 0 : gap.decided.cost_us;
    auto consider = [&](Option o) {
      if (!o.ok || !o.covers(s)) return;
      o.score = (o.cost_us - current) / b;
      // LP-guided (factors >= 1): a cost scaled up, a saving scaled down, so keys stay lower bounds.
      const float f = o.move == Move::kRecompute ? gap.recompute_factor : gap.swap_factor;
      o.score = o.score >= 0 ? o.score * f : o.score / f;
      if (!best.ok || o.score < best.score) best = std::move(o);
    };
    if (gap.move() == Move::kSwap) {
      if (gap.decided.covers(s)) return best;
      consider(recompute_option(gap, s));
      if (gap.fetch_before() != end_of(gap)) consider(late_option(gap));
      consider(forced_option(gap));
      return best;
    }
    if (gap.move() == Move::kRecompute) return best;
    if (!gap.cyclic && g_.tensor(gap.tensor).persistent() && !ts_[idx(gap.tensor)].has_copy &&
        !host_operand_[idx(gap.tensor)]) {
      // Tight or with inner offloads: an inner gap of a persistent tensor that still lives on the
      // device (a host update's operand lives in the host tier already), reached by offloading it
      // (its cyclic gap) and then taking this gap away (offload_then_away).
      if (tight_ || inner_offloads_) consider(offload_then_away(gap, s));
      return best;
    }
    if (swaps_allowed()) consider(swap_option(gap, s));
    consider(recompute_option(gap, s));
    return best;
  }

  // (evaluate's case above: a persistent tensor, not offloaded, not a host update's operand.)
  // Tight: both copies forced. With inner offloads (Note [Inner offloads]) both booked on the
  // links: the cyclic gap's swap as swap_option books it at the iteration's end (or start), the
  // inner gap's swap-in as swap_option books it at s; apply() books them again in that order.
  Option offload_then_away(const Gap& gap, int64_t s) const {
    if (!swaps_allowed()) return {};
    for (int c : ts_[idx(gap.tensor)].gaps) {
      const Gap& cyclic = gaps_[static_cast<size_t>(c)];
      if (!cyclic.cyclic || cyclic.move() != Move::kKeep) continue;
      const Option offload = tight_ ? forced_option(cyclic) : swap_option(cyclic, offload_step(cyclic));
      Option o = tight_ ? forced_option(gap) : swap_option(gap, s);
      if (!offload.ok || !o.ok) return {};
      o.cost_us += offload.cost_us;
      o.offload_gap = c;
      o.at = s;
      return o;
    }
    return {};
  }
  // The step at which an offload is asked to be away: the iteration's last, unless the tensor is
  // written there.
  int64_t offload_step(const Gap& cyclic) const {
    const int64_t last = static_cast<int64_t>(n_) - 1;
    return cyclic.from < last ? last : 0;
  }


  // ---- greedy ----

  bool current(int id, int version) const { return gaps_[static_cast<size_t>(id)].version == version; }

  void greedy(int64_t target) {
    const auto valid = [this](int id, int version) { return current(id, version); };
    while (tree_->peak() > target) {
      const size_t s = tree_->peak_step();
      std::vector<int> skipped;
      std::optional<std::pair<int, Option>> chosen;
      for (size_t tries = 0; tries < 2 * gaps_.size() + 16; ++tries) {
        auto top = index_->best(s, valid);
        if (!top) break;
        const int id = top->second;
        Gap& gap = gaps_[static_cast<size_t>(id)];
        Option o = evaluate(id, static_cast<int64_t>(s));
        if (!o.ok) {  // cannot be away at s now: out of this query, back for later ones
          ++gap.version;
          skipped.push_back(id);
          continue;
        }
        const CandidateKey exact{o.score, bytes_of(gap.tensor)};
        if (top->first < exact && exact_stamp_[id] != decided_ + 1) {
          // Its key was optimistic: re-key and let the others compete.
          ++gap.version;
          exact_stamp_[id] = decided_ + 1;
          reindex(id, exact);
          continue;
        }
        chosen = std::make_pair(id, std::move(o));
        break;
      }
      for (int id : skipped)
        reindex(id, gaps_[static_cast<size_t>(id)].move() == Move::kKeep ? static_key(id) : upgrade_key(id));
      if (!chosen) {  // nothing can leave the device at the peak step
        if (std::getenv("FERRY_PLANNER_DEBUG")) debug_stuck(s, target);
        return;
      }
      apply(chosen->first, chosen->second);
    }
  }

  void debug_stuck(size_t s, int64_t target) const {
    std::fprintf(stderr, "stuck at step %zu (%s): profile %lld, target %lld, skipped candidates:\n", s,
                 g_.op(static_cast<OpId>(s)).name.c_str(), static_cast<long long>(tree_->at(s)),
                 static_cast<long long>(target));
    for (size_t id = 0; id < gaps_.size(); ++id) {
      const Gap& g = gaps_[id];
      const bool covers = g.cyclic ? (static_cast<OpId>(s) > g.from || static_cast<OpId>(s) < g.to)
                                   : (static_cast<OpId>(s) > g.from && static_cast<OpId>(s) < g.to);
      if (!covers) continue;
      const Option e = evaluate(static_cast<int>(id), static_cast<int64_t>(s));
      std::fprintf(stderr, "  %-40s %10llu bytes gap %d..%d move %d away %lld..%lld eval ok %d move %d score %g end %d\n",
                   g_.tensor(g.tensor).name.c_str(), static_cast<unsigned long long>(bytes_of(g.tensor)), g.from, g.to,
                   static_cast<int>(g.move()), static_cast<long long>(g.decided.lo1),
                   static_cast<long long>(g.decided.hi1), e.ok, static_cast<int>(e.move), e.score, end_of(g));
    }
  }

  void add_away(const Option& o, int64_t delta) {
    tree_->add(o.lo1, o.hi1, delta);
    tree_->add(o.lo2, o.hi2, delta);
  }

  // Takes back a gap's decision: its bookings and the bytes it freed.
  void undo(Gap& gap) {
    TensorState& s = ts_[idx(gap.tensor)];
    const Option& d = gap.decided;
    if (d.move == Move::kKeep) return;
    add_away(d, static_cast<int64_t>(bytes_of(gap.tensor)));
    if (d.move == Move::kRecompute) {
      tree_->add(d.fetch_before, d.fetch_before, -static_cast<int64_t>(s.chain_temp_bytes));
    } else {
      if (d.in.ok) in_book().cancel(d.in);
      --s.swapped_gaps;
    }
    gap.decided = Option{};
  }

  void apply(int id, const Option& chosen) {
    if (chosen.offload_gap >= 0) {  // offload the tensor first, then take this gap away
      ++inner_offload_count_;
      Gap& cyclic = gaps_[static_cast<size_t>(chosen.offload_gap)];
      if (tight_) {
        apply(chosen.offload_gap, forced_option(cyclic));
        Option away = chosen;
        away.offload_gap = -1;
        away.cost_us -= cyclic.decided.cost_us;
        apply(id, away);
        return;
      }
      // Booked (Note [Inner offloads]): each against the bookings of the one before it.
      Option offload = swap_option(cyclic, offload_step(cyclic));
      apply(chosen.offload_gap, offload.ok ? offload : forced_option(cyclic));
      const Gap& gap = gaps_[static_cast<size_t>(id)];
      Option away = swap_option(gap, chosen.at);
      apply(id, away.ok ? away : forced_option(gap));
      return;
    }
    Gap& gap = gaps_[static_cast<size_t>(id)];
    TensorState& s = ts_[idx(gap.tensor)];
    const int64_t b = static_cast<int64_t>(bytes_of(gap.tensor));
    ++gap.version;
    ++decided_;
    Option o = chosen;
    undo(gap);
    const bool persistent = g_.tensor(gap.tensor).persistent();
    if (o.move == Move::kRecompute && s.has_copy && s.swapped_gaps == 0 && !persistent) {
      // No swap relies on the copy any more: its swap-out goes.
      if (s.out.ok) out_link_->cancel(s.out);
      s.out = {};
      s.has_copy = false;
    }
    if (o.move == Move::kSwap) {
      if (o.out.ok && !o.out.parts.empty() && !s.has_copy) {
        out_link_->commit(o.out);
        s.out = o.out;
      }
      if (o.in.ok) in_book().commit(o.in);
      ++s.swapped_gaps;
      // A forced release before the copy was to be issued issues it there (tight forced_option).
      if (tight_ && s.has_copy && !persistent && s.out_after != kNoOp && o.release_after < s.out_after)
        s.out_after = o.release_after;
      if (!s.has_copy) {
        s.has_copy = true;
        s.out_after = out_issue(gap, o);
        if (persistent)  // offloaded: its inner gaps may leave too
          for (int inner : s.gaps)
            if (inner != id) reindex(inner, static_key(inner));
      }
      const Option alt = recompute_option(gap);
      gap.alternative = alt.ok ? fmt::format("recompute, {:.1f} us", alt.cost_us) : "recompute: not possible";
    } else {
      tree_->add(o.fetch_before, o.fetch_before, static_cast<int64_t>(s.chain_temp_bytes));
      for (TensorId u : s.sources) {
        if (Gap* away = away_gap(u, o.fetch_before); away != nullptr) pull(*away, o.fetch_before);
        pins_[idx(u)].push_back(o.fetch_before);
        // Kept on the device to its recompute (Note [Sources a recompute keeps]).
        if (const OpId until = live_until(u); until != kNoOp && o.fetch_before > until) {
          tree_->add(until + 1, o.fetch_before, static_cast<int64_t>(bytes_of(u)));
          extended_until_[idx(u)] = o.fetch_before;
        }
      }
      gap.alternative = swaps_allowed() ? fmt::format("swap, {:.1f} us of link time",
                                                      in_us(gap.tensor) + (s.has_copy ? 0 : out_us(gap.tensor)))
                                        : "swap: not allowed (--tier none)";
    }
    gap.decided = std::move(o);
    add_away(gap.decided, -b);
    reindex(id, upgrade_key(id));
  }

  // Whether a swap of `gap` can make its tensor's copy: it has one, or it stays on the device
  // from its production to the gap (no earlier gap of it is away; swap_option books a missing
  // swap-out from the production on).
  bool on_device_until(const Gap& gap) const {
    const TensorState& s = ts_[idx(gap.tensor)];
    if (s.has_copy) return true;
    for (int other : s.gaps) {
      const Gap& o = gaps_[static_cast<size_t>(other)];
      if (o.from < gap.from && o.move() != Move::kKeep) return false;
    }
    return true;
  }

  // After which step the swap-out of gap's tensor is issued when `o` (a swap) makes its copy:
  // where its booking starts, so the link's FIFO order is the booking's order (an earlier issue
  // would queue it ahead of transfers booked before it), and not before the tensor is written.
  OpId out_issue(const Gap& gap, const Option& o) const {
    const OpId written = g_.tensor(gap.tensor).persistent() ? gap.from : f_.producer[idx(gap.tensor)];
    if (o.out.ok && !o.out.parts.empty()) {
      const OpId start = static_cast<OpId>(o.out.parts.front().first) - 1;
      if (start > written) return start;
    }
    return written;
  }

  // A lower bound of what changing a decided swap costs per byte (a recompute may cost less
  // than the link time it gives back).
  CandidateKey upgrade_key(int id) const {
    const Gap& gap = gaps_[static_cast<size_t>(id)];
    const double b = static_cast<double>(std::max<uint64_t>(bytes_of(gap.tensor), 1));
    return {-link_weight_ * gap.decided.link_us / b, bytes_of(gap.tensor)};
  }

  // Puts a gap back in the index where a decision could take (more of) it away: its whole gap
  // when undecided; for a swap, the steps of its gap at which the tensor is still on the device
  // (waiting for its copy out, or prefetched early); nowhere for a recompute.
  void reindex(int id, CandidateKey key) {
    const Gap& gap = gaps_[static_cast<size_t>(id)];
    if (gap.move() == Move::kKeep) {
      index_gap(id, key);
    } else if (gap.move() == Move::kSwap) {
      const Option& d = gap.decided;
      index_->insert(id, gap.version, gap.from + 1, d.release_after, key);
      index_->insert(id, gap.version, d.fetch_before, gap.to - 1, key);
    }
  }

  void sync_profile(const std::vector<uint64_t>& live) {
    for (size_t i = 0; i < live.size(); ++i)
      tree_->add(static_cast<int64_t>(i), static_cast<int64_t>(i), static_cast<int64_t>(live[i]) - tree_->at(i));
  }

  // ---- the schedule ----

  // Note [Swap-outs where the tensor is]
  //   A transient's one swap-out serves every swapped gap of the tensor (its value never changes),
  //   and stays where it was booked when the gap that booked it is re-decided while another swap
  //   still relies on the copy. It must then still be issued at a step after which the tensor is on
  //   the device, and no later than the first swapped gap's release. A polish that turns the
  //   booking gap into a recompute (away from its release to its recompute) or swaps an earlier
  //   gap breaks that (resnet-mini b8 at 70% on the SSD tier, on figures one run measured: a
  //   swap-out after step 30, inside a recompute gap 21..75, for the swapped gap 75..93). Such a
  //   swap-out moves to the start of the on-device stretch the first swapped gap leaves from:
  //   after the recompute before it (or after the tensor's producer). The simulator judges the
  //   plan as emitted, so its time and fit are those of the moved copy.
  OpId on_device_out(TensorId t, OpId out_after) const {
    const Gap* first_swap = nullptr;
    for (int id : ts_[idx(t)].gaps) {
      const Gap& gap = gaps_[static_cast<size_t>(id)];
      if (gap.move() == Move::kSwap && (first_swap == nullptr || gap.from < first_swap->from)) first_swap = &gap;
    }
    if (first_swap == nullptr) return out_after;
    // The stretch of steps, up to the first swapped gap's release, after which the tensor is on
    // the device: from the last recompute before that gap (an away gap before it is a recompute).
    OpId start = f_.producer[idx(t)];
    bool inside = false;  // out_after falls where a recompute gap has the tensor away
    for (int id : ts_[idx(t)].gaps) {
      const Gap& gap = gaps_[static_cast<size_t>(id)];
      if (gap.move() != Move::kRecompute || gap.from >= first_swap->from) continue;
      start = std::max(start, gap.fetch_before());
      if (gap.release_after() < out_after && out_after < gap.fetch_before()) inside = true;
    }
    if (inside || out_after > first_swap->release_after()) return start;
    return out_after;
  }

  Schedule intent() const {
    Schedule s = empty_schedule(ctx_, "ferry");
    std::vector<bool> dropped(g_.tensors.size(), false);
    std::vector<std::vector<Action>> releases(n_);  // after the swap-outs of the same step
    for (const Tensor& t : g_.tensors) {
      const TensorState& st = ts_[idx(t.id)];
      if (!st.has_copy) continue;
      if (t.persistent()) {
        s.offloaded.push_back({t.id, ctx_.tier});
        if (written(t.id)) add_after(s, std::max(st.out_after, acc_.steps[idx(t.id)].back()), swap_out_action(t.id, ctx_.tier));
      } else if (st.out_after == kNoOp) {
        add_before(s, 0, swap_out_action(t.id, ctx_.tier));
      } else {
        add_after(s, on_device_out(t.id, st.out_after), swap_out_action(t.id, ctx_.tier));
      }
    }
    for (const Gap& gap : gaps_) {
      if (gap.move() == Move::kKeep) continue;
      releases[static_cast<size_t>(gap.release_after())].push_back(release_action(gap.tensor));
      if (gap.move() == Move::kSwap) {
        add_before(s, gap.fetch_before(), swap_in_action(gap.tensor, ctx_.tier));
      } else {
        dropped[idx(gap.tensor)] = true;
        add_before(s, gap.fetch_before(), recompute_action(gap.tensor));
      }
    }
    // Forward-only ancestors a recompute reads leave after their last forward use (recomputed
    // along on demand), instead of living until the recompute.
    // With kept sources, a small forward-only input stays to its recompute (extended()).
    std::vector<bool> closed = dropped;
    if (kept_sources_)
      close_recompute_sources(f_, closed, [&](TensorId u, TensorId t) { return extended(u, t); });
    else
      close_recompute_sources(f_, closed);
    for (const Tensor& t : g_.tensors)
      if (closed[idx(t.id)] && !dropped[idx(t.id)])
        releases[static_cast<size_t>(f_.forward_end(t.id))].push_back(release_action(t.id));
    for (size_t i = 0; i < n_; ++i)
      for (const Action& a : releases[i]) add_after(s, static_cast<OpId>(i), a);
    // Recomputes before the same step run in their producers' order (a pulled recompute feeds
    // the one that pulled it); the other actions keep their places.
    for (std::vector<Action>& list : s.before) {
      std::vector<size_t> at;
      std::vector<TensorId> ts;
      for (size_t k = 0; k < list.size(); ++k)
        if (list[k].kind == ActionKind::kRecompute) {
          at.push_back(k);
          ts.push_back(list[k].tensor);
        }
      if (ts.size() < 2) continue;
      std::stable_sort(ts.begin(), ts.end(), [&](TensorId a, TensorId b) { return f_.producer[idx(a)] < f_.producer[idx(b)]; });
      for (size_t k = 0; k < at.size(); ++k) list[at[k]].tensor = ts[k];
    }
    if (!host_ops_.empty()) return with_host_updates(f_, std::move(s), host_ops_, &host_at_);
    return s;
  }

  // Polish with the simulator as the judge: a change is kept when the plan still fits and the
  // simulated iteration gets faster. Two kinds, each bounded by `max_evaluations` tries:
  // - kStalls: the tensors whose swap-ins stall the most get, one by one, their alternatives
  //   (fetched earlier, recomputed, kept).
  // - kRecomputes: the recomputed gaps that cost the most per byte get kept (where the peak they
  //   were taken for has come down since) or swapped (where the links, as the greedy left them
  //   booked, hide the copies). The greedy chose them at a peak where nothing cheaper was left; on
  //   ResNet-152 at a third of its peak (A100 profile) those are its bottlenecks' first 1x1
  //   convolutions, 18 us per MiB recomputed against about 3 for its other recomputes. A gap tried
  //   without success is not tried again, and a change whose placement does not fit at once is
  //   rejected without the placement's promotion rounds (most changes that simulate faster here
  //   hold memory longer, and promoting buffers for each was most of the planning time). Then
  //   the host updates' weights that stall get their swap-ins issued earlier. plan_ferry runs
  //   this kind on its winner only, after the kStalls polish of every candidate, so the plans it
  //   compares are those of before. With `swap_out_waits`, the activations whose swap-outs are
  //   waited for come next. With `copy_order`, either kind ends with the order of the copies on
  //   the link (realign_releases, order_weight_swap_ins).
  enum class Polish { kStalls, kRecomputes };
  Result<PlanAttempt> polish(PlanAttempt best, int rounds, int max_evaluations, Polish kind,
                             bool swap_out_waits = false, bool copy_order = false) {
    FERRY_ASSIGN_OR_RETURN(SimResult sim, simulate(best.schedule));
    double best_us = sim.iteration_us;
    int budget = max_evaluations;
    hint_ = best.measure.placement;  // its changes are placed from where it was
    // One try: `change` the decisions, keep the plan if it fits and simulates faster, else `undo`.
    auto try_change = [&](auto&& change, auto&& undo, bool refine) -> Result<bool> {
      --budget;
      ++polish_tries_;
      change();
      FERRY_ASSIGN_OR_RETURN(std::optional<PlanAttempt> plan, try_plan(best_us, refine));
      if (plan) {
        best = std::move(*plan);
        best_us = best_us_;
        return true;
      }
      undo();
      return false;
    };
    // Tries the alternatives of gap `id` (of tensor t) one by one, while the budget lasts; keeps
    // the first that fits and simulates faster. Returns whether one was kept.
    auto try_alternatives = [&](int id, TensorId t, const std::vector<Option>& alts, bool refine) -> Result<bool> {
      // Everything this may change: the gap, and for an offload its tensor's inner gaps (a
      // tensor that stays on the device between iterations never leaves it).
      std::vector<std::pair<int, Option>> kept;
      for (int other : ts_[idx(t)].gaps) kept.emplace_back(other, gaps_[static_cast<size_t>(other)].decided);
      const bool had_copy = ts_[idx(t)].has_copy;
      const OpId out_after = ts_[idx(t)].out_after;
      for (const Option& alt : alts) {
        if (budget <= 0) break;
        auto change = [&] {
          // A swap of a tensor without a copy issues its swap-out where this option booked it.
          if (alt.move == Move::kSwap && !had_copy) ts_[idx(t)].out_after = out_issue(gaps_[static_cast<size_t>(id)], alt);
          gaps_[static_cast<size_t>(id)].decided = alt;
          if (gaps_[static_cast<size_t>(id)].cyclic && alt.move != Move::kSwap)
            for (int other : ts_[idx(t)].gaps) gaps_[static_cast<size_t>(other)].decided = Option{};
          refresh_copies();
        };
        auto undo = [&] {
          for (auto& [other, d] : kept) gaps_[static_cast<size_t>(other)].decided = d;
          ts_[idx(t)].out_after = out_after;
          refresh_copies();
        };
        FERRY_ASSIGN_OR_RETURN(bool accepted, try_change(change, undo, refine));
        if (accepted) return true;
      }
      return false;
    };
    // The tensors that were waited for over 0.5 us (`waits`: sim's per-tensor waits for swap-ins
    // or swap-outs) and satisfy `pick`, the longest wait first, at most kPolishTensorsPerRound.
    auto waiting = [&](const std::vector<double>& waits, auto&& pick) {
      std::vector<std::pair<double, TensorId>> out;
      for (size_t t = 0; t < waits.size(); ++t)
        if (waits[t] > 0.5 && pick(static_cast<TensorId>(t))) out.emplace_back(waits[t], static_cast<TensorId>(t));
      std::sort(out.begin(), out.end(), std::greater<>());
      if (out.size() > kPolishTensorsPerRound) out.resize(kPolishTensorsPerRound);
      return out;
    };
    std::vector<bool> rejected(gaps_.size(), false);  // kRecomputes: tried, nothing kept
    for (int round = 0; round < rounds && budget > 0; ++round) {
      bool improved = false;
      if (kind == Polish::kStalls) {
        for (auto [wait, t] : waiting(sim.swap_in_wait_us, [](TensorId) { return true; }))
          for (int id : ts_[idx(t)].gaps)
            if (gaps_[static_cast<size_t>(id)].move() == Move::kSwap) {
              FERRY_ASSIGN_OR_RETURN(bool kept, try_alternatives(id, t, alternatives(id), true));
              improved = improved || kept;
            }
        if (!improved) break;
        FERRY_ASSIGN_OR_RETURN(sim, simulate(best.schedule));
        continue;
      }
      std::vector<std::pair<double, int>> costly;  // recompute time per byte, gap
      for (size_t id = 0; id < gaps_.size(); ++id) {
        const Gap& gap = gaps_[id];
        if (gap.move() == Move::kRecompute && !rejected[id])
          costly.emplace_back(gap.decided.cost_us / static_cast<double>(std::max<uint64_t>(bytes_of(gap.tensor), 1)),
                              static_cast<int>(id));
      }
      std::sort(costly.begin(), costly.end(), std::greater<>());
      if (costly.size() > kPolishRecomputesPerRound) costly.resize(kPolishRecomputesPerRound);
      for (auto [per_byte, id] : costly) {
        const Gap& gap = gaps_[static_cast<size_t>(id)];
        if (gap.move() != Move::kRecompute) continue;
        std::vector<Option> alts{Option{}};
        if (swaps_allowed() && on_device_until(gap))
          if (Option swap = swap_option(gap, (static_cast<int64_t>(gap.from) + end_of(gap)) / 2); swap.ok)
            alts.push_back(std::move(swap));
        FERRY_ASSIGN_OR_RETURN(bool kept, try_alternatives(id, gap.tensor, alts, false));
        improved = improved || kept;
        rejected[static_cast<size_t>(id)] = !kept;
      }
      // The host updates' weights that stall, longest wait first: each comes back where
      // book_host_traffic() booked its copy; issued 1, 2, 4, ... steps earlier instead.
      if (!host_at_.empty()) {
        FERRY_ASSIGN_OR_RETURN(sim, simulate(best.schedule));
        for (auto [wait, t] : waiting(sim.swap_in_wait_us, [&](TensorId t) { return g_.tensor(t).persistent() && host_at_[idx(t)] > 0; })) {
          const OpId was = host_at_[idx(t)];
          for (int64_t k = 1; k <= 64 && was - k >= 0 && budget > 0; k *= 2) {
            FERRY_ASSIGN_OR_RETURN(bool accepted, try_change([&] { host_at_[idx(t)] = static_cast<OpId>(was - k); },
                                                             [&] { host_at_[idx(t)] = was; }, false));
            if (accepted) {
              improved = true;
              break;
            }
          }
        }
      }
      if (!improved) break;
    }
    // Last, on what the rounds above left (so that their path, and what they find, does not
    // change): the swapped activations whose swap-outs are waited for. The copy queued behind
    // others on the link, and the release after the tensor's last use before its first swapped
    // gap waits for it on the compute stream. That release moves 64, 32, ..., 1 steps later (the
    // first that fits and is faster), or the gap is recomputed or kept instead; rounds until one
    // keeps nothing, in at most kSwapOutWaitTries tries (fewer where max_evaluations is).
    if (kind == Polish::kRecomputes && swap_out_waits) {
      budget = std::min(kSwapOutWaitTries, max_evaluations);  // scaled down on large graphs alike
      for (int round = 0; round < rounds && budget > 0; ++round) {
        FERRY_ASSIGN_OR_RETURN(sim, simulate(best.schedule));
        bool improved = false;
        for (auto [wait, t] : waiting(sim.swap_out_wait_us, [&](TensorId t) { return !g_.tensor(t).persistent(); })) {
          int first = -1;
          for (int id : ts_[idx(t)].gaps) {
            const Gap& gap = gaps_[static_cast<size_t>(id)];
            if (gap.move() == Move::kSwap && !gap.cyclic && (first < 0 || gap.from < gaps_[static_cast<size_t>(first)].from))
              first = id;
          }
          if (first < 0 || budget <= 0) continue;
          const Gap& gap = gaps_[static_cast<size_t>(first)];
          std::vector<Option> alts;
          for (int64_t k = 64; k >= 1; k /= 2) {
            Option o = gap.decided;
            const int64_t after = static_cast<int64_t>(o.release_after) + k;
            if (after + 1 > o.hi1) continue;
            o.release_after = static_cast<OpId>(after);
            o.lo1 = after + 1;
            alts.push_back(o);
          }
          if (Option rec = recompute_option(gap); rec.ok) alts.push_back(std::move(rec));
          alts.push_back(Option{});
          FERRY_ASSIGN_OR_RETURN(bool kept, try_alternatives(first, t, alts, false));
          improved = improved || kept;
        }
        if (!improved) break;
      }
    }
    // Last, in either kind, the order of the copies on the link (FerryTuning::polish_copy_order),
    // with tries of their own.
    if (copy_order) {
      budget = std::min(kSwapOutWaitTries, max_evaluations);
      FERRY_RETURN_IF_ERROR(realign_releases(best, rounds, budget, try_change));
      FERRY_RETURN_IF_ERROR(order_weight_swap_ins(budget, try_change));
    }
    best.notes = summary() + fmt::format("; polished with {} tries, {} simulated", polish_tries_, polish_simulated_);
    return best;
  }

  // The releases that wait for their copy: a host update's gradient (book_host_traffic() releases
  // it where its copy would be done on the fluid link book) and a swapped activation (released
  // after its last use before its first swapped gap). On the simulated link, FIFO in program
  // order, a copy queues behind those issued before it (a bias's gradient behind its weight's),
  // and the release holds the compute stream until it has left. Each round simulates the plan and
  // moves such releases to the first step that starts after their copy is done there (a host
  // update, issued with its gradient's release, moves with it): the longest waits first, all of
  // them in one try, else the longer half, quarter, ...; where none is kept, one at a time
  // while `budget` lasts. `best` is the polish's plan, which `try_change` replaces.
  template <typename TryChange>
  Status realign_releases(const PlanAttempt& best, int rounds, int& budget, TryChange& try_change) {
    struct Shift {
      double wait = 0;
      TensorId tensor = kNoTensor;
      int gap = -1;  // the activation's gap whose release moves; -1: a host update's gradient
      OpId to = 0;
      bool operator<(const Shift& o) const { return wait > o.wait; }
    };
    std::vector<bool> host_grad(g_.tensors.size(), false);
    for (OpId u : host_ops_) host_grad[idx(g_.op(u).inputs[1])] = true;
    for (int round = 0; round < rounds && budget > 0; ++round) {
      FERRY_ASSIGN_OR_RETURN(SimResult sim, simulate(best.schedule));
      // The release came after step `was`'s op and waited `wait` for the copy; without that wait
      // the later ops start `wait` earlier (and more, where later waits go too: the next round
      // sees those). It goes after the last op that starts before the copy is done there.
      auto target = [&](OpId was, double wait) {
        const double done = sim.step_start_us[static_cast<size_t>(was)] + f_.op_us[static_cast<size_t>(was)] + wait;
        OpId to = was;
        while (static_cast<size_t>(to) + 1 < n_ && sim.step_start_us[static_cast<size_t>(to) + 1] - wait < done) ++to;
        return to;
      };
      std::vector<Shift> moves;
      for (size_t t = 0; t < g_.tensors.size(); ++t) {
        const double wait = sim.swap_out_wait_us[t];
        if (wait <= 0.5 || g_.tensors[t].persistent()) continue;
        if (host_grad[t]) {
          const OpId was = host_at_[t];
          if (was == kNoOp) continue;
          if (const OpId to = target(was, wait); to != was) moves.push_back({wait, static_cast<TensorId>(t), -1, to});
          continue;
        }
        int first = -1;
        for (int id : ts_[t].gaps) {
          const Gap& gap = gaps_[static_cast<size_t>(id)];
          if (gap.move() == Move::kSwap && !gap.cyclic && (first < 0 || gap.from < gaps_[static_cast<size_t>(first)].from))
            first = id;
        }
        if (first < 0) continue;
        const Option& o = gaps_[static_cast<size_t>(first)].decided;
        const OpId to = static_cast<OpId>(std::min<int64_t>(target(o.release_after, wait), o.hi1 - 1));
        if (to > o.release_after) moves.push_back({wait, static_cast<TensorId>(t), first, to});
      }
      if (moves.empty()) break;
      std::sort(moves.begin(), moves.end());
      const std::vector<OpId> host_before = host_at_;
      std::vector<std::pair<int, Option>> gaps_before;
      for (const Shift& m : moves)
        if (m.gap >= 0) gaps_before.emplace_back(m.gap, gaps_[static_cast<size_t>(m.gap)].decided);
      auto apply = [&](size_t first, size_t count) {  // moves[first, first + count)
        for (size_t i = first; i < first + count; ++i) {
          const Shift& m = moves[i];
          if (m.gap < 0) {
            host_at_[idx(m.tensor)] = m.to;
          } else {
            Option& o = gaps_[static_cast<size_t>(m.gap)].decided;
            o.release_after = m.to;
            o.lo1 = static_cast<int64_t>(m.to) + 1;
          }
        }
        refresh_copies();
      };
      auto undo = [&] {
        host_at_ = host_before;
        for (auto& [id, d] : gaps_before) gaps_[static_cast<size_t>(id)].decided = d;
        refresh_copies();
      };
      bool kept = false;
      for (size_t count = moves.size(); count >= 1 && budget > 0 && !kept; count /= 2) {
        FERRY_ASSIGN_OR_RETURN(kept, try_change([&] { apply(0, count); }, undo, true));
      }
      if (kept) continue;
      // One at a time; the first kept ends the round (`undo` restores what the round began with).
      for (size_t i = 1; i < moves.size() && budget > 0 && !kept; ++i) {
        FERRY_ASSIGN_OR_RETURN(kept, try_change([&] { apply(i, 1); }, undo, false));
      }
      if (!kept) break;
    }
    return Status::Ok();
  }

  // The host updates' weights come back in the order they are first read. book_host_traffic()
  // books each weight's copy backwards from its first read on the fluid link book, where a weight
  // read later can find a free slot before one read earlier and be issued first; the simulated
  // link serves copies in issue order, so the earlier weight then waits behind it (GPT-2's
  // attention output projection behind the next block's weights). One try: each weight is issued
  // no later than every weight first read after it.
  template <typename TryChange>
  Status order_weight_swap_ins(int& budget, TryChange& try_change) {
    if (host_weights_.empty() || budget <= 0) return Status::Ok();
    const std::vector<OpId> before = host_at_;
    std::vector<OpId> ordered = host_at_;
    OpId latest = static_cast<OpId>(n_);
    bool changed = false;
    for (auto it = host_weights_.rbegin(); it != host_weights_.rend(); ++it) {
      OpId& at = ordered[idx(it->second)];
      if (at > latest) {
        at = latest;
        changed = true;
      }
      latest = at;
    }
    if (!changed) return Status::Ok();
    return try_change([&] { host_at_ = ordered; }, [&] { host_at_ = before; }, true).status();
  }

  // What else a decided swap could be: fetched earlier (1, 2, 4, ... steps), recomputed, kept.
  std::vector<Option> alternatives(int id) const {
    const Gap& gap = gaps_[static_cast<size_t>(id)];
    std::vector<Option> out;
    const Option& d = gap.decided;
    for (int64_t k = 1; k <= 64; k *= 2) {
      Option o = d;
      o.in = {};
      const int64_t back = static_cast<int64_t>(d.fetch_before) - k;
      if (gap.cyclic ? back < 0 : back <= d.release_after + 1) break;
      o.fetch_before = static_cast<OpId>(back);
      if (gap.cyclic) o.hi2 = back - 1; else o.hi1 = back - 1;
      out.push_back(o);
    }
    const Option rec = recompute_option(gap);
    if (rec.ok) out.push_back(rec);
    out.push_back(Option{});  // keep
    return out;
  }

  // A transient has a swap-out exactly when one of its gaps is swapped; a persistent tensor is
  // offloaded when its cyclic gap is.
  void refresh_copies() {
    for (size_t t = 0; t < ts_.size(); ++t) {
      TensorState& st = ts_[t];
      bool any = false;
      for (int id : st.gaps) {
        const Gap& g = gaps_[static_cast<size_t>(id)];
        if (g.move() == Move::kSwap && (!g_.tensor(static_cast<TensorId>(t)).persistent() || g.cyclic)) any = true;
      }
      st.has_copy = any;
      if (any && st.out_after == kNoOp && !g_.tensor(static_cast<TensorId>(t)).persistent())
        st.out_after = f_.producer[t];
    }
  }

  // The plan of the current decisions if it fits and simulates faster than `than_us`.
  // `refine`: the placement may promote buffers to fit (plan_memory_sharing); without, a plan
  // that does not fit at once is rejected.
  Result<std::optional<PlanAttempt>> try_plan(double than_us, bool refine) {
    PlanAttempt a;
    FERRY_ASSIGN_OR_RETURN(a.schedule, complete_schedule(f_, intent()));
    a.schedule.placement_hint = hint_;  // Note [Warm start]: from the last accepted plan's placement
    // Lowered once for the live bytes, the simulation and the placement.
    FERRY_ASSIGN_OR_RETURN(const Program program, lower_for_planning(f_, a.schedule));
    FERRY_ASSIGN_OR_RETURN(a.measure, measure_program(f_, a.schedule, program, /*place=*/false));
    if (a.measure.live_peak_bytes > ctx_.budget_bytes) return std::optional<PlanAttempt>();
    ++polish_simulated_;
    FERRY_ASSIGN_OR_RETURN(SimResult sim, simulate_for_planning(ctx_, f_, a.schedule, &program));
    if (sim.iteration_us >= than_us * (1 - 1e-6)) return std::optional<PlanAttempt>();
    FERRY_ASSIGN_OR_RETURN(a.measure,
                           measure_program(f_, a.schedule, program, /*place=*/true, ctx_.budget_bytes, refine));
    a.fits = a.measure.device_bytes <= ctx_.budget_bytes;
    if (!a.fits) return std::optional<PlanAttempt>();
    best_us_ = sim.iteration_us;
    hint_ = a.measure.placement;
    return std::optional<PlanAttempt>(std::move(a));
  }

  Result<SimResult> simulate(const Schedule& s) const { return simulate_for_planning(ctx_, f_, s); }

  std::string summary() const {
    size_t swaps = 0, recomputes = 0, offloaded = 0;
    for (const Gap& g : gaps_) {
      if (g.move() == Move::kRecompute) ++recomputes;
      if (g.move() == Move::kSwap && !g_.tensor(g.tensor).persistent()) ++swaps;
      if (g.move() == Move::kSwap && g.cyclic) ++offloaded;
    }
    std::string tight = !tight_ ? ""
                        : fmt::format(" (tight{}, {} offloaded for their inner gaps)", recompute_ ? "" : ", swaps only",
                                      inner_offload_count_);
    if (inner_offloads_) tight += fmt::format(" ({} offloaded for their inner gaps)", inner_offload_count_);
    if (!host_inner_gaps_) tight += " (host updates' weights stay between their reads)";
    if (guide_ != nullptr) tight += fmt::format(" (LP-guided, penalty {})", guide_->penalty);
    if (kept_sources_) {
      const auto kept = std::count_if(extended_until_.begin(), extended_until_.end(), [](OpId u) { return u != kNoOp; });
      tight += fmt::format(" (kept sources: {} kept to their recompute, {} recomputes pulled forward)", kept, pulled_);
    }
    return fmt::format("link weight {}{}: {} gaps swapped, {} recomputed, {} persistent tensors offloaded, {} updates on "
                       "the host; link {:.0f}% booked",
                       link_weight_, tight, swaps, recomputes, offloaded, host_ops_.size(), 100 * out_link_->utilisation());
  }

  std::vector<PlanDecision> explain() const {
    std::vector<PlanDecision> out;
    for (const Gap& g : gaps_) {
      if (g.move() == Move::kKeep) continue;
      PlanDecision d;
      d.tensor = g.tensor;
      d.move = g.move() == Move::kRecompute ? "recompute" : (g.cyclic ? "offload" : "swap");
      d.leaves_after = g.release_after();
      d.back_before = g.fetch_before();
      d.bytes = bytes_of(g.tensor);
      d.away_steps = g.decided.steps_away();
      d.cost_us = g.decided.move == Move::kRecompute ? g.decided.cost_us : g.decided.link_us;
      d.alternative = g.alternative;
      out.push_back(std::move(d));
    }
    return out;
  }

  const PlanContext& ctx_;
  const PlanFacts& f_;
  const Graph& g_;
  const size_t n_;
  const double link_weight_;
  const bool count_interference_;
  const bool tight_;
  const bool recompute_;
  const bool host_inner_gaps_;  // a host update's operands may leave between their reads (inner gaps)
  // Recomputes read what is on the device: a forward-only input a quarter of the recomputed
  // tensor's size or less is kept from its last forward use to the recompute (extended), not
  // recomputed along; a source that is away by a decided recompute is recomputed before (pulled).
  const bool kept_sources_;
  // Where a persistent tensor still lives on the device, its inner gaps are candidates, reached by
  // offloading it first (Note [Inner offloads]); tight_ does the same with forced copies.
  const bool inner_offloads_;
  const LpGuide* guide_;  // LP-guided variant (Note [LP-guided greedy]); null: none
  std::vector<OpId> extended_until_;  // per extended tensor: the last step the profile keeps it to
  const std::vector<OpId> host_ops_;
  std::vector<bool> host_operand_;  // per tensor: a persistent operand of a host update
  std::vector<OpId> host_at_;  // per tensor: a host update's weight: swap-in step; gradient: release step
  // (first device read, weight) of the host updates' weights read on the device, sorted
  // (book_host_traffic(), which gives each its host_at_).
  std::vector<std::pair<OpId, TensorId>> host_weights_;
  std::vector<double> start_us_;
  std::optional<LinkBook> out_link_, in_link_;
  std::optional<StepTree> tree_;
  std::optional<CandidateIndex> index_;
  std::vector<TensorState> ts_;
  TensorAccesses acc_;  // per tensor: the steps that touch it, and whether an update writes it (gaps.h)
  std::vector<std::vector<OpId>> pins_;  // per tensor: steps where a decided recompute reads it
  std::vector<Gap> gaps_;
  std::vector<size_t> exact_stamp_;  // per gap: decided_ + 1 when its key is exact for this state
  size_t decided_ = 0;
  size_t pulled_ = 0;  // decided recomputes moved forward to a recompute that reads them (pull)
  size_t inner_offload_count_ = 0;  // persistent tensors offloaded to take an inner gap away
  std::vector<bool> banned_;  // per tensor (empty: none): kept on the device (ban())
};

}  // namespace
}  // namespace planner

bool ferry_wants_lp_solution(const PlanContext& ctx, const PlanFacts& facts, const FerryTuning& tuning) {
  return ctx.budget_bytes != 0 && tuning.lp_guided && !tuning.lp_guide_penalties.empty() &&
         facts.g().ops.size() <= tuning.lp_guided_max_ops;
}

Result<PlanAttempt> plan_ferry(const PlanContext& ctx, const PlanFacts& facts, const FerryTuning& tuning,
                               std::vector<PlanDecision>* decisions, const LowerBound* given_bound) {
  // A variant's plan, the planner that made it (for the polish), its simulated time (infinity when
  // it does not fit) and its host updates.
  // How a variant's planner was made (consider's arguments), so that it can be made again.
  struct Config {
    double weight = 0;
    bool count_interference = true, tight = false, recompute = true, host_inner_gaps = true, kept_sources = false;
    const planner::LpGuide* guide = nullptr;
    bool inner_offloads = false;
  };
  struct Variant {
    std::optional<PlanAttempt> attempt;
    std::unique_ptr<planner::Planner> planner;
    double us = std::numeric_limits<double>::infinity();
    std::vector<OpId> host_ops;
    Config config;
  };
  // Moves a variant out and leaves an empty one behind (a moved-from optional still holds a value).
  auto take = [](Variant& v) {
    Variant out = std::move(v);
    v = Variant{};
    return out;
  };
  Variant best;
  // The fastest fitting plan with another set of host updates than the winner's: polished too,
  // since the polish can reorder close candidates.
  Variant second;
  // The fastest fitting plan that keeps the host updates' weights on the device between their
  // reads (host_inner_variants): apart from best and second, so that those come out as without
  // these variants; polished too, and taken only when it is faster after its polish.
  Variant kept_weights;
  // The fastest fitting plan whose recomputes read what is on the device (kept_source_variants):
  // apart from the others, polished too, and taken only when it is faster after its polish.
  Variant sourced;
  // The fastest fitting LP-guided plan, over every penalty (lp_guided, Note [LP-guided greedy]):
  // apart too. The guides (and their values) outlive the planners, which the polish below still runs.
  planner::LpValues guide_values;
  std::vector<planner::LpGuide> guides;
  Variant guided;
  // Every link weight with all updates on the device, and (where the profile has a host optimizer
  // rate) with every update that can run there on the host: the simulator picks.
  // A third set runs on the host only the updates the host lane finishes behind the backward pass.
  const std::vector<OpId> host_all = facts.host_updatable;
  std::vector<std::vector<OpId>> host_sets{{}};
  std::vector<OpId> split_order;
  if (!host_all.empty() && ctx.budget_bytes != 0 && tuning.host_updates) {
    host_sets.push_back(host_all);
    std::vector<OpId> shadow = planner::host_ops_in_shadow(ctx, facts, host_all);
    if (!shadow.empty() && shadow != host_all) host_sets.push_back(std::move(shadow));
    split_order = planner::host_split_order(ctx, facts, host_all);
  }
  // Plans one variant and keeps it when it beats the best so far; returns its simulated time
  // (infinity when it does not fit).
  // PolicyOptions::first_fit (budget searches): the first variant that fits ends the search; the
  // variants before it run as without first_fit, and so whether one fits is the same.
  const bool first_fit = ctx.options.first_fit && ctx.budget_bytes != 0;
  std::optional<PlanAttempt> fitted;
  auto consider = [&](double weight, const std::vector<OpId>& host_ops, bool count_interference, bool tight = false,
                      bool recompute = true, bool host_inner_gaps = true, bool kept_sources = false,
                      const planner::LpGuide* guide = nullptr, bool inner_offloads = false) -> Result<double> {
    if (fitted) return std::numeric_limits<double>::infinity();
    const Config config{weight, count_interference, tight, recompute, host_inner_gaps, kept_sources, guide, inner_offloads};
    auto p = std::make_unique<planner::Planner>(ctx, facts, weight, host_ops, count_interference, tight, recompute,
                                                host_inner_gaps, kept_sources, guide, inner_offloads);
    FERRY_ASSIGN_OR_RETURN(PlanAttempt a, p->run(nullptr));
    if (first_fit && a.fits) {
      fitted = std::move(a);
      return std::numeric_limits<double>::infinity();
    }
    double us = std::numeric_limits<double>::infinity();
    if (a.fits) {
      FERRY_ASSIGN_OR_RETURN(SimResult sim, simulate_for_planning(ctx, facts, a.schedule));
      us = sim.iteration_us;
    }
    if (guide != nullptr) {
      if (a.fits && us < guided.us) guided = Variant{std::move(a), std::move(p), us, host_ops, config};
      return us;
    }
    if (kept_sources) {
      if (a.fits && us < sourced.us) sourced = Variant{std::move(a), std::move(p), us, host_ops, config};
      return us;
    }
    if (!host_inner_gaps) {
      if (a.fits && us < kept_weights.us) kept_weights = Variant{std::move(a), std::move(p), us, host_ops, config};
      return us;
    }
    const std::optional<PlanAttempt>& b = best.attempt;
    const bool better = !b || (a.fits && !b->fits) || (a.fits && b->fits && us < best.us) ||
                        (!a.fits && !b->fits && a.measure.device_bytes < b->measure.device_bytes);
    if (better) {
      if (b && b->fits && best.host_ops != host_ops) second = std::move(best);
      best = Variant{std::move(a), std::move(p), us, host_ops, config};
    } else if (a.fits && us < second.us && best.host_ops != host_ops) {
      second = Variant{std::move(a), std::move(p), us, host_ops, config};
    }
    return us;
  };
  // Where copies slow the kernels, each also with hidden copies scored as free: the greedy's
  // per-gap costs are estimates, and the simulator, which stretches ops by the copies beside them,
  // judges both.
  for (bool count : {true, false}) {
    if (!count && !ctx.cost.has_interference()) break;
    for (const std::vector<OpId>& set : host_sets)
      for (double weight : tuning.link_weights) {
        FERRY_RETURN_IF_ERROR(consider(weight, set, count).status());
        if (ctx.budget_bytes == 0) break;
      }
    if (ctx.budget_bytes == 0) break;
  }
  // With updates on the host, their weights' gaps between a forward and a backward read are taken
  // by the greedy like any other gap; on a link the activations need, the weights' round trips can
  // cost more than they free (ResNet-152 at 33%, V100 profile: 150.7 ms with them, 144.6 without;
  // at other cells less than they free, and a variant ahead before the polish can be behind after
  // it): each host set once more with those weights kept on the device between their reads,
  // compared with the rest only after both are polished.
  if (ctx.budget_bytes != 0 && tuning.host_inner_variants)
    for (const std::vector<OpId>& set : host_sets)
      if (!set.empty())
        for (double weight : tuning.link_weights)
          FERRY_RETURN_IF_ERROR(consider(weight, set, true, false, true, /*host_inner_gaps=*/false).status());
  // Recomputes that read what is on the device (Planner::kept_sources_): every link weight with
  // the host set of the fastest plan so far, both with and without its weights' inner gaps. Where
  // a recompute's forward-only inputs are much smaller than it (DenseNet: a layer's concatenation
  // of the block's earlier features), keeping them beats recomputing them along; where a source
  // was taken away by a recompute first, recomputing it earlier beats swapping the reader.
  if (ctx.budget_bytes != 0 && tuning.kept_source_variants && ctx.allow_recompute) {
    const std::vector<OpId> set = best.host_ops;
    for (bool inner : {true, false}) {
      if (!inner && (set.empty() || !tuning.host_inner_variants)) continue;
      for (double weight : tuning.link_weights)
        FERRY_RETURN_IF_ERROR(consider(weight, set, true, false, true, inner, /*kept_sources=*/true).status());
    }
  }
  // Host/link splits (host_split_order): the first k updates on the host, the rest on the device.
  // How much of the device's state must cross the link depends on the budget, so k is searched:
  // the cost model's balance (balanced_host_split) and a tenth of the updates either side with
  // every link weight; tenths of the updates with the middle weight, then twentieths around the
  // fastest, then the other weights at the three fastest k. Each split twice: as the other
  // variants, and with inner offloads (Note [Inner offloads]); a k's time is the faster of the two.
  if (!split_order.empty() && !tuning.link_weights.empty()) {
    const size_t n = split_order.size();
    const double probe = tuning.link_weights[tuning.link_weights.size() / 2];
    // A split as the other variants and with inner offloads; the faster of the two.
    auto consider_split = [&](double weight, const std::vector<OpId>& set) -> Result<double> {
      FERRY_ASSIGN_OR_RETURN(const double plain, consider(weight, set, true));
      if (!tuning.inner_offload_variants) return plain;
      FERRY_ASSIGN_OR_RETURN(const double inner,
                             consider(weight, set, true, false, true, true, false, nullptr, /*inner_offloads=*/true));
      return std::min(plain, inner);
    };
    std::vector<double> tried(n + 1, -1);  // per k: simulated time (-1: not tried)
    auto prefix = [&](size_t k) {
      std::vector<OpId> set(split_order.begin(), split_order.begin() + static_cast<std::ptrdiff_t>(k));
      std::sort(set.begin(), set.end());
      return set;
    };
    auto try_k = [&](size_t k) -> Status {
      if (k == 0 || k >= n || tried[k] >= 0) return Status::Ok();
      FERRY_ASSIGN_OR_RETURN(tried[k], consider_split(probe, prefix(k)));
      return Status::Ok();
    };
    auto fastest = [&] {
      size_t at = 0;
      for (size_t k = 1; k < n; ++k)
        if (tried[k] >= 0 && (at == 0 || tried[k] < tried[at])) at = k;
      return at;
    };
    std::vector<bool> every_weight(n + 1, false);
    const size_t balanced = planner::balanced_host_split(ctx, facts, split_order);
    for (size_t k : {balanced, balanced > n / 10 ? balanced - n / 10 : 0, balanced + n / 10}) {
      if (k == 0 || k >= n || every_weight[k]) continue;
      every_weight[k] = true;
      for (double weight : tuning.link_weights) FERRY_RETURN_IF_ERROR(consider_split(weight, prefix(k)).status());
    }
    for (size_t i = 1; i < 10; ++i) FERRY_RETURN_IF_ERROR(try_k(n * i / 10));
    if (size_t k = fastest(); k != 0) {
      FERRY_RETURN_IF_ERROR(try_k(k > n / 20 ? k - n / 20 : 0));
      FERRY_RETURN_IF_ERROR(try_k(k + n / 20));
    }
    // The probe's ranking is noisy across weights: the three fastest k get every weight.
    for (int round = 0; round < 3; ++round) {
      const size_t k = fastest();
      if (k == 0 || !std::isfinite(tried[k])) break;
      for (double weight : tuning.link_weights)
        if (weight != probe && !every_weight[k]) FERRY_RETURN_IF_ERROR(consider_split(weight, prefix(k)).status());
      tried[k] = std::numeric_limits<double>::infinity();  // out of the next rounds
    }
  }
  // LP-guided variants (Note [LP-guided greedy]): the greedy scored by the bound's relaxation, at
  // each penalty, with every link weight, kept sources off and on, the weights' inner gaps open and
  // closed, for the host sets of the fastest plan so far and of the fastest variants apart; the
  // fastest of them is polished (below). Not where a plan so far is within kGuidedMinGap of the
  // bound (nothing left to gain). On graphs up to lp_guided_max_ops ops. The relaxation is solved
  // here unless the caller has (given_bound: the portfolio solves it before its workers start and
  // hands it on in its plan, PlanReport::bound, which `ferry plan` reports without solving it again).
  if (ferry_wants_lp_solution(ctx, facts, tuning) && !fitted) {
    constexpr double kGuidedMinGap = 1.01;
    // A solver that fails (plan/contained.h: it crashed or did not answer) leaves the guided
    // variants out; the plans so far stand.
    std::optional<LowerBound> solved;
    if (given_bound == nullptr)
      if (Result<LowerBound> b = plan_lower_bound(ctx, facts, LowerBoundOptions{.keep_solution = true}); b.ok())
        solved = std::move(*b);
    const LowerBound* bound = given_bound != nullptr ? given_bound : solved ? &*solved : nullptr;
    const double fastest = std::min({best.us, kept_weights.us, sourced.us});
    if (bound != nullptr && !bound->solution.empty() && !(fastest <= kGuidedMinGap * bound->us)) {
      guide_values = planner::lp_values(*bound);
      guides.reserve(tuning.lp_guide_penalties.size());  // no reallocation: the planners point into it
      for (float penalty : tuning.lp_guide_penalties) guides.push_back({&guide_values, penalty});
      std::vector<std::vector<OpId>> sets{best.host_ops};
      for (const Variant* v : {&kept_weights, &sourced})
        if (v->attempt && std::find(sets.begin(), sets.end(), v->host_ops) == sets.end()) sets.push_back(v->host_ops);
      for (const planner::LpGuide& guide : guides)
        for (const std::vector<OpId>& set : sets)
          for (bool inner : {true, false})
            for (bool kept : {false, true}) {
              if (!inner && (set.empty() || !tuning.host_inner_variants)) continue;
              if (kept && !(tuning.kept_source_variants && ctx.allow_recompute)) continue;
              for (double weight : tuning.link_weights)
                FERRY_RETURN_IF_ERROR(consider(weight, set, true, false, true, inner, kept, &guide).status());
            }
    }
  }
  // Nothing fitted: tight variants, every weight and host set. Near the largest working set of
  // one op, a swap-out that a saturated link books late keeps its tensor on the device where it
  // must already be gone (tight: issue it earlier and wait), and a recompute's sources, on the
  // device where it runs beside its reader's working set, can be what does not fit (the greedy
  // never takes a recompute back): also swaps only. Only here, so that no budget at which the
  // main variants fit gets another plan.
  // Before them, and beside them, the inner offloads of the splits (Note [Inner offloads]) for
  // every host set and weight: a greedy stuck where a persistent tensor's inner gap would free
  // the step (an MLP's large weights between their forward and backward reads, all updates on
  // the device) fits with booked copies, where tight would force them.
  const bool none_fitted = !best.attempt->fits && ctx.budget_bytes != 0 && !ctx.recompute_only;
  if (none_fitted && tuning.inner_offload_variants)
    for (const std::vector<OpId>& set : host_sets)
      for (double weight : tuning.link_weights)
        FERRY_RETURN_IF_ERROR(consider(weight, set, true, false, true, true, false, nullptr, /*inner_offloads=*/true).status());
  if (none_fitted)
    for (bool recompute : {true, false})
      for (const std::vector<OpId>& set : host_sets)
        for (double weight : tuning.link_weights)
          FERRY_RETURN_IF_ERROR(consider(weight, set, true, /*tight=*/true, recompute).status());
  if (fitted) {
    FERRY_ASSIGN_OR_RETURN(fitted->measure, measure_schedule(facts, fitted->schedule));
    fitted->notes = "the first plan found that fits (a budget search's probe); " + fitted->notes;
    return std::move(*fitted);
  }
  using Polish = planner::Planner::Polish;
  // The plan a variant apart replaced: its recompute polish may make it the faster again.
  Variant replaced;
  // Note [Far behind]
  //   Several candidates are polished (the two fastest host sets, the variants apart, the plan a
  //   variant apart replaced, the guided and the stall-ban variants) because a polish can reorder
  //   them: over the benchmark's matrix (2026-12-07, predicted) a stall polish took a candidate
  //   down by up to 1.38x (V100 GPT-2 XL at 25%), and one 25% behind the fastest came out ahead of
  //   it (A100 ResNet-152 at 33%). But on the tightest CNN cells most of the planning went into
  //   polishing candidates 1.5-2.7x behind (DenseNet-264 at 10%: up to 13 s each), whose polish
  //   gained 0-16% and never made one the winner. No polish can be proven wasted before it runs
  //   (the stall polish never takes work off the compute stream, but the recompute polish after it
  //   can), so the rule is a margin over what was seen: a candidate more than 1.5x behind the
  //   fastest other candidate's current time is not polished (FerryTuning::polish_far_behind).
  //   Every candidate's time only falls (a polish keeps a change only where it simulates faster)
  //   and each meets the winner in one of the comparisons below, so that time is one the winner
  //   will beat or match. (For the stall-ban variant, which is not in the list, it is the winner's
  //   own time: every other candidate lost to it.)
  auto lead_us = [&](const Variant& self) {
    double lead = std::numeric_limits<double>::infinity();
    for (const Variant* v : {&best, &second, &kept_weights, &sourced, &guided, &replaced})
      if (v != &self && v->attempt && v->attempt->fits) lead = std::min(lead, v->us);
    return lead;
  };
  size_t far_behind = 0;  // polishes left out
  // Polishes v and sets its time; nothing where v is more than polish_far_behind times the fastest
  // other candidate's time.
  auto polish = [&](Variant& v, Polish kind = Polish::kStalls) -> Status {
    if (tuning.polish_far_behind > 0 && v.us > tuning.polish_far_behind * lead_us(v)) {
      ++far_behind;
      return Status::Ok();
    }
    // Each try lowers (and mostly simulates) the whole iteration: the winner's polish gets its
    // full budget up to 2,000 ops and proportionally fewer tries above (at least 16).
    const int64_t ops = static_cast<int64_t>(facts.g().ops.size());
    const int tries = kind == Polish::kStalls ? tuning.max_polish_simulations
                      : ops <= 2000 ? tuning.max_recompute_polish_tries
                                    : static_cast<int>(std::max<int64_t>(
                                          std::min<int64_t>(16, tuning.max_recompute_polish_tries),
                                          tuning.max_recompute_polish_tries * int64_t{2000} / ops));
    FERRY_ASSIGN_OR_RETURN(v.attempt, v.planner->polish(std::move(*v.attempt), tuning.repair_rounds, tries, kind,
                                                        tuning.polish_swap_out_waits, tuning.polish_copy_order));
    v.us = std::numeric_limits<double>::infinity();
    if (v.attempt->fits) {
      FERRY_ASSIGN_OR_RETURN(SimResult sim, simulate_for_planning(ctx, facts, v.attempt->schedule));
      v.us = sim.iteration_us;
    }
    return Status::Ok();
  };
  const bool polishing = ctx.budget_bytes != 0 && tuning.repair_rounds > 0;
  if (best.attempt->fits && polishing) {
    FERRY_RETURN_IF_ERROR(polish(best));
    if (second.attempt) {
      FERRY_RETURN_IF_ERROR(polish(second));
      if (second.attempt->fits && second.us < best.us) best = take(second);
    }
  }
  for (Variant* apart : {&kept_weights, &sourced}) {
    if (!apart->attempt) continue;
    if (polishing) FERRY_RETURN_IF_ERROR(polish(*apart));
    if (apart->attempt->fits && (!best.attempt->fits || apart->us < best.us)) {
      if (best.attempt->fits) replaced = take(best);
      best = take(*apart);
    }
  }
  // The costly recomputes of the winner only (each candidate polished so would triple its time),
  // and of the plan a variant apart replaced, which is taken back where it is then faster.
  if (best.attempt->fits && polishing && tuning.max_recompute_polish_tries > 0) {
    FERRY_RETURN_IF_ERROR(polish(best, Polish::kRecomputes));
    if (replaced.attempt) {
      FERRY_RETURN_IF_ERROR(polish(replaced, Polish::kRecomputes));
      if (replaced.attempt->fits && replaced.us < best.us) best = take(replaced);
    }
  }
  // The LP-guided variant last, with both polishes, against the winner after both of its own: it
  // replaces the winner only where it is then faster, so no plan gets slower by it. Its recompute
  // polish runs only where its stall polish left it within kGuidedPolishSlack of the winner (on
  // the transformer cells it trails by 5-10%, and that polish was never seen to close such a gap).
  // One candidate over every penalty: a stall polish per penalty cost more planning time and gave
  // the same plans on the five cells compared (ResNet-152 on the V100 and H100 profiles,
  // DenseNet-264, BERT-large, GPT-2 medium).
  if (guided.attempt) {
    constexpr double kGuidedPolishSlack = 1.02;
    if (polishing) FERRY_RETURN_IF_ERROR(polish(guided));
    if (polishing && guided.attempt->fits && guided.us < kGuidedPolishSlack * best.us &&
        tuning.max_recompute_polish_tries > 0)
      FERRY_RETURN_IF_ERROR(polish(guided, Polish::kRecomputes));
    if (guided.attempt->fits && guided.us < best.us) best = take(guided);
  }
  // Note [Stall bans]
  //   The greedy scores a gap by its estimated cost per byte at the peak step. Where a copy has no
  //   window (a gradient read one step after it is made), the estimate is the copy's time as a
  //   stall, and on a link that other copies keep busy the simulated wait is longer than that; a
  //   weight's inner gap at the same peaks, reached by offloading it (Note [Inner offloads]), is
  //   estimated dearer per byte and loses. On a generated 7-layer MLP at 50% (cpu-local, this
  //   machine's backend sizes) the winner swapped three 2 MiB input gradients for one step each,
  //   waiting 1.1 ms for them, where ferry-exact offloads three weights: 12.83 ms against 12.29.
  //   So the winner's variant is planned once more with the transients its simulation waits for
  //   longest (at most kMaxStallBans, where they wait kMinBannedWait of the iteration or more)
  //   kept on the device: its greedy then takes other gaps at those peaks. Where the winner's
  //   variant has no inner offloads, each set is planned with them too: keeping the gradients
  //   frees nothing else at those peaks, and the weights' inner gaps can only be taken once they
  //   are offloaded (a generated 5-layer Adam MLP at 45%, logical sizes: 3,191 us against
  //   ferry-exact's 2,858 with the bans on the winner's own variant only, 2,786 with both). The
  //   plan is polished like the winner and taken only where it fits and then simulates faster.
  if (best.attempt->fits && polishing && tuning.stall_ban_variant && !ctx.recompute_only) {
    constexpr size_t kMaxStallBans = 3;
    constexpr double kMinBannedWait = 0.01;
    FERRY_ASSIGN_OR_RETURN(const SimResult sim, simulate_for_planning(ctx, facts, best.attempt->schedule));
    std::vector<std::pair<double, TensorId>> waits;
    for (size_t t = 0; t < sim.swap_in_wait_us.size(); ++t) {
      const double w = sim.swap_in_wait_us[t] + (t < sim.swap_out_wait_us.size() ? sim.swap_out_wait_us[t] : 0.0);
      if (w > 0.5 && !facts.g().tensors[t].persistent()) waits.emplace_back(w, static_cast<TensorId>(t));
    }
    std::sort(waits.begin(), waits.end(), std::greater<>());
    if (waits.size() > kMaxStallBans) waits.resize(kMaxStallBans);
    double waited = 0;
    std::vector<TensorId> longest;
    for (auto [w, t] : waits) {
      waited += w;
      longest.push_back(t);
    }
    // All of them kept, and each alone: keeping all can leave a peak where nothing else can go.
    std::vector<std::vector<TensorId>> sets;
    if (longest.size() > 1) sets.push_back(longest);
    for (TensorId t : longest) sets.push_back({t});
    if (waited < kMinBannedWait * best.us) sets.clear();
    Variant banned;  // the fastest fitting plan over the sets, before its polish
    size_t banned_count = 0;
    for (const std::vector<TensorId>& set : sets)
      for (bool inner : {false, true}) {
        Config c = best.config;
        if (inner) {
          if (c.inner_offloads || !tuning.inner_offload_variants) continue;
          c.inner_offloads = true;
        }
        auto p = std::make_unique<planner::Planner>(ctx, facts, c.weight, best.host_ops, c.count_interference, c.tight,
                                                    c.recompute, c.host_inner_gaps, c.kept_sources, c.guide,
                                                    c.inner_offloads);
        p->ban(set);
        FERRY_ASSIGN_OR_RETURN(PlanAttempt a, p->run(nullptr));
        if (!a.fits) continue;
        FERRY_ASSIGN_OR_RETURN(const SimResult s, simulate_for_planning(ctx, facts, a.schedule));
        if (s.iteration_us < banned.us) {
          banned = Variant{std::move(a), std::move(p), s.iteration_us, best.host_ops, c};
          banned_count = set.size();
        }
      }
    if (banned.attempt) {
      FERRY_RETURN_IF_ERROR(polish(banned));
      if (banned.attempt->fits && banned.us < best.us && tuning.max_recompute_polish_tries > 0)
        FERRY_RETURN_IF_ERROR(polish(banned, Polish::kRecomputes));
      if (banned.attempt->fits && banned.us < best.us) {
        banned.attempt->notes +=
            fmt::format("; {} stalled transient{} kept on the device (Note [Stall bans])", banned_count,
                        banned_count == 1 ? "" : "s");
        best = take(banned);
      }
    }
  }
  PlanAttempt& plan = *best.attempt;
  if (far_behind > 0)
    plan.notes += fmt::format("; {} polish{} of candidates far behind left out (Note [Far behind])", far_behind,
                              far_behind == 1 ? "" : "es");
  if (decisions != nullptr) *decisions = best.planner->explain();
  // The rounds placed with a shortcut (the first placement within the budget); report the
  // smallest, as every consumer of the schedule will place it.
  FERRY_ASSIGN_OR_RETURN(plan.measure, measure_schedule(facts, plan.schedule));
  plan.fits = ctx.budget_bytes == 0 || plan.measure.device_bytes <= ctx.budget_bytes;
  return std::move(plan);
}

}  // namespace ferry
