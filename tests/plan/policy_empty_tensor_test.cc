// Empty (0-byte) tensors hold no memory: a graph with them must analyse, plan and simulate
// exactly like the same graph without them, for every policy and budget. Real traces are full of
// them (an undefined bias, an empty loss weight); before the allocator and placement agreed on
// their size, any one of them made every plan infeasible.
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "analysis/analysis.h"
#include "graph/zoo/zoo.h"
#include "plan/policies.h"
#include "plan/policy_test_util.h"
#include "sim/simulator.h"

namespace ferry {
namespace {

using policy_test::round_cost;

TensorId add_empty(Graph& g, const std::string& name, TensorRole role) {
  Tensor t;
  t.id = static_cast<TensorId>(g.tensors.size());
  t.name = name;
  t.role = role;
  t.bytes = 0;
  g.tensors.push_back(t);
  return t.id;
}

// `g` with empty tensors appended (so every other tensor keeps its id): a data input read by the
// first op and by the first backward op (saved across the turn), a weight (an undefined bias)
// read by a forward op, an activation of a forward op read by the first backward op (saved), and
// a workspace output nobody reads.
Graph with_empty_tensors(const Graph& g) {
  Graph out = g;
  OpId first_backward = kNoOp, mid_forward = kNoOp;
  for (const Op& op : g.ops) {
    if (op.phase == Phase::kBackward && first_backward == kNoOp) first_backward = op.id;
    if (op.phase == Phase::kForward && op.id <= static_cast<OpId>(g.ops.size() / 4)) mid_forward = op.id;
  }
  const TensorId input = add_empty(out, "empty.input", TensorRole::kInput);
  const TensorId bias = add_empty(out, "empty.bias", TensorRole::kWeight);
  const TensorId saved = add_empty(out, "empty.saved", TensorRole::kActivation);
  const TensorId ws = add_empty(out, "empty.workspace", TensorRole::kWorkspace);
  out.ops[0].inputs.push_back(input);
  out.ops[static_cast<size_t>(mid_forward)].inputs.push_back(bias);
  out.ops[static_cast<size_t>(mid_forward)].outputs.push_back(saved);
  out.ops[static_cast<size_t>(mid_forward)].outputs.push_back(ws);
  out.ops[static_cast<size_t>(first_backward)].inputs.push_back(input);
  out.ops[static_cast<size_t>(first_backward)].inputs.push_back(saved);
  return out;
}

class EmptyTensorTest : public ::testing::TestWithParam<std::string> {};

TEST_P(EmptyTensorTest, PlansExactlyLikeTheGraphWithoutThem) {
  ModelConfig config;
  config.batch = 2;
  Result<Graph> g = build_model(GetParam(), config);
  ASSERT_TRUE(g.ok()) << g.status().message();
  const Graph with = with_empty_tensors(*g);
  ASSERT_TRUE(with.validate().ok()) << with.validate().message();

  Result<Analysis> a = analyze(*g), b = analyze(with);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->peak_bytes_keep_all, b->peak_bytes_keep_all);
  EXPECT_EQ(a->peak_bytes_free_at_last_use, b->peak_bytes_free_at_last_use);
  EXPECT_EQ(a->peak_bytes_shared, b->peak_bytes_shared);
  EXPECT_EQ(a->lower_bound_bytes, b->lower_bound_bytes);
  EXPECT_EQ(a->plan.arena_bytes, b->plan.arena_bytes);

  const CostModel cost = round_cost();
  for (const PolicyInfo& p : list_policies()) {
    if (p.name == "ferry-exact") continue;  // a MILP per probe; tests/plan/ferry_exact_test.cc covers it
    PlanContext without_ctx{.graph = *g, .cost = cost};
    PlanContext with_ctx{.graph = with, .cost = cost};
    for (PlanContext* c : {&without_ctx, &with_ctx}) c->options.checkmate_max_nodes = 5;
    Result<PlanReport> none = plan_policy("none", without_ctx);
    ASSERT_TRUE(none.ok()) << none.status().message();
    Result<uint64_t> min_without = find_min_budget(p.name, without_ctx), min_with = find_min_budget(p.name, with_ctx);
    ASSERT_EQ(min_without.ok(), min_with.ok()) << p.name;
    if (min_without.ok()) {
      EXPECT_EQ(*min_without, *min_with) << p.name;
    }
    // checkmate solves a MILP per plan (seconds each): its own minimum only.
    std::vector<uint64_t> budgets;
    if (p.name != "checkmate") budgets = {0, none->device_bytes, none->device_bytes * 7 / 10, none->device_bytes / 2};
    if (min_without.ok()) budgets.push_back(*min_without);
    for (uint64_t budget : budgets) {
      SCOPED_TRACE(fmt::format("{} {} budget {}", GetParam(), p.name, budget));
      without_ctx.budget_bytes = with_ctx.budget_bytes = budget;
      Result<PlanReport> x = plan_policy(p.name, without_ctx), y = plan_policy(p.name, with_ctx);
      ASSERT_EQ(x.ok(), y.ok()) << (x.ok() ? y.status().message() : x.status().message());
      if (!x.ok()) continue;
      EXPECT_EQ(x->device_bytes, y->device_bytes);
      EXPECT_EQ(x->live_peak_bytes, y->live_peak_bytes);
      EXPECT_EQ(x->swapped_tensors, y->swapped_tensors);
      EXPECT_EQ(x->recomputed_tensors, y->recomputed_tensors);
      EXPECT_EQ(x->schedule.before, y->schedule.before) << "the same actions, on the same tensor ids";
      EXPECT_EQ(x->schedule.after, y->schedule.after);
      SimOptions so;
      so.budget_bytes = budget;
      so.record_timeline = false;
      Result<SimResult> sx = simulate(*g, x->schedule, cost, so), sy = simulate(with, y->schedule, cost, so);
      ASSERT_TRUE(sx.ok() && sy.ok());
      EXPECT_TRUE(sy->feasible) << sy->reason;
      EXPECT_EQ(sx->feasible, sy->feasible);
      EXPECT_EQ(sx->peak_device_bytes, sy->peak_device_bytes);
      EXPECT_EQ(sx->peak_in_use_bytes, sy->peak_in_use_bytes);
      EXPECT_EQ(sx->iteration_us, sy->iteration_us);
      EXPECT_EQ(sx->bytes_d2h + sx->bytes_ssd_write, sy->bytes_d2h + sy->bytes_ssd_write);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, EmptyTensorTest, ::testing::Values("resnet-mini", "gpt2-mini"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace ferry
