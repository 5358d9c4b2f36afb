// `ferry plan`: predict, before running, what one training iteration costs under a plan on a
// device: iteration time, stalls, peak memory, whether it fits; as text, JSON, a Chrome trace and
// an SVG plot of device memory against the budget. Every figure is a prediction (simulated).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/planning.h"
#include "common/file_io.h"
#include "common/units.h"
#include "cost/cost_model.h"
#include "cost/profile.h"
#include "graph/update_order.h"
#include "sim/simulator.h"
#include "sim/timeline.h"
#include "plan/explain.h"
#include "plan/ferry/bound.h"

namespace ferry::cli {

namespace {

struct PlanOptions {
  const CLI::App* cmd = nullptr;  // to ask which options were given
  GraphOptions graph;
  std::string device = "cpu-local";
  std::string budget;
  std::string policy;  // empty: ferry with a --budget or when the model exceeds the device, else none
  bool json = false;
  bool explain = false;
  bool logical_sizes = false;
  std::string trace_out;
  std::string plot;
  std::string tier = "host";
  bool ssd_staged = false;  // plan every SSD copy through host staging (as ferry train --ssd-staged runs it)
  std::string host_budget;
  bool find_min_budget = false;
  bool sweep = false;
  PolicyOptions policy_options;
  std::string conv_algo = "auto";
};

// What a plan is made for: the graph with the sizes it plans with, the device, the budget.
struct PlanSetup {
  Graph graph;
  HardwareProfile hw;
  bool backend_sizes = false;  // a cpu profile: the CPU backend's tensor sizes and scratch
  BackendOptions backend_options;
  std::vector<uint64_t> scratch;
  Tier tier = Tier::kHost;
  std::optional<BudgetSpec> budget;  // --budget as given
  uint64_t budget_bytes = 0;         // resolved (default: the device's capacity)
  uint64_t no_swap_peak_bytes = 0;   // the keep plan's device bytes, when a percentage needed it
};

// Bad values, and options that would be silently ignored.
Status check_plan_options(const PlanOptions& o) {
  const CLI::App& cmd = *o.cmd;
  if (o.policy == "all" && !o.sweep)
    return Status::InvalidArgument("--policy all needs --sweep (one plan is made for one policy)");
  const bool search = o.find_min_budget || o.sweep;
  const std::string what = o.sweep ? "with --sweep" : "with --find-min-budget";
  FERRY_RETURN_IF_ERROR(check_option_used(cmd, "--budget", !search, what + " (it chooses the budgets)"));
  FERRY_RETURN_IF_ERROR(check_option_used(cmd, "--trace-out", !search, what));
  FERRY_RETURN_IF_ERROR(check_option_used(cmd, "--plot", !o.find_min_budget, "with --find-min-budget"));
  const bool all = o.policy == "all";
  FERRY_RETURN_IF_ERROR(check_option_used(cmd, "--swapin-ahead", all || o.policy == "lms", "without --policy lms"));
  for (const char* checkmate : {"--checkmate-time-limit", "--checkmate-max-nodes"})
    FERRY_RETURN_IF_ERROR(check_option_used(cmd, checkmate,
                                            all || o.policy == "checkmate" || o.policy == "ferry-exact",
                                            "without --policy checkmate or ferry-exact"));
  FERRY_RETURN_IF_ERROR(check_option_used(cmd, "--tier", o.policy != "none", "with --policy none (it swaps nothing)"));
  FERRY_RETURN_IF_ERROR(check_option_used(cmd, "--ssd-staged", o.tier == "ssd", "without --tier ssd"));
  FERRY_RETURN_IF_ERROR(check_option_used(cmd, "--host-budget", !search, what));
  FERRY_RETURN_IF_ERROR(
      check_option_used(cmd, "--host-budget", o.policy != "none", "with --policy none (it swaps nothing)"));
  return Status::Ok();
}

// Graph, device and sizes; the budget resolved and checked against the device's capacity.
Result<PlanSetup> set_up_plan(const PlanOptions& o) {
  PlanSetup s;
  if (!o.budget.empty()) {
    FERRY_ASSIGN_OR_RETURN(BudgetSpec budget, parse_budget(o.budget));
    s.budget = budget;
  }
  FERRY_ASSIGN_OR_RETURN(s.graph, load_graph(o.graph));
  FERRY_ASSIGN_OR_RETURN(s.hw, load_profile(o.device));
  if (o.ssd_staged) s.hw.storage.device_direct = false;  // the host leg every copy then crosses
  FERRY_RETURN_IF_ERROR(check_precision(s.hw, s.graph.info.precision));
  FERRY_ASSIGN_OR_RETURN(s.tier, parse_tier(o.tier));
  FERRY_ASSIGN_OR_RETURN(s.backend_options, parse_backend_options(o.conv_algo));
  // On this machine's CPU backend, plan with its real sizes (blocked layouts, oneDNN scratch), so
  // that predictions match `ferry train` byte for byte; elsewhere, and for a trace with ops the
  // backend cannot run (opaque ones, as recorded from PyTorch), with the graph's own sizes.
  const bool runnable = std::none_of(s.graph.ops.begin(), s.graph.ops.end(),
                                     [](const Op& op) { return op.type == OpType::kOpaque; });
  const bool local = s.hw.name.rfind("cpu", 0) == 0 && runnable;
  FERRY_RETURN_IF_ERROR(check_option_used(*o.cmd, "--logical-sizes", local, "on a non-cpu device profile"));
  s.backend_sizes = local && !o.logical_sizes;
  FERRY_RETURN_IF_ERROR(check_option_used(*o.cmd, "--conv-algo", s.backend_sizes,
                                          "without the CPU backend's sizes (a cpu profile, no --logical-sizes)"));
  if (s.backend_sizes) {
    FERRY_ASSIGN_OR_RETURN(s.scratch, apply_backend_sizes(s.graph, s.backend_options));
  }
  s.budget_bytes = s.hw.memory_capacity_bytes;
  if (!s.budget) return s;
  if (s.budget->percent) {
    const CostModel cost(s.hw);
    PlanContext none{.graph = s.graph, .cost = cost, .budget_bytes = 0, .tier = s.tier, .op_scratch_bytes = s.scratch};
    FERRY_ASSIGN_OR_RETURN(PlanReport keep, plan_policy("none", none));
    s.no_swap_peak_bytes = keep.device_bytes;
  }
  s.budget_bytes = s.budget->resolve(s.no_swap_peak_bytes);
  if (s.budget_bytes > s.hw.memory_capacity_bytes)
    return Status::InvalidArgument(fmt::format(
        "--budget {} ({} bytes) exceeds the memory capacity of device '{}', {} ({} bytes): a plan for it could not "
        "run there (use a profile with more memory, or a smaller budget)",
        s.budget->describe(s.no_swap_peak_bytes), s.budget_bytes, s.hw.name, format_bytes(s.hw.memory_capacity_bytes),
        s.hw.memory_capacity_bytes));
  return s;
}

nlohmann::json to_json(const SimResult& r, const PlanSetup& s) {
  nlohmann::json j;
  j["model"] = r.model;
  j["device"] = r.device;
  j["policy"] = r.policy;
  j["feasible"] = r.feasible;
  if (!r.feasible) j["reason"] = r.reason;
  j["budget_bytes"] = s.budget_bytes;
  j["budget_request"] = s.budget ? nlohmann::json(s.budget->text) : nlohmann::json();
  if (s.no_swap_peak_bytes > 0) j["no_swap_peak_bytes"] = s.no_swap_peak_bytes;
  j["precision"] = std::string(to_string(s.graph.info.precision));
  j["update_order"] = std::string(to_string(update_order_of(s.graph)));
  j["iteration_ms"] = r.iteration_us / 1e3;
  j["compute_ms"] = r.compute_busy_us / 1e3;
  j["recompute_ms"] = r.recompute_us / 1e3;
  j["stall_ms"] = r.stall_us / 1e3;
  j["interference_ms"] = r.interference_us / 1e3;
  j["peak_bytes"] = r.peak_device_bytes;
  j["peak_in_use_bytes"] = r.peak_in_use_bytes;
  j["persistent_bytes"] = r.persistent_bytes;
  j["peak_host_bytes"] = r.peak_host_bytes;
  j["peak_ssd_bytes"] = r.peak_ssd_bytes;
  j["bytes_d2h"] = r.bytes_d2h;
  j["bytes_h2d"] = r.bytes_h2d;
  j["bytes_ssd_write"] = r.bytes_ssd_write;
  j["bytes_ssd_read"] = r.bytes_ssd_read;
  j["swap_outs"] = r.num_swap_outs;
  j["swap_ins"] = r.num_swap_ins;
  j["recomputes"] = r.num_recomputes;
  j["host_updates"] = r.num_host_updates;  // optimizer updates run on the host (ZeRO-Offload)
  j["host_update_ms"] = r.host_update_us / 1e3;
  j["stalls"] = r.num_stalls;
  return j;
}

// A small SVG line chart of a sweep: slowdown vs budget fraction, one line per policy.
std::string sweep_svg(const std::string& title, uint64_t peak, double reference_us, const std::vector<double>& fractions,
                      const std::vector<std::string>& policies, const std::vector<std::vector<double>>& table_ms) {
  const double w = 860, h = 480, l = 70, r = 180, t = 40, b = 60;
  const double ymax = 4.0;
  std::string svg = fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
                                "font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n"
                                "<rect width=\"{}\" height=\"{}\" fill=\"white\"/>\n", w, h, w, h);
  svg += fmt::format("<text x=\"{}\" y=\"24\" font-size=\"15\" font-weight=\"bold\">{}: predicted slowdown vs "
                     "memory budget</text>\n", l, title);
  auto X = [&](double f) { return l + (1.0 - f) / 0.9 * (w - l - r); };
  auto Y = [&](double s) { return h - b - (std::min(s, ymax) - 1.0) / (ymax - 1.0) * (h - t - b); };
  for (double s = 1.0; s <= ymax + 1e-9; s += 0.5)
    svg += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#ddd\"/><text x=\"{}\" "
                       "y=\"{:.1f}\" text-anchor=\"end\">{:.1f}x</text>\n", l, Y(s), w - r, Y(s), l - 6, Y(s) + 4, s);
  for (double f : fractions)
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{:.0f}%</text>\n", X(f), h - b + 18,
                       f * 100);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">budget (% of the no-swap peak, {})</text>\n",
                     (l + w - r) / 2, h - 18, format_bytes(peak));
  static const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                  "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  for (size_t i = 0; i < table_ms.size(); ++i) {
    std::string pts;
    for (size_t k = 0; k < fractions.size(); ++k)
      if (table_ms[i][k] > 0)
        pts += fmt::format("{:.1f},{:.1f} ", X(fractions[k]), Y(table_ms[i][k] * 1e3 / reference_us));
    const char* c = kColors[i % 10];
    svg += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n", pts, c);
    svg += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"{}\">{}</text>\n", w - r + 12, t + 18 * (i + 1), c,
                       policies[i]);
  }
  svg += "</svg>\n";
  return svg;
}

// Predicted iteration time at a budget, or -1 when the policy cannot fit it.
double predicted_ms(const std::string& policy, PlanContext ctx, const Graph& g, const CostModel& cost,
                    const SimOptions& so) {
  Result<PlanReport> plan = plan_policy(policy, ctx);
  if (!plan.ok()) return -1;
  SimOptions s = so;
  s.budget_bytes = ctx.budget_bytes;
  Result<SimResult> r = simulate(g, plan->schedule, cost, s);
  return r.ok() && r->feasible ? r->iteration_us / 1e3 : -1;
}

// Predicted iteration time vs budget for one or all policies; an SVG with --plot. Progress goes
// to stderr when it is a terminal.
int run_sweep(const PlanOptions& o, const PlanSetup& s, const CostModel& cost, PlanContext base) {
  std::vector<std::string> policies;
  if (o.policy == "all") {
    for (const PolicyInfo& p : list_policies()) policies.push_back(p.name);
  } else {
    policies.push_back(o.policy);
  }
  // A cell only needs to know whether the policy fits, not the smallest budget that would.
  base.name_smallest_budget = false;
  PlanContext unlimited = base;
  unlimited.budget_bytes = 0;
  Result<PlanReport> none = plan_policy("none", unlimited);
  if (!none.ok()) return report(none.status());
  SimOptions so;
  so.op_scratch_bytes = base.op_scratch_bytes;
  so.record_timeline = false;
  Result<SimResult> ref = simulate(s.graph, none->schedule, cost, so);
  if (!ref.ok()) return report(ref.status());
  const uint64_t peak = ref->peak_device_bytes;
  const uint64_t capacity = s.hw.memory_capacity_bytes;
  const std::vector<double> fractions = {1.0, 0.9, 0.75, 0.6, 0.5, 0.4, 0.33, 0.25, 0.2, 0.15, 0.1};
  nlohmann::json rows = nlohmann::json::array();
  // --json: only the JSON rows on stdout, so that scripts can parse it; otherwise a table.
  auto say = [&](auto... args) {
    if (!o.json) std::printf(args...);
  };
  const bool show_progress = isatty(STDERR_FILENO) != 0;
  const size_t cells = policies.size() * fractions.size();
  say("%s on %s: predicted iteration time (ms) / slowdown vs no limit (%.2f ms, peak %s)\n", describe(s.graph).c_str(),
      cost.profile().name.c_str(), ref->iteration_us / 1e3, format_bytes(peak).c_str());
  say("%-16s", "policy");
  for (double f : fractions) say(" %9.0f%%", f * 100);
  say("\n");
  bool any_over_capacity = false;
  std::vector<std::vector<double>> table;
  for (const std::string& p : policies) {
    say("%-16s", p.c_str());
    std::vector<double> line;
    for (double f : fractions) {
      if (show_progress)
        std::fprintf(stderr, "\r  [sweep %zu/%zu: %s at %.0f%%]    ", table.size() * fractions.size() + line.size() + 1,
                     cells, p.c_str(), f * 100);
      PlanContext ctx = base;
      ctx.budget_bytes = static_cast<uint64_t>(static_cast<double>(peak) * f);
      const double ms = predicted_ms(p, ctx, s.graph, cost, so);
      const bool over = ctx.budget_bytes > capacity;
      any_over_capacity |= over && ms >= 0;
      line.push_back(ms);
      rows.push_back({{"policy", p}, {"budget_fraction", f}, {"budget_bytes", ctx.budget_bytes},
                      {"exceeds_device_capacity", over},
                      {"iteration_ms", ms < 0 ? nlohmann::json() : nlohmann::json(ms)}});
      if (show_progress) std::fprintf(stderr, "\r%60s\r", "");
      if (ms < 0) say(" %10s", "-");
      else say(" %5.0f x%3.2f%s", ms, ms * 1e3 / ref->iteration_us, over ? "!" : "");
      if (!o.json) std::fflush(stdout);
    }
    say("\n");
    table.push_back(line);
  }
  say("(- = the policy cannot fit that budget)\n");
  if (any_over_capacity)
    say("(! = the budget exceeds the device's memory capacity of %s: predicted, but it could not run there)\n",
        format_bytes(capacity).c_str());
  if (o.json) std::printf("%s\n", rows.dump(2).c_str());
  if (!o.plot.empty()) {
    const std::string title = fmt::format("{} on {}", describe(s.graph), cost.profile().name);
    Status st = write_file_atomically(o.plot, sweep_svg(title, peak, ref->iteration_us, fractions, policies, table),
                                      "sweep plot");
    if (!st.ok()) return report(st);
    std::fprintf(o.json ? stderr : stdout, "plot written to %s\n", o.plot.c_str());
  }
  return 0;
}

int run_find_min_budget(const PlanOptions& o, const PlanSetup& s, const PlanContext& ctx) {
  Result<uint64_t> min = find_min_budget(o.policy, ctx);
  if (!min.ok()) return report(min.status());
  const uint64_t capacity = s.hw.memory_capacity_bytes;
  const bool over = *min > capacity;
  if (o.json) {
    nlohmann::json j;
    j["policy"] = o.policy;
    j["min_budget_bytes"] = *min;
    j["device_capacity_bytes"] = capacity;
    j["exceeds_device_capacity"] = over;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s with policy %s fits in %s (%llu bytes) at the least%s\n", describe(s.graph).c_str(),
                o.policy.c_str(), format_bytes(*min).c_str(), static_cast<unsigned long long>(*min),
                over ? fmt::format(", more than the {} of device '{}'", format_bytes(capacity), s.hw.name).c_str()
                     : "");
  }
  return 0;
}

// What the plan keeps on the swap tiers (placed, predicted), and what --host-budget spilled.
nlohmann::json tiers_json(const TieredPlan& t) {
  nlohmann::json j;
  j["host_tier_bytes"] = t.tiers.host_bytes;
  j["ssd_tier_bytes"] = t.tiers.ssd_bytes;
  j["host_budget_bytes"] = t.host_budget_bytes ? nlohmann::json(*t.host_budget_bytes) : nlohmann::json();
  if (t.cascade) {
    j["spilled_to_ssd_tensors"] = t.cascade->moved_tensors;
    j["spilled_to_ssd_bytes"] = t.cascade->moved_bytes;
    j["host_tier_bytes_uncapped"] = t.cascade->before.host_bytes;
  }
  return j;
}

std::string tiers_text(const TieredPlan& t) {
  std::string out = fmt::format("host tier {}, SSD tier {} (placed copies)", format_bytes(t.tiers.host_bytes),
                                format_bytes(t.tiers.ssd_bytes));
  if (t.host_budget_bytes) out += fmt::format("; host budget {}", t.host_budget_text);
  if (t.cascade && t.cascade->moved_tensors > 0)
    out += fmt::format("; {} tensors ({}) spilled to the SSD tier", t.cascade->moved_tensors,
                       format_bytes(t.cascade->moved_bytes));
  return out;
}

// Wall time of the stages of `ferry plan` (measured, this process).
struct PlanTimes {
  double plan_s = 0, simulate_s = 0, bound_s = 0;
  bool bound_reused = false;  // the planner solved the bound (bound_s is then part of plan_s)
  bool bound_beside = false;  // the bound solved beside the planning (bound_s overlaps plan_s)
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void print_plan_summary(const PlanOptions& o, const PlanSetup& s, const TieredPlan& tiered, const SimResult& r,
                        const LowerBound& bound, const PlanTimes& times) {
  const PlanReport& planned = tiered.report;
  const std::string budget = s.budget ? s.budget->describe(s.no_swap_peak_bytes)
                                      : format_bytes(s.budget_bytes) + " (the device's capacity)";
  std::printf("%s on %s, policy %s, budget %s; predicted (simulated):\n", describe(s.graph).c_str(),
              s.hw.name.c_str(), o.policy.c_str(), budget.c_str());
  std::printf("  %s\n", r.feasible ? "fits" : ("DOES NOT FIT: " + r.reason).c_str());
  std::printf("  plan        %zu tensors swapped to %s, %zu recomputed%s%s\n", planned.swapped_tensors, o.tier.c_str(),
              planned.recomputed_tensors, planned.notes.empty() ? "" : "; ", planned.notes.c_str());
  if (planned.swapped_tensors > 0) std::printf("  tiers       %s\n", tiers_text(tiered).c_str());
  std::printf("  iteration   %10.2f ms  (compute %.2f ms, recompute %.2f ms, stalls %.2f ms)\n", r.iteration_us / 1e3,
              r.compute_busy_us / 1e3, r.recompute_us / 1e3, r.stall_us / 1e3);
  if (r.interference_us > 0)
    std::printf("  copies slow the ops beside them by %.2f ms in all (compute interference, part of compute)\n",
                r.interference_us / 1e3);
  if (r.num_host_updates > 0)
    std::printf("  host        %zu optimizer updates on the host (ZeRO-Offload), %.2f ms of host time beside the device\n",
                r.num_host_updates, r.host_update_us / 1e3);
  std::printf("  bound       %10.2f ms  no plan at this budget is faster (%s); this plan is %.3fx the bound\n",
              bound.us / 1e3, bound.method == "lp" ? "LP relaxation" : "sum of op times", r.iteration_us / bound.us);
  std::printf("  device peak %10s  (weights and optimizer state %s)\n", format_bytes(r.peak_device_bytes).c_str(),
              format_bytes(r.persistent_bytes).c_str());
  std::printf("  moved       d2h %s, h2d %s, ssd_write %s, ssd_read %s\n", format_bytes(r.bytes_d2h).c_str(),
              format_bytes(r.bytes_h2d).c_str(), format_bytes(r.bytes_ssd_write).c_str(),
              format_bytes(r.bytes_ssd_read).c_str());
  for (size_t i = 0; i < std::min<size_t>(3, r.top_stalls.size()); ++i) {
    const Stall& st = r.top_stalls[i];
    if (st.wait_us < 1.0) continue;
    std::printf("  stall       %.2f ms at step %d ('%s') waiting for '%s'\n", st.wait_us / 1e3, st.step,
                s.graph.op(st.step).name.c_str(), st.tensor != kNoTensor ? s.graph.tensor(st.tensor).name.c_str() : "?");
  }
  if (!o.trace_out.empty())
    std::printf("  timeline written to %s (open it in Perfetto or chrome://tracing)\n", o.trace_out.c_str());
  if (!o.plot.empty()) std::printf("  memory plot written to %s\n", o.plot.c_str());
  std::printf("  took        planning %.2f s, simulation %.2f s, bound %.2f s%s (measured)\n", times.plan_s,
              times.simulate_s, times.bound_s,
              times.bound_reused   ? " (solved within planning)"
              : times.bound_beside ? " (solved beside planning)"
                                   : "");
}

// --explain: every tensor the plan moves (JSON), or the ten costliest (human).
nlohmann::json decisions_json(const Graph& g, const std::vector<TensorDecision>& ds) {
  nlohmann::json out = nlohmann::json::array();
  for (const TensorDecision& d : ds)
    out.push_back({{"tensor", g.tensor(d.tensor).name},
                   {"role", std::string(to_string(g.tensor(d.tensor).role))},
                   {"move", d.move},
                   {"bytes", d.bytes},
                   {"away_steps", d.away_steps},
                   {"swap_outs", d.swap_outs},
                   {"swap_ins", d.swap_ins},
                   {"recomputes", d.recomputes},
                   {"ssd_codec", std::string(to_string(d.ssd_codec))},
                   {"link_ms", d.link_us / 1e3},
                   {"recompute_ms", d.recompute_us / 1e3},
                   {"wait_ms", d.wait_us / 1e3},
                   {"exposed_ms", d.exposed_us() / 1e3},
                   {"alternative", d.alternative}});
  return out;
}

void print_decisions(const Graph& g, const std::vector<TensorDecision>& ds) {
  uint64_t bytes = 0;
  for (const TensorDecision& d : ds) bytes += d.bytes;
  std::printf("  decisions   %zu tensors moved (%s); the ten costliest (exposed: recompute time plus the simulated "
              "waits for their copies; link: their copies' time, hidden where it overlaps compute):\n",
              ds.size(), format_bytes(bytes).c_str());
  std::printf("    %-40s %-15s %-14s %10s %6s %10s %10s  %s\n", "tensor", "role", "move", "bytes", "steps",
              "exposed ms", "link ms", "rejected alternative");
  for (size_t i = 0; i < std::min<size_t>(10, ds.size()); ++i) {
    const TensorDecision& d = ds[i];
    std::string name = g.tensor(d.tensor).name;
    if (name.size() > 40) name = "..." + name.substr(name.size() - 37);
    std::printf("    %-40s %-15s %-14s %10s %6d %10.3f %10.3f  %s\n", name.c_str(),
                std::string(to_string(g.tensor(d.tensor).role)).c_str(), d.move.c_str(), format_bytes(d.bytes).c_str(),
                d.away_steps, d.exposed_us() / 1e3, d.link_us / 1e3, d.alternative.c_str());
  }
}

// One graph order's plan, simulated, with its bound: what `ferry plan` prints for it.
struct Outcome {
  TieredPlan planned;
  SimResult sim;
  LowerBound bound;
  PlanTimes times;
};

// Plans `s.graph` with the policy, simulates the plan and solves the bound (beside the planning
// where the planner does not solve it itself). Errors: the planner's (kOutOfMemory where no plan
// fits), the simulator's, the bound's.
Result<Outcome> plan_and_simulate(const PlanOptions& o, const PlanSetup& s, const std::optional<BudgetSpec>& host_budget) {
  const CostModel cost(s.hw);
  PlanContext ctx{.graph = s.graph, .cost = cost, .budget_bytes = s.budget_bytes, .tier = s.tier,
                  .op_scratch_bytes = s.scratch};
  ctx.recompute_only = o.tier == "none";
  ctx.options = o.policy_options;
  PlanTimes times;
  auto clock = std::chrono::steady_clock::now();
  // The bound solves beside the planning (its LP in a child process, forked before the planner's
  // threads start), unless the planner solves it for its own use.
  FERRY_ASSIGN_OR_RETURN(std::optional<PendingLowerBound> beside, start_bound_beside(o.policy, ctx));
  times.bound_beside = beside.has_value();
  Result<TieredPlan> planned = plan_tiered(o.policy, ctx, host_budget);
  times.plan_s = seconds_since(clock);
  if (!planned.ok() && s.backend_sizes) planned = with_conv_hint(planned.status(), s.graph, s.backend_options);
  if (!planned.ok()) return planned.status();
  Schedule schedule = planned->report.schedule;
  schedule.budget_bytes = s.budget_bytes;
  SimOptions so;
  so.budget_bytes = s.budget_bytes;
  so.op_scratch_bytes = s.scratch;
  so.record_timeline = !o.trace_out.empty() || !o.plot.empty();
  so.record_waits = o.explain;  // per tensor, the waits --explain charges to it
  clock = std::chrono::steady_clock::now();
  Result<SimResult> r = simulate(s.graph, schedule, cost, so);
  times.simulate_s = seconds_since(clock);
  if (!r.ok()) return r.status();
  if (!std::isfinite(r->iteration_us))  // the profile's bounds should make this impossible
    return Status::InvalidArgument(fmt::format(
        "device profile '{}' makes the predicted iteration time {}: check its rates and latencies", s.hw.name,
        r->iteration_us));
  // The bound: no plan in Ferry's decision space at this budget is faster (plan/ferry/bound.h).
  // The portfolio may have solved it already (for ferry's LP-guided variants): that time is part of
  // planning's, and the bound's own time is the solver's.
  // Solved beside the planning, its time is the solver's too (from the LP's start to its answer).
  clock = std::chrono::steady_clock::now();
  times.bound_reused = !times.bound_beside && planned->report.bound != nullptr;
  Result<LowerBound> bound = times.bound_beside   ? beside->wait()
                             : times.bound_reused ? Result<LowerBound>(*planned->report.bound)
                                                  : lower_bound(ctx);
  times.bound_s = times.bound_reused || (times.bound_beside && bound.ok()) ? bound->solve_seconds : seconds_since(clock);
  if (!bound.ok()) return bound.status();
  return Outcome{.planned = std::move(*planned), .sim = std::move(*r), .bound = *bound, .times = times};
}

// --update-order auto: the graph in each order that differs (end first; one order where the graph
// has no updates, or a trace's interleaved updates cannot move back), at the first's budget bytes:
// a percentage is of the end order's no-swap peak, the model's as built.
Result<std::vector<PlanSetup>> set_up_orders(const PlanOptions& o) {
  std::vector<PlanSetup> setups;
  if (o.graph.update_order != "auto") {
    FERRY_ASSIGN_OR_RETURN(PlanSetup s, set_up_plan(o));
    setups.push_back(std::move(s));
    return setups;
  }
  PlanOptions own = o;
  own.graph.update_order = "";  // the graph's own order: end for zoo models, a trace's record
  FERRY_ASSIGN_OR_RETURN(PlanSetup first, set_up_plan(own));
  const bool has_updates = std::any_of(first.graph.ops.begin(), first.graph.ops.end(),
                                       [](const Op& op) { return op.phase == Phase::kUpdate; });
  const bool can_move = has_updates && update_order_of(first.graph) == UpdateOrder::kEnd;
  setups.push_back(std::move(first));
  if (!can_move) return setups;
  PlanOptions moved = own;
  moved.graph.update_order = "interleaved";
  moved.budget = "";  // set below: the same bytes as the first order's
  FERRY_ASSIGN_OR_RETURN(PlanSetup second, set_up_plan(moved));
  second.budget = setups[0].budget;
  second.budget_bytes = setups[0].budget_bytes;
  second.no_swap_peak_bytes = setups[0].no_swap_peak_bytes;
  setups.push_back(std::move(second));
  return setups;
}

int run_plan(const PlanOptions& given) {
  PlanOptions o = given;
  const bool policy_given = !o.policy.empty();
  if (!policy_given) o.policy = o.budget.empty() ? "none" : "ferry";
  if (Status st = check_plan_options(o); !st.ok()) return report(st);
  const bool auto_order = o.graph.update_order == "auto";
  if (auto_order && (o.sweep || o.find_min_budget))
    return report(Status::InvalidArgument(fmt::format(
        "--update-order auto chooses between two single plans; with {} give the order (end or interleaved)",
        o.sweep ? "--sweep" : "--find-min-budget")));
  // No --update-order on a zoo model: the end order is planned and the interleaved one as well
  // only where the first plan is far from its bound (over kOtherOrderAboveGap) or does not fit; the
  // policy is known only below, so this is set up as auto and the second order's planning skipped
  // there. A trace keeps its own order unless the option says otherwise.
  const bool order_where_far = o.graph.update_order.empty() && o.graph.trace.empty() && !o.sweep &&
                               !o.find_min_budget && (o.policy == "ferry" || !policy_given);
  PlanOptions orders_of = o;
  if (order_where_far) orders_of.graph.update_order = "auto";
  Result<std::vector<PlanSetup>> setups = set_up_orders(orders_of);
  if (!setups.ok()) return report(setups.status());
  const PlanSetup& s0 = setups->front();
  if (!policy_given && o.budget.empty() && !o.sweep && !o.find_min_budget) {
    // No budget and no policy: plan for the device's capacity, with ferry when the model does
    // not fit it as it is.
    const CostModel cost(s0.hw);
    PlanContext unlimited{.graph = s0.graph, .cost = cost, .budget_bytes = 0, .tier = s0.tier,
                          .op_scratch_bytes = s0.scratch};
    Result<PlanReport> keep = plan_policy("none", unlimited);
    if (keep.ok() && keep->device_bytes > s0.budget_bytes) o.policy = "ferry";
  }
  if (o.sweep || o.find_min_budget) {
    const CostModel cost(s0.hw);
    PlanContext ctx{.graph = s0.graph, .cost = cost, .budget_bytes = s0.budget_bytes, .tier = s0.tier,
                    .op_scratch_bytes = s0.scratch};
    ctx.recompute_only = o.tier == "none";
    ctx.options = o.policy_options;
    return o.sweep ? run_sweep(o, s0, cost, ctx) : run_find_min_budget(o, s0, ctx);
  }
  std::optional<BudgetSpec> host_budget;
  if (!o.host_budget.empty()) {
    Result<BudgetSpec> hb = parse_budget(o.host_budget);
    if (!hb.ok()) return report(hb.status().with_context("--host-budget"));
    host_budget = *hb;
  }
  // Every order planned; the faster feasible plan is kept (the first, the graph's own order, on a
  // tie). Where none is found, the first order's error stands.
  if (order_where_far && o.policy != "ferry") setups->resize(1);  // the other order only for ferry's plans
  std::vector<Result<Outcome>> outcomes;
  std::string not_planned;  // why the second order was not planned (no --update-order, close to the bound)
  for (const PlanSetup& s : *setups) {
    if (!outcomes.empty() && order_where_far) {
      const Result<Outcome>& first = outcomes.front();
      if (first.ok() && first->sim.feasible && close_to_bound(first->sim.iteration_us, first->bound.us)) {
        not_planned = not_planned_close_to_bound(to_string(update_order_of(setups->front().graph)));
        break;
      }
    }
    outcomes.push_back(plan_and_simulate(o, s, host_budget));
    // Only "no plan fits this order" lets the other order answer; any other error is the answer.
    if (!outcomes.back().ok() && outcomes.back().status().code() != StatusCode::kOutOfMemory)
      return report(outcomes.back().status());
  }
  size_t chosen = 0;
  for (size_t i = 1; i < outcomes.size(); ++i) {
    if (!outcomes[i].ok()) continue;
    const Result<Outcome>& best = outcomes[chosen];
    const bool better = !best.ok() || (outcomes[i]->sim.feasible && !best->sim.feasible) ||
                        (outcomes[i]->sim.feasible == best->sim.feasible &&
                         order_faster(outcomes[i]->sim.iteration_us, best->sim.iteration_us));
    if (better) chosen = i;
  }
  const PlanSetup& s = (*setups)[chosen];
  Result<Outcome>& picked = outcomes[chosen];
  if (!picked.ok() && picked.status().code() == StatusCode::kOutOfMemory && o.json) {
    // The honest answer to "does it fit?" is a JSON "no", with the reason and the numbers.
    nlohmann::json j;
    j["model"] = s.graph.info.model;
    j["device"] = s.hw.name;
    j["policy"] = o.policy;
    j["feasible"] = false;
    j["reason"] = picked.status().message();
    j["budget_bytes"] = s.budget_bytes;
    j["budget_request"] = s.budget ? nlohmann::json(s.budget->text) : nlohmann::json();
    std::printf("%s\n", j.dump(2).c_str());
    return 1;
  }
  if (!picked.ok()) return report(picked.status());
  Outcome& out = *picked;
  const SimResult& r = out.sim;
  // With both orders in the decision space, a bound must hold for both: the smaller. Planning
  // and bound times are the sums over the orders planned.
  LowerBound bound = out.bound;
  PlanTimes times = out.times;
  nlohmann::json orders = nlohmann::json::array();
  std::string orders_text;
  std::vector<double> planned_us;  // the orders' predicted times, told apart in orders_text
  for (const Result<Outcome>& x : outcomes) planned_us.push_back(x.ok() ? x->sim.iteration_us : 0);
  const std::vector<std::string> planned_ms = ms_apart(planned_us, kOrderTieRelative);
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const std::string name(to_string(update_order_of((*setups)[i].graph)));
    nlohmann::json entry = {{"order", name}, {"chosen", i == chosen}, {"planned", true}};
    if (outcomes[i].ok()) {
      const Outcome& x = *outcomes[i];
      entry["feasible"] = x.sim.feasible;
      entry["iteration_ms"] = x.sim.iteration_us / 1e3;
      entry["lower_bound_ms"] = x.bound.us / 1e3;
      entry["planning_seconds"] = x.times.plan_s;
      orders_text += fmt::format("{}{} {} ms{}", orders_text.empty() ? "" : ", ", name, planned_ms[i],
                                 x.sim.feasible ? "" : " (does not fit)");
      if (i != chosen) {
        if (x.bound.us < bound.us) bound = x.bound;
        times.plan_s += x.times.plan_s;
        times.simulate_s += x.times.simulate_s;
        times.bound_s += x.times.bound_s;
      }
    } else {
      entry["feasible"] = false;
      entry["reason"] = outcomes[i].status().message();
      orders_text += fmt::format("{}{}: no plan", orders_text.empty() ? "" : ", ", name);
      // No plan in this order, but plans of it are in the decision space all the same: its bound,
      // solved alone, counts.
      const CostModel cost(s.hw);
      PlanContext ctx{.graph = (*setups)[i].graph, .cost = cost, .budget_bytes = s.budget_bytes, .tier = s.tier,
                      .op_scratch_bytes = (*setups)[i].scratch};
      ctx.recompute_only = o.tier == "none";
      Result<LowerBound> b = lower_bound(ctx);
      if (!b.ok()) return report(b.status());
      if (b->us < bound.us) bound = *b;
    }
    orders.push_back(std::move(entry));
  }
  for (size_t i = outcomes.size(); i < setups->size(); ++i)
    orders.push_back({{"order", std::string(to_string(update_order_of((*setups)[i].graph)))},
                      {"chosen", false},
                      {"planned", false},
                      {"reason", not_planned}});
  // Shown where more than one order was planned, or asked for.
  const bool show_orders = auto_order || outcomes.size() > 1;
  const Schedule& schedule = out.planned.report.schedule;
  const CostModel cost(s.hw);
  if (!o.trace_out.empty())
    if (Status st = write_chrome_trace(r, o.trace_out); !st.ok()) return report(st);
  if (!o.plot.empty())
    if (Status st = write_memory_svg(r, s.budget_bytes, o.plot); !st.ok()) return report(st);
  if (o.json) {
    nlohmann::json j = to_json(r, s);
    j["lower_bound_ms"] = bound.us / 1e3;
    j["lower_bound_method"] = bound.method;
    j["gap"] = r.iteration_us / bound.us;
    if (auto_order || setups->size() > 1) j["update_orders"] = orders;
    j["tiers"] = tiers_json(out.planned);
    j["ssd_direct"] = s.tier == Tier::kSsd && s.hw.storage.device_direct;  // raw SSD copies planned in place
    j["seconds"] = {{"planning", times.plan_s}, {"simulation", times.simulate_s}, {"bound", times.bound_s},
                    {"bound_within_planning", times.bound_reused}, {"bound_beside_planning", times.bound_beside}};
    if (o.policy == "checkmate" || o.policy == "ferry-exact")  // the MILP's own account of its plan
      j["solver"] = {{"proven_optimal", out.planned.report.proven_optimal},
                     {"mip_gap", out.planned.report.mip_gap},
                     {"solve_seconds", out.planned.report.solve_seconds},
                     {"notes", out.planned.report.notes}};
    if (o.explain) j["decisions"] = decisions_json(s.graph, explain_schedule(s.graph, cost, schedule, &r));
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    print_plan_summary(o, s, out.planned, r, bound, times);
    // Plans that predict the same time (kOrderTieRelative): the graph's own order is kept.
    const bool tie = outcomes.size() > 1 && outcomes[0].ok() && outcomes[1].ok() && outcomes[0]->sim.feasible &&
                     outcomes[1]->sim.feasible && !order_faster(planned_us[0], planned_us[1]) &&
                     !order_faster(planned_us[1], planned_us[0]);
    if (show_orders)
      std::printf("  order       updates %s, chosen%s: %s%s (predicted; the bound is the smaller of the orders')\n",
                  std::string(to_string(update_order_of(s.graph))).c_str(),
                  auto_order ? " by --update-order auto"
                             : fmt::format(" (the first plan was over {:.0f}% from its bound)",
                                           (kOtherOrderAboveGap - 1) * 100).c_str(),
                  orders_text.c_str(), tie ? ", a tie: the first order kept" : "");
    if (o.explain) print_decisions(s.graph, explain_schedule(s.graph, cost, schedule, &r));
  }
  return r.feasible ? 0 : 1;
}

}  // namespace

void register_plan(CLI::App& app, std::function<int()>& action) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Predict one training iteration under a memory plan on a device (simulated): time, stalls, peak memory, "
              "whether it fits");
  o->cmd = cmd;
  add_graph_options(cmd, o->graph, "resnet50", 32);
  cmd->add_option("--device", o->device,
                  "Hardware profile: a name from profiles/ (v100-16gb-pcie3, a100-40gb-pcie4, h100-80gb-pcie5, "
                  "rtx4090-pcie4, cpu-local) or a path to a profile file")
      ->capture_default_str();
  cmd->add_option("--budget", o->budget,
                  "Device memory budget: bytes or with a unit (6GiB, 512MiB...), or a percentage of the no-swap peak "
                  "of this model and shape with the sizes the plan uses (33%). At most the device's capacity, which "
                  "is the default");
  add_policy_options(cmd, o->policy, o->policy_options,
                     "Memory plan policy (default: ferry with a --budget, or when the model does not fit the device; "
                     "none otherwise; all: every policy, with --sweep):");
  cmd->add_option("--tier", o->tier,
                  "Where swapped tensors go: host or ssd; none restricts every policy to recomputation (for comparison "
                  "with recompute-only systems)")
      ->capture_default_str();
  CLI::Option* min = cmd->add_flag("--find-min-budget", o->find_min_budget,
                                   "Search the smallest budget at which the policy's plan fits, and print it");
  CLI::Option* sweep = cmd->add_flag(
      "--sweep", o->sweep,
      "Table of predicted iteration time vs budget (100% down to 10% of the no-swap peak) for the policy, or for every "
      "policy with --policy all; with --plot, an SVG of the table. Progress on stderr when it is a terminal");
  min->excludes(sweep);
  cmd->add_flag("--ssd-staged", o->ssd_staged,
                "With --tier ssd on a profile whose storage reads and writes device memory directly (cpu-local, "
                "measured profiles): plan every SSD copy through host staging, as ferry train --ssd-staged runs it");
  add_host_budget_option(cmd, o->host_budget);
  cmd->add_flag("--explain", o->explain,
                "For every tensor the plan moves: swap, recompute or offload, the bytes it frees and for how many steps, "
                "its estimated link and recompute time, the simulated time the iteration waited for its copies, and "
                "the alternative it did not take (human output: the ten that add the most time; --json: all, under "
                "\"decisions\")");
  cmd->add_flag("--json", o->json, "Print the prediction as JSON (feasible, iteration_ms, compute_ms, stall_ms, "
                                   "peak_bytes, bytes_d2h, bytes_h2d, ...)");
  cmd->add_flag("--logical-sizes", o->logical_sizes,
                "On a cpu profile, plan with the graph's logical tensor sizes instead of the CPU backend's");
  add_backend_options(cmd, o->conv_algo);
  cmd->add_option("--trace-out", o->trace_out, "Write a Chrome trace event file (streams as threads, memory as a "
                                               "counter track) that Perfetto opens");
  cmd->add_option("--plot", o->plot, "Write an SVG plot of device memory over the iteration against the budget");
  cmd->callback([o, &action] { action = [o] { return run_plan(*o); }; });
}

}  // namespace ferry::cli
