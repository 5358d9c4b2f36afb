// A sparse linear (or mixed-integer) program, built row by row, solved with COIN-OR's Clp (LP) or
// Cbc (MILP) through their C interfaces. Shared by the lower bound and ferry-exact.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/status.h"
#include "plan/contained.h"

namespace ferry::planner {

inline constexpr double kInfinity = std::numeric_limits<double>::infinity();

class LinearProgram {
 public:
  // Adds a column (variable) with bounds and objective coefficient (minimised); returns its index.
  int add_column(double lower, double upper, double objective = 0, bool integer = false);
  // Adds lower <= sum(coef * x[col]) <= upper; terms on the same column are summed.
  void add_row(const std::vector<std::pair<int, double>>& terms, double lower, double upper);

  size_t num_columns() const { return lower_.size(); }
  size_t num_rows() const { return row_lower_.size(); }
  bool has_integers() const;

  struct Solution {
    bool optimal = false;         // proven optimal (LP), or integer-optimal (MILP)
    bool feasible = false;        // a solution was found
    bool infeasible = false;      // proven infeasible
    double objective = 0;         // of the best solution found
    double bound = 0;             // the best lower bound proven (LP: the optimum)
    double seconds = 0;
    std::vector<double> values;   // per column
  };
  // A solve under way in its own process (plan/contained.h): wait() answers it.
  class Pending {
   public:
    Result<Solution> wait();

   private:
    friend class LinearProgram;
    Pending(ContainedRun run, std::chrono::steady_clock::time_point start) : run_(std::move(run)), start_(start) {}
    ContainedRun run_;
    std::chrono::steady_clock::time_point start_;
  };
  // Starts the solve and returns at once; `time_limit_s` bounds the solver's wall time,
  // `max_nodes` the MILP's branch-and-bound nodes (0: none). The program may change or go once
  // this returns. Errors: Unsupported when Ferry was built without COIN-OR.
  Result<Pending> start_solve(double time_limit_s, int max_nodes = 0) const;
  // start_solve(...).wait().
  Result<Solution> solve(double time_limit_s, int max_nodes = 0) const;

 private:
  std::vector<double> lower_, upper_, objective_;
  std::vector<bool> integer_;
  std::vector<std::vector<std::pair<int, double>>> rows_;
  std::vector<double> row_lower_, row_upper_;
};

}  // namespace ferry::planner
