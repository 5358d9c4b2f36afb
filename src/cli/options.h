// Options shared by the `ferry` subcommands: which graph to work on, and output helpers.
#pragma once

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "common/status.h"
#include "graph/graph.h"

namespace ferry::cli {

// Without --update-order, `ferry plan` and `ferry train` plan a zoo model's end order with ferry
// and try the interleaved order too only where that plan is more than this factor over its lower
// bound, or does not fit: closer than that, the other order has little to give (over the planner
// matrix of 2026-12-06, --update-order auto gained at most 1.1% in the cells within 5% of their
// bound) and doubling the planning time is not worth it.
constexpr double kOtherOrderAboveGap = 1.05;
// Two orders' predicted times closer than this (relative) are a tie, which the graph's own order
// wins: a plan "faster" by rounding noise (preact-resnet164 b32 at 33% on cpu-local: the two orders'
// plans 669.276164 ms both) does not change the order trained.
constexpr double kOrderTieRelative = 1e-6;

struct GraphOptions {
  std::string model;
  std::string trace;
  int64_t batch = 0;  // 0 = not given
  int64_t image = 0;
  int64_t seq = 0;
  int32_t depth = 0;  // 0 = not given
  std::string optimizer = "sgd";
  std::optional<double> lr;  // --lr; absent: default_learning_rate()
  std::string precision;  // "" = not given: fp32 for zoo models, the trace's own for traces
  std::string layout;     // "" = not given: nhwc for zoo models, the trace's own for traces
  std::string update_order;  // "" = not given: the graph's own (zoo: end; a trace: its order); plan: also auto
};

// Adds --model/--trace/--batch/--image/--seq/--optimizer/--precision to a subcommand (--trace
// excludes the model and shape options: a trace carries its own).
void add_graph_options(CLI::App* app, GraphOptions& o, const std::string& default_model, int64_t default_batch);
// Adds --lr (train only); it excludes --trace, whose update ops carry their own rates.
void add_learning_rate_option(CLI::App* app, GraphOptions& o);
// Builds the zoo model (in --precision) or loads the trace the options name. A trace keeps its own
// precision; --precision may only switch an fp32 trace to tf32 or back (same tensors).
// --update-order interleaved moves the updates into the backward pass (graph/update_order.h);
// auto is refused here (`ferry plan` resolves it into both orders before loading).
// Errors: InvalidArgument for an unknown model or optimizer, sizes out of range, a learning rate
// that is not finite and > 0, a precision a trace cannot take, --update-order end on a trace whose
// updates run inside the backward pass (updates are never moved later).
Result<Graph> load_graph(const GraphOptions& o);

// The learning rate used when --lr is not given; see options.cc for where the numbers come from.
double default_learning_rate(OptimizerKind optimizer, bool transformer, int64_t batch);
// --lr's help text, naming the defaults.
std::string learning_rate_help();

// Sets the compute threads (0 = all cores). InvalidArgument for a negative count or one above
// max_compute_threads(), the cores this process may use (more only slow the kernels down, by
// 50x at 3 threads on 2 cores, and 10^5 of them crashed OpenMP).
Status set_compute_threads(int threads);
int max_compute_threads();

// InvalidArgument "OPTION has no effect CONDITION" when `option` was given on `cmd` while `used`
// is false: flags that would be silently ignored are bad usage.
Status check_option_used(const CLI::App& cmd, const std::string& option, bool used, const std::string& condition);
// A one-line description: "resnet50 (batch 32, image 224, sgd)".
std::string describe(const Graph& g);

// Prints "ferry: error: <message>" to stderr and returns the status's exit code.
int report(const Status& s);

// Thousands separators: 25557032 -> "25,557,032".
std::string with_commas(uint64_t v);

}  // namespace ferry::cli
