// Helpers shared by the policy tests: a training chain written by hand (layer inputs saved for
// backward, as a real MLP or CNN does), a cost model with round numbers, and queries over a
// Schedule's actions.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cost/cost_model.h"
#include "cost/profile.h"
#include "cost/test_profile.h"
#include "graph/graph.h"
#include "graph/zoo/zoo.h"
#include "schedule/hand_schedule.h"
#include "schedule/placement.h"
#include "plan/ferry/ferry_planner.h"
#include "plan/policies.h"
#include "plan/policy_common.h"
#include "schedule/program.h"
#include "schedule/schedule.h"
#include "sim/simulator.h"

namespace ferry::policy_test {

// A chain of n layers: a_0 = x (data input), f_i: a_{i-1} -> a_i (forward step i-1), a loss op
// on a_n, then backward: loss_bwd reads a_n, b_i reads the gradient and the layer input a_{i-1}
// (as conv/linear backward-weights does), the last one producing the weight gradient, and one
// update. Steps: f_1..f_n = 0..n-1, loss = n, loss_bwd = n+1, b_i = 2n+2-i, update = 2n+2.
struct Chain {
  plan_test::HandGraph h{"chain"};
  int n = 0;
  TensorId x = kNoTensor, w = kNoTensor, loss = kNoTensor;
  std::vector<TensorId> a;  // a[0] = x, a[i] = output of f_i
  std::vector<OpId> forward, backward;  // forward[i] = step of f_i, backward[i] = step of b_i (1-based)

  // bytes[i] = size of a_i (bytes[0] = x); op_us[i] = time of f_i (index 0 unused).
  Chain(const std::vector<uint64_t>& bytes, const std::vector<double>& op_us) {
    n = static_cast<int>(bytes.size()) - 1;
    w = h.weight("w", 256);
    x = h.input("x", bytes[0]);
    a.push_back(x);
    for (int i = 1; i <= n; ++i) a.push_back(h.tensor(fmt::format("a{}", i), bytes[static_cast<size_t>(i)]));
    loss = h.tensor("loss", 64);
    std::vector<TensorId> d(static_cast<size_t>(n) + 1);
    for (int i = 1; i <= n; ++i)
      d[static_cast<size_t>(i)] = h.tensor(fmt::format("d{}", i), bytes[static_cast<size_t>(i)], TensorRole::kGradient);
    const TensorId dw = h.tensor("dw", 256, TensorRole::kWeightGradient);
    forward.assign(static_cast<size_t>(n) + 1, kNoOp);
    backward.assign(static_cast<size_t>(n) + 1, kNoOp);
    for (int i = 1; i <= n; ++i) {
      std::vector<TensorId> in{a[static_cast<size_t>(i - 1)]};
      if (i == 1) in.push_back(w);
      forward[static_cast<size_t>(i)] = h.op(fmt::format("f{}", i), in, {a[static_cast<size_t>(i)]}, op_us[static_cast<size_t>(i)]);
    }
    h.op("loss_op", {a[static_cast<size_t>(n)]}, {loss}, 1.0);
    h.op("loss_bwd", {a[static_cast<size_t>(n)]}, {d[static_cast<size_t>(n)]}, 1.0, Phase::kBackward);
    for (int i = n; i >= 1; --i) {
      const TensorId out = i > 1 ? d[static_cast<size_t>(i - 1)] : dw;
      backward[static_cast<size_t>(i)] = h.op(fmt::format("b{}", i), {d[static_cast<size_t>(i)], a[static_cast<size_t>(i - 1)]},
                                              {out}, op_us[static_cast<size_t>(i)], Phase::kBackward);
    }
    h.op("update", {w, dw}, {w}, 1.0, Phase::kUpdate);
    h.set_loss(loss);
  }
  const Graph& g() const { return h.graph(); }
  Graph& mutable_graph() { return h.graph(); }
};

inline CostModel round_cost() { return CostModel(cost_test::round_profile()); }

// Scratch per op as a backend reports it (oneDNN's convolutions and matmuls need some).
inline std::vector<uint64_t> backend_like_scratch(const Graph& g) {
  std::vector<uint64_t> scratch;
  for (const Op& op : g.ops)
    scratch.push_back(op_class_of(op.type) == OpClass::kConv || op_class_of(op.type) == OpClass::kMatMul
                          ? 8192 + 64 * static_cast<uint64_t>(op.id % 7)
                          : 0);
  return scratch;
}

// The simulated iteration time of `s` under ctx's cost model and scratch (0 on a simulator error,
// which fails the test).
inline double simulated_us(const PlanContext& ctx, const Schedule& s) {
  SimOptions so;
  so.record_timeline = false;
  so.timing_only = true;
  so.op_scratch_bytes = ctx.op_scratch_bytes;
  Schedule coded = s;  // with the SSD codecs plan_policy gives a plan (planners' attempts have none)
  if (coded.ssd_codecs.empty()) attach_ssd_codecs(ssd_codec_choice(ctx), coded);
  Result<SimResult> r = simulate(ctx.graph, coded, ctx.cost, so);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r->iteration_us : 0;
}

// A model or policy name as a test-name suffix ('-' is not allowed there).
inline std::string param_name(std::string name) {
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

// Every action of `s` with where it sits.
struct Placed {
  Action action;
  OpId step;
  bool before;  // in before[step] (else after[step])
};
inline std::vector<Placed> actions_of(const Schedule& s) {
  std::vector<Placed> out;
  for (size_t i = 0; i < s.before.size(); ++i)
    for (const Action& a : s.before[i]) out.push_back({a, static_cast<OpId>(i), true});
  for (size_t i = 0; i < s.after.size(); ++i)
    for (const Action& a : s.after[i]) out.push_back({a, static_cast<OpId>(i), false});
  return out;
}
inline std::vector<Placed> actions_of(const Schedule& s, ActionKind kind, TensorId t) {
  std::vector<Placed> out;
  for (const Placed& p : actions_of(s))
    if (p.action.kind == kind && p.action.tensor == t) out.push_back(p);
  return out;
}
// The tensors named by actions of `kind`, sorted and unique.
inline std::vector<TensorId> tensors_with(const Schedule& s, ActionKind kind) {
  std::vector<TensorId> out;
  for (const Placed& p : actions_of(s))
    if (p.action.kind == kind) out.push_back(p.action.tensor);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// Lowers and places `s` independently of the planner: the schedule must be legal, and the
// device bytes the planner reported must be what placement computes.
inline ::testing::AssertionResult legal_and_measured(const Graph& g, const PlanReport& r,
                                                      const std::vector<uint64_t>& scratch = {}) {
  ProgramOptions o;
  o.op_scratch_bytes = scratch;
  Result<Program> p = lower_schedule(g, r.schedule, o);
  if (!p.ok()) return ::testing::AssertionFailure() << "lower_schedule: " << p.status().message();
  Result<ProgramPlacement> pl = place_program(g, *p, 64);
  if (!pl.ok()) return ::testing::AssertionFailure() << "place_program: " << pl.status().message();
  if (pl->arena_bytes != r.device_bytes)
    return ::testing::AssertionFailure() << "placement needs " << pl->arena_bytes << " bytes, the planner said "
                                         << r.device_bytes;
  return ::testing::AssertionSuccess();
}

inline PlanReport must_plan(std::string_view policy, const PlanContext& ctx) {
  Result<PlanReport> r = plan_policy(policy, ctx);
  EXPECT_TRUE(r.ok()) << policy << ": " << r.status().message();
  return r.ok() ? std::move(r).value() : PlanReport{};
}

// plan_ferry with its default tuning against `without` (one of its passes turned off) at ctx's
// budget. Where the plan without the pass fits, the default one must fit too, never be slower
// (simulated; by more than the fraction `slack` where the pass changes the path of later ones)
// and stay within the budget as the full placement measures it; returns both times and the default
// plan's notes. nullopt where the plan without does not fit (or on a failure, which fails the test).
struct WithAndWithout {
  double with_us = 0, without_us = 0;
  std::string with_notes;
};
// `with`: the tuning of the plan compared (default: ferry's); `without` its tuning less the pass.
inline std::optional<WithAndWithout> compare_with_default(const PlanContext& ctx, const FerryTuning& without,
                                                          double slack = 1e-9, const FerryTuning& with = {}) {
  Result<PlanFacts> f = make_plan_facts(ctx);
  if (!f.ok()) {
    ADD_FAILURE() << f.status().message();
    return std::nullopt;
  }
  Result<PlanAttempt> off = plan_ferry(ctx, *f, without), on = plan_ferry(ctx, *f, with);
  if (!off.ok() || !on.ok()) {
    ADD_FAILURE() << (off.ok() ? on.status() : off.status()).message();
    return std::nullopt;
  }
  if (!off->fits) return std::nullopt;
  EXPECT_TRUE(on->fits) << "the plan without the pass fits, the default one does not";
  if (!on->fits) return std::nullopt;
  WithAndWithout out{simulated_us(ctx, on->schedule), simulated_us(ctx, off->schedule), on->notes};
  EXPECT_LE(out.with_us, out.without_us * (1 + slack));
  Result<PlanMeasure> m = measure_schedule(*f, on->schedule);
  EXPECT_TRUE(m.ok()) << m.status().message();
  if (m.ok()) {
    EXPECT_LE(m->device_bytes, ctx.budget_bytes);
  }
  return out;
}

// compare_with_default() in every cell of devices x models (zoo models at `batch`) x budgets
// (fractions of the model's no-swap peak), with its `slack`. `won` says whether the default plan
// won a cell (it may check more, with EXPECTs); by default, whether it is faster. Returns how many
// cells were compared (the plan without the pass fits), how many were won, and the sum over them
// of log(with / without) (negative: faster on the geometric mean).
struct CellTally {
  size_t compared = 0, won = 0;
  double log_ratio_sum = 0;
};
inline bool faster(const PlanContext&, const WithAndWithout& r) { return r.with_us < r.without_us * (1 - 1e-6); }
inline CellTally compare_over_cells(std::initializer_list<const char*> devices,
                                    std::initializer_list<const char*> models, int batch,
                                    std::initializer_list<double> fractions, const FerryTuning& without,
                                    const std::function<bool(const PlanContext&, const WithAndWithout&)>& won = faster,
                                    double slack = 1e-9, const FerryTuning& with = {}) {
  CellTally tally;
  for (const char* device : devices) {
    const CostModel cost(load_profile(device).value());
    for (const char* name : models) {
      ModelConfig c;
      c.batch = batch;
      const Graph g = build_model(name, c).value();
      PlanContext ctx{.graph = g, .cost = cost};
      const uint64_t full = must_plan("none", ctx).device_bytes;
      for (double fraction : fractions) {
        SCOPED_TRACE(::testing::Message() << name << " on " << device << " at " << 100 * fraction << "%");
        ctx.budget_bytes = static_cast<uint64_t>(fraction * static_cast<double>(full));
        const std::optional<WithAndWithout> r = compare_with_default(ctx, without, slack, with);
        if (!r) continue;
        ++tally.compared;
        tally.won += won(ctx, *r) ? 1 : 0;
        tally.log_ratio_sum += std::log(r->with_us / r->without_us);
      }
    }
  }
  return tally;
}

}  // namespace ferry::policy_test
