// The LP lower bound (bound.h has the formulation and why it is a bound).

#include "plan/ferry/bound.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

#include "plan/ferry/host_updates.h"
#include "plan/ferry/gaps.h"
#include "plan/ferry/lp.h"

namespace ferry {

namespace {

using planner::GapSpec;
using planner::kInfinity;
using planner::LinearProgram;
using Terms = std::vector<std::pair<int, double>>;

constexpr double kMiB = 1 << 20;

// Running sums over the selected steps of interval-weighted columns: run_k = sum of coef * col
// over the intervals containing selected step k, one column per selected step, tied by
// run_k - run_{k-1} = (intervals starting after step k-1 up to k) - (those ending before k).
class RunningSum {
 public:
  explicit RunningSum(const std::vector<size_t>& selected) : selected_(selected), starts_(selected.size() + 1),
                                                            ends_(selected.size() + 1) {}
  void add(int col, double coef, int64_t lo, int64_t hi) {
    if (lo > hi) return;
    // Selected steps in [lo, hi]: indices [first, last).
    const size_t first = static_cast<size_t>(
        std::lower_bound(selected_.begin(), selected_.end(), static_cast<size_t>(lo)) - selected_.begin());
    const size_t last = static_cast<size_t>(
        std::upper_bound(selected_.begin(), selected_.end(), static_cast<size_t>(hi)) - selected_.begin());
    if (first >= last) return;
    starts_[first].emplace_back(col, coef);
    ends_[last].emplace_back(col, -coef);
  }
  // Adds the running-sum columns and their rows; returns the column of each step.
  std::vector<int> build(LinearProgram& lp) const {
    const size_t n = starts_.size() - 1;
    std::vector<int> run(n);
    for (size_t s = 0; s < n; ++s) {  // here n counts selected steps
      run[s] = lp.add_column(0, kInfinity);
      Terms row{{run[s], 1.0}};
      if (s > 0) row.emplace_back(run[s - 1], -1.0);
      for (auto [col, coef] : starts_[s]) row.emplace_back(col, -coef);
      for (auto [col, coef] : ends_[s]) row.emplace_back(col, -coef);
      lp.add_row(row, 0, 0);
    }
    return run;
  }

 private:
  const std::vector<size_t>& selected_;
  std::vector<Terms> starts_, ends_;
};

// The steps whose memory constraint the LP keeps: where the keep plan exceeds the budget, at most
// `limit` of them (evenly spread, the highest always in). Dropping a constraint relaxes the LP,
// so the bound stays valid; it only gets weaker.
std::vector<size_t> binding_steps(const std::vector<uint64_t>& live, uint64_t budget, size_t limit) {
  std::vector<size_t> over;
  for (size_t s = 0; s < live.size(); ++s)
    if (live[s] > budget) over.push_back(s);
  if (over.size() <= limit) return over;
  const size_t top = static_cast<size_t>(std::max_element(live.begin(), live.end()) - live.begin());
  std::vector<size_t> out;
  for (size_t k = 0; k < limit; ++k) out.push_back(over[k * over.size() / limit]);
  out.push_back(top);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// The least time of the two lanes when updates may leave the device for the host lane: the
// device runs `device_us` plus the updates left on it, the host lane the others, one after
// another. Relaxed to fractions, the best split takes the updates in order of device time saved
// per host time spent until the lanes meet.
double compute_floor_us(double device_us, const std::vector<OpId>& host_ops, const PlanFacts& facts,
                        const CostModel& cost) {
  struct Item {
    double device, host;
  };
  std::vector<Item> items;
  double device = device_us;
  for (OpId u : host_ops) {
    const double d = facts.op_us[static_cast<size_t>(u)];
    device += d;
    if (const std::optional<double> h = cost.host_update_us(facts.g(), facts.g().op(u))) items.push_back({d, *h});
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.device * b.host > b.device * a.host; });
  double host = 0;
  for (const Item& it : items) {
    if (device - it.device >= host + it.host) {
      device -= it.device;
      host += it.host;
      continue;
    }
    const double part = (device - host) / (it.device + it.host);  // where the lanes meet
    return host + std::max(0.0, part) * it.host;
  }
  return std::max(device, host);
}

// Note [Chained timing rows]
//   The timing rows (the host lane's release times, the cyclic copies' release and deadline) are
//   all of one shape: items in an order where each item's floor is at least as weak as the ones
//   before it, and per prefix of that order
//     T >= floor(last item of the prefix) + sum over the prefix of coef * col.
//   The prefix sums are chained through auxiliary columns (O(items) non-zeros). Every such row is
//   valid on its own, so only some of them may be kept: at most max_timing_rows, each at the
//   end of a run of items sharing a key (a row cut between equal keys would be weaker than the one
//   at the run's end), the items between two rows summed into one chain link. Before (2026-11-29),
//   one link and one row per item: a chain of ~3,000 host updates on pre-activation ResNet-1001
//   made Clp's solve 2.3x longer (2.9 -> 6.8 s) for the same bound.
struct ChainItem {
  double key;  // the row's floor is floor_of(key); equal keys end a row together
  int col;
  double coef;
};

template <class FloorOf>
void add_chained_rows(LinearProgram& lp, int T, const std::vector<ChainItem>& items, size_t max_rows,
                      FloorOf floor_of) {
  const size_t per_row = max_rows == 0 ? 1 : std::max<size_t>(1, (items.size() + max_rows - 1) / max_rows);
  int before = -1;  // the sum of the items of the rows before
  Terms link;
  size_t in_link = 0;
  for (size_t k = 0; k < items.size(); ++k) {
    link.emplace_back(items[k].col, -items[k].coef);
    ++in_link;
    const bool run_ends = k + 1 == items.size() || items[k + 1].key != items[k].key;
    if (!run_ends || (in_link < per_row && k + 1 != items.size())) continue;
    const int sum = lp.add_column(0, kInfinity);
    link.emplace_back(sum, 1.0);
    if (before >= 0) link.emplace_back(before, -1.0);
    lp.add_row(link, 0, 0);
    lp.add_row({{T, 1.0}, {sum, -1.0}}, floor_of(items[k].key), kInfinity);
    before = sum;
    link.clear();
    in_link = 0;
  }
}
}  // namespace

std::vector<double> host_update_release_us(const PlanFacts& facts) {
  const Graph& g = facts.g();
  std::vector<bool> host_op(g.ops.size(), false);
  for (OpId u : facts.host_updatable) host_op[static_cast<size_t>(u)] = true;
  std::vector<double> done(g.ops.size() + 1, 0);  // least compute time before step s (updates all on the host)
  for (size_t s = 0; s < g.ops.size(); ++s) done[s + 1] = done[s] + (host_op[s] ? 0 : facts.op_us[s]);
  std::vector<double> out;
  for (OpId u : facts.host_updatable) {
    const OpId p = facts.producer[static_cast<size_t>(g.op(u).inputs[1])];
    out.push_back(p == kNoOp ? 0 : done[static_cast<size_t>(p) + 1]);
  }
  return out;
}

Result<PendingLowerBound> start_lower_bound(const PlanContext& ctx, const PlanFacts& facts, const LowerBoundOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  const Graph& g = facts.g();
  const size_t n = g.ops.size();
  LowerBound out;
  // Updates a plan may run on the host (host_updates.h) leave the device's compute, their optimizer
  // state needs no link, their weights no swap-out (the host writes the copy) and their gradients
  // no swap-in: the bound credits all of that, so it holds for plans with host updates too.
  const std::vector<OpId> host_ops = facts.host_updatable;
  std::vector<double> device_us = facts.op_us;
  std::vector<bool> host_written(g.tensors.size(), false), host_state(g.tensors.size(), false),
      host_gradient(g.tensors.size(), false);
  // update_of[t]: the index in host_ops of the update writing t (weights, optimizer state).
  std::vector<int> update_of(g.tensors.size(), -1);
  std::vector<bool> host_op(n, false);  // the op is an update the host may run
  for (OpId u : host_ops) host_op[static_cast<size_t>(u)] = true;
  {
    std::vector<bool> read_on_device(g.tensors.size(), false);
    for (const Op& op : g.ops)
      if (!host_op[static_cast<size_t>(op.id)])
        for (TensorId t : op.inputs) read_on_device[static_cast<size_t>(t)] = true;
    for (size_t k = 0; k < host_ops.size(); ++k) {
      const OpId u = host_ops[k];
      device_us[static_cast<size_t>(u)] = 0;
      host_gradient[static_cast<size_t>(g.op(u).inputs[1])] = true;
      for (TensorId t : g.op(u).outputs) {
        host_written[static_cast<size_t>(t)] = true;
        update_of[static_cast<size_t>(t)] = static_cast<int>(k);
        if (!read_on_device[static_cast<size_t>(t)]) host_state[static_cast<size_t>(t)] = true;
      }
    }
  }
  const double compute_us = std::accumulate(device_us.begin(), device_us.end(), 0.0);
  out.us = compute_floor_us(compute_us, host_ops, facts, ctx.cost);
  out.method = "compute";
  if (ctx.budget_bytes == 0) return PendingLowerBound(std::move(out));  // nothing has to move: keep-all runs at compute speed
  Schedule keep = empty_schedule(ctx, "none");
  FERRY_ASSIGN_OR_RETURN(Program program, lower_schedule(g, keep, facts.program_options));
  const std::vector<uint64_t> live = live_bytes_per_step(facts, program);
  const double budget = static_cast<double>(ctx.budget_bytes);
  if (*std::max_element(live.begin(), live.end()) <= ctx.budget_bytes) return PendingLowerBound(std::move(out));

  const bool swaps = !ctx.recompute_only;
  const planner::TensorAccesses acc = planner::collect_accesses(g);
  const std::vector<GapSpec> gaps = planner::find_gaps(facts, acc, swaps);
  const bool ssd = ctx.tier == Tier::kSsd;
  auto leg = [&](Link l, uint64_t bytes) { return ctx.cost.link(l).time_us(bytes); };
  // A tensor's SSD leg: the fastest of raw and every codec measured on its class (the plan's codec
  // is one of them), so that the bound holds whichever codec a plan gives it.
  const std::vector<std::string> classes = ctx.cost.has_codec_figures() ? tensor_classes(g) : std::vector<std::string>{};
  auto ssd_leg = [&](Direction d, TensorId t) {
    const uint64_t bytes = g.tensor(t).bytes;
    const LinkCost l = ctx.cost.link(d == Direction::kSwapOut ? Link::kSsdWrite : Link::kSsdRead);
    double data = l.data_us(bytes);
    if (!classes.empty())
      for (CodecId c : kLosslessCodecs) data = std::min(data, ctx.cost.ssd_data_us(d, bytes, c, classes[static_cast<size_t>(t)]));
    return l.latency_us + data;
  };
  // A device_direct profile's raw SSD copies cross no device<->host leg (a coded one still does, so
  // the bound charges the host lanes nothing and times a copy by its SSD leg alone: no plan's
  // copy is cheaper). Elsewhere a copy's host leg, which every path to either tier crosses.
  const bool direct = ssd && ctx.cost.ssd_direct();
  auto host_leg = [&](Link l, uint64_t bytes) { return direct && bytes >= kDirectIoMinBytes ? 0.0 : leg(l, bytes); };
  auto copy_time = [&](Direction d, TensorId t) {
    const uint64_t bytes = g.tensor(t).bytes;
    const double host = leg(d == Direction::kSwapOut ? Link::kDeviceToHost : Link::kHostToDevice, bytes);
    return direct && bytes >= kDirectIoMinBytes ? std::min(ssd_leg(d, t), host) : host;
  };

  const std::vector<size_t> steps = binding_steps(live, ctx.budget_bytes, o.max_constrained_steps);
  LinearProgram lp;
  const int T = lp.add_column(0, kInfinity, 1.0);
  // h_k: update host_ops[k] runs on the host. Its device time leaves the compute row, its host
  // time joins the host lane's (serial, within the iteration), its weights live in the host tier
  // (their swap-in is paid), its gradient crosses to the host, and its optimizer state may stay
  // off the device without crossing a link. The other credits above are taken whatever h is
  // (weights' swap-outs, gradients' swap-ins): optimistic, so the bound stays one.
  std::vector<int> host_col(host_ops.size(), -1);
  std::vector<double> host_us_of(host_ops.size(), 0);  // 0: the host cannot run it
  double host_device_us = 0;
  for (size_t k = 0; k < host_ops.size(); ++k) {
    const Op& u = g.op(host_ops[k]);
    const std::optional<double> host_us = ctx.cost.host_update_us(g, u);
    host_col[k] = lp.add_column(0, host_us ? 1 : 0);
    if (host_us) host_us_of[k] = *host_us;
    host_device_us += facts.op_us[static_cast<size_t>(u.id)];
  }
  // Note [Dead sources]
  //   A recompute of t runs t's producer p, which reads all of p's inputs. An input u that no op
  //   but p reads (transient, produced in the iteration: a batch norm's output feeding its ReLU)
  //   is gone from p on in the keep plan, so wherever a plan has t away by recompute during gap
  //   c (which starts at or after p), u must be brought back for it in one of three ways:
  //     z  recomputed along (its producer runs again: compute);
  //     k  kept on the device from its last read to the recompute (its bytes, at every step of
  //        the gap where t is away: the gap's credit is b_t - b_u);
  //     w  fetched from a copy (u was swapped out while it was on the device: the copy's
  //        device-to-host time, shared with u's own swaps through o_u, plus one host-to-device
  //        copy after the gap began).
  //   So y_c <= z + k + w per such u. Any real plan maps to a point of the LP that costs no more:
  //   z where u is recomputed (credit b_t, optimistic where it was recomputed early and kept);
  //   k where u stays on the device; w where u comes from its copy, its bytes counted as
  //   transient bytes away by swap (f_s) at the steps where u is off the device (it crossed to
  //   the host before s and comes back after s, so the transfer rows hold) and as kept at the
  //   others (the credit b_t - b_u of the recompute's running sum). At the steps of the gap after
  //   the recompute (t back, u gone) a plan frees nothing, where b_t - b_u would be negative for
  //   u larger than t; so the LP takes min(b_u, b_t) for b_u throughout (the credit it subtracts,
  //   and the bytes w counts as away by swap, which are then fewer than those that crossed).
  //   One reader means one gap of t at a time, so u is never counted twice. Only gaps that span
  //   a constrained step get these columns (elsewhere y frees nothing the LP counts). k stays
  //   even where b_u >= b_t (such a plan maps as well to keeping t): without it, Clp took 2-3
  //   times as long on pre-activation ResNet-1001 (b16, 33%, A100 profile) for the same optimum.
  //   Before (until 2026-11-29) a recompute was charged its producer alone, so the bound took a
  //   ReLU's output as costing one ReLU where every plan pays the batch norm as well (or the
  //   norm's bytes): ResNet-152 at 33% on the V100 profile had a bound of 123.36 ms, with this
  //   126.53 ms (the plan: 138.24 ms).
  // The inputs of op p that no other op accesses: transient, produced in the iteration, their
  // accesses (acc.steps) their producer and p alone.
  auto dead_sources_of = [&](OpId p) {
    std::vector<TensorId> out;
    for (TensorId u : g.op(p).inputs) {
      const OpId q = facts.producer[static_cast<size_t>(u)];
      const std::vector<OpId>& at = acc.steps[static_cast<size_t>(u)];
      if (g.tensor(u).persistent() || u == g.loss || q == kNoOp) continue;
      if (at.size() != 2 || at.front() != q || at.back() != p || g.op(p).writes(u)) continue;
      if (std::find(out.begin(), out.end(), u) == out.end()) out.push_back(u);
    }
    return out;
  };
  // swapped_host_gradient: the swaps of gradients a host update may consume (they never return).
  RunningSum recomputed(steps), swapped_transient(steps), swapped_persistent(steps),
      swapped_host_gradient(steps);
  std::vector<int> out_col(g.tensors.size(), -1), cyclic_col(g.tensors.size(), -1);
  Terms d2h{{T, -1.0}}, h2d{{T, -1.0}}, ssd_write{{T, -1.0}}, ssd_read{{T, -1.0}}, compute{{T, -1.0}};
  auto add_out = [&](int col, TensorId t) {
    const uint64_t bytes = g.tensor(t).bytes;
    d2h.emplace_back(col, host_leg(Link::kDeviceToHost, bytes));
    if (ssd) ssd_write.emplace_back(col, ssd_leg(Direction::kSwapOut, t));
  };
  // o_t: transient t's swap-out happened (one column per tensor, its copy's link time paid once).
  auto copy_col = [&](TensorId t) {
    int& o_t = out_col[static_cast<size_t>(t)];
    if (o_t < 0) {
      o_t = lp.add_column(0, 1);
      add_out(o_t, t);
    }
    return o_t;
  };
  auto add_in = [&](int col, TensorId t) {
    const uint64_t bytes = g.tensor(t).bytes;
    h2d.emplace_back(col, host_leg(Link::kHostToDevice, bytes));
    if (ssd) ssd_read.emplace_back(col, ssd_leg(Direction::kSwapIn, t));
  };
  // The cyclic copies' timing (Note [Cyclic copies' release and deadline] below): per copy, the
  // step after which it can leave or before which it must be back, its column and its link time.
  struct TimedCopy {
    size_t step;
    int col;
    double us;
  };
  std::vector<TimedCopy> timed_out, timed_in;
  std::vector<int64_t> last_write(g.tensors.size(), -1);
  for (const Op& op : g.ops)
    for (TensorId t : op.outputs) last_write[static_cast<size_t>(t)] = op.id;
  auto time_out = [&](const GapSpec& c, int col, double us) {
    if (o.cyclic_copy_times && last_write[static_cast<size_t>(c.tensor)] >= 0)
      timed_out.push_back({static_cast<size_t>(last_write[static_cast<size_t>(c.tensor)]), col, us});
  };
  // Only where the first access is a device op reading the tensor: it waits for the copy there.
  auto time_in = [&](const GapSpec& c, int col, double us, bool on_device) {
    const Op& first = g.op(static_cast<OpId>(c.to));
    if (!o.cyclic_copy_times || (!on_device && host_op[static_cast<size_t>(first.id)])) return;
    if (std::find(first.inputs.begin(), first.inputs.end(), c.tensor) == first.inputs.end()) return;
    timed_in.push_back({static_cast<size_t>(c.to), col, us});
  };
  // Per gap (in gaps' order): its swap (offload) and recompute columns, -1 where it has none.
  std::vector<std::pair<int, int>> gap_cols(gaps.size(), {-1, -1});
  // Persistent tensors first: their cyclic gap's column is the offload decision.
  for (size_t ci = 0; ci < gaps.size(); ++ci) {
    const GapSpec& c = gaps[ci];
    if (!c.cyclic) continue;
    const double b = static_cast<double>(facts.aligned_bytes(c.tensor)) / kMiB;
    const int x = lp.add_column(0, 1);
    gap_cols[ci].first = x;
    cyclic_col[static_cast<size_t>(c.tensor)] = x;
    swapped_persistent.add(x, b, c.from + 1, static_cast<int64_t>(n) - 1);
    swapped_persistent.add(x, b, 0, c.to - 1);
    const int update = update_of[static_cast<size_t>(c.tensor)];
    if (host_state[static_cast<size_t>(c.tensor)]) {
      // Away for free when its update runs on the host (h); otherwise it crosses the host link
      // both ways (z; on the SSD tier the disk too, not charged: the tier it goes to is the plan's).
      const uint64_t bytes = g.tensor(c.tensor).bytes;
      const int z = lp.add_column(0, 1);
      lp.add_row({{x, 1.0}, {host_col[static_cast<size_t>(update)], -1.0}, {z, -1.0}}, -kInfinity, 0);
      d2h.emplace_back(z, host_leg(Link::kDeviceToHost, bytes));
      h2d.emplace_back(z, host_leg(Link::kHostToDevice, bytes));
      time_out(c, z, copy_time(Direction::kSwapOut, c.tensor));
      time_in(c, z, copy_time(Direction::kSwapIn, c.tensor), /*on_device=*/true);  // z: its update runs on the device
      continue;
    }
    if (update >= 0) {
      // A weight its update may write on the host: home in the host tier when it does (h <= x),
      // so it comes back over the host link (never the disk: host updates keep it in memory).
      lp.add_row({{host_col[static_cast<size_t>(update)], 1.0}, {x, -1.0}}, -kInfinity, 0);
      h2d.emplace_back(x, leg(Link::kHostToDevice, g.tensor(c.tensor).bytes));
      time_in(c, x, leg(Link::kHostToDevice, g.tensor(c.tensor).bytes), false);
      continue;
    }
    if (acc.written[static_cast<size_t>(c.tensor)]) {
      add_out(x, c.tensor);
      time_out(c, x, copy_time(Direction::kSwapOut, c.tensor));
    }
    add_in(x, c.tensor);
    time_in(c, x, copy_time(Direction::kSwapIn, c.tensor), false);
  }
  for (size_t ci = 0; ci < gaps.size(); ++ci) {
    const GapSpec& c = gaps[ci];
    if (c.cyclic) continue;
    const TensorId t = c.tensor;
    const bool persistent = g.tensor(t).persistent();
    const double b = static_cast<double>(facts.aligned_bytes(t)) / kMiB;
    Terms both;
    if (swaps) {
      const int x = lp.add_column(0, 1);
      gap_cols[ci].first = x;
      both.emplace_back(x, 1.0);
      if (persistent) {
        lp.add_row({{x, 1.0}, {cyclic_col[static_cast<size_t>(t)], -1.0}}, -kInfinity, 0);
        swapped_persistent.add(x, b, c.from + 1, c.to - 1);
      } else {
        lp.add_row({{x, 1.0}, {copy_col(t), -1.0}}, -kInfinity, 0);
        swapped_transient.add(x, b, c.from + 1, c.to - 1);
        if (host_gradient[static_cast<size_t>(t)]) swapped_host_gradient.add(x, b, c.from + 1, c.to - 1);
      }
      if (!host_gradient[static_cast<size_t>(t)]) add_in(x, t);
    }
    if (!persistent && facts.recomputable(t)) {
      const int y = lp.add_column(0, 1);
      gap_cols[ci].second = y;
      both.emplace_back(y, 1.0);
      recomputed.add(y, b, c.from + 1, c.to - 1);
      const OpId p = facts.producer[static_cast<size_t>(t)];
      compute.emplace_back(y, facts.op_us[static_cast<size_t>(p)]);
      // Each input that only this recompute's producer reads is gone by the gap unless it is
      // recomputed along (z), kept on the device (k) or fetched from its copy (w): Note [Dead
      // sources].
      // (Only where the gap spans a constrained step: elsewhere y frees nothing the LP counts.)
      const auto first_in = std::lower_bound(steps.begin(), steps.end(), static_cast<size_t>(c.from + 1));
      const bool constrained = first_in != steps.end() && static_cast<int64_t>(*first_in) <= c.to - 1;
      if (o.dead_sources && constrained)
        for (TensorId u : dead_sources_of(p)) {
          // What u's presence takes from the gap's credit, capped at t's bytes: the steps after
          // the recompute, t back and u gone, free nothing and cost nothing (Note [Dead sources]).
          const double bu = std::min(b, static_cast<double>(facts.aligned_bytes(u)) / kMiB);
          Terms row{{y, 1.0}};
          const int k = lp.add_column(0, 1);
          row.emplace_back(k, -1.0);
          recomputed.add(k, -bu, c.from + 1, c.to - 1);
          if (facts.recomputable(u)) {
            const int z = lp.add_column(0, 1);
            row.emplace_back(z, -1.0);
            compute.emplace_back(z, facts.op_us[static_cast<size_t>(facts.producer[static_cast<size_t>(u)])]);
          }
          if (swaps) {
            const int w = lp.add_column(0, 1);
            row.emplace_back(w, -1.0);
            lp.add_row({{w, 1.0}, {copy_col(u), -1.0}}, -kInfinity, 0);
            h2d.emplace_back(w, host_leg(Link::kHostToDevice, g.tensor(u).bytes));
            recomputed.add(w, -bu, c.from + 1, c.to - 1);
            swapped_transient.add(w, bu, c.from + 1, c.to - 1);
          }
          lp.add_row(row, -kInfinity, 0);
        }
    }
    if (both.size() == 2) lp.add_row(both, -kInfinity, 1);
  }
  // A host update's gradient is swapped out to the host (on the SSD tier a memory swap would also
  // cross the disk, which the host update's does not: no coupling there).
  if (swaps && !ssd)
    for (size_t k = 0; k < host_ops.size(); ++k) {
      const TensorId grad = g.op(host_ops[k]).inputs[1];
      lp.add_row({{host_col[k], 1.0}, {copy_col(grad), -1.0}}, -kInfinity, 0);
    }
  const std::vector<int> rec = recomputed.build(lp);
  const std::vector<int> swt = swapped_transient.build(lp);
  const std::vector<int> shg = swapped_host_gradient.build(lp);
  const std::vector<int> swp = swapped_persistent.build(lp);
  // The slowest leg's rate bounds how fast bytes can leave and come back (MiB per microsecond).
  auto rate = [&](Link a, Link b) {
    // (A raw copy in place crosses the disk alone.)
    double r = direct ? std::numeric_limits<double>::infinity() : ctx.cost.link(a).bytes_per_us;
    // A codec moves at least min_codec_ratio of a tensor's bytes over the disk.
    if (ssd) r = std::min(r, ctx.cost.link(b).bytes_per_us / ctx.cost.min_codec_ratio());
    return r / kMiB;
  };
  const double out_rate = rate(Link::kDeviceToHost, Link::kSsdWrite);
  const double in_rate = rate(Link::kHostToDevice, Link::kSsdRead);
  std::vector<double> prefix(n + 1, 0);
  for (size_t s = 0; s < n; ++s) prefix[s + 1] = prefix[s] + device_us[s];
  for (size_t k = 0; k < steps.size(); ++k) {
    const size_t s = steps[k];
    const double suffix = compute_us - prefix[s];
    const double need = (static_cast<double>(live[s]) - budget) / kMiB;
    const int ft = lp.add_column(0, kInfinity), fp = lp.add_column(0, kInfinity);
    lp.add_row({{ft, 1.0}, {swt[k], -1.0}}, -kInfinity, 0);
    lp.add_row({{fp, 1.0}, {swp[k], -1.0}}, -kInfinity, 0);
    lp.add_row({{rec[k], 1.0}, {ft, 1.0}, {fp, 1.0}}, need, kInfinity);
    lp.add_row({{ft, 1.0}, {T, -out_rate}}, -kInfinity, -out_rate * suffix);
    // The way back: what is away at s returns after s, except the gradients of host updates,
    // which the host consumes (shg: their swapped bytes over the gaps containing s). Until
    // 2026-11-29 the row counted them too, which no plan with host updates has to obey: the
    // bound of A100 GPT-2 medium at 10% was 263.35 ms with it and is 237.48 without.
    lp.add_row({{ft, 1.0}, {shg[k], -1.0}, {T, -in_rate}}, -kInfinity, -in_rate * prefix[s]);
  }
  if (ctx.cost.copy_directions_concurrent()) {
    lp.add_row(d2h, -kInfinity, 0);
    lp.add_row(h2d, -kInfinity, 0);
  } else {
    Terms shared = d2h;
    shared.insert(shared.end(), h2d.begin() + 1, h2d.end());
    lp.add_row(shared, -kInfinity, 0);
  }
  if (ssd) {
    lp.add_row(ssd_write, -kInfinity, 0);
    lp.add_row(ssd_read, -kInfinity, 0);
  }
  // T >= device ops + updates left on the device + recomputes; T >= the host lane.
  for (size_t k = 0; k < host_ops.size(); ++k)
    compute.emplace_back(host_col[k], -facts.op_us[static_cast<size_t>(host_ops[k])]);
  lp.add_row(compute, -kInfinity, -(compute_us + host_device_us));
  // The host lane, with release times (host_update_release_us): the lane runs one update at a
  // time, so the updates released at r_k or later end no earlier than r_k plus their host time:
  //   T >= r_k + sum_{r_j >= r_k} host_j * h_j.
  // Chained from the latest release back, at most max_timing_rows of these rows (Note [Chained
  // timing rows]). Without release times (r = 0), the one row is the lane's total.
  {
    const std::vector<double> release_us = host_update_release_us(facts);
    std::vector<std::pair<double, size_t>> released;  // (release, k) of the updates the host can run
    for (size_t k = 0; k < host_ops.size(); ++k)
      if (host_us_of[k] > 0) released.emplace_back(o.host_release_times ? release_us[k] : 0.0, k);
    std::sort(released.rbegin(), released.rend());
    std::vector<ChainItem> items;
    for (auto [release, k] : released) items.push_back({release, host_col[k], host_us_of[k]});
    add_chained_rows(lp, T, items, o.max_timing_rows, [](double release) { return release; });  // Note [Chained timing rows]
  }
  // Note [Cyclic copies' release and deadline]
  //   A persistent tensor offloaded between iterations (its cyclic gap) leaves the device after
  //   its last write of the iteration and is back before its first access (a device op reading
  //   it); the simulator times one iteration from idle links that run one copy at a time each. So
  //   the cyclic swap-outs of the tensors last written at step w or later all cross the
  //   device-to-host link after the device ran every op up to w:
  //     T >= prefix[w + 1] + sum of their d2h times;
  //   and the cyclic swap-ins due at step f or earlier all cross the host-to-device link before
  //   the op at f starts, which leaves at least the ops from f on to run:
  //     T >= sum of their h2d times + (compute - prefix[f]).
  //   Fractions of copies, chained sums (Note [Chained timing rows]). The same rows for transient
  //   swaps (released by their producer, due at the read ending the gap) raised no bound of the
  //   benchmark's ResNet-152 cells (2026-11-29) and were left out.
  {
    auto chain = [&](std::vector<TimedCopy>& copies, bool latest_first, auto&& floor_at) {
      std::sort(copies.begin(), copies.end(), [&](const TimedCopy& a, const TimedCopy& b) {
        return latest_first ? a.step > b.step : a.step < b.step;
      });
      std::vector<ChainItem> items;
      for (const TimedCopy& c : copies) items.push_back({static_cast<double>(c.step), c.col, c.us});
      add_chained_rows(lp, T, items, o.max_timing_rows, [&](double step) { return floor_at(static_cast<size_t>(step)); });
    };
    chain(timed_out, true, [&](size_t w) { return prefix[w + 1]; });
    chain(timed_in, false, [&](size_t f) { return compute_us - prefix[f]; });
  }
  out.lp_rows = lp.num_rows();
  out.lp_columns = lp.num_columns();
  Result<LinearProgram::Pending> solving = lp.start_solve(o.time_limit_s);
  if (!solving.ok()) {
    if (solving.status().code() == StatusCode::kUnsupported) return PendingLowerBound(std::move(out));
    return solving.status();
  }
  PendingLowerBound pending(std::move(out));
  pending.solve_.emplace(std::move(*solving));
  if (o.keep_solution) {
    pending.keep_solution_ = true;
    pending.gaps_ = gaps;
    pending.gap_cols_ = std::move(gap_cols);
  }
  pending.start_ = start;
  return pending;
}

Result<LowerBound> PendingLowerBound::wait() {
  if (!solve_) return out_;
  Result<LinearProgram::Solution> sol = solve_->wait();
  solve_.reset();
  if (!sol.ok()) return sol.status();
  LowerBound out = std::move(out_);
  out.solve_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (sol->infeasible) {
    out.us = kInfinity;
    out.method = "lp";
  } else if (sol->optimal) {
    // A hair below the optimum: the solver's tolerances must not turn the bound into a guess.
    out.us = std::max(out.us, sol->objective * (1 - 1e-7));
    out.method = "lp";
    if (keep_solution_) {
      auto value = [&](int col) { return col < 0 ? -1.0f : static_cast<float>(sol->values[static_cast<size_t>(col)]); };
      out.solution.reserve(gaps_.size());
      for (size_t ci = 0; ci < gaps_.size(); ++ci)
        out.solution.push_back({gaps_[ci], value(gap_cols_[ci].first), value(gap_cols_[ci].second)});
    }
  }
  return out;
}

Result<LowerBound> plan_lower_bound(const PlanContext& ctx, const PlanFacts& facts, const LowerBoundOptions& o) {
  FERRY_ASSIGN_OR_RETURN(PendingLowerBound pending, start_lower_bound(ctx, facts, o));
  return pending.wait();
}

}  // namespace ferry
