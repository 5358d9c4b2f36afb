// Autodiff conventions: what every backward op reads and writes, gradient accumulation, updates.
#include <gtest/gtest.h>

#include <algorithm>

#include "graph/builder.h"

namespace ferry {
namespace {

const Op* find_op(const Graph& g, const std::string& name) {
  for (const Op& op : g.ops)
    if (op.name == name) return &op;
  return nullptr;
}

TensorId find_tensor(const Graph& g, const std::string& name) {
  for (const Tensor& t : g.tensors)
    if (t.name == name) return t.id;
  return kNoTensor;
}

// conv -> bn -> relu -> (pool) -> conv2 + residual(pool) -> gap -> fc -> CE
Graph tiny_resnet(OptimizerKind opt = OptimizerKind::kSgd, float momentum = 0.9f) {
  GraphBuilder b(GraphInfo{.model = "tiny", .batch = 2});
  TensorId x = b.input("image", {2, 3, 8, 8});
  TensorId y = b.labels("label", {2});
  TensorId h = b.relu("relu1", b.batch_norm("bn1", b.conv2d("conv1", x, 4, 3, 1, 1)));
  TensorId p = b.max_pool("pool", h, 2, 2);
  TensorId c2 = b.conv2d("conv2", p, 4, 3, 1, 1);
  TensorId s = b.add("add", c2, p);
  TensorId logits = b.linear("fc", b.global_avg_pool("gap", s), 5);
  b.cross_entropy("loss", logits, y);
  TrainOptions o;
  o.optimizer = opt;
  o.momentum = momentum;
  auto g = std::move(b).finish(o);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return std::move(g).value();
}

TEST(Builder, ForwardShapesAndParams) {
  Graph g = tiny_resnet();
  EXPECT_EQ(g.tensor(find_tensor(g, "conv1")).shape, (std::vector<int64_t>{2, 4, 8, 8}));
  EXPECT_EQ(g.tensor(find_tensor(g, "pool")).shape, (std::vector<int64_t>{2, 4, 4, 4}));
  EXPECT_EQ(g.tensor(find_tensor(g, "fc")).shape, (std::vector<int64_t>{2, 5}));
  // conv1 4*3*9, bn1 4+4, conv2 4*4*9, fc 5*4+5
  EXPECT_EQ(g.param_count(), 108u + 8u + 144u + 25u);
  EXPECT_EQ(g.forward_macs(), 2u * 4 * 64 * 27 + 2u * 4 * 16 * 36 + 2u * 5 * 4);
  EXPECT_TRUE(g.validate().ok());
}

TEST(Builder, BackwardReadsWhatKernelsNeed) {
  Graph g = tiny_resnet();
  auto name_of = [&](TensorId t) { return g.tensor(t).name; };
  auto reads = [&](const std::string& op) {
    std::vector<std::string> r;
    for (TensorId t : find_op(g, op)->inputs) r.push_back(name_of(t));
    return r;
  };
  // conv backward-data reads dy and weights; backward-weights reads dy and the input.
  EXPECT_EQ(reads("conv2.bwd_data")[1], "conv2.weight");
  EXPECT_EQ(reads("conv2.bwd_weights")[1], "pool");
  // conv1's input is data: no backward-data op.
  EXPECT_EQ(find_op(g, "conv1.bwd_data"), nullptr);
  EXPECT_EQ(reads("conv1.bwd_weights")[1], "image");
  // relu backward reads its output; max-pool backward its indices; bn its input and statistics.
  EXPECT_EQ(reads("relu1.bwd")[1], "relu1");
  EXPECT_EQ(reads("pool.bwd")[1], "pool.indices");
  std::vector<std::string> bn = reads("bn1.bwd");
  EXPECT_EQ(bn[1], "conv1");
  EXPECT_EQ(bn[2], "bn1.weight");
  EXPECT_EQ(bn[3], "bn1.mean");
  EXPECT_EQ(bn[4], "bn1.var");
  // cross-entropy backward reads the saved log-probabilities and labels.
  EXPECT_EQ(reads("loss.bwd"), (std::vector<std::string>{"loss.log_probs", "label"}));
}

TEST(Builder, ResidualGradientIsAccumulatedOnce) {
  Graph g = tiny_resnet();
  // `pool` feeds conv2 and the add: its two gradient contributions are summed by one op.
  int accum = 0;
  for (const Op& op : g.ops)
    if (op.type == OpType::kGradAccumulate) {
      ++accum;
      EXPECT_EQ(op.inputs.size(), 2u);
      EXPECT_EQ(g.tensor(op.outputs[0]).grad_of, find_tensor(g, "pool"));
    }
  EXPECT_EQ(accum, 1);
  // The add has no backward op: its incoming gradient flows to both operands.
  const OpId add = find_op(g, "add")->id;
  for (const Op& op : g.ops)
    if (op.forward_op == add) {
      EXPECT_EQ(op.type, OpType::kGradAccumulate) << op.name;
    }
}

TEST(Builder, PhasesAreOrderedAndUpdatesCoverEveryWeight) {
  Graph g = tiny_resnet();
  Phase last = Phase::kForward;
  int updates = 0;
  for (const Op& op : g.ops) {
    EXPECT_GE(static_cast<int>(op.phase), static_cast<int>(last)) << op.name;
    last = op.phase;
    if (op.phase == Phase::kUpdate) {
      ++updates;
      EXPECT_EQ(op.type, OpType::kSgdUpdate);
      EXPECT_EQ(g.tensor(op.inputs[1]).role, TensorRole::kWeightGradient);
      EXPECT_EQ(g.tensor(op.inputs[2]).role, TensorRole::kOptimizerState);
      EXPECT_EQ(op.outputs[0], op.inputs[0]);  // the weight is updated in place
    }
  }
  EXPECT_EQ(updates, 6);  // conv1.weight, bn1.weight, bn1.bias, conv2.weight, fc.weight, fc.bias
}

TEST(Builder, AdamHasTwoStatesPerWeight) {
  Graph g = tiny_resnet(OptimizerKind::kAdam);
  size_t states = 0, weights = 0;
  for (const Tensor& t : g.tensors) {
    states += t.role == TensorRole::kOptimizerState;
    weights += t.role == TensorRole::kWeight;
  }
  EXPECT_EQ(states, 2 * weights);
}

TEST(Builder, MatmulBackwardShapes) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      GraphBuilder b(GraphInfo{.model = "mm", .batch = 1});
      TensorId ids = b.input("ids", {1, 3}, DType::kI32);
      TensorId e = b.embedding("emb", ids, 7, 4, 0);  // [1,3,4]
      // Use square operands to exercise every transpose combination with valid shapes.
      TensorId sa = b.linear("sa", e, 3, false);  // [1,3,3]
      TensorId sb = b.linear("sb", e, 3, false);  // [1,3,3]
      TensorId c = b.matmul("mm", sa, sb, ta, tb, 0.5f);
      b.cross_entropy("loss", c, b.labels("lab", {1, 3}));
      auto g = std::move(b).finish(TrainOptions{});
      ASSERT_TRUE(g.ok()) << ta << tb << ": " << g.status().message();
      int n = 0;
      for (const Op& op : g->ops)
        if (op.name == "mm.bwd_a" || op.name == "mm.bwd_b") {
          ++n;
          EXPECT_EQ(g->tensor(op.outputs[0]).shape, g->tensor(g->tensor(op.outputs[0]).grad_of).shape) << op.name;
          EXPECT_FLOAT_EQ(op.attrs.scale, 0.5f);
        }
      EXPECT_EQ(n, 2);
    }
}

TEST(Builder, BadShapesFailWithOpName) {
  GraphBuilder b(GraphInfo{.model = "bad", .batch = 1});
  TensorId x = b.input("image", {1, 3, 4, 4});
  TensorId y = b.conv2d("conv_big", x, 8, 7, 1, 0);  // 4x4 input, 7x7 kernel, no padding
  b.cross_entropy("loss", b.linear("fc", b.global_avg_pool("gap", y), 2), b.labels("l", {1}));
  auto g = std::move(b).finish(TrainOptions{});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("conv_big"), std::string::npos) << g.status().message();
}

TEST(Builder, OverflowingShapeIsAnError) {
  GraphBuilder b(GraphInfo{.model = "huge", .batch = 1});
  TensorId x = b.input("image", {int64_t{1} << 40, 3, int64_t{1} << 20, 4});
  EXPECT_EQ(x, kNoTensor);
  auto g = std::move(b).finish(TrainOptions{});
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("overflows"), std::string::npos);
}

}  // namespace
}  // namespace ferry
