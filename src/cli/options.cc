#include "cli/options.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include <fmt/format.h>

#include "graph/trace.h"
#include "graph/update_order.h"
#include "graph/zoo/zoo.h"

namespace ferry::cli {

namespace {

constexpr double kSgdReferenceLr = 0.1;     // the ResNet recipe (He et al., 2016) ...
constexpr double kSgdReferenceBatch = 256;  // ... at this batch (Goyal et al., 2017)
constexpr double kDefaultAdamLr = 1e-3;     // Kingma and Ba, 2015
// More compute threads than cores make every parallel region wait for descheduled threads:
// resnet-mini at batch 2 took 5 ms per iteration with 1 thread and 290 ms with 3 on 2 cores.
constexpr int kMaxThreadsPerCore = 1;

}  // namespace

void add_graph_options(CLI::App* app, GraphOptions& o, const std::string& default_model, int64_t default_batch) {
  o.model = default_model;
  o.batch = default_batch;
  CLI::Option* trace =
      app->add_option("--trace", o.trace, "Use an iteration recorded in a trace file (format v1, docs/trace-format.md) "
                                          "instead of a zoo model");
  CLI::Option* model =
      app->add_option("-m,--model", o.model, "Zoo model to use (see `ferry list-models`)")->capture_default_str();
  CLI::Option* batch = app->add_option("-b,--batch", o.batch, "Batch size")->capture_default_str();
  CLI::Option* image = app->add_option("--image", o.image, "Input image side for CNNs (default: the model's, e.g. 224)");
  CLI::Option* seq =
      app->add_option("--seq", o.seq, "Sequence length for transformers (default: the model's, e.g. 1024)");
  CLI::Option* depth = app->add_option(
      "--depth", o.depth,
      "Layers of a model built at any depth (--model preact-resnet: 9n+2, e.g. 164, 1001, 2504, 10001)");
  CLI::Option* optimizer =
      app->add_option("--optimizer", o.optimizer, "Optimizer, whose state is part of the iteration: sgd (momentum "
                                                  "0.9), adam, or adamw (Adam with decoupled weight decay 0.01)")
          ->capture_default_str();
  app->add_option("--precision", o.precision,
                  "How the iteration computes: fp32 (default), tf32 (fp32 tensors, convolutions and matmuls on TF32 "
                  "tensor cores), amp-fp16 or amp-bf16 (mixed precision: 16-bit activations and gradients, fp32 master "
                  "weights with 16-bit copies, fp32 optimizer state). Sizes and the cost model follow it; a device "
                  "profile without the rate it needs is an error. `train` and `profile` run fp32 only (CPU backend)");
  app->add_option("--layout", o.layout,
                  "Activation layout on a GPU, for the cost model: nhwc (default: channels last, what tensor-core "
                  "convolutions read, NVIDIA's recipe) or nchw (PyTorch's default: every 16-bit convolution then pays "
                  "transposes of its operands and result, docs/cost-model.md). Changes no tensor and nothing the CPU "
                  "backend runs");
  app->add_option("--update-order", o.update_order,
                  "Where the optimizer's updates run: end (after the whole backward pass, as optimizer.step() after "
                  "loss.backward()) or interleaved (each update right after its gradient's last write and its "
                  "weight's last read, as optimizer-in-backward hooks do: bitwise the same training, earlier-freed "
                  "gradients, state that can stream in during the backward pass); `ferry plan` and `ferry train` "
                  "also take auto: both orders planned at the same budget bytes, the faster plan's kept. Default: "
                  "end, and for ferry's plans of a zoo model the interleaved order tried too where the end order's "
                  "plan is more than 5% over its lower bound or does not fit. A trace keeps its own order unless "
                  "this is given")
      ->check(CLI::IsMember({"end", "interleaved", "auto"}));
  for (CLI::Option* given_by_the_trace : {model, batch, image, seq, depth, optimizer})
    trace->excludes(given_by_the_trace);
  // Unset, these are 0 (the model's own); given, 0 would silently mean that default.
  const CLI::Validator positive(
      [](std::string& value) -> std::string {
        int64_t v = 0;
        if (CLI::detail::lexical_cast(value, v) && v <= 0) return "must be positive, got " + value;
        return "";
      },
      "POSITIVE");
  for (CLI::Option* sized : {image, seq, depth}) sized->check(positive);
}

void add_learning_rate_option(CLI::App* app, GraphOptions& o) {
  CLI::Option* lr = app->add_option_function<double>(
      "--lr", [&o](double v) { o.lr = v; }, learning_rate_help());
  if (CLI::Option* trace = app->get_option_no_throw("--trace")) trace->excludes(lr);
}

// Defaults that train every zoo model at small batches without diverging (measured; see
// bench/README.md, "Default learning rates"):
// - SGD (momentum 0.9) on a CNN: the ResNet recipe's lr 0.1 at batch 256, scaled linearly with
//   the batch (Goyal et al., "Accurate, Large Minibatch SGD", 2017), at most 0.1. The old flat
//   0.1 made ResNet-18's loss at batch 2 rise from 6.9 to 36 within ten iterations, ResNet-50's
//   spike to 110, and VGG-16's turn NaN at the fourth.
// - SGD on a transformer: 0.1, which trains the zoo's GPT-2 and BERT at batch 1-2 (layer norm,
//   no batch statistics).
// - Adam / AdamW: 1e-3 (Kingma and Ba, 2015).
double default_learning_rate(OptimizerKind optimizer, bool transformer, int64_t batch) {
  if (optimizer == OptimizerKind::kAdam) return kDefaultAdamLr;
  if (transformer) return kSgdReferenceLr;
  const double scaled = kSgdReferenceLr * static_cast<double>(std::max<int64_t>(batch, 1)) / kSgdReferenceBatch;
  return std::min(scaled, kSgdReferenceLr);
}

std::string learning_rate_help() {
  return fmt::format("Learning rate, finite and > 0. Default: sgd {} x batch / {} on CNNs (at most {}; linear "
                     "scaling of the ResNet recipe), {} on transformers; adam and adamw {}",
                     kSgdReferenceLr, kSgdReferenceBatch, kSgdReferenceLr, kSgdReferenceLr, kDefaultAdamLr);
}

namespace {

// --precision for a graph loaded from a trace: the trace's precision, or tf32 <-> fp32.
Status apply_trace_precision(const std::string& given, Graph& g) {
  if (given.empty()) return Status::Ok();
  const std::optional<Precision> p = precision_from_string(given);
  if (!p) return Status::InvalidArgument(fmt::format("unknown precision '{}' (use fp32, tf32, amp-fp16 or amp-bf16)", given));
  if (*p == g.info.precision) return Status::Ok();
  const auto fp32_like = [](Precision x) { return x == Precision::kFp32 || x == Precision::kTf32; };
  if (!fp32_like(*p) || !fp32_like(g.info.precision))
    return Status::InvalidArgument(fmt::format(
        "the trace was recorded in {} and its tensors' dtypes say so; --precision {} cannot change them (only fp32 and "
        "tf32, which share their tensors, can replace each other)",
        to_string(g.info.precision), given));
  g.info.precision = *p;
  return Status::Ok();
}

// The graph in the order --update-order asks for; an end-order request on an interleaved trace
// is refused (the pass moves updates earlier only, and a trace's order is its own record).
Result<Graph> apply_update_order(const GraphOptions& o, Graph g) {
  if (o.update_order.empty()) return g;
  if (o.update_order == "auto")
    return Status::InvalidArgument(
        "--update-order auto plans both orders and keeps the faster: only `ferry plan` and `ferry train` do that; "
        "run `ferry plan --update-order auto` with the same model and budget, and give the order it chose (end or "
        "interleaved) here");
  const std::optional<UpdateOrder> want = update_order_from_string(o.update_order);
  if (!want)
    return Status::InvalidArgument(
        fmt::format("unknown update order '{}' (use end or interleaved)", o.update_order));
  if (*want == UpdateOrder::kInterleaved) return interleave_updates(g);
  if (update_order_of(g) != UpdateOrder::kEnd)
    return Status::InvalidArgument(
        "--update-order end: this trace's updates already run inside the backward pass, and Ferry does not move "
        "updates later; record the trace with its updates at the end, or leave --update-order out");
  return g;
}

}  // namespace

Result<Graph> load_graph(const GraphOptions& o) {
  std::optional<Layout> layout;
  if (!o.layout.empty()) {
    layout = layout_from_string(o.layout);
    if (!layout) return Status::InvalidArgument(fmt::format("unknown layout '{}' (use nhwc or nchw)", o.layout));
  }
  if (!o.trace.empty()) {
    FERRY_ASSIGN_OR_RETURN(Graph g, load_trace(o.trace));
    FERRY_RETURN_IF_ERROR(apply_trace_precision(o.precision, g));
    if (layout) g.info.layout = *layout;
    return apply_update_order(o, std::move(g));
  }
  ModelConfig c;
  if (!o.precision.empty()) {
    const std::optional<Precision> p = precision_from_string(o.precision);
    if (!p)
      return Status::InvalidArgument(
          fmt::format("unknown precision '{}' (use fp32, tf32, amp-fp16 or amp-bf16)", o.precision));
    c.precision = *p;
  }
  c.batch = o.batch;
  c.image = o.image;
  c.seq = o.seq;
  c.depth = o.depth;
  if (o.optimizer == "sgd") {
    c.train.optimizer = OptimizerKind::kSgd;
  } else if (o.optimizer == "adam" || o.optimizer == "adamw") {
    c.train.optimizer = OptimizerKind::kAdam;
    c.train.weight_decay = o.optimizer == "adamw" ? 0.01f : 0.0f;
  } else {
    return Status::InvalidArgument(fmt::format("unknown optimizer '{}' (use sgd, adam or adamw)", o.optimizer));
  }
  const ModelEntry* entry = find_model(o.model);
  double lr = default_learning_rate(c.train.optimizer, entry && entry->family == ModelFamily::kTransformer, o.batch);
  if (o.lr) {
    // Stored as a float in the update ops: it must be finite and > 0 there too.
    if (!std::isfinite(*o.lr) || *o.lr <= 0 || *o.lr > std::numeric_limits<float>::max() ||
        static_cast<float>(*o.lr) <= 0)
      return Status::InvalidArgument(
          fmt::format("--lr must be a finite number > 0 (and within float range), got {}", *o.lr));
    lr = *o.lr;
  }
  c.train.lr = static_cast<float>(lr);
  FERRY_ASSIGN_OR_RETURN(Graph g, build_model(o.model, c));
  if (layout) g.info.layout = *layout;
  return apply_update_order(o, std::move(g));
}

std::string describe(const Graph& g) {
  std::string s = g.info.model.empty() ? std::string("trace") : g.info.model;
  std::vector<std::string> parts;
  if (g.info.batch > 0) parts.push_back(fmt::format("batch {}", g.info.batch));
  if (g.info.image > 0) parts.push_back(fmt::format("image {}", g.info.image));
  if (g.info.seq > 0) parts.push_back(fmt::format("seq {}", g.info.seq));
  parts.emplace_back(to_string(g.info.optimizer));
  if (g.info.precision != Precision::kFp32) parts.emplace_back(to_string(g.info.precision));
  if (g.info.layout != Layout::kNhwc) parts.emplace_back(to_string(g.info.layout));
  if (update_order_of(g) == UpdateOrder::kInterleaved) parts.emplace_back("updates interleaved");
  return fmt::format("{} ({})", s, fmt::join(parts, ", "));
}

int max_compute_threads() { return kMaxThreadsPerCore * std::max(omp_get_num_procs(), 1); }

Status set_compute_threads(int threads) {
  if (threads < 0) return Status::InvalidArgument(fmt::format("--threads must not be negative, got {}", threads));
  if (threads > max_compute_threads())
    return Status::InvalidArgument(fmt::format(
        "--threads {} is too many: at most {}, the cores this process may use; more threads than cores make every "
        "kernel wait for descheduled threads",
        threads, max_compute_threads()));
  if (threads > 0) omp_set_num_threads(threads);
  return Status::Ok();
}

Status check_option_used(const CLI::App& cmd, const std::string& option, bool used, const std::string& condition) {
  if (used || cmd.count(option) == 0) return Status::Ok();
  return Status::InvalidArgument(fmt::format("{} has no effect {}", option, condition));
}

int report(const Status& s) {
  if (s.ok()) return 0;
  std::fprintf(stderr, "ferry: error: %s\n", s.message().c_str());
  return s.exit_code();
}

std::string with_commas(uint64_t v) {
  std::string digits = std::to_string(v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace ferry::cli
