// The executor trains real networks inside an arena of a fixed budget: measured peak equals the
// analysis prediction, too small a budget fails before any kernel runs, runs are bitwise
// reproducible, and small networks learn.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "backend/backend.h"
#include "data/data.h"
#include "graph/zoo/zoo.h"
#include "runtime/executor.h"

namespace ferry {
namespace {

Graph model(const std::string& name, int64_t batch, OptimizerKind opt = OptimizerKind::kSgd, float lr = 0.01f,
            int64_t seq = 16) {
  ModelConfig c;
  c.batch = batch;
  c.train.optimizer = opt;
  c.train.lr = lr;
  if (name.rfind("gpt2", 0) == 0 || name.rfind("bert", 0) == 0) c.seq = seq;
  auto g = build_model(name, c);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return std::move(g).value();
}

std::unique_ptr<Backend> cpu() { return std::move(make_backend("cpu")).value(); }

struct TrainRun {
  std::vector<float> losses;
  std::vector<std::vector<std::byte>> weights;
  uint64_t peak = 0, predicted = 0;    // measured live peak; the plan's live peak
  uint64_t extent = 0, placed = 0;     // highest byte written (arena scan); the plan's arena
};

TrainRun train(const Graph& g, int iters, uint64_t seed = 3, uint64_t budget = 0) {
  auto backend = cpu();
  ExecutorOptions o;
  o.seed = seed;
  o.budget_bytes = budget;
  auto ex = Executor::create(g, *backend, o);
  EXPECT_TRUE(ex.ok()) << ex.status().message();
  TrainRun r;
  if (!ex.ok()) return r;
  EXPECT_TRUE((*ex)->initialize().ok());
  auto data = make_synthetic_data(seed);
  for (int i = 0; i < iters; ++i) {
    auto s = (*ex)->run_iteration(i, *data);
    EXPECT_TRUE(s.ok()) << s.status().message();
    if (!s.ok()) break;
    r.losses.push_back(s->loss);
  }
  for (const Tensor& t : g.tensors)
    if (t.role == TensorRole::kWeight) r.weights.push_back((*ex)->read_persistent(t.id).value());
  r.peak = (*ex)->measured_peak_bytes();
  r.predicted = (*ex)->predicted_live_peak_bytes();
  r.extent = (*ex)->measured_extent_bytes().value();
  r.placed = (*ex)->predicted_peak_bytes();
  EXPECT_EQ(r.placed, (*ex)->analysis().peak_bytes_shared);
  return r;
}

class ExecutorModels : public ::testing::TestWithParam<const char*> {};

// The executor's own accounting (live bytes) agrees with the plan's live peak, and the highest
// byte it wrote (arena scan) lies in the top block of the plan's arena: the plan placed nothing
// it did not need, and nothing was written above it.
TEST_P(ExecutorModels, MeasuredPeakEqualsAnalysisPrediction) {
  Graph g = model(GetParam(), 2, OptimizerKind::kAdam, 1e-3f);
  TrainRun r = train(g, 2);
  ASSERT_EQ(r.losses.size(), 2u);
  for (float l : r.losses) EXPECT_TRUE(std::isfinite(l));
  EXPECT_EQ(r.peak, r.predicted);
  EXPECT_GT(r.peak, 0u);
  EXPECT_LE(r.extent, r.placed);
  EXPECT_GT(r.extent, r.placed / 2);
}

TEST_P(ExecutorModels, SameSeedIsBitwiseReproducible) {
  Graph g = model(GetParam(), 2);
  TrainRun a = train(g, 3), b = train(g, 3);
  ASSERT_EQ(a.losses.size(), 3u);
  EXPECT_EQ(0, std::memcmp(a.losses.data(), b.losses.data(), a.losses.size() * sizeof(float)));
  EXPECT_EQ(a.weights, b.weights);
  TrainRun c = train(g, 3, /*seed=*/4);
  EXPECT_NE(a.weights, c.weights);
}

INSTANTIATE_TEST_SUITE_P(Zoo, ExecutorModels,
                         ::testing::Values("resnet-mini", "densenet-mini", "gpt2-mini", "bert-mini"));

TEST(Executor, BudgetTooSmallFailsBeforeAnyKernelRuns) {
  Graph g = model("resnet-mini", 2);
  auto backend = cpu();
  auto fits = Executor::create(g, *backend, ExecutorOptions{});
  ASSERT_TRUE(fits.ok());
  const uint64_t needed = (*fits)->predicted_peak_bytes();
  ExecutorOptions o;
  o.budget_bytes = needed - 1;
  auto ex = Executor::create(g, *backend, o);
  ASSERT_FALSE(ex.ok());
  EXPECT_EQ(ex.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(ex.status().message().find(std::to_string(needed) + " bytes"), std::string::npos)
      << ex.status().message();
  o.budget_bytes = needed;  // exactly enough
  auto exact = Executor::create(g, *backend, o);
  ASSERT_TRUE(exact.ok()) << exact.status().message();
  ASSERT_TRUE((*exact)->initialize().ok());
  auto data = make_synthetic_data(1);
  ASSERT_TRUE((*exact)->run_iteration(0, *data).ok());
  EXPECT_LE((*exact)->measured_peak_bytes(), needed);
  EXPECT_LE((*exact)->measured_extent_bytes().value(), needed);
}

TEST(Executor, LargerBudgetDoesNotChangeTheNumbers) {
  Graph g = model("resnet-mini", 2);
  TrainRun exact = train(g, 2);
  TrainRun roomy = train(g, 2, 3, exact.predicted * 2);
  EXPECT_EQ(exact.losses, roomy.losses);
  EXPECT_EQ(exact.weights, roomy.weights);
}

double mean(const std::vector<float>& v, size_t from, size_t to) {
  return std::accumulate(v.begin() + static_cast<long>(from), v.begin() + static_cast<long>(to), 0.0) /
         static_cast<double>(to - from);
}

// A small ResNet learns the synthetic classes: over 40 SGD iterations at batch 16 the mean loss of
// the last 5 iterations is at least 4x below that of the first 5.
TEST(Executor, SmallResNetLearns) {
  Graph g = model("resnet-mini", 16, OptimizerKind::kSgd, 0.1f);
  TrainRun r = train(g, 40);
  ASSERT_EQ(r.losses.size(), 40u);
  EXPECT_LT(mean(r.losses, 35, 40) * 4, mean(r.losses, 0, 5)) << ::testing::PrintToString(r.losses);
}

// A small GPT learns the synthetic successor table: over 40 Adam iterations at batch 8 and sequence
// length 64 the mean loss of the
// last 5 iterations is at least 2x below that of the first 5 (which start near ln(512) = 6.24).
TEST(Executor, SmallTransformerLearns) {
  Graph g = model("gpt2-mini", 8, OptimizerKind::kAdam, 3e-3f, /*seq=*/64);
  TrainRun r = train(g, 40);
  ASSERT_EQ(r.losses.size(), 40u);
  EXPECT_NEAR(r.losses.front(), std::log(512.0), 0.3);
  EXPECT_LT(mean(r.losses, 35, 40) * 2, mean(r.losses, 0, 5)) << ::testing::PrintToString(r.losses);
}

}  // namespace
}  // namespace ferry
