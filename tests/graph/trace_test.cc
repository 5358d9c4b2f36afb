// Trace import/export: lossless round trips, defaults, id remapping, and one test per class of
// malformed input, each asserting what the message names (file, JSON path, tensor or op, numbers).
#include "graph/trace.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/zoo/zoo.h"

namespace ferry {
namespace {

using Json = nlohmann::json;

// Hand-builds graphs; sizes and derived byte counts are computed here, independently of trace.cc.
class GraphMaker {
 public:
  TensorId tensor(const std::string& name, TensorRole role, std::vector<int64_t> shape, DType dtype = DType::kF32,
                  TensorId grad_of = kNoTensor) {
    Tensor t;
    t.id = static_cast<TensorId>(g.tensors.size());
    t.name = name;
    t.role = role;
    t.dtype = dtype;
    uint64_t n = 1;
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    t.bytes = n * dtype_size(dtype);
    t.shape = std::move(shape);
    t.grad_of = grad_of;
    g.tensors.push_back(t);
    return t.id;
  }
  Op& op(const std::string& name, OpType type, Phase phase, std::vector<TensorId> inputs,
         std::vector<TensorId> outputs) {
    Op o;
    o.id = static_cast<OpId>(g.ops.size());
    o.name = name;
    o.type = type;
    o.phase = phase;
    o.inputs = std::move(inputs);
    o.outputs = std::move(outputs);
    for (TensorId t : o.inputs) o.bytes_read += g.tensors[t].bytes;
    for (TensorId t : o.outputs) o.bytes_written += g.tensors[t].bytes;
    g.ops.push_back(o);
    return g.ops.back();
  }
  Graph g;
};

// A 2-layer MLP trained with Adam, with every optional field of the format set somewhere:
// info, dtypes, grad_of, time_us with awkward values, counters that differ from the derived
// defaults, forward_op, inplace, and one op whose attributes all differ from their defaults.
Graph hand_built_graph() {
  GraphMaker m;
  m.g.ops.reserve(16);  // the Op& references below stay valid while ops are added
  m.g.info = {
      .model = "mlp2-hand", .batch = 8, .image = 0, .seq = 3, .num_classes = 5, .optimizer = OptimizerKind::kAdam};
  TensorId x = m.tensor("x", TensorRole::kInput, {8, 16});
  TensorId y = m.tensor("y", TensorRole::kInput, {8}, DType::kI32);
  TensorId w1 = m.tensor("fc1.weight", TensorRole::kWeight, {32, 16});
  TensorId w2 = m.tensor("fc2.weight", TensorRole::kWeight, {5, 32}, DType::kBF16);
  TensorId h = m.tensor("fc1.out", TensorRole::kActivation, {8, 32});
  TensorId a = m.tensor("relu.out", TensorRole::kActivation, {8, 32});
  TensorId mask = m.tensor("relu.mask", TensorRole::kWorkspace, {8, 32}, DType::kU8);
  TensorId logits = m.tensor("fc2.out", TensorRole::kActivation, {8, 5}, DType::kF16);
  TensorId loss = m.tensor("loss", TensorRole::kActivation, {});
  TensorId dlogits = m.tensor("fc2.out.grad", TensorRole::kGradient, {8, 5}, DType::kF16, logits);
  TensorId da = m.tensor("relu.out.grad", TensorRole::kGradient, {8, 32}, DType::kF32, a);
  TensorId dw2 = m.tensor("fc2.weight.grad", TensorRole::kWeightGradient, {5, 32}, DType::kBF16, w2);
  TensorId dh = m.tensor("fc1.out.grad", TensorRole::kGradient, {8, 32}, DType::kF32, h);
  TensorId dw1 = m.tensor("fc1.weight.grad", TensorRole::kWeightGradient, {32, 16}, DType::kF32, w1);
  TensorId m1 = m.tensor("fc1.weight.adam_m", TensorRole::kOptimizerState, {32, 16});
  TensorId v1 = m.tensor("fc1.weight.adam_v", TensorRole::kOptimizerState, {32, 16});
  TensorId m2 = m.tensor("fc2.weight.adam_m", TensorRole::kOptimizerState, {5, 32}, DType::kBF16);
  TensorId v2 = m.tensor("fc2.weight.adam_v", TensorRole::kOptimizerState, {5, 32}, DType::kBF16);
  // A tensor known only by its size, as in traces of frameworks that do not report shapes.
  TensorId scratch = m.tensor("fc1.scratch", TensorRole::kWorkspace, {});
  m.g.tensors[scratch].shape.clear();
  m.g.tensors[scratch].bytes = 12345;

  Op& fc1 = m.op("fc1", OpType::kLinear, Phase::kForward, {x, w1}, {h, scratch});
  fc1.attrs.in_features = 16;
  fc1.flops = 2 * 8 * 16 * 32;
  fc1.macs = 8 * 16 * 32;
  fc1.time_us = 0.1;
  Op& relu = m.op("relu", OpType::kRelu, Phase::kForward, {h}, {a, mask});
  relu.inplace_capable = true;
  relu.time_us = 1e-7;
  Op& fc2 = m.op("fc2", OpType::kLinear, Phase::kForward, {a, w2}, {logits});
  fc2.attrs.in_features = 32;
  fc2.attrs.has_bias = false;
  fc2.time_us = 123456.789;
  fc2.bytes_read = 7;  // differs from the derived default, so it must be written
  Op& ce = m.op("loss", OpType::kCrossEntropy, Phase::kForward, {logits, y}, {loss});
  ce.time_us = 0.0;
  Op& ce_bwd = m.op("loss_bwd", OpType::kCrossEntropyBwd, Phase::kBackward, {logits, y}, {dlogits});
  ce_bwd.forward_op = 3;
  Op& fc2_bwd = m.op("fc2_bwd", OpType::kOpaque, Phase::kBackward, {dlogits, w2, a, dlogits}, {da, dw2});
  fc2_bwd.forward_op = 2;
  fc2_bwd.bytes_read = m.g.tensors[dlogits].bytes + m.g.tensors[w2].bytes + m.g.tensors[a].bytes;  // distinct
  fc2_bwd.bytes_written = 0;
  fc2_bwd.time_us = 3.0000000000000004;
  OpAttrs& at = fc2_bwd.attrs;
  at.kernel_h = 3, at.kernel_w = 5, at.stride_h = 2, at.stride_w = 4, at.pad_h = 1, at.pad_w = 6, at.groups = 7;
  at.has_bias = true, at.count_include_pad = false, at.in_features = int64_t{1} << 40;
  at.transpose_a = true, at.transpose_b = true, at.scale = 0.125f, at.causal = true;
  at.eps = 1e-12f, at.momentum = 0.3f, at.gelu_tanh = true, at.dropout_p = 0.1f, at.axis = -2;
  at.heads = 12, at.parts = 3, at.lr = 3e-4f, at.momentum_sgd = 0.95f, at.beta1 = 0.8f, at.beta2 = 0.98f;
  at.adam_eps = 1.1754944e-38f, at.weight_decay = 0.01f;
  Op& relu_bwd = m.op("relu_bwd", OpType::kReluBwd, Phase::kBackward, {da, a}, {dh});
  relu_bwd.forward_op = 1;
  relu_bwd.inplace_capable = true;
  m.op("fc1_bwd_weights", OpType::kLinearBwdWeights, Phase::kBackward, {dh, x}, {dw1}).forward_op = 0;
  Op& up1 = m.op("adam.fc1.weight", OpType::kAdamUpdate, Phase::kUpdate, {w1, dw1, m1, v1}, {w1, m1, v1});
  up1.attrs.lr = 1e-3f;
  up1.attrs.weight_decay = 0.01f;
  Op& up2 = m.op("adam.fc2.weight", OpType::kAdamUpdate, Phase::kUpdate, {w2, dw2, m2, v2}, {w2, m2, v2});
  up2.attrs.lr = 1e-3f;
  m.g.loss = loss;
  return m.g;
}

// The hand-built graph exported, as a JSON document the error tests mutate.
Json base_trace() { return Json::parse(to_trace_json(hand_built_graph(), false)); }

// Index of the op / tensor called `name` in a trace document.
size_t index_of(const Json& array, const std::string& name) {
  for (size_t i = 0; i < array.size(); ++i)
    if (array[i]["name"] == name) return i;
  ADD_FAILURE() << "no entry named " << name;
  return 0;
}

// Parses `text` expecting failure; returns the message after checking it is InvalidArgument,
// starts with the source name and is a single line.
std::string error_of(const std::string& text, const std::string& source = "trace.json") {
  Result<Graph> r = parse_trace(text, source);
  EXPECT_FALSE(r.ok()) << "accepted: " << text.substr(0, 300);
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  const std::string& msg = r.status().message();
  EXPECT_EQ(msg.rfind(source + ": ", 0), 0u) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  return msg;
}
std::string error_of_doc(const Json& doc) { return error_of(doc.dump()); }

#define EXPECT_CONTAINS(haystack, needle)               \
  EXPECT_NE((haystack).find(needle), std::string::npos) \
      << "message: " << (haystack) << "\nexpected to contain: " << (needle)

// ---------------------------------------------------------------------------------------------
// Round trips.

TEST(TraceRoundTrip, HandBuiltGraphIsIdenticalAfterExportAndImport) {
  const Graph g = hand_built_graph();
  ASSERT_TRUE(g.validate().ok()) << g.validate().message();
  for (bool pretty : {false, true}) {
    const std::string text = to_trace_json(g, pretty);
    Result<Graph> back = parse_trace(text, "hand.json");
    ASSERT_TRUE(back.ok()) << back.status().message() << "\n" << text;
    EXPECT_EQ(graph_difference(g, *back), "") << text;
    // A second export is byte-identical: nothing drifts across generations.
    EXPECT_EQ(to_trace_json(*back, pretty), text);
  }
}

TEST(TraceRoundTrip, SaveAndLoadThroughAFile) {
  const Graph g = hand_built_graph();
  const std::string path = testing::TempDir() + "ferry_trace_test_" + std::to_string(getpid()) + ".json";
  ASSERT_TRUE(save_trace(g, path).ok());
  Result<Graph> back = load_trace(path);
  std::remove(path.c_str());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(graph_difference(g, *back), "");
}

TEST(TraceRoundTrip, PrettyOutputHasOneTensorOrOpPerLine) {
  const Graph g = hand_built_graph();
  const std::string text = to_trace_json(g, true);
  size_t lines = 0;
  for (char c : text) lines += c == '\n';
  // {, format, version, model, info, "tensors": [, tensors, ], "ops": [, ops, ], loss, }
  EXPECT_EQ(lines, 11 + g.tensors.size() + g.ops.size());
  EXPECT_EQ(to_trace_json(g, false).find('\n'), std::string::npos);
}

TEST(TraceRoundTrip, ExportLeavesDefaultsOutAndWritesShortFloats) {
  const Graph g = hand_built_graph();
  const Json doc = Json::parse(to_trace_json(g, false));
  const Json& x = doc["tensors"][index_of(doc["tensors"], "x")];
  EXPECT_FALSE(x.contains("dtype"));  // f32 is the default
  EXPECT_FALSE(x.contains("grad_of"));
  EXPECT_EQ(doc["tensors"][index_of(doc["tensors"], "y")]["dtype"], "i32");
  const Json& relu = doc["ops"][index_of(doc["ops"], "relu")];
  EXPECT_FALSE(relu.contains("attrs"));
  EXPECT_FALSE(relu.contains("bytes_read"));  // equal to the derived default
  EXPECT_FALSE(relu.contains("flops"));
  EXPECT_EQ(relu["inplace"], true);
  const Json& fc2 = doc["ops"][index_of(doc["ops"], "fc2")];
  EXPECT_EQ(fc2["bytes_read"], 7);
  EXPECT_FALSE(fc2.contains("bytes_written"));
  // Floats read as written in the source, not as 0.0010000000474974513.
  const std::string text = to_trace_json(g, false);
  EXPECT_CONTAINS(text, "\"lr\":0.001");
  EXPECT_EQ(text.find("0.0010000000474974513"), std::string::npos);
}

TEST(TraceRoundTrip, GraphDifferenceNamesTheFirstDifferingField) {
  const Graph g = hand_built_graph();
  EXPECT_EQ(graph_difference(g, g), "");
  Graph h = g;
  h.ops[5].attrs.weight_decay = 0.02f;
  EXPECT_CONTAINS(graph_difference(g, h), "ops[5].attrs.weight_decay");
  h = g;
  h.ops[1].time_us = std::nullopt;
  EXPECT_CONTAINS(graph_difference(g, h), "ops[1].time_us: 1e-07 vs none");
  h = g;
  h.tensors[2].name = "w";
  EXPECT_CONTAINS(graph_difference(g, h), "tensors[2].name: 'fc1.weight' vs 'w'");
  h = g;
  h.info.optimizer = OptimizerKind::kSgd;
  EXPECT_CONTAINS(graph_difference(g, h), "info.optimizer: adam vs sgd");
  h = g;
  h.ops.pop_back();
  EXPECT_CONTAINS(graph_difference(g, h), "ops.size");
  h = g;
  h.ops[6].inplace_capable = false;
  EXPECT_CONTAINS(graph_difference(g, h), "ops[6].inplace_capable");
}

TEST(TraceRoundTrip, ZooModelsAreIdenticalAfterExportAndImport) {
  // CNNs and transformers of every family, SGD with momentum and Adam: between them they use
  // every op type the builder emits, attributes included.
  struct Case {
    const char* model;
    OptimizerKind optimizer;
  };
  for (const Case& c : {Case{"resnet-mini", OptimizerKind::kSgd}, Case{"densenet-mini", OptimizerKind::kAdam},
                        Case{"inception-v4", OptimizerKind::kSgd}, Case{"bert-mini", OptimizerKind::kAdam},
                        Case{"gpt2-mini", OptimizerKind::kSgd}, Case{"vgg16", OptimizerKind::kAdam}}) {
    ModelConfig config;
    config.batch = 2;
    config.train.optimizer = c.optimizer;
    Result<Graph> g = build_model(c.model, config);
    ASSERT_TRUE(g.ok()) << c.model << ": " << g.status().message();
    for (bool pretty : {false, true}) {
      Result<Graph> back = parse_trace(to_trace_json(*g, pretty), c.model);
      ASSERT_TRUE(back.ok()) << c.model << ": " << back.status().message();
      EXPECT_EQ(graph_difference(*g, *back), "") << c.model;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Import semantics.

TEST(TraceImport, ArbitraryIdsAreRemappedToDenseIdsInFileOrder) {
  const std::string text = R"({
    "format": "ferry-trace", "version": 1, "model": "remap",
    "tensors": [
      {"id": 900, "name": "x", "bytes": 64, "role": "input", "shape": [4, 4]},
      {"id": 7, "name": "w", "bytes": 64, "role": "weight", "shape": [4, 4]},
      {"id": 18446744073709551615, "name": "y", "bytes": 64, "role": "activation"},
      {"id": 0, "name": "dy", "bytes": 64, "role": "gradient", "grad_of": 18446744073709551615}
    ],
    "ops": [
      {"name": "mm", "type": "matmul", "phase": "forward", "inputs": [900, 7, 900], "outputs": [18446744073709551615]},
      {"name": "mystery", "type": "opaque", "phase": "backward", "inputs": [18446744073709551615], "outputs": [0]}
    ],
    "loss": 18446744073709551615
  })";
  Result<Graph> r = parse_trace(text, "remap.json");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const Graph& g = *r;
  ASSERT_EQ(g.tensors.size(), 4u);
  EXPECT_EQ(g.tensors[0].name, "x");
  EXPECT_EQ(g.tensors[2].name, "y");
  EXPECT_EQ(g.tensors[3].grad_of, 2);
  EXPECT_EQ(g.ops[0].inputs, (std::vector<TensorId>{0, 1, 0}));
  EXPECT_EQ(g.ops[0].outputs, (std::vector<TensorId>{2}));
  EXPECT_EQ(g.ops[1].outputs, (std::vector<TensorId>{3}));
  EXPECT_EQ(g.loss, 2);
  // Defaults: no info, dtype f32, flops and macs 0, no time, bytes from the distinct tensors.
  EXPECT_EQ(g.info.model, "remap");
  EXPECT_EQ(g.info.batch, 0);
  EXPECT_EQ(g.info.optimizer, OptimizerKind::kSgd);
  EXPECT_EQ(g.tensors[2].dtype, DType::kF32);
  EXPECT_EQ(g.ops[0].flops, 0u);
  EXPECT_FALSE(g.ops[0].time_us.has_value());
  EXPECT_EQ(g.ops[0].bytes_read, 128u);  // x counted once though listed twice
  EXPECT_EQ(g.ops[0].bytes_written, 64u);
  EXPECT_EQ(g.ops[0].attrs, OpAttrs{});
}

TEST(TraceImport, ExtensionFieldsAreIgnored) {
  Json doc = base_trace();
  doc["x_recorded_on"] = "H100";
  doc["ops"][0]["x_stream"] = 7;
  doc["tensors"][0]["x_device"] = {{"kind", "cuda"}};
  doc["ops"][0]["attrs"]["x_algo"] = "winograd";
  Result<Graph> r = parse_trace(doc.dump(), "ext.json");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(graph_difference(hand_built_graph(), *r), "");
}

TEST(TraceImport, TinyExampleFromTheDocsParses) {
  const std::string path = std::string(FERRY_SOURCE_DIR) + "/docs/examples/tiny-trace.json";
  Result<Graph> r = load_trace(path);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const Graph& g = *r;
  EXPECT_TRUE(g.validate().ok());
  EXPECT_NE(g.loss, kNoTensor);
  ASSERT_FALSE(g.ops.empty());
  size_t timed = 0, backward = 0, update = 0;
  for (const Op& op : g.ops) {
    timed += op.time_us.has_value();
    backward += op.phase == Phase::kBackward;
    update += op.phase == Phase::kUpdate;
  }
  EXPECT_EQ(timed, g.ops.size()) << "the example documents measured times for every op";
  EXPECT_GT(backward, 0u);
  EXPECT_EQ(update, 3u);  // one SGD update per weight of the 3-layer MLP
  Result<Graph> again = parse_trace(to_trace_json(g, true), "again.json");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(graph_difference(g, *again), "");
}

// ---------------------------------------------------------------------------------------------
// Errors: one test per class of malformed input.

TEST(TraceErrors, TruncatedJsonReportsTheByteOffset) {
  const std::string text = to_trace_json(hand_built_graph(), true);
  for (size_t cut : {size_t{0}, size_t{1}, text.size() / 3, text.size() - 2}) {
    const std::string msg = error_of(text.substr(0, cut), "cut.json");
    EXPECT_CONTAINS(msg, "cut.json: invalid JSON at byte offset " + std::to_string(cut));
  }
  EXPECT_CONTAINS(error_of("{\"format\": \"ferry-trace\",, }"), "invalid JSON at byte offset 25 (line 1, column 26)");
}

TEST(TraceErrors, NotAFerryTrace) {
  EXPECT_CONTAINS(error_of("[1, 2]"), "trace.json: expected a JSON object at the top level, got an array");
  EXPECT_CONTAINS(error_of("{}"), "missing required field 'format'");
  Json doc = base_trace();
  doc["format"] = "chrome-trace";
  EXPECT_CONTAINS(error_of_doc(doc), "trace.json: format: expected \"ferry-trace\", got \"chrome-trace\"");
}

TEST(TraceErrors, WrongVersion) {
  Json doc = base_trace();
  doc["version"] = 3;
  EXPECT_CONTAINS(error_of_doc(doc),
                  "trace.json: version: unsupported trace version 3 (this build of Ferry reads versions 1 to 2)");
  doc["version"] = 0;
  EXPECT_CONTAINS(error_of_doc(doc), "unsupported trace version 0");
  doc["version"] = "1";
  EXPECT_CONTAINS(error_of_doc(doc), "version: expected an integer, got \"1\"");
  doc.erase("version");
  EXPECT_CONTAINS(error_of_doc(doc), "missing required field 'version'");
}

TEST(TraceErrors, MissingOrMistypedFields) {
  Json doc = base_trace();
  const size_t w1 = index_of(doc["tensors"], "fc1.weight");
  doc["tensors"][w1]["bytes"] = -5;
  EXPECT_CONTAINS(error_of_doc(doc), "tensors[2] ('fc1.weight').bytes: expected a non-negative integer, got -5");
  doc["tensors"][w1]["bytes"] = 2048.0;
  EXPECT_CONTAINS(error_of_doc(doc), "tensors[2] ('fc1.weight').bytes: expected a non-negative integer, got 2048.0");
  doc["tensors"][w1].erase("bytes");
  EXPECT_CONTAINS(error_of_doc(doc), "tensors[2] ('fc1.weight'): missing required field 'bytes'");

  doc = base_trace();
  doc["tensors"][1].erase("name");
  EXPECT_CONTAINS(error_of_doc(doc), "tensors[1]: missing required field 'name'");
  doc = base_trace();
  doc["tensors"][1]["role"] = "parameter";
  EXPECT_CONTAINS(error_of_doc(doc), "tensors[1] ('y').role: expected a tensor role (input, weight, activation");
  doc = base_trace();
  doc["tensors"][1]["dtype"] = "f64";
  EXPECT_CONTAINS(error_of_doc(doc),
                  "tensors[1] ('y').dtype: expected a dtype (f32, f16, bf16, i32, i64, u8), got \"f64\"");
  doc = base_trace();
  doc["ops"] = Json::object();
  EXPECT_CONTAINS(error_of_doc(doc), "trace.json: ops: expected an array, got an object");
  doc = base_trace();
  doc["ops"][2]["phase"] = "backwards";
  EXPECT_CONTAINS(error_of_doc(doc),
                  "ops[2] ('fc2').phase: expected a phase (forward, backward, update), got \"backwards\"");
  doc = base_trace();
  doc["ops"][1]["inplace"] = 1;
  EXPECT_CONTAINS(error_of_doc(doc), "ops[1] ('relu').inplace: expected true or false, got 1");
  doc = base_trace();
  doc["info"]["optimizer"] = "lamb";
  EXPECT_CONTAINS(error_of_doc(doc), "info.optimizer: expected \"sgd\" or \"adam\", got \"lamb\"");
  doc = base_trace();
  doc["info"]["batch"] = -1;
  EXPECT_CONTAINS(error_of_doc(doc), "info.batch: expected a non-negative integer, got -1");
}

TEST(TraceErrors, UnknownFieldsAreRejectedByName) {
  Json doc = base_trace();
  doc["ops"][2]["time_ms"] = 4;
  EXPECT_CONTAINS(error_of_doc(doc), "ops[2] ('fc2'): unknown field 'time_ms' (expected one of: name, type, phase");
  doc = base_trace();
  doc["ops"][2]["attrs"]["stride"] = 2;
  EXPECT_CONTAINS(error_of_doc(doc), "ops[2] ('fc2').attrs: unknown attribute 'stride'");
  doc = base_trace();
  doc["tensors"][0]["size"] = 4;
  EXPECT_CONTAINS(error_of_doc(doc), "tensors[0] ('x'): unknown field 'size'");
  doc = base_trace();
  doc["metadata"] = 4;
  EXPECT_CONTAINS(error_of_doc(doc), "trace.json: unknown field 'metadata'");
}

TEST(TraceErrors, UnknownOpTypeSuggestsOpaque) {
  Json doc = base_trace();
  doc["ops"][1]["type"] = "aten::relu";
  EXPECT_CONTAINS(
      error_of_doc(doc),
      "ops[1] ('relu').type: unknown op type \"aten::relu\" (record ops Ferry does not know as \"opaque\")");
}

TEST(TraceErrors, DuplicateTensorIds) {
  Json doc = base_trace();
  doc["tensors"][4]["id"] = 2;
  EXPECT_CONTAINS(error_of_doc(doc),
                  "tensors[4] ('fc1.out').id: duplicate tensor id 2 (also the id of tensors[2] ('fc1.weight'))");
}

TEST(TraceErrors, ReferencesToUnknownTensors) {
  Json doc = base_trace();
  doc["ops"][2]["inputs"][1] = 57;
  EXPECT_CONTAINS(error_of_doc(doc), "trace.json: ops[2] ('fc2').inputs[1]: 57 is not a tensor id");
  doc = base_trace();
  doc["ops"][2]["outputs"][0] = -3;
  EXPECT_CONTAINS(error_of_doc(doc), "ops[2] ('fc2').outputs[0]: expected a non-negative integer, got -3");
  doc = base_trace();
  doc["tensors"][9]["grad_of"] = 99;
  EXPECT_CONTAINS(error_of_doc(doc), "tensors[9] ('fc2.out.grad').grad_of: 99 is not a tensor id");
  doc = base_trace();
  doc["loss"] = 1000;
  EXPECT_CONTAINS(error_of_doc(doc), "trace.json: loss: 1000 is not a tensor id");
}

TEST(TraceErrors, StructuralErrorsComeFromValidate) {
  // Cycle / use before produce: fc2 moved before the relu that produces its input.
  Json doc = base_trace();
  std::swap(doc["ops"][1], doc["ops"][2]);
  EXPECT_CONTAINS(error_of_doc(doc), "trace.json: op 'fc2' reads tensor 'relu.out' before any op produces it");
  // Two producers.
  doc = base_trace();
  doc["ops"][2]["outputs"][0] = doc["tensors"][index_of(doc["tensors"], "relu.out")]["id"];
  EXPECT_CONTAINS(error_of_doc(doc), "tensor 'relu.out' is produced twice (by 'relu' and 'fc2')");
  // A forward op writing a weight.
  doc = base_trace();
  doc["ops"][0]["outputs"].push_back(doc["tensors"][index_of(doc["tensors"], "fc2.weight")]["id"]);
  EXPECT_CONTAINS(error_of_doc(doc), "op 'fc1' in phase forward writes persistent tensor 'fc2.weight'");
}

TEST(TraceErrors, ForwardOpMustBeAnEarlierForwardOp) {
  Json doc = base_trace();
  doc["ops"][4]["forward_op"] = 4;
  EXPECT_CONTAINS(error_of_doc(doc),
                  "ops[4] ('loss_bwd').forward_op: 4 is not the index of an earlier op (this op is ops[4])");
  doc["ops"][6]["forward_op"] = 5;
  doc["ops"][4]["forward_op"] = 3;
  EXPECT_CONTAINS(error_of_doc(doc),
                  "ops[6] ('relu_bwd').forward_op: ops[5] ('fc2_bwd') is in phase backward, not a forward op");
}

TEST(TraceErrors, BadTimes) {
  Json doc = base_trace();
  doc["ops"][2]["time_us"] = -0.5;
  EXPECT_CONTAINS(error_of_doc(doc),
                  "ops[2] ('fc2').time_us: expected a finite non-negative number of microseconds (at most 1e+15), got -0.5");
  doc["ops"][2]["time_us"] = "12";
  EXPECT_CONTAINS(error_of_doc(doc),
                  "ops[2] ('fc2').time_us: expected a finite non-negative number of microseconds (at most 1e+15), got \"12\"");
  doc["ops"][2]["time_us"] = nullptr;
  EXPECT_CONTAINS(error_of_doc(doc), "got null");
  // JSON has no NaN or infinity: NaN is a syntax error, and so is a literal past double's range.
  std::string text = base_trace().dump();
  const std::string key = "\"time_us\":123456.789";
  ASSERT_NE(text.find(key), std::string::npos);
  std::string nan_text = text;
  nan_text.replace(nan_text.find(key), key.size(), "\"time_us\":NaN");
  EXPECT_CONTAINS(error_of(nan_text), "invalid JSON at byte offset");
  std::string inf_text = text;
  inf_text.replace(inf_text.find(key), key.size(), "\"time_us\":1e999");
  EXPECT_CONTAINS(error_of(inf_text), "trace.json: invalid JSON: number overflow parsing '1e999'");
}

TEST(TraceErrors, BytesMustAgreeWithShapeAndDtype) {
  Json doc = base_trace();
  doc["tensors"][1]["bytes"] = 64;  // y: 8 x i32 = 32 bytes
  EXPECT_CONTAINS(error_of_doc(doc),
                  "tensors[1] ('y').bytes: 64 bytes disagrees with shape [8] of dtype i32 (8 elements x 4 bytes = 32)");
  doc = base_trace();
  doc["tensors"][0]["shape"] = {4, -4};
  EXPECT_CONTAINS(error_of_doc(doc), "tensors[0] ('x').shape[1]: expected a non-negative integer, got -4");
  doc["tensors"][0]["shape"] = Json::array();  // a scalar is one element
  EXPECT_CONTAINS(error_of_doc(doc), "shape [] of dtype f32 (1 elements x 4 bytes = 4)");
}

TEST(TraceErrors, AbsurdSizesAndOverflowingSums) {
  Json doc = base_trace();
  doc["tensors"][0]["shape"] = {int64_t{1} << 32, int64_t{1} << 32};
  EXPECT_CONTAINS(error_of_doc(doc),
                  "tensors[0] ('x').shape: the product of the dimensions exceeds 2^63 - 1 at dimension 1");
  doc = base_trace();
  doc["tensors"][0]["shape"] = Json::array();
  for (int k = 0; k < 17; ++k) doc["tensors"][0]["shape"].push_back(1);
  EXPECT_CONTAINS(error_of_doc(doc), "tensors[0] ('x').shape: 17 dimensions is more than the limit of 16");
  doc = base_trace();
  doc["tensors"][18]["bytes"] = (uint64_t{1} << 50) + 1;
  EXPECT_CONTAINS(error_of_doc(doc), "tensors[18] ('fc1.scratch').bytes: 1125899906842625 bytes is over the limit of");
  doc["tensors"][18]["bytes"] = 18446744073709551615u;
  EXPECT_CONTAINS(error_of_doc(doc), "bytes is over the limit");
  doc["tensors"][18]["bytes"] = 1e30;
  EXPECT_CONTAINS(error_of_doc(doc), "expected a non-negative integer, got 1e+30");

  // Per-op counters whose sum over the ops overflows.
  doc = base_trace();
  doc["ops"][0]["flops"] = uint64_t{1} << 63;
  doc["ops"][3]["flops"] = uint64_t{1} << 63;
  EXPECT_CONTAINS(error_of_doc(doc), "ops[3] ('loss').flops: flops summed over ops[0..3] overflows 64 bits");
  doc = base_trace();
  doc["ops"][2]["bytes_written"] = 18446744073709551615u;  // ops[0] and ops[1] wrote bytes already
  EXPECT_CONTAINS(error_of_doc(doc),
                  "ops[2] ('fc2').bytes_written: bytes_written summed over ops[0..2] overflows 64 bits");

  // Tensors each under the size limit whose total overflows.
  Json many = {{"format", "ferry-trace"}, {"version", 1}, {"model", "huge"}, {"ops", Json::array()}};
  const size_t count = size_t{1} << 14;  // 2^14 tensors of 2^50 bytes sum to 2^64
  for (size_t i = 0; i < count; ++i)
    many["tensors"].push_back(
        {{"id", i}, {"name", fmt::format("t{}", i)}, {"bytes", uint64_t{1} << 50}, {"role", "input"}});
  EXPECT_CONTAINS(error_of_doc(many),
                  "tensors[16383] ('t16383').bytes: the bytes of tensors[0..16383] overflow a 64-bit sum");
}

TEST(TraceErrors, BadAttributes) {
  Json doc = base_trace();
  doc["ops"][0]["attrs"]["stride_h"] = 0;
  EXPECT_CONTAINS(error_of_doc(doc), "ops[0] ('fc1').attrs.stride_h: expected an integer in [1, 2147483647], got 0");
  doc = base_trace();
  doc["ops"][0]["attrs"]["kernel_h"] = 4294967296;
  EXPECT_CONTAINS(error_of_doc(doc), "attrs.kernel_h: expected an integer in [0, 2147483647], got 4294967296");
  doc = base_trace();
  doc["ops"][0]["attrs"]["causal"] = "yes";
  EXPECT_CONTAINS(error_of_doc(doc), "ops[0] ('fc1').attrs.causal: expected true or false, got \"yes\"");
  doc = base_trace();
  doc["ops"][0]["attrs"]["eps"] = 1e300;
  EXPECT_CONTAINS(error_of_doc(doc),
                  "attrs.eps: expected a finite number within the range of a 32-bit float, got 1e+300");
  doc = base_trace();
  doc["ops"][0]["attrs"] = Json::array();
  EXPECT_CONTAINS(error_of_doc(doc), "ops[0] ('fc1').attrs: expected an object, got an array");
}

TEST(TraceErrors, MessagesStayOnOneLineAndShortenLongNames) {
  Json doc = base_trace();
  doc["ops"][2]["name"] = "line1\nline2";
  doc["ops"][2]["inputs"][0] = 999;
  const std::string msg = error_of_doc(doc);
  EXPECT_CONTAINS(msg, "ops[2] ('line1\\x0aline2').inputs[0]: 999 is not a tensor id");
  doc = base_trace();
  doc["ops"][2]["name"] = std::string(500, 'n');
  doc["ops"][2]["inputs"][0] = 999;
  const std::string long_msg = error_of_doc(doc);
  EXPECT_LT(long_msg.size(), 200u) << long_msg;
  EXPECT_CONTAINS(long_msg, "...')");
}

TEST(TraceErrors, FileErrors) {
  Result<Graph> missing = load_trace("/nonexistent/dir/trace.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);  // a wrong path is bad input
  EXPECT_CONTAINS(missing.status().message(), "'/nonexistent/dir/trace.json'");
  Result<Graph> dir = load_trace(testing::TempDir());
  ASSERT_FALSE(dir.ok());
  EXPECT_CONTAINS(dir.status().message(), "it is a directory, not a regular file");
  Result<Graph> zero = load_trace("/dev/zero");
  EXPECT_EQ(zero.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(zero.status().message(), "a character device");
  Status st = save_trace(hand_built_graph(), "/nonexistent/dir/out.json");
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_CONTAINS(st.message(), "cannot write trace '/nonexistent/dir/out.json'");

  // A file over the size limit is refused before it is read (a sparse file: no disk is used).
  const std::string big = testing::TempDir() + "ferry_trace_big_" + std::to_string(getpid()) + ".json";
  { std::ofstream(big) << "{"; }
  std::filesystem::resize_file(big, kMaxTraceTextBytes + 1);
  Result<Graph> too_big = load_trace(big);
  std::remove(big.c_str());
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(too_big.status().message(),
                  "trace '" + big + "' is 1073741825 bytes, over the limit of 1073741824 bytes (1.00 GiB)");

  const std::string path = testing::TempDir() + "ferry_trace_bad_" + std::to_string(getpid()) + ".json";
  { std::ofstream(path) << "{\"format\": \"ferry-trace\", \"version\": 3}"; }
  Result<Graph> bad = load_trace(path);
  std::remove(path.c_str());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(bad.status().message(), path + ": version: unsupported trace version 3");
}

}  // namespace
}  // namespace ferry
