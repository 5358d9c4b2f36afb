// Property test: random training-like DAGs (forward ops over recent activations, backward ops
// over saved activations and fresh gradients, optimizer updates, random scratch and in-place
// flags), analysed and compared with a naive reference written from the rules in analysis.h:
// lifetimes, step inputs, idle intervals, in-place groups, both live-bytes series and every peak.
// The sharing plan must pass the checker and an all-pairs check, and never beat the lower bound.

#include <algorithm>
#include <random>

#include <gtest/gtest.h>

#include "analysis/analysis.h"
#include "analysis/analysis_test_util.h"
#include "memory/sharing_plan.h"

namespace ferry {
namespace {

using analysis_test::brute_force_disjoint;
using analysis_test::HandGraph;
using R = TensorRole;
using P = Phase;

struct RandomCase {
  Graph g;
  AnalysisOptions options;
};

RandomCase random_case(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto coin = [&](int percent) { return static_cast<int>(rng() % 100) < percent; };
  auto pick = [&](const std::vector<TensorId>& from) { return from[rng() % from.size()]; };
  auto size = [&]() { return 1 + rng() % 4096; };
  HandGraph h;
  std::vector<TensorId> activations, gradients, weights, weight_grads;
  const int num_inputs = 1 + static_cast<int>(rng() % 3);
  for (int i = 0; i < num_inputs; ++i) activations.push_back(h.tensor("in", size(), R::kInput));
  const int num_weights = static_cast<int>(rng() % 4);
  for (int i = 0; i < num_weights; ++i) weights.push_back(h.tensor("w", size(), R::kWeight));

  // Forward: mostly reads recent activations (a chain with skips); sometimes a weight.
  const int num_forward = 2 + static_cast<int>(rng() % 40);
  for (int i = 0; i < num_forward; ++i) {
    std::vector<TensorId> in;
    const int reads = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < reads; ++k) {
      const size_t recent = std::min<size_t>(activations.size(), 4);
      in.push_back(coin(70) ? activations[activations.size() - 1 - rng() % recent] : pick(activations));
    }
    if (!weights.empty() && coin(40)) in.push_back(pick(weights));
    const uint64_t first_in_bytes = h.graph().tensor(in[0]).bytes;
    std::vector<TensorId> out = {h.tensor("a", coin(50) ? first_in_bytes : size())};
    if (coin(15)) out.push_back(h.tensor("ws", size(), R::kWorkspace));
    h.op("f", P::kForward, in, out, coin(40));
    for (TensorId t : out) activations.push_back(t);
  }
  const TensorId loss = h.tensor("loss", 4);
  h.op("loss", P::kForward, {activations.back()}, {loss});
  h.set_loss(loss);

  // Backward: reads the newest gradient (or the loss) and saved activations.
  gradients.push_back(loss);
  const int num_backward = 1 + static_cast<int>(rng() % 40);
  for (int i = 0; i < num_backward; ++i) {
    std::vector<TensorId> in = {coin(75) ? gradients.back() : pick(gradients)};
    const int saved = static_cast<int>(rng() % 3);
    for (int k = 0; k < saved; ++k) in.push_back(pick(activations));
    if (coin(20)) in.push_back(in[0]);  // the same tensor read twice
    const uint64_t first_in_bytes = h.graph().tensor(in[0]).bytes;
    std::vector<TensorId> out = {h.tensor("g", coin(60) ? first_in_bytes : size(), R::kGradient)};
    if (!weights.empty() && coin(30)) {
      out.push_back(h.tensor("dw", size(), R::kWeightGradient));
      weight_grads.push_back(out.back());
    }
    h.op("b", P::kBackward, in, out, coin(50));
    gradients.push_back(out[0]);
  }
  // Updates: one per weight, reading its weight and some weight gradient when there is one.
  for (TensorId w : weights) {
    std::vector<TensorId> in = {w};
    if (!weight_grads.empty()) in.push_back(pick(weight_grads));
    h.op("u", P::kUpdate, in, {w});
  }

  RandomCase c;
  c.g = h.graph();
  c.options.alignment = uint64_t{1} << (rng() % 9);
  c.options.allow_inplace = coin(85);
  if (coin(60)) {
    c.options.op_scratch_bytes.resize(c.g.ops.size());
    for (uint64_t& s : c.options.op_scratch_bytes) s = coin(30) ? size() : 0;
  }
  return c;
}

// The reference: the rules of analysis.h applied by brute force.
struct Reference {
  std::vector<OpId> born, last;  // kNoOp for persistent and never-existing tensors
  std::vector<size_t> group;     // in-place group representative per tensor
  std::vector<uint64_t> live_free, live_shared;
  uint64_t keep_all = 0;
};

Reference reference(const Graph& g, const AnalysisOptions& opt) {
  const size_t n = g.ops.size(), m = g.tensors.size();
  auto scratch = [&](size_t s) { return opt.op_scratch_bytes.empty() ? 0 : opt.op_scratch_bytes[s]; };
  auto reads = [&](size_t s, TensorId t) {
    return std::find(g.ops[s].inputs.begin(), g.ops[s].inputs.end(), t) != g.ops[s].inputs.end();
  };
  auto writes = [&](size_t s, TensorId t) {
    return std::find(g.ops[s].outputs.begin(), g.ops[s].outputs.end(), t) != g.ops[s].outputs.end();
  };
  Reference r;
  r.born.assign(m, kNoOp);
  r.last.assign(m, kNoOp);
  for (size_t t = 0; t < m; ++t) {
    const Tensor& tt = g.tensors[t];
    if (tt.persistent()) continue;
    if (tt.role == R::kInput) r.born[t] = 0;
    for (size_t s = 0; s < n && r.born[t] == kNoOp; ++s)
      if (writes(s, tt.id)) r.born[t] = static_cast<OpId>(s);
    if (r.born[t] == kNoOp) continue;
    r.last[t] = r.born[t];
    for (size_t s = 0; s < n; ++s)
      if (reads(s, tt.id)) r.last[t] = std::max(r.last[t], static_cast<OpId>(s));
    if (tt.id == g.loss) r.last[t] = static_cast<OpId>(n - 1);
  }
  r.group.resize(m);
  for (size_t t = 0; t < m; ++t) r.group[t] = t;
  for (size_t s = 0; s < n && opt.allow_inplace; ++s) {
    const Op& op = g.ops[s];
    if (!op.inplace_capable || op.inputs.empty() || op.outputs.empty()) continue;
    const Tensor& in = g.tensor(op.inputs[0]);
    const Tensor& out = g.tensor(op.outputs[0]);
    if (in.persistent() || out.persistent() || in.role == R::kInput || in.bytes != out.bytes) continue;
    if (r.last[static_cast<size_t>(in.id)] != static_cast<OpId>(s)) continue;
    r.group[static_cast<size_t>(out.id)] = r.group[static_cast<size_t>(in.id)];
  }
  r.live_free.assign(n, 0);
  r.live_shared.assign(n, 0);
  for (size_t s = 0; s < n; ++s) {
    uint64_t allocated = 0;
    std::vector<bool> group_counted(m, false);
    for (size_t t = 0; t < m; ++t) {
      if (r.born[t] == kNoOp || static_cast<size_t>(r.born[t]) > s) continue;
      allocated += g.tensors[t].bytes;
      if (static_cast<size_t>(r.last[t]) < s) continue;
      r.live_free[s] += g.tensors[t].bytes;
      if (!group_counted[r.group[t]]) r.live_shared[s] += g.tensors[t].bytes;
      group_counted[r.group[t]] = true;
    }
    r.live_free[s] += scratch(s);
    r.live_shared[s] += scratch(s);
    r.keep_all = std::max(r.keep_all, allocated + scratch(s));
  }
  return r;
}

TEST(RandomGraphs, AnalysisMatchesTheReferenceAndThePlanIsValid) {
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    const RandomCase c = random_case(seed);
    ASSERT_TRUE(c.g.validate().ok()) << c.g.validate().message();
    Result<Analysis> res = analyze(c.g, c.options);
    ASSERT_TRUE(res.ok()) << res.status().message();
    const Analysis& a = *res;
    const Reference ref = reference(c.g, c.options);
    const size_t n = c.g.ops.size();

    uint64_t persistent = 0;
    for (const Tensor& t : c.g.tensors) persistent += t.persistent() ? t.bytes : 0;
    EXPECT_EQ(a.persistent_bytes, persistent);

    for (size_t s = 0; s < n; ++s) {
      std::vector<TensorId> distinct;
      for (TensorId t : c.g.ops[s].inputs)
        if (std::find(distinct.begin(), distinct.end(), t) == distinct.end()) distinct.push_back(t);
      ASSERT_EQ(a.step_inputs[s], distinct) << "step " << s;
    }
    for (const Tensor& t : c.g.tensors) {
      const TensorInfo& ti = a.tensors[static_cast<size_t>(t.id)];
      SCOPED_TRACE(::testing::Message() << "tensor " << t.id);
      if (t.persistent()) {
        EXPECT_EQ(ti.buffer, -1);
        continue;
      }
      ASSERT_EQ(ti.first_use, ref.born[static_cast<size_t>(t.id)]);
      ASSERT_EQ(ti.last_use, ref.last[static_cast<size_t>(t.id)]);
      // Same buffer exactly when the reference puts them in one in-place group.
      for (const Tensor& u : c.g.tensors) {
        if (u.persistent() || ref.born[static_cast<size_t>(u.id)] == kNoOp || ti.first_use == kNoOp) continue;
        const bool same_group = ref.group[static_cast<size_t>(t.id)] == ref.group[static_cast<size_t>(u.id)];
        ASSERT_EQ(ti.buffer == a.tensors[static_cast<size_t>(u.id)].buffer, same_group) << "vs tensor " << u.id;
      }
      // Idle interval from its definition: forward uses are the birth step (if in forward) and
      // forward reads; the first backward read ends it.
      OpId last_fwd = kNoOp, first_bwd = kNoOp;
      if (ti.first_use != kNoOp && c.g.ops[static_cast<size_t>(ti.first_use)].phase == P::kForward)
        last_fwd = ti.first_use;
      for (size_t s = 0; s < n; ++s) {
        const bool read = std::find(c.g.ops[s].inputs.begin(), c.g.ops[s].inputs.end(), t.id) !=
                          c.g.ops[s].inputs.end();
        if (!read) continue;
        if (c.g.ops[s].phase == P::kForward) last_fwd = static_cast<OpId>(s);
        if (c.g.ops[s].phase == P::kBackward && first_bwd == kNoOp) first_bwd = static_cast<OpId>(s);
      }
      EXPECT_EQ(ti.last_forward_use, last_fwd);
      EXPECT_EQ(ti.first_backward_use, first_bwd);
      EXPECT_EQ(ti.idle_steps, last_fwd != kNoOp && first_bwd != kNoOp ? first_bwd - last_fwd : 0);
    }
    ASSERT_EQ(a.live_bytes_free_at_last_use, ref.live_free);
    ASSERT_EQ(a.live_bytes_shared, ref.live_shared);
    const uint64_t max_free = *std::max_element(ref.live_free.begin(), ref.live_free.end());
    const uint64_t max_shared = *std::max_element(ref.live_shared.begin(), ref.live_shared.end());
    EXPECT_EQ(a.peak_bytes_keep_all, persistent + ref.keep_all);
    EXPECT_EQ(a.peak_bytes_free_at_last_use, persistent + max_free);
    EXPECT_EQ(a.lower_bound_bytes, persistent + max_shared);
    EXPECT_GE(a.peak_bytes_keep_all, a.peak_bytes_free_at_last_use);
    EXPECT_GE(a.peak_bytes_free_at_last_use, a.lower_bound_bytes);

    // Buffers: sorted by birth, lifetimes cover their tensors, plan valid and no better than the bound.
    for (size_t b = 1; b < a.buffers.size(); ++b) EXPECT_LE(a.buffers[b - 1].first_step, a.buffers[b].first_step);
    for (const Buffer& b : a.buffers)
      for (TensorId t : b.tensors) {
        EXPECT_LE(b.first_step, a.tensors[static_cast<size_t>(t)].first_use);
        EXPECT_GE(b.last_step, a.tensors[static_cast<size_t>(t)].last_use);
        EXPECT_EQ(b.bytes, c.g.tensor(t).bytes);
      }
    ASSERT_TRUE(check_memory_plan(c.g, a.buffers, a.plan).ok());
    ASSERT_TRUE(brute_force_disjoint(a.buffers, a.plan.offsets));
    EXPECT_EQ(a.plan.alignment, c.options.alignment);
    EXPECT_GE(a.plan.arena_bytes, aligned_live_lower_bound(a.buffers, c.options.alignment));
    EXPECT_GE(a.plan.arena_bytes, a.lower_bound_bytes - a.persistent_bytes);
    EXPECT_EQ(a.peak_bytes_shared, a.persistent_region_bytes + a.plan.arena_bytes);
  }
}

}  // namespace
}  // namespace ferry
