// What trace format v2 lets a graph say, through the analysis, the program, the planners and the
// simulator (the CPU executor: tests/e2e/accumulation_test.cc): storage versions written in place on any output (`overwrites`),
// release points (`free_after`), and several forward/backward passes in one iteration (gradient
// accumulation, whose weight gradients are chains of versions).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "analysis/analysis.h"
#include "common/accumulate_graph.h"
#include "common/hand_graph.h"
#include "graph/trace.h"
#include "graph/zoo/zoo.h"
#include "plan/policies.h"
#include "plan/policy_test_util.h"
#include "schedule/program.h"
#include "sim/simulator.h"

namespace ferry {
namespace {

using policy_test::round_cost;

// x -> f -> a;  g(a) -> b, a2 where a2 (the SECOND output) overwrites a;  h(a2, b) -> c (loss);
// backward: gc(c, a2) -> d, held by the framework through the last op;  gd(d) -> e;  tail(e) -> t.
struct VersionedGraph {
  plan_test::HandGraph h{"versions"};
  TensorId x, a, b, a2, c, d, e, t;
  VersionedGraph() {
    x = h.input("x", 100);
    a = h.tensor("a", 1000);
    b = h.tensor("b", 500);
    a2 = h.tensor("a2", 1000);
    c = h.tensor("c", 10);
    d = h.tensor("d", 2000, TensorRole::kGradient);
    e = h.tensor("e", 10, TensorRole::kGradient);
    t = h.tensor("t", 10, TensorRole::kGradient);
    h.op("f", Phase::kForward, {x}, {a});            // 0
    h.op("g", Phase::kForward, {a}, {b, a2});        // 1
    h.op("h", Phase::kForward, {a2, b}, {c});        // 2
    h.op("gc", Phase::kBackward, {c, a2}, {d});      // 3
    h.op("gd", Phase::kBackward, {d}, {e});          // 4
    h.op("tail", Phase::kBackward, {e}, {t});        // 5
    h.set_loss(c);
    Graph& g = h.graph();
    g.tensors[static_cast<size_t>(a2)].overwrites = a;
    g.tensors[static_cast<size_t>(d)].free_after = 5;
  }
};

TEST(TraceV2Analysis, VersionsShareOneBufferAndReleasePointsHoldMemory) {
  VersionedGraph v;
  const Graph& g = v.h.graph();
  ASSERT_TRUE(g.validate().ok()) << g.validate().message();
  Result<Analysis> r = analyze(g);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const Analysis& an = *r;
  EXPECT_EQ(an.tensors[v.a].buffer, an.tensors[v.a2].buffer) << "a2 is a's storage, written in place";
  EXPECT_EQ(an.tensors[v.d].last_use, 5) << "d is held to its release point";
  // Live bytes with sharing, step by step (computed by hand from the rules in analysis.h):
  //   0 f:  x + a = 1100            1 g: a|a2 + b = 1500         2 h: a2 + b + c = 1510
  //   3 gc: a2 + c + d = 3010       4 gd: c + d + e = 2020       5 tail: c + d + e + t = 2030
  // (c is the loss, live to the end; without the release point d would die at step 4.)
  EXPECT_EQ(an.live_bytes_shared, (std::vector<uint64_t>{1100, 1500, 1510, 3010, 2020, 2030}));
  // Without the version link a2 is a separate buffer: step 1 would hold a, b and a2.
  Graph unlinked = g;
  unlinked.tensors[static_cast<size_t>(v.a2)].overwrites = kNoTensor;
  Result<Analysis> u = analyze(unlinked);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->live_bytes_shared[1], 2500u);

  // The program the simulator and the executor follow: a2's block is a's, d is freed at step 5.
  Result<Program> p = lower_schedule(g, Schedule::keep_all(g.ops.size()));
  ASSERT_TRUE(p.ok()) << p.status().message();
  bool inherited = false, freed_at_5 = false;
  for (const Instruction& in : p->instructions) {
    if (in.kind == InstrKind::kAlloc && in.tensor == v.a2) inherited = in.inherit == v.a;
    if (in.kind == InstrKind::kFree && in.tensor == v.d) freed_at_5 = in.step == 5;
  }
  EXPECT_TRUE(inherited) << p->to_text(g);
  EXPECT_TRUE(freed_at_5) << p->to_text(g);
  SimOptions so;
  so.alignment = 1;
  so.record_timeline = false;
  Result<SimResult> sim = simulate(g, Schedule::keep_all(g.ops.size()), round_cost(), so);
  ASSERT_TRUE(sim.ok()) << sim.status().message();
  EXPECT_EQ(sim->peak_in_use_bytes, an.lower_bound_bytes);
  EXPECT_EQ(an.lower_bound_bytes, 3010u);
}

Graph zoo(const std::string& name) {
  ModelConfig c;
  c.batch = 2;
  if (name.rfind("gpt2", 0) == 0) c.seq = 16;
  return build_model(name, c).value();
}

class Accumulation : public ::testing::TestWithParam<std::string> {};

TEST_P(Accumulation, AnalysisGapsStayWithinAPassAndGradientsStayOneBuffer) {
  const Graph one = zoo(GetParam());
  const Graph two = test::accumulate_two(one);
  ASSERT_TRUE(two.validate().ok()) << two.validate().message();
  // The file form says the same: exported as version 2, read back equal.
  const std::string text = to_trace_json(two, false);
  Result<Graph> back = parse_trace(text, "two.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(graph_difference(two, *back), "");
  EXPECT_EQ(trace_version_needed(two), 2);

  Result<Analysis> a1 = analyze(one), a2 = analyze(two);
  ASSERT_TRUE(a1.ok() && a2.ok()) << (a2.ok() ? "" : a2.status().message());
  size_t accumulated = 0;
  uint64_t grad_bytes = 0;
  for (const Tensor& t : two.tensors) {
    const TensorInfo& ti = a2->tensors[static_cast<size_t>(t.id)];
    if (ti.first_backward_use != kNoOp && ti.last_forward_use != kNoOp) {
      EXPECT_LT(ti.last_forward_use, ti.first_backward_use) << t.name;
    }
    EXPECT_GE(ti.idle_steps, 0) << t.name;
    if (t.overwrites != kNoTensor) {
      ++accumulated;
      EXPECT_EQ(ti.buffer, a2->tensors[static_cast<size_t>(t.overwrites)].buffer) << t.name;
    }
    if (t.role == TensorRole::kWeightGradient && t.overwrites == kNoTensor && static_cast<size_t>(t.id) < one.tensors.size())
      grad_bytes += t.bytes;
  }
  EXPECT_GT(accumulated, 0u);
  // The second pass holds what the first held at the same point, plus the first pass's weight
  // gradients: accumulating in place costs no third copy.
  EXPECT_LE(a2->lower_bound_bytes, a1->lower_bound_bytes + grad_bytes);
  EXPECT_GE(a2->lower_bound_bytes, a1->lower_bound_bytes);
}

TEST_P(Accumulation, EveryPolicyPlansWithinTheBudgetOrRefusesWithAReason) {
  const Graph two = test::accumulate_two(zoo(GetParam()));
  const CostModel cost = round_cost();
  PlanContext ctx{.graph = two, .cost = cost};
  ctx.options.checkmate_max_nodes = 5;
  Result<PlanReport> none = plan_policy("none", ctx);
  ASSERT_TRUE(none.ok()) << none.status().message();
  const size_t first_pass_ops = zoo(GetParam()).ops.size();
  for (const PolicyInfo& p : list_policies()) {
    if (p.name == "ferry-exact") continue;  // a MILP per probe: its own tests
    if (p.name == "checkmate") {  // its formulation has one forward pass: a clear refusal
      ctx.budget_bytes = none->device_bytes * 8 / 10;
      Result<PlanReport> r = plan_policy(p.name, ctx);
      ASSERT_FALSE(r.ok());
      EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
      EXPECT_NE(r.status().message().find("needs one forward/backward pass"), std::string::npos)
          << r.status().message();
      continue;
    }
    for (uint64_t budget : {none->device_bytes * 8 / 10, none->device_bytes * 6 / 10}) {
      SCOPED_TRACE(p.name + " at " + std::to_string(budget));
      ctx.budget_bytes = budget;
      Result<PlanReport> r = plan_policy(p.name, ctx);
      if (!r.ok()) {
        EXPECT_FALSE(r.status().message().empty());
        EXPECT_NE(p.name, "ferry") << r.status().message();
        continue;
      }
      SimOptions so;
      so.budget_bytes = budget;
      so.record_timeline = false;
      Result<SimResult> s = simulate(two, r->schedule, cost, so);
      ASSERT_TRUE(s.ok()) << s.status().message();
      EXPECT_TRUE(s->feasible) << s->reason;
      EXPECT_LE(s->peak_device_bytes, budget);
      if (p.name == "ferry") {
        // It plans the second pass too: some action sits in it.
        bool in_second = false;
        for (const policy_test::Placed& pl : policy_test::actions_of(r->schedule))
          in_second |= static_cast<size_t>(pl.step) > first_pass_ops;
        EXPECT_TRUE(in_second);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, Accumulation, ::testing::Values("resnet-mini", "gpt2-mini"),
                         [](const auto& info) { return policy_test::param_name(info.param); });

}  // namespace
}  // namespace ferry
