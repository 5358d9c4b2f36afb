// Options shared by the `ferry` subcommands: which graph to work on, and output helpers.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "common/status.h"
#include "graph/graph.h"

namespace ferry::cli {

struct GraphOptions {
  std::string model;
  std::string trace;
  int64_t batch = 0;  // 0 = not given
  int64_t image = 0;
  int64_t seq = 0;
  std::string optimizer = "sgd";
  float lr = 0.0f;  // 0 = the optimizer's default
  std::string precision;  // "" = not given: fp32 for zoo models, the trace's own for traces
};

// Adds --model/--trace/--batch/--image/--seq/--optimizer/--precision to a subcommand.
void add_graph_options(CLI::App* app, GraphOptions& o, const std::string& default_model, int64_t default_batch);
// Builds the zoo model (in --precision) or loads the trace the options name. A trace keeps its own
// precision; --precision may only switch an fp32 trace to tf32 or back (same tensors), else it is
// InvalidArgument.
Result<Graph> load_graph(const GraphOptions& o);
// A one-line description: "resnet50 (batch 32, image 224, sgd)".
std::string describe(const Graph& g);

// Prints "ferry: error: <message>" to stderr and returns the status's exit code.
int report(const Status& s);

// Thousands separators: 25557032 -> "25,557,032".
std::string with_commas(uint64_t v);

}  // namespace ferry::cli
