#include "plan/ferry/lp.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "plan/contained.h"

#ifdef FERRY_HAVE_CBC
#include <Cbc_C_Interface.h>
#include <Clp_C_Interface.h>
#endif

namespace ferry::planner {

int LinearProgram::add_column(double lower, double upper, double objective, bool integer) {
  lower_.push_back(lower);
  upper_.push_back(upper);
  objective_.push_back(objective);
  integer_.push_back(integer);
  return static_cast<int>(lower_.size()) - 1;
}

void LinearProgram::add_row(const std::vector<std::pair<int, double>>& terms, double lower, double upper) {
  std::map<int, double> merged;
  for (auto [col, coef] : terms) merged[col] += coef;
  std::vector<std::pair<int, double>> row;
  for (auto [col, coef] : merged)
    if (coef != 0) row.emplace_back(col, coef);
  rows_.push_back(std::move(row));
  row_lower_.push_back(lower);
  row_upper_.push_back(upper);
}

bool LinearProgram::has_integers() const { return std::find(integer_.begin(), integer_.end(), true) != integer_.end(); }

#ifdef FERRY_HAVE_CBC

namespace {

// COIN-OR's "infinity" for bounds.
double coin(double v) { return std::isinf(v) ? (v > 0 ? 1e30 : -1e30) : v; }

}  // namespace

Result<LinearProgram::Pending> LinearProgram::start_solve(double time_limit_s, int max_nodes) const {
  const auto start = std::chrono::steady_clock::now();
  const int ncols = static_cast<int>(num_columns());
  const int nrows = static_cast<int>(num_rows());
  // Column-major copy of the rows.
  std::vector<int> count(static_cast<size_t>(ncols), 0);
  for (const auto& row : rows_)
    for (auto [col, coef] : row) ++count[static_cast<size_t>(col)];
  std::vector<int> col_start(static_cast<size_t>(ncols) + 1, 0);
  for (int c = 0; c < ncols; ++c) col_start[static_cast<size_t>(c) + 1] = col_start[static_cast<size_t>(c)] + count[static_cast<size_t>(c)];
  std::vector<int> index(static_cast<size_t>(col_start.back()));
  std::vector<double> value(index.size());
  std::vector<int> fill(col_start.begin(), col_start.end() - 1);
  for (int r = 0; r < nrows; ++r)
    for (auto [col, coef] : rows_[static_cast<size_t>(r)]) {
      const int at = fill[static_cast<size_t>(col)]++;
      index[static_cast<size_t>(at)] = r;
      value[static_cast<size_t>(at)] = coef;
    }
  std::vector<double> lb(lower_.size()), ub(upper_.size()), rlb(row_lower_.size()), rub(row_upper_.size());
  std::transform(lower_.begin(), lower_.end(), lb.begin(), coin);
  std::transform(upper_.begin(), upper_.end(), ub.begin(), coin);
  std::transform(row_lower_.begin(), row_lower_.end(), rlb.begin(), coin);
  std::transform(row_upper_.begin(), row_upper_.end(), rub.begin(), coin);
  // The solve runs in a child process (plan/contained.h): a solver abort ends only that process.
  auto solve_here = [&]() {
    Solution s;
    if (!has_integers()) {
      Clp_Simplex* model = Clp_newModel();
      Clp_setLogLevel(model, 0);
      Clp_loadProblem(model, ncols, nrows, col_start.data(), index.data(), value.data(), lb.data(), ub.data(),
                      objective_.data(), rlb.data(), rub.data());
      Clp_setMaximumSeconds(model, time_limit_s);
      // Clp's general solve: presolve, then the algorithm it judges best. On the bound's LPs it
      // reaches the same optimum as plain dual simplex 1.4-8x faster (depth-1001 ResNet: 10.4 s ->
      // 1.9 s; bench/results/planning-speed-2026-11-27.md).
      Clp_initialSolve(model);
      const int status = Clp_status(model);  // 0 optimal, 1 infeasible, 2 unbounded, 3 stopped
      s.optimal = status == 0;
      s.infeasible = status == 1;
      s.feasible = status == 0;
      if (s.feasible) {
        s.objective = s.bound = Clp_objectiveValue(model);
        const double* x = Clp_getColSolution(model);
        s.values.assign(x, x + ncols);
      }
      Clp_deleteModel(model);
    } else {
      Cbc_Model* model = Cbc_newModel();
      Cbc_loadProblem(model, ncols, nrows, col_start.data(), index.data(), value.data(), lb.data(), ub.data(),
                      objective_.data(), rlb.data(), rub.data());
      for (int c = 0; c < ncols; ++c)
        if (integer_[static_cast<size_t>(c)]) Cbc_setInteger(model, c);
      Cbc_setLogLevel(model, 0);
      Cbc_setMaximumSeconds(model, time_limit_s);
      if (max_nodes > 0) Cbc_setMaximumNodes(model, max_nodes);
      Cbc_solve(model);
      s.optimal = Cbc_isProvenOptimal(model) != 0;
      s.infeasible = Cbc_isProvenInfeasible(model) != 0;
      const double* best = Cbc_bestSolution(model);
      s.feasible = best != nullptr;
      s.bound = Cbc_getBestPossibleObjValue(model);
      if (s.feasible) {
        s.objective = Cbc_getObjValue(model);
        s.values.assign(best, best + ncols);
      }
      Cbc_deleteModel(model);
    }
    std::vector<double> packed = {s.optimal ? 1.0 : 0.0, s.infeasible ? 1.0 : 0.0, s.feasible ? 1.0 : 0.0, s.objective,
                                  s.bound};
    packed.insert(packed.end(), s.values.begin(), s.values.end());
    return packed;
  };
  FERRY_ASSIGN_OR_RETURN(ContainedRun run,
                         ContainedRun::start(has_integers() ? "the MILP solver (CBC)" : "the LP solver (Clp)",
                                             time_limit_s, solve_here));
  return Pending(std::move(run), start);
}

Result<LinearProgram::Solution> LinearProgram::Pending::wait() {
  FERRY_ASSIGN_OR_RETURN(std::vector<double> packed, run_.wait());
  if (packed.size() < 5) return Status::Internal("the solver's process returned too little");
  Solution s;
  s.optimal = packed[0] != 0;
  s.infeasible = packed[1] != 0;
  s.feasible = packed[2] != 0;
  s.objective = packed[3];
  s.bound = packed[4];
  s.values.assign(packed.begin() + 5, packed.end());
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  return s;
}

#else

Result<LinearProgram::Pending> LinearProgram::start_solve(double, int) const {
  return Status::Unsupported("Ferry was built without COIN-OR (CBC/Clp): no linear programs can be solved");
}

Result<LinearProgram::Solution> LinearProgram::Pending::wait() {
  return Status::Unsupported("Ferry was built without COIN-OR (CBC/Clp): no linear programs can be solved");
}

#endif

Result<LinearProgram::Solution> LinearProgram::solve(double time_limit_s, int max_nodes) const {
  FERRY_ASSIGN_OR_RETURN(Pending pending, start_solve(time_limit_s, max_nodes));
  return pending.wait();
}

}  // namespace ferry::planner
