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

#include <functional>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ferry {

// Runs `work` in a child process and returns what it returned. `time_limit_s` is the solver's own
// time limit: a child that has not answered within twice that and `grace_s` is stopped (SIGKILL);
// no deadline where the limit is not a positive finite number.
// A child forked while another thread holds a lock can hang on it for good, so callers fork only
// where no other thread of theirs runs (plan/policy.cc's portfolio); the deadline is the guard
// behind that rule. Errors (Internal): the child crashed, was stopped or could not be started (the
// message names `what`).
Result<std::vector<double>> run_contained(std::string_view what, double time_limit_s,
                                          const std::function<std::vector<double>()>& work, double grace_s = 60);

}  // namespace ferry
