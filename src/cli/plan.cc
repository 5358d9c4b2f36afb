// `ferry plan`: predict, before running, what one training iteration costs under a plan on a
// device: iteration time, stalls, peak memory, whether it fits; as text, JSON, a Chrome trace and
// an SVG plot of device memory against the budget.
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/planning.h"
#include "common/units.h"
#include "cost/cost_model.h"
#include "cost/profile.h"
#include "sim/simulator.h"
#include "sim/timeline.h"
#include "plan/ferry/bound.h"

namespace ferry::cli {

namespace {

struct PlanOptions {
  GraphOptions graph;
  std::string device = "cpu-local";
  std::string budget;
  std::string policy = "none";
  bool json = false;
  bool logical_sizes = false;
  std::string trace_out;
  std::string plot;
  std::string tier = "host";
  bool find_min_budget = false;
  bool sweep = false;
  PolicyOptions policy_options;
  std::string conv_algo = "auto";
};

nlohmann::json to_json(const SimResult& r, uint64_t budget) {
  nlohmann::json j;
  j["model"] = r.model;
  j["device"] = r.device;
  j["policy"] = r.policy;
  j["feasible"] = r.feasible;
  if (!r.feasible) j["reason"] = r.reason;
  j["budget_bytes"] = budget;
  j["iteration_ms"] = r.iteration_us / 1e3;
  j["compute_ms"] = r.compute_busy_us / 1e3;
  j["recompute_ms"] = r.recompute_us / 1e3;
  j["stall_ms"] = r.stall_us / 1e3;
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
  j["stalls"] = r.num_stalls;
  return j;
}

// Predicted iteration time vs budget for one or all policies; an SVG with --plot.
int run_sweep(const PlanOptions& o, const Graph& g, const CostModel& cost, PlanContext base) {
  std::vector<std::string> policies;
  if (o.policy == "all") {
    for (const PolicyInfo& p : list_policies()) policies.push_back(p.name);
  } else {
    policies.push_back(o.policy);
  }
  PlanContext unlimited = base;
  unlimited.budget_bytes = 0;
  Result<PlanReport> none = plan_policy("none", unlimited);
  if (!none.ok()) return report(none.status());
  SimOptions so;
  so.op_scratch_bytes = base.op_scratch_bytes;
  so.record_timeline = false;
  Result<SimResult> ref = simulate(g, none->schedule, cost, so);
  if (!ref.ok()) return report(ref.status());
  const uint64_t peak = ref->peak_device_bytes;
  const std::vector<double> fractions = {1.0, 0.9, 0.75, 0.6, 0.5, 0.4, 0.33, 0.25, 0.2, 0.15, 0.1};
  nlohmann::json rows = nlohmann::json::array();
  // --json: only the JSON rows on stdout, so that scripts can parse it; otherwise a table.
  auto say = [&](auto... args) {
    if (!o.json) std::printf(args...);
  };
  say("%s on %s: predicted iteration time (ms) / slowdown vs no limit (%.2f ms, peak %s)\n", describe(g).c_str(),
      cost.profile().name.c_str(), ref->iteration_us / 1e3, format_bytes(peak).c_str());
  say("%-16s", "policy");
  for (double f : fractions) say(" %9.0f%%", f * 100);
  say("\n");
  std::vector<std::vector<double>> table;
  for (const std::string& p : policies) {
    say("%-16s", p.c_str());
    std::vector<double> line;
    for (double f : fractions) {
      PlanContext ctx = base;
      ctx.budget_bytes = static_cast<uint64_t>(static_cast<double>(peak) * f);
      Result<PlanReport> plan = plan_policy(p, ctx);
      double ms = -1;
      if (plan.ok()) {
        SimOptions s = so;
        s.budget_bytes = ctx.budget_bytes;
        Result<SimResult> r = simulate(g, plan->schedule, cost, s);
        if (r.ok() && r->feasible) ms = r->iteration_us / 1e3;
      }
      line.push_back(ms);
      rows.push_back({{"policy", p}, {"budget_fraction", f}, {"budget_bytes", ctx.budget_bytes},
                      {"iteration_ms", ms < 0 ? nlohmann::json() : nlohmann::json(ms)}});
      if (ms < 0) say(" %10s", "-");
      else say(" %5.0f x%3.2f", ms, ms * 1e3 / ref->iteration_us);
      if (!o.json) std::fflush(stdout);
    }
    say("\n");
    table.push_back(line);
  }
  say("(- = the policy cannot fit that budget)\n");
  if (o.json) std::printf("%s\n", rows.dump(2).c_str());
  if (!o.plot.empty()) {
    // A small SVG line chart: slowdown vs budget fraction, one line per policy.
    const double w = 860, h = 480, l = 70, r = 180, t = 40, b = 60;
    const double ymax = 4.0;
    std::string svg = fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
                                  "font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n"
                                  "<rect width=\"{}\" height=\"{}\" fill=\"white\"/>\n", w, h, w, h);
    svg += fmt::format("<text x=\"{}\" y=\"24\" font-size=\"15\" font-weight=\"bold\">{} on {}: slowdown vs "
                       "memory budget</text>\n", l, describe(g), cost.profile().name);
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
    for (size_t i = 0; i < table.size(); ++i) {
      std::string pts;
      for (size_t k = 0; k < fractions.size(); ++k)
        if (table[i][k] > 0)
          pts += fmt::format("{:.1f},{:.1f} ", X(fractions[k]), Y(table[i][k] * 1e3 / ref->iteration_us));
      const char* c = kColors[i % 10];
      svg += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n", pts, c);
      svg += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"{}\">{}</text>\n", w - r + 12, t + 18 * (i + 1), c,
                         policies[i]);
    }
    svg += "</svg>\n";
    FILE* f = std::fopen(o.plot.c_str(), "w");
    if (!f || std::fwrite(svg.data(), 1, svg.size(), f) != svg.size()) {
      if (f) std::fclose(f);
      return report(Status::IoError(fmt::format("cannot write '{}'", o.plot)));
    }
    std::fclose(f);
    std::fprintf(o.json ? stderr : stdout, "plot written to %s\n", o.plot.c_str());
  }
  return 0;
}

int run_plan(const PlanOptions& o) {
  Result<Graph> g = load_graph(o.graph);
  if (!g.ok()) return report(g.status());
  Result<HardwareProfile> hw = load_profile(o.device);
  if (!hw.ok()) return report(hw.status());
  if (Status s = check_precision(*hw, g->info.precision); !s.ok()) return report(s);
  uint64_t budget = hw->memory_capacity_bytes;
  if (!o.budget.empty()) {
    Result<uint64_t> b = parse_bytes(o.budget);
    if (!b.ok()) return report(b.status());
    if (*b == 0) return report(Status::InvalidArgument("--budget must be positive"));
    budget = *b;
  }
  // On this machine's CPU backend, plan with its real sizes (blocked layouts, oneDNN scratch), so
  // that predictions match `ferry train` byte for byte; elsewhere with the graph's logical sizes.
  std::vector<uint64_t> scratch;
  const bool local = hw->name.rfind("cpu", 0) == 0;
  Result<BackendOptions> backend_options = parse_backend_options(o.conv_algo);
  if (!backend_options.ok()) return report(backend_options.status());
  if (local && !o.logical_sizes) {
    Result<std::vector<uint64_t>> s = apply_backend_sizes(*g, *backend_options);
    if (!s.ok()) return report(s.status());
    scratch = std::move(*s);
  }
  Result<Tier> tier = parse_tier(o.tier);
  if (!tier.ok()) return report(tier.status());
  CostModel cost(*hw);
  PlanContext ctx{.graph = *g, .cost = cost, .budget_bytes = budget, .tier = *tier, .op_scratch_bytes = scratch};
  ctx.options = o.policy_options;
  if (o.sweep) return run_sweep(o, *g, cost, ctx);
  if (o.find_min_budget) {
    Result<uint64_t> min = find_min_budget(o.policy, ctx);
    if (!min.ok()) return report(min.status());
    if (o.json) {
      std::printf("{\"policy\": \"%s\", \"min_budget_bytes\": %llu}\n", o.policy.c_str(),
                  static_cast<unsigned long long>(*min));
    } else {
      std::printf("%s with policy %s fits in %s (%llu bytes) at the least\n", describe(*g).c_str(), o.policy.c_str(),
                  format_bytes(*min).c_str(), static_cast<unsigned long long>(*min));
    }
    return 0;
  }
  Result<PlanReport> planned = plan_policy(o.policy, ctx);
  if (!planned.ok() && local && !o.logical_sizes)
    planned = with_conv_hint(planned.status(), *g, *backend_options);
  if (!planned.ok() && planned.status().code() == StatusCode::kOutOfMemory && o.json) {
    // The honest answer to "does it fit?" is a JSON "no", with the reason and the numbers.
    nlohmann::json j;
    j["model"] = g->info.model;
    j["device"] = hw->name;
    j["policy"] = o.policy;
    j["feasible"] = false;
    j["reason"] = planned.status().message();
    j["budget_bytes"] = budget;
    std::printf("%s\n", j.dump(2).c_str());
    return 1;
  }
  if (!planned.ok()) return report(planned.status());
  Schedule schedule = planned->schedule;
  schedule.budget_bytes = budget;
  SimOptions so;
  so.budget_bytes = budget;
  so.op_scratch_bytes = scratch;
  so.record_timeline = !o.trace_out.empty() || !o.plot.empty();
  Result<SimResult> r = simulate(*g, schedule, cost, so);
  if (!r.ok()) return report(r.status());
  if (!o.trace_out.empty())
    if (Status s = write_chrome_trace(*r, o.trace_out); !s.ok()) return report(s);
  if (!o.plot.empty())
    if (Status s = write_memory_svg(*r, budget, o.plot); !s.ok()) return report(s);
  // The bound: no plan in Ferry's decision space at this budget is faster (plan/ferry/bound.h).
  Result<LowerBound> bound = lower_bound(ctx);
  if (!bound.ok()) return report(bound.status());
  const double gap = r->iteration_us / bound->us;
  if (o.json) {
    nlohmann::json j = to_json(*r, budget);
    j["precision"] = std::string(to_string(g->info.precision));
    j["lower_bound_ms"] = bound->us / 1e3;
    j["lower_bound_method"] = bound->method;
    j["gap"] = gap;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s on %s, policy %s, budget %s\n", describe(*g).c_str(), hw->name.c_str(), o.policy.c_str(),
                format_bytes(budget).c_str());
    std::printf("  %s\n", r->feasible ? "fits" : ("DOES NOT FIT: " + r->reason).c_str());
    std::printf("  plan        %zu tensors swapped to %s, %zu recomputed%s%s\n", planned->swapped_tensors,
                o.tier.c_str(), planned->recomputed_tensors, planned->notes.empty() ? "" : "; ",
                planned->notes.c_str());
    std::printf("  iteration   %10.2f ms  (compute %.2f ms, recompute %.2f ms, stalls %.2f ms)\n",
                r->iteration_us / 1e3, r->compute_busy_us / 1e3, r->recompute_us / 1e3, r->stall_us / 1e3);
    std::printf("  bound       %10.2f ms  no plan at this budget is faster (%s); this plan is %.3fx the bound\n",
                bound->us / 1e3, bound->method == "lp" ? "LP relaxation" : "sum of op times", gap);
    std::printf("  device peak %10s  (weights and optimizer state %s)\n", format_bytes(r->peak_device_bytes).c_str(),
                format_bytes(r->persistent_bytes).c_str());
    std::printf("  moved       d2h %s, h2d %s, ssd_write %s, ssd_read %s\n", format_bytes(r->bytes_d2h).c_str(),
                format_bytes(r->bytes_h2d).c_str(), format_bytes(r->bytes_ssd_write).c_str(),
                format_bytes(r->bytes_ssd_read).c_str());
    for (size_t i = 0; i < std::min<size_t>(3, r->top_stalls.size()); ++i) {
      const Stall& s = r->top_stalls[i];
      if (s.wait_us < 1.0) continue;
      std::printf("  stall       %.2f ms at step %d ('%s') waiting for '%s'\n", s.wait_us / 1e3, s.step,
                  g->op(s.step).name.c_str(), s.tensor != kNoTensor ? g->tensor(s.tensor).name.c_str() : "?");
    }
    if (!o.trace_out.empty()) std::printf("  timeline written to %s (open it in Perfetto or chrome://tracing)\n", o.trace_out.c_str());
    if (!o.plot.empty()) std::printf("  memory plot written to %s\n", o.plot.c_str());
  }
  return r->feasible ? 0 : 1;
}

}  // namespace

void register_plan(CLI::App& app, std::function<int()>& action) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Predict one training iteration under a memory plan on a device (simulated): time, stalls, peak memory, "
              "whether it fits");
  add_graph_options(cmd, o->graph, "resnet50", 32);
  cmd->add_option("--device", o->device,
                  "Hardware profile: a name from profiles/ (v100-16gb-pcie3, a100-40gb-pcie4, h100-80gb-pcie5, "
                  "rtx4090-pcie4, cpu-local) or a path to a profile file")
      ->capture_default_str();
  cmd->add_option("--budget", o->budget, "Device memory budget (bytes or 6GiB, 512MiB...). Default: the device's capacity");
  add_policy_options(cmd, o->policy, o->policy_options, "Memory plan policy:");
  cmd->add_option("--tier", o->tier, "Where swapped tensors go: host or ssd")->capture_default_str();
  cmd->add_flag("--find-min-budget", o->find_min_budget,
                "Bisect the smallest budget at which the policy's plan fits, and print it");
  cmd->add_flag("--sweep", o->sweep,
                "Table of predicted iteration time vs budget (100% down to 10% of the no-swap peak) for the policy, "
                "or for every policy with --policy all; with --plot, an SVG of the table");
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
