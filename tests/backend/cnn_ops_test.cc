// CNN kernels other than convolution against the double reference: batch norm, relu, pooling,
// global pooling, linear, concat, add, grad_accumulate, cross-entropy. Inputs arrive in blocked
// layouts (through an identity 1x1 convolution) where the op would see them in a real CNN, with
// channel counts that are and are not multiples of the block. In-place capable ops are also run
// with outputs[0] == inputs[0] and must give bitwise the same result.
#include <gtest/gtest.h>

#include "backend/backend_test_support.h"
#include "backend/reference_ops.h"

namespace ferry {
namespace {

using reference::Vec;
using testing::expect_forward;
using testing::expect_gradient;
using testing::GraphMaker;
using testing::Runner;

// x0 (plain input) -> [identity 1x1 conv] -> x, so that x has the layout a convolution gives.
struct Source {
  TensorId x0 = kNoTensor, x = kNoTensor, ident = kNoTensor;
  std::vector<int64_t> shape;
  size_t numel() const {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    return n;
  }
};

Source make_source(GraphMaker& m, std::vector<int64_t> shape, bool blocked, const std::string& name = "x") {
  Source s;
  s.shape = shape;
  s.x0 = m.input(name + "0", shape);
  s.x = s.x0;
  if (blocked) {
    auto b = m.blocked_copy(name, s.x0);
    s.x = b.y;
    s.ident = b.w;
  }
  return s;
}

void set_source(Runner& r, const Source& s, const std::vector<float>& values) {
  r.set(s.x0, values);
  if (s.ident != kNoTensor) r.set(s.ident, testing::identity_1x1(s.shape[1]));
}

void set_grad(Runner& r, const GraphMaker::GradIn& g, const std::vector<float>& values) {
  r.set(g.src, values);
  r.set(g.zero, std::vector<float>(values.size(), 0.0f));
}

// Runs `op` again in place (outputs[0] = inputs[0]) and checks it reproduces `expected` exactly.
void expect_inplace_matches(Runner& r, OpId op, const std::vector<float>& expected, const RunContext& ctx = {}) {
  const Op& o = r.graph().op(op);
  Status st = r.run(op, ctx, /*inplace=*/true);
  ASSERT_TRUE(st.ok()) << st.message();
  std::vector<float> got = r.get(o.inputs[0]);
  EXPECT_TRUE(got == expected) << "op '" << o.name << "' in place differs from out of place";
}

// ---------------------------------------------------------------------------------------------
// Batch norm

struct BnCase {
  const char* name;
  std::vector<int64_t> shape;
  bool blocked;
};
void PrintTo(const BnCase& c, std::ostream* os) { *os << c.name; }
class BatchNormTest : public ::testing::TestWithParam<BnCase> {};

TEST_P(BatchNormTest, ForwardAndBackward) {
  const BnCase& bc = GetParam();
  GraphMaker m;
  Source src = make_source(m, bc.shape, bc.blocked);
  const int64_t n = bc.shape[0], c = bc.shape[1], hw = bc.shape[2] * bc.shape[3];
  TensorId gamma = m.weight("gamma", {c}), beta = m.weight("beta", {c});
  TensorId y = m.tensor("y", bc.shape), mean = m.tensor("mean", {c}), var = m.tensor("var", {c});
  OpAttrs a;
  a.eps = 1e-3f;
  m.op("bn", OpType::kBatchNorm, {src.x, gamma, beta}, {y, mean, var}, a);
  auto dy = m.grad_input("dy", y);
  TensorId dx = m.grad("dx", src.x), dg = m.grad("dgamma", gamma), dbeta = m.grad("dbeta", beta);
  m.op("bn.bwd", OpType::kBatchNormBwd, {dy.grad, src.x, gamma, mean, var}, {dx, dg, dbeta}, a, Phase::kBackward);
  Runner r(m.g);
  ASSERT_TRUE(r.ok());
  auto xv = testing::random_vector(src.numel(), 21, -2.0f, 3.0f);
  auto gv = testing::random_vector(static_cast<size_t>(c), 22, 0.5f, 1.5f);
  auto bv = testing::random_vector(static_cast<size_t>(c), 23);
  auto rv = testing::random_vector(src.numel(), 24);
  set_source(r, src, xv);
  r.set(gamma, gv);
  r.set(beta, bv);
  set_grad(r, dy, rv);
  r.run_all();

  const Vec xd = testing::to_double(xv), gd = testing::to_double(gv), bd = testing::to_double(bv);
  const Vec rd = testing::to_double(rv);
  const double eps = 1e-3;
  auto ref = reference::batch_norm(xd, n, c, hw, gd, bd, eps);
  expect_forward(r.get(y), ref.y, "y");
  expect_forward(r.get(mean), ref.mean, "mean");
  expect_forward(r.get(var), ref.var, "var");
  expect_gradient(
      r.get(dx), xd, [&](const Vec& v) { return reference::batch_norm(v, n, c, hw, gd, bd, eps).y; }, rd, "dx");
  expect_gradient(
      r.get(dg), gd, [&](const Vec& v) { return reference::batch_norm(xd, n, c, hw, v, bd, eps).y; }, rd, "dgamma");
  expect_gradient(
      r.get(dbeta), bd, [&](const Vec& v) { return reference::batch_norm(xd, n, c, hw, gd, v, eps).y; }, rd, "dbeta");
  EXPECT_EQ(r.cg().layout(y), r.cg().layout(src.x));
  r.expect_canonical(y);
  r.expect_canonical(dx);
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormTest,
                         ::testing::Values(BnCase{"blocked_c16", {3, 16, 4, 4}, true},
                                           BnCase{"blocked_c24_padded", {2, 24, 5, 3}, true},
                                           BnCase{"plain_c3_batch1", {1, 3, 6, 5}, false}),
                         [](const auto& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------------------------
// ReLU and GELU

struct EltCase {
  const char* name;
  OpType fwd, bwd;
  bool gelu_tanh;
};
void PrintTo(const EltCase& c, std::ostream* os) { *os << c.name; }
class EltwiseTest : public ::testing::TestWithParam<EltCase> {};

TEST_P(EltwiseTest, ForwardBackwardAndInPlace) {
  const EltCase& ec = GetParam();
  const std::vector<int64_t> shape = {2, 24, 3, 5};
  GraphMaker m;
  Source src = make_source(m, shape, /*blocked=*/true);
  TensorId y = m.tensor("y", shape);
  OpAttrs a;
  a.gelu_tanh = ec.gelu_tanh;
  OpId fwd = m.op("f", ec.fwd, {src.x}, {y}, a);
  auto dy = m.grad_input("dy", y);
  TensorId dx = m.grad("dx", src.x);
  const bool relu = ec.fwd == OpType::kRelu;
  OpId bwd = m.op("f.bwd", ec.bwd, {dy.grad, relu ? y : src.x}, {dx}, a, Phase::kBackward);
  Runner r(m.g);
  ASSERT_TRUE(r.ok());
  auto xv = testing::random_away_from_zero(src.numel(), 31);
  for (float& v : xv) v *= 2.5f;
  auto rv = testing::random_vector(src.numel(), 32);
  set_source(r, src, xv);
  set_grad(r, dy, rv);
  r.run_all();
  auto f = [&](const Vec& v) { return relu ? reference::relu(v) : reference::gelu(v, ec.gelu_tanh); };
  const Vec xd = testing::to_double(xv);
  std::vector<float> yv = r.get(y), dxv = r.get(dx);
  expect_forward(yv, f(xd), "y");
  expect_gradient(dxv, xd, f, testing::to_double(rv), "dx");
  r.expect_canonical(y);
  r.expect_canonical(dx);
  expect_inplace_matches(r, bwd, dxv);  // dy's buffer becomes dx (needs y/x intact: run before fwd)
  expect_inplace_matches(r, fwd, yv);
}

INSTANTIATE_TEST_SUITE_P(Ops, EltwiseTest,
                         ::testing::Values(EltCase{"relu", OpType::kRelu, OpType::kReluBwd, false},
                                           EltCase{"gelu_tanh", OpType::kGelu, OpType::kGeluBwd, true},
                                           EltCase{"gelu_erf", OpType::kGelu, OpType::kGeluBwd, false}),
                         [](const auto& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------------------------
// Pooling

struct PoolCase {
  const char* name;
  OpType fwd, bwd;
  reference::PoolShape shape;
  bool count_include_pad;
  bool blocked;
};
void PrintTo(const PoolCase& c, std::ostream* os) { *os << c.name; }
class PoolTest : public ::testing::TestWithParam<PoolCase> {};

TEST_P(PoolTest, ForwardAndBackward) {
  const PoolCase& pc = GetParam();
  const auto& s = pc.shape;
  const bool max = pc.fwd == OpType::kMaxPool;
  GraphMaker m;
  Source src = make_source(m, {s.n, s.c, s.h, s.w}, pc.blocked);
  const std::vector<int64_t> yshape = {s.n, s.c, s.oh(), s.ow()};
  TensorId y = m.tensor("y", yshape);
  OpAttrs a;
  a.kernel_h = static_cast<int32_t>(s.kh);
  a.kernel_w = static_cast<int32_t>(s.kw);
  a.stride_h = static_cast<int32_t>(s.sh);
  a.stride_w = static_cast<int32_t>(s.sw);
  a.pad_h = static_cast<int32_t>(s.ph);
  a.pad_w = static_cast<int32_t>(s.pw);
  a.count_include_pad = pc.count_include_pad;
  std::vector<TensorId> outs = {y};
  TensorId ws = kNoTensor;
  if (max) {
    ws = m.tensor("y.indices", yshape, TensorRole::kWorkspace, DType::kU8);
    outs.push_back(ws);
  }
  m.op("pool", pc.fwd, {src.x}, outs, a);
  auto dy = m.grad_input("dy", y);
  TensorId dx = m.grad("dx", src.x);
  std::vector<TensorId> bwd_in = {dy.grad};
  if (max) bwd_in.push_back(ws);
  m.op("pool.bwd", pc.bwd, bwd_in, {dx}, a, Phase::kBackward);
  Runner r(m.g);
  ASSERT_TRUE(r.ok());
  auto xv = testing::random_distinct(src.numel(), 41);
  auto rv = testing::random_vector(static_cast<size_t>(s.n * s.c * s.oh() * s.ow()), 42);
  set_source(r, src, xv);
  set_grad(r, dy, rv);
  r.run_all();
  auto f = [&](const Vec& v) { return reference::pool(s, v, max, pc.count_include_pad); };
  const Vec xd = testing::to_double(xv);
  expect_forward(r.get(y), f(xd), "y");
  expect_gradient(r.get(dx), xd, f, testing::to_double(rv), "dx", /*h=*/2e-3);
  EXPECT_EQ(r.cg().layout(y), r.cg().layout(src.x));
  r.expect_canonical(y);
  r.expect_canonical(dx);
}

using PS = reference::PoolShape;
INSTANTIATE_TEST_SUITE_P(
    Shapes, PoolTest,
    ::testing::Values(
        //                                                          n  c   h  w kh kw sh sw ph pw
        PoolCase{"max_k3_s2_p1", OpType::kMaxPool, OpType::kMaxPoolBwd, PS{2, 24, 9, 7, 3, 3, 2, 2, 1, 1}, true, true},
        PoolCase{"max_k2_s2", OpType::kMaxPool, OpType::kMaxPoolBwd, PS{1, 16, 6, 8, 2, 2, 2, 2, 0, 0}, true, true},
        PoolCase{"max_plain_c3", OpType::kMaxPool, OpType::kMaxPoolBwd, PS{2, 3, 5, 5, 3, 3, 1, 1, 1, 1}, true, false},
        PoolCase{"avg_include_pad", OpType::kAvgPool, OpType::kAvgPoolBwd, PS{2, 24, 7, 6, 3, 3, 2, 2, 1, 1}, true,
                 true},
        PoolCase{"avg_exclude_pad", OpType::kAvgPool, OpType::kAvgPoolBwd, PS{2, 24, 7, 6, 3, 3, 2, 2, 1, 1}, false,
                 true},
        PoolCase{"avg_k3_s1_p1_plain", OpType::kAvgPool, OpType::kAvgPoolBwd, PS{1, 5, 4, 6, 3, 3, 1, 1, 1, 1}, false,
                 false}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(GlobalAvgPoolTest, BlockedInputPlainOutput) {
  const PS s{2, 24, 5, 3, 5, 3, 1, 1, 0, 0};
  GraphMaker m;
  Source src = make_source(m, {s.n, s.c, s.h, s.w}, true);
  TensorId y = m.tensor("y", {s.n, s.c});
  OpAttrs a;
  a.kernel_h = 5;
  a.kernel_w = 3;
  m.op("gap", OpType::kGlobalAvgPool, {src.x}, {y}, a);
  auto dy = m.grad_input("dy", y);
  TensorId dx = m.grad("dx", src.x);
  m.op("gap.bwd", OpType::kGlobalAvgPoolBwd, {dy.grad}, {dx}, a, Phase::kBackward);
  Runner r(m.g);
  ASSERT_TRUE(r.ok());
  auto xv = testing::random_vector(src.numel(), 51);
  auto rv = testing::random_vector(static_cast<size_t>(s.n * s.c), 52);
  set_source(r, src, xv);
  set_grad(r, dy, rv);
  r.run_all();
  auto f = [&](const Vec& v) { return reference::pool(s, v, false, true); };
  const Vec xd = testing::to_double(xv);
  expect_forward(r.get(y), f(xd), "y");
  expect_gradient(r.get(dx), xd, f, testing::to_double(rv), "dx");
  EXPECT_EQ(r.cg().layout(y), "ab");  // plain [N, C] for the classifier
  EXPECT_EQ(r.cg().tensor_bytes(y), static_cast<uint64_t>(s.n * s.c * 4));
  r.expect_canonical(dx);
}

// ---------------------------------------------------------------------------------------------
// Linear

struct LinearCase {
  const char* name;
  std::vector<int64_t> x_shape;
  int64_t in_features, out_features;
  bool bias, blocked;
};
void PrintTo(const LinearCase& c, std::ostream* os) { *os << c.name; }
class LinearTest : public ::testing::TestWithParam<LinearCase> {};

TEST_P(LinearTest, ForwardAndBackward) {
  const LinearCase& lc = GetParam();
  GraphMaker m;
  Source src = make_source(m, lc.x_shape, lc.blocked);
  const int64_t k = lc.in_features, n = lc.out_features, rows = static_cast<int64_t>(src.numel()) / k;
  std::vector<int64_t> yshape = lc.x_shape.size() == 4 ? std::vector<int64_t>{lc.x_shape[0], n} : lc.x_shape;
  if (lc.x_shape.size() != 4) yshape.back() = n;
  TensorId w = m.weight("w", {n, k}), b = lc.bias ? m.weight("b", {n}) : kNoTensor;
  TensorId y = m.tensor("y", yshape);
  OpAttrs a;
  a.in_features = k;
  a.has_bias = lc.bias;
  std::vector<TensorId> ins = {src.x, w};
  if (lc.bias) ins.push_back(b);
  m.op("fc", OpType::kLinear, ins, {y}, a);
  auto dy = m.grad_input("dy", y);
  TensorId dx = m.grad("dx", src.x), dw = m.grad("dw", w), db = lc.bias ? m.grad("db", b) : kNoTensor;
  m.op("fc.bwd_data", OpType::kLinearBwdData, {dy.grad, w}, {dx}, a, Phase::kBackward);
  std::vector<TensorId> wg = {dw};
  if (lc.bias) wg.push_back(db);
  m.op("fc.bwd_weights", OpType::kLinearBwdWeights, {dy.grad, src.x}, wg, a, Phase::kBackward);
  Runner r(m.g);
  ASSERT_TRUE(r.ok());
  auto xv = testing::random_vector(src.numel(), 61);
  auto wv = testing::random_vector(static_cast<size_t>(n * k), 62, -0.3f, 0.3f);
  auto bv = testing::random_vector(static_cast<size_t>(n), 63);
  auto rv = testing::random_vector(static_cast<size_t>(rows * n), 64);
  set_source(r, src, xv);
  r.set(w, wv);
  if (lc.bias) r.set(b, bv);
  set_grad(r, dy, rv);
  r.run_all();
  const Vec xd = testing::to_double(xv), wd = testing::to_double(wv), bd = testing::to_double(bv);
  const Vec rd = testing::to_double(rv);
  const Vec* bp = lc.bias ? &bd : nullptr;
  expect_forward(r.get(y), reference::linear(xd, wd, bp, rows, k, n), "y");
  expect_gradient(
      r.get(dx), xd, [&](const Vec& v) { return reference::linear(v, wd, bp, rows, k, n); }, rd, "dx");
  expect_gradient(
      r.get(dw), wd, [&](const Vec& v) { return reference::linear(xd, v, bp, rows, k, n); }, rd, "dw");
  if (lc.bias)
    expect_gradient(
        r.get(db), bd, [&](const Vec& v) { return reference::linear(xd, wd, &v, rows, k, n); }, rd, "db");
  EXPECT_EQ(r.cg().layout(dx), r.cg().layout(src.x));
  EXPECT_EQ(r.cg().layout(dw), r.cg().layout(w));
  r.expect_canonical(dx);
  r.expect_canonical(dw);
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearTest,
                         ::testing::Values(LinearCase{"rows_3d_bias", {2, 3, 5}, 5, 7, true, false},
                                           LinearCase{"classifier_batch1", {1, 40}, 40, 10, true, false},
                                           LinearCase{
                                               "flatten_blocked_feature_map", {2, 24, 3, 3}, 216, 10, false, true}),
                         [](const auto& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------------------------
// Concat, add, grad_accumulate

struct ConcatCase {
  const char* name;
  std::vector<int64_t> channels;
  bool blocked;
};
void PrintTo(const ConcatCase& c, std::ostream* os) { *os << c.name; }
class ConcatTest : public ::testing::TestWithParam<ConcatCase> {};

TEST_P(ConcatTest, ForwardAndBackward) {
  const ConcatCase& cc = GetParam();
  GraphMaker m;
  std::vector<Source> srcs;
  std::vector<TensorId> xs;
  std::vector<std::vector<int64_t>> shapes;
  int64_t total = 0;
  for (size_t i = 0; i < cc.channels.size(); ++i) {
    shapes.push_back({2, cc.channels[i], 3, 4});
    srcs.push_back(make_source(m, shapes.back(), cc.blocked, fmt::format("x{}", i)));
    xs.push_back(srcs.back().x);
    total += cc.channels[i];
  }
  TensorId y = m.tensor("y", {2, total, 3, 4});
  OpAttrs a;
  a.axis = 1;
  m.op("cat", OpType::kConcat, xs, {y}, a);
  auto dy = m.grad_input("dy", y);
  std::vector<TensorId> dxs;
  for (size_t i = 0; i < xs.size(); ++i) dxs.push_back(m.grad(fmt::format("dx{}", i), xs[i]));
  m.op("cat.bwd", OpType::kConcatBwd, {dy.grad}, dxs, a, Phase::kBackward);
  Runner r(m.g);
  ASSERT_TRUE(r.ok());
  std::vector<Vec> xds;
  for (size_t i = 0; i < srcs.size(); ++i) {
    auto v = testing::random_vector(srcs[i].numel(), 70 + static_cast<uint32_t>(i));
    set_source(r, srcs[i], v);
    xds.push_back(testing::to_double(v));
  }
  auto rv = testing::random_vector(static_cast<size_t>(2 * total * 12), 79);
  set_grad(r, dy, rv);
  r.run_all();
  expect_forward(r.get(y), reference::concat(xds, shapes, 1), "y");
  for (size_t i = 0; i < xs.size(); ++i) {
    auto f = [&](const Vec& v) {
      std::vector<Vec> parts = xds;
      parts[i] = v;
      return reference::concat(parts, shapes, 1);
    };
    expect_gradient(r.get(dxs[i]), xds[i], f, testing::to_double(rv), fmt::format("dx{}", i));
    EXPECT_EQ(r.cg().layout(dxs[i]), r.cg().layout(xs[i]));
    r.expect_canonical(dxs[i]);
  }
  r.expect_canonical(y);
}

INSTANTIATE_TEST_SUITE_P(Channels, ConcatTest,
                         ::testing::Values(ConcatCase{"blocked_aligned", {16, 32}, true},
                                           ConcatCase{"blocked_unaligned", {24, 16, 8}, true},
                                           ConcatCase{"plain", {3, 5}, false}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(AddTest, BlockedOperandsAndInPlace) {
  const std::vector<int64_t> shape = {2, 24, 3, 3};
  GraphMaker m;
  Source a = make_source(m, shape, true, "a"), b = make_source(m, shape, true, "b");
  TensorId y = m.tensor("y", shape);
  OpId add = m.op("add", OpType::kAdd, {a.x, b.x}, {y});
  Runner r(m.g);
  ASSERT_TRUE(r.ok());
  auto av = testing::random_vector(a.numel(), 81), bv = testing::random_vector(b.numel(), 82);
  set_source(r, a, av);
  set_source(r, b, bv);
  r.run_all();
  Vec want(av.size());
  for (size_t i = 0; i < av.size(); ++i) want[i] = static_cast<double>(av[i]) + bv[i];
  std::vector<float> yv = r.get(y);
  expect_forward(yv, want, "y");
  r.expect_canonical(y);
  expect_inplace_matches(r, add, yv);
}

TEST(GradAccumulateTest, SumsThreeBlockedGradientsInPlace) {
  const std::vector<int64_t> shape = {2, 24, 2, 3};
  GraphMaker m;
  Source x = make_source(m, shape, true);
  auto g1 = m.grad_input("g1", x.x), g2 = m.grad_input("g2", x.x), g3 = m.grad_input("g3", x.x);
  TensorId sum = m.grad("sum", x.x);
  OpId acc = m.op("acc3", OpType::kGradAccumulate, {g1.grad, g2.grad, g3.grad}, {sum}, {}, Phase::kBackward);
  Runner r(m.g);
  ASSERT_TRUE(r.ok());
  set_source(r, x, testing::random_vector(x.numel(), 90));
  std::vector<std::vector<float>> vs;
  for (auto [g, seed] : {std::pair{g1, 91u}, {g2, 92u}, {g3, 93u}}) {
    vs.push_back(testing::random_vector(x.numel(), seed));
    set_grad(r, g, vs.back());
  }
  r.run_all();
  Vec want(x.numel());
  for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<double>(vs[0][i]) + vs[1][i] + vs[2][i];
  std::vector<float> got = r.get(sum);
  expect_forward(got, want, "sum");
  EXPECT_EQ(r.cg().layout(sum), r.cg().layout(x.x));
  r.expect_canonical(sum);
  expect_inplace_matches(r, acc, got);
}

// ---------------------------------------------------------------------------------------------
// Cross-entropy

TEST(CrossEntropyTest, LossLogProbsAndGradient) {
  const int64_t rows_a = 2, rows_b = 3, classes = 7;
  GraphMaker m;
  TensorId logits = m.input("logits", {rows_a, rows_b, classes});
  TensorId labels = m.input("labels", {rows_a, rows_b}, DType::kI32);
  TensorId loss = m.tensor("loss", {}), logp = m.tensor("log_probs", {rows_a, rows_b, classes});
  m.op("ce", OpType::kCrossEntropy, {logits, labels}, {loss, logp});
  TensorId dlogits = m.grad("dlogits", logits);
  m.op("ce.bwd", OpType::kCrossEntropyBwd, {logp, labels}, {dlogits}, {}, Phase::kBackward);
  m.g.loss = loss;
  Runner r(m.g);
  ASSERT_TRUE(r.ok());
  auto xv = testing::random_vector(static_cast<size_t>(rows_a * rows_b * classes), 101, -4.0f, 4.0f);
  xv[3] = 80.0f;  // a large logit: the stable formulation must not overflow
  std::vector<int32_t> lv = {0, 6, 3, 3, 1, 5};
  r.set(logits, xv);
  r.set(labels, lv);
  r.run_all();
  const Vec xd = testing::to_double(xv);
  auto ref = reference::cross_entropy(xd, lv, classes);
  expect_forward(r.get(loss), {ref.loss}, "loss");
  expect_forward(r.get(logp), ref.log_probs, "log_probs");
  expect_gradient(
      r.get(dlogits), xd, [&](const Vec& v) { return Vec{reference::cross_entropy(v, lv, classes).loss}; }, {1.0},
      "dlogits");
}

// Span prediction: logits [B,T,2] with the classes (positions) along axis 1, labels [B,2]. The
// reference transposes to [B,2,T] and runs the last-axis cross-entropy.
TEST(CrossEntropyTest, ClassAxisOtherThanTheLast) {
  const int64_t batch = 2, positions = 5, spans = 2;
  GraphMaker m;
  TensorId logits = m.input("logits", {batch, positions, spans});
  TensorId labels = m.input("labels", {batch, spans}, DType::kI32);
  TensorId loss = m.tensor("loss", {}), logp = m.tensor("log_probs", {batch, positions, spans});
  OpAttrs a;
  a.class_axis = 1;
  m.op("ce", OpType::kCrossEntropy, {logits, labels}, {loss, logp}, a);
  TensorId dlogits = m.grad("dlogits", logits);
  m.op("ce.bwd", OpType::kCrossEntropyBwd, {logp, labels}, {dlogits}, a, Phase::kBackward);
  m.g.loss = loss;
  Runner r(m.g);
  ASSERT_TRUE(r.ok());
  const auto xv = testing::random_vector(static_cast<size_t>(batch * positions * spans), 7, -3.0f, 3.0f);
  const std::vector<int32_t> lv = {4, 0, 2, 3};  // (start, end) of sample 0, then of sample 1
  r.set(logits, xv);
  r.set(labels, lv);
  r.run_all();
  auto index = [&](int64_t b, int64_t t, int64_t k) { return static_cast<size_t>((b * positions + t) * spans + k); };
  auto transposed = [&](const Vec& v) {  // [B,T,2] -> [B,2,T]
    Vec out(v.size());
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t k = 0; k < spans; ++k)
        for (int64_t t = 0; t < positions; ++t)
          out[static_cast<size_t>((b * spans + k) * positions + t)] = v[index(b, t, k)];
    return out;
  };
  const Vec xd = testing::to_double(xv);
  const auto ref = reference::cross_entropy(transposed(xd), lv, positions);
  expect_forward(r.get(loss), {ref.loss}, "loss");
  EXPECT_EQ(r.get(loss).size(), 1u);
  const std::vector<float> got_logp = r.get(logp);
  Vec got_t = transposed(testing::to_double(got_logp));
  expect_forward(std::vector<float>(got_t.begin(), got_t.end()), ref.log_probs, "log_probs");
  expect_gradient(
      r.get(dlogits), xd,
      [&](const Vec& v) { return Vec{reference::cross_entropy(transposed(v), lv, positions).loss}; }, {1.0},
      "dlogits");
  // A label must be a position: 5 is outside [0, 5).
  r.set(labels, std::vector<int32_t>{4, 0, 5, 3});
  Status st = r.run(0);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("label 5 of row 2"), std::string::npos) << st.message();
}

TEST(CrossEntropyTest, LabelOutOfRangeIsAnError) {
  GraphMaker m;
  TensorId logits = m.input("logits", {2, 4});
  TensorId labels = m.input("labels", {2}, DType::kI32);
  TensorId loss = m.tensor("loss", {}), logp = m.tensor("log_probs", {2, 4});
  m.op("ce", OpType::kCrossEntropy, {logits, labels}, {loss, logp});
  Runner r(m.g);
  ASSERT_TRUE(r.ok());
  r.set(logits, std::vector<float>(8, 0.5f));
  r.set(labels, std::vector<int32_t>{1, 4});
  Status st = r.run(0);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("label 4 of row 1"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace ferry
