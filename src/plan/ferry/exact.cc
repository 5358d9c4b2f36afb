// ferry-exact (exact.h has the model).

#include "plan/ferry/exact.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "plan/ferry/gaps.h"
#include "plan/ferry/lp.h"

namespace ferry {

namespace {

using planner::kInfinity;
using planner::LinearProgram;
using Terms = std::vector<std::pair<int, double>>;

constexpr double kMiB = 1 << 20;

// A presence value: a constant (fixed 0/1) or a column.
struct Presence {
  int col = -1;
  double constant = 0;
};

class ExactModel {
 public:
  // rows_budget: what the memory rows allow (the budget, or less: plan_exact's placement retries).
  ExactModel(const PlanContext& ctx, const PlanFacts& facts, uint64_t rows_budget)
      : ctx_(ctx), f_(facts), g_(facts.g()), n_(g_.ops.size()), rows_budget_(rows_budget) {}

  Result<PlanAttempt> run(const ExactOptions& o) {
    build();
    FERRY_ASSIGN_OR_RETURN(LinearProgram::Solution sol, lp_.solve(o.time_limit_s, o.max_nodes));
    PlanAttempt a;
    a.solve_seconds = sol.seconds;
    a.proven_optimal = sol.optimal;
    if (!sol.feasible) {
      FERRY_ASSIGN_OR_RETURN(a, finish_attempt(ctx_, f_, empty_schedule(ctx_, "ferry-exact")));
      a.fits = false;
      a.notes = sol.infeasible ? "the MILP proves that no plan fits this budget"
                               : fmt::format("CBC found no plan in {:.1f} s", sol.seconds);
      return a;
    }
    FERRY_ASSIGN_OR_RETURN(a, finish_attempt(ctx_, f_, to_schedule(sol.values)));
    a.solve_seconds = sol.seconds;
    a.proven_optimal = sol.optimal;
    a.mip_gap = sol.objective > 0 ? std::max(0.0, (sol.objective - sol.bound) / sol.objective) : 0;
    a.notes = fmt::format("MILP {} columns, {} rows: stage time {:.1f} us, bound {:.1f} us, gap {:.2f}%{} in {:.1f} s",
                          lp_.num_columns(), lp_.num_rows(), sol.objective, sol.bound, 100 * a.mip_gap,
                          sol.optimal ? " (optimal)" : "", sol.seconds);
    return a;
  }

 private:
  size_t idx(TensorId t) const { return static_cast<size_t>(t); }
  bool swaps() const { return !ctx_.recompute_only; }
  double in_us(TensorId t) const { return f_.transfer_us(ctx_.cost, Direction::kSwapIn, ctx_.tier, t); }
  double out_us(TensorId t) const { return f_.transfer_us(ctx_.cost, Direction::kSwapOut, ctx_.tier, t); }

  // Steps a transient tensor may be on the device: from its production to its horizon (its last
  // use, or later where it feeds the recompute of a tensor that lives later).
  void horizons() {
    first_.assign(g_.tensors.size(), -1);
    last_.assign(g_.tensors.size(), -1);
    for (const Tensor& t : g_.tensors) {
      if (t.persistent()) continue;
      const TensorInfo& i = f_.info(t.id);
      if (i.first_use == kNoOp) continue;
      first_[idx(t.id)] = i.first_use;
      last_[idx(t.id)] = t.id == g_.loss ? static_cast<OpId>(n_) - 1 : i.last_use;
    }
    for (OpId o = static_cast<OpId>(n_) - 1; o >= 0; --o)
      for (TensorId out : g_.op(o).outputs) {
        if (!f_.recomputable(out)) continue;
        for (TensorId in : g_.op(o).inputs)
          if (!g_.tensor(in).persistent() && last_[idx(in)] >= 0)
            last_[idx(in)] = std::max(last_[idx(in)], last_[idx(out)]);
      }
  }

  void build() {
    horizons();
    acc_ = planner::collect_accesses(g_);
    const planner::TensorAccesses& acc = acc_;
    presence_.assign(g_.tensors.size(), std::vector<Presence>(n_));
    rec_.assign(g_.tensors.size(), std::vector<int>(n_, -1));
    in_.assign(g_.tensors.size(), std::vector<int>(n_, -1));
    out_.assign(g_.tensors.size(), {});
    offload_.assign(g_.tensors.size(), -1);
    std::vector<Terms> memory(n_);
    std::vector<double> memory_constant(n_, 0);
    std::vector<Terms> compute(n_), h2d(n_), d2h(n_);
    auto add_presence = [&](TensorId t, OpId s, Presence p) {
      presence_[idx(t)][static_cast<size_t>(s)] = p;
      const double b = static_cast<double>(f_.aligned_bytes(t)) / kMiB;
      if (p.col >= 0)
        memory[static_cast<size_t>(s)].emplace_back(p.col, b);
      else
        memory_constant[static_cast<size_t>(s)] += b * p.constant;
    };
    for (const Tensor& t : g_.tensors) {
      const std::vector<OpId>& a = acc.steps[idx(t.id)];
      auto accessed = [&](OpId s) { return std::binary_search(a.begin(), a.end(), s); };
      if (t.persistent()) {
        const bool movable = swaps() && t.bytes > 0 && !a.empty();
        int z = -1;
        if (movable) z = offload_[idx(t.id)] = lp_.add_column(0, 1, 0, true);
        for (OpId s = 0; s < static_cast<OpId>(n_); ++s) {
          if (!movable || accessed(s)) {
            add_presence(t.id, s, {-1, 1});
            continue;
          }
          const int p = lp_.add_column(0, 1, 0, true);
          lp_.add_row({{p, 1.0}, {z, 1.0}}, 1, kInfinity);  // resident unless offloaded
          add_presence(t.id, s, {p, 0});
        }
        if (!movable) continue;
        if (acc.written[idx(t.id)]) add_swap_out(t.id, a.back(), z, compute, d2h);
        for (OpId s = 0; s < static_cast<OpId>(n_); ++s) {
          const int i = in_[idx(t.id)][static_cast<size_t>(s)] = lp_.add_column(0, 1, 0, true);
          lp_.add_row({{i, 1.0}, {z, -1.0}}, -kInfinity, 0);
          add_swap_in(t.id, s, i, accessed(s), compute, h2d);
          // Present only if it stayed (from the previous step; an offloaded tensor starts away).
          Terms row;
          double rhs = 0;
          append(row, presence_[idx(t.id)][static_cast<size_t>(s)], 1.0, rhs);
          row.emplace_back(i, -1.0);
          if (s > 0) {
            append(row, presence_[idx(t.id)][static_cast<size_t>(s) - 1], -1.0, rhs);
          } else {
            row.emplace_back(z, 1.0);  // P[0] <= I[0] + (1 - Z)
            rhs += 1;
          }
          add_le(row, rhs);
        }
        continue;
      }
      const OpId first = first_[idx(t.id)], last = last_[idx(t.id)];
      if (first < 0 || t.bytes == 0) continue;
      const bool recomputable = f_.recomputable(t.id);
      const bool can_swap = swaps() && t.id != g_.loss;
      for (OpId s = first; s <= last; ++s) {
        if (s == first || accessed(s) || t.id == g_.loss || (!recomputable && !can_swap)) {
          add_presence(t.id, s, {-1, 1});
          continue;
        }
        add_presence(t.id, s, {lp_.add_column(0, 1, 0, true), 0});
      }
      // One swap-out, after any step it is on the device at (before its last: a copy made then
      // brings nothing back); the copy stays valid (a transient never changes).
      std::vector<int>& outs = out_[idx(t.id)];
      if (can_swap) {
        outs.assign(n_, -1);
        Terms once;
        for (OpId s = first; s < last; ++s) {
          const int o = outs[static_cast<size_t>(s)] = lp_.add_column(0, 1, 0, true);
          once.emplace_back(o, 1.0);
          Terms row{{o, 1.0}};
          double rhs = 0;
          append(row, presence_[idx(t.id)][static_cast<size_t>(s)], -1.0, rhs);
          add_le(row, rhs);
          add_swap_out(t.id, s, o, compute, d2h);
        }
        add_le(once, 1);
      }
      for (OpId s = first + 1; s <= last; ++s) {
        const Presence prev = presence_[idx(t.id)][static_cast<size_t>(s) - 1];
        if (prev.col < 0 && prev.constant == 1) continue;  // it was there: nothing to bring back
        Terms row;
        double rhs = 0;
        append(row, presence_[idx(t.id)][static_cast<size_t>(s)], 1.0, rhs);
        append(row, prev, -1.0, rhs);
        if (recomputable) {
          const int r = rec_[idx(t.id)][static_cast<size_t>(s)] = lp_.add_column(0, 1, 0, true);
          row.emplace_back(r, -1.0);
          compute[static_cast<size_t>(s)].emplace_back(r, f_.op_us[static_cast<size_t>(f_.producer[idx(t.id)])]);
        }
        if (can_swap && s > first + 1) {
          const int i = in_[idx(t.id)][static_cast<size_t>(s)] = lp_.add_column(0, 1, 0, true);
          Terms copied{{i, 1.0}};  // a copy issued at least a stage before
          for (OpId k = first; k + 1 < s; ++k) copied.emplace_back(outs[static_cast<size_t>(k)], -1.0);
          add_le(copied, 0);
          row.emplace_back(i, -1.0);
          add_swap_in(t.id, s, i, accessed(s), compute, h2d);
        }
        add_le(row, rhs);
      }
    }
    // A recompute needs its producer's inputs on the device in its stage.
    for (const Tensor& t : g_.tensors)
      for (size_t s = 0; s < n_; ++s) {
        const int r = rec_[idx(t.id)][s];
        if (r < 0) continue;
        for (TensorId u : g_.op(f_.producer[idx(t.id)]).inputs) {
          Terms row{{r, 1.0}};
          double rhs = 0;
          append(row, presence_[idx(u)][s], -1.0, rhs);
          add_le(row, rhs);
        }
      }
    // Memory and stage times.
    const double budget = static_cast<double>(rows_budget_) / kMiB;
    Terms objective;
    for (size_t s = 0; s < n_; ++s) {
      const double scratch =
          ctx_.op_scratch_bytes.empty() ? 0 : static_cast<double>(ctx_.op_scratch_bytes[s]) / kMiB;
      lp_.add_row(memory[s], -kInfinity, budget - scratch - memory_constant[s]);
      const int d = lp_.add_column(0, kInfinity, 1.0);
      Terms c = compute[s];
      c.emplace_back(d, -1.0);
      add_le(c, -f_.op_us[s]);
      if (ctx_.cost.copy_directions_concurrent()) {
        Terms in = h2d[s], out = d2h[s];
        in.emplace_back(d, -1.0);
        out.emplace_back(d, -1.0);
        add_le(in, 0);
        add_le(out, 0);
      } else {
        Terms both = h2d[s];
        both.insert(both.end(), d2h[s].begin(), d2h[s].end());
        both.emplace_back(d, -1.0);
        add_le(both, 0);
      }
    }
  }


  // Appends coef * p to row; a constant moves to the right-hand side.
  // The swap-out of t (decided by column o) starts when step `after` is done and runs during the
  // next stage, overlapped, if t stays on the device then; if t leaves right after `after`, its
  // release waits for the copy: the time is serial in that stage (column w = o and t away).
  void add_swap_out(TensorId t, OpId after, int o, std::vector<Terms>& compute, std::vector<Terms>& d2h) {
    const size_t next = static_cast<size_t>(after) + 1;
    if (next >= n_) {  // nothing runs after it in this iteration: its release waits
      compute[static_cast<size_t>(after)].emplace_back(o, out_us(t));
      return;
    }
    const int w = lp_.add_column(0, 1);
    Terms row{{w, -1.0}, {o, 1.0}};  // w >= o - P[t, next]
    double rhs = 0;
    append(row, presence_[idx(t)][next], -1.0, rhs);
    add_le(row, rhs);
    lp_.add_row({{w, 1.0}, {o, -1.0}}, -kInfinity, 0);  // w <= o
    Terms stays{{w, 1.0}};  // w <= 1 - P[t, next]: a copy of a tensor that stays overlaps the next stage
    double stays_rhs = 1;
    append(stays, presence_[idx(t)][next], 1.0, stays_rhs);
    add_le(stays, stays_rhs);
    compute[static_cast<size_t>(after)].emplace_back(w, out_us(t));
    d2h[next].emplace_back(o, out_us(t));
    d2h[next].emplace_back(w, -out_us(t));
  }

  // A swap-in (column i) before op s lands during stage s, overlapped with it; when op s reads t,
  // the op waits for it: serial.
  void add_swap_in(TensorId t, OpId s, int i, bool read_at_s, std::vector<Terms>& compute, std::vector<Terms>& h2d) {
    (read_at_s ? compute : h2d)[static_cast<size_t>(s)].emplace_back(i, in_us(t));
  }

  static void append(Terms& row, const Presence& p, double coef, double& rhs) {
    if (p.col >= 0)
      row.emplace_back(p.col, coef);
    else
      rhs -= coef * p.constant;
  }
  void add_le(const Terms& row, double rhs) { lp_.add_row(row, -kInfinity, rhs); }

  Schedule to_schedule(const std::vector<double>& x) const {
    auto on = [&](int col) { return col >= 0 && x[static_cast<size_t>(col)] > 0.5; };
    auto present = [&](TensorId t, size_t s) {
      const Presence& p = presence_[idx(t)][s];
      return p.col >= 0 ? on(p.col) : p.constant > 0.5;
    };
    Schedule s = empty_schedule(ctx_, "ferry-exact");
    for (const Tensor& t : g_.tensors) {
      const size_t v = idx(t.id);
      if (t.persistent()) {
        if (!on(offload_[v])) continue;
        s.offloaded.push_back({t.id, ctx_.tier});
        const std::vector<OpId>& a = acc_.steps[v];
        for (size_t k = 0; k < n_; ++k) {
          const bool here = present(t.id, k);
          if (here && on(in_[v][k])) add_before(s, static_cast<OpId>(k), swap_in_action(t.id, ctx_.tier));
          const bool next = k + 1 < n_ && present(t.id, k + 1);
          if (here && static_cast<OpId>(k) == a.back() && f_.g().op(a.back()).writes(t.id))
            add_after(s, static_cast<OpId>(k), swap_out_action(t.id, ctx_.tier));
          if (here && !next) add_after(s, static_cast<OpId>(k), release_action(t.id));
        }
        continue;
      }
      if (first_[v] < 0) continue;
      for (size_t k = 0; k < out_[v].size(); ++k)
        if (on(out_[v][k])) add_after(s, static_cast<OpId>(k), swap_out_action(t.id, ctx_.tier));
      for (OpId k = first_[v] + 1; k <= last_[v]; ++k) {
        if (present(t.id, static_cast<size_t>(k) - 1) && !present(t.id, static_cast<size_t>(k)))
          add_after(s, k - 1, release_action(t.id));
        // A swap-in or recompute column may be on where the tensor is not present: the MILP
        // paid for a copy it does not use (its rows bound presence by them, not the converse).
        // Scheduled, it would bring the tensor back for good (no release follows an absence).
        if (!present(t.id, static_cast<size_t>(k))) continue;
        if (on(rec_[v][static_cast<size_t>(k)])) add_before(s, k, recompute_action(t.id));
        if (on(in_[v][static_cast<size_t>(k)])) add_before(s, k, swap_in_action(t.id, ctx_.tier));
      }
    }
    return s;
  }

  const PlanContext& ctx_;
  const PlanFacts& f_;
  const Graph& g_;
  const size_t n_;
  const uint64_t rows_budget_;
  LinearProgram lp_;
  planner::TensorAccesses acc_;
  std::vector<OpId> first_, last_;
  std::vector<std::vector<Presence>> presence_;
  std::vector<std::vector<int>> rec_, in_, out_;  // out_[t][s]: swapped out after step s
  std::vector<int> offload_;
};

}  // namespace

Result<PlanAttempt> plan_exact(const PlanContext& ctx, const PlanFacts& facts, const ExactOptions& options) {
  if (facts.g().ops.size() > options.max_ops)
    return Status::Unsupported(fmt::format("ferry-exact solves graphs of at most {} ops; '{}' has {} (use ferry)",
                                           options.max_ops, facts.g().info.model, facts.g().ops.size()));
  if (ctx.budget_bytes == 0) return finish_attempt(ctx, facts, empty_schedule(ctx, "ferry-exact"));
  FERRY_ASSIGN_OR_RETURN(PlanAttempt a, ExactModel(ctx, facts, ctx.budget_bytes).run(options));
  // The memory rows count live bytes; placement can need a little more (fragmentation). A plan
  // whose live bytes fit but whose placement does not is solved again, at most twice, with the
  // rows lowered by the excess; a retry that finds no plan leaves the first attempt. A lowered
  // solve's optimum is of a narrower space than the budget's: the notes say so.
  uint64_t rows = ctx.budget_bytes;
  double seconds = a.solve_seconds;
  for (int retry = 0; retry < 2 && a.notes.starts_with("MILP") && !a.fits &&
                      a.measure.live_peak_bytes <= ctx.budget_bytes && a.measure.device_bytes > ctx.budget_bytes;
       ++retry) {
    const uint64_t excess = a.measure.device_bytes - ctx.budget_bytes;
    if (excess >= rows) break;
    rows -= excess;
    FERRY_ASSIGN_OR_RETURN(PlanAttempt b, ExactModel(ctx, facts, rows).run(options));
    seconds += b.solve_seconds;
    if (!b.notes.starts_with("MILP")) break;
    b.notes += fmt::format("; memory rows lowered by {} bytes for placement", ctx.budget_bytes - rows);
    a = std::move(b);
  }
  a.solve_seconds = seconds;
  return a;
}

Result<double> stage_time(const PlanContext& ctx, const PlanFacts& facts, const Schedule& schedule) {
  FERRY_ASSIGN_OR_RETURN(Program p, lower_schedule(facts.g(), schedule, facts.program_options));
  const Graph& g = facts.g();
  const size_t n = g.ops.size();
  std::vector<double> compute(n, 0), in(n, 0), out(n, 0);
  std::vector<OpId> out_step(g.tensors.size(), kNoOp);  // a swap-out in flight, issued after this step
  auto reads = [&](OpId s, TensorId t) {
    const std::vector<TensorId>& ins = g.op(s).inputs;
    const std::vector<TensorId>& outs = g.op(s).outputs;
    return std::find(ins.begin(), ins.end(), t) != ins.end() || std::find(outs.begin(), outs.end(), t) != outs.end();
  };
  for (const Instruction& i : p.instructions) {
    const size_t s = static_cast<size_t>(i.step);
    switch (i.kind) {
      case InstrKind::kRun: compute[s] += facts.op_us[static_cast<size_t>(i.op)]; break;
      case InstrKind::kSwapIn:
        (reads(i.step, i.tensor) ? compute : in)[s] += facts.transfer_us(ctx.cost, Direction::kSwapIn, i.tier, i.tensor);
        break;
      case InstrKind::kSwapOut: out_step[static_cast<size_t>(i.tensor)] = i.step; break;
      case InstrKind::kRelease:
      case InstrKind::kFree: {
        // A swap-out issued in the same step: the release waits for it (serial); else it ran
        // during the next stage.
        OpId& issued = out_step[static_cast<size_t>(i.tensor)];
        if (issued == kNoOp) break;
        const double us = facts.transfer_us(ctx.cost, Direction::kSwapOut, i.tier, i.tensor);
        if (issued == i.step || static_cast<size_t>(issued) + 1 >= n)
          compute[static_cast<size_t>(issued)] += us;
        else
          out[static_cast<size_t>(issued) + 1] += us;
        issued = kNoOp;
        break;
      }
      default: break;
    }
  }
  for (size_t t = 0; t < out_step.size(); ++t) {  // copies never released (they die or stay)
    if (out_step[t] == kNoOp) continue;
    const double us = facts.transfer_us(ctx.cost, Direction::kSwapOut, ctx.tier, static_cast<TensorId>(t));
    if (static_cast<size_t>(out_step[t]) + 1 >= n)
      compute[static_cast<size_t>(out_step[t])] += us;
    else
      out[static_cast<size_t>(out_step[t]) + 1] += us;
  }
  double total = 0;
  for (size_t s = 0; s < n; ++s)
    total += ctx.cost.copy_directions_concurrent() ? std::max({compute[s], in[s], out[s]})
                                                   : std::max(compute[s], in[s] + out[s]);
  return total;
}

}  // namespace ferry
