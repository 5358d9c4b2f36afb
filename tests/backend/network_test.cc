// Whole training graphs from the GraphBuilder on the CPU backend: the weight gradients that the
// backward pass produces agree with finite differences of the loss computed by the forward ops
// (which checks that every kernel reads its inputs in the order autodiff emits them), and a
// training iteration is bitwise reproducible.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/backend_test_support.h"
#include "graph/builder.h"

namespace ferry {
namespace {

using testing::Runner;

Graph tiny_cnn(const TrainOptions& opt) {
  GraphBuilder b(GraphInfo{.model = "tiny-cnn", .batch = 2});
  TensorId x = b.input("image", {2, 3, 10, 10});
  TensorId lab = b.labels("label", {2});
  TensorId h = b.relu("relu1", b.batch_norm("bn1", b.conv2d("conv1", x, 24, 3, 1, 1)));
  TensorId p = b.max_pool("pool", h, 3, 2, 1);
  TensorId c2 = b.relu("relu2", b.conv2d("conv2", p, 24, 3, 1, 1, /*bias=*/true));
  TensorId s = b.add("add", c2, p);
  TensorId cat = b.concat("cat", {s, b.conv2d("conv3", s, 16, 1)});
  TensorId pooled = b.avg_pool("avg", cat, 2, 2);
  TensorId logits = b.linear("fc", b.global_avg_pool("gap", pooled), 5);
  b.cross_entropy("loss", logits, lab);
  auto g = std::move(b).finish(opt);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return std::move(g).value();
}

Graph tiny_transformer(const TrainOptions& opt, float dropout) {
  const int64_t batch = 2, seq = 6, vocab = 13, dim = 16, heads = 2;
  GraphBuilder b(GraphInfo{.model = "tiny-gpt", .batch = batch, .seq = seq, .num_classes = vocab});
  TensorId ids = b.input("ids", {batch, seq}, DType::kI32);
  TensorId lab = b.labels("labels", {batch, seq});
  TensorId h = b.embedding("emb", ids, vocab, dim, 8, 2);
  TensorId word = b.embedding_weight(h);
  TensorId a = b.layer_norm("ln1", h);
  std::vector<TensorId> qkv = b.split_heads("split", b.linear("qkv", a, 3 * dim), heads, 3);
  TensorId scores = b.matmul("scores", qkv[0], qkv[1], false, true, 1.0f / std::sqrt(8.0f));
  TensorId probs = b.dropout("attn.drop", b.softmax("attn", scores, /*causal=*/true), dropout);
  TensorId ctx = b.merge_heads("merge", b.matmul("ctx", probs, qkv[2], false, false));
  TensorId r1 = b.add("res1", h, b.linear("proj", ctx, dim));
  TensorId f = b.gelu("gelu", b.linear("fc1", b.layer_norm("ln2", r1), 2 * dim), /*tanh=*/true);
  TensorId r2 = b.add("res2", r1, b.dropout("drop", b.linear("fc2", f, dim), dropout));
  TensorId logits = b.linear_with("lm_head", b.layer_norm("lnf", r2), word, kNoTensor);
  b.cross_entropy("loss", logits, lab);
  auto g = std::move(b).finish(opt);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return std::move(g).value();
}

// Fills weights (small random), optimizer state (zeros) and data inputs (fixed seeds).
void initialise(Runner& r) {
  const Graph& g = r.graph();
  for (const Tensor& t : g.tensors) {
    const size_t n = static_cast<size_t>(t.numel());
    const uint32_t seed = 1000 + static_cast<uint32_t>(t.id);
    if (t.role == TensorRole::kWeight) {
      const bool gain = t.shape.size() == 1 && !t.name.ends_with(".bias");  // norm scales near 1
      auto v = gain ? testing::random_vector(n, seed, 0.8f, 1.2f) : testing::random_vector(n, seed, -0.4f, 0.4f);
      r.set(t.id, v);
    } else if (t.role == TensorRole::kOptimizerState) {
      r.set(t.id, std::vector<float>(n, 0.0f));
    } else if (t.role == TensorRole::kInput && t.dtype == DType::kI32) {
      std::vector<int32_t> v(n);
      for (size_t i = 0; i < n; ++i)
        v[i] = static_cast<int32_t>((i * 7 + 3) % static_cast<size_t>(g.info.num_classes > 0 ? g.info.num_classes : 5));
      r.set(t.id, v);
    } else if (t.role == TensorRole::kInput) {
      r.set(t.id, testing::random_vector(n, seed));
    }
  }
}

float forward_loss(Runner& r) {
  for (const Op& op : r.graph().ops) {
    if (op.phase != Phase::kForward) break;
    Status st = r.run(op.id);
    EXPECT_TRUE(st.ok()) << st.message();
  }
  return r.get(r.graph().loss)[0];
}

// The gradient of each named weight (the input the optimizer reads) against central differences
// of the forward loss, on a few elements. Float forward passes: h and tolerance are set for that.
void check_weight_gradients(const Graph& g, const std::vector<std::string>& names) {
  Runner r(g);
  ASSERT_TRUE(r.ok());
  initialise(r);
  r.run_all();  // lr = 0: the update leaves the weights as they were
  for (const std::string& name : names) {
    const Op* upd = nullptr;
    for (const Op& op : g.ops)
      if (op.phase == Phase::kUpdate && g.tensor(op.inputs[0]).name == name) upd = &op;
    ASSERT_NE(upd, nullptr) << name;
    const TensorId w = upd->inputs[0];
    const std::vector<float> grad = r.get(upd->inputs[1]);
    std::vector<float> wv = r.get(w);
    double max_grad = 0;
    for (float v : grad) max_grad = std::max(max_grad, std::abs(static_cast<double>(v)));
    for (size_t i : testing::sample_indices(wv.size(), 6, 17)) {
      const float h = 1e-2f, saved = wv[i];
      wv[i] = saved + h;
      r.set(w, wv);
      const double lp = forward_loss(r);
      wv[i] = saved - h;
      r.set(w, wv);
      const double lm = forward_loss(r);
      wv[i] = saved;
      r.set(w, wv);
      const double fd = (lp - lm) / (2.0 * h);
      EXPECT_NEAR(grad[i], fd, 0.02 * max_grad + 0.05 * std::abs(fd)) << name << "[" << i << "]";
    }
  }
}

TEST(NetworkTest, CnnWeightGradientsMatchFiniteDifferences) {
  TrainOptions opt;
  opt.lr = 0.0f;
  check_weight_gradients(
      tiny_cnn(opt), {"conv1.weight", "bn1.weight", "bn1.bias", "conv2.bias", "conv3.weight", "fc.weight", "fc.bias"});
}

TEST(NetworkTest, TransformerWeightGradientsMatchFiniteDifferences) {
  TrainOptions opt;
  opt.optimizer = OptimizerKind::kAdam;
  opt.lr = 0.0f;
  check_weight_gradients(tiny_transformer(opt, /*dropout=*/0.0f),
                         {"emb.word", "emb.position", "emb.token_type", "ln1.weight", "qkv.weight", "proj.bias",
                          "fc1.weight", "lnf.bias"});
}

// Two runners from the same initial state, two iterations each: every tensor bitwise equal.
void expect_reproducible(const Graph& g) {
  Runner a(g), b(g);
  ASSERT_TRUE(a.ok() && b.ok());
  initialise(a);
  initialise(b);
  for (int it = 0; it < 2; ++it) {
    const RunContext ctx{.iteration = it, .optimizer_step = it + 1, .dropout_seed = 99};
    a.run_all(ctx);
    b.run_all(ctx);
  }
  for (const Tensor& t : g.tensors) EXPECT_TRUE(a.raw(t.id) == b.raw(t.id)) << t.name;
  EXPECT_TRUE(std::isfinite(a.get(g.loss)[0]));
}

TEST(NetworkTest, CnnIterationIsBitwiseReproducible) { expect_reproducible(tiny_cnn(TrainOptions{})); }

TEST(NetworkTest, TransformerIterationIsBitwiseReproducible) {
  TrainOptions opt;
  opt.optimizer = OptimizerKind::kAdam;
  opt.weight_decay = 0.01f;
  expect_reproducible(tiny_transformer(opt, /*dropout=*/0.1f));
}

}  // namespace
}  // namespace ferry
