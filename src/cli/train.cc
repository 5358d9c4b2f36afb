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
#include "cli/options.h"
#include "cli/planning.h"
#include "cli/train_prediction.h"
#include "common/units.h"
#include "cost/profile.h"
#include "data/data.h"
#include "loop/profile_cache.h"
#include "loop/training_loop.h"
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
  std::string host_budget;
  std::string device = "cpu-local";
  std::string ssd_dir = "/tmp";
  bool checksum = false;
  bool verify_memory = false;
  PolicyOptions policy_options;
  std::string conv_algo = "auto";
  std::string op_times;
  std::string profile_file;  // --profile: measured figures (the cache's format)
  bool no_cache = false;
  bool static_plan = false;  // plan once, never re-plan
  double drift = 0.15;
  std::string slow_tier;     // tests and benchmarks: "ssd:4@10"
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
  Graph sized;                       // the graph with the backend's tensor sizes
  std::vector<uint64_t> scratch;     // the backend's per-op scratch
  HardwareProfile hw;                // --device
  PlanFunction planner;              // what the training loop plans with
  // The newest plan's tier needs and --host-budget (policies other than none), set by `planner`.
  std::shared_ptr<std::optional<TieredPlan>> tiered = std::make_shared<std::optional<TieredPlan>>();
  std::optional<MeasuredFigures> figures;  // known before training: --profile, --op-times, the cache
  std::string figures_source = "profile";  // "file", "cache", or "profile" (the device's model)
  std::optional<std::string> cache_path;   // where measured figures are cached (none: --no-cache)
  ProfileKey cache_key;
  // The simulator's prediction of what runs, from the device profile and the op times of an
  // earlier run (--op-times); made when planning, or on request with --op-times.
  std::optional<SimResult> predicted;
  std::optional<Baseline> baseline;  // --compare
  std::string profile_source;        // for the report: "measured", "cache", "file" or "profile"
};

// The iterations and what is derived from them.
struct TrainResult {
  std::vector<IterationStats> iterations;
  std::vector<uint64_t> rss_bytes;                      // per iteration, after it (measured by the OS)
  std::vector<LoopIteration> loop;                      // per iteration: its expectation and plan version
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

// Bad values, and options that would be silently ignored.
Status check_train_options(const TrainCliOptions& o) {
  if (o.iters <= 0) return Status::InvalidArgument(fmt::format("--iters must be positive, got {}", o.iters));
  const CLI::App& cmd = *o.cmd;
  const bool planned = o.policy != "none";
  FERRY_RETURN_IF_ERROR(check_option_used(cmd, "--tier", planned, "without --policy (policy none swaps nothing)"));
  FERRY_RETURN_IF_ERROR(check_option_used(cmd, "--checksum", planned, "without --policy (nothing is swapped)"));
  FERRY_RETURN_IF_ERROR(check_option_used(cmd, "--ssd-dir", planned && o.tier == "ssd", "without --tier ssd"));
  FERRY_RETURN_IF_ERROR(check_option_used(cmd, "--host-budget", planned, "without --policy (nothing is swapped)"));
  for (const char* loop : {"--profile", "--no-cache", "--static-plan", "--drift", "--test-slow-tier"})
    FERRY_RETURN_IF_ERROR(check_option_used(cmd, loop, planned, "without --policy (nothing is planned)"));
  FERRY_RETURN_IF_ERROR(check_option_used(cmd, "--drift", !o.static_plan, "with --static-plan"));
  if (!o.profile_file.empty() && !o.op_times.empty())
    return Status::InvalidArgument("--profile and --op-times both give op times: use one");
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

// Resolves the budget and prepares planning with the backend's real sizes: the plan function
// the training loop calls (loop/training_loop.h), and the figures known before training (--profile,
// --op-times, the profile cache). The loop plans, runs and re-plans; the executor never exceeds
// the budget. A percentage is of the keep plan's device bytes at those sizes, which is what the
// executor needs without a policy.
Status plan_training(const TrainCliOptions& o, TrainSetup& s) {
  const bool planned = o.policy != "none";
  FERRY_ASSIGN_OR_RETURN(Tier tier, parse_tier(o.tier));
  FERRY_ASSIGN_OR_RETURN(s.hw, load_profile(o.device));
  s.sized = s.graph;
  FERRY_ASSIGN_OR_RETURN(s.scratch, apply_backend_sizes(s.sized, s.backend_options));
  if (s.budget && s.budget->percent) {
    const CostModel cost(s.hw);
    PlanContext none{.graph = s.sized, .cost = cost, .tier = tier, .op_scratch_bytes = s.scratch};
    FERRY_ASSIGN_OR_RETURN(PlanReport keep, plan_policy("none", none));
    s.no_swap_peak_bytes = keep.device_bytes;
  }
  s.budget_bytes = s.budget ? s.budget->resolve(s.no_swap_peak_bytes) : 0;
  std::optional<BudgetSpec> host_budget;
  if (!o.host_budget.empty()) {
    Result<BudgetSpec> hb = parse_budget(o.host_budget);
    if (!hb.ok()) return hb.status().with_context("--host-budget");
    host_budget = *hb;
  }

  // Figures known before training.
  if (!o.op_times.empty()) {
    Graph timed = s.sized;
    FERRY_RETURN_IF_ERROR(apply_op_times(timed, o.op_times));
    MeasuredFigures f;
    for (const Op& op : timed.ops) f.op_us.push_back(*op.time_us);
    s.figures = f;
    s.figures_source = "file";
  }
  s.cache_key = make_profile_key(s.sized, omp_get_max_threads(), std::string(to_string(s.backend_options.conv_algorithm)));
  if (!o.profile_file.empty()) {
    FERRY_ASSIGN_OR_RETURN(std::optional<MeasuredFigures> f, read_figures(o.profile_file, s.cache_key, s.sized.ops.size()));
    if (!f) return Status::InvalidArgument(fmt::format("--profile {}: no such file", o.profile_file));
    s.figures = *f;
    s.figures_source = "file";
  }
  if (std::optional<std::string> dir = profile_cache_dir(); planned && !o.no_cache && dir)
    s.cache_path = profile_cache_path(*dir, s.cache_key);
  if (s.cache_path && !s.figures) {
    Result<std::optional<MeasuredFigures>> cached = read_figures(*s.cache_path, s.cache_key, s.sized.ops.size());
    if (cached.ok() && cached->has_value()) {
      s.figures = **cached;
      s.figures_source = "cache";
    } else if (!cached.ok() && !o.json) {
      std::fprintf(stderr, "ferry: note: ignoring the cached profile: %s\n", cached.status().message().c_str());
    }
  }

  // The plan function: the policy for the budget on the loop's figures, then the host budget.
  const std::string policy = o.policy;
  const uint64_t budget = s.budget_bytes;
  const std::vector<uint64_t> scratch = s.scratch;
  const PolicyOptions options = o.policy_options;
  const bool recompute_only = o.tier == "none";
  std::shared_ptr<std::optional<TieredPlan>> latest = s.tiered;
  s.planner = [=](const Graph& timed, const CostModel& cost) -> Result<Schedule> {
    if (policy == "none") return Schedule::keep_all(timed.ops.size());
    PlanContext ctx{.graph = timed, .cost = cost, .budget_bytes = budget, .tier = tier, .op_scratch_bytes = scratch,
                    .options = options};
    ctx.recompute_only = recompute_only;
    FERRY_ASSIGN_OR_RETURN(TieredPlan plan, plan_tiered(policy, ctx, host_budget));
    Schedule schedule = plan.report.schedule;
    *latest = std::move(plan);
    return schedule;
  };
  return Status::Ok();
}

// The plan's one-line summary (the newest plan).
std::string plan_summary(const TrainCliOptions& o, const TrainSetup& s) {
  if (!s.tiered->has_value()) return "";
  const TieredPlan& plan = **s.tiered;
  std::string out = fmt::format("policy {}: {} tensors swapped to {}, {} recomputed", o.policy,
                                plan.report.swapped_tensors, o.tier, plan.report.recomputed_tensors);
  if (plan.cascade && plan.cascade->moved_tensors > 0)
    out += fmt::format("; host budget {}: {} of them ({}) spill to the SSD tier", plan.host_budget_text,
                       plan.cascade->moved_tensors, format_bytes(plan.cascade->moved_bytes));
  return out;
}

// The training loop's options for this run (the planned run, or with `baseline` the run without a
// plan that --compare measures first).
Result<LoopOptions> loop_options(const TrainCliOptions& o, const TrainSetup& s, bool baseline) {
  LoopOptions lo;
  lo.executor.seed = o.seed;
  lo.profile = s.hw;
  lo.op_scratch_bytes = s.scratch;
  if (baseline) {
    lo.measure_online = false;
    lo.drift_threshold = 0;
    return lo;
  }
  lo.executor.budget_bytes = s.budget_bytes;
  lo.executor.ssd_dir = o.ssd_dir;
  // The host tier is made at what the plan's placement needs, which plan_tiered() keeps within
  // --host-budget; its own accounting then measures the peak.
  lo.executor.checksum = o.checksum;
  lo.executor.verify_memory = o.verify_memory;
  lo.figures = s.figures;
  lo.figures_source = s.figures_source;
  const bool planned = o.policy != "none";
  lo.measure_online = planned && !o.static_plan;
  lo.drift_threshold = planned && !o.static_plan ? o.drift : 0;
  if (s.cache_path) {
    const std::string path = *s.cache_path;
    const ProfileKey key = s.cache_key;
    const bool quiet = o.json;
    lo.on_figures = [path, key, quiet](const MeasuredFigures& f) {
      if (Status st = write_figures(path, key, f); !st.ok() && !quiet)
        std::fprintf(stderr, "ferry: note: the measured profile was not cached: %s\n", st.message().c_str());
    };
  }
  if (!o.slow_tier.empty()) {
    // "TIER:FACTOR@ITERATION"
    const size_t colon = o.slow_tier.find(':'), at = o.slow_tier.find('@');
    std::optional<Tier> which = colon == std::string::npos ? std::nullopt : tier_from_string(o.slow_tier.substr(0, colon));
    char* end = nullptr;
    const double factor = colon == std::string::npos ? 0 : std::strtod(o.slow_tier.c_str() + colon + 1, &end);
    const long long from = at == std::string::npos ? -1 : std::atoll(o.slow_tier.c_str() + at + 1);
    if (!which || !(factor >= 1 && factor <= 1000) || at == std::string::npos || end != o.slow_tier.c_str() + at || from < 0)
      return Status::InvalidArgument(fmt::format(
          "--test-slow-tier '{}': expected TIER:FACTOR@ITERATION, e.g. ssd:4@10 (factor in [1, 1000])", o.slow_tier));
    lo.slowdown_tier = *which;
    lo.slowdown_factor = factor;
    lo.slowdown_from = from;
  }
  return lo;
}

// Runs the iterations through the training loop (measuring the process's resident set after
// each, and keeping the transfers of the iterations after the first that ran the final plan); a
// non-finite loss stops training.
Result<TrainResult> run_iterations(TrainingLoop& loop, DataSource& data, int64_t iters, bool show_progress) {
  TrainResult r;
  auto fail = [&](Status s) {
    if (show_progress) std::fprintf(stderr, "\n");
    return s;
  };
  for (int64_t it = 0; it < iters; ++it) {
    const size_t versions = loop.plan_versions().size();
    Result<LoopIteration> st = loop.run_iteration(it, data);
    if (!st.ok()) return fail(st.status().with_context(fmt::format("iteration {}", it)));
    r.iterations.push_back(st->stats);
    r.loop.push_back(*st);
    r.rss_bytes.push_back(current_rss_bytes());
    if (it > 0 || iters == 1) r.transfers.push_back(loop.executor().last_transfers());
    if (loop.plan_versions().size() != versions) r.transfers.clear();  // the next iterations run a new plan
    if (!std::isfinite(st->stats.loss))
      return fail(Status::Internal(fmt::format("iteration {}: the loss is {} (diverged; lower --lr)", it, st->stats.loss)));
    if (show_progress) progress(it + 1, iters, st->stats.time_ms, st->stats.loss);
  }
  return r;
}

Result<TrainResult> summarize(TrainResult r, const TrainingLoop& loop) {
  r.convs = conv_kernel_use(loop.executor().graph(), loop.executor().compiled());
  FERRY_ASSIGN_OR_RETURN(r.extent_bytes, loop.measured_extent_bytes());
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
  FERRY_ASSIGN_OR_RETURN(LoopOptions lo, loop_options(o, s, /*baseline=*/true));
  auto keep = [](const Graph& g, const CostModel&) -> Result<Schedule> { return Schedule::keep_all(g.ops.size()); };
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<TrainingLoop> loop, TrainingLoop::create(s.graph, s.sized, *s.backend, keep, lo));
  FERRY_RETURN_IF_ERROR(loop->initialize());
  FERRY_ASSIGN_OR_RETURN(TrainResult r, run_iterations(*loop, *data, o.iters, show_progress));
  FERRY_ASSIGN_OR_RETURN(r, summarize(std::move(r), *loop));
  Baseline b;
  b.median_ms = r.median_ms;
  b.measured_peak_bytes = loop->measured_peak_bytes();
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
nlohmann::json train_report_json(const TrainCliOptions& o, const TrainSetup& s, const TrainingLoop& loop,
                                 const TrainResult& r) {
  const Executor& e = loop.executor();
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
                               {"expected_ms", r.loop[i].expected_ms},
                               {"plan_version", r.loop[i].plan_version},
                               {"rss_bytes", r.rss_bytes[i]}});
  j["median_iter_ms"] = r.median_ms;
  // Measured: the executor's own accounting, an arena scan, the OS and the tiers' own counters.
  j["measured_peak_bytes"] = loop.measured_peak_bytes();
  j["measured_extent_bytes"] = r.extent_bytes;
  j["peak_rss_bytes"] = peak_rss_bytes();
  j["host_tier_peak_bytes"] = loop.tier_peak_bytes(Tier::kHost);
  j["ssd_tier_peak_bytes"] = loop.tier_peak_bytes(Tier::kSsd);
  j["host_tier_capacity_bytes"] = e.host_tier_stats().capacity_bytes;
  const std::optional<TieredPlan>& tiered = *s.tiered;
  j["host_budget_bytes"] = tiered && tiered->host_budget_bytes ? nlohmann::json(*tiered->host_budget_bytes)
                                                               : nlohmann::json();
  if (tiered && tiered->cascade) {
    j["spilled_to_ssd_tensors"] = tiered->cascade->moved_tensors;
    j["spilled_to_ssd_bytes"] = tiered->cascade->moved_bytes;
  }
  // The dynamic loop: where the figures came from, every plan and why, what drifted.
  j["profile_source"] = s.profile_source;
  j["profile_cache"] = s.cache_path ? nlohmann::json(*s.cache_path) : nlohmann::json();
  j["plan_versions"] = nlohmann::json::array();
  for (const PlanVersion& v : loop.plan_versions())
    j["plan_versions"].push_back({{"version", v.version},
                                  {"from_iteration", v.from_iteration},
                                  {"reason", v.reason},
                                  {"figures", v.figures_source},
                                  {"predicted_ms", v.predicted_ms},
                                  {"planning_seconds", v.planning_seconds},
                                  {"swapped_tensors", v.swapped_tensors},
                                  {"recomputed_tensors", v.recomputed_tensors},
                                  {"new_executor", v.new_executor}});
  j["loop_events"] = nlohmann::json::array();
  for (const LoopEvent& ev : loop.events())
    j["loop_events"].push_back({{"after_iteration", ev.after_iteration}, {"what", ev.what}});
  // Predicted: the plan's figures.
  j["predicted_peak_bytes"] = e.predicted_peak_bytes();
  j["predicted_live_peak_bytes"] = e.predicted_live_peak_bytes();
  j["predicted_host_tier_bytes"] = e.tier_placement(Tier::kHost).bytes;
  j["predicted_ssd_tier_bytes"] = e.tier_placement(Tier::kSsd).bytes;
  j["verify_memory"] = o.verify_memory;
  if (s.predicted) {
    j["predicted"] = {{"iteration_ms", s.predicted->iteration_us / 1e3},
                      {"stall_ms", s.predicted->stall_us / 1e3},
                      {"live_peak_bytes", s.predicted->peak_in_use_bytes},
                      {"peak_bytes", s.predicted->peak_device_bytes},
                      {"device", o.device},
                      {"figures", s.profile_source}};
    j["transfers"] = transfer_comparison(e.graph(), *s.predicted, r.transfers);
  }
  j["budget_bytes"] = e.budget_bytes();
  j["budget_request"] = s.budget ? nlohmann::json(s.budget->text) : nlohmann::json();
  if (s.no_swap_peak_bytes > 0) j["no_swap_peak_bytes"] = s.no_swap_peak_bytes;
  j["persistent_bytes"] = e.persistent_region_bytes();
  j["policy"] = o.policy;
  j["tier"] = o.tier;
  j["bytes_swapped_out"] = loop.bytes_moved(Direction::kSwapOut);
  j["bytes_swapped_in"] = loop.bytes_moved(Direction::kSwapIn);
  if (s.baseline) {
    j["baseline"] = {{"median_iter_ms", s.baseline->median_ms},
                     {"measured_peak_bytes", s.baseline->measured_peak_bytes},
                     {"losses_bitwise_identical", same_losses(*s.baseline, r)}};
    j["measured_slowdown"] = r.median_ms / s.baseline->median_ms;
  }
  return j;
}

// The human summary after the iterations.
void print_train_summary(const TrainCliOptions& o, const TrainSetup& s, const TrainingLoop& loop, const TrainResult& r) {
  const Executor& e = loop.executor();
  std::printf("  loss            %.4f -> %.4f (first -> last iteration)\n", r.iterations.front().loss,
              r.iterations.back().loss);
  std::printf("  iteration time  median %.1f ms (first %.1f ms), measured\n", r.median_ms,
              r.iterations.front().time_ms);
  if (s.predicted)
    std::printf("                  predicted %.1f ms by the last plan (figures: %s; device profile %s)\n",
                s.predicted->iteration_us / 1e3, s.profile_source.c_str(), o.device.c_str());
  std::printf("  device memory   measured: peak %s held, highest byte written at %s; budget %s\n",
              format_bytes(loop.measured_peak_bytes()).c_str(), format_bytes(r.extent_bytes).c_str(),
              format_bytes(e.budget_bytes()).c_str());
  std::printf("                  predicted: peak %s held, %s placed (weights+state %s)\n",
              format_bytes(e.predicted_live_peak_bytes()).c_str(), format_bytes(e.predicted_peak_bytes()).c_str(),
              format_bytes(e.persistent_region_bytes()).c_str());
  std::printf("  host memory     measured: process peak RSS %s", format_bytes(peak_rss_bytes()).c_str());
  if (const uint64_t host = loop.tier_peak_bytes(Tier::kHost); host > 0)
    std::printf(", host tier peak %s", format_bytes(host).c_str());
  if (s.tiered->has_value() && (*s.tiered)->host_budget_bytes)
    std::printf(" (host budget %s)", (*s.tiered)->host_budget_text.c_str());
  if (const uint64_t ssd = loop.tier_peak_bytes(Tier::kSsd); ssd > 0)
    std::printf(", SSD tier peak %s", format_bytes(ssd).c_str());
  std::printf("\n");
  if (o.policy != "none") {
    std::printf("  plans           figures: %s%s\n", s.profile_source.c_str(),
                s.cache_path ? (" (cache " + *s.cache_path + ")").c_str() : "");
    for (const PlanVersion& v : loop.plan_versions())
      std::printf("    v%d from iteration %lld: %s; predicted %.1f ms, planned in %.2f s%s\n", v.version,
                  static_cast<long long>(v.from_iteration), v.reason.c_str(), v.predicted_ms, v.planning_seconds,
                  v.version > 0 && !v.new_executor ? " (same plan)" : "");
    for (const LoopEvent& ev : loop.events())
      std::printf("    after iteration %lld: %s\n", static_cast<long long>(ev.after_iteration), ev.what.c_str());
  }
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
                format_bytes(loop.measured_peak_bytes()).c_str(), r.median_ms, r.median_ms / b.median_ms);
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
  if (const std::string summary = plan_summary(o, s); !summary.empty()) std::printf("  %s\n", summary.c_str());
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
  Result<LoopOptions> lo = loop_options(o, s, /*baseline=*/false);
  if (!lo.ok()) return report(lo.status());
  Result<std::unique_ptr<TrainingLoop>> made = TrainingLoop::create(s.graph, s.sized, *s.backend, s.planner, *lo);
  if (!made.ok()) return report(with_conv_hint(made.status(), s.graph, s.backend_options));
  TrainingLoop& loop = **made;
  if (Status st = loop.initialize(); !st.ok()) return report(st);

  if (!o.json) print_train_header(o, s, loop.executor());
  Result<TrainResult> iterations = run_iterations(loop, *s.data, o.iters, show_progress);
  if (!iterations.ok()) return report(iterations.status());
  Result<TrainResult> r = summarize(std::move(*iterations), loop);
  if (!r.ok()) return report(r.status());
  // The newest plan's prediction and where its figures came from.
  if (o.policy != "none" || !o.op_times.empty()) s.predicted = loop.prediction();
  s.profile_source = loop.plan_versions().back().figures_source;
  if (o.json) {
    std::printf("%s\n", train_report_json(o, s, loop, *r).dump(2).c_str());
  } else {
    print_train_summary(o, s, loop, *r);
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
  add_host_budget_option(cmd, o->host_budget);
  cmd->add_option("--ssd-dir", o->ssd_dir, "Directory for the SSD tier's temporary files")->capture_default_str();
  cmd->add_option("--device", o->device, "Hardware profile whose op and transfer times the policy plans with")
      ->capture_default_str();
  cmd->add_option("--op-times", o->op_times,
                  "Trace written by an earlier `ferry profile` of the same model and shape: plan and predict with its "
                  "measured op times. With it (or a --policy), the output gives the simulator's prediction of the "
                  "run beside the measurement: iteration time, peaks and every transfer");
  cmd->add_option("--profile", o->profile_file,
                  "Measured figures to plan from (op and link times, the format of the profile cache's files) instead "
                  "of measuring them; they must be of this machine, model, shape, threads and --conv-algo");
  cmd->add_flag("--no-cache", o->no_cache,
                "Neither read nor write the profile cache ($XDG_CACHE_HOME/ferry/profiles, else ~/.cache/ferry/profiles)");
  cmd->add_flag("--static-plan", o->static_plan,
                "Plan once, before training, from --profile, the cache or the device profile, and never re-plan (no "
                "online measurement, no drift re-planning)");
  cmd->add_option("--drift", o->drift,
                  "Re-plan when two iterations in a row take more than this fraction more or less than predicted and "
                  "the measured op or link times changed as much (0: never)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 10.0));
  cmd->add_option("--test-slow-tier", o->slow_tier,
                  "Tests and benchmarks: TIER:FACTOR@ITERATION makes the tier's transfers FACTOR times slower from that "
                  "iteration on (ssd:4@10), to watch the loop re-plan")
      ->group("Testing");
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
