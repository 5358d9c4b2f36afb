// Planning shared by `ferry plan` and `ferry train`: the sizes a plan is made for and the policy.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "cost/cost_model.h"
#include "graph/graph.h"
#include "plan/policies.h"

namespace ferry::cli {

// Replaces the graph's tensor sizes with the CPU backend's (blocked layouts) and returns its
// per-op scratch, so that plans are made for the bytes `ferry train` will really use.
Result<std::vector<uint64_t>> apply_backend_sizes(Graph& g);

// Parses --tier.
Result<Tier> parse_tier(const std::string& s);

}  // namespace ferry::cli
