// The policy registry: names -> planners, the feasibility verdict, and the smallest-budget search.
//
// Design
// - Every planner returns its best attempt even when it does not fit; only here is a plan that
//   exceeds the budget turned into OutOfMemory, and the message then names the smallest budget
//   at which the same policy fits, so the user can act on it.
// - find_min_budget() searches on the planners' own exact measure (the placement arena the
//   simulator and executor use), never on the simulator, which depends on this module. For a
//   budget-oblivious policy (what it moves does not depend on the budget) the answer is the
//   device bytes of its one plan, found with one call. For lru and capuchin, whose feasibility
//   is not monotone in the budget, a bisection finds a budget that fits and a scan below it in
//   steps of 1% of the keep plan finds the lowest that fits on that grid; then, while the plan at
//   that budget needs less and the planner fits at its need, the need is the answer. checkmate has its own
//   search (bisection only, see policy_checkmate.cc).
// - Every budget at or above that answer fits: where a budget-aware planner's own search misses
//   at the budget asked for, plan_policy answers with its plan for a smaller budget that fits.

#include <sched.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <iterator>
#include <limits>
#include <numeric>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/units.h"
#include "plan/ferry/bound.h"
#include "plan/ferry/exact.h"
#include "plan/ferry/ferry_planner.h"
#include "plan/policies.h"
#include "plan/policy_common.h"

namespace ferry {

namespace {

using Planner = Result<PlanAttempt> (*)(const PlanContext&, const PlanFacts&);

Result<PlanAttempt> plan_none(const PlanContext& ctx, const PlanFacts& facts) {
  return finish_attempt(ctx, facts, empty_schedule(ctx, "none"));
}
Result<PlanAttempt> plan_vdnn_all(const PlanContext& ctx, const PlanFacts& facts) {
  return plan_vdnn(ctx, facts, false);
}
Result<PlanAttempt> plan_vdnn_conv(const PlanContext& ctx, const PlanFacts& facts) {
  return plan_vdnn(ctx, facts, true);
}
Result<PlanAttempt> plan_checkmate_in_portfolio(const PlanContext& ctx, const PlanFacts& facts);

// The cores this process may run on (its affinity mask: taskset and cgroup cpusets count).
int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(std::thread::hardware_concurrency(), 1u));
}

// ferry: its own greedy plans (plan_ferry), then a portfolio: the seed policies' plans at the same
// budget, and the fastest fitting plan by the simulator wins (ties: ferry's own, then the earlier
// seed in the list below). This makes "ferry is feasible wherever a seed policy is, and at least as
// fast" hold by construction; the notes say which plan won. checkmate joins on graphs it accepts,
// with a node limit (deterministic). A context restricted to framework-saved tensors or without
// recomputation gets ferry's own plan only: the seed policies do not honour those restrictions.
//
// Where the machine has two cores (PolicyOptions::parallel_portfolio), two workers take the plans
// one at a time from a queue, the longest first (ferry's own and capuchin: about 2 and 3 s of the
// 6 s on a 10,000-op ResNet). Planners only read the context and the facts, and the plans are
// compared in the fixed order below once every one is done: the answer does not depend on which
// worker finished first. A seed whose solver runs in a forked child (checkmate, plan/contained.h)
// plans on this thread after the workers have joined, and the LP that ferry's own guided variants
// read is solved before they start: a child forked while another thread runs may inherit a lock
// that no thread of its own will release (it did, under ASan: the child hung in its allocator).
Result<PlanAttempt> plan_ferry_default(const PlanContext& ctx, const PlanFacts& facts) {
  const bool portfolio = ctx.budget_bytes != 0 && !ctx.restricts_executor();
  struct Seed {
    const char* name;
    Planner plan;
    int rank;            // place in the workers' queue: the longest-planning first
    bool forks = false;  // solves in a child process: plans alone
  };
  const Seed seeds[] = {{"vdnn-all", plan_vdnn_all, 4},     {"vdnn-conv", plan_vdnn_conv, 3},
                        {"lru", plan_lru, 1},               {"lms", plan_lms, 5},
                        {"capuchin", plan_capuchin, 0},     {"checkpoint-sqrt", plan_checkpoint_sqrt, 2},
                        {"checkmate", plan_checkmate_in_portfolio, 6, true}};
  constexpr size_t kSeeds = std::size(seeds);
  // A seed's plan with its simulated time; left empty where the seed cannot plan the graph (such as
  // checkmate past its limits) or its plan does not fit.
  struct SeedPlan {
    std::optional<PlanAttempt> attempt;
    Result<double> us = 0.0;
  };
  std::optional<Result<PlanAttempt>> own;
  std::array<SeedPlan, kSeeds> planned;
  // Task 0 is ferry's own planner, task 1 + k seed k; the workers' queue, the longest first, and
  // the seeds that plan alone afterwards.
  std::array<size_t, kSeeds> by_rank;
  std::iota(by_rank.begin(), by_rank.end(), size_t{0});
  std::sort(by_rank.begin(), by_rank.end(), [&](size_t a, size_t b) { return seeds[a].rank < seeds[b].rank; });
  std::vector<size_t> queue{0}, alone;
  for (size_t k : by_rank) (seeds[k].forks ? alone : queue).push_back(1 + k);
  if (!portfolio) {
    queue.resize(1);
    alone.clear();
  }
  // A budget search's probe (PolicyOptions::first_fit): ferry's own planner first, alone (its LP's
  // child forks beside no other thread), and the seeds only where it does not fit.
  if (ctx.options.first_fit && ctx.budget_bytes != 0) {
    own.emplace(plan_ferry(ctx, facts));
    if (!own->ok() || (*own)->fits || !portfolio) return std::move(*own);
    queue.erase(queue.begin());
  }
  const size_t tasks = queue.size();
  // The bound with its LP solution, for ferry's guided variants; where the solver fails
  // (plan/contained.h), ferry plans without them.
  FerryTuning tuning;
  std::optional<LowerBound> bound;
  if (!own && ferry_wants_lp_solution(ctx, facts, tuning)) {
    Result<LowerBound> b = plan_lower_bound(ctx, facts, LowerBoundOptions{.keep_solution = true});
    if (b.ok())
      bound = std::move(*b);
    else
      tuning.lp_guided = false;
  }
  auto run_task = [&](size_t task) {
    if (task == 0) {
      own.emplace(plan_ferry(ctx, facts, tuning, nullptr, bound ? &*bound : nullptr));
      return;
    }
    SeedPlan& out = planned[task - 1];
    Result<PlanAttempt> a = seeds[task - 1].plan(ctx, facts);
    if (!a.ok() || !a->fits) return;
    Result<SimResult> sim = simulate_for_planning(ctx, facts, a->schedule);
    out.us = sim.ok() ? Result<double>(sim->iteration_us) : Result<double>(sim.status());
    out.attempt = std::move(*a);
  };
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < tasks; i = next++) run_task(queue[i]);
  };
  if (tasks > 1 && ctx.options.parallel_portfolio && usable_cores() > 1) {
    std::thread second(worker);
    worker();
    second.join();
  } else {
    worker();
  }
  for (size_t task : alone) run_task(task);
  if (!own->ok()) return own->status();
  PlanAttempt best = std::move(**own);
  std::shared_ptr<const LowerBound> solved = bound ? std::make_shared<const LowerBound>(std::move(*bound)) : nullptr;
  if (!portfolio) {
    best.bound = std::move(solved);
    return best;
  }
  double best_us = std::numeric_limits<double>::infinity();
  if (best.fits) {
    FERRY_ASSIGN_OR_RETURN(SimResult sim, simulate_for_planning(ctx, facts, best.schedule));
    best_us = sim.iteration_us;
  }
  for (size_t k = 0; k < kSeeds; ++k) {
    SeedPlan& seed = planned[k];
    if (!seed.attempt) continue;
    FERRY_ASSIGN_OR_RETURN(double us, std::move(seed.us));
    if (best.fits && us >= best_us) continue;
    best = std::move(*seed.attempt);
    best_us = us;
    best.schedule.policy = "ferry";
    best.notes = fmt::format("the plan of seed policy {} was faster than ferry's own ({})", seeds[k].name,
                             best.notes.empty() ? "no notes" : best.notes);
  }
  best.bound = std::move(solved);  // the bound at ctx, whichever plan won
  return best;
}
Result<PlanAttempt> plan_ferry_exact(const PlanContext& ctx, const PlanFacts& facts) {
  ExactOptions o;
  o.time_limit_s = ctx.options.checkmate_time_limit_s;
  o.max_nodes = ctx.options.checkmate_max_nodes;
  return plan_exact(ctx, facts, o);
}

Result<PlanAttempt> plan_checkmate_in_portfolio(const PlanContext& ctx, const PlanFacts& facts) {
  if (facts.g().ops.size() > ctx.options.checkmate_max_ops) return Status::Unsupported("checkmate: graph too large");
  PlanContext c = ctx;
  if (c.options.checkmate_max_nodes == 0) c.options.checkmate_max_nodes = 5;
  return plan_checkmate(c, facts);
}

using MinBudget = Result<uint64_t> (*)(const PlanContext&, const PlanFacts&);

struct Entry {
  PolicyInfo info;
  Planner plan;
  MinBudget min_budget = nullptr;  // a policy's own search; bisection when null
  // Its plans may be made on several threads at once: it forks no child (plan/contained.h) and
  // keeps no state outside a call. The scan below the bisection's answer then probes in parallel.
  bool concurrent = false;
};

const std::vector<Entry>& registry() {
  static const std::vector<Entry> kEntries = {
      {{"none", "-", "keep every tensor on the device, free it after its last use", false}, plan_none},
      {{"ferry", "Ferry's own planner (docs/planner.md)",
        "every tensor, weights and optimizer state included, kept, swapped or recomputed, by estimated cost per byte "
        "freed at the peak, with link-aware prefetch; the fastest simulated of several link weights",
        true},
       plan_ferry_default},
      {{"ferry-exact", "a POET-style MILP (Patil et al., ICML 2022) solved with CBC",
        "the joint swap + recompute plan of least stage time, exactly, for graphs of up to 300 ops (time limit: "
        "--checkmate-time-limit)",
        true},
       plan_ferry_exact},
      {{"vdnn-all", "Rhu et al., vDNN, MICRO 2016",
        "offload every layer's input after its last forward use, prefetch it one layer before backward needs it",
        false},
       plan_vdnn_all},
      {{"vdnn-conv", "Rhu et al., vDNN, MICRO 2016", "vdnn-all restricted to the inputs of convolutions", false},
       plan_vdnn_conv},
      {{"lru", "on-demand paging (SuperNeurons' LRU tensor cache, CUDA unified memory)",
        "evict the least recently used tensor when an allocation would exceed the budget, fetch on access", true},
       plan_lru, nullptr, true},
      {{"lms", "Le et al., TFLMS: Large Model Support in TensorFlow by Graph Rewriting, 2018",
        "swap out activations above a size threshold, swap them in swapin_ahead ops before backward reads them",
        false},
       plan_lms},
      {{"capuchin", "Peng et al., Capuchin, ASPLOS 2020",
        "per tensor, swap when idle time hides it, else recompute when that frees more bytes per second of "
        "overhead; time-driven prefetch",
        true},
       plan_capuchin, nullptr, true},
      {{"checkpoint-sqrt", "Chen et al., Training Deep Nets with Sublinear Memory Cost, 2016",
        "keep every ~sqrt(n)-th forward segment boundary, recompute each segment before its backward", false},
       plan_checkpoint_sqrt},
      {{"checkmate", "Jain et al., Checkmate, MLSys 2020",
        "optimal rematerialisation under the budget by a mixed-integer program solved with CBC", true},
       plan_checkmate, checkmate_min_budget},
  };
  return kEntries;
}

const Entry* find_entry(std::string_view name) {
  for (const Entry& e : registry())
    if (e.info.name == name) return &e;
  return nullptr;
}

Status check_request(std::string_view policy, const PlanContext& ctx, const Entry*& entry) {
  entry = find_entry(policy);
  if (entry == nullptr) {
    std::string names;
    for (const Entry& e : registry()) names += (names.empty() ? "" : ", ") + e.info.name;
    return Status::InvalidArgument(fmt::format("unknown policy '{}' (known: {})", policy, names));
  }
  if (ctx.restricts_executor() && entry->info.name != "ferry")
    return Status::InvalidArgument(fmt::format(
        "policy '{}' cannot plan for an executor restricted to framework-saved tensors, replayable ops or no "
        "recomputation; use 'ferry'", entry->info.name));
  const PolicyOptions& o = ctx.options;
  if (o.lms_swapin_ahead < 1)
    return Status::InvalidArgument(fmt::format("lms swapin_ahead must be at least 1, got {}", o.lms_swapin_ahead));
  if (!std::isfinite(o.checkmate_time_limit_s) || o.checkmate_time_limit_s <= 0)
    return Status::InvalidArgument(
        fmt::format("checkmate time limit must be a positive number of seconds, got {}", o.checkmate_time_limit_s));
  if (o.checkmate_max_nodes < 0)
    return Status::InvalidArgument(
        fmt::format("checkmate node limit must be >= 0 (0 = none), got {}", o.checkmate_max_nodes));
  return Status::Ok();
}

Result<PlanAttempt> attempt_at(const Entry& e, const PlanContext& ctx, const PlanFacts& facts, uint64_t budget) {
  PlanContext c = ctx;
  c.budget_bytes = budget;
  Result<PlanAttempt> a = e.plan(c, facts);
  if (!a.ok()) return a.status().with_context(fmt::format("policy '{}'", e.info.name));
  return a;
}

std::string percent_of_none(uint64_t bytes, const PlanFacts& facts) {
  return fmt::format("{:.1f}%", 100.0 * static_cast<double>(bytes) / static_cast<double>(facts.none_device_bytes));
}

Result<uint64_t> min_budget(const Entry& e, const PlanContext& ctx, const PlanFacts& facts) {
  if (!e.info.budget_aware) {
    FERRY_ASSIGN_OR_RETURN(PlanAttempt a, attempt_at(e, ctx, facts, 0));
    return a.measure.device_bytes;
  }
  if (e.min_budget != nullptr) {
    Result<uint64_t> b = e.min_budget(ctx, facts);
    if (!b.ok()) return b.status().with_context(fmt::format("policy '{}'", e.info.name));
    return b;
  }
  // lru and capuchin are greedy, and their feasibility is not monotone in the budget: a
  // different budget changes which tensor goes first, and every later choice with it (lru on
  // resnet-mini at batch 3 fits at 54.9% of the keep plan, where a bisection answers 56.0%).
  // Bisection finds a budget that fits; the scan below it finds the lowest on a 1% grid.
  // Probes ask only whether a plan fits: ferry may stop at its first (PolicyOptions::first_fit).
  PlanContext probing = ctx;
  probing.options.first_fit = true;
  auto fits = [&](uint64_t budget) -> Result<bool> {
    FERRY_ASSIGN_OR_RETURN(PlanAttempt a, attempt_at(e, probing, facts, budget));
    return a.fits;
  };
  // ferry may offload weights and optimizer state: the persistent region is no floor for it.
  const bool offloads = e.info.name == "ferry" && !ctx.recompute_only;
  FERRY_ASSIGN_OR_RETURN(uint64_t found, bisect_min_budget(ctx, facts, fits, offloads));
  // The scan's probes are independent: where the policy may plan on several threads, they share
  // the cores this process may use (the answer is the same; --serial-planning keeps one thread).
  const int workers = e.concurrent && ctx.options.parallel_portfolio ? std::min(usable_cores(), 8) : 1;
  FERRY_ASSIGN_OR_RETURN(uint64_t lowest, lowest_fit_below(ctx, facts, fits, found, offloads, workers));
  // Off the grid: the plan that fits at `lowest` may need less, and its own need is then a budget
  // too when the planner finds a fitting plan there (a few rounds, while the need keeps falling).
  // These are probes like the others: a plan that fits at a first-fit probe's budget is one of the
  // plans the whole search makes there, so the answer fits the whole search too. Until 2026-12-07
  // they were whole searches (every variant planned and polished): of the 175 s that refusing
  // resnet152 b16 at 3% on the V100 profile took, 130 s went to them.
  FERRY_ASSIGN_OR_RETURN(PlanAttempt at_lowest, attempt_at(e, probing, facts, lowest));
  for (int round = 0; round < 4 && at_lowest.fits && at_lowest.measure.device_bytes < lowest; ++round) {
    FERRY_ASSIGN_OR_RETURN(PlanAttempt at_need, attempt_at(e, probing, facts, at_lowest.measure.device_bytes));
    if (!at_need.fits) break;
    lowest = at_lowest.measure.device_bytes;
    at_lowest = std::move(at_need);  // the next round's plan at `lowest`, not planned twice
  }
  return lowest;
}

PlanReport report_of(PlanAttempt&& a) {
  PlanReport r;
  r.schedule = std::move(a.schedule);
  r.device_bytes = a.measure.device_bytes;
  r.live_peak_bytes = a.measure.live_peak_bytes;
  r.swapped_tensors = a.measure.swapped_tensors;
  r.recomputed_tensors = a.measure.recomputed_tensors;
  r.notes = std::move(a.notes);
  r.solve_seconds = a.solve_seconds;
  r.mip_gap = a.mip_gap;
  r.proven_optimal = a.proven_optimal;
  r.bound = std::move(a.bound);
  return r;
}

}  // namespace

const std::vector<PolicyInfo>& list_policies() {
  static const std::vector<PolicyInfo> kInfos = [] {
    std::vector<PolicyInfo> v;
    for (const Entry& e : registry()) v.push_back(e.info);
    return v;
  }();
  return kInfos;
}

Result<PlanReport> plan_policy(std::string_view policy, const PlanContext& ctx) {
  const Entry* e = nullptr;
  FERRY_RETURN_IF_ERROR(check_request(policy, ctx, e));
  FERRY_ASSIGN_OR_RETURN(PlanFacts facts, make_plan_facts(ctx));
  FERRY_ASSIGN_OR_RETURN(PlanAttempt a, attempt_at(*e, ctx, facts, ctx.budget_bytes));
  std::optional<uint64_t> smallest;  // min_budget(), once it has been searched
  if (!a.fits && e->info.budget_aware) {
    // A budget-aware planner's feasibility need not be monotone in the budget (policy_common.h):
    // its search at this budget can miss although it fits a smaller one. A plan that fits a
    // smaller budget fits this one, so the answer is the plan made for the largest of a few
    // budgets between the smallest that fits and this one (a larger budget leaves the planner
    // more room for speed) rather than an OutOfMemory no user could make sense of.
    FERRY_ASSIGN_OR_RETURN(uint64_t need, min_budget(*e, ctx, facts));
    smallest = need;
    if (need <= ctx.budget_bytes) {
      const uint64_t span = ctx.budget_bytes - need;
      for (const uint64_t quarter : {3, 2, 1, 0}) {
        const uint64_t at = need + span / 4 * quarter;
        FERRY_ASSIGN_OR_RETURN(PlanAttempt b, attempt_at(*e, ctx, facts, at));
        if (!b.fits || b.measure.device_bytes > ctx.budget_bytes) continue;  // at 0, fits means unlimited
        b.notes = fmt::format("planned for {} ({} bytes): no plan found at the budget itself{}", format_bytes(at), at,
                              b.notes.empty() ? "" : "; " + b.notes);
        b.bound = std::move(a.bound);  // a bound at a smaller budget is no bound at this one
        a = std::move(b);
        break;
      }
    }
  }
  if (!a.fits) {
    const std::string refusal = fmt::format(
        "policy '{}' cannot fit model '{}' in {} ({} bytes): the best plan it found for that budget needs {} ({} "
        "bytes) of device memory{}",
        e->info.name, ctx.graph.info.model, format_bytes(ctx.budget_bytes), ctx.budget_bytes,
        format_bytes(a.measure.device_bytes), a.measure.device_bytes, a.notes.empty() ? "" : " (" + a.notes + ")");
    if (!ctx.name_smallest_budget) return Status::OutOfMemory(refusal);
    if (!smallest) {
      FERRY_ASSIGN_OR_RETURN(uint64_t searched, min_budget(*e, ctx, facts));
      smallest = searched;
    }
    const uint64_t need = *smallest;
    return Status::OutOfMemory(fmt::format(
        "{}; the smallest budget at which '{}' fits is {} ({} bytes, {} of the {} the model needs without a policy)",
        refusal, e->info.name, format_bytes(need), need, percent_of_none(need, facts),
        format_bytes(facts.none_device_bytes)));
  }
  attach_ssd_codecs(facts.ssd_codec, a.schedule);
  if (!ctx.ssd_codec && !a.schedule.ssd_codecs.empty()) {
    // --codec auto: the coded plan must beat the one the policy makes raw (kCodecMinGain), which
    // is planned on the same facts without codecs.
    PlanContext raw_ctx = ctx;
    raw_ctx.ssd_codec = CodecId::kNone;
    PlanFacts raw_facts = facts;
    raw_facts.ssd_codec.assign(raw_facts.ssd_codec.size(), CodecId::kNone);
    raw_facts.tensor_class.clear();
    FERRY_ASSIGN_OR_RETURN(PlanAttempt raw, attempt_at(*e, raw_ctx, raw_facts, ctx.budget_bytes));
    if (raw.fits) {
      FERRY_ASSIGN_OR_RETURN(SimResult coded_sim, simulate_for_planning(ctx, facts, a.schedule));
      FERRY_ASSIGN_OR_RETURN(SimResult raw_sim, simulate_for_planning(raw_ctx, raw_facts, raw.schedule));
      if (coded_sim.iteration_us >= (1 - kCodecMinGain) * raw_sim.iteration_us) {
        raw.bound = std::move(a.bound);  // the bound at ctx, not at raw_ctx
        return report_of(std::move(raw));
      }
    }
  }
  return report_of(std::move(a));
}

Result<Schedule> make_schedule(std::string_view policy, const PlanContext& ctx) {
  FERRY_ASSIGN_OR_RETURN(PlanReport r, plan_policy(policy, ctx));
  return std::move(r.schedule);
}

Result<LowerBound> lower_bound(const PlanContext& ctx) {
  FERRY_ASSIGN_OR_RETURN(PlanFacts facts, make_plan_facts(ctx));
  return plan_lower_bound(ctx, facts);
}

Result<std::optional<PendingLowerBound>> start_bound_beside(std::string_view policy, const PlanContext& ctx) {
  FERRY_ASSIGN_OR_RETURN(PlanFacts facts, make_plan_facts(ctx));
  // plan_ferry_default solves the bound for ferry's guided variants and hands it on in its report;
  // plan_tiered drops that report's bound off the host tier (it is host_first's, not ctx's).
  if (policy == "ferry" && ctx.tier == Tier::kHost && ferry_wants_lp_solution(ctx, facts))
    return std::optional<PendingLowerBound>();
  FERRY_ASSIGN_OR_RETURN(PendingLowerBound pending, start_lower_bound(ctx, facts));
  return std::optional<PendingLowerBound>(std::move(pending));
}

Result<uint64_t> find_min_budget(std::string_view policy, const PlanContext& ctx) {
  const Entry* e = nullptr;
  FERRY_RETURN_IF_ERROR(check_request(policy, ctx, e));
  FERRY_ASSIGN_OR_RETURN(PlanFacts facts, make_plan_facts(ctx));
  return min_budget(*e, ctx, facts);
}

}  // namespace ferry
