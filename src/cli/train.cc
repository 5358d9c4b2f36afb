// `ferry train`: trains a network on the CPU backend inside a device arena of a fixed budget.
#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/planning.h"
#include "cli/train_prediction.h"
#include "cost/profile.h"
#include "common/units.h"
#include "data/data.h"
#include "runtime/executor.h"

namespace ferry::cli {

namespace {

// The process's peak resident set (getrusage), in bytes: measured by the OS.
uint64_t peak_rss_bytes() {
  struct rusage u {};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<uint64_t>(u.ru_maxrss) * 1024;
}

// The process's resident set now (/proc/self/statm), in bytes; 0 when it cannot be read.
uint64_t current_rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size_pages = 0, resident_pages = 0;
  const int n = std::fscanf(f, "%llu %llu", &size_pages, &resident_pages);
  std::fclose(f);
  return n == 2 ? resident_pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) : 0;
}

struct TrainCliOptions {
  GraphOptions graph;
  int64_t iters = 30;
  std::string budget;
  uint64_t seed = 1;
  int threads = 0;
  std::string data = "synthetic";
  bool json = false;
  bool no_progress = false;
  std::string policy = "none";
  std::string tier = "host";
  std::string device = "cpu-local";
  std::string ssd_dir = "/tmp";
  bool checksum = false;
  bool verify_memory = false;
  PolicyOptions policy_options;
  std::string conv_algo = "auto";
  std::string op_times;
};

void progress(int64_t done, int64_t total, double ms, float loss) {
  constexpr int kWidth = 30;
  int filled = static_cast<int>(kWidth * done / std::max<int64_t>(total, 1));
  std::fprintf(stderr, "\r  [%s%s] %lld/%lld  %.0f ms/iter  loss %.4f ", std::string(filled, '#').c_str(),
               std::string(kWidth - filled, '.').c_str(), static_cast<long long>(done), static_cast<long long>(total),
               ms, loss);
  if (done == total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

int run_train(const TrainCliOptions& o) {
  if (o.iters <= 0) return report(Status::InvalidArgument(fmt::format("--iters must be positive, got {}", o.iters)));
  if (o.threads < 0) return report(Status::InvalidArgument("--threads must not be negative"));
  uint64_t budget = 0;
  if (!o.budget.empty()) {
    Result<uint64_t> b = parse_bytes(o.budget);
    if (!b.ok()) return report(b.status());
    if (*b == 0) return report(Status::InvalidArgument("--budget must be positive"));
    budget = *b;
  }
  if (o.threads > 0) omp_set_num_threads(o.threads);
  Result<Graph> g = load_graph(o.graph);
  if (!g.ok()) return report(g.status());
  Result<std::unique_ptr<DataSource>> data = open_data(o.data, *g, o.seed);
  if (!data.ok()) return report(data.status());
  Result<BackendOptions> backend_options = parse_backend_options(o.conv_algo);
  if (!backend_options.ok()) return report(backend_options.status());
  Result<std::unique_ptr<Backend>> backend = make_backend("cpu", *backend_options);
  if (!backend.ok()) return report(backend.status());
  ExecutorOptions eo;
  eo.budget_bytes = budget;
  eo.seed = o.seed;
  eo.ssd_dir = o.ssd_dir;
  eo.checksum = o.checksum;
  eo.verify_memory = o.verify_memory;
  // A policy other than none plans for the budget with the backend's real sizes; the executor
  // then runs that plan (swaps through the tier, recomputes) and never exceeds the budget.
  std::optional<Schedule> schedule;
  std::string plan_summary;
  // The prediction of what runs (the plan's schedule, or keep-all), from the profile and op times
  // of an earlier run; made when planning, or on request with --op-times.
  std::optional<SimResult> predicted;
  if (o.policy != "none" || !o.op_times.empty()) {
    if (o.policy != "none" && budget == 0)
      return report(Status::InvalidArgument("--policy needs a --budget to plan for"));
    Result<Tier> tier = parse_tier(o.tier);
    if (!tier.ok()) return report(tier.status());
    Result<HardwareProfile> hw = load_profile(o.device);
    if (!hw.ok()) return report(hw.status());
    Graph sized = *g;
    if (!o.op_times.empty())
      if (Status s = apply_op_times(sized, o.op_times); !s.ok()) return report(s);
    Result<std::vector<uint64_t>> scratch = apply_backend_sizes(sized, *backend_options);
    if (!scratch.ok()) return report(scratch.status());
    CostModel cost(*hw);
    if (o.policy != "none") {
      PlanContext ctx{.graph = sized, .cost = cost, .budget_bytes = budget, .tier = *tier,
                      .op_scratch_bytes = *scratch, .options = o.policy_options};
      Result<PlanReport> plan = plan_policy(o.policy, ctx);
      if (!plan.ok()) return report(with_conv_hint(plan.status(), *g, *backend_options));
      schedule = plan->schedule;
      plan_summary = fmt::format("policy {}: {} tensors swapped to {}, {} recomputed", o.policy,
                                 plan->swapped_tensors, o.tier, plan->recomputed_tensors);
    }
    Result<SimResult> sim = predict_iteration(sized, schedule ? *schedule : Schedule::keep_all(sized.ops.size()),
                                              cost, budget, *scratch);
    if (!sim.ok()) return report(sim.status());
    predicted = std::move(*sim);
  }
  Result<std::unique_ptr<Executor>> ex = Executor::create(*g, **backend, eo, schedule ? &*schedule : nullptr);
  if (!ex.ok()) return report(with_conv_hint(ex.status(), *g, *backend_options));
  Executor& e = **ex;
  if (Status s = e.initialize(); !s.ok()) return report(s);

  const bool show_progress = !o.no_progress && !o.json && isatty(STDERR_FILENO);
  if (!o.json)
    std::printf("Training %s for %lld iterations on %s data, %d threads, budget %s (plan needs %s)\n",
                describe(*g).c_str(), static_cast<long long>(o.iters), (*data)->name().c_str(), omp_get_max_threads(),
                format_bytes(e.budget_bytes()).c_str(), format_bytes(e.predicted_peak_bytes()).c_str());
  if (!o.json && !plan_summary.empty()) std::printf("  %s\n", plan_summary.c_str());
  std::vector<IterationStats> stats;
  std::vector<uint64_t> rss;
  std::vector<std::vector<TransferRecord>> transfers;  // per iteration after the first
  for (int64_t it = 0; it < o.iters; ++it) {
    Result<IterationStats> r = e.run_iteration(it, **data);
    rss.push_back(current_rss_bytes());
    if (it > 0 || o.iters == 1) transfers.push_back(e.last_transfers());
    if (!r.ok()) {
      if (show_progress) std::fprintf(stderr, "\n");
      return report(r.status().with_context(fmt::format("iteration {}", it)));
    }
    stats.push_back(*r);
    if (!std::isfinite(r->loss)) {
      if (show_progress) std::fprintf(stderr, "\n");
      return report(Status::Internal(fmt::format("iteration {}: the loss is {} (diverged; lower --lr)", it, r->loss)));
    }
    if (show_progress) progress(it + 1, o.iters, r->time_ms, r->loss);
  }
  const ConvKernelUse convs = conv_kernel_use(e.graph(), e.compiled());
  const Result<uint64_t> extent = e.measured_extent_bytes();
  if (!extent.ok()) return report(extent.status());
  std::vector<double> times;
  for (const IterationStats& s : stats) times.push_back(s.time_ms);
  // The first iteration pays one-time costs (kernel JIT, first touches); leave it out when we can.
  std::vector<double> steady(times.size() > 1 ? times.begin() + 1 : times.begin(), times.end());
  std::nth_element(steady.begin(), steady.begin() + static_cast<long>(steady.size() / 2), steady.end());
  const double median = steady[steady.size() / 2];

  if (o.json) {
    nlohmann::json j;
    j["model"] = g->info.model;
    j["batch"] = g->info.batch;
    j["threads"] = omp_get_max_threads();
    j["conv_algorithm"] = std::string(to_string(backend_options->conv_algorithm));
    j["winograd_kernels"] = convs.winograd;
    j["data"] = (*data)->name();
    j["iterations"] = nlohmann::json::array();
    for (size_t i = 0; i < stats.size(); ++i)
      j["iterations"].push_back({{"iter", stats[i].iteration},
                                 {"loss", stats[i].loss},
                                 {"time_ms", stats[i].time_ms},
                                 {"rss_bytes", rss[i]}});
    j["median_iter_ms"] = median;
    // Measured: the executor's own accounting, an arena scan, the OS and the tiers' own counters.
    j["measured_peak_bytes"] = e.measured_peak_bytes();
    j["measured_extent_bytes"] = *extent;
    j["peak_rss_bytes"] = peak_rss_bytes();
    j["host_tier_peak_bytes"] = e.host_tier_stats().peak_in_use_bytes;
    j["ssd_tier_peak_bytes"] = e.ssd_tier_stats().peak_in_use_bytes;
    // Predicted: the plan's figures.
    j["predicted_peak_bytes"] = e.predicted_peak_bytes();
    j["predicted_live_peak_bytes"] = e.predicted_live_peak_bytes();
    j["budget_bytes"] = e.budget_bytes();
    j["persistent_bytes"] = e.persistent_region_bytes();
    j["verify_memory"] = o.verify_memory;
    if (predicted) {
      j["predicted"] = {{"iteration_ms", predicted->iteration_us / 1e3},
                        {"stall_ms", predicted->stall_us / 1e3},
                        {"live_peak_bytes", predicted->peak_in_use_bytes},
                        {"peak_bytes", predicted->peak_device_bytes},
                        {"device", o.device},
                        {"op_times", o.op_times.empty() ? "the device profile's cost model" : o.op_times}};
      j["transfers"] = transfer_comparison(e.graph(), *predicted, transfers);
    }
    j["policy"] = o.policy;
    j["tier"] = o.tier;
    const TransferEngineStats ts = e.transfer_stats();
    j["bytes_swapped_out"] = ts.bytes_out;
    j["bytes_swapped_in"] = ts.bytes_in;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("  loss            %.4f -> %.4f (first -> last iteration)\n", stats.front().loss, stats.back().loss);
  std::printf("  iteration time  median %.1f ms (first %.1f ms)\n", median, times.front());
  std::printf("  device memory   measured: peak %s held, highest byte written at %s; budget %s\n",
              format_bytes(e.measured_peak_bytes()).c_str(), format_bytes(*extent).c_str(),
              format_bytes(e.budget_bytes()).c_str());
  std::printf("                  predicted: peak %s held, %s placed (weights+state %s)\n",
              format_bytes(e.predicted_live_peak_bytes()).c_str(), format_bytes(e.predicted_peak_bytes()).c_str(),
              format_bytes(e.persistent_region_bytes()).c_str());
  std::printf("  host memory     measured: process peak RSS %s", format_bytes(peak_rss_bytes()).c_str());
  if (e.host_tier_stats().capacity_bytes > 0)
    std::printf(", host tier peak %s", format_bytes(e.host_tier_stats().peak_in_use_bytes).c_str());
  if (e.ssd_tier_stats().capacity_bytes > 0)
    std::printf(", SSD tier peak %s", format_bytes(e.ssd_tier_stats().peak_in_use_bytes).c_str());
  std::printf("\n");
  if (o.verify_memory) std::printf("  memory checks   guards, poison and contents verified after every op: clean\n");
  if (predicted)
    std::printf("  predicted       iteration %.1f ms on profile %s (op times: %s)\n", predicted->iteration_us / 1e3,
                o.device.c_str(), o.op_times.empty() ? "cost model" : o.op_times.c_str());
  if (convs.kernels > 0)
    std::printf("  convolutions    %s: %d of %d kernels Winograd, the rest direct\n",
                std::string(to_string(backend_options->conv_algorithm)).c_str(), convs.winograd, convs.kernels);
  return 0;
}

}  // namespace

void register_train(CLI::App& app, std::function<int()>& action) {
  auto o = std::make_shared<TrainCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "train", "Train a network on the CPU backend inside a device arena of a fixed budget and report losses, "
               "iteration times and the peak device memory");
  add_graph_options(cmd, o->graph, "preact-resnet164", 32);
  cmd->add_option("--iters", o->iters, "Training iterations")->capture_default_str();
  cmd->add_option("--budget", o->budget,
                  "Device memory budget: bytes or with a unit (6GiB, 512MiB, 1.5GB). Default: what the plan needs. "
                  "Too small a budget fails before the first kernel, saying how much is needed");
  cmd->add_option("--lr", o->graph.lr, "Learning rate (default: 0.1 for sgd, 0.001 for adam and adamw)");
  cmd->add_option("--seed", o->seed, "Seed of the weights, the synthetic data and dropout")->capture_default_str();
  cmd->add_option("--threads", o->threads, "Compute threads (default: all cores)");
  cmd->add_option("--data", o->data, "Training data: synthetic (learnable, built in) or cifar10:DIR (binary batches)")
      ->capture_default_str();
  add_policy_options(cmd, o->policy, o->policy_options, "Memory plan policy (needs --budget):");
  cmd->add_option("--tier", o->tier, "Where swapped tensors go: host (a pre-faulted pool) or ssd (direct-I/O files)")
      ->capture_default_str();
  cmd->add_option("--ssd-dir", o->ssd_dir, "Directory for the SSD tier's temporary files")->capture_default_str();
  cmd->add_option("--device", o->device, "Hardware profile whose op and transfer times the policy plans with")
      ->capture_default_str();
  cmd->add_option("--op-times", o->op_times,
                  "Trace written by an earlier `ferry profile` of the same model and shape: plan and predict with its "
                  "measured op times. With it (or a --policy), the output gives the simulator's prediction of the "
                  "run beside the measurement: iteration time, peaks and every transfer");
  cmd->add_flag("--checksum", o->checksum, "Verify every swapped byte when it comes back");
  cmd->add_flag("--verify-memory", o->verify_memory,
                "Check memory after every op: guard bytes around every tensor, poisoned free memory, and every tensor's "
                "bytes between its write and its reads; a violation is an error naming the op and the tensor. Slow "
                "(O(arena) per op): for small models and few iterations");
  add_backend_options(cmd, o->conv_algo);
  cmd->add_flag("--json", o->json, "Print the results as JSON (for scripts)");
  cmd->add_flag("--no-progress", o->no_progress, "No progress bar");
  cmd->callback([o, &action] { action = [o] { return run_train(*o); }; });
}

}  // namespace ferry::cli
