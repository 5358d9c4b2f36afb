// `ferry train`: trains a network on the CPU backend inside a device arena of a fixed budget.
//
// run_train() reads as the steps it takes: check the options, set up the graph, data and backend
// (set_up_training), plan for the budget (plan_training), run the iterations (run_iterations),
// then report: train_report_json() builds the JSON document, print_train_summary() the text.
#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <cstdio>
#include <map>

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
#include "graph/update_order.h"
#include "graph/zoo/zoo.h"
#include "loop/profile_cache.h"
#include "loop/shapes.h"
#include "loop/training_loop.h"
#include "plan/ferry/bound.h"
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
  // --ssd-staged: every SSD copy through host staging buffers, planned so (no in-place transfers).
  bool ssd_staged = false;
  // How the swap tier codes swapped bytes (lossless codecs, or auto). auto is the default: on the
  // SSD tier measured never slower than none beyond noise (bench/results/codec-ssd-2026-11-25.md);
  // on the host tier it keeps copies raw (host_codec()).
  std::string codec = "auto";
  std::string lossy;  // --lossy bf16: activations stashed rounded to bfloat16 on the SSD tier
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
  std::string seq_range;     // "MIN:MAX"
  std::string batch_range;
  int64_t bucket = 0;        // 0: the default for the range
  bool compare = false;  // also train unconstrained first and report the slowdown
  bool demo = false;     // no options at all: the built-in demo (33% with ferry, compared)
};

// --compare: the same model trained without a budget or a plan, in this process, its iterations
// interleaved with the planned run's (Note [Interleaved comparison]).
struct Baseline {
  double median_ms = 0;
  uint64_t measured_peak_bytes = 0;
  std::vector<float> losses;
  std::vector<double> iteration_ms;
};

// --update-order auto: one order's plan, made before training to choose the order.
struct OrderTry {
  std::string order;  // "end" or "interleaved"
  bool chosen = false;
  std::optional<SimResult> predicted{};  // none: no plan fits this order (reason says why)
  std::string reason{};
  bool planned = true;  // false: not planned (no --update-order, the first plan close to its bound)
  double planning_s = 0;
  // The budget both orders plan for: resolved on the graph's own order (a percentage of its
  // no-swap peak), which the run keeps whichever order it trains.
  uint64_t budget_bytes = 0, no_swap_peak_bytes = 0;
};

// What planning one shape needs: the run's shape, or each bucket's with --seq-range/--batch-range.
struct ShapePlanning {
  Graph sized;                    // the graph with the backend's tensor sizes
  std::vector<uint64_t> scratch;  // the backend's per-op scratch
  PlanFunction planner;           // what the training loop plans with
  // The context `planner` plans in, for a graph with its cost model (the bound of its plan is of the
  // same context).
  std::function<PlanContext(const Graph&, const CostModel&)> context;
  // Every plan `planner` made, oldest first (policies other than none): their tier needs and
  // --host-budget. A re-plan may keep the plan running (PlanVersion::kept_current), so the plan a
  // report describes is found by its schedule (running_plan).
  std::shared_ptr<std::vector<TieredPlan>> plans = std::make_shared<std::vector<TieredPlan>>();
  std::optional<MeasuredFigures> figures;  // known before training: --profile, --op-times, the cache
  std::string figures_source = "profile";  // "file", "cache", or "profile" (the device's model)
  std::optional<std::string> cache_path;   // where measured figures are cached (none: --no-cache)
  ProfileKey cache_key;
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
  HardwareProfile hw;                // --device
  Tier tier = Tier::kHost;           // --tier (host for none)
  std::optional<BudgetSpec> host_budget;
  ShapeRange range;                  // --seq-range / --batch-range; empty dimension: one shape
  std::optional<double> range_lr;    // --batch-range without --lr: the default rate of the largest batch
  std::map<int64_t, ShapePlanning> shapes;  // per shape bucket (0: the run's one shape)
  // The simulator's prediction of the last plan (of the last bucket), on the figures it was made
  // from; reported with a --policy or --op-times.
  std::optional<SimResult> predicted;
  std::optional<Baseline> baseline;  // --compare
  std::string profile_source;        // for the report: "measured", "cache", "file" or "profile"
  // --update-order auto: each order planned before training (predicted on --device), in the order
  // tried; empty without auto.
  std::vector<OrderTry> order_tries;
};

// The iterations and what is derived from them.
struct TrainResult {
  std::vector<IterationStats> iterations;
  std::vector<uint64_t> rss_bytes;                      // per iteration, after it (measured by the OS)
  std::vector<LoopIteration> loop;                      // per iteration: its expectation and plan version
  std::vector<int64_t> shape;                           // per iteration: its shape bucket (0: the one shape)
  double wall_seconds = 0;  // the whole loop: iterations, planning, bucket switches (measured)
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

// --codec: auto (nullopt: the planner chooses per tensor, PlanContext::ssd_codec) or a lossless
// codec's name; InvalidArgument lists them otherwise.
Result<std::optional<CodecId>> parse_lossless_codec(const std::string& name) {
  if (name == "auto") return std::optional<CodecId>();
  std::optional<CodecId> c = codec_from_string(name);
  if (c && !is_lossy(*c)) return c;
  std::string names;
  for (CodecId k : kLosslessCodecs) names += fmt::format("{}{}", names.empty() ? "" : ", ", to_string(k));
  return Status::InvalidArgument(
      fmt::format("--codec: unknown or lossy codec '{}' (use auto or a lossless codec: {})", name, names));
}

// The codec every host-tier copy is stored with: a named --codec with --tier host, else none (auto on
// the host tier keeps copies raw: the planner does not weigh host codecs).
CodecId host_codec(const TrainCliOptions& o) {
  if (o.tier != "host") return CodecId::kNone;
  Result<std::optional<CodecId>> c = parse_lossless_codec(o.codec);  // checked with the options
  return c.ok() ? c->value_or(CodecId::kNone) : CodecId::kNone;
}

// Per class of tensor, the codec the plan gives its SSD copies: tensors and bytes coded, and the
// measured ratio of that codec on the class (null without a figure).
nlohmann::json codec_choices_json(const Graph& g, const Schedule& schedule, const std::vector<CodecFigure>& figures) {
  const std::vector<std::string> classes = tensor_classes(g);
  std::map<std::pair<std::string, CodecId>, std::pair<size_t, uint64_t>> by_class;
  for (const TensorCodec& c : schedule.ssd_codecs) {
    auto& [tensors, bytes] = by_class[{classes[static_cast<size_t>(c.tensor)], c.codec}];
    ++tensors;
    bytes += g.tensor(c.tensor).bytes;
  }
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [key, count] : by_class) {
    nlohmann::json ratio;
    for (const CodecFigure& f : figures)
      if (f.tensor_class == key.first && f.codec == key.second) ratio = f.estimate.ratio;
    out.push_back({{"class", key.first},
                   {"codec", std::string(to_string(key.second))},
                   {"tensors", count.first},
                   {"bytes", count.second},
                   {"measured_ratio", ratio}});
  }
  return out;
}

// Bad values, and options that would be silently ignored.
Status check_train_options(const TrainCliOptions& o) {
  if (o.iters <= 0) return Status::InvalidArgument(fmt::format("--iters must be positive, got {}", o.iters));
  const CLI::App& cmd = *o.cmd;
  const bool planned = o.policy != "none";
  FERRY_RETURN_IF_ERROR(check_option_used(cmd, "--tier", planned, "without --policy (policy none swaps nothing)"));
  FERRY_RETURN_IF_ERROR(check_option_used(cmd, "--checksum", planned, "without --policy (nothing is swapped)"));
  FERRY_RETURN_IF_ERROR(check_option_used(cmd, "--ssd-dir", planned && o.tier == "ssd", "without --tier ssd"));
  FERRY_RETURN_IF_ERROR(check_option_used(cmd, "--ssd-staged", planned && o.tier == "ssd", "without --tier ssd"));
  FERRY_RETURN_IF_ERROR(check_option_used(cmd, "--host-budget", planned, "without --policy (nothing is swapped)"));
  for (const char* loop : {"--profile", "--no-cache", "--static-plan", "--drift", "--test-slow-tier"})
    FERRY_RETURN_IF_ERROR(check_option_used(cmd, loop, planned, "without --policy (nothing is planned)"));
  FERRY_RETURN_IF_ERROR(check_option_used(cmd, "--drift", !o.static_plan, "with --static-plan"));
  FERRY_RETURN_IF_ERROR(check_option_used(cmd, "--bucket", !o.seq_range.empty() || !o.batch_range.empty(),
                                          "without --seq-range or --batch-range"));
  if ((!o.seq_range.empty() || !o.batch_range.empty()) && (!o.profile_file.empty() || !o.op_times.empty()))
    return Status::InvalidArgument("--profile and --op-times hold one shape's op times: not with a shape range");
  if (!o.profile_file.empty() && !o.op_times.empty())
    return Status::InvalidArgument("--profile and --op-times both give op times: use one");
  FERRY_RETURN_IF_ERROR(check_option_used(cmd, "--codec", planned && (o.tier == "ssd" || o.tier == "host"),
                                          "without --tier ssd or --tier host"));
  FERRY_RETURN_IF_ERROR(check_option_used(cmd, "--lossy", planned && o.tier == "ssd",
                                          "without --tier ssd (the SSD tier stashes the rounded activations)"));
  if (!o.lossy.empty() && o.lossy != "bf16")
    return Status::InvalidArgument(fmt::format("--lossy: unknown lossy format '{}' (known: bf16)", o.lossy));
  if (!o.lossy.empty() && o.verify_memory)
    return Status::InvalidArgument("--lossy changes swapped activations by design, which --verify-memory would call "
                                   "corruption: use one or the other");
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
  // Variable shapes: the run's graph (for the budget's percentage and the reports) is the largest.
  GraphOptions largest = o.graph;
  if (!o.seq_range.empty() || !o.batch_range.empty()) {
    if (!o.graph.trace.empty())
      return Status::InvalidArgument("--seq-range and --batch-range build zoo models of each shape: not with --trace");
    const bool seq = !o.seq_range.empty();
    if (const ModelEntry* m = find_model(o.graph.model); seq && m && m->family != ModelFamily::kTransformer)
      return Status::InvalidArgument(
          fmt::format("--seq-range needs a transformer; '{}' has no sequence length", o.graph.model));
    FERRY_ASSIGN_OR_RETURN(s.range, parse_shape_range(seq ? "seq" : "batch", seq ? o.seq_range : o.batch_range,
                                                      o.bucket > 0 ? o.bucket : (seq ? 128 : 8)));
    (seq ? largest.seq : largest.batch) = s.range.max;
  }
  FERRY_ASSIGN_OR_RETURN(s.graph, load_graph(largest));
  if (s.range.dimension == "seq" && s.graph.info.seq <= 0)
    return Status::InvalidArgument(fmt::format("--seq-range needs a transformer; '{}' has no sequence length",
                                               s.graph.info.model));
  if (s.range.dimension == "batch" && !o.graph.lr)
    for (const Op& op : s.graph.ops)
      if (op.phase == Phase::kUpdate) {
        s.range_lr = op.attrs.lr;  // every batch trains with the default rate of the largest
        break;
      }
  if (s.graph.loss == kNoTensor)
    return Status::InvalidArgument(fmt::format(
        "{} names no loss tensor (the trace's \"loss\" field), and training reports the loss of every iteration",
        o.graph.trace.empty() ? std::string("the graph") : "trace '" + o.graph.trace + "'"));
  FERRY_ASSIGN_OR_RETURN(s.data, open_data(o.data, s.graph, o.seed));
  FERRY_ASSIGN_OR_RETURN(s.backend_options, parse_backend_options(o.conv_algo));
  FERRY_ASSIGN_OR_RETURN(s.backend, make_backend("cpu", s.backend_options));
  return s;
}

// Resolves the budget: a percentage is of the keep plan's device bytes at the backend's sizes
// (what the executor needs without a policy) of the run's shape, the largest with a shape range.
Status plan_training(const TrainCliOptions& o, TrainSetup& s) {
  FERRY_ASSIGN_OR_RETURN(s.tier, parse_tier(o.tier));
  FERRY_ASSIGN_OR_RETURN(s.hw, load_profile(o.device));
  if (o.ssd_staged) s.hw.storage.device_direct = false;  // plan the host leg the copies then cross
  if (s.budget && s.budget->percent) {
    Graph sized = s.graph;
    FERRY_ASSIGN_OR_RETURN(std::vector<uint64_t> scratch, apply_backend_sizes(sized, s.backend_options));
    const CostModel cost(s.hw);
    PlanContext none{.graph = sized, .cost = cost, .tier = s.tier, .op_scratch_bytes = scratch};
    FERRY_ASSIGN_OR_RETURN(PlanReport keep, plan_policy("none", none));
    s.no_swap_peak_bytes = keep.device_bytes;
  }
  s.budget_bytes = s.budget ? s.budget->resolve(s.no_swap_peak_bytes) : 0;
  if (!o.host_budget.empty()) {
    Result<BudgetSpec> hb = parse_budget(o.host_budget);
    if (!hb.ok()) return hb.status().with_context("--host-budget");
    s.host_budget = *hb;
  }
  return Status::Ok();
}

// Prepares planning `graph` (one shape) with the backend's real sizes: the plan function the
// training loop calls (loop/training_loop.h) and the figures known before training (--profile,
// --op-times, the profile cache). The loop plans, runs and re-plans; the executor never exceeds
// the budget.
Result<ShapePlanning> plan_shape(const TrainCliOptions& o, const TrainSetup& s, const Graph& graph) {
  const bool planned = o.policy != "none";
  ShapePlanning sp;
  sp.sized = graph;
  FERRY_ASSIGN_OR_RETURN(sp.scratch, apply_backend_sizes(sp.sized, s.backend_options));
  if (!o.op_times.empty()) {
    Graph timed = sp.sized;
    FERRY_RETURN_IF_ERROR(apply_op_times(timed, o.op_times));
    MeasuredFigures f;
    for (const Op& op : timed.ops) f.op_us.push_back(*op.time_us);
    sp.figures = f;
    sp.figures_source = "file";
  }
  sp.cache_key = make_profile_key(sp.sized, omp_get_max_threads(), std::string(to_string(s.backend_options.conv_algorithm)),
                                 o.ssd_staged ? "ssd-staged" : o.tier);
  if (!o.profile_file.empty()) {
    FERRY_ASSIGN_OR_RETURN(std::optional<MeasuredFigures> f, read_figures(o.profile_file, sp.cache_key, sp.sized.ops.size()));
    if (!f) return Status::InvalidArgument(fmt::format("--profile {}: no such file", o.profile_file));
    sp.figures = *f;
    sp.figures_source = "file";
  }
  if (std::optional<std::string> dir = profile_cache_dir(); planned && !o.no_cache && dir)
    sp.cache_path = profile_cache_path(*dir, sp.cache_key);
  if (sp.cache_path && !sp.figures) {
    Result<std::optional<MeasuredFigures>> cached = read_figures(*sp.cache_path, sp.cache_key, sp.sized.ops.size());
    if (cached.ok() && cached->has_value()) {
      sp.figures = **cached;
      sp.figures_source = "cache";
    } else if (!cached.ok() && !o.json) {
      std::fprintf(stderr, "ferry: note: ignoring the cached profile: %s\n", cached.status().message().c_str());
    }
  }

  // The plan function: the policy for the budget on the loop's figures, then the host budget.
  const std::string policy = o.policy;
  const uint64_t budget = s.budget_bytes;
  const std::vector<uint64_t> scratch = sp.scratch;
  const PolicyOptions options = o.policy_options;
  const bool recompute_only = o.tier == "none";
  const Tier tier = s.tier;
  const std::optional<BudgetSpec> host_budget = s.host_budget;
  // --codec codes the copies of the tier --tier names; a host codec is the executor's (host_codec).
  const std::optional<CodecId> ssd_codec =
      o.tier == "ssd" ? *parse_lossless_codec(o.codec) : std::optional<CodecId>(CodecId::kNone);
  std::shared_ptr<std::vector<TieredPlan>> plans = sp.plans;
  // A percentage host budget is of what the first plan keeps on the host tier without a cap; the
  // loop's later plans (measured figures, drift) keep those bytes, so the cap the run reports and
  // every executor's host tier are one figure, not a share of each plan's own need.
  struct HostCap {
    std::optional<BudgetSpec> spec;
    std::string text;  // the first plan's description ("4.00 MiB (50% of 8.00 MiB)")
  };
  auto host_cap = std::make_shared<HostCap>(HostCap{.spec = host_budget, .text = {}});
  sp.context = [=](const Graph& timed, const CostModel& cost) {
    PlanContext ctx{.graph = timed, .cost = cost, .budget_bytes = budget, .tier = tier, .op_scratch_bytes = scratch,
                    .options = options};
    ctx.recompute_only = recompute_only;
    ctx.ssd_codec = ssd_codec;
    return ctx;
  };
  sp.planner = [=, context = sp.context](const Graph& timed, const CostModel& cost) -> Result<Schedule> {
    if (policy == "none") return Schedule::keep_all(timed.ops.size());
    const PlanContext ctx = context(timed, cost);
    FERRY_ASSIGN_OR_RETURN(TieredPlan plan, plan_tiered(policy, ctx, host_cap->spec));
    if (host_cap->spec && host_cap->spec->percent && plan.host_budget_bytes) {
      host_cap->text = plan.host_budget_text;
      host_cap->spec = BudgetSpec{.text = host_cap->spec->text, .bytes = *plan.host_budget_bytes, .percent = {}};
    } else if (!host_cap->text.empty()) {
      plan.host_budget_text = host_cap->text;
    }
    Schedule schedule = plan.report.schedule;
    plans->push_back(std::move(plan));
    return schedule;
  };
  return sp;
}

// The plan `loop` runs among those `sp.planner` made (nullptr for policy none).
const TieredPlan* running_plan(const ShapePlanning& sp, const TrainingLoop& loop) {
  for (auto it = sp.plans->rbegin(); it != sp.plans->rend(); ++it)
    if (it->report.schedule.same_actions(loop.schedule())) return &*it;
  return nullptr;
}

// The plan's one-line summary (the newest plan).
std::string plan_summary(const TrainCliOptions& o, const ShapePlanning& sp, const TrainingLoop& loop) {
  const TieredPlan* running = running_plan(sp, loop);
  if (running == nullptr) return "";
  const TieredPlan& plan = *running;
  std::string out = fmt::format("policy {}: {} tensors swapped to {}, {} recomputed", o.policy,
                                plan.report.swapped_tensors, o.tier, plan.report.recomputed_tensors);
  if (const size_t host = plan.report.schedule.num_host_updates(); host > 0)
    out += fmt::format(", {} optimizer updates on the host (ZeRO-Offload)", host);
  if (plan.cascade && plan.cascade->moved_tensors > 0)
    out += fmt::format("; host budget {}: {} of them ({}) spill to the SSD tier", plan.host_budget_text,
                       plan.cascade->moved_tensors, format_bytes(plan.cascade->moved_bytes));
  return out;
}

// The training loop's options for this run (the planned run, or with `baseline` the run without a
// plan that --compare measures first).
Result<LoopOptions> loop_options(const TrainCliOptions& o, const TrainSetup& s, const ShapePlanning& sp,
                                 bool baseline) {
  LoopOptions lo;
  lo.executor.seed = o.seed;
  lo.profile = s.hw;
  lo.op_scratch_bytes = sp.scratch;
  if (baseline) {
    lo.measure_online = false;
    lo.drift_threshold = 0;
    return lo;
  }
  lo.executor.budget_bytes = s.budget_bytes;
  lo.executor.ssd_dir = o.ssd_dir;
  lo.executor.ssd_in_place = !o.ssd_staged;
  // The host tier is made at what the plan's placement needs, which plan_tiered() keeps within
  // --host-budget; its own accounting then measures the peak.
  lo.executor.checksum = o.checksum;
  lo.executor.ssd_measure_codecs = o.tier == "ssd" && o.codec == "auto";
  lo.executor.host_codec = host_codec(o);
  lo.executor.verify_memory = o.verify_memory;
  lo.executor.ssd_lossy_activations = o.lossy == "bf16";
  lo.figures = sp.figures;
  lo.figures_source = sp.figures_source;
  const bool planned = o.policy != "none";
  lo.measure_online = planned && !o.static_plan;
  lo.drift_threshold = planned && !o.static_plan ? o.drift : 0;
  if (sp.cache_path) {
    const std::string path = *sp.cache_path;
    const ProfileKey key = sp.cache_key;
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

// The shape buckets of a run (loop/shapes.h), each bucket's graph, planning and loop made on its
// first iteration; a run without a shape range has one bucket, the run's own shape. `baseline`:
// the run without a plan that --compare measures first (same shapes, keep plans).
ShapeBuckets make_buckets(const TrainCliOptions& o, TrainSetup& s, bool baseline) {
  auto factory = [&o, &s, baseline](int64_t value) -> Result<BucketParts> {
    BucketParts parts;
    if (value == 0) {
      parts.graph = s.graph;
    } else {
      GraphOptions g = o.graph;
      (s.range.dimension == "seq" ? g.seq : g.batch) = value;
      if (!g.lr) g.lr = s.range_lr;
      FERRY_ASSIGN_OR_RETURN(parts.graph, load_graph(g));
    }
    FERRY_ASSIGN_OR_RETURN(ShapePlanning sp, plan_shape(o, s, parts.graph));
    FERRY_ASSIGN_OR_RETURN(parts.options, loop_options(o, s, sp, baseline));
    parts.sized = sp.sized;
    parts.plan = baseline ? PlanFunction([](const Graph& g, const CostModel&) -> Result<Schedule> {
      return Schedule::keep_all(g.ops.size());
    })
                          : sp.planner;
    FERRY_ASSIGN_OR_RETURN(parts.data, open_data(o.data, parts.graph, o.seed));
    if (!baseline) s.shapes[value] = std::move(sp);
    return parts;
  };
  return ShapeBuckets(*s.backend, s.range, o.seed, factory);
}

// Note [Interleaved comparison]
// --compare measures a slowdown: the planned run's median iteration over the median of the same
// model's run without a plan. This VM's speed drifts by 20% between minutes, so two runs one after
// the other measure the drift as much as the plan. The two runs therefore take turns: iteration i
// of both runs before iteration i+1 of either, the run without a plan first at even i and second
// at odd i (so that neither always follows the other's cache and allocator traffic). Both
// executors are alive at once (their arenas add up in host memory; each keeps its own weights,
// data and state, so each computes what it would alone: the losses are still compared bitwise).
// Each run's wall time counts its own iterations (and the planned run's set-up) only.

// One iteration of `buckets`, recorded in `r` (its time in r.wall_seconds): the process's resident
// set after it, and the transfers of the iterations after the first that ran the final plan of the
// last bucket. A non-finite loss stops training.
Status run_recorded(ShapeBuckets& buckets, int64_t it, int64_t iters, TrainResult& r) {
  const auto start = std::chrono::steady_clock::now();
  const int64_t before_bucket = buckets.buckets().empty() ? -1 : buckets.active().value;
  const size_t versions = buckets.buckets().empty() ? 0 : buckets.active_loop().plan_versions().size();
  Result<LoopIteration> st = buckets.run_iteration(it);
  if (!st.ok()) return st.status().with_context(fmt::format("iteration {}", it));
  r.iterations.push_back(st->stats);
  r.loop.push_back(*st);
  r.shape.push_back(buckets.active().value);
  r.rss_bytes.push_back(current_rss_bytes());
  if (buckets.active().value != before_bucket) r.transfers.clear();  // another graph, another plan
  if (it > 0 || iters == 1) r.transfers.push_back(buckets.active_loop().executor().last_transfers());
  if (buckets.active_loop().plan_versions().size() != versions && buckets.active().value == before_bucket)
    r.transfers.clear();  // the next iterations run a new plan
  r.wall_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!std::isfinite(st->stats.loss))
    return Status::Internal(fmt::format("iteration {}: the loss is {} (diverged; lower --lr)", it, st->stats.loss));
  return Status::Ok();
}

// Runs the iterations of `buckets` and, with `baseline` (--compare), those of the run without a
// plan, interleaved (Note [Interleaved comparison]); `setup_seconds`: the planned run's time before
// its first iteration (its first plan), part of its wall time.
Result<TrainResult> run_iterations(ShapeBuckets& buckets, int64_t iters, bool show_progress, double setup_seconds,
                                   ShapeBuckets* baseline = nullptr, TrainResult* baseline_result = nullptr) {
  TrainResult r;
  r.wall_seconds = setup_seconds;
  auto fail = [&](Status s) {
    if (show_progress) std::fprintf(stderr, "\n");
    return s;
  };
  for (int64_t it = 0; it < iters; ++it) {
    const bool baseline_first = it % 2 == 0;
    if (baseline && baseline_first)
      if (Status st = run_recorded(*baseline, it, iters, *baseline_result); !st.ok())
        return fail(st.with_context("the run without a plan (--compare)"));
    if (Status st = run_recorded(buckets, it, iters, r); !st.ok()) return fail(st);
    if (baseline && !baseline_first)
      if (Status st = run_recorded(*baseline, it, iters, *baseline_result); !st.ok())
        return fail(st.with_context("the run without a plan (--compare)"));
    if (show_progress) progress(it + 1, iters, r.iterations.back().time_ms, r.iterations.back().loss);
  }
  return r;
}

Result<TrainResult> summarize(TrainResult r, ShapeBuckets& buckets) {
  const Executor& e = buckets.active_loop().executor();
  r.convs = conv_kernel_use(e.graph(), e.compiled());
  FERRY_ASSIGN_OR_RETURN(r.extent_bytes, buckets.measured_extent_bytes());
  std::vector<double> steady;
  for (size_t i = r.iterations.size() > 1 ? 1 : 0; i < r.iterations.size(); ++i)
    steady.push_back(r.iterations[i].time_ms);
  std::nth_element(steady.begin(), steady.begin() + static_cast<long>(steady.size() / 2), steady.end());
  r.median_ms = steady[steady.size() / 2];
  return r;
}

// --compare: what the run without a plan measured.
Result<Baseline> baseline_of(TrainResult r, ShapeBuckets& buckets) {
  FERRY_ASSIGN_OR_RETURN(r, summarize(std::move(r), buckets));
  Baseline b;
  b.median_ms = r.median_ms;
  b.measured_peak_bytes = buckets.measured_peak_bytes();
  for (const IterationStats& it : r.iterations) {
    b.losses.push_back(it.loss);
    b.iteration_ms.push_back(it.time_ms);
  }
  return b;
}

bool same_losses(const Baseline& b, const TrainResult& r) {
  if (b.losses.size() != r.iterations.size()) return false;
  for (size_t i = 0; i < b.losses.size(); ++i)
    if (std::memcmp(&b.losses[i], &r.iterations[i].loss, sizeof(float)) != 0) return false;
  return true;
}

// The largest |loss - baseline loss| over the iterations (--lossy: what the rounding changed).
double max_loss_difference(const Baseline& b, const TrainResult& r) {
  double d = 0;
  for (size_t i = 0; i < std::min(b.losses.size(), r.iterations.size()); ++i)
    d = std::max(d, std::abs(static_cast<double>(b.losses[i]) - static_cast<double>(r.iterations[i].loss)));
  return d;
}

// The JSON document of a run (--json).
nlohmann::json plan_versions_json(const TrainingLoop& loop) {
  nlohmann::json out = nlohmann::json::array();
  for (const PlanVersion& v : loop.plan_versions())
    out.push_back({{"version", v.version},
                   {"from_iteration", v.from_iteration},
                   {"reason", v.reason},
                   {"figures", v.figures_source},
                   {"predicted_ms", v.predicted_ms},
                   {"planning_seconds", v.planning_seconds},
                   {"swapped_tensors", v.swapped_tensors},
                   {"recomputed_tensors", v.recomputed_tensors},
                   {"new_executor", v.new_executor},
                   {"kept_current", v.kept_current}});
  return out;
}

nlohmann::json train_report_json(const TrainCliOptions& o, const TrainSetup& s, ShapeBuckets& buckets,
                                 const TrainResult& r) {
  const TrainingLoop& loop = buckets.active_loop();
  const ShapePlanning& sp = s.shapes.at(buckets.active().value);
  const Executor& e = loop.executor();
  nlohmann::json j;
  j["model"] = s.graph.info.model;
  j["batch"] = s.graph.info.batch;
  j["update_order"] = std::string(to_string(update_order_of(s.graph)));
  if (!s.order_tries.empty()) {
    nlohmann::json tries = nlohmann::json::array();
    for (const OrderTry& t : s.order_tries) {
      nlohmann::json e = {{"order", t.order}, {"chosen", t.chosen}, {"planned", t.planned}};
      if (t.planned) e["planning_seconds"] = t.planning_s;
      if (!t.planned) {
        e["reason"] = t.reason;
      } else if (t.predicted) {
        e["feasible"] = t.predicted->feasible;
        e["predicted_ms"] = t.predicted->iteration_us / 1e3;
      } else if (!t.reason.empty()) {
        e["feasible"] = false;
        e["reason"] = t.reason;
      }
      tries.push_back(std::move(e));
    }
    j["update_orders"] = std::move(tries);
  }
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
                               {"drift_threshold", r.loop[i].drift_threshold},
                               {"plan_version", r.loop[i].plan_version},
                               {"shape", r.shape[i]},
                               {"rss_bytes", r.rss_bytes[i]}});
  j["median_iter_ms"] = r.median_ms;
  // Measured: the executor's own accounting, an arena scan, the OS and the tiers' own counters.
  j["measured_peak_bytes"] = buckets.measured_peak_bytes();
  j["measured_extent_bytes"] = r.extent_bytes;
  j["peak_rss_bytes"] = peak_rss_bytes();
  j["host_tier_peak_bytes"] = buckets.tier_peak_bytes(Tier::kHost);
  j["ssd_tier_peak_bytes"] = buckets.tier_peak_bytes(Tier::kSsd);
  j["host_tier_capacity_bytes"] = e.host_tier_stats().capacity_bytes;
  const TieredPlan* tiered = running_plan(sp, loop);
  j["host_budget_bytes"] = tiered && tiered->host_budget_bytes ? nlohmann::json(*tiered->host_budget_bytes)
                                                               : nlohmann::json();
  if (tiered && tiered->cascade) {
    j["spilled_to_ssd_tensors"] = tiered->cascade->moved_tensors;
    j["spilled_to_ssd_bytes"] = tiered->cascade->moved_bytes;
  }
  // The dynamic loop: where the figures came from, every plan and why, what drifted.
  j["profile_source"] = s.profile_source;
  j["profile_cache"] = sp.cache_path ? nlohmann::json(*sp.cache_path) : nlohmann::json();
  j["plan_versions"] = plan_versions_json(loop);
  j["loop_events"] = nlohmann::json::array();
  for (const LoopEvent& ev : loop.events())
    j["loop_events"].push_back({{"after_iteration", ev.after_iteration}, {"what", ev.what}});
  // Predicted: the plans' figures, the largest over every plan the run executed (the counterparts of
  // the measured maxima above; one plan without re-planning or shape buckets).
  j["predicted_peak_bytes"] = buckets.predicted_peak_bytes();
  j["predicted_live_peak_bytes"] = buckets.predicted_live_peak_bytes();
  j["predicted_host_tier_bytes"] = e.tier_placement(Tier::kHost).bytes;
  j["predicted_ssd_tier_bytes"] = e.tier_placement(Tier::kSsd).bytes;
  j["verify_memory"] = o.verify_memory;
  if (s.predicted) {
    j["predicted"] = {{"iteration_ms", s.predicted->iteration_us / 1e3},
                      {"stall_ms", s.predicted->stall_us / 1e3},
                      {"interference_ms", s.predicted->interference_us / 1e3},
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
  // Measured by the SSD tiers' own counters, summed over every plan's executor: the bytes that
  // really crossed the disk (0 without an SSD tier).
  j["codec"] = o.tier == "ssd" ? o.codec : std::string(to_string(host_codec(o)));
  // Measured by the host tiers' own counters, likewise: the bytes their memory took and gave back.
  j["host_tier_bytes_stored"] = buckets.host_io_stats().medium_bytes_written;
  j["host_tier_bytes_loaded"] = buckets.host_io_stats().medium_bytes_read;
  j["lossy"] = o.lossy.empty() ? nlohmann::json() : nlohmann::json(o.lossy);
  j["host_updates"] = e.last_host_updates();  // optimizer updates the last iteration ran on the host
  j["ssd_disk_bytes_written"] = buckets.ssd_io_stats().disk_bytes_written;  // over the run, every executor
  j["ssd_disk_bytes_read"] = buckets.ssd_io_stats().disk_bytes_read;
  // Of these, the bytes moved in place, straight between the arena and the file (no staging copy).
  j["ssd_in_place_bytes_written"] = buckets.ssd_io_stats().in_place_bytes_written;
  j["ssd_in_place_bytes_read"] = buckets.ssd_io_stats().in_place_bytes_read;
  j["ssd_staged"] = o.ssd_staged;
  if (o.tier == "ssd") {
    // The last plan's codecs per class of tensor, and the figures they were chosen by (measured
    // by the SSD tier on each class's first chunk; empty before the first measurement).
    const std::optional<MeasuredFigures>& figures = loop.measured();
    j["codec_choices"] = codec_choices_json(e.graph(), loop.schedule(), figures ? figures->codecs
                                                                                : std::vector<CodecFigure>{});
    j["codec_figures"] = nlohmann::json::array();
    if (figures)
      for (const CodecFigure& c : figures->codecs)
        j["codec_figures"].push_back({{"class", c.tensor_class},
                                      {"codec", std::string(to_string(c.codec))},
                                      {"ratio", c.estimate.ratio},
                                      {"encode_bytes_per_s", c.estimate.encode_bytes_per_s},
                                      {"decode_bytes_per_s", c.estimate.decode_bytes_per_s}});
  }
  j["bytes_swapped_out"] = buckets.bytes_moved(Direction::kSwapOut);
  j["bytes_swapped_in"] = buckets.bytes_moved(Direction::kSwapIn);
  if (!s.range.dimension.empty()) {
    // Variable shapes: every bucket's plans; planning time against the run's (both measured).
    j["shape_range"] = {{"dimension", s.range.dimension}, {"min", s.range.min}, {"max", s.range.max},
                        {"bucket", s.range.bucket}};
    j["buckets"] = nlohmann::json::array();
    for (const auto& [value, b] : buckets.buckets())
      j["buckets"].push_back({{"shape", value},
                              {"iterations", b->iterations},
                              {"measured_peak_bytes", b->loop->measured_peak_bytes()},
                              {"plan_versions", plan_versions_json(*b->loop)}});
    j["planning_seconds"] = buckets.planning_seconds();
    j["run_seconds"] = r.wall_seconds;  // iterations, planning and bucket switches
    j["planning_fraction"] = r.wall_seconds > 0 ? buckets.planning_seconds() / r.wall_seconds : 0;
  }
  if (s.baseline) {
    j["baseline"] = {{"median_iter_ms", s.baseline->median_ms},
                     {"iteration_ms", s.baseline->iteration_ms},
                     {"interleaved", true},  // Note [Interleaved comparison]
                     {"measured_peak_bytes", s.baseline->measured_peak_bytes},
                     {"losses_bitwise_identical", same_losses(*s.baseline, r)},
                     {"max_abs_loss_difference", max_loss_difference(*s.baseline, r)},
                     {"losses", s.baseline->losses}};
    j["measured_slowdown"] = r.median_ms / s.baseline->median_ms;
  }
  return j;
}

// The human summary after the iterations.
void print_train_summary(const TrainCliOptions& o, const TrainSetup& s, ShapeBuckets& buckets, const TrainResult& r) {
  const TrainingLoop& loop = buckets.active_loop();
  const ShapePlanning& sp = s.shapes.at(buckets.active().value);
  const Executor& e = loop.executor();
  std::printf("  loss            %.4f -> %.4f (first -> last iteration)\n", r.iterations.front().loss,
              r.iterations.back().loss);
  std::printf("  iteration time  median %.1f ms (first %.1f ms), measured\n", r.median_ms,
              r.iterations.front().time_ms);
  if (s.predicted)
    std::printf("                  predicted %.1f ms by the last plan (figures: %s; device profile %s)%s\n",
                s.predicted->iteration_us / 1e3, s.profile_source.c_str(), o.device.c_str(),
                s.predicted->interference_us > 0
                    ? fmt::format(", of which {:.1f} ms copies slowing the ops beside them",
                                  s.predicted->interference_us / 1e3).c_str()
                    : "");
  std::printf("  device memory   measured: peak %s held, highest byte written at %s; budget %s\n",
              format_bytes(buckets.measured_peak_bytes()).c_str(), format_bytes(r.extent_bytes).c_str(),
              format_bytes(e.budget_bytes()).c_str());
  std::printf("                  predicted: peak %s held, %s placed (weights+state %s)\n",
              format_bytes(buckets.predicted_live_peak_bytes()).c_str(), format_bytes(buckets.predicted_peak_bytes()).c_str(),
              format_bytes(e.persistent_region_bytes()).c_str());
  std::printf("  host memory     measured: process peak RSS %s", format_bytes(peak_rss_bytes()).c_str());
  if (const uint64_t host = buckets.tier_peak_bytes(Tier::kHost); host > 0)
    std::printf(", host tier peak %s", format_bytes(host).c_str());
  if (const TieredPlan* running = running_plan(sp, loop); running != nullptr && running->host_budget_bytes)
    std::printf(" (host budget %s)", running->host_budget_text.c_str());
  if (const uint64_t ssd = buckets.tier_peak_bytes(Tier::kSsd); ssd > 0)
    std::printf(", SSD tier peak %s", format_bytes(ssd).c_str());
  std::printf("\n");
  if (e.host_tier_stats().capacity_bytes > 0 && host_codec(o) != CodecId::kNone)
    std::printf("  host traffic    measured: %s stored, %s loaded over the run (codec %s; the last plan's tier: "
                "tensors %s out, %s in)\n",
                format_bytes(buckets.host_io_stats().medium_bytes_written).c_str(),
                format_bytes(buckets.host_io_stats().medium_bytes_read).c_str(), o.codec.c_str(),
                format_bytes(e.host_tier_stats().bytes_written).c_str(),
                format_bytes(e.host_tier_stats().bytes_read).c_str());
  if (e.ssd_tier_stats().capacity_bytes > 0)
    std::printf("  SSD traffic     measured: %s written, %s read over the run, %s and %s of it in place (codec "
                "%s; the last plan's tier: tensors %s out, %s in)\n",
                format_bytes(buckets.ssd_io_stats().disk_bytes_written).c_str(),
                format_bytes(buckets.ssd_io_stats().disk_bytes_read).c_str(),
                format_bytes(buckets.ssd_io_stats().in_place_bytes_written).c_str(),
                format_bytes(buckets.ssd_io_stats().in_place_bytes_read).c_str(),
                (o.codec + (o.lossy.empty() ? "" : ", activations lossy " + o.lossy)).c_str(),
                format_bytes(e.ssd_tier_stats().bytes_written).c_str(), format_bytes(e.ssd_tier_stats().bytes_read).c_str());
  if (const std::string summary = plan_summary(o, sp, loop); !summary.empty())
    std::printf("  plan            %s\n", summary.c_str());
  if (o.policy != "none") {
    std::printf("  plans           figures: %s%s\n", s.profile_source.c_str(),
                sp.cache_path ? (" (cache " + *sp.cache_path + ")").c_str() : "");
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
    std::printf("\nSide by side (measured, this process, same data and seed, iterations taking turns):\n");
    std::printf("  %-26s %12s %14s %16s\n", "", "budget", "device peak", "iteration");
    std::printf("  %-26s %12s %14s %13.1f ms\n", "without a plan", "-", format_bytes(b.measured_peak_bytes).c_str(),
                b.median_ms);
    const std::string planned = fmt::format("{} at {}", o.policy, s.budget ? s.budget->text : std::string("?"));
    std::printf("  %-26s %12s %14s %13.1f ms  %.2fx\n", planned.c_str(), format_bytes(e.budget_bytes()).c_str(),
                format_bytes(buckets.measured_peak_bytes()).c_str(), r.median_ms, r.median_ms / b.median_ms);
    std::printf("  need without a plan %s; losses bitwise identical: %s\n",
                format_bytes(s.no_swap_peak_bytes > 0 ? s.no_swap_peak_bytes : b.measured_peak_bytes).c_str(),
                same_losses(b, r) ? "yes" : o.lossy.empty() ? "NO" : "no (expected: --lossy rounds swapped activations)");
    if (!o.lossy.empty())
      std::printf("  largest |loss difference| over the iterations: %.3g (lossy %s stashing)\n",
                  max_loss_difference(b, r), o.lossy.c_str());
  }
}

// The line before the iterations.
void print_train_header(const TrainCliOptions& o, const TrainSetup& s) {
  const std::string budget = s.budget && s.budget->percent ? s.budget->describe(s.no_swap_peak_bytes)
                                                           : s.budget ? format_bytes(s.budget_bytes) : "what the plan needs";
  std::printf("Training %s for %lld iterations on %s data, %d threads, budget %s\n", describe(s.graph).c_str(),
              static_cast<long long>(o.iters), s.data->name().c_str(), omp_get_max_threads(), budget.c_str());
  if (!s.range.dimension.empty())
    std::printf("  shapes: %s drawn from %lld..%lld per iteration, rounded up to multiples of %lld (one plan per "
                "bucket)\n",
                s.range.dimension.c_str(), static_cast<long long>(s.range.min), static_cast<long long>(s.range.max),
                static_cast<long long>(s.range.bucket));
  if (std::count_if(s.order_tries.begin(), s.order_tries.end(), [](const OrderTry& t) { return t.planned; }) > 1) {
    std::string tried;
    std::vector<double> us;  // told apart in the line
    for (const OrderTry& t : s.order_tries) us.push_back(t.predicted ? t.predicted->iteration_us : 0);
    const std::vector<std::string> ms = ms_apart(us, kOrderTieRelative);
    for (size_t i = 0; i < s.order_tries.size(); ++i) {
      const OrderTry& t = s.order_tries[i];
      if (!t.planned) continue;
      tried += fmt::format("{}{} {}", tried.empty() ? "" : ", ", t.order,
                           t.predicted ? fmt::format("{} ms{}", ms[i], t.predicted->feasible ? "" : " (does not fit)")
                                       : std::string("(no plan)"));
    }
    // Orders whose plans predict the same time (kOrderTieRelative) keep the graph's own.
    auto fits = [](const OrderTry& t) { return t.predicted && t.predicted->feasible; };
    const bool tie = fits(s.order_tries[0]) && fits(s.order_tries[1]) && !order_faster(us[0], us[1]) &&
                     !order_faster(us[1], us[0]);
    std::printf("  updates %s, %s: %s (predicted on %s before training)\n",
                std::string(to_string(update_order_of(s.graph))).c_str(),
                tie ? "the orders planned tie, the first kept" : "the faster of the orders planned",
                tried.c_str(), s.hw.name.c_str());
  }
  if (o.compare)
    std::printf("  --compare: each iteration also runs without a budget or a plan, the two runs taking turns\n");
}

// --update-order auto for a run: the run's graph (the largest shape) planned in both orders at
// the budget bytes of its own order (a percentage is of that order's no-swap peak), each plan
// simulated on --device's profile before anything trains; the faster feasible plan's order is
// the run's (its own on a tie, order_faster, or where the graph has no updates to move). The
// training loop then plans the chosen order again with its own figures. Errors: set-up errors of either order; any
// planning error other than "no plan fits" (kOutOfMemory), which only rules that order out. Without
// --update-order, a --profile file of the interleaved order's graph (which the first order refuses)
// trains that order.
Result<std::vector<OrderTry>> choose_update_order(const TrainCliOptions& o, bool where_far) {
  std::vector<OrderTry> tries;
  uint64_t budget_bytes = 0, no_swap_peak = 0;
  bool done = false;  // the first order's plan alone decides
  bool profile_refused = false;  // --profile does not hold the first order's figures
  auto plan_order = [&](const std::string& order) -> Status {
    TrainCliOptions oo = o;
    oo.graph.update_order = order;
    FERRY_ASSIGN_OR_RETURN(TrainSetup s, set_up_training(oo));
    if (order.empty()) {
      FERRY_RETURN_IF_ERROR(plan_training(oo, s));
      budget_bytes = s.budget_bytes;
      no_swap_peak = s.no_swap_peak_bytes;
      const bool has_updates = std::any_of(s.graph.ops.begin(), s.graph.ops.end(),
                                           [](const Op& op) { return op.phase == Phase::kUpdate; });
      if (!has_updates || update_order_of(s.graph) != UpdateOrder::kEnd || o.policy == "none") {
        tries.push_back(OrderTry{.order = std::string(to_string(update_order_of(s.graph))), .chosen = true,
                                 .budget_bytes = budget_bytes, .no_swap_peak_bytes = no_swap_peak});
        done = true;
        return Status::Ok();
      }
    } else {
      oo.budget = "";  // the first order's bytes, below
      FERRY_RETURN_IF_ERROR(plan_training(oo, s));
      s.budget_bytes = budget_bytes;
      s.no_swap_peak_bytes = no_swap_peak;
    }
    OrderTry t{.order = std::string(to_string(update_order_of(s.graph))), .budget_bytes = budget_bytes,
               .no_swap_peak_bytes = no_swap_peak};
    Result<ShapePlanning> shape = plan_shape(oo, s, s.graph);
    if (!shape.ok()) {
      profile_refused = order.empty() && !o.profile_file.empty() && shape.status().code() == StatusCode::kInvalidArgument;
      return shape.status();
    }
    ShapePlanning& sp = *shape;
    const CostModel cost(s.hw);
    const auto start = std::chrono::steady_clock::now();
    Result<Schedule> schedule = sp.planner(sp.sized, cost);
    t.planning_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (schedule.ok()) {
      FERRY_ASSIGN_OR_RETURN(SimResult r, predict_iteration(sp.sized, *schedule, cost, s.budget_bytes, sp.scratch));
      t.predicted = std::move(r);
      if (where_far && order.empty() && t.predicted->feasible) {
        // Within kOtherOrderAboveGap of its bound, the first order trains without the second's planning.
        std::optional<LowerBound> bound;
        if (!sp.plans->empty() && sp.plans->back().report.bound) bound = *sp.plans->back().report.bound;
        if (!bound) {
          FERRY_ASSIGN_OR_RETURN(LowerBound b, lower_bound(sp.context(sp.sized, cost)));
          bound = b;
        }
        if (close_to_bound(t.predicted->iteration_us, bound->us)) {
          t.chosen = true;
          tries.push_back(std::move(t));
          tries.push_back(
              OrderTry{.order = "interleaved", .reason = not_planned_close_to_bound("end"), .planned = false});
          done = true;
          return Status::Ok();
        }
      }
    } else if (schedule.status().code() == StatusCode::kOutOfMemory) {
      t.reason = schedule.status().message();
    } else {
      return schedule.status();
    }
    tries.push_back(std::move(t));
    return Status::Ok();
  };
  if (Status first = plan_order(""); !first.ok()) {
    // --profile with the figures of the interleaved order's graph (the cache file of a run that
    // trained that order): that order is planned, from them, and trains; where it cannot be
    // either, the first order's error stands.
    if (!where_far || !profile_refused) return first;
    if (Status other = plan_order("interleaved"); !other.ok()) return first;
    tries.insert(tries.begin(), OrderTry{.order = "end", .reason = "not planned: " + first.message(), .planned = false,
                                         .budget_bytes = budget_bytes, .no_swap_peak_bytes = no_swap_peak});
    tries.back().chosen = true;
    return tries;
  }
  if (done) return tries;
  if (Status st = plan_order("interleaved"); !st.ok()) {
    if (!where_far) return st;
    // Not asked for: where the other order cannot be planned with this run's inputs (figures
    // measured for the end order's graph, --profile), the end order trains, and the reason is listed.
    tries.front().chosen = true;
    tries.push_back(OrderTry{.order = "interleaved", .reason = "not planned: " + st.message(), .planned = false});
    return tries;
  }
  auto fits = [](const OrderTry& t) { return t.predicted && t.predicted->feasible; };
  size_t chosen = 0;
  if (fits(tries[1]) &&
      (!fits(tries[0]) || order_faster(tries[1].predicted->iteration_us, tries[0].predicted->iteration_us)))
    chosen = 1;
  tries[chosen].chosen = true;
  return tries;
}

int run_train(const TrainCliOptions& given) {
  TrainCliOptions o = given;
  if (o.demo) {
    o.budget = "33%";
    o.compare = true;
  }
  if (o.policy.empty()) o.policy = o.budget.empty() ? "none" : "ferry";
  if (Status st = check_train_options(o); !st.ok()) return report(st);
  std::vector<OrderTry> order_tries;
  // No --update-order on a zoo model with ferry's plan: the interleaved order is tried too only
  // where the end order's plan is far from its bound (kOtherOrderAboveGap) or does not fit.
  const bool where_far = o.graph.update_order.empty() && o.graph.trace.empty() && o.policy == "ferry";
  if (o.graph.update_order == "auto" || where_far) {
    Result<std::vector<OrderTry>> tries = choose_update_order(o, where_far);
    if (!tries.ok())
      return report(where_far ? tries.status() : tries.status().with_context("--update-order auto"));
    order_tries = std::move(*tries);
    for (const OrderTry& t : order_tries)
      if (t.chosen) o.graph.update_order = t.order == "end" ? "" : t.order;  // "": the graph's own
  }
  Result<TrainSetup> setup = set_up_training(o);
  if (!setup.ok()) return report(setup.status());
  TrainSetup& s = *setup;
  s.order_tries = std::move(order_tries);
  if (Status st = plan_training(o, s); !st.ok()) return report(st);
  if (!s.order_tries.empty()) {  // the budget both orders were planned for, whichever trains
    s.budget_bytes = s.order_tries.front().budget_bytes;
    s.no_swap_peak_bytes = s.order_tries.front().no_swap_peak_bytes;
  }
  const bool show_progress = !o.no_progress && !o.json && isatty(STDERR_FILENO);
  if (o.demo && !o.json)
    std::printf("ferry train without options: the built-in demo. It trains %s at %s of its no-swap peak with the "
                "ferry planner, beside the same run without a plan, the two taking turns iteration by iteration (`ferry "
                "train --help` for options)\n\n",
                describe(s.graph).c_str(), o.budget.c_str());
  const auto start = std::chrono::steady_clock::now();
  ShapeBuckets buckets = make_buckets(o, s, /*baseline=*/false);
  // The first shape is planned and its executor made before anything runs, so that a budget no
  // plan fits or a precision the backend cannot train fails up front.
  if (Status st = buckets.prepare(0); !st.ok()) return report(with_conv_hint(st, s.graph, s.backend_options));
  const double setup_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // --compare: the same shapes without a plan, interleaved with the planned run.
  std::optional<ShapeBuckets> baseline;
  TrainResult baseline_result;
  if (o.compare) {
    baseline.emplace(make_buckets(o, s, /*baseline=*/true));
    if (Status st = baseline->prepare(0); !st.ok()) return report(st.with_context("the run without a plan (--compare)"));
  }
  if (!o.json) print_train_header(o, s);
  Result<TrainResult> iterations = run_iterations(buckets, o.iters, show_progress, setup_seconds,
                                                  baseline ? &*baseline : nullptr, &baseline_result);
  if (!iterations.ok()) return report(with_conv_hint(iterations.status(), s.graph, s.backend_options));
  if (baseline) {
    Result<Baseline> b = baseline_of(std::move(baseline_result), *baseline);
    if (!b.ok()) return report(b.status().with_context("the run without a plan (--compare)"));
    s.baseline = std::move(*b);
  }
  Result<TrainResult> r = summarize(std::move(*iterations), buckets);
  if (!r.ok()) return report(r.status());
  // The newest plan's prediction and where its figures came from.
  const TrainingLoop& loop = buckets.active_loop();
  if (o.policy != "none" || !o.op_times.empty()) s.predicted = loop.prediction();
  s.profile_source = loop.plan_versions().back().figures_source;
  if (o.json) {
    std::printf("%s\n", train_report_json(o, s, buckets, *r).dump(2).c_str());
  } else {
    print_train_summary(o, s, buckets, *r);
  }
  if (s.baseline && o.lossy.empty() && !same_losses(*s.baseline, *r))
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
                  fmt::format("Compute threads (default, or 0, and at most: the {} cores this process may use)", max_compute_threads()));
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
  cmd->add_flag("--ssd-staged", o->ssd_staged,
                "Move every SSD copy through host staging buffers, and plan so, instead of with direct I/O between "
                "the arena and the file (in place, the default): for comparisons");
  cmd->add_option("--codec", o->codec,
                  "How swapped bytes are coded, losslessly: none, zero-mask, lz4, zstd, zero-mask+lz4 (every copy), "
                  "or auto. With --tier ssd, auto has the tier measure each codec per class of tensor and the plan "
                  "made from those figures code each tensor a codec predicts faster. With --tier host a named codec "
                  "codes every host copy (the plan still predicts them raw) and auto keeps them raw (docs/codecs.md)")
      ->capture_default_str();
  cmd->add_option("--lossy", o->lossy,
                  "Lossy stashing on the SSD tier, Gist-style: bf16 stores swapped forward activations rounded to "
                  "bfloat16 (half the disk bytes; gradients, weights and optimizer state stay exact). Training is then "
                  "no longer bitwise identical to a run without a plan (--compare reports the largest loss "
                  "difference; bench/lossy_curve.sh the loss curve over 300 iterations)");
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
                  "Re-plan when two iterations in a row take more than this fraction more (or both less) than "
                  "expected, or more than twice the run's iteration-time noise where that is larger, and the op and "
                  "link times measured in them explain the difference (otherwise the expectation is rescaled); "
                  "0: never")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 10.0));
  CLI::Option* seq_range = cmd->add_option(
      "--seq-range", o->seq_range,
      "Variable sequence length (transformers): MIN:MAX, one length drawn per iteration from the seed, rounded up to "
      "a multiple of --bucket (default 128); one plan per bucket, made when it first comes up and reused");
  CLI::Option* batch_range = cmd->add_option(
      "--batch-range", o->batch_range,
      "Variable batch size: MIN:MAX, drawn per iteration, rounded up to a multiple of --bucket (default 8); one plan "
      "per bucket. Without --lr every batch uses the default rate of the largest");
  seq_range->excludes(batch_range);
  cmd->add_option("--bucket", o->bucket, "Bucket size of --seq-range / --batch-range")->check(CLI::Range(1, 1 << 20));
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
                "Also train the same model without a budget or a plan, in this process, the two runs taking turns "
                "iteration by iteration (so that the machine's drift falls on both alike; both runs' memory is held at "
                "once), and report the measured slowdown, both peaks and whether the losses are bitwise identical "
                "(they must be; exit 1 if not). "
                "`ferry train` with no options (or only --json, --no-progress) runs the built-in demo: --budget 33% "
                "--compare");
  cmd->add_flag("--json", o->json, "Print the results as JSON (for scripts)");
  cmd->add_flag("--no-progress", o->no_progress, "No progress bar");
  cmd->callback([o, cmd, &action] {
    // Options that only change how results are shown keep the demo (`ferry train --json`).
    const auto options = cmd->get_options();
    o->demo = std::all_of(options.begin(), options.end(), [](const CLI::Option* opt) {
      return opt->count() == 0 || opt->check_name("--json") || opt->check_name("--no-progress");
    });
    action = [o] { return run_train(*o); };
  });
}

}  // namespace ferry::cli
