// Running a third-party solver where its crash cannot take Ferry down.
//
// COIN-OR's Clp, as Debian builds it, keeps its internal assertions: on some numerically awkward
// programs (a MILP over measured op times spanning 1 us to 10 ms was one) a pivot check fails and
// the library calls abort(). A planner must not end the training run that asked it for a plan, so
// every CBC/Clp solve runs in a forked child process: the child solves and writes its result (a
// vector of doubles) to a pipe and exits; the parent reads it. A child that dies by a signal or
// exits non-zero becomes an Internal error naming the solver, which the portfolio skips and a
// direct request reports. fork() copies the address space lazily, so the cost is a page-table copy
// (about a millisecond per GiB mapped), small next to a solve.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ferry {

// A child process solving `work`, started by start() and answered by wait(): the caller goes on
// with its own work in between (`ferry plan` solves the bound beside the planner's threads, which
// it starts after the fork). `time_limit_s` is the solver's own time limit: a child that has not
// answered within twice that and `grace_s` of its start is stopped (SIGKILL); no deadline where
// the limit is not a positive finite number. A child whose answer waits in its pipe is never
// stopped, however late wait() comes.
// A child forked while another thread holds a lock can hang on it for good, so callers fork only
// where no other thread of theirs runs (plan/policy.cc's portfolio, before its workers; `ferry
// plan`, before planning); the deadline is the guard behind that rule. Errors (Internal): the child
// crashed, was stopped or could not be started (the message names `what`). A run dropped without
// wait() stops and reaps its child.
class ContainedRun {
 public:
  static Result<ContainedRun> start(std::string_view what, double time_limit_s,
                                    const std::function<std::vector<double>()>& work, double grace_s = 60);
  Result<std::vector<double>> wait();

  ContainedRun(ContainedRun&& o) noexcept;
  ContainedRun& operator=(ContainedRun&& o) noexcept;
  ContainedRun(const ContainedRun&) = delete;
  ContainedRun& operator=(const ContainedRun&) = delete;
  ~ContainedRun();

 private:
  ContainedRun() = default;
  void stop();
  std::string what_;
  double time_limit_s_ = 0, allowed_s_ = 0;
  std::chrono::steady_clock::time_point deadline_;
  int pid_ = -1, fd_ = -1;
};

// start(...).wait(): the caller waits for the child.
Result<std::vector<double>> run_contained(std::string_view what, double time_limit_s,
                                          const std::function<std::vector<double>()>& work, double grace_s = 60);

}  // namespace ferry
