// Convolution kernels against the double reference: forward values, backward-data and
// backward-weights against finite differences, over shapes that exercise oneDNN's different
// paths (plain first-layer input, blocked layouts with padded channels, stride 2 with negative
// right padding, 1x1, non-square kernels and inputs, batch 1, groups, bias), with direct
// convolutions and, on 3x3 stride-1 shapes, with Winograd (Note [Winograd] in kernels_conv.cc).
#include <gtest/gtest.h>

#include "backend/backend_test_support.h"
#include "backend/reference_ops.h"

namespace ferry {
namespace {

using testing::expect_forward;
using testing::expect_gradient;
using testing::GraphMaker;
using testing::Runner;

struct ConvCase {
  const char* name;
  reference::ConvShape shape;
  bool bias;
  bool blocked_input;  // feed x through an identity 1x1 conv so it arrives in a blocked layout
};
void PrintTo(const ConvCase& c, std::ostream* os) { *os << c.name; }

bool is_winograd(const std::string& implementation) { return implementation.find("wino") != std::string::npos; }

// Builds conv + its two backward ops for `cc`, runs them compiled with `algorithm`, and checks
// them against the reference. Sets `winograd` to whether all three kernels ran as Winograd.
void check_conv(const ConvCase& cc, ConvAlgorithm algorithm, bool* winograd = nullptr) {
  const reference::ConvShape& s = cc.shape;
  GraphMaker m;
  TensorId x0 = m.input("x0", {s.n, s.c, s.h, s.w});
  TensorId x = x0, ident = kNoTensor;
  if (cc.blocked_input) {
    auto b = m.blocked_copy("x", x0);
    x = b.y;
    ident = b.w;
  }
  TensorId w = m.weight("w", {s.o, s.c / s.groups, s.kh, s.kw});
  TensorId b = cc.bias ? m.weight("b", {s.o}) : kNoTensor;
  TensorId y = m.tensor("y", {s.n, s.o, s.oh(), s.ow()});
  OpAttrs a;
  a.kernel_h = static_cast<int32_t>(s.kh);
  a.kernel_w = static_cast<int32_t>(s.kw);
  a.stride_h = static_cast<int32_t>(s.sh);
  a.stride_w = static_cast<int32_t>(s.sw);
  a.pad_h = static_cast<int32_t>(s.ph);
  a.pad_w = static_cast<int32_t>(s.pw);
  a.groups = static_cast<int32_t>(s.groups);
  a.has_bias = cc.bias;
  std::vector<TensorId> conv_in = {x, w};
  if (cc.bias) conv_in.push_back(b);
  m.op("conv", OpType::kConv2d, conv_in, {y}, a);
  auto dy = m.grad_input("dy", y);
  TensorId dx = m.grad("dx", x);
  TensorId dw = m.grad("dw", w);
  TensorId db = cc.bias ? m.grad("db", b) : kNoTensor;
  m.op("conv.bwd_data", OpType::kConvBwdData, {dy.grad, w}, {dx}, a, Phase::kBackward);
  std::vector<TensorId> wgrads = {dw};
  if (cc.bias) wgrads.push_back(db);
  m.op("conv.bwd_weights", OpType::kConvBwdWeights, {dy.grad, x}, wgrads, a, Phase::kBackward);

  Runner r(m.g, BackendOptions{.conv_algorithm = algorithm});
  ASSERT_TRUE(r.ok());
  if (winograd) {
    *winograd = true;
    for (const Op& op : m.g.ops)
      if (op.name.rfind("conv", 0) == 0) *winograd = *winograd && is_winograd(r.cg().implementation(op.id));
  }
  const size_t nx = static_cast<size_t>(s.n * s.c * s.h * s.w);
  const size_t nw = static_cast<size_t>(s.o * (s.c / s.groups) * s.kh * s.kw);
  const size_t ny = static_cast<size_t>(s.n * s.o * s.oh() * s.ow());
  const float wscale = 1.0f / std::sqrt(static_cast<float>(nw / static_cast<size_t>(s.o)));
  std::vector<float> xv = testing::random_vector(nx, 1), wv = testing::random_vector(nw, 2, -wscale, wscale);
  std::vector<float> bv = testing::random_vector(static_cast<size_t>(s.o), 3), rv = testing::random_vector(ny, 4);
  r.set(x0, xv);
  if (cc.blocked_input) r.set(ident, testing::identity_1x1(s.c));
  r.set(w, wv);
  if (cc.bias) r.set(b, bv);
  r.set(dy.src, rv);
  r.set(dy.zero, std::vector<float>(ny, 0.0f));
  r.run_all();

  const auto xd = testing::to_double(xv), wd = testing::to_double(wv), bd = testing::to_double(bv);
  const auto rd = testing::to_double(rv);
  const std::vector<double>* bias_ptr = cc.bias ? &bd : nullptr;
  expect_forward(r.get(y), reference::conv2d(s, xd, wd, bias_ptr), "y");
  expect_gradient(
      r.get(dx), xd, [&](const std::vector<double>& v) { return reference::conv2d(s, v, wd, bias_ptr); }, rd, "dx");
  expect_gradient(
      r.get(dw), wd, [&](const std::vector<double>& v) { return reference::conv2d(s, xd, v, bias_ptr); }, rd, "dw");
  if (cc.bias)
    expect_gradient(
        r.get(db), bd, [&](const std::vector<double>& v) { return reference::conv2d(s, xd, wd, &v); }, rd, "db");

  // Layout invariants: gradients share their tensor's layout and size; padding stays zero.
  EXPECT_EQ(r.cg().layout(dx), r.cg().layout(x));
  EXPECT_EQ(r.cg().tensor_bytes(dw), r.cg().tensor_bytes(w));
  EXPECT_EQ(r.cg().layout(dw), r.cg().layout(w));
  for (TensorId t : {y, dy.grad, dx, dw}) r.expect_canonical(t);
  for (TensorId t : {y, dx, dw})
    EXPECT_GE(r.cg().tensor_bytes(t), static_cast<uint64_t>(m.g.tensor(t).numel()) * 4) << m.g.tensor(t).name;
}

class ConvTest : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvTest, ForwardAndBackwardMatchReference) {
  bool winograd = true;
  check_conv(GetParam(), ConvAlgorithm::kDirect, &winograd);
  EXPECT_FALSE(winograd) << "--conv-algo direct must never run Winograd";
}

// Winograd F(4x4, 3x3) on 3x3 stride-1 shapes (tiles cut by the border, odd sizes, bias, channels
// that are and are not multiples of 16), against the same reference and tolerances.
class ConvWinogradTest : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvWinogradTest, ForwardAndBackwardMatchReference) {
  bool winograd = false;
  check_conv(GetParam(), ConvAlgorithm::kWinograd, &winograd);
  if (!winograd) GTEST_SKIP() << "oneDNN has no Winograd kernel for this shape on this CPU (it needs AVX-512)";
}

using CS = reference::ConvShape;
INSTANTIATE_TEST_SUITE_P(Shapes, ConvTest,
                         ::testing::Values(
                             //                      n  c   h   w   o  kh kw sh sw ph pw g
                             ConvCase{"k3_pad1", CS{2, 16, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1}, false, true},
                             ConvCase{"first_layer_c3_s2", CS{2, 3, 9, 9, 16, 3, 3, 2, 2, 1, 1, 1}, false, false},
                             ConvCase{"c24_s2_padded_channels", CS{2, 24, 7, 7, 24, 3, 3, 2, 2, 1, 1, 1}, false, true},
                             ConvCase{"k1_s2_even_batch1", CS{1, 16, 8, 8, 32, 1, 1, 2, 2, 0, 0, 1}, false, true},
                             ConvCase{"k1x7_nonsquare_input", CS{2, 8, 5, 9, 8, 1, 7, 1, 1, 0, 3, 1}, false, true},
                             ConvCase{"k7x1", CS{1, 16, 9, 6, 16, 7, 1, 1, 1, 3, 0, 1}, false, true},
                             ConvCase{"groups2_bias", CS{2, 16, 6, 6, 32, 3, 3, 1, 1, 1, 1, 2}, true, true},
                             ConvCase{"depthwise", CS{2, 8, 6, 5, 8, 3, 3, 1, 1, 1, 1, 8}, false, true},
                             ConvCase{"c3_o5_bias_plain", CS{1, 3, 5, 7, 5, 3, 3, 1, 1, 1, 1, 1}, true, false}),
                         [](const ::testing::TestParamInfo<ConvCase>& info) { return std::string(info.param.name); });

INSTANTIATE_TEST_SUITE_P(Shapes, ConvWinogradTest,
                         ::testing::Values(
                             //                      n  c   h   w   o  kh kw sh sw ph pw g
                             ConvCase{"k3_pad1", CS{2, 16, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1}, false, true},
                             ConvCase{"odd_9x7_c32_o16", CS{3, 32, 9, 7, 16, 3, 3, 1, 1, 1, 1, 1}, false, true},
                             ConvCase{"no_pad_bias", CS{1, 16, 10, 10, 32, 3, 3, 1, 1, 0, 0, 1}, true, true},
                             ConvCase{"c24_plain_input", CS{2, 24, 6, 6, 24, 3, 3, 1, 1, 1, 1, 1}, false, false}),
                         [](const ::testing::TestParamInfo<ConvCase>& info) { return std::string(info.param.name); });

// Same inputs and thread count give bitwise identical results (no atomics in reductions), with
// either algorithm.
class ConvDeterminism : public ::testing::TestWithParam<ConvAlgorithm> {};

TEST_P(ConvDeterminism, BackwardWeightsIsBitwiseReproducible) {
  const CS s{4, 16, 10, 10, 16, 3, 3, 1, 1, 1, 1, 1};
  GraphMaker m;
  TensorId x0 = m.input("x0", {s.n, s.c, s.h, s.w});
  auto blk = m.blocked_copy("x", x0);
  TensorId w = m.weight("w", {s.o, s.c, 3, 3});
  TensorId y = m.tensor("y", {s.n, s.o, s.oh(), s.ow()});
  OpAttrs a;
  a.kernel_h = a.kernel_w = 3;
  a.pad_h = a.pad_w = 1;
  m.op("conv", OpType::kConv2d, {blk.y, w}, {y}, a);
  auto dy = m.grad_input("dy", y);
  TensorId dw = m.grad("dw", w);
  m.op("bwd_w", OpType::kConvBwdWeights, {dy.grad, blk.y}, {dw}, a, Phase::kBackward);
  Runner r(m.g, BackendOptions{.conv_algorithm = GetParam()});
  ASSERT_TRUE(r.ok());
  const size_t nx = static_cast<size_t>(s.n * s.c * s.h * s.w), ny = static_cast<size_t>(s.n * s.o * 100);
  r.set(x0, testing::random_vector(nx, 11));
  r.set(blk.w, testing::identity_1x1(s.c));
  r.set(w, testing::random_vector(static_cast<size_t>(s.o * s.c * 9), 12));
  r.set(dy.src, testing::random_vector(ny, 13));
  r.set(dy.zero, std::vector<float>(ny, 0.0f));
  r.run_all();
  std::vector<std::byte> first = r.raw(dw);
  r.run_all();
  EXPECT_TRUE(first == r.raw(dw));
}

INSTANTIATE_TEST_SUITE_P(Algorithms, ConvDeterminism,
                         ::testing::Values(ConvAlgorithm::kDirect, ConvAlgorithm::kWinograd),
                         [](const ::testing::TestParamInfo<ConvAlgorithm>& info) {
                           return std::string(to_string(info.param));
                         });

}  // namespace
}  // namespace ferry
