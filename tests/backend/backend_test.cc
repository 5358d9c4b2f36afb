// The backend interface on the CPU backend: memory and copies, layout conversions, size and
// layout invariants of compiled graphs, error reporting.
#include <gtest/gtest.h>

#include "backend/backend_test_support.h"
#include "graph/builder.h"
#include "graph/zoo/zoo.h"

namespace ferry {
namespace {

using testing::GraphMaker;
using testing::Runner;

TEST(BackendTest, MakeBackendByName) {
  auto cpu = make_backend("cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status().message();
  EXPECT_EQ((*cpu)->name(), "cpu");
  auto bad = make_backend("tpu");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("cpu"), std::string::npos);
}

TEST(BackendTest, ConvAlgorithmNames) {
  for (ConvAlgorithm a : {ConvAlgorithm::kAuto, ConvAlgorithm::kDirect, ConvAlgorithm::kWinograd})
    EXPECT_EQ(parse_conv_algorithm(to_string(a)).value(), a);
  Result<ConvAlgorithm> bad = parse_conv_algorithm("fft");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("auto, direct or winograd"), std::string::npos) << bad.status().message();
}

// Note [Winograd]: `auto` runs a convolution kernel as Winograd only for 3x3 stride-1 layers and
// only when its scratch is at most 1/32 of the graph's logical tensor bytes; ResNet-50 at batch 8
// gets some, resnet-mini (whose Winograd scratch would dwarf its tensors) none.
TEST(BackendTest, AutoConvAlgorithmTakesWinogradWhereItsScratchIsSmall) {
  auto winograd_kernels = [](const Graph& g, ConvAlgorithm algo) {
    auto be = std::move(make_backend("cpu", BackendOptions{.conv_algorithm = algo})).value();
    auto cg = std::move(be->compile(g)).value();
    uint64_t logical = 0;
    for (const Tensor& t : g.tensors) logical += static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype);
    int count = 0;
    for (const Op& op : g.ops) {
      if (cg->implementation(op.id).find("wino") == std::string::npos) continue;
      ++count;
      EXPECT_TRUE(op.attrs.kernel_h == 3 && op.attrs.kernel_w == 3 && op.attrs.stride_h == 1 && op.attrs.stride_w == 1)
          << op.name;
      if (algo == ConvAlgorithm::kAuto) {
        EXPECT_LE(cg->scratch_bytes(op.id) * 32, logical) << op.name;
      }
    }
    return count;
  };
  ModelConfig c;
  c.batch = 8;
  const Graph r50 = std::move(build_model("resnet50", c)).value();
  c.batch = 4;
  const Graph mini = std::move(build_model("resnet-mini", c)).value();
  if (winograd_kernels(mini, ConvAlgorithm::kWinograd) == 0)
    GTEST_SKIP() << "oneDNN has no Winograd kernel on this CPU (it needs AVX-512)";
  EXPECT_EQ(winograd_kernels(mini, ConvAlgorithm::kDirect), 0);
  EXPECT_EQ(winograd_kernels(mini, ConvAlgorithm::kAuto), 0);
  EXPECT_GT(winograd_kernels(r50, ConvAlgorithm::kAuto), 0);
  EXPECT_EQ(winograd_kernels(r50, ConvAlgorithm::kDirect), 0);
}

TEST(BackendTest, AllocateAndCopyRoundTrip) {
  auto be = std::move(make_backend("cpu")).value();
  auto region = be->allocate(1000);
  ASSERT_TRUE(region.ok());
  EXPECT_EQ(region->address % Backend::kDeviceAlignment, 0u);
  std::vector<std::byte> src(1000), dst(600);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 7);
  ASSERT_TRUE(be->copy_to_device(*region, src).ok());
  ASSERT_TRUE(be->copy_on_device(*region + 400, *region, 600).ok());  // overlapping move
  ASSERT_TRUE(be->copy_to_host(dst, *region + 400).ok());
  ASSERT_TRUE(be->synchronize().ok());
  EXPECT_TRUE(std::equal(dst.begin(), dst.end(), src.begin()));
  be->free(*region);
  EXPECT_EQ(be->allocate(0).status().code(), StatusCode::kInvalidArgument);
}

// A blocked tensor with padded channels: from_plain then to_plain returns the values, storage is
// larger than the plain bytes, and wrong host sizes are rejected with the numbers.
TEST(BackendTest, PlainConversionRoundTripsThroughBlockedLayouts) {
  GraphMaker m;
  TensorId x = m.input("x", {2, 3, 5, 5});
  TensorId w = m.weight("w", {24, 3, 3, 3});
  TensorId y = m.tensor("y", {2, 24, 5, 5});
  OpAttrs a;
  a.kernel_h = a.kernel_w = 3;
  a.pad_h = a.pad_w = 1;
  m.op("conv", OpType::kConv2d, {x, w}, {y}, a);
  Runner r(m.g);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.cg().layout(x), "abcd");  // data inputs are plain
  for (TensorId t : {x, w, y}) {
    auto v = testing::random_vector(static_cast<size_t>(m.g.tensor(t).numel()), 400 + static_cast<uint32_t>(t));
    r.set(t, v);
    EXPECT_EQ(r.get(t), v) << m.g.tensor(t).name << " layout " << r.cg().layout(t);
    r.expect_canonical(t);
  }
  EXPECT_GE(r.cg().tensor_bytes(y), 2u * 24 * 25 * 4);
  std::vector<float> small(10);
  Status st = r.cg().to_plain(y, r.ptr(y), std::as_writable_bytes(std::span(small)));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("4800"), std::string::npos) << st.message();
}

TEST(BackendTest, OpaqueOpsCannotBeCompiled) {
  GraphMaker m;
  TensorId x = m.input("x", {4});
  TensorId y = m.tensor("y", {4});
  m.op("mystery", OpType::kOpaque, {x}, {y});
  auto be = std::move(make_backend("cpu")).value();
  auto cg = be->compile(m.g);
  EXPECT_EQ(cg.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(cg.status().message().find("mystery"), std::string::npos) << cg.status().message();
}

TEST(BackendTest, BadAttributesAreInvalidArguments) {
  GraphMaker m;
  TensorId x = m.input("x", {1, 4, 6, 6});
  TensorId w = m.weight("w", {4, 4, 3, 3});
  TensorId y = m.tensor("y", {1, 4, 6, 6});
  OpAttrs a;  // kernel 0x0: a graph without attributes (e.g. imported from a trace)
  m.op("conv", OpType::kConv2d, {x, w}, {y}, a);
  auto be = std::move(make_backend("cpu")).value();
  auto cg = be->compile(m.g);
  EXPECT_EQ(cg.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(cg.status().message().find("'conv'"), std::string::npos) << cg.status().message();
}

// Sizes oneDNN cannot handle (it failed, spun for minutes or crashed far above 2^31 elements)
// are refused before it sees them, with the limit in the message.
TEST(BackendTest, TensorsOver2To31ElementsAreRefusedBeforeOneDnnSeesThem) {
  ModelConfig c;
  c.batch = 100000000;
  Result<Graph> g = build_model("resnet18", c);
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto be = std::move(make_backend("cpu")).value();
  auto cg = be->compile(*g);
  ASSERT_EQ(cg.status().code(), StatusCode::kInvalidArgument) << cg.status().message();
  EXPECT_NE(cg.status().message().find("2^31 - 1 = 2147483647 elements"), std::string::npos) << cg.status().message();
  EXPECT_NE(cg.status().message().find("'image'"), std::string::npos) << cg.status().message();
  GraphMaker m;
  TensorId x = m.input("x", {1 << 16, 1 << 15});  // exactly 2^31 elements
  TensorId y = m.tensor("y", {1 << 16, 1 << 15});
  m.op("relu", OpType::kRelu, {x}, {y});
  EXPECT_EQ(be->compile(m.g).status().code(), StatusCode::kInvalidArgument);
}

// A tensor whose shape contradicts what the op's other tensors imply (a trace with inconsistent
// shapes) is bad input in the user's terms, not an internal error about oneDNN's types; and the
// op is named once.
TEST(BackendTest, ContradictoryShapesAreInvalidArgumentsNamingTheTensor) {
  ModelConfig c;
  c.batch = 2;
  Result<Graph> g = build_model("resnet-mini", c);
  ASSERT_TRUE(g.ok());
  Graph bad = *g;
  Tensor* gamma = nullptr;
  for (const Op& op : bad.ops)
    if (op.type == OpType::kBatchNorm) {
      gamma = &bad.tensors[static_cast<size_t>(op.inputs[1])];
      break;
    }
  ASSERT_NE(gamma, nullptr);
  gamma->shape[0] *= 2;
  gamma->bytes *= 2;
  ASSERT_TRUE(bad.validate().ok());
  auto be = std::move(make_backend("cpu")).value();
  auto cg = be->compile(bad);
  ASSERT_EQ(cg.status().code(), StatusCode::kInvalidArgument) << cg.status().message();
  const std::string& msg = cg.status().message();
  EXPECT_NE(msg.find("'" + gamma->name + "' has shape [" + std::to_string(gamma->shape[0]) + "]"), std::string::npos)
      << msg;
  EXPECT_EQ(msg.find("dnnl"), std::string::npos) << msg;

  // Arity errors name the op once (compile() adds it), not twice.
  GraphMaker m;
  TensorId x = m.input("x", {1, 4, 6, 6});
  TensorId y = m.tensor("y", {1, 4, 6, 6});
  m.op("lonely_conv", OpType::kConv2d, {x}, {y});
  auto arity = be->compile(m.g);
  ASSERT_EQ(arity.status().code(), StatusCode::kInvalidArgument);
  const std::string& am = arity.status().message();
  EXPECT_EQ(am.find("lonely_conv"), am.rfind("lonely_conv")) << am;
}

TEST(BackendTest, RunRejectsWrongArguments) {
  GraphMaker m;
  TensorId x = m.input("x", {2, 8});
  TensorId y = m.tensor("y", {2, 8});
  m.op("relu", OpType::kRelu, {x}, {y});
  Runner r(m.g);
  ASSERT_TRUE(r.ok());
  std::vector<DevicePtr> one = {r.ptr(x)}, none;
  EXPECT_EQ(r.cg().run(0, one, none, {}, {}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.cg().run(5, one, one, {}, {}).code(), StatusCode::kInvalidArgument);
  std::vector<DevicePtr> null = {DevicePtr{}};
  EXPECT_EQ(r.cg().run(0, one, null, {}, {}).code(), StatusCode::kInvalidArgument);
}

// A whole small CNN from the graph builder compiles and runs, and the sizes the backend reports
// satisfy the invariants the executor relies on.
TEST(BackendTest, BuilderGraphRunsAndSizesAreConsistent) {
  GraphBuilder b(GraphInfo{.model = "tiny", .batch = 2});
  TensorId x = b.input("image", {2, 3, 12, 12});
  TensorId lab = b.labels("label", {2});
  TensorId h = b.relu("relu1", b.batch_norm("bn1", b.conv2d("conv1", x, 24, 3, 1, 1)));
  TensorId p = b.max_pool("pool", h, 3, 2, 1);
  TensorId c2 = b.conv2d("conv2", p, 24, 3, 1, 1);
  TensorId s = b.add("add", c2, p);
  TensorId cat = b.concat("cat", {s, b.conv2d("conv3", s, 16, 1)});
  TensorId logits = b.linear("fc", b.global_avg_pool("gap", cat), 5);
  b.cross_entropy("loss", logits, lab);
  auto g = std::move(b).finish(TrainOptions{});
  ASSERT_TRUE(g.ok()) << g.status().message();
  Runner r(*g);
  ASSERT_TRUE(r.ok());
  for (const Tensor& t : g->tensors) {
    if (t.role == TensorRole::kInput) continue;
    if (t.grad_of != kNoTensor) {
      EXPECT_EQ(r.cg().tensor_bytes(t.id), r.cg().tensor_bytes(t.grad_of)) << t.name;
      EXPECT_EQ(r.cg().layout(t.id), r.cg().layout(t.grad_of)) << t.name;
    }
    EXPECT_GE(r.cg().tensor_bytes(t.id), t.bytes) << t.name;
  }
  for (const Op& op : g->ops) {
    if (op.inplace_capable) {
      EXPECT_EQ(r.cg().tensor_bytes(op.inputs[0]), r.cg().tensor_bytes(op.outputs[0])) << op.name;
    }
  }
  EXPECT_EQ(r.cg().all_scratch_bytes().size(), g->ops.size());
  EXPECT_EQ(r.cg().all_tensor_bytes().size(), g->tensors.size());

  for (const Tensor& t : g->tensors) {
    if (t.role == TensorRole::kWeight)
      r.set(t.id,
            testing::random_vector(static_cast<size_t>(t.numel()), 500 + static_cast<uint32_t>(t.id), -0.3f, 0.3f));
    if (t.role == TensorRole::kOptimizerState) r.set(t.id, std::vector<float>(static_cast<size_t>(t.numel()), 0.0f));
  }
  r.set(x, testing::random_vector(2 * 3 * 12 * 12, 499));
  r.set(lab, std::vector<int32_t>{1, 4});
  r.run_all();
  for (const Tensor& t : g->tensors)
    if (t.dtype == DType::kF32 && t.role != TensorRole::kInput) {
      for (float v : r.get(t.id)) ASSERT_TRUE(std::isfinite(v)) << t.name;
      r.expect_canonical(t.id);
    }
  // The loss of a 5-class problem with small random weights is near log(5).
  EXPECT_NEAR(r.get(g->loss)[0], std::log(5.0f), 1.0f);
}

}  // namespace
}  // namespace ferry
