// Every zoo model, built at batch 2 with its default sizes: the analysis succeeds, its plan passes
// the checker, the arena is within 5% of the transient lower bound, and the bookkeeping agrees
// with the graph (every transient tensor that exists has a buffer covering its lifetime).

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "analysis/analysis.h"
#include "memory/sharing_plan.h"
#include "graph/zoo/zoo.h"

namespace ferry {
namespace {

class ZooAnalysis : public ::testing::TestWithParam<std::string> {};

TEST_P(ZooAnalysis, PlanIsValidAndWithinFivePercentOfTheLowerBound) {
  ModelConfig config;
  config.batch = 2;
  Result<Graph> g = build_model(GetParam(), config);
  ASSERT_TRUE(g.ok()) << g.status().message();
  Result<Analysis> res = analyze(*g);
  ASSERT_TRUE(res.ok()) << res.status().message();
  const Analysis& a = *res;

  EXPECT_TRUE(check_memory_plan(*g, a.buffers, a.plan).ok()) << check_memory_plan(*g, a.buffers, a.plan).message();
  const uint64_t transient_bound = a.lower_bound_bytes - a.persistent_bytes;
  ASSERT_GT(transient_bound, 0u);
  EXPECT_GE(a.plan.arena_bytes, aligned_live_lower_bound(a.buffers, a.plan.alignment));
  EXPECT_LE(static_cast<double>(a.plan.arena_bytes), 1.05 * static_cast<double>(transient_bound))
      << "arena " << a.plan.arena_bytes << " vs transient lower bound " << transient_bound;
  RecordProperty("arena_over_lower_bound",
                 std::to_string(static_cast<double>(a.plan.arena_bytes) / static_cast<double>(transient_bound)));

  EXPECT_GE(a.peak_bytes_keep_all, a.peak_bytes_free_at_last_use);
  EXPECT_GE(a.peak_bytes_free_at_last_use, a.lower_bound_bytes);
  EXPECT_EQ(a.peak_bytes_shared, a.persistent_region_bytes + a.plan.arena_bytes);
  EXPECT_EQ(a.weight_bytes, g->weight_bytes());
  EXPECT_GT(a.activation_bytes, 0u);
  ASSERT_EQ(a.step_inputs.size(), g->ops.size());
  ASSERT_EQ(a.live_bytes_shared.size(), g->ops.size());

  // Every transient tensor that some op produces, or that is a data input, lives in a buffer whose
  // lifetime covers its own.
  for (const Tensor& t : g->tensors) {
    const TensorInfo& ti = a.tensors[static_cast<size_t>(t.id)];
    if (t.persistent()) continue;
    if (ti.producer == kNoOp && t.role != TensorRole::kInput) continue;
    ASSERT_GE(ti.buffer, 0) << t.name;
    const Buffer& b = a.buffers[static_cast<size_t>(ti.buffer)];
    EXPECT_LE(b.first_step, ti.first_use) << t.name;
    EXPECT_GE(b.last_step, ti.last_use) << t.name;
  }
  // Training graphs save activations for backward: some tensor has a positive idle interval.
  bool some_saved = false;
  for (const TensorInfo& ti : a.tensors) some_saved = some_saved || ti.idle_steps > 0;
  EXPECT_TRUE(some_saved);
}

std::vector<std::string> zoo_names() {
  std::vector<std::string> names;
  for (const ModelEntry& e : model_zoo()) names.push_back(e.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(AllModels, ZooAnalysis, ::testing::ValuesIn(zoo_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

// The irreducible minimum (Analysis::op_working_set_bytes): recomputed here by brute force over
// the ops (distinct inputs and outputs at the alignment, plus scratch), updates apart; no live-byte
// profile can go below it, so it is at most the lower bound.
TEST(IrreducibleMinimum, IsTheLargestWorkingSetOfOneOp) {
  for (const char* name : {"resnet-mini", "gpt2-mini"}) {
    SCOPED_TRACE(name);
    ModelConfig config;
    config.batch = 2;
    config.train.optimizer = OptimizerKind::kAdam;
    const Graph g = build_model(name, config).value();
    AnalysisOptions o;
    o.alignment = 64;
    o.op_scratch_bytes.assign(g.ops.size(), 0);
    o.op_scratch_bytes[3] = 1000;  // scratch counts, aligned
    Result<Analysis> a = analyze(g, o);
    ASSERT_TRUE(a.ok()) << a.status().message();
    uint64_t best = 0, best_update = 0;
    for (const Op& op : g.ops) {
      std::vector<TensorId> set = op.inputs;
      for (TensorId t : op.outputs)
        if (std::find(set.begin(), set.end(), t) == set.end()) set.push_back(t);
      std::vector<TensorId> distinct;
      for (TensorId t : set)
        if (std::find(distinct.begin(), distinct.end(), t) == distinct.end()) distinct.push_back(t);
      uint64_t bytes = (o.op_scratch_bytes[static_cast<size_t>(op.id)] + 63) / 64 * 64;
      for (TensorId t : distinct) bytes += (g.tensor(t).bytes + 63) / 64 * 64;
      const bool update = op.type == OpType::kSgdUpdate || op.type == OpType::kAdamUpdate;
      (update ? best_update : best) = std::max(update ? best_update : best, bytes);
    }
    EXPECT_EQ(a->op_working_set_bytes, best);
    EXPECT_EQ(a->update_working_set_bytes, best_update);
    EXPECT_GT(best_update, 0u);
    ASSERT_NE(a->op_working_set_op, kNoOp);
    EXPECT_NE(g.op(a->op_working_set_op).type, OpType::kAdamUpdate);
    EXPECT_LE(a->op_working_set_bytes, a->lower_bound_bytes);
  }
}

}  // namespace
}  // namespace ferry
