// `ferry plan`: predict, before running, what one training iteration costs under a plan on a
// device: iteration time, stalls, peak memory, whether it fits; as text, JSON, a Chrome trace and
// an SVG plot of device memory against the budget.
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "common/units.h"
#include "cost/cost_model.h"
#include "cost/profile.h"
#include "sim/simulator.h"
#include "sim/timeline.h"

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
};

// Sizes the plan is made for. On this machine's CPU backend, the real ones (blocked layouts,
// oneDNN scratch), so that predictions match `ferry train` byte for byte; elsewhere the logical
// tensor sizes of the graph and no scratch.
Status apply_backend_sizes(Graph& g, std::vector<uint64_t>& scratch) {
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, make_backend("cpu"));
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<CompiledGraph> compiled, backend->compile(g));
  for (Tensor& t : g.tensors) t.bytes = compiled->tensor_bytes(t.id);
  scratch = compiled->all_scratch_bytes();
  return Status::Ok();
}

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

int run_plan(const PlanOptions& o) {
  Result<Graph> g = load_graph(o.graph);
  if (!g.ok()) return report(g.status());
  Result<HardwareProfile> hw = load_profile(o.device);
  if (!hw.ok()) return report(hw.status());
  uint64_t budget = hw->memory_capacity_bytes;
  if (!o.budget.empty()) {
    Result<uint64_t> b = parse_bytes(o.budget);
    if (!b.ok()) return report(b.status());
    if (*b == 0) return report(Status::InvalidArgument("--budget must be positive"));
    budget = *b;
  }
  std::vector<uint64_t> scratch;
  const bool local = hw->name.rfind("cpu", 0) == 0;
  if (local && !o.logical_sizes) {
    if (Status s = apply_backend_sizes(*g, scratch); !s.ok()) return report(s);
  }
  if (o.policy != "none")
    return report(Status::InvalidArgument(fmt::format("unknown policy '{}' (known: none)", o.policy)));
  Schedule schedule = Schedule::keep_all(g->ops.size());
  schedule.policy = o.policy;
  schedule.budget_bytes = budget;
  CostModel cost(*hw);
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
  if (o.json) {
    std::printf("%s\n", to_json(*r, budget).dump(2).c_str());
  } else {
    std::printf("%s on %s, policy %s, budget %s\n", describe(*g).c_str(), hw->name.c_str(), o.policy.c_str(),
                format_bytes(budget).c_str());
    std::printf("  %s\n", r->feasible ? "fits" : ("DOES NOT FIT: " + r->reason).c_str());
    std::printf("  iteration   %10.2f ms  (compute %.2f ms, recompute %.2f ms, stalls %.2f ms)\n",
                r->iteration_us / 1e3, r->compute_busy_us / 1e3, r->recompute_us / 1e3, r->stall_us / 1e3);
    std::printf("  device peak %10s  (weights and optimizer state %s)\n", format_bytes(r->peak_device_bytes).c_str(),
                format_bytes(r->persistent_bytes).c_str());
    std::printf("  moved       d2h %s, h2d %s, ssd write %s, ssd read %s\n", format_bytes(r->bytes_d2h).c_str(),
                format_bytes(r->bytes_h2d).c_str(), format_bytes(r->bytes_ssd_write).c_str(),
                format_bytes(r->bytes_ssd_read).c_str());
    for (size_t i = 0; i < std::min<size_t>(3, r->top_stalls.size()); ++i) {
      const Stall& s = r->top_stalls[i];
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
  cmd->add_option("--policy", o->policy, "Memory plan policy")->capture_default_str();
  cmd->add_flag("--json", o->json, "Print the prediction as JSON (feasible, iteration_ms, compute_ms, stall_ms, "
                                   "peak_bytes, bytes_d2h, bytes_h2d, ...)");
  cmd->add_flag("--logical-sizes", o->logical_sizes,
                "On a cpu profile, plan with the graph's logical tensor sizes instead of the CPU backend's");
  cmd->add_option("--trace-out", o->trace_out, "Write a Chrome trace event file (streams as threads, memory as a "
                                               "counter track) that Perfetto opens");
  cmd->add_option("--plot", o->plot, "Write an SVG plot of device memory over the iteration against the budget");
  cmd->callback([o, &action] { action = [o] { return run_plan(*o); }; });
}

}  // namespace ferry::cli
