// Planning shared by `ferry plan` and `ferry train`: the sizes a plan is made for and the policy.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "backend/backend.h"
#include "common/status.h"
#include "cost/cost_model.h"
#include "graph/graph.h"
#include "plan/policies.h"

namespace ferry::cli {

// Adds --conv-algo (BackendOptions) to a subcommand.
void add_backend_options(CLI::App* cmd, std::string& conv_algo);
// The backend options for what add_backend_options() collected. They never depend on the budget
// or the policy: a plan must not change the numbers.
Result<BackendOptions> parse_backend_options(const std::string& conv_algo);
// How a compiled graph runs its convolutions: kernels in all, Winograd ones, and the largest
// scratch of a Winograd kernel.
struct ConvKernelUse {
  int kernels = 0;
  int winograd = 0;
  uint64_t largest_winograd_scratch = 0;
};
ConvKernelUse conv_kernel_use(const Graph& g, const CompiledGraph& compiled);

// `s` with a hint appended when it is OutOfMemory and `g` compiled with `options` runs some
// convolutions as Winograd, whose scratch --conv-algo direct saves.
Status with_conv_hint(Status s, const Graph& g, const BackendOptions& options);

// Replaces the graph's tensor sizes with the CPU backend's (blocked layouts) and returns its
// per-op scratch, so that plans are made for the bytes `ferry train` will really use; `options`
// must be those `ferry train` compiles with (the convolution algorithm changes the scratch).
Result<std::vector<uint64_t>> apply_backend_sizes(Graph& g, const BackendOptions& options);

// Adds --policy (its help lists every policy after `help`) and the per-policy options
// --swapin-ahead, --checkmate-time-limit, --checkmate-max-nodes to a subcommand.
void add_policy_options(CLI::App* cmd, std::string& policy, PolicyOptions& options, const std::string& help);

// Parses --tier: host, ssd, or none (recomputation only: PlanContext::recompute_only, and the
// returned tier is unused).
Result<Tier> parse_tier(const std::string& s);

}  // namespace ferry::cli
