#include "cli/options.h"

#include <cstdio>

#include <fmt/format.h>

#include "graph/trace.h"
#include "graph/zoo/zoo.h"

namespace ferry::cli {

void add_graph_options(CLI::App* app, GraphOptions& o, const std::string& default_model, int64_t default_batch) {
  o.model = default_model;
  o.batch = default_batch;
  app->add_option("-m,--model", o.model, "Zoo model to use (see `ferry list-models`)")->capture_default_str();
  app->add_option("--trace", o.trace, "Use an iteration recorded in a trace file (format v1, docs/trace-format.md) "
                                      "instead of a zoo model");
  app->add_option("-b,--batch", o.batch, "Batch size")->capture_default_str();
  app->add_option("--image", o.image, "Input image side for CNNs (default: the model's, e.g. 224)");
  app->add_option("--seq", o.seq, "Sequence length for transformers (default: the model's, e.g. 1024)");
  app->add_option("--optimizer", o.optimizer, "Optimizer, whose state is part of the iteration: sgd (momentum 0.9), "
                                              "adam, or adamw (Adam with decoupled weight decay 0.01)")
      ->capture_default_str();
  app->add_option("--precision", o.precision,
                  "How the iteration computes: fp32 (default), tf32 (fp32 tensors, convolutions and matmuls on TF32 "
                  "tensor cores), amp-fp16 or amp-bf16 (mixed precision: 16-bit activations and gradients, fp32 master "
                  "weights with 16-bit copies, fp32 optimizer state). Sizes and the cost model follow it; a device "
                  "profile without the rate it needs is an error. `train` and `profile` run fp32 only (CPU backend)");
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

}  // namespace

Result<Graph> load_graph(const GraphOptions& o) {
  if (!o.trace.empty()) {
    FERRY_ASSIGN_OR_RETURN(Graph g, load_trace(o.trace));
    FERRY_RETURN_IF_ERROR(apply_trace_precision(o.precision, g));
    return g;
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
  if (o.optimizer == "sgd") {
    c.train.optimizer = OptimizerKind::kSgd;
    c.train.lr = 0.1f;  // the usual ResNet recipe: SGD, momentum 0.9, lr 0.1
  } else if (o.optimizer == "adam" || o.optimizer == "adamw") {
    c.train.optimizer = OptimizerKind::kAdam;
    c.train.lr = 1e-3f;
    c.train.weight_decay = o.optimizer == "adamw" ? 0.01f : 0.0f;
  } else {
    return Status::InvalidArgument(fmt::format("unknown optimizer '{}' (use sgd, adam or adamw)", o.optimizer));
  }
  if (o.lr < 0) return Status::InvalidArgument(fmt::format("learning rate must not be negative, got {}", o.lr));
  if (o.lr > 0) c.train.lr = o.lr;
  return build_model(o.model, c);
}

std::string describe(const Graph& g) {
  std::string s = g.info.model.empty() ? std::string("trace") : g.info.model;
  std::vector<std::string> parts;
  if (g.info.batch > 0) parts.push_back(fmt::format("batch {}", g.info.batch));
  if (g.info.image > 0) parts.push_back(fmt::format("image {}", g.info.image));
  if (g.info.seq > 0) parts.push_back(fmt::format("seq {}", g.info.seq));
  parts.emplace_back(to_string(g.info.optimizer));
  if (g.info.precision != Precision::kFp32) parts.emplace_back(to_string(g.info.precision));
  return fmt::format("{} ({})", s, fmt::join(parts, ", "));
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
