// Planning shared by `ferry plan` and `ferry train`: the sizes a plan is made for and the policy.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/status.h"
#include "cost/cost_model.h"
#include "graph/graph.h"
#include "plan/policies.h"

namespace ferry::cli {

// Replaces the graph's tensor sizes with the CPU backend's (blocked layouts) and returns its
// per-op scratch, so that plans are made for the bytes `ferry train` will really use.
Result<std::vector<uint64_t>> apply_backend_sizes(Graph& g);

// Adds --policy (its help lists every policy after `help`) and the per-policy options
// --swapin-ahead, --checkmate-time-limit, --checkmate-max-nodes to a subcommand.
void add_policy_options(CLI::App* cmd, std::string& policy, PolicyOptions& options, const std::string& help);

// Parses --tier.
Result<Tier> parse_tier(const std::string& s);

}  // namespace ferry::cli
