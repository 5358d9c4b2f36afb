// `ferry analyze`: structure analysis of one training iteration (execution order, per-step input
// sets, lifetimes, peaks, static memory-sharing plan), as a summary, JSON, CSV timeline or trace.
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analysis/analysis.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "common/file_io.h"
#include "common/units.h"
#include "graph/trace.h"
#include "graph/update_order.h"

namespace ferry::cli {

namespace {

struct AnalyzeOptions {
  GraphOptions graph;
  bool json = false;
  bool steps = false;
  std::string timeline;
  std::string export_trace;
};

Status write_timeline(const Graph& g, const Analysis& a, const std::string& path) {
  std::string csv = "step,op,phase,type,live_bytes_free_at_last_use,live_bytes_shared,persistent_bytes\n";
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const Op& op = g.ops[i];
    csv += fmt::format("{},\"{}\",{},{},{},{},{}\n", i, op.name, to_string(op.phase), to_string(op.type),
                       a.live_bytes_free_at_last_use[i], a.live_bytes_shared[i], a.persistent_bytes);
  }
  return write_file_atomically(path, csv, "timeline");
}

void print_steps(const Graph& g, const Analysis& a) {
  for (size_t i = 0; i < g.ops.size(); ++i) {
    std::vector<std::string> names;
    for (TensorId t : a.step_inputs[i]) names.push_back(fmt::format("t{}", t));
    std::printf("Step%zu in {%s}  # %s (%s, %s)\n", i + 1, fmt::format("{}", fmt::join(names, ",")).c_str(),
                g.ops[i].name.c_str(), std::string(to_string(g.ops[i].type)).c_str(),
                std::string(to_string(g.ops[i].phase)).c_str());
  }
}

nlohmann::json to_json(const Graph& g, const Analysis& a) {
  size_t fwd = 0, bwd = 0, upd = 0;
  for (const Op& op : g.ops) (op.phase == Phase::kForward ? fwd : op.phase == Phase::kBackward ? bwd : upd)++;
  nlohmann::json j;
  j["model"] = g.info.model;
  j["batch"] = g.info.batch;
  if (g.info.image) j["image"] = g.info.image;
  if (g.info.seq) j["seq"] = g.info.seq;
  j["optimizer"] = std::string(to_string(g.info.optimizer));
  j["precision"] = std::string(to_string(g.info.precision));
  j["update_order"] = std::string(to_string(update_order_of(g)));
  j["params"] = g.param_count();
  j["forward_macs"] = g.forward_macs();
  j["total_flops"] = g.total_flops();
  j["ops"] = g.ops.size();
  j["ops_forward"] = fwd;
  j["ops_backward"] = bwd;
  j["ops_update"] = upd;
  j["tensors"] = g.tensors.size();
  j["weight_bytes"] = a.weight_bytes;
  j["persistent_bytes"] = a.persistent_bytes;
  j["activation_bytes"] = a.activation_bytes;
  j["peak_bytes_keep_all"] = a.peak_bytes_keep_all;
  j["peak_bytes_free_at_last_use"] = a.peak_bytes_free_at_last_use;
  j["peak_bytes_shared"] = a.peak_bytes_shared;
  j["lower_bound_bytes"] = a.lower_bound_bytes;
  j["irreducible_min_bytes"] = a.op_working_set_bytes;  // the largest working set of one non-update op
  if (a.op_working_set_op != kNoOp) j["irreducible_min_op"] = g.op(a.op_working_set_op).name;
  j["update_working_set_bytes"] = a.update_working_set_bytes;
  j["arena_bytes"] = a.plan.arena_bytes;
  j["buffers"] = a.buffers.size();
  j["analysis_seconds"] = a.analysis_seconds;
  return j;
}

void print_summary(const Graph& g, const Analysis& a) {
  size_t fwd = 0, bwd = 0, upd = 0;
  for (const Op& op : g.ops) (op.phase == Phase::kForward ? fwd : op.phase == Phase::kBackward ? bwd : upd)++;
  auto pct = [&](uint64_t v) {
    return a.lower_bound_bytes ? 100.0 * (static_cast<double>(v) / static_cast<double>(a.lower_bound_bytes) - 1.0) : 0.0;
  };
  std::printf("%s\n", describe(g).c_str());
  std::printf("  parameters            %s (%s)\n", with_commas(g.param_count()).c_str(),
              format_bytes(a.weight_bytes).c_str());
  std::printf("  forward MACs          %.3f G\n", static_cast<double>(g.forward_macs()) / 1e9);
  std::printf("  ops                   %zu (forward %zu, backward %zu, update %zu)\n", g.ops.size(), fwd, bwd, upd);
  std::printf("  tensors               %zu\n", g.tensors.size());
  std::printf("\nMemory of one training iteration (weights + optimizer state: %s)\n",
              format_bytes(a.persistent_bytes).c_str());
  std::printf("  activations, summed   %s\n", format_bytes(a.activation_bytes).c_str());
  std::printf("  peak, keep everything %12s  %+7.1f%%\n", format_bytes(a.peak_bytes_keep_all).c_str(),
              pct(a.peak_bytes_keep_all));
  std::printf("  peak, free at last use%12s  %+7.1f%%\n", format_bytes(a.peak_bytes_free_at_last_use).c_str(),
              pct(a.peak_bytes_free_at_last_use));
  std::printf("  peak, shared plan     %12s  %+7.1f%%   (in-place + static offsets, %zu buffers)\n",
              format_bytes(a.peak_bytes_shared).c_str(), pct(a.peak_bytes_shared), a.buffers.size());
  std::printf("  lower bound           %12s             (max over steps of live bytes, in-place)\n",
              format_bytes(a.lower_bound_bytes).c_str());
  if (a.op_working_set_op != kNoOp)
    std::printf("  irreducible minimum   %12s             (the largest working set of one op: '%s';\n"
                "                                                  an optimizer update's: %s, unless it runs on the host)\n",
                format_bytes(a.op_working_set_bytes).c_str(), g.op(a.op_working_set_op).name.c_str(),
                format_bytes(a.update_working_set_bytes).c_str());
  // The saved activations with the longest idle intervals: the natural swap candidates.
  std::vector<TensorId> saved;
  for (const Tensor& t : g.tensors)
    if (a.tensors[t.id].idle_steps > 0) saved.push_back(t.id);
  std::sort(saved.begin(), saved.end(), [&](TensorId x, TensorId y) {
    uint64_t sx = g.tensor(x).bytes * static_cast<uint64_t>(a.tensors[x].idle_steps);
    uint64_t sy = g.tensor(y).bytes * static_cast<uint64_t>(a.tensors[y].idle_steps);
    return sx != sy ? sx > sy : x < y;
  });
  if (!saved.empty()) {
    std::printf("\nSaved activations idle longest between forward and backward (bytes x idle steps):\n");
    for (size_t i = 0; i < std::min<size_t>(5, saved.size()); ++i) {
      const TensorInfo& ti = a.tensors[saved[i]];
      std::printf("  t%-6d %-32s %12s  idle %d steps (last forward use step %d, first backward use step %d)\n",
                  saved[i], g.tensor(saved[i]).name.c_str(), format_bytes(g.tensor(saved[i]).bytes).c_str(),
                  ti.idle_steps, ti.last_forward_use + 1, ti.first_backward_use + 1);
    }
  }
  std::printf("\nanalysis took %.3f s\n", a.analysis_seconds);
}

int run_analyze(const AnalyzeOptions& o) {
  Result<Graph> g = load_graph(o.graph);
  if (!g.ok()) return report(g.status());
  Result<Analysis> a = analyze(*g);
  if (!a.ok()) return report(a.status());
  if (!o.export_trace.empty()) {
    Status s = save_trace(*g, o.export_trace);
    if (!s.ok()) return report(s);
  }
  if (!o.timeline.empty()) {
    Status s = write_timeline(*g, *a, o.timeline);
    if (!s.ok()) return report(s);
  }
  if (o.steps) print_steps(*g, *a);
  if (o.json) {
    std::printf("%s\n", to_json(*g, *a).dump(2).c_str());
  } else if (!o.steps) {
    print_summary(*g, *a);
  }
  return 0;
}

}  // namespace

void register_analyze(CLI::App& app, std::function<int()>& action) {
  auto o = std::make_shared<AnalyzeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "analyze", "Analyse one training iteration: execution order, per-step input sets, tensor lifetimes, "
                 "memory peaks and a static memory-sharing plan");
  add_graph_options(cmd, o->graph, "resnet50", 32);
  cmd->add_flag("--json", o->json, "Print the results as JSON (for scripts)");
  cmd->add_flag("--steps", o->steps, "Print every step's input tensor set, as `Step4 in {t2,t3}`");
  cmd->add_option("--timeline", o->timeline, "Write live bytes per step to this CSV file");
  cmd->add_option("--export-trace", o->export_trace, "Write the iteration as a trace file (format v1)");
  cmd->callback([o, &action] { action = [o] { return run_analyze(*o); }; });
}

}  // namespace ferry::cli
