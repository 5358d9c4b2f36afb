// Optimizer update kernels against values computed by hand from the update rules (PyTorch's
// SGD with momentum and weight decay; Adam and AdamW with bias correction), over several steps,
// including a weight stored in a blocked layout with padding.
#include <gtest/gtest.h>

#include "backend/backend_test_support.h"

namespace ferry {
namespace {

using testing::GraphMaker;
using testing::Runner;

TEST(SgdTest, MomentumAndWeightDecayOverTwoSteps) {
  GraphMaker m;
  TensorId w = m.weight("w", {4});
  TensorId dw = m.input("dw", {4});  // stands in for the weight gradient of the iteration
  TensorId buf = m.tensor("w.momentum", {4}, TensorRole::kOptimizerState);
  OpAttrs at;
  at.lr = 0.1f;
  at.momentum_sgd = 0.9f;
  at.weight_decay = 0.01f;
  OpId upd = m.op("w.update", OpType::kSgdUpdate, {w, dw, buf}, {w, buf}, at, Phase::kUpdate);
  Runner r(m.g);
  ASSERT_TRUE(r.ok());
  r.set(w, std::vector<float>{1.0f, -2.0f, 0.5f, 0.0f});
  r.set(buf, std::vector<float>(4, 0.0f));
  // Step 1, element 0: g = 0.5 + 0.01*1 = 0.51; buf = 0.51; w = 1 - 0.1*0.51 = 0.949.
  r.set(dw, std::vector<float>{0.5f, 0.25f, -1.0f, 2.0f});
  ASSERT_TRUE(r.run(upd).ok());
  std::vector<float> w1 = r.get(w), b1 = r.get(buf);
  EXPECT_NEAR(w1[0], 0.949f, 1e-6);
  EXPECT_NEAR(b1[0], 0.51f, 1e-6);
  // element 1: g = 0.25 - 0.02 = 0.23; w = -2 - 0.023 = -2.023
  EXPECT_NEAR(w1[1], -2.023f, 1e-6);
  // element 3: g = 2 + 0 = 2; w = -0.2
  EXPECT_NEAR(w1[3], -0.2f, 1e-6);
  // Step 2, element 0: g = 0.5 + 0.01*0.949 = 0.50949; buf = 0.9*0.51 + 0.50949 = 0.96849;
  // w = 0.949 - 0.096849 = 0.852151.
  ASSERT_TRUE(r.run(upd).ok());
  std::vector<float> w2 = r.get(w), b2 = r.get(buf);
  EXPECT_NEAR(b2[0], 0.96849f, 1e-6);
  EXPECT_NEAR(w2[0], 0.852151f, 1e-6);
}

TEST(SgdTest, PlainSgdWithoutState) {
  GraphMaker m;
  TensorId w = m.weight("w", {3});
  TensorId dw = m.input("dw", {3});
  OpAttrs at;
  at.lr = 0.5f;
  OpId upd = m.op("w.update", OpType::kSgdUpdate, {w, dw}, {w}, at, Phase::kUpdate);
  Runner r(m.g);
  ASSERT_TRUE(r.ok());
  r.set(w, std::vector<float>{1.0f, 2.0f, 3.0f});
  r.set(dw, std::vector<float>{2.0f, -2.0f, 0.0f});
  ASSERT_TRUE(r.run(upd).ok());
  EXPECT_EQ(r.get(w), (std::vector<float>{0.0f, 3.0f, 3.0f}));
}

class AdamTest : public ::testing::TestWithParam<float> {};  // weight decay: 0 (Adam) or > 0 (AdamW)

TEST_P(AdamTest, ThreeStepsMatchTheUpdateRule) {
  const float wd = GetParam();
  GraphMaker m;
  TensorId w = m.weight("w", {3});
  TensorId dw = m.input("dw", {3});
  TensorId mom = m.tensor("w.exp_avg", {3}, TensorRole::kOptimizerState);
  TensorId var = m.tensor("w.exp_avg_sq", {3}, TensorRole::kOptimizerState);
  OpAttrs at;
  at.lr = 0.01f;
  at.beta1 = 0.9f;
  at.beta2 = 0.999f;
  at.adam_eps = 1e-8f;
  at.weight_decay = wd;
  OpId upd = m.op("w.update", OpType::kAdamUpdate, {w, dw, mom, var}, {w, mom, var}, at, Phase::kUpdate);
  Runner r(m.g);
  ASSERT_TRUE(r.ok());
  std::vector<double> wv = {0.5, -1.0, 2.0}, mv(3, 0.0), vv(3, 0.0);
  r.set(w, std::vector<float>(wv.begin(), wv.end()));
  r.set(mom, std::vector<float>(3, 0.0f));
  r.set(var, std::vector<float>(3, 0.0f));
  const std::vector<std::vector<float>> grads = {{0.1f, -0.2f, 0.0f}, {0.3f, 0.1f, 1.0f}, {-0.05f, 0.2f, 1.0f}};
  for (int step = 1; step <= 3; ++step) {
    const auto& g = grads[static_cast<size_t>(step - 1)];
    r.set(dw, g);
    RunContext ctx;
    ctx.optimizer_step = step;
    ASSERT_TRUE(r.run(upd, ctx).ok());
    for (size_t i = 0; i < 3; ++i) {
      wv[i] *= 1.0 - 0.01 * wd;
      mv[i] = 0.9 * mv[i] + 0.1 * g[i];
      vv[i] = 0.999 * vv[i] + 0.001 * g[i] * g[i];
      const double mhat = mv[i] / (1.0 - std::pow(0.9, step)), vhat = vv[i] / (1.0 - std::pow(0.999, step));
      wv[i] -= 0.01 * mhat / (std::sqrt(vhat) + 1e-8);
    }
    std::vector<float> wg = r.get(w), mg = r.get(mom), vg = r.get(var);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_NEAR(wg[i], wv[i], 1e-6) << "step " << step << " element " << i;
      // Relative: 1 - beta2 is 0.001 only to float precision (1 - 0.999f = 0.00099998713).
      EXPECT_NEAR(mg[i], mv[i], 1e-5 * std::abs(mv[i]) + 1e-9) << "step " << step << " element " << i;
      EXPECT_NEAR(vg[i], vv[i], 1e-4 * std::abs(vv[i]) + 1e-12) << "step " << step << " element " << i;
    }
  }
  // The step count is 1-based; 0 would divide by a zero bias correction.
  RunContext bad;
  bad.optimizer_step = 0;
  EXPECT_EQ(r.run(upd, bad).code(), StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(WeightDecay, AdamTest, ::testing::Values(0.0f, 0.1f),
                         [](const auto& info) { return std::string(info.param > 0 ? "adamw" : "adam"); });

// A convolution weight in a blocked layout with padded channels: the update is element-wise over
// the padded storage and must leave the padding zero and the values right.
TEST(SgdTest, BlockedWeightKeepsZeroPadding) {
  GraphMaker m;
  TensorId x = m.input("x", {1, 24, 3, 3});
  TensorId w = m.weight("w", {24, 24, 1, 1});
  TensorId y = m.tensor("y", {1, 24, 3, 3});
  OpAttrs ca;
  ca.kernel_h = ca.kernel_w = 1;
  m.op("conv", OpType::kConv2d, {x, w}, {y}, ca);
  auto dy = m.grad_input("dy", y);
  TensorId dw = m.grad("dw", w);
  m.op("conv.bwd_w", OpType::kConvBwdWeights, {dy.grad, x}, {dw}, ca, Phase::kBackward);
  TensorId buf = m.tensor("w.momentum", {24, 24, 1, 1}, TensorRole::kOptimizerState);
  OpAttrs at;
  at.lr = 0.1f;
  at.momentum_sgd = 0.5f;
  m.op("w.update", OpType::kSgdUpdate, {w, dw, buf}, {w, buf}, at, Phase::kUpdate);
  Runner r(m.g);
  ASSERT_TRUE(r.ok());
  auto xv = testing::random_vector(216, 301), wv = testing::random_vector(576, 302),
       gv = testing::random_vector(216, 303);
  r.set(x, xv);
  r.set(w, wv);
  r.set(buf, std::vector<float>(576, 0.0f));
  r.set(dy.src, gv);
  r.set(dy.zero, std::vector<float>(216, 0.0f));
  r.run_all();
  EXPECT_EQ(r.cg().layout(buf), r.cg().layout(w));
  EXPECT_EQ(r.cg().tensor_bytes(buf), r.cg().tensor_bytes(w));
  std::vector<float> dwv = r.get(dw), w1 = r.get(w);
  for (size_t i = 0; i < 576; ++i) EXPECT_NEAR(w1[i], wv[i] - 0.1f * dwv[i], 1e-6) << i;
  r.expect_canonical(w);
  r.expect_canonical(buf);
}

}  // namespace
}  // namespace ferry
