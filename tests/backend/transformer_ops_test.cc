// Transformer kernels against the double reference: batched matmul with transposes and scale,
// softmax (plain and causal), layer norm, embedding, split/merge heads, and dropout's
// reproducibility and statistics.
#include <gtest/gtest.h>
#include <omp.h>

#include "backend/backend_test_support.h"
#include "backend/reference_ops.h"

namespace ferry {
namespace {

using reference::Vec;
using testing::expect_forward;
using testing::expect_gradient;
using testing::GraphMaker;
using testing::Runner;

size_t numel(const std::vector<int64_t>& s) {
  size_t n = 1;
  for (int64_t d : s) n *= static_cast<size_t>(d);
  return n;
}

// ---------------------------------------------------------------------------------------------
// Matmul

struct MatmulCase {
  const char* name;
  std::vector<int64_t> batch;
  int64_t m, k, n;
  bool ta, tb;
  float scale;
};
void PrintTo(const MatmulCase& c, std::ostream* os) { *os << c.name; }
class MatmulTest : public ::testing::TestWithParam<MatmulCase> {};

TEST_P(MatmulTest, MatchesReference) {
  const MatmulCase& mc = GetParam();
  auto shape = [&](int64_t r, int64_t c) {
    std::vector<int64_t> s = mc.batch;
    s.push_back(r);
    s.push_back(c);
    return s;
  };
  GraphMaker m;
  TensorId a = m.input("a", mc.ta ? shape(mc.k, mc.m) : shape(mc.m, mc.k));
  TensorId b = m.input("b", mc.tb ? shape(mc.n, mc.k) : shape(mc.k, mc.n));
  TensorId c = m.tensor("c", shape(mc.m, mc.n));
  OpAttrs at;
  at.transpose_a = mc.ta;
  at.transpose_b = mc.tb;
  at.scale = mc.scale;
  m.op("mm", OpType::kMatMul, {a, b}, {c}, at);
  Runner r(m.g);
  ASSERT_TRUE(r.ok());
  const int64_t batch = static_cast<int64_t>(numel(mc.batch));
  auto av = testing::random_vector(static_cast<size_t>(batch * mc.m * mc.k), 201);
  auto bv = testing::random_vector(static_cast<size_t>(batch * mc.k * mc.n), 202);
  r.set(a, av);
  r.set(b, bv);
  r.run_all();
  expect_forward(r.get(c),
                 reference::matmul(testing::to_double(av), testing::to_double(bv), batch, mc.m, mc.k, mc.n, mc.ta,
                                   mc.tb, mc.scale),
                 "c");
}

INSTANTIATE_TEST_SUITE_P(Cases, MatmulTest,
                         ::testing::Values(MatmulCase{"plain_2d", {}, 5, 7, 3, false, false, 1.0f},
                                           MatmulCase{"scores_qkT_scaled", {2, 3}, 6, 4, 6, false, true, 0.5f},
                                           MatmulCase{"grad_aT_b", {2, 3}, 4, 6, 5, true, false, 1.0f},
                                           MatmulCase{"both_transposed", {3}, 5, 4, 6, true, true, 0.25f}),
                         [](const auto& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------------------------
// Softmax

class SoftmaxTest : public ::testing::TestWithParam<bool> {};

TEST_P(SoftmaxTest, ForwardAndBackward) {
  const bool causal = GetParam();
  const std::vector<int64_t> shape = {2, 2, 5, 5};
  GraphMaker m;
  TensorId x = m.input("x", shape);
  TensorId y = m.tensor("y", shape);
  OpAttrs at;
  at.causal = causal;
  m.op("sm", OpType::kSoftmax, {x}, {y}, at);
  auto dy = m.grad_input("dy", y);
  TensorId dx = m.grad("dx", x);
  m.op("sm.bwd", OpType::kSoftmaxBwd, {dy.grad, y}, {dx}, at, Phase::kBackward);
  Runner r(m.g);
  ASSERT_TRUE(r.ok());
  auto xv = testing::random_vector(numel(shape), 211, -3.0f, 3.0f);
  auto rv = testing::random_vector(numel(shape), 212);
  r.set(x, xv);
  r.set(dy.src, rv);
  r.set(dy.zero, std::vector<float>(rv.size(), 0.0f));
  r.run_all();
  auto f = [&](const Vec& v) { return reference::softmax(v, 5, causal, 5); };
  const Vec xd = testing::to_double(xv);
  std::vector<float> yv = r.get(y);
  expect_forward(yv, f(xd), "y");
  if (causal) {  // masked probabilities are exactly zero
    for (int64_t row = 0; row < 20; ++row)
      for (int64_t j = row % 5 + 1; j < 5; ++j) EXPECT_EQ(yv[static_cast<size_t>(row * 5 + j)], 0.0f);
  }
  expect_gradient(r.get(dx), xd, f, testing::to_double(rv), "dx");
}

INSTANTIATE_TEST_SUITE_P(Mask, SoftmaxTest, ::testing::Values(false, true),
                         [](const auto& info) { return std::string(info.param ? "causal" : "full"); });

// ---------------------------------------------------------------------------------------------
// Layer norm

TEST(LayerNormTest, ForwardAndBackward) {
  const int64_t b = 2, t = 3, d = 8;
  GraphMaker m;
  TensorId x = m.input("x", {b, t, d});
  TensorId gamma = m.weight("gamma", {d}), beta = m.weight("beta", {d});
  TensorId y = m.tensor("y", {b, t, d}), mean = m.tensor("mean", {b * t}), var = m.tensor("var", {b * t});
  OpAttrs at;
  at.eps = 1e-5f;
  m.op("ln", OpType::kLayerNorm, {x, gamma, beta}, {y, mean, var}, at);
  auto dy = m.grad_input("dy", y);
  TensorId dx = m.grad("dx", x), dg = m.grad("dgamma", gamma), dbeta = m.grad("dbeta", beta);
  m.op("ln.bwd", OpType::kLayerNormBwd, {dy.grad, x, gamma, mean, var}, {dx, dg, dbeta}, at, Phase::kBackward);
  Runner r(m.g);
  ASSERT_TRUE(r.ok());
  const size_t n = static_cast<size_t>(b * t * d);
  auto xv = testing::random_vector(n, 221, -2.0f, 2.0f), gv = testing::random_vector(8, 222, 0.5f, 1.5f);
  auto bv = testing::random_vector(8, 223), rv = testing::random_vector(n, 224);
  r.set(x, xv);
  r.set(gamma, gv);
  r.set(beta, bv);
  r.set(dy.src, rv);
  r.set(dy.zero, std::vector<float>(n, 0.0f));
  r.run_all();
  const Vec xd = testing::to_double(xv), gd = testing::to_double(gv), bd = testing::to_double(bv);
  const Vec rd = testing::to_double(rv);
  auto ref = reference::layer_norm(xd, b * t, d, gd, bd, 1e-5);
  expect_forward(r.get(y), ref.y, "y");
  expect_forward(r.get(mean), ref.mean, "mean");
  expect_forward(r.get(var), ref.var, "var");
  expect_gradient(
      r.get(dx), xd, [&](const Vec& v) { return reference::layer_norm(v, b * t, d, gd, bd, 1e-5).y; }, rd, "dx");
  expect_gradient(
      r.get(dg), gd, [&](const Vec& v) { return reference::layer_norm(xd, b * t, d, v, bd, 1e-5).y; }, rd, "dgamma");
  expect_gradient(
      r.get(dbeta), bd, [&](const Vec& v) { return reference::layer_norm(xd, b * t, d, gd, v, 1e-5).y; }, rd, "dbeta");
}

// ---------------------------------------------------------------------------------------------
// Embedding

class EmbeddingTest : public ::testing::TestWithParam<int> {};  // number of tables: 1, 2, 3

TEST_P(EmbeddingTest, ForwardAndBackward) {
  const int tables = GetParam();
  const int64_t b = 2, t = 5, d = 20, vocab = 11, positions = 7, types = 2;  // d spans two column blocks
  GraphMaker m;
  TensorId ids = m.input("ids", {b, t}, DType::kI32);
  TensorId word = m.weight("emb.word", {vocab, d});
  TensorId pos = tables >= 2 ? m.weight("emb.position", {positions, d}) : kNoTensor;
  TensorId type = tables >= 3 ? m.weight("emb.token_type", {types, d}) : kNoTensor;
  TensorId y = m.tensor("y", {b, t, d});
  std::vector<TensorId> ins = {ids, word};
  if (pos != kNoTensor) ins.push_back(pos);
  if (type != kNoTensor) ins.push_back(type);
  m.op("emb", OpType::kEmbedding, ins, {y});
  auto dy = m.grad_input("dy", y);
  std::vector<TensorId> grads = {m.grad("dword", word)};
  if (pos != kNoTensor) grads.push_back(m.grad("dpos", pos));
  if (type != kNoTensor) grads.push_back(m.grad("dtype", type));
  m.op("emb.bwd", OpType::kEmbeddingBwd, {dy.grad, ids}, grads, {}, Phase::kBackward);
  Runner r(m.g);
  ASSERT_TRUE(r.ok());
  std::vector<int32_t> idv = {3, 0, 10, 3, 7, 3, 3, 1, 0, 9};  // repeats: scatter-add must sum them
  auto wv = testing::random_vector(static_cast<size_t>(vocab * d), 231);
  auto pv = testing::random_vector(static_cast<size_t>(positions * d), 232);
  auto tv = testing::random_vector(static_cast<size_t>(types * d), 233);
  auto rv = testing::random_vector(static_cast<size_t>(b * t * d), 234);
  r.set(ids, idv);
  r.set(word, wv);
  if (pos != kNoTensor) r.set(pos, pv);
  if (type != kNoTensor) r.set(type, tv);
  r.set(dy.src, rv);
  r.set(dy.zero, std::vector<float>(rv.size(), 0.0f));
  r.run_all();
  Vec wd = testing::to_double(wv), pd = testing::to_double(pv), td = testing::to_double(tv);
  const Vec rd = testing::to_double(rv);
  auto f = [&](const Vec& w, const Vec& p, const Vec& ty) {
    return reference::embedding(idv, t, d, w, tables >= 2 ? &p : nullptr, tables >= 3 ? &ty : nullptr);
  };
  expect_forward(r.get(y), f(wd, pd, td), "y");
  expect_gradient(
      r.get(grads[0]), wd, [&](const Vec& v) { return f(v, pd, td); }, rd, "dword");
  if (tables >= 2)
    expect_gradient(
        r.get(grads[1]), pd, [&](const Vec& v) { return f(wd, v, td); }, rd, "dpos");
  if (tables >= 3)
    expect_gradient(
        r.get(grads[2]), td, [&](const Vec& v) { return f(wd, pd, v); }, rd, "dtype");

  // Token ids outside the vocabulary are reported, not read out of bounds.
  idv[4] = static_cast<int32_t>(vocab);
  r.set(ids, idv);
  Status st = r.run(0);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("token id 11"), std::string::npos) << st.message();
}

INSTANTIATE_TEST_SUITE_P(Tables, EmbeddingTest, ::testing::Values(1, 2, 3),
                         [](const auto& info) { return std::to_string(info.param) + "_tables"; });

// ---------------------------------------------------------------------------------------------
// split_heads / merge_heads

TEST(HeadsTest, SplitMatchesReferenceAndMergeInvertsIt) {
  const int64_t b = 2, t = 3, heads = 2, dh = 4, parts = 3;
  GraphMaker m;
  TensorId x = m.input("qkv", {b, t, parts * heads * dh});
  std::vector<TensorId> outs;
  for (int p = 0; p < parts; ++p) outs.push_back(m.tensor(fmt::format("part{}", p), {b, heads, t, dh}));
  OpAttrs at;
  at.heads = heads;
  at.parts = parts;
  m.op("split", OpType::kSplitHeads, {x}, outs, at);
  TensorId merged = m.tensor("merged", {b, t, parts * heads * dh});
  m.op("merge", OpType::kMergeHeads, outs, {merged}, at, Phase::kBackward);
  // Single-part merge and its inverse, split with parts = 1.
  TensorId one = m.tensor("one", {b, t, heads * dh});
  OpAttrs at1 = at;
  at1.parts = 1;
  m.op("merge1", OpType::kMergeHeads, {outs[1]}, {one}, at1);
  TensorId back = m.tensor("back", {b, heads, t, dh});
  m.op("split1", OpType::kSplitHeads, {one}, {back}, at1, Phase::kBackward);
  Runner r(m.g);
  ASSERT_TRUE(r.ok());
  auto xv = testing::random_vector(static_cast<size_t>(b * t * parts * heads * dh), 241);
  r.set(x, xv);
  r.run_all();
  const Vec xd = testing::to_double(xv);
  for (int p = 0; p < parts; ++p)
    expect_forward(r.get(outs[static_cast<size_t>(p)]), reference::split_head_part(xd, b, t, parts, heads, dh, p),
                   fmt::format("part{}", p));
  EXPECT_EQ(r.get(merged), xv);
  EXPECT_EQ(r.get(back), r.get(outs[1]));
}

// ---------------------------------------------------------------------------------------------
// Dropout

struct DropoutGraph {
  GraphMaker m;
  TensorId x, y, mask, dx;
  GraphMaker::GradIn dy;
  OpId fwd, bwd;
};

DropoutGraph dropout_graph(std::vector<int64_t> shape, float p) {
  DropoutGraph d;
  d.x = d.m.input("x", shape);
  d.y = d.m.tensor("y", shape);
  d.mask = d.m.tensor("y.mask", shape, TensorRole::kWorkspace, DType::kU8);
  OpAttrs at;
  at.dropout_p = p;
  d.fwd = d.m.op("drop", OpType::kDropout, {d.x}, {d.y, d.mask}, at);
  d.dy = d.m.grad_input("dy", d.y);
  d.dx = d.m.grad("dx", d.x);
  d.bwd = d.m.op("drop.bwd", OpType::kDropoutBwd, {d.dy.grad, d.mask}, {d.dx}, at, Phase::kBackward);
  return d;
}

TEST(DropoutTest, MaskStatisticsScalingAndBackward) {
  const float p = 0.3f;
  const std::vector<int64_t> shape = {4, 50, 50};
  DropoutGraph d = dropout_graph(shape, p);
  Runner r(d.m.g);
  ASSERT_TRUE(r.ok());
  const size_t n = numel(shape);
  auto xv = testing::random_vector(n, 251), gv = testing::random_vector(n, 252);
  r.set(d.x, xv);
  r.set(d.dy.src, gv);
  r.set(d.dy.zero, std::vector<float>(n, 0.0f));
  RunContext ctx{.iteration = 3, .optimizer_step = 1, .dropout_seed = 42};
  r.run_all(ctx);
  std::vector<uint8_t> mask = r.get<uint8_t>(d.mask);
  std::vector<float> y = r.get(d.y), dx = r.get(d.dx);
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_LE(mask[i], 1u);
    kept += mask[i];
    const double scale = 1.0 / (1.0 - p);
    EXPECT_FLOAT_EQ(y[i], mask[i] ? static_cast<float>(xv[i] * scale) : 0.0f) << i;
    EXPECT_FLOAT_EQ(dx[i], mask[i] ? static_cast<float>(gv[i] * scale) : 0.0f) << i;
  }
  // 10000 Bernoulli(0.7) draws: mean 0.7, standard deviation 0.0046; allow ~6 sigma.
  EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(n), 1.0 - p, 0.03);
}

TEST(DropoutTest, MaskDependsOnlyOnSeedIterationAndOp) {
  // Above the size where the loop runs on several threads (cpu::kMinParallelElements).
  DropoutGraph d = dropout_graph({4, 20000}, 0.5f);
  Runner r(d.m.g);
  ASSERT_TRUE(r.ok());
  r.set(d.x, testing::random_vector(80000, 261));
  auto mask_for = [&](RunContext ctx, int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    Status st = r.run(d.fwd, ctx);
    omp_set_num_threads(saved);
    EXPECT_TRUE(st.ok()) << st.message();
    return r.get<uint8_t>(d.mask);
  };
  const RunContext base{.iteration = 5, .optimizer_step = 1, .dropout_seed = 7};
  const auto m1 = mask_for(base, 2);
  EXPECT_EQ(mask_for(base, 1), m1) << "mask depends on the thread count";
  EXPECT_EQ(mask_for(base, 2), m1) << "mask is not reproducible";
  RunContext other_iteration = base, other_seed = base;
  other_iteration.iteration = 6;
  other_seed.dropout_seed = 8;
  EXPECT_NE(mask_for(other_iteration, 2), m1);
  EXPECT_NE(mask_for(other_seed, 2), m1);
}

TEST(DropoutTest, ZeroProbabilityKeepsEverything) {
  DropoutGraph d = dropout_graph({2, 33}, 0.0f);
  Runner r(d.m.g);
  ASSERT_TRUE(r.ok());
  auto xv = testing::random_vector(66, 271);
  r.set(d.x, xv);
  ASSERT_TRUE(r.run(d.fwd).ok());
  EXPECT_EQ(r.get(d.y), xv);
}

TEST(DropoutTest, InPlaceMatchesOutOfPlace) {
  DropoutGraph d = dropout_graph({5, 40}, 0.25f);
  Runner r(d.m.g);
  ASSERT_TRUE(r.ok());
  r.set(d.x, testing::random_vector(200, 281));
  r.set(d.dy.src, testing::random_vector(200, 282));
  r.set(d.dy.zero, std::vector<float>(200, 0.0f));
  const RunContext ctx{.iteration = 1, .optimizer_step = 1, .dropout_seed = 3};
  r.run_all(ctx);
  const auto y = r.get(d.y), dx = r.get(d.dx);
  ASSERT_TRUE(r.run(d.bwd, ctx, /*inplace=*/true).ok());
  EXPECT_EQ(r.get(d.dy.grad), dx);
  ASSERT_TRUE(r.run(d.fwd, ctx, /*inplace=*/true).ok());
  EXPECT_EQ(r.get(d.x), y);
}

}  // namespace
}  // namespace ferry
