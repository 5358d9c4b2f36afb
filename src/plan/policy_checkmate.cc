// Checkmate (Jain et al., "Checkmate: Breaking the Memory Wall with Optimal Tensor
// Rematerialization", MLSys 2020): optimal recomputation under a memory budget by a
// mixed-integer linear program, solved with CBC.
//
// The paper's program. Nodes 1..n of the training graph in topological order; stage t computes
// node t for the first time. Binaries R[t,i] (node i is (re)computed in stage t) and S[t,i]
// (node i's output is kept in memory from stage t-1 into stage t). Constraints: R[t,t] = 1;
// R[t,j] <= R[t,i] + S[t,i] for every edge i -> j (inputs are computed or kept); S[t+1,i] <=
// S[t,i] + R[t,i] (only what exists can be kept); memory U[t,k] after each node k of stage t,
// with FREE[t,i,k] linearising when a value dies, U <= budget. Objective: min sum R[t,i] C_i.
//
// Ferry's size-reduced version (a stage is a step; docs/policies.md discusses it)
// - Ferry's execution order is fixed and only forward outputs can be recomputed, so the frontier
//   stages are the backward steps j in [nf, n) and the nodes that may be recomputed are the
//   forward ops. Forward runs once, as in every Checkmate solution for a training graph.
// - Variables, for every forward-produced transient tensor v (not the loss) and its producer p:
//     K[v] = S[nf, v]  v stays on the device from its last forward use into backward;
//     S[j, v]          v is on the device when backward stage j starts;
//     R[j, p]          forward op p is recomputed in stage j, before backward op j.
//   Only (j, v) with j <= h(v) exist, h(v) = the last stage that may need v: its last backward
//   read, or the horizon of any forward consumer's outputs (v may be a recompute input).
// - Constraints: backward op j reading v: S[j,v] + R[j,p(v)] >= 1. Recompute R[j,c] reading v:
//   R[j,c] <= S[j,v] + R[j,p(v)] (p(v) < c, so it runs earlier in the stage). Carry:
//   S[j+1,v] <= S[j,v] + R[j,p(v)]. Memory at forward step s: fixed(s) + the tensors alive by
//   their forward uses + sum of K[v] bytes over tensors whose forward use has ended <= budget;
//   at backward stage j: fixed(j) + sum S[j,v] bytes + sum R[j,p] bytes of p's outputs <= budget.
//   fixed(s) is everything else the keep plan holds at step s (weights, gradients, inputs,
//   scratch; a data input that a recomputable op reads is held to the end). Instead of the FREE
//   variables, a stage counts everything it recomputes as alive at once: an upper bound on its
//   peak (the paper's U[t,k] is exact within a stage) and exactly what Ferry's step-interval
//   placement charges, since every block a step opens coexists with every other in that step.
//   This keeps the program small (no n^3 FREE terms).
// - S[j, v] only changes at v's breakpoints (stages that read v or may recompute its producer),
//   so one variable stands for each interval between two of them: ~half the variables of one
//   per stage, and none of the symmetric solutions that hold v for part of an interval.
// - Objective: min sum R[j,p] (C_p + 1e-3) + 1e-4 sum S bytes/budget: the tiny terms prefer,
//   among plans of equal recompute time, fewer recomputations (zero-time ops) and then holding
//   less (recomputing just in time rather than early).
// - The solution becomes actions: release after the last forward use when K[v] = 0; before
//   backward step j, recompute the needed outputs of every op with R[j,p] = 1 in forward order;
//   release after step j what S[j+1,v] = 0 says to drop. complete_schedule() legalises it. The
//   plan is then placed exactly; if fragmentation pushes it past the budget, the program is
//   solved again with the budget lowered by the excess (a few rounds).

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "common/units.h"
#include "schedule/placement.h"
#include "plan/contained.h"
#include "plan/policy_common.h"

#ifdef FERRY_HAVE_CBC
#include <Cbc_C_Interface.h>
#endif

namespace ferry {

namespace {

constexpr int kMaxRounds = 3;
constexpr double kRecomputeEpsilonUs = 1e-3;
constexpr double kKeepEpsilonUs = 1e-4;  // per kept interval, times its share of the budget
constexpr double kInfinity = 1e30;  // CBC treats bounds beyond 1e20 as infinite

// A 0/1 program in row form: minimise obj . x subject to rows (sum coef x) >= or <= rhs.
struct Milp {
  std::vector<double> obj;
  struct Row {
    std::vector<int> cols;
    std::vector<double> coefs;
    char sense;  // 'L' or 'G'
    double rhs;
  };
  std::vector<Row> rows;
  int add_var(double cost) {
    obj.push_back(cost);
    return static_cast<int>(obj.size()) - 1;
  }
};

struct MilpSolution {
  bool feasible = false;        // a solution was found
  bool proven_optimal = false;
  bool proven_infeasible = false;
  double objective = 0;
  double bound = 0;
  double seconds = 0;
  std::vector<double> x;
};

#ifdef FERRY_HAVE_CBC
struct SolveLimits {
  double seconds = 60;
  int32_t max_nodes = 0;        // 0 = no limit
  bool first_solution = false;  // stop at the first feasible solution
};

Result<MilpSolution> solve_milp(const Milp& m, const SolveLimits& limits) {
  const int ncols = static_cast<int>(m.obj.size());
  // Column-major copy of the rows, as Cbc_loadProblem takes them.
  std::vector<std::vector<std::pair<int, double>>> by_col(static_cast<size_t>(ncols));
  std::vector<double> row_lb, row_ub;
  for (size_t r = 0; r < m.rows.size(); ++r) {
    const Milp::Row& row = m.rows[r];
    for (size_t k = 0; k < row.cols.size(); ++k)
      by_col[static_cast<size_t>(row.cols[k])].emplace_back(static_cast<int>(r), row.coefs[k]);
    row_lb.push_back(row.sense == 'G' ? row.rhs : -kInfinity);
    row_ub.push_back(row.sense == 'L' ? row.rhs : kInfinity);
  }
  std::vector<CoinBigIndex> start{0};
  std::vector<int> index;
  std::vector<double> value;
  for (const auto& col : by_col) {
    for (auto [r, c] : col) {
      index.push_back(r);
      value.push_back(c);
    }
    start.push_back(static_cast<CoinBigIndex>(index.size()));
  }
  std::vector<double> lb(static_cast<size_t>(ncols), 0.0), ub(static_cast<size_t>(ncols), 1.0);
  Cbc_Model* model = Cbc_newModel();
  if (model == nullptr) return Status::Internal("CBC could not create a model");
  Cbc_loadProblem(model, ncols, static_cast<int>(m.rows.size()), start.data(), index.data(), value.data(), lb.data(),
                  ub.data(), m.obj.data(), row_lb.data(), row_ub.data());
  for (int c = 0; c < ncols; ++c) Cbc_setInteger(model, c);
  Cbc_setLogLevel(model, 0);
  Cbc_setMaximumSeconds(model, limits.seconds);
  if (limits.max_nodes > 0) Cbc_setMaximumNodes(model, limits.max_nodes);
  if (limits.first_solution) {
    // Feasibility only: stop at the first solution, and spend little on root cuts, which
    // tighten the bound (useless here) more than they help find a solution (3x faster probes).
    Cbc_setMaximumSolutions(model, 1);
    Cbc_setParameter(model, "passC", "5");
  }
  const auto t0 = std::chrono::steady_clock::now();
  // The solve runs in a child process (plan/contained.h): a solver abort ends only that process.
  Result<std::vector<double>> packed = run_contained("the MILP solver (CBC)", limits.seconds, [&]() {
    Cbc_solve(model);
    std::vector<double> out = {Cbc_isProvenOptimal(model) != 0 ? 1.0 : 0.0,
                               Cbc_isProvenInfeasible(model) != 0 ? 1.0 : 0.0, 0.0, 0.0, 0.0};
    if (const double* best = Cbc_bestSolution(model); best != nullptr && out[1] == 0) {
      out[2] = 1;
      out[3] = Cbc_getObjValue(model);
      out[4] = Cbc_getBestPossibleObjValue(model);
      out.insert(out.end(), best, best + ncols);
    }
    return out;
  });
  Cbc_deleteModel(model);
  if (!packed.ok()) return packed.status();
  if (packed->size() < 5) return Status::Internal("the MILP solver's process returned too little");
  MilpSolution s;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.proven_optimal = (*packed)[0] != 0;
  s.proven_infeasible = (*packed)[1] != 0;
  if ((*packed)[2] != 0) {
    s.feasible = true;
    s.objective = (*packed)[3];
    s.bound = (*packed)[4];
    s.x.assign(packed->begin() + 5, packed->end());
  }
  return s;
}
#endif

class Checkmate {
 public:
  Checkmate(const PlanContext& ctx, const PlanFacts& facts) : ctx_(ctx), f_(facts), g_(facts.g()) {}

  // Plans for ctx.budget_bytes. With first_solution, CBC stops at its first feasible solution:
  // enough to tell whether the budget can be met (find_min_budget's probes).
  Result<PlanAttempt> run(bool first_solution = false) {
    if (ctx_.budget_bytes == 0 || ctx_.budget_bytes >= f_.none_device_bytes) {
      // Recomputing nothing fits, and no plan recomputes less: optimal without a solve.
      FERRY_ASSIGN_OR_RETURN(PlanAttempt a, finish_attempt(ctx_, f_, empty_schedule(ctx_, "checkmate")));
      a.notes = "the keep plan fits: nothing to rematerialise";
      a.proven_optimal = true;
      return a;
    }
    FERRY_RETURN_IF_ERROR(prepare());
    FERRY_ASSIGN_OR_RETURN(PlanAttempt a, solve_rounds(first_solution));
    if (!a.fits && !first_solution) {
      // The optimised solution may place worse than the first one CBC finds, which is what
      // find_min_budget's probes accepted: fall back to it so that both agree.
      FERRY_ASSIGN_OR_RETURN(PlanAttempt first, solve_rounds(true));
      if (first.fits) return first;
    }
    return a;
  }

 private:
  // Solves for the budget, places the plan, and solves again with the budget lowered by the
  // excess when placement does not fit (a few rounds).
  Result<PlanAttempt> solve_rounds(bool first_solution) {
#ifdef FERRY_HAVE_CBC
    uint64_t target = ctx_.budget_bytes;
    PlanAttempt best;
    bool have_best = false;
    double total_seconds = 0;
    for (int round = 0; round < kMaxRounds; ++round) {
      const SolveLimits limits{ctx_.options.checkmate_time_limit_s, ctx_.options.checkmate_max_nodes, first_solution};
      FERRY_ASSIGN_OR_RETURN(MilpSolution sol, solve_milp(build(target), limits));
      total_seconds += sol.seconds;
      if (!sol.feasible) {
        if (have_best) break;
        FERRY_ASSIGN_OR_RETURN(PlanAttempt a, finish_attempt(ctx_, f_, empty_schedule(ctx_, "checkmate")));
        a.fits = false;  // the keep plan stands in; it is what fits when nothing is recomputed
        a.solve_seconds = total_seconds;
        a.notes = fmt::format("{} for {} ({} variables, {} constraints, {:.2f} s)",
                              sol.proven_infeasible ? "MILP infeasible" : "no solution within the limits",
                              format_bytes(target), num_vars_, rows_, total_seconds);
        return a;
      }
      FERRY_ASSIGN_OR_RETURN(PlanAttempt a, finish_attempt(ctx_, f_, to_schedule(sol.x)));
      a.solve_seconds = total_seconds;
      a.proven_optimal = sol.proven_optimal;
      a.mip_gap = sol.objective <= 1e-9 ? 0 : std::max(0.0, (sol.objective - sol.bound) / sol.objective);
      a.notes = fmt::format("MILP {} variables, {} constraints; {} in {:.2f} s, gap {:.2f}%, {:.1f} us recomputed",
                            num_vars_, rows_,
                            sol.proven_optimal ? "optimal" : first_solution ? "first solution" : "stopped at a limit",
                            total_seconds, 100 * a.mip_gap, recompute_us(sol.x));
      if (a.fits) return a;
      const uint64_t excess = a.measure.device_bytes - ctx_.budget_bytes;
      if (!have_best || a.measure.device_bytes < best.measure.device_bytes) {
        best = std::move(a);
        have_best = true;
      }
      // Fragmentation: lower the program's budget by the excess, more each round.
      const uint64_t step = std::max(excess, f_.alignment) * static_cast<uint64_t>(round + 1);
      if (step >= target) break;
      target -= step;
    }
    return best;
#else
    (void)first_solution;
    return Status::Unsupported("checkmate needs CBC (coinor-libcbc-dev), and Ferry was built without it");
#endif
  }

  Status prepare() {
    if (!f_.single_pass)
      return Status::Unsupported(
          "checkmate's formulation (forward stages, then backward stages) needs one forward/backward pass; this "
          "iteration has several (gradient accumulation): use --policy ferry, which plans every pass");
    if (g_.ops.size() > ctx_.options.checkmate_max_ops)
      return Status::Unsupported(fmt::format("graph too large for checkmate ({} ops > limit {})", g_.ops.size(),
                                             ctx_.options.checkmate_max_ops));
    FERRY_RETURN_IF_ERROR(index_variables());
#ifndef FERRY_HAVE_CBC
    return Status::Unsupported("checkmate needs CBC (coinor-libcbc-dev), and Ferry was built without it");
#else
    return compute_fixed_bytes();
#endif
  }

  size_t idx(TensorId t) const { return static_cast<size_t>(t); }
  OpId nf() const { return f_.num_forward; }
  // Empty tensors hold nothing: they stay on the device and get no variable.
  bool in_v(TensorId t) const { return f_.recomputable(t) && g_.tensor(t).bytes > 0; }

  // Which (stage, tensor) and (stage, op) pairs get a variable. need(v) = the stages that may
  // read v: its backward readers, and the stages where a forward consumer of v may be
  // recomputed. J(p) = the union of need(w) over p's outputs: op p is recomputed only in those
  // stages, just in time. (Also allowing the few stages before each, so that a long chain can be
  // recomputed over several stages, did not lower the smallest feasible budget on the test
  // models and made CBC 3-5x slower.) S[j, v] exists from the first backward stage to the last stage in need(v); it can
  // only change at a breakpoint (a stage that reads v or may recompute its producer), so one variable per interval
  // between breakpoints stands for all of its stages. Tensors are visited by producer, last first, since consumers'
  // outputs come later.
  Status index_variables() {
    const size_t nt = g_.tensors.size();
    const size_t nb = g_.ops.size() - static_cast<size_t>(nf());
    horizon_.assign(nt, kNoOp);
    std::vector<TensorId> order;
    for (const Tensor& t : g_.tensors)
      if (in_v(t.id)) order.push_back(t.id);
    std::stable_sort(order.begin(), order.end(), [&](TensorId a, TensorId b) {
      return f_.producer[idx(a)] > f_.producer[idx(b)];
    });
    std::vector<std::vector<bool>> op_stages(static_cast<size_t>(nf()), std::vector<bool>(nb, false));
    need_.assign(nt, {});
    for (TensorId v : order) {
      std::vector<bool> need(nb, false);
      for (OpId c : f_.info(v).consumers) {
        if (c >= nf()) {
          need[static_cast<size_t>(c - nf())] = true;
        } else {
          const std::vector<bool>& js = op_stages[static_cast<size_t>(c)];
          for (size_t k = 0; k < nb; ++k) need[k] = need[k] || js[k];
        }
      }
      std::vector<bool>& mine = op_stages[static_cast<size_t>(f_.producer[idx(v)])];
      for (size_t k = 0; k < nb; ++k) {
        mine[k] = mine[k] || need[k];
        if (need[k]) need_[idx(v)].push_back(nf() + static_cast<OpId>(k));
      }
      if (!need_[idx(v)].empty()) horizon_[idx(v)] = need_[idx(v)].back();
    }
    // Each tensor's breakpoints.
    const std::vector<std::vector<bool>>& r_stages = op_stages;
    for (TensorId v : order) {
      if (horizon_[idx(v)] == kNoOp) continue;
      const std::vector<bool>& rs = r_stages[static_cast<size_t>(f_.producer[idx(v)])];
      std::vector<OpId> points;
      size_t next_need = 0;
      const std::vector<OpId>& need = need_[idx(v)];
      for (OpId j = nf(); j <= horizon_[idx(v)]; ++j) {
        const bool is_need = next_need < need.size() && need[next_need] == j;
        if (is_need) ++next_need;
        if (is_need || rs[static_cast<size_t>(j - nf())]) points.push_back(j);
      }
      need_[idx(v)] = std::move(points);
    }
    s_base_.assign(nt, -1);
    r_index_.assign(static_cast<size_t>(nf()) * nb, -1);
    num_vars_ = 0;
    for (const Tensor& t : g_.tensors)
      if (in_v(t.id) && horizon_[idx(t.id)] >= nf()) {
        s_base_[idx(t.id)] = num_vars_;
        num_vars_ += static_cast<int>(need_[idx(t.id)].size());
      }
    recomputed_op_.assign(static_cast<size_t>(nf()), false);
    for (OpId p = 0; p < nf(); ++p)
      for (size_t k = 0; k < nb; ++k)
        if (r_stages[static_cast<size_t>(p)][k]) {
          r_index_[static_cast<size_t>(p) * nb + k] = num_vars_++;
          recomputed_op_[static_cast<size_t>(p)] = true;
        }
    if (static_cast<size_t>(num_vars_) > ctx_.options.checkmate_max_variables)
      return Status::Unsupported(fmt::format("graph too large for checkmate ({} ops: {} MILP variables > limit {})",
                                             g_.ops.size(), num_vars_, ctx_.options.checkmate_max_variables));
    return Status::Ok();
  }

  // S[j, v] is constant between breakpoints u_1 < u_2 < ...: G_k stands for the stages
  // (u_k, u_k+1], G_0 for the first backward stage up to u_1.
  int s_var(TensorId v, OpId j) const {
    if (s_base_[idx(v)] < 0 || j < nf() || j > horizon_[idx(v)]) return -1;
    const std::vector<OpId>& u = need_[idx(v)];
    return s_base_[idx(v)] + static_cast<int>(std::lower_bound(u.begin(), u.end(), j) - u.begin());
  }
  int r_var(OpId p, OpId j) const {
    if (p < 0 || p >= nf() || j < nf() || j >= static_cast<OpId>(g_.ops.size())) return -1;
    const size_t nb = g_.ops.size() - static_cast<size_t>(nf());
    return r_index_[static_cast<size_t>(p) * nb + static_cast<size_t>(j - nf())];
  }
  uint64_t out_bytes(OpId p) const {
    uint64_t b = 0;
    for (TensorId w : g_.op(p).outputs)
      if (in_v(w)) b += f_.aligned_bytes(w);
    return b;
  }

  // fixed(s): the keep plan's blocks that hold no candidate tensor (persistent region included).
  // A data input that a recomputable op reads stays until the end: a recompute may read it
  // after its last use in the keep plan, which extends its life.
  Status compute_fixed_bytes() {
    Result<Program> keep = lower_schedule(g_, Schedule{}, f_.program_options);
    if (!keep.ok()) return Status::Internal(keep.status().message());
    FERRY_ASSIGN_OR_RETURN(ProgramPlacement pl, place_program(g_, *keep, f_.alignment));
    fixed_.assign(g_.ops.size(), pl.persistent_region_bytes);
    for (const Buffer& b : pl.blocks) {
      bool candidate = !b.tensors.empty();
      for (TensorId t : b.tensors) candidate = candidate && in_v(t);
      if (candidate) continue;
      OpId last = b.last_step;
      for (TensorId t : b.tensors)
        if (g_.tensor(t).role == TensorRole::kInput)
          for (OpId c : f_.info(t).consumers)
            if (c < nf() && recomputed_op_[static_cast<size_t>(c)]) last = static_cast<OpId>(g_.ops.size()) - 1;
      for (OpId s = b.first_step; s <= last; ++s) fixed_[static_cast<size_t>(s)] += align_up(b.bytes, f_.alignment);
    }
    return Status::Ok();
  }

  // The program for `budget` (memory rows are scaled by it, so coefficients are <= 1).
  Milp build(uint64_t budget) {
    Milp m;
    for (int k = 0; k < num_vars_; ++k) m.add_var(0);
    for (OpId p = 0; p < nf(); ++p)
      for (OpId j = nf(); j < static_cast<OpId>(g_.ops.size()); ++j)
        if (int r = r_var(p, j); r >= 0)
          m.obj[static_cast<size_t>(r)] = f_.op_us[static_cast<size_t>(p)] + kRecomputeEpsilonUs;
    // Among plans of equal time, hold less: a tiny cost per kept interval, by size.
    for (const Tensor& t : g_.tensors)
      for (OpId j = nf(); j <= horizon_[idx(t.id)]; ++j)
        if (int v = s_var(t.id, j); v >= 0)
          m.obj[static_cast<size_t>(v)] = kKeepEpsilonUs * static_cast<double>(f_.aligned_bytes(t.id)) /
                                          static_cast<double>(budget);
    // A row over the variables that exist (an absent variable is a constant 0).
    auto row = [&](std::vector<int> cols, std::vector<double> coefs, char sense, double rhs) {
      Milp::Row r{{}, {}, sense, rhs};
      for (size_t k = 0; k < cols.size(); ++k)
        if (cols[k] >= 0) {
          r.cols.push_back(cols[k]);
          r.coefs.push_back(coefs[k]);
        }
      m.rows.push_back(std::move(r));
    };
    const double scale = static_cast<double>(budget);
    // sum coefs . x <= 1 - fixed / scale.
    auto memory_row = [&](std::vector<int> cols, std::vector<double> coefs, uint64_t fixed) {
      row(std::move(cols), std::move(coefs), 'L', 1.0 - static_cast<double>(fixed) / scale);
    };
    // Forward memory: tensors alive by their forward uses are constants, kept ones cost K[v].
    for (OpId s = 0; s < nf(); ++s) {
      uint64_t constant = fixed_[static_cast<size_t>(s)];
      std::vector<int> cols;
      std::vector<double> coefs;
      for (const Tensor& t : g_.tensors) {
        if (!in_v(t.id)) continue;
        const OpId p = f_.producer[idx(t.id)];
        if (s < p) continue;
        if (s <= f_.forward_end(t.id)) {
          constant += f_.aligned_bytes(t.id);
        } else if (s_var(t.id, nf()) >= 0) {
          cols.push_back(s_var(t.id, nf()));
          coefs.push_back(static_cast<double>(f_.aligned_bytes(t.id)) / scale);
        }
      }
      memory_row(std::move(cols), std::move(coefs), constant);
    }
    for (OpId j = nf(); j < static_cast<OpId>(g_.ops.size()); ++j) {
      // Backward memory at stage j.
      std::vector<int> cols;
      std::vector<double> coefs;
      for (const Tensor& t : g_.tensors)
        if (int v = s_var(t.id, j); v >= 0) {
          cols.push_back(v);
          coefs.push_back(static_cast<double>(f_.aligned_bytes(t.id)) / scale);
        }
      for (OpId p = 0; p < nf(); ++p)
        if (int r = r_var(p, j); r >= 0) {
          cols.push_back(r);
          coefs.push_back(static_cast<double>(out_bytes(p)) / scale);
        }
      memory_row(std::move(cols), std::move(coefs), fixed_[static_cast<size_t>(j)]);
      // What backward op j reads is kept or recomputed in this stage.
      for (TensorId v : f_.analysis.step_inputs[static_cast<size_t>(j)]) {
        if (!in_v(v)) continue;
        row({s_var(v, j), r_var(f_.producer[idx(v)], j)}, {1, 1}, 'G', 1);
      }
      // A recompute's inputs are kept or recomputed before it, in the same stage.
      for (OpId c = 0; c < nf(); ++c) {
        const int rc = r_var(c, j);
        if (rc < 0) continue;
        for (TensorId v : f_.analysis.step_inputs[static_cast<size_t>(c)]) {
          if (!in_v(v)) continue;
          row({rc, s_var(v, j), r_var(f_.producer[idx(v)], j)}, {1, -1, -1}, 'L', 0);
        }
      }
      // Only what exists in stage j can be kept into stage j + 1.
      for (const Tensor& t : g_.tensors) {
        const int next = s_var(t.id, j + 1);
        if (next < 0 || next == s_var(t.id, j)) continue;
        row({next, s_var(t.id, j), r_var(f_.producer[idx(t.id)], j)}, {1, -1, -1}, 'L', 0);
      }
    }
    rows_ = m.rows.size();
    return m;
  }

  // Op time the solution recomputes.
  double recompute_us(const std::vector<double>& x) const {
    double us = 0;
    for (OpId p = 0; p < nf(); ++p)
      for (OpId j = nf(); j < static_cast<OpId>(g_.ops.size()); ++j)
        if (int r = r_var(p, j); r >= 0 && x[static_cast<size_t>(r)] > 0.5) us += f_.op_us[static_cast<size_t>(p)];
    return us;
  }

  Schedule to_schedule(const std::vector<double>& x) const {
    auto on = [&](int var) { return var >= 0 && x[static_cast<size_t>(var)] > 0.5; };
    Schedule s = empty_schedule(ctx_, "checkmate");
    for (const Tensor& t : g_.tensors)
      if (s_var(t.id, nf()) >= 0 && !on(s_var(t.id, nf()))) add_after(s, f_.forward_end(t.id), release_action(t.id));
    for (OpId j = nf(); j < static_cast<OpId>(g_.ops.size()); ++j) {
      // Outputs wanted in this stage: read by op j, by a later recompute here, or kept into j+1.
      std::vector<bool> wanted(g_.tensors.size(), false);
      for (TensorId v : g_.op(j).inputs) wanted[idx(v)] = true;
      for (OpId c = nf() - 1; c >= 0; --c) {
        if (!on(r_var(c, j))) continue;
        for (TensorId v : g_.op(c).inputs) wanted[idx(v)] = true;
      }
      for (OpId p = 0; p < nf(); ++p) {
        if (!on(r_var(p, j))) continue;
        for (TensorId w : g_.op(p).outputs)
          if (in_v(w) && (wanted[idx(w)] || on(s_var(w, j + 1)))) add_before(s, j, recompute_action(w));
      }
      for (const Tensor& t : g_.tensors)
        if (s_var(t.id, j + 1) >= 0 && !on(s_var(t.id, j + 1))) add_after(s, j, release_action(t.id));
    }
    return s;
  }

  const PlanContext& ctx_;
  const PlanFacts& f_;
  const Graph& g_;
  std::vector<OpId> horizon_;     // per tensor: last stage that may need it (kNoOp: none)
  std::vector<std::vector<OpId>> need_;  // per tensor: its breakpoints, ascending
  std::vector<int> s_base_;       // per tensor: variable of S[nf, v] (S[j, v] follows), or -1
  std::vector<int> r_index_;      // per (forward op, backward stage): variable of R, or -1
  std::vector<bool> recomputed_op_;  // per forward op: has an R variable
  int num_vars_ = 0;
  size_t rows_ = 0;
  std::vector<uint64_t> fixed_;   // per step: bytes the program does not decide
};

}  // namespace

Result<PlanAttempt> plan_checkmate(const PlanContext& ctx, const PlanFacts& facts) {
  return Checkmate(ctx, facts).run();
}

Result<uint64_t> checkmate_min_budget(const PlanContext& ctx, const PlanFacts& facts) {
  // Any feasible solution shows a budget can be met, so probes stop at CBC's first one. The
  // MILP's feasibility is monotone in the budget (a solution for one budget satisfies every row
  // for a larger one), so bisection is sound for it; what is not monotone is whether CBC finds a
  // solution within its limits and whether the placed arena (fragmentation) stays within the
  // budget. No scan below (lowest_fit_below): each probe is a CBC solve of seconds to minutes.
  return bisect_min_budget(ctx, facts, [&](uint64_t budget) -> Result<bool> {
    PlanContext c = ctx;
    c.budget_bytes = budget;
    FERRY_ASSIGN_OR_RETURN(PlanAttempt a, Checkmate(c, facts).run(true));
    return a.fits;
  });
}

}  // namespace ferry
