#include "cli/planning.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "backend/backend.h"
#include "common/units.h"

namespace ferry::cli {

void add_backend_options(CLI::App* cmd, std::string& conv_algo) {
  cmd->add_option("--conv-algo", conv_algo,
                  "Convolution algorithm: auto (Winograd for 3x3 stride-1 layers with enough 4x4 output tiles per "
                  "thread and a scratch under 1/32 of the iteration's tensor bytes, direct elsewhere), direct (least "
                  "scratch, smallest rounding error), or winograd (for every 3x3 stride-1 layer oneDNN supports). "
                  "See docs/backend-conventions.md")
      ->capture_default_str();
}

Result<BackendOptions> parse_backend_options(const std::string& conv_algo) {
  FERRY_ASSIGN_OR_RETURN(ConvAlgorithm algo, parse_conv_algorithm(conv_algo));
  return BackendOptions{.conv_algorithm = algo};
}

ConvKernelUse conv_kernel_use(const Graph& g, const CompiledGraph& compiled) {
  ConvKernelUse use;
  for (const Op& op : g.ops) {
    if (op_class_of(op.type) != OpClass::kConv) continue;
    ++use.kernels;
    if (compiled.implementation(op.id).find("wino") == std::string::npos) continue;
    ++use.winograd;
    use.largest_winograd_scratch = std::max(use.largest_winograd_scratch, compiled.scratch_bytes(op.id));
  }
  return use;
}

Status with_conv_hint(Status s, const Graph& g, const BackendOptions& options) {
  if (s.code() != StatusCode::kOutOfMemory || options.conv_algorithm == ConvAlgorithm::kDirect) return s;
  Result<std::unique_ptr<Backend>> backend = make_backend("cpu", options);
  if (!backend.ok()) return s;
  Result<std::unique_ptr<CompiledGraph>> compiled = (*backend)->compile(g);
  if (!compiled.ok()) return s;
  const ConvKernelUse use = conv_kernel_use(g, **compiled);
  if (use.winograd == 0) return s;
  return Status::OutOfMemory(fmt::format("{}. {} convolution kernels run as Winograd, with up to {} of scratch each; "
                                         "--conv-algo direct needs less memory (and runs slower)",
                                         s.message(), use.winograd, format_bytes(use.largest_winograd_scratch)));
}

Result<std::vector<uint64_t>> apply_backend_sizes(Graph& g, const BackendOptions& options) {
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, make_backend("cpu", options));
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<CompiledGraph> compiled, backend->compile(g));
  g = with_backend_sizes(g, *compiled);
  return compiled->all_scratch_bytes();
}

Result<Tier> parse_tier(const std::string& s) {
  if (s == "none") return Tier::kHost;  // no swapping at all: see swaps_allowed()
  if (std::optional<Tier> t = tier_from_string(s)) return *t;
  return Status::InvalidArgument(fmt::format("unknown tier '{}' (use host, ssd, or none for recomputation only)", s));
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
  cmd->add_flag_callback("--serial-planning", [&options] { options.parallel_portfolio = false; },
                "ferry: make its own plans and its portfolio's seed plans one after another on one thread (default: "
                "two workers where the process may use two cores; the plan is the same either way), and probe lru's and "
                "capuchin's smallest-budget scan on one thread (default: every core the process may use, up to 8; "
                "the same answer)");
}

void add_host_budget_option(CLI::App* cmd, std::string& host_budget) {
  cmd->add_option("--host-budget", host_budget,
                  "Host memory for swapped tensors: bytes, with a unit (4GiB), or a percentage of what the plan keeps "
                  "on the host tier without a cap (train: the first plan's; later plans keep those bytes). With --tier ssd the copies that do not fit spill to the SSD tier, "
                  "coldest first (docs/dynamic.md); with --tier host a plan that needs more is refused");
}

Result<TieredPlan> plan_tiered(std::string_view policy, const PlanContext& ctx,
                               const std::optional<BudgetSpec>& host_budget) {
  TieredPlan out;
  if (!host_budget) {
    FERRY_ASSIGN_OR_RETURN(out.report, plan_policy(policy, ctx));
    FERRY_ASSIGN_OR_RETURN(out.tiers, tier_needs(ctx, out.report.schedule));
    return out;
  }
  if (ctx.recompute_only)
    return Status::InvalidArgument("--host-budget has no effect with --tier none (nothing is swapped)");
  PlanContext host_first = ctx;
  host_first.tier = Tier::kHost;
  FERRY_ASSIGN_OR_RETURN(out.report, plan_policy(policy, host_first));
  if (ctx.tier != Tier::kHost) out.report.bound = nullptr;  // host_first's bound, not ctx's
  FERRY_ASSIGN_OR_RETURN(TierNeeds before, tier_needs(ctx, out.report.schedule));
  const uint64_t budget = host_budget->resolve(before.host_bytes);
  out.host_budget_bytes = budget;
  out.host_budget_text = host_budget->describe(before.host_bytes);
  if (ctx.tier == Tier::kHost) {
    if (before.host_bytes > budget)
      return Status::OutOfMemory(fmt::format(
          "policy '{}' keeps up to {} ({} bytes) of swapped tensors on the host tier at once, above --host-budget {} "
          "({} bytes); --tier ssd spills what does not fit to the SSD tier",
          policy, format_bytes(before.host_bytes), before.host_bytes, out.host_budget_text, budget));
    out.tiers = before;
    return out;
  }
  FERRY_ASSIGN_OR_RETURN(out.cascade, cascade_to_ssd(ctx, out.report.schedule, budget));
  out.tiers = out.cascade->after;
  return out;
}

bool order_faster(double us, double than_us) { return us < (1 - kOrderTieRelative) * than_us; }

bool close_to_bound(double us, double bound_us) { return us <= kOtherOrderAboveGap * bound_us; }

std::string not_planned_close_to_bound(std::string_view planned_order) {
  return fmt::format("the {} order's plan is within {:.0f}% of its bound; --update-order auto plans both",
                     planned_order, (kOtherOrderAboveGap - 1) * 100);
}

std::vector<std::string> ms_apart(const std::vector<double>& us, double tie) {
  std::vector<std::string> text;
  for (int decimals = 2;; ++decimals) {
    text.clear();
    for (double t : us) text.push_back(fmt::format("{:.{}f}", t / 1e3, decimals));
    bool apart = true;
    for (size_t i = 0; i < us.size(); ++i)
      for (size_t j = i + 1; j < us.size(); ++j)
        if (std::abs(us[i] - us[j]) > tie * std::max(us[i], us[j]) && text[i] == text[j]) apart = false;
    if (apart || decimals == 6) return text;
  }
}

}  // namespace ferry::cli
