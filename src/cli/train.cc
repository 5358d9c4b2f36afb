// `ferry train`: trains a network on the CPU backend inside a device arena of a fixed budget.
//
// run_train() reads as the steps it takes: check the options, set up the graph, data and backend
// (set_up_training), plan for the budget (plan_training), run the iterations (run_iterations),
// then report: train_report_json() builds the JSON document, print_train_summary() the text.
#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "cli/commands.h"
#include "codec/codec.h"
#include "cli/options.h"
#include "cli/planning.h"
#include "cli/train_prediction.h"
#include "common/units.h"
#include "cost/profile.h"
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
  const CLI::App* cmd = nullptr;  // to ask which options were given
  GraphOptions graph;
  int64_t iters = 30;
  std::string budget;
  uint64_t seed = 1;
  int threads = 0;
  std::string data = "synthetic";
  bool json = false;
  bool no_progress = false;
  std::string policy;  // empty: ferry with a --budget, else none
  std::string tier = "host";
  std::string device = "cpu-local";
  std::string ssd_dir = "/tmp";
  // How the SSD tier codes swapped bytes (lossless codecs, or auto). auto is the default: measured
  // never slower than none beyond noise (bench/results/codec-ssd-2026-11-25.md).
  std::string codec = "auto";
  bool checksum = false;
  bool verify_memory = false;
  PolicyOptions policy_options;
  std::string conv_algo = "auto";
  std::string op_times;
  bool compare = false;  // also train unconstrained first and report the slowdown
  bool demo = false;     // no options at all: the built-in demo (33% with ferry, compared)
};

// --compare: the same model trained first without a budget or a plan, in this process.
struct Baseline {
  double median_ms = 0;
  uint64_t measured_peak_bytes = 0;
  std::vector<float> losses;
};

// Everything the iterations need, and what the reports say about how it was set up.
struct TrainSetup {
  Graph graph;
  std::unique_ptr<DataSource> data;
  BackendOptions backend_options;
  std::unique_ptr<Backend> backend;
  std::optional<BudgetSpec> budget;  // --budget as given
  uint64_t budget_bytes = 0;         // resolved; 0 = what the plan needs
  uint64_t no_swap_peak_bytes = 0;   // the keep plan's device bytes (0 when not needed)
  std::optional<Schedule> schedule;  // policies other than none
  std::string plan_summary;
  // The simulator's prediction of what runs, from the device profile and the op times of an
  // earlier run (--op-times); made when planning, or on request with --op-times.
  std::optional<SimResult> predicted;
  std::optional<Baseline> baseline;  // --compare
};

// The iterations and what is derived from them.
struct TrainResult {
  std::vector<IterationStats> iterations;
  std::vector<uint64_t> rss_bytes;                      // per iteration, after it (measured by the OS)
  std::vector<std::vector<TransferRecord>> transfers;   // per iteration after the first
  double median_ms = 0;  // of the iterations after the first (which pays one-time costs)
  ConvKernelUse convs;
  uint64_t extent_bytes = 0;  // the highest arena byte written (Executor::measured_extent_bytes)
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

// --codec: a lossless codec's name; InvalidArgument lists them otherwise.
Result<CodecId> parse_lossless_codec(const std::string& name) {
  if (name == "auto") return CodecId::kNone;  // the tier chooses (ExecutorOptions::ssd_codec_auto)
  std::optional<CodecId> c = codec_from_string(name);
  if (c && !is_lossy(*c)) return *c;
  std::string names;
  for (CodecId k : kLosslessCodecs) names += fmt::format("{}{}", names.empty() ? "" : ", ", to_string(k));
  return Status::InvalidArgument(
      fmt::format("--codec: unknown or lossy codec '{}' (use auto or a lossless codec: {})", name, names));
}

// Bad values, and options that would be silently ignored.
Status check_train_options(const TrainCliOptions& o) {
  if (o.iters <= 0) return Status::InvalidArgument(fmt::format("--iters must be positive, got {}", o.iters));
  const CLI::App& cmd = *o.cmd;
  const bool planned = o.policy != "none";
  FERRY_RETURN_IF_ERROR(check_option_used(cmd, "--tier", planned, "without --policy (policy none swaps nothing)"));
  FERRY_RETURN_IF_ERROR(check_option_used(cmd, "--checksum", planned, "without --policy (nothing is swapped)"));
  FERRY_RETURN_IF_ERROR(check_option_used(cmd, "--ssd-dir", planned && o.tier == "ssd", "without --tier ssd"));
  FERRY_RETURN_IF_ERROR(check_option_used(cmd, "--codec", planned && o.tier == "ssd", "without --tier ssd"));
  FERRY_RETURN_IF_ERROR(parse_lossless_codec(o.codec).status());
  FERRY_RETURN_IF_ERROR(check_option_used(cmd, "--device", planned || !o.op_times.empty(),
                                          "without --policy or --op-times (it is what plans and predictions use)"));
  FERRY_RETURN_IF_ERROR(check_option_used(cmd, "--swapin-ahead", o.policy == "lms", "without --policy lms"));
  for (const char* checkmate : {"--checkmate-time-limit", "--checkmate-max-nodes"})
    FERRY_RETURN_IF_ERROR(check_option_used(cmd, checkmate, o.policy == "checkmate" || o.policy == "ferry-exact",
                                            "without --policy checkmate or ferry-exact"));
  if (planned && o.budget.empty()) return Status::InvalidArgument("--policy needs a --budget to plan for");
  return Status::Ok();
}

// Graph (with a loss to report), data, backend; the budget as given.
Result<TrainSetup> set_up_training(const TrainCliOptions& o) {
  TrainSetup s;
  if (!o.budget.empty()) {
    FERRY_ASSIGN_OR_RETURN(BudgetSpec budget, parse_budget(o.budget));
    s.budget = budget;
  }
  FERRY_RETURN_IF_ERROR(set_compute_threads(o.threads));
  FERRY_ASSIGN_OR_RETURN(s.graph, load_graph(o.graph));
  if (s.graph.loss == kNoTensor)
    return Status::InvalidArgument(fmt::format(
        "{} names no loss tensor (the trace's \"loss\" field), and training reports the loss of every iteration",
        o.graph.trace.empty() ? std::string("the graph") : "trace '" + o.graph.trace + "'"));
  FERRY_ASSIGN_OR_RETURN(s.data, open_data(o.data, s.graph, o.seed));
  FERRY_ASSIGN_OR_RETURN(s.backend_options, parse_backend_options(o.conv_algo));
  FERRY_ASSIGN_OR_RETURN(s.backend, make_backend("cpu", s.backend_options));
  return s;
}

// Resolves the budget and, for a policy other than none, plans for it with the backend's real
// sizes; the executor then runs that plan (swaps through the tier, recomputes) and never
// exceeds the budget. A percentage is of the keep plan's device bytes at those sizes, which is
// what the executor needs without a policy.
Status plan_training(const TrainCliOptions& o, TrainSetup& s) {
  const bool planned = o.policy != "none";
  const bool percent = s.budget && s.budget->percent;
  const bool predict = planned || !o.op_times.empty();
  if (!planned && !percent && !predict) {
    s.budget_bytes = s.budget ? s.budget->bytes : 0;
    return Status::Ok();
  }
  FERRY_ASSIGN_OR_RETURN(Tier tier, parse_tier(o.tier));
  FERRY_ASSIGN_OR_RETURN(HardwareProfile hw, load_profile(o.device));
  Graph sized = s.graph;
  if (!o.op_times.empty()) FERRY_RETURN_IF_ERROR(apply_op_times(sized, o.op_times));
  FERRY_ASSIGN_OR_RETURN(std::vector<uint64_t> scratch, apply_backend_sizes(sized, s.backend_options));
  CostModel cost(hw);
  PlanContext ctx{.graph = sized, .cost = cost, .budget_bytes = 0, .tier = tier, .op_scratch_bytes = scratch,
                  .options = o.policy_options};
  ctx.recompute_only = o.tier == "none";
  if (percent) {
    FERRY_ASSIGN_OR_RETURN(PlanReport none, plan_policy("none", ctx));
    s.no_swap_peak_bytes = none.device_bytes;
  }
  s.budget_bytes = s.budget ? s.budget->resolve(s.no_swap_peak_bytes) : 0;
  if (planned) {
    ctx.budget_bytes = s.budget_bytes;
    Result<PlanReport> plan = plan_policy(o.policy, ctx);
    if (!plan.ok()) return with_conv_hint(plan.status(), s.graph, s.backend_options);
    s.schedule = plan->schedule;
    s.plan_summary = fmt::format("policy {}: {} tensors swapped to {}, {} recomputed", o.policy,
                                 plan->swapped_tensors, o.tier, plan->recomputed_tensors);
  }
  if (predict) {
    FERRY_ASSIGN_OR_RETURN(s.predicted, predict_iteration(sized, s.schedule ? *s.schedule : Schedule::keep_all(sized.ops.size()),
                                                          cost, s.budget_bytes, scratch));
  }
  return Status::Ok();
}

// Runs the iterations (measuring the process's resident set after each, and keeping every
// iteration's transfers but the first's); a non-finite loss stops training.
Result<TrainResult> run_iterations(Executor& e, DataSource& data, int64_t iters, bool show_progress) {
  TrainResult r;
  auto fail = [&](Status s) {
    if (show_progress) std::fprintf(stderr, "\n");
    return s;
  };
  for (int64_t it = 0; it < iters; ++it) {
    Result<IterationStats> st = e.run_iteration(it, data);
    if (!st.ok()) return fail(st.status().with_context(fmt::format("iteration {}", it)));
    r.iterations.push_back(*st);
    r.rss_bytes.push_back(current_rss_bytes());
    if (it > 0 || iters == 1) r.transfers.push_back(e.last_transfers());
    if (!std::isfinite(st->loss))
      return fail(Status::Internal(fmt::format("iteration {}: the loss is {} (diverged; lower --lr)", it, st->loss)));
    if (show_progress) progress(it + 1, iters, st->time_ms, st->loss);
  }
  return r;
}

Result<TrainResult> summarize(TrainResult r, const Executor& e) {
  r.convs = conv_kernel_use(e.graph(), e.compiled());
  FERRY_ASSIGN_OR_RETURN(r.extent_bytes, e.measured_extent_bytes());
  std::vector<double> steady;
  for (size_t i = r.iterations.size() > 1 ? 1 : 0; i < r.iterations.size(); ++i)
    steady.push_back(r.iterations[i].time_ms);
  std::nth_element(steady.begin(), steady.begin() + static_cast<long>(steady.size() / 2), steady.end());
  r.median_ms = steady[steady.size() / 2];
  return r;
}

// --compare: trains the same graph on the same data without a budget or a plan (the executor
// allocates what the keep plan needs), in this process, before the planned run.
Result<Baseline> run_baseline(const TrainCliOptions& o, const TrainSetup& s, bool show_progress) {
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<DataSource> data, open_data(o.data, s.graph, o.seed));
  ExecutorOptions eo;
  eo.seed = o.seed;
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Executor> e, Executor::create(s.graph, *s.backend, eo, nullptr));
  FERRY_RETURN_IF_ERROR(e->initialize());
  FERRY_ASSIGN_OR_RETURN(TrainResult r, run_iterations(*e, *data, o.iters, show_progress));
  FERRY_ASSIGN_OR_RETURN(r, summarize(std::move(r), *e));
  Baseline b;
  b.median_ms = r.median_ms;
  b.measured_peak_bytes = e->measured_peak_bytes();
  for (const IterationStats& it : r.iterations) b.losses.push_back(it.loss);
  return b;
}

bool same_losses(const Baseline& b, const TrainResult& r) {
  if (b.losses.size() != r.iterations.size()) return false;
  for (size_t i = 0; i < b.losses.size(); ++i)
    if (std::memcmp(&b.losses[i], &r.iterations[i].loss, sizeof(float)) != 0) return false;
  return true;
}

// The JSON document of a run (--json).
nlohmann::json train_report_json(const TrainCliOptions& o, const TrainSetup& s, const Executor& e,
                                 const TrainResult& r) {
  nlohmann::json j;
  j["model"] = s.graph.info.model;
  j["batch"] = s.graph.info.batch;
  j["threads"] = omp_get_max_threads();
  j["conv_algorithm"] = std::string(to_string(s.backend_options.conv_algorithm));
  j["winograd_kernels"] = r.convs.winograd;
  j["data"] = s.data->name();
  j["iterations"] = nlohmann::json::array();
  for (size_t i = 0; i < r.iterations.size(); ++i)
    j["iterations"].push_back({{"iter", r.iterations[i].iteration},
                               {"loss", r.iterations[i].loss},
                               {"time_ms", r.iterations[i].time_ms},
                               {"rss_bytes", r.rss_bytes[i]}});
  j["median_iter_ms"] = r.median_ms;
  // Measured: the executor's own accounting, an arena scan, the OS and the tiers' own counters.
  j["measured_peak_bytes"] = e.measured_peak_bytes();
  j["measured_extent_bytes"] = r.extent_bytes;
  j["peak_rss_bytes"] = peak_rss_bytes();
  j["host_tier_peak_bytes"] = e.host_tier_stats().peak_in_use_bytes;
  j["ssd_tier_peak_bytes"] = e.ssd_tier_stats().peak_in_use_bytes;
  // Predicted: the plan's figures.
  j["predicted_peak_bytes"] = e.predicted_peak_bytes();
  j["predicted_live_peak_bytes"] = e.predicted_live_peak_bytes();
  j["verify_memory"] = o.verify_memory;
  if (s.predicted) {
    j["predicted"] = {{"iteration_ms", s.predicted->iteration_us / 1e3},
                      {"stall_ms", s.predicted->stall_us / 1e3},
                      {"live_peak_bytes", s.predicted->peak_in_use_bytes},
                      {"peak_bytes", s.predicted->peak_device_bytes},
                      {"device", o.device},
                      {"op_times", o.op_times.empty() ? "the device profile's cost model" : o.op_times}};
    j["transfers"] = transfer_comparison(e.graph(), *s.predicted, r.transfers);
  }
  j["budget_bytes"] = e.budget_bytes();
  j["budget_request"] = s.budget ? nlohmann::json(s.budget->text) : nlohmann::json();
  if (s.no_swap_peak_bytes > 0) j["no_swap_peak_bytes"] = s.no_swap_peak_bytes;
  j["persistent_bytes"] = e.persistent_region_bytes();
  j["policy"] = o.policy;
  j["tier"] = o.tier;
  // Measured by the SSD tier: the bytes that really crossed the disk (0 without an SSD tier).
  j["codec"] = o.tier == "ssd" ? o.codec : "none";  // only the SSD tier codes
  j["ssd_disk_bytes_written"] = e.ssd_io_stats().disk_bytes_written;
  j["ssd_disk_bytes_read"] = e.ssd_io_stats().disk_bytes_read;
  if (o.tier == "ssd" && o.codec == "auto") {
    j["codec_choices"] = nlohmann::json::array();
    for (const SsdCodecChoice& c : e.ssd_codec_choices())
      j["codec_choices"].push_back({{"class", c.tensor_class},
                                    {"codec", std::string(to_string(c.codec))},
                                    {"measured_ratio", c.ratio},
                                    {"measured_write_bytes_per_s", c.write_bytes_per_s},
                                    {"measured_read_bytes_per_s", c.read_bytes_per_s},
                                    {"predicted_ms", c.predicted_seconds * 1e3},
                                    {"predicted_none_ms", c.predicted_none_seconds * 1e3}});
  }
  const TransferEngineStats ts = e.transfer_stats();
  j["bytes_swapped_out"] = ts.bytes_out;
  j["bytes_swapped_in"] = ts.bytes_in;
  if (s.baseline) {
    j["baseline"] = {{"median_iter_ms", s.baseline->median_ms},
                     {"measured_peak_bytes", s.baseline->measured_peak_bytes},
                     {"losses_bitwise_identical", same_losses(*s.baseline, r)}};
    j["measured_slowdown"] = r.median_ms / s.baseline->median_ms;
  }
  return j;
}

// The human summary after the iterations.
void print_train_summary(const TrainCliOptions& o, const TrainSetup& s, const Executor& e, const TrainResult& r) {
  std::printf("  loss            %.4f -> %.4f (first -> last iteration)\n", r.iterations.front().loss,
              r.iterations.back().loss);
  std::printf("  iteration time  median %.1f ms (first %.1f ms), measured\n", r.median_ms,
              r.iterations.front().time_ms);
  if (s.predicted)
    std::printf("                  predicted %.1f ms on profile %s (op times: %s)\n", s.predicted->iteration_us / 1e3,
                o.device.c_str(), o.op_times.empty() ? "its cost model" : o.op_times.c_str());
  std::printf("  device memory   measured: peak %s held, highest byte written at %s; budget %s\n",
              format_bytes(e.measured_peak_bytes()).c_str(), format_bytes(r.extent_bytes).c_str(),
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
  if (e.ssd_tier_stats().capacity_bytes > 0)
    std::printf("  SSD traffic     measured: %s written, %s read (codec %s; tensors %s out, %s in)\n",
                format_bytes(e.ssd_io_stats().disk_bytes_written).c_str(),
                format_bytes(e.ssd_io_stats().disk_bytes_read).c_str(), o.codec.c_str(),
                format_bytes(e.ssd_tier_stats().bytes_written).c_str(), format_bytes(e.ssd_tier_stats().bytes_read).c_str());
  if (o.verify_memory) std::printf("  memory checks   guards, poison and contents verified after every op: clean\n");
  if (r.convs.kernels > 0)
    std::printf("  convolutions    %s: %d of %d kernels Winograd, the rest direct\n",
                std::string(to_string(s.backend_options.conv_algorithm)).c_str(), r.convs.winograd, r.convs.kernels);
  if (s.baseline) {
    const Baseline& b = *s.baseline;
    std::printf("\nSide by side (measured, this process, same data and seed):\n");
    std::printf("  %-26s %12s %14s %16s\n", "", "budget", "device peak", "iteration");
    std::printf("  %-26s %12s %14s %13.1f ms\n", "without a plan", "-", format_bytes(b.measured_peak_bytes).c_str(),
                b.median_ms);
    const std::string planned = fmt::format("{} at {}", o.policy, s.budget ? s.budget->text : std::string("?"));
    std::printf("  %-26s %12s %14s %13.1f ms  %.2fx\n", planned.c_str(), format_bytes(e.budget_bytes()).c_str(),
                format_bytes(e.measured_peak_bytes()).c_str(), r.median_ms, r.median_ms / b.median_ms);
    std::printf("  need without a plan %s; losses bitwise identical: %s\n",
                format_bytes(s.no_swap_peak_bytes > 0 ? s.no_swap_peak_bytes : b.measured_peak_bytes).c_str(),
                same_losses(b, r) ? "yes" : "NO");
  }
}

// The line before the iterations.
void print_train_header(const TrainCliOptions& o, const TrainSetup& s, const Executor& e) {
  const std::string budget = s.budget && s.budget->percent ? s.budget->describe(s.no_swap_peak_bytes)
                                                           : format_bytes(e.budget_bytes());
  std::printf("Training %s for %lld iterations on %s data, %d threads, budget %s (plan needs %s)\n",
              describe(s.graph).c_str(), static_cast<long long>(o.iters), s.data->name().c_str(),
              omp_get_max_threads(), budget.c_str(), format_bytes(e.predicted_peak_bytes()).c_str());
  if (!s.plan_summary.empty()) std::printf("  %s\n", s.plan_summary.c_str());
}

int run_train(const TrainCliOptions& given) {
  TrainCliOptions o = given;
  if (o.demo) {
    o.budget = "33%";
    o.compare = true;
  }
  if (o.policy.empty()) o.policy = o.budget.empty() ? "none" : "ferry";
  if (Status st = check_train_options(o); !st.ok()) return report(st);
  Result<TrainSetup> setup = set_up_training(o);
  if (!setup.ok()) return report(setup.status());
  TrainSetup& s = *setup;
  if (Status st = plan_training(o, s); !st.ok()) return report(st);
  const bool show_progress = !o.no_progress && !o.json && isatty(STDERR_FILENO);
  if (o.demo && !o.json)
    std::printf("ferry train without options: the built-in demo. It trains %s at %s of its no-swap peak with the "
                "ferry planner, after the same run without a plan for comparison (`ferry train --help` for options)\n\n",
                describe(s.graph).c_str(), o.budget.c_str());
  if (o.compare) {
    if (!o.json) std::printf("Training without a plan first (for --compare), %lld iterations\n", static_cast<long long>(o.iters));
    Result<Baseline> b = run_baseline(o, s, show_progress);
    if (!b.ok()) return report(b.status().with_context("the run without a plan (--compare)"));
    s.baseline = std::move(*b);
  }
  ExecutorOptions eo;
  eo.budget_bytes = s.budget_bytes;
  eo.seed = o.seed;
  eo.ssd_dir = o.ssd_dir;
  eo.checksum = o.checksum;
  eo.ssd_codec = *parse_lossless_codec(o.codec);  // checked with the options
  eo.ssd_codec_auto = o.tier == "ssd" && o.codec == "auto";
  eo.verify_memory = o.verify_memory;
  Result<std::unique_ptr<Executor>> ex =
      Executor::create(s.graph, *s.backend, eo, s.schedule ? &*s.schedule : nullptr);
  if (!ex.ok()) return report(with_conv_hint(ex.status(), s.graph, s.backend_options));
  Executor& e = **ex;
  if (Status st = e.initialize(); !st.ok()) return report(st);

  if (!o.json) print_train_header(o, s, e);
  Result<TrainResult> iterations = run_iterations(e, *s.data, o.iters, show_progress);
  if (!iterations.ok()) return report(iterations.status());
  Result<TrainResult> r = summarize(std::move(*iterations), e);
  if (!r.ok()) return report(r.status());
  if (o.json) {
    std::printf("%s\n", train_report_json(o, s, e, *r).dump(2).c_str());
  } else {
    print_train_summary(o, s, e, *r);
  }
  if (s.baseline && !same_losses(*s.baseline, *r))
    return report(Status::Internal("the planned run's losses differ from the run without a plan: a memory-management "
                                   "defect, please report it"));
  return 0;
}

}  // namespace

void register_train(CLI::App& app, std::function<int()>& action) {
  auto o = std::make_shared<TrainCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "train", "Train a network on the CPU backend inside a device arena of a fixed budget and report losses, "
               "iteration times and the peak device memory");
  o->cmd = cmd;
  add_graph_options(cmd, o->graph, "preact-resnet164", 32);
  add_learning_rate_option(cmd, o->graph);
  cmd->add_option("--iters", o->iters, "Training iterations")->capture_default_str();
  cmd->add_option("--budget", o->budget,
                  "Device memory budget: bytes or with a unit (6GiB, 512MiB, 1.5GB), or a percentage of the no-swap "
                  "peak of this model and shape with the backend's sizes (33%). Default: what the plan needs. Too "
                  "small a budget fails before the first kernel, saying how much is needed");
  cmd->add_option("--seed", o->seed, "Seed of the weights, the synthetic data and dropout")->capture_default_str();
  cmd->add_option("--threads", o->threads,
                  fmt::format("Compute threads (default and at most: the {} cores this process may use)", max_compute_threads()));
  cmd->add_option("--data", o->data, "Training data: synthetic (learnable, built in) or cifar10:DIR (binary batches)")
      ->capture_default_str();
  add_policy_options(cmd, o->policy, o->policy_options,
                     "Memory plan policy (needs a --budget; default with one: ferry, without: none):");
  cmd->add_option("--tier", o->tier,
                  "Where swapped tensors go: host (a pre-faulted pool), ssd (direct-I/O files), or none (recomputation "
                  "only)")
      ->capture_default_str();
  cmd->add_option("--ssd-dir", o->ssd_dir, "Directory for the SSD tier's temporary files")->capture_default_str();
  cmd->add_option("--codec", o->codec,
                  "How the SSD tier codes swapped bytes on disk, losslessly: none, zero-mask, lz4, zstd, "
                  "zero-mask+lz4, or auto (measured and chosen per class of tensor; docs/codecs.md)")
      ->capture_default_str();
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
  cmd->add_flag("--compare", o->compare,
                "Also train the same model without a budget or a plan first, in this process, and report the measured "
                "slowdown, both peaks and whether the losses are bitwise identical (they must be; exit 1 if not). "
                "`ferry train` with no options at all runs the built-in demo: --budget 33% --compare");
  cmd->add_flag("--json", o->json, "Print the results as JSON (for scripts)");
  cmd->add_flag("--no-progress", o->no_progress, "No progress bar");
  cmd->callback([o, cmd, &action] {
    const auto options = cmd->get_options();
    o->demo = std::all_of(options.begin(), options.end(), [](const CLI::Option* opt) { return opt->count() == 0; });
    action = [o] { return run_train(*o); };
  });
}

}  // namespace ferry::cli
