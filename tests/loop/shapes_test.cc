// Variable shapes (loop/shapes.h): drawing and bucketing, carrying the training state between
// graphs of different shapes, and training over buckets bitwise like the same shapes without a
// plan, every bucket within the budget.
#include "loop/shapes.h"

#include <cstring>
#include <set>

#include <gtest/gtest.h>

#include "cost/profile.h"
#include "graph/zoo/zoo.h"
#include "plan/policies.h"

namespace ferry {
namespace {

TEST(Shapes, RangesParseAndBadOnesNameTheForm) {
  Result<ShapeRange> r = parse_shape_range("seq", "128:1024", 128);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->min, 128);
  EXPECT_EQ(r->max, 1024);
  for (const char* bad : {"", "128", "0:10", "10:5", "a:b", "1:2:3", "-1:4"}) {
    Result<ShapeRange> b = parse_shape_range("seq", bad, 128);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(b.status().message().find("MIN:MAX"), std::string::npos) << b.status().message();
  }
  EXPECT_FALSE(parse_shape_range("seq", "1:2", 0).ok());
}

TEST(Shapes, DrawsAreDeterministicInRangeAndBucketsRoundUpToAtMostMax) {
  const ShapeRange r = parse_shape_range("seq", "100:1000", 128).value();
  std::set<int64_t> buckets;
  for (int64_t i = 0; i < 2000; ++i) {
    const int64_t v = draw_shape(r, 7, i);
    ASSERT_GE(v, 100);
    ASSERT_LE(v, 1000);
    EXPECT_EQ(v, draw_shape(r, 7, i)) << "a function of seed and iteration";
    const int64_t b = bucket_of(r, v);
    EXPECT_GE(b, v);
    EXPECT_LE(b, 1000);
    EXPECT_TRUE(b % 128 == 0 || b == 1000) << b;
    buckets.insert(b);
  }
  EXPECT_EQ(buckets, (std::set<int64_t>{128, 256, 384, 512, 640, 768, 896, 1000}));
  int differ = 0;
  for (int64_t i = 0; i < 100; ++i) differ += draw_shape(r, 7, i) != draw_shape(r, 8, i);
  EXPECT_GT(differ, 90) << "another seed, other shapes";
}

Graph gpt2(int64_t seq) {
  ModelConfig c;
  c.batch = 2;
  c.seq = seq;
  c.train.optimizer = OptimizerKind::kAdam;
  c.train.lr = 1e-3f;
  return build_model("gpt2-mini", c).value();
}

TEST(Shapes, StateCarriesByNameAndRefusesWeightsOfAnotherSize) {
  const Graph a = gpt2(16), b = gpt2(48);
  TrainingState s;
  s.optimizer_step = 5;
  s.persistent.resize(a.tensors.size());
  for (const Tensor& t : a.tensors)
    if (t.persistent()) s.persistent[t.id].assign(static_cast<size_t>(t.numel()) * dtype_size(t.dtype), std::byte(t.id));
  Result<TrainingState> carried = carry_state(s, a, b);
  ASSERT_TRUE(carried.ok()) << carried.status().message();
  EXPECT_EQ(carried->optimizer_step, 5);
  for (const Tensor& t : b.tensors) {
    if (!t.persistent()) continue;
    TensorId in_a = kNoTensor;
    for (const Tensor& u : a.tensors)
      if (u.name == t.name) in_a = u.id;
    ASSERT_NE(in_a, kNoTensor);
    EXPECT_EQ(carried->persistent[t.id], s.persistent[in_a]) << t.name;
  }
  // A CNN at another batch shares its weights too; a different model does not.
  ModelConfig c;
  c.batch = 2;
  const Graph r2 = build_model("resnet-mini", c).value();
  EXPECT_FALSE(carry_state(s, a, r2).ok());
}

// Training over seq buckets with a plan per bucket gives bitwise the losses and weights of the
// same shapes trained without plans; every bucket's executor stays within the budget.
TEST(Shapes, BucketedTrainingIsBitwiseTheSameAndWithinBudget) {
  auto backend = make_backend("cpu").value();
  const ShapeRange range = parse_shape_range("seq", "8:40", 16).value();
  const HardwareProfile hw = load_profile("cpu-local").value();
  // The budget: 85% of the largest shape's keep plan (the smallest bucket then needs no plan).
  const Graph largest = with_backend_sizes(gpt2(40), *backend->compile(gpt2(40)).value());
  const CostModel cost(hw);
  const uint64_t none = plan_policy("none", PlanContext{.graph = largest, .cost = cost}).value().device_bytes;
  const uint64_t budget = none * 85 / 100;

  auto run = [&](bool planned) -> Result<std::pair<std::vector<float>, uint64_t>> {
    auto factory = [&](int64_t seq) -> Result<BucketParts> {
      BucketParts p;
      p.graph = gpt2(seq);
      auto compiled = backend->compile(p.graph).value();
      p.sized = with_backend_sizes(p.graph, *compiled);
      const std::vector<uint64_t> scratch = compiled->all_scratch_bytes();
      p.options.executor.seed = 9;
      p.options.executor.budget_bytes = planned ? budget : 0;
      p.options.profile = hw;
      p.options.op_scratch_bytes = scratch;
      p.options.measure_online = planned;
      p.options.drift_threshold = 0;
      p.plan = [planned, budget, scratch](const Graph& timed, const CostModel& c) -> Result<Schedule> {
        if (!planned) return Schedule::keep_all(timed.ops.size());
        PlanContext ctx{.graph = timed, .cost = c, .budget_bytes = budget, .op_scratch_bytes = scratch};
        FERRY_ASSIGN_OR_RETURN(PlanReport r, plan_policy("capuchin", ctx));
        return r.schedule;
      };
      p.data = make_synthetic_data(9);
      return p;
    };
    ShapeBuckets buckets(*backend, range, 3, factory);
    std::vector<float> losses;
    for (int64_t i = 0; i < 10; ++i) {
      FERRY_ASSIGN_OR_RETURN(LoopIteration it, buckets.run_iteration(i));
      losses.push_back(it.stats.loss);
    }
    EXPECT_GE(buckets.buckets().size(), 2u) << "the draw must visit several buckets";
    for (const auto& [v, b] : buckets.buckets()) EXPECT_GE(b->iterations, 1);
    return std::make_pair(losses, buckets.measured_peak_bytes());
  };
  Result<std::pair<std::vector<float>, uint64_t>> plain = run(false);
  Result<std::pair<std::vector<float>, uint64_t>> planned = run(true);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  ASSERT_TRUE(planned.ok()) << planned.status().message();
  EXPECT_EQ(0, std::memcmp(plain->first.data(), planned->first.data(), sizeof(float) * plain->first.size()));
  EXPECT_LE(planned->second, budget);
  EXPECT_GT(plain->second, budget) << "the largest shape must not fit without a plan: the case proves nothing";
}

}  // namespace
}  // namespace ferry
