// `ferry profile`: measure every op's time and the transfer paths of this machine; write a trace
// with time_us filled and a hardware profile. `ferry profile --calibrate TRACE --device PROFILE`
// instead fits PROFILE's efficiencies to the measured op times of TRACE (src/cost/calibrate.h),
// for example a trace recorded on a real GPU, and writes the fitted profile.
#include <omp.h>

#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/planning.h"
#include "common/units.h"
#include "cost/calibrate.h"
#include "graph/trace.h"
#include "runtime/profiler.h"

namespace ferry::cli {

namespace {

struct ProfileOptions {
  GraphOptions graph;
  int iters = 5;
  int warmup = 2;
  int threads = 0;
  uint64_t seed = 1;
  std::string out;
  std::string hardware_out;
  std::string storage_dir;
  std::string storage_bytes = "256MiB";
  int interference_iters = 3;
  std::string conv_algo = "auto";
  std::string calibrate;  // a trace with measured op times
  std::string device;     // the profile to calibrate
};

std::string efficiency_name(const FittedEfficiency& f) {
  return fmt::format("{}.{}", to_string(f.op_class), f.memory ? std::string("memory") : std::string(to_string(f.unit)));
}

// --calibrate TRACE --device PROFILE: fit, print the errors per op class, write the profile.
int run_calibrate(const ProfileOptions& o) {
  if (o.device.empty()) return report(Status::InvalidArgument("--calibrate needs --device PROFILE (the profile to fit)"));
  GraphOptions graph = o.graph;
  graph.trace = o.calibrate;
  Result<Graph> g = load_graph(graph);
  if (!g.ok()) return report(g.status());
  Result<HardwareProfile> hw = load_profile(o.device);
  if (!hw.ok()) return report(hw.status());
  if (Status s = check_precision(*hw, g->info.precision); !s.ok()) return report(s);
  Result<CalibrationReport> r = calibrate_profile(*g, *hw);
  if (!r.ok()) return report(r.status());
  const std::string out = o.hardware_out.empty() ? o.calibrate + ".calibrated.json" : o.hardware_out;
  r->profile.name = hw->name + "-calibrated";
  r->profile.sources["compute.efficiency"] += fmt::format(" (trace '{}')", o.calibrate);
  if (Status s = save_profile(r->profile, out); !s.ok()) return report(s);

  std::printf("%s: %d ops with measured times (%d not above the %.1f us launch overhead, not fitted) on %s\n",
              describe(*g).c_str(), r->timed_ops, r->skipped_ops, hw->launch_overhead_us, hw->name.c_str());
  std::printf("  %-14s %5s %12s  %23s  %23s\n", "op class", "ops", "measured", "summed time error", "median |op error|");
  std::printf("  %-14s %5s %12s  %11s %11s  %11s %11s\n", "", "", "", "before", "after", "before", "after");
  for (const ClassCalibration& c : r->classes)
    std::printf("  %-14s %5d %9.3f ms  %+10.1f%% %+10.1f%%  %10.1f%% %10.1f%%\n", std::string(to_string(c.op_class)).c_str(),
                c.ops, c.measured_us / 1e3, 100 * c.total_error_before, 100 * c.total_error_after,
                100 * c.median_abs_error_before, 100 * c.median_abs_error_after);
  std::printf("  %-14s %5d %9s     %+10.1f%% %+10.1f%%\n", "all", r->timed_ops, "", 100 * r->iteration_error_before,
              100 * r->iteration_error_after);
  std::printf("efficiencies (profile -> fitted; ops bound by that roof at the fit):\n");
  for (const FittedEfficiency& f : r->parameters)
    std::printf("  %-22s %6.3f -> %6.3f  %s\n", efficiency_name(f).c_str(), f.before, f.after,
                f.determined ? fmt::format("{} ops", f.bound_ops).c_str()
                             : "not determined: no op is bound by this roof (kept, raised to the ops' bound)");
  std::printf("wrote the calibrated profile to %s\n", out.c_str());
  return 0;
}

int run_profile(const ProfileOptions& o) {
  if (!o.calibrate.empty()) return run_calibrate(o);
  if (!o.device.empty()) return report(Status::InvalidArgument("--device is for --calibrate (the profile to fit)"));
  if (o.out.empty()) return report(Status::InvalidArgument("--out FILE is required (the trace to write)"));
  Result<uint64_t> storage_bytes = parse_bytes(o.storage_bytes);
  if (!storage_bytes.ok()) return report(storage_bytes.status());
  if (Status s = set_compute_threads(o.threads); !s.ok()) return report(s);
  // Fail before minutes of measuring, not after.
  for (const std::string& file : {o.out, o.hardware_out}) {
    const std::filesystem::path dir = std::filesystem::path(file).parent_path();
    std::error_code ec;
    if (!file.empty() && !dir.empty() && !std::filesystem::is_directory(dir, ec))
      return report(Status::InvalidArgument(fmt::format("cannot write '{}': '{}' is not a directory", file, dir.string())));
  }
  Result<Graph> g = load_graph(o.graph);
  if (!g.ok()) return report(g.status());
  Result<BackendOptions> backend_options = parse_backend_options(o.conv_algo);
  if (!backend_options.ok()) return report(backend_options.status());
  Result<std::unique_ptr<Backend>> backend = make_backend("cpu", *backend_options);
  if (!backend.ok()) return report(backend.status());
  auto data = make_synthetic_data(o.seed);
  std::fprintf(stderr, "profiling %s: %d warm-up + %d measured iterations...\n", describe(*g).c_str(), o.warmup,
               o.iters);
  Result<OpProfile> ops = profile_ops(*g, **backend, *data, o.warmup, o.iters, o.seed);
  if (!ops.ok()) return report(ops.status());
  std::fprintf(stderr, "measuring device arena <-> host copies...\n");
  Result<std::vector<TransferSample>> link = measure_host_link(**backend);
  if (!link.ok()) return report(link.status());
  const std::string dir =
      o.storage_dir.empty() ? std::filesystem::path(o.out).parent_path().string() : o.storage_dir;
  std::fprintf(stderr, "measuring direct I/O in '%s'...\n", dir.empty() ? "." : dir.c_str());
  Result<std::vector<TransferSample>> storage = measure_storage(dir.empty() ? "." : dir, *storage_bytes);
  if (!storage.ok()) return report(storage.status());
  std::vector<InterferenceSample> interference;
  if (o.interference_iters > 0) {
    std::fprintf(stderr, "measuring how much each path's copies slow the iteration (%d iterations per path)...\n",
                 o.interference_iters);
    Result<std::vector<InterferenceSample>> m = measure_interference(
        *g, **backend, *data, dir.empty() ? "." : dir, std::min(o.warmup, 1), o.interference_iters, o.seed);
    if (!m.ok()) return report(m.status());
    interference = std::move(*m);
  }

  Graph timed = *g;
  for (Op& op : timed.ops) op.time_us = ops->median_us[op.id];
  if (Status s = save_trace(timed, o.out); !s.ok()) return report(s);
  HardwareProfile hw = make_local_profile(*g, *ops, *link, *storage, interference);
  const std::string hw_path = o.hardware_out.empty() ? o.out + ".hardware.json" : o.hardware_out;
  if (Status s = save_profile(hw, hw_path); !s.ok()) return report(s);

  std::vector<double> iters = ops->iteration_ms;
  std::sort(iters.begin(), iters.end());
  std::printf("%s: median iteration %.1f ms over %zu iterations; measured peak device memory %s\n", describe(*g).c_str(),
              iters[iters.size() / 2], iters.size(), format_bytes(ops->measured_peak_bytes).c_str());
  std::printf("  %-10s %12s %6s %14s %12s\n", "path", "request", "depth", "bandwidth", "latency");
  for (const auto* v : {&*link, &*storage})
    for (const TransferSample& s : *v)
      std::printf("  %-10s %12s %6d %11.2f GB/s %9.1f us\n", s.path.c_str(), format_bytes(s.request_bytes).c_str(),
                  s.queue_depth, s.bytes_per_s / 1e9, s.latency_us);
  if (!interference.empty()) {
    std::printf("  %-10s %12s %12s %13s\n", "path", "alone", "with copies", "interference");
    for (const InterferenceSample& s : interference)
      std::printf("  %-10s %9.1f ms %9.1f ms %13.2f\n", s.path.c_str(), s.alone_ms, s.with_ms, s.factor());
  }
  std::printf("wrote the trace (with measured op times) to %s and the hardware profile to %s\n", o.out.c_str(),
              hw_path.c_str());
  return 0;
}

}  // namespace

void register_profile(CLI::App& app, std::function<int()>& action) {
  auto o = std::make_shared<ProfileOptions>();
  CLI::App* cmd = app.add_subcommand(
      "profile", "Measure every op's time (median after warm-up) and this machine's transfer paths (arena <-> host "
                 "memcpy, direct-I/O disk); write a trace with time_us and a hardware profile");
  add_graph_options(cmd, o->graph, "resnet50", 8);
  cmd->add_option("--out", o->out, "The trace file to write (format v1, with measured time_us); required unless "
                                   "--calibrate");
  cmd->add_option("--hardware-out", o->hardware_out,
                  "The hardware profile to write (default: OUT.hardware.json; with --calibrate, TRACE.calibrated.json)");
  cmd->add_option("--calibrate", o->calibrate,
                  "Measure nothing: fit the efficiencies of --device's profile to the measured op times (time_us) of "
                  "this trace, for example one recorded on a real GPU; prints the error per op class before and after "
                  "and writes the fitted profile (docs/cost-model.md)");
  cmd->add_option("--device", o->device, "With --calibrate: the hardware profile to fit (a name from profiles/ or a file)");
  cmd->add_option("--iters", o->iters, "Measured iterations")->capture_default_str();
  cmd->add_option("--warmup", o->warmup, "Warm-up iterations, not measured")->capture_default_str();
  cmd->add_option("--threads", o->threads,
                  fmt::format("Compute threads (default, or 0, and at most: the {} cores this process may use)", max_compute_threads()));
  cmd->add_option("--seed", o->seed, "Seed of the weights and data")->capture_default_str();
  cmd->add_option("--storage-dir", o->storage_dir, "Directory for the direct-I/O measurement (default: OUT's)");
  cmd->add_option("--storage-bytes", o->storage_bytes, "Bytes written and read per storage measurement")
      ->capture_default_str();
  cmd->add_option("--interference-iters", o->interference_iters,
                  "Iterations per condition of the compute-interference measurement (the model alone, then with each "
                  "path's copies looping beside it: how much slower ops run while a copy moves data, the profile's "
                  "compute_interference); 0: skip it, the profile then says 0")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  add_backend_options(cmd, o->conv_algo);
  cmd->callback([o, &action] { action = [o] { return run_profile(*o); }; });
}

}  // namespace ferry::cli
