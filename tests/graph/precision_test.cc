// Tests of mixed precision in the graph (Note [Mixed precision] in src/graph/graph.h): tensor
// sizes per precision on zoo models, where the fp32 masters, 16-bit copies, optimizer state and
// loss scale are, and that traces carry the precision and the dtypes.
//
// Each AMP graph is compared with the fp32 graph of the same model, tensor by tensor, by name:
// the builder names tensors the same way in both, so a mismatch points at the tensor at fault.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include <fmt/format.h>

#include "graph/graph.h"
#include "graph/trace.h"
#include "graph/zoo/zoo.h"

namespace ferry {
namespace {

Graph build(const std::string& model, Precision p, OptimizerKind opt = OptimizerKind::kAdam) {
  ModelConfig c;
  c.batch = 2;
  if (find_model(model)->family == ModelFamily::kCnn) c.image = 64;
  else c.seq = 16;
  c.train.optimizer = opt;
  c.precision = p;
  Result<Graph> g = build_model(model, c);
  EXPECT_TRUE(g.ok()) << model << ": " << g.status().message();
  return g.ok() ? std::move(g).value() : Graph{};
}

// Tensors AMP keeps in fp32: norm statistics, the loss and cross-entropy's log-probabilities.
bool stays_fp32(const Tensor& t) {
  auto ends_with = [&](const std::string& s) { return t.name.size() >= s.size() && t.name.ends_with(s); };
  return ends_with(".mean") || ends_with(".var") || ends_with(".log_probs") || t.name == "loss";
}

bool is_float(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }

uint64_t bytes_of_role(const Graph& g, TensorRole role) {
  uint64_t n = 0;
  for (const Tensor& t : g.tensors) n += t.role == role ? t.bytes : 0;
  return n;
}

constexpr const char* kModels[] = {"resnet50", "bert-base-squad", "gpt2-mini", "densenet-mini"};

TEST(Precision, AmpHalvesActivationsAndGradients) {
  for (const char* model : kModels) {
    for (Precision p : {Precision::kAmpFp16, Precision::kAmpBf16}) {
      SCOPED_TRACE(std::string(model) + " " + std::string(to_string(p)));
      const Graph fp32 = build(model, Precision::kFp32);
      const Graph amp = build(model, p);
      ASSERT_FALSE(amp.ops.empty());
      EXPECT_EQ(amp.info.precision, p);
      std::map<std::string, const Tensor*> by_name;
      for (const Tensor& t : amp.tensors) by_name[t.name] = &t;
      uint64_t fp32_halved = 0, amp_halved = 0;  // activation + gradient bytes that AMP stores in 16 bits
      int compared = 0;
      for (const Tensor& t : fp32.tensors) {
        if (t.role != TensorRole::kActivation && t.role != TensorRole::kGradient &&
            t.role != TensorRole::kWeightGradient && t.role != TensorRole::kInput)
          continue;
        if (!is_float(t.dtype)) continue;  // token ids, labels, masks and pooling indices keep their dtype
        ASSERT_TRUE(by_name.count(t.name)) << t.name;
        const Tensor& a = *by_name[t.name];
        EXPECT_EQ(a.shape, t.shape) << t.name;
        if (stays_fp32(t)) {
          EXPECT_EQ(a.dtype, DType::kF32) << t.name;
          EXPECT_EQ(a.bytes, t.bytes) << t.name;
        } else {
          EXPECT_EQ(a.dtype, activation_dtype(p)) << t.name;
          EXPECT_EQ(2 * a.bytes, t.bytes) << t.name;
          fp32_halved += t.bytes;
          amp_halved += a.bytes;
        }
        ++compared;
      }
      EXPECT_GT(compared, 20);
      EXPECT_EQ(2 * amp_halved, fp32_halved);
      // The activations as a whole: half, plus half of the few fp32 ones (statistics, log-probabilities).
      uint64_t kept_fp32 = 0;
      for (const Tensor& t : fp32.tensors) kept_fp32 += t.role == TensorRole::kActivation && stays_fp32(t) ? t.bytes : 0;
      EXPECT_EQ(2 * bytes_of_role(amp, TensorRole::kActivation), bytes_of_role(fp32, TensorRole::kActivation) + kept_fp32);
      // Same ops, same work.
      ASSERT_EQ(amp.ops.size(), fp32.ops.size());
      for (size_t i = 0; i < amp.ops.size(); ++i) {
        EXPECT_EQ(amp.ops[i].type, fp32.ops[i].type);
        EXPECT_EQ(amp.ops[i].flops, fp32.ops[i].flops) << amp.ops[i].name;
      }
    }
  }
}

TEST(Precision, MasterWeightsCountedOnceWithOneSixteenBitCopy) {
  for (const char* model : kModels) {
    SCOPED_TRACE(model);
    const Graph fp32 = build(model, Precision::kFp32);
    const Graph amp = build(model, Precision::kAmpFp16);
    // Parameters and the fp32 master bytes are those of the fp32 graph: the copy is not a parameter.
    EXPECT_EQ(amp.param_count(), fp32.param_count());
    EXPECT_EQ(amp.weight_bytes(), fp32.weight_bytes());
    EXPECT_EQ(bytes_of_role(amp, TensorRole::kWeight), 4 * fp32.param_count());
    EXPECT_EQ(bytes_of_role(amp, TensorRole::kWeightCopy), 2 * fp32.param_count());
    EXPECT_EQ(bytes_of_role(fp32, TensorRole::kWeightCopy), 0u);
    // Weight gradients are 16-bit, one per master.
    EXPECT_EQ(bytes_of_role(amp, TensorRole::kWeightGradient) * 2, bytes_of_role(fp32, TensorRole::kWeightGradient));
    // Forward and backward ops read copies, never masters; each update reads and writes its master
    // and rewrites its copy.
    std::set<TensorId> copies_written;
    for (const Op& op : amp.ops) {
      for (TensorId t : op.inputs)
        if (op.phase != Phase::kUpdate) {
          EXPECT_NE(amp.tensor(t).role, TensorRole::kWeight) << op.name;
        }
      if (op.phase != Phase::kUpdate) continue;
      ASSERT_EQ(amp.tensor(op.inputs[0]).role, TensorRole::kWeight) << op.name;
      ASSERT_EQ(amp.tensor(op.inputs[1]).grad_of, op.inputs[0]) << op.name;
      bool writes_copy = false;
      for (TensorId t : op.outputs) {
        if (amp.tensor(t).role != TensorRole::kWeightCopy) continue;
        writes_copy = true;
        copies_written.insert(t);
        EXPECT_EQ(amp.tensor(t).name, amp.tensor(op.inputs[0]).name + ".f16");
      }
      EXPECT_TRUE(writes_copy) << op.name;
    }
    size_t copies = 0;
    for (const Tensor& t : amp.tensors) copies += t.role == TensorRole::kWeightCopy;
    EXPECT_EQ(copies_written.size(), copies);
    EXPECT_TRUE(amp.validate().ok());
  }
}

TEST(Precision, OptimizerStateStaysFp32AndFp16AddsTheLossScale) {
  for (const char* model : kModels) {
    for (OptimizerKind opt : {OptimizerKind::kSgd, OptimizerKind::kAdam}) {
      SCOPED_TRACE(std::string(model) + " " + std::string(to_string(opt)));
      const Graph fp32 = build(model, Precision::kFp32, opt);
      const Graph fp16 = build(model, Precision::kAmpFp16, opt);
      const Graph bf16 = build(model, Precision::kAmpBf16, opt);
      for (const Graph* g : {&fp16, &bf16})
        for (const Tensor& t : g->tensors)
          if (t.role == TensorRole::kOptimizerState) {
            EXPECT_EQ(t.dtype, DType::kF32) << t.name;
          }
      const uint64_t state = bytes_of_role(fp32, TensorRole::kOptimizerState);
      EXPECT_EQ(state, (opt == OptimizerKind::kAdam ? 8 : 4) * fp32.param_count());
      // bf16 has the range of fp32 and needs no loss scaling; fp16 keeps one fp32 scale.
      EXPECT_EQ(bytes_of_role(bf16, TensorRole::kOptimizerState), state);
      EXPECT_EQ(bytes_of_role(fp16, TensorRole::kOptimizerState), state + 4);
      TensorId scale = kNoTensor;
      for (const Tensor& t : fp16.tensors)
        if (t.name == "amp.loss_scale") scale = t.id;
      ASSERT_NE(scale, kNoTensor);
      int readers = 0, updates = 0;
      for (const Op& op : fp16.ops) {
        updates += op.phase == Phase::kUpdate;
        for (TensorId t : op.inputs) readers += t == scale;
        if (op.type == OpType::kCrossEntropyBwd) {
          EXPECT_EQ(op.inputs.back(), scale);
        }
      }
      EXPECT_EQ(readers, updates + 1);  // every update unscales; cross-entropy's backward scales
    }
  }
}

TEST(Precision, Tf32GraphIsTheFp32Graph) {
  const Graph fp32 = build("resnet50", Precision::kFp32);
  Graph tf32 = build("resnet50", Precision::kTf32);
  EXPECT_EQ(tf32.info.precision, Precision::kTf32);
  tf32.info.precision = Precision::kFp32;
  EXPECT_EQ(graph_difference(fp32, tf32), "");
}

TEST(Precision, TraceRoundTripKeepsPrecisionDtypesAndRoles) {
  for (Precision p : {Precision::kTf32, Precision::kAmpFp16, Precision::kAmpBf16}) {
    SCOPED_TRACE(std::string(to_string(p)));
    const Graph g = build("bert-mini-squad", p);
    const std::string text = to_trace_json(g, false);
    EXPECT_NE(text.find(fmt::format("\"precision\":\"{}\"", to_string(p))), std::string::npos);
    Result<Graph> back = parse_trace(text, "amp.json");
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(graph_difference(g, *back), "");
  }
  // fp32 graphs write no precision field, so their traces are those of earlier versions.
  EXPECT_EQ(to_trace_json(build("bert-mini-squad", Precision::kFp32), false).find("precision"), std::string::npos);
  // An unknown precision is an error naming the field and the choices.
  Result<Graph> bad = parse_trace(
      R"({"format":"ferry-trace","version":1,"model":"m","info":{"precision":"fp8"},"tensors":[],"ops":[]})", "t.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("info.precision"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("amp-bf16"), std::string::npos) << bad.status().message();
}

TEST(Precision, TraceRoundTripKeepsTheLayout) {
  Graph g = build("resnet-mini", Precision::kAmpFp16);
  EXPECT_EQ(to_trace_json(g, false).find("layout"), std::string::npos);  // nhwc: not written
  g.info.layout = Layout::kNchw;
  const std::string text = to_trace_json(g, false);
  EXPECT_NE(text.find("\"layout\":\"nchw\""), std::string::npos);
  Result<Graph> back = parse_trace(text, "nchw.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->info.layout, Layout::kNchw);
  EXPECT_EQ(graph_difference(g, *back), "");
  Graph nhwc = g;
  nhwc.info.layout = Layout::kNhwc;
  EXPECT_EQ(graph_difference(g, nhwc), "info.layout: nchw vs nhwc");
  Result<Graph> bad = parse_trace(
      R"({"format":"ferry-trace","version":1,"model":"m","info":{"layout":"chwn"},"tensors":[],"ops":[]})", "t.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("info.layout"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("nchw"), std::string::npos) << bad.status().message();
}

TEST(Precision, NamesRoundTrip) {
  for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kAmpFp16, Precision::kAmpBf16})
    EXPECT_EQ(precision_from_string(to_string(p)), p);
  EXPECT_EQ(precision_from_string("fp16"), std::nullopt);
  EXPECT_EQ(activation_dtype(Precision::kTf32), DType::kF32);
  EXPECT_EQ(activation_dtype(Precision::kAmpBf16), DType::kBF16);
}

}  // namespace
}  // namespace ferry
