// Planning shared by `ferry plan` and `ferry train`: the sizes a plan is made for and the policy.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "backend/backend.h"
#include "cli/options.h"
#include "common/status.h"
#include "cost/cost_model.h"
#include "graph/graph.h"
#include "common/units.h"
#include "plan/policies.h"
#include "plan/tier_cascade.h"

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

// Adds --host-budget (a cap on the host tier's bytes) to a subcommand.
void add_host_budget_option(CLI::App* cmd, std::string& host_budget);

// A plan with what it needs of the swap tiers, after --host-budget.
struct TieredPlan {
  PlanReport report;
  TierNeeds tiers;                            // of the final schedule (placed, predicted)
  std::optional<uint64_t> host_budget_bytes;  // --host-budget resolved
  std::string host_budget_text;               // "6.00 GiB" or "1.2 GiB (50% of ...)"
  std::optional<CascadeReport> cascade;       // --host-budget with --tier ssd
};

// Plans `policy` for ctx. With a host budget the policy plans for the host tier (the faster
// one); with ctx.tier ssd the copies the host tier cannot hold then cascade to the SSD tier
// (plan/tier_cascade.h), with ctx.tier host a plan whose copies exceed the host budget is refused
// (OutOfMemory naming both and the --tier ssd remedy). A percentage host budget is of the host
// tier bytes the plan needs without one. Errors: those of plan_policy; InvalidArgument for a host
// budget with recomputation only (nothing is swapped).
Result<TieredPlan> plan_tiered(std::string_view policy, const PlanContext& ctx,
                               const std::optional<BudgetSpec>& host_budget);

// The update-order rules that `ferry plan` and `ferry train` share (kOrderTieRelative and
// kOtherOrderAboveGap, cli/options.h): whether a plan of `us` is faster than one of `than_us` (not a
// tie), whether a plan is close enough to its bound that the other order is not planned, and the
// reason given then.
bool order_faster(double us, double than_us);
bool close_to_bound(double us, double bound_us);
std::string not_planned_close_to_bound(std::string_view planned_order);

// Milliseconds of each of `us` (times compared side by side, such as the update orders' predicted
// times), with two decimals, or as many more (up to six) as it takes to tell apart the ones that
// differ by more than `tie` (relative): a faster plan chosen by 0.001 ms does not read as a tie.
std::vector<std::string> ms_apart(const std::vector<double>& us, double tie = 0);

}  // namespace ferry::cli
