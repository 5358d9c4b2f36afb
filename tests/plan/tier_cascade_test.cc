// The swap tiers' placement (schedule/tier_placement.h) on real plans, and the host-budget
// cascade (plan/tier_cascade.h): copies never share bytes while both live, the cascade brings the
// host tier within its budget by moving whole tensors to the SSD tier and changes nothing else.
#include "plan/tier_cascade.h"

#include <set>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "graph/zoo/zoo.h"
#include "memory/sharing_plan.h"
#include "plan/policies.h"
#include "plan/policy_common.h"
#include "plan/policy_test_util.h"
#include "schedule/placement.h"
#include "schedule/program.h"
#include "schedule/tier_placement.h"
#include "sim/simulator.h"

namespace ferry {
namespace {

using policy_test::round_cost;

struct Planned {
  Graph graph;
  CostModel cost = round_cost();
  std::vector<uint64_t> scratch;
  Schedule schedule;
  PlanContext ctx() const {
    PlanContext c{.graph = graph, .cost = cost};
    c.op_scratch_bytes = scratch;
    return c;
  }
  Program lower() const {
    Result<Program> p = lower_schedule(graph, schedule, ProgramOptions{.op_scratch_bytes = scratch});
    EXPECT_TRUE(p.ok()) << p.status().message();
    return p.ok() ? *p : Program{};
  }
};

// `policy` on `model` (batch 2) at `fraction` of the keep plan's device bytes, swapping to the host.
Planned plan(const std::string& model, const std::string& policy, double fraction) {
  Planned out;
  ModelConfig config;
  config.batch = 2;
  Result<Graph> g = build_model(model, config);
  EXPECT_TRUE(g.ok()) << g.status().message();
  out.graph = *g;
  out.scratch = policy_test::backend_like_scratch(out.graph);
  PlanContext ctx = out.ctx();
  Result<PlanReport> none = plan_policy("none", ctx);
  EXPECT_TRUE(none.ok());
  // The first of fraction, fraction + 10%, ... that the policy fits.
  for (double f = fraction; f <= 1.0 + 1e-9; f += 0.1) {
    ctx.budget_bytes = static_cast<uint64_t>(static_cast<double>(none->device_bytes) * f);
    Result<PlanReport> r = plan_policy(policy, ctx);
    if (!r.ok()) continue;
    out.schedule = r->schedule;
    return out;
  }
  ADD_FAILURE() << policy << " fits no budget for " << model;
  return out;
}

// Copies of every tensor the program swaps, with each copy's interval inside the program and
// containing its swap-outs; slots that never share bytes while both copies live.
::testing::AssertionResult sound(const Graph& g, const Program& p, Tier tier) {
  const TierPlacement tp = place_tier(g, p, tier);
  std::set<TensorId> swapped, placed;
  for (const Offload& o : p.offloaded)
    if (o.tier == tier && g.tensor(o.tensor).bytes > 0) swapped.insert(o.tensor);
  for (size_t k = 0; k < p.instructions.size(); ++k) {
    const Instruction& in = p.instructions[k];
    if (in.kind != InstrKind::kSwapOut || in.tier != tier || in.bytes == 0) continue;
    swapped.insert(in.tensor);
    auto c = std::find_if(tp.copies.begin(), tp.copies.end(), [&](const TierCopy& c) { return c.tensor == in.tensor; });
    if (c == tp.copies.end()) return ::testing::AssertionFailure() << "no copy of " << g.tensor(in.tensor).name;
    if (c->first_instruction > k || c->last_instruction < k)
      return ::testing::AssertionFailure() << "the copy of " << g.tensor(in.tensor).name << " misses its swap-out";
  }
  for (const TierCopy& c : tp.copies) {
    placed.insert(c.tensor);
    if (c.last_instruction >= p.instructions.size() || c.first_instruction > c.last_instruction)
      return ::testing::AssertionFailure() << "bad interval of " << g.tensor(c.tensor).name;
  }
  if (placed != swapped) return ::testing::AssertionFailure() << "copies and swapped tensors differ";
  MemoryPlan plan{.offsets = tp.offsets, .arena_bytes = tp.bytes, .alignment = kTierSlotAlignment, .how = {}};
  if (Status s = check_memory_plan(tier_buffers(tp.copies), plan); !s.ok())
    return ::testing::AssertionFailure() << s.message();
  if (tp.bytes < tp.live_peak_bytes) return ::testing::AssertionFailure() << "placed below the live peak";
  return ::testing::AssertionSuccess();
}

using Case = std::tuple<std::string, std::string>;  // model, policy
class TierPlacementTest : public ::testing::TestWithParam<Case> {};

TEST_P(TierPlacementTest, CopiesThatCoexistNeverShareBytes) {
  const auto& [model, policy] = GetParam();
  const Planned p = plan(model, policy, 0.5);
  const Program program = p.lower();
  EXPECT_TRUE(sound(p.graph, program, Tier::kHost));
  // The cascade to a quarter of the host need keeps it so on both tiers.
  Planned cascaded = p;
  const TierPlacement host = place_tier(p.graph, program, Tier::kHost);
  Result<CascadeReport> r = cascade_to_ssd(cascaded.ctx(), cascaded.schedule, host.bytes / 4);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const Program after = cascaded.lower();
  EXPECT_TRUE(sound(p.graph, after, Tier::kHost));
  EXPECT_TRUE(sound(p.graph, after, Tier::kSsd));
}

INSTANTIATE_TEST_SUITE_P(Policies, TierPlacementTest,
                         ::testing::Combine(::testing::Values("resnet-mini", "densenet-mini", "gpt2-mini"),
                                            ::testing::Values("vdnn-all", "lru", "capuchin", "ferry")),
                         [](const auto& info) {
                           return policy_test::param_name(std::get<0>(info.param) + "_" + std::get<1>(info.param));
                         });

TEST(TierCascade, BringsTheHostTierWithinItsBudgetAndChangesOnlyTiers) {
  const Planned p = plan("resnet-mini", "ferry", 0.5);
  const Program program = p.lower();
  Result<TierNeeds> need = tier_needs(p.ctx(), p.schedule);
  ASSERT_TRUE(need.ok());
  ASSERT_GT(need->host_bytes, 0u);
  EXPECT_EQ(need->ssd_bytes, 0u);
  for (uint64_t budget : {need->host_bytes * 3 / 4, need->host_bytes / 2, need->host_bytes / 8, uint64_t{1}}) {
    SCOPED_TRACE(fmt::format("host budget {} of {}", budget, need->host_bytes));
    Schedule s = p.schedule;
    Result<CascadeReport> r = cascade_to_ssd(p.ctx(), s, budget);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_LE(r->after.host_bytes, budget);
    EXPECT_GT(r->moved_tensors, 0u);
    EXPECT_EQ(r->before.host_bytes, need->host_bytes);
    EXPECT_GT(r->after.ssd_bytes, 0u);
    // Same actions at the same places, only tiers changed, and only from host to SSD, per tensor.
    std::set<TensorId> moved;
    ASSERT_EQ(s.before.size(), p.schedule.before.size());
    for (size_t i = 0; i < s.before.size(); ++i)
      for (auto [mine, theirs] : {std::pair{&s.before[i], &p.schedule.before[i]}, std::pair{&s.after[i], &p.schedule.after[i]}}) {
        ASSERT_EQ(mine->size(), theirs->size());
        for (size_t k = 0; k < mine->size(); ++k) {
          const Action& a = (*mine)[k];
          const Action& b = (*theirs)[k];
          EXPECT_EQ(a.kind, b.kind);
          EXPECT_EQ(a.tensor, b.tensor);
          if (a.tier != b.tier) {
            EXPECT_EQ(b.tier, Tier::kHost);
            moved.insert(a.tensor);
          }
        }
      }
    for (const Offload& o : s.offloaded)
      if (o.tier == Tier::kSsd) moved.insert(o.tensor);
    EXPECT_EQ(moved.size(), r->moved_tensors);
    // A tensor is on one tier only.
    for (const auto& steps : {s.before, s.after})
      for (const auto& actions : steps)
        for (const Action& a : actions)
          if (a.kind == ActionKind::kSwapOut || a.kind == ActionKind::kSwapIn) {
            EXPECT_EQ(a.tier == Tier::kSsd, moved.contains(a.tensor)) << p.graph.tensor(a.tensor).name;
          }
    // The device side is the plan's own: same placement, same arena.
    Result<Program> lowered = lower_schedule(p.graph, s, ProgramOptions{.op_scratch_bytes = p.scratch});
    ASSERT_TRUE(lowered.ok());
    Result<ProgramPlacement> a = place_program(p.graph, *lowered, 64);
    Result<ProgramPlacement> b = place_program(p.graph, program, 64);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->arena_bytes, b->arena_bytes);
    EXPECT_EQ(a->offset, b->offset);
  }
}

TEST(TierCascade, ABudgetThatHoldsEverythingMovesNothing) {
  const Planned p = plan("gpt2-mini", "capuchin", 0.5);
  Result<TierNeeds> need = tier_needs(p.ctx(), p.schedule);
  ASSERT_TRUE(need.ok());
  ASSERT_GT(need->host_bytes, 0u);
  Schedule s = p.schedule;
  Result<CascadeReport> r = cascade_to_ssd(p.ctx(), s, need->host_bytes);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->moved_tensors, 0u);
  EXPECT_EQ(r->after.host_bytes, need->host_bytes);
  EXPECT_EQ(s.before, p.schedule.before);
  EXPECT_EQ(s.after, p.schedule.after);
}

// Coldest first: with room for one of two copies, the host keeps the one needed back soonest.
TEST(TierCascade, TheColdestCopyGoesFirst) {
  const Planned p = plan("resnet-mini", "vdnn-all", 1.0);
  const Program program = p.lower();
  const std::vector<TierCopy> copies = tier_copies(p.graph, program, Tier::kHost);
  ASSERT_GE(copies.size(), 2u);
  // vDNN swaps every layer input in forward and brings them back in reverse order in backward:
  // the first one swapped out is the last one needed, the coldest.
  Schedule s = p.schedule;
  const uint64_t all = place_tier(p.graph, program, Tier::kHost).bytes;
  Result<CascadeReport> r = cascade_to_ssd(p.ctx(), s, all - 1);
  ASSERT_TRUE(r.ok());
  ASSERT_GE(r->moved_tensors, 1u);
  const TensorId first = copies.front().tensor;
  bool first_moved = false;
  for (const auto& steps : {s.before, s.after})
    for (const auto& actions : steps)
      for (const Action& a : actions)
        if (a.tensor == first && a.kind == ActionKind::kSwapOut) first_moved = a.tier == Tier::kSsd;
  EXPECT_TRUE(first_moved) << p.graph.tensor(first).name << " was swapped out first and is needed last";
}

// --codec auto (ctx.ssd_codec unset): the spilled copies keep the codecs the cost model picks per
// transfer only when the plan is predicted more than kCodecMinGain faster with them than raw, as
// plan_policy asks of a policy's own plan. Over disks from slow (every copy waits, coding pays) to
// fast (the copies hide behind compute or their latency, coding gains too little), the cascade's
// decision agrees with the simulator's two predictions, and both decisions occur; a named codec
// codes every spilled copy whatever the disk.
TEST(TierCascade, AutoCodesSpilledCopiesOnlyWhereThePlanGetsFaster) {
  const Planned p = plan("resnet-mini", "vdnn-all", 1.0);
  std::vector<CodecFigure> figures;
  for (const std::string& cls : tensor_classes(p.graph))
    if (std::none_of(figures.begin(), figures.end(), [&](const CodecFigure& f) { return f.tensor_class == cls; }))
      figures.push_back({cls, CodecId::kLz4, CodecEstimate{0.4, 1e15, 1e15, 1}});  // shrinks, costs nothing
  auto iteration_us = [&](const PlanContext& ctx, const Schedule& s) {  // as planned: no codecs attached
    SimOptions so;
    so.record_timeline = false;
    so.timing_only = true;
    so.op_scratch_bytes = ctx.op_scratch_bytes;
    Result<SimResult> r = simulate(ctx.graph, s, ctx.cost, so);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? r->iteration_us : 0.0;
  };
  int kept = 0, dropped = 0;
  for (double disk : {1e7, 1e8, 1e9, 1e10, 1e11, 1e12}) {
    SCOPED_TRACE(fmt::format("disk at {:g} B/s", disk));
    HardwareProfile hw = cost_test::round_profile();
    hw.storage.read_bytes_per_s = hw.storage.write_bytes_per_s = disk;
    const CostModel cost(hw, CostOptions{.codecs = figures});
    PlanContext ctx{.graph = p.graph, .cost = cost};
    ctx.op_scratch_bytes = p.scratch;
    const std::vector<CodecId> picks = ssd_codec_choice(ctx);
    if (std::none_of(picks.begin(), picks.end(), [](CodecId c) { return c != CodecId::kNone; })) continue;
    Result<TierNeeds> need = tier_needs(ctx, p.schedule);
    ASSERT_TRUE(need.ok());
    Schedule s = p.schedule;
    Result<CascadeReport> r = cascade_to_ssd(ctx, s, need->host_bytes / 2);
    ASSERT_TRUE(r.ok()) << r.status().message();
    ASSERT_GT(r->moved_tensors, 0u);
    Schedule raw = s, coded = s;
    raw.ssd_codecs.clear();
    attach_ssd_codecs(picks, coded);
    ASSERT_FALSE(coded.ssd_codecs.empty());
    const double raw_us = iteration_us(ctx, raw), coded_us = iteration_us(ctx, coded);
    if (s.ssd_codecs.empty()) {
      ++dropped;
      EXPECT_GE(coded_us, (1 - kCodecMinGain) * raw_us);
    } else {
      ++kept;
      EXPECT_EQ(s.ssd_codecs, coded.ssd_codecs);
      EXPECT_LT(coded_us, (1 - kCodecMinGain) * raw_us);
    }
    ctx.ssd_codec = CodecId::kLz4;  // named: every spilled copy coded
    s = p.schedule;
    ASSERT_TRUE(cascade_to_ssd(ctx, s, need->host_bytes / 2).ok());
    EXPECT_EQ(s.ssd_codecs.size(), r->moved_tensors);
  }
  EXPECT_GT(kept, 0) << "coding never paid: the sweep proves half of nothing";
  EXPECT_GT(dropped, 0) << "coding always paid: the check was never exercised";
}

}  // namespace
}  // namespace ferry
