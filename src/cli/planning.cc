#include "cli/planning.h"

#include <fmt/format.h>

#include "backend/backend.h"

namespace ferry::cli {

Result<std::vector<uint64_t>> apply_backend_sizes(Graph& g) {
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, make_backend("cpu"));
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<CompiledGraph> compiled, backend->compile(g));
  for (Tensor& t : g.tensors) t.bytes = compiled->tensor_bytes(t.id);
  return compiled->all_scratch_bytes();
}

Result<Tier> parse_tier(const std::string& s) {
  if (s == "host") return Tier::kHost;
  if (s == "ssd") return Tier::kSsd;
  return Status::InvalidArgument(fmt::format("unknown tier '{}' (use host or ssd)", s));
}

void add_policy_options(CLI::App* cmd, std::string& policy, PolicyOptions& options, const std::string& help) {
  std::string policies;
  for (const PolicyInfo& p : list_policies()) policies += "\n    " + p.name + ": " + p.summary;
  cmd->add_option("--policy", policy, help + policies)->capture_default_str();
  cmd->add_option("--swapin-ahead", options.lms_swapin_ahead, "lms: swap in this many ops ahead")->capture_default_str();
  cmd->add_option("--checkmate-time-limit", options.checkmate_time_limit_s,
                  "checkmate: CBC time limit per solve, seconds (a plan takes 1-6 solves)")
      ->capture_default_str();
  cmd->add_option("--checkmate-max-nodes", options.checkmate_max_nodes,
                  "checkmate: CBC branch-and-bound node limit per solve, 0 = none (unlike time, deterministic)")
      ->capture_default_str();
}

}  // namespace ferry::cli
