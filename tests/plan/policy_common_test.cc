// The machinery the policies share: completion of an intent into a legal schedule, the byte
// count per step against the placement it stands for, and the simulator as the planners call it.
#include "plan/policy_common.h"

#include <atomic>
#include <optional>

#include <gtest/gtest.h>

#include "common/units.h"
#include "memory/sharing_plan.h"
#include "schedule/placement.h"
#include "graph/zoo/zoo.h"
#include "plan/policy_test_util.h"

namespace ferry {
namespace {

using policy_test::actions_of;
using policy_test::Chain;
using policy_test::Placed;
using policy_test::round_cost;

struct Fixture {
  Chain c{{1024, 2048, 4096, 2048}, {0, 10, 20, 10}};
  CostModel cost = round_cost();
  PlanContext ctx{.graph = c.g(), .cost = cost};
  PlanFacts facts;
  Fixture() {
    Result<PlanFacts> f = make_plan_facts(ctx);
    EXPECT_TRUE(f.ok()) << f.status().message();
    if (f.ok()) facts = std::move(f).value();
  }
  Schedule intent() const { return empty_schedule(ctx, "test"); }
  Schedule complete(Schedule s) const {
    Result<Schedule> r = complete_schedule(facts, std::move(s));
    EXPECT_TRUE(r.ok()) << r.status().message();
    if (!r.ok()) return {};
    Result<Program> p = lower_schedule(c.g(), *r, facts.program_options);
    EXPECT_TRUE(p.ok()) << p.status().message();
    return std::move(r).value();
  }
};

TEST(PolicyCommonTest, FactsDescribeTheChain) {
  Fixture f;
  EXPECT_EQ(f.facts.num_forward, 4);  // f1..f3 and the loss op
  EXPECT_TRUE(f.facts.saved(f.c.a[1]));
  EXPECT_TRUE(f.facts.saved(f.c.x));
  EXPECT_FALSE(f.facts.saved(f.c.loss));
  EXPECT_TRUE(f.facts.recomputable(f.c.a[2]));
  EXPECT_FALSE(f.facts.recomputable(f.c.x));
  EXPECT_FALSE(f.facts.recomputable(f.c.loss));
  EXPECT_EQ(f.facts.forward_end(f.c.a[1]), f.c.forward[2]);
}

TEST(PolicyCommonTest, AReleaseWithoutCopyIsRecomputedRightBeforeItsReader) {
  Fixture f;
  Schedule s = f.intent();
  add_after(s, f.c.forward[3], release_action(f.c.a[2]));
  const Schedule done = f.complete(s);
  const std::vector<Placed> rec = actions_of(done, ActionKind::kRecompute, f.c.a[2]);
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(rec[0].step, f.c.backward[3]);
  EXPECT_TRUE(rec[0].before);
}

TEST(PolicyCommonTest, ARecomputeChainBringsBackDroppedInputsFirst) {
  Fixture f;
  Schedule s = f.intent();
  add_after(s, f.c.forward[2], release_action(f.c.a[1]));
  add_after(s, f.c.forward[3], release_action(f.c.a[2]));
  add_before(s, f.c.backward[3], recompute_action(f.c.a[2]));  // needs a1, which is off the device
  const Schedule done = f.complete(s);
  const std::vector<Action>& list = done.before[static_cast<size_t>(f.c.backward[3])];
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0], recompute_action(f.c.a[1]));
  EXPECT_EQ(list[1], recompute_action(f.c.a[2]));
  // a1 stays after its recompute until b2 reads it: no second recompute.
  EXPECT_EQ(actions_of(done, ActionKind::kRecompute, f.c.a[1]).size(), 1u);
}

TEST(PolicyCommonTest, ASwappedTensorIsFetchedFromItsCopyOnAccess) {
  Fixture f;
  Schedule s = f.intent();
  add_after(s, f.c.forward[1], swap_out_action(f.c.a[1], Tier::kSsd));
  add_after(s, f.c.forward[2], release_action(f.c.a[1]));
  const Schedule done = f.complete(s);
  const std::vector<Placed> in = actions_of(done, ActionKind::kSwapIn, f.c.a[1]);
  ASSERT_EQ(in.size(), 1u);
  EXPECT_EQ(in[0].step, f.c.backward[2]);
  EXPECT_EQ(in[0].action.tier, Tier::kSsd);
  EXPECT_TRUE(actions_of(done, ActionKind::kRecompute, f.c.a[1]).empty());
}

TEST(PolicyCommonTest, RedundantAndDeadActionsAreDropped) {
  Fixture f;
  Schedule s = f.intent();
  // A prefetch of a tensor that is on the device, a second swap-out to the same tier, and a
  // release after the tensor's last use (a3's last reader is loss_bwd).
  add_before(s, f.c.forward[2], swap_in_action(f.c.a[1], Tier::kHost));
  add_after(s, f.c.forward[1], swap_out_action(f.c.a[1], Tier::kHost));
  add_after(s, f.c.forward[2], swap_out_action(f.c.a[1], Tier::kHost));
  add_after(s, f.c.backward[3], release_action(f.c.a[3]));
  const Schedule done = f.complete(s);
  EXPECT_TRUE(actions_of(done, ActionKind::kSwapIn, f.c.a[1]).empty());
  EXPECT_EQ(actions_of(done, ActionKind::kSwapOut, f.c.a[1]).size(), 1u);
  EXPECT_TRUE(actions_of(done, ActionKind::kRelease, f.c.a[3]).empty());
}

TEST(PolicyCommonTest, ContradictoryIntentIsAnInternalError) {
  Fixture f;
  Schedule s = f.intent();
  add_after(s, f.c.forward[1], release_action(f.c.x));  // a data input without a copy
  Result<Schedule> r = complete_schedule(f.facts, s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
  EXPECT_TRUE(plan_test::contains(r.status().message(), "cannot be recomputed"));
}

// A small zoo model at batch 2 with the round cost model, and its plan facts (not copyable: ctx
// refers to graph and cost).
struct ZooCase {
  Graph graph;
  const CostModel cost = round_cost();
  PlanContext ctx{.graph = graph, .cost = cost};
  std::optional<PlanFacts> facts;
  explicit ZooCase(const char* model) {
    ModelConfig config;
    config.batch = 2;
    Result<Graph> g = build_model(model, config);
    EXPECT_TRUE(g.ok()) << model;
    if (!g.ok()) return;
    graph = std::move(g).value();
    Result<PlanFacts> f = make_plan_facts(ctx);
    EXPECT_TRUE(f.ok()) << model;
    if (f.ok()) facts = std::move(f).value();
  }
  ZooCase(const ZooCase&) = delete;
  ZooCase& operator=(const ZooCase&) = delete;
};

TEST(PolicyCommonTest, LiveBytesPerStepBoundTheArenaAsPlacementCountsThem) {
  for (const char* model : {"resnet-mini", "gpt2-mini"}) {
    const ZooCase z(model);
    ASSERT_TRUE(z.facts);
    for (const char* policy : {"none", "vdnn-all", "checkpoint-sqrt"}) {
      Result<PlanReport> r = plan_policy(policy, z.ctx);
      ASSERT_TRUE(r.ok()) << r.status().message();
      Result<Program> p = lower_schedule(z.graph, r->schedule, z.facts->program_options);
      ASSERT_TRUE(p.ok());
      Result<ProgramPlacement> pl = place_program(z.graph, *p, z.ctx.alignment);
      ASSERT_TRUE(pl.ok());
      const std::vector<uint64_t> live = live_bytes_per_step(*z.facts, *p);
      const uint64_t peak = *std::max_element(live.begin(), live.end());
      // Live bytes count blocks, not the padding that page-aligns the transient region of a program
      // that swaps (schedule/placement.h): the persistent region is their persistent part, rounded.
      const uint64_t bound = aligned_live_lower_bound(pl->blocks, z.ctx.alignment);
      ASSERT_GE(peak, bound);
      EXPECT_EQ(align_up(peak - bound, pages_align_swapped_blocks(*p) ? kDirectIoAlignment : 1),
                pl->persistent_region_bytes)
          << model << " " << policy;
      EXPECT_LE(peak, pl->arena_bytes);
    }
  }
}

// subtract_away's claim: a swap of a saved tensor that nothing else touches changes the live
// bytes exactly as lowering the schedule with the swap does (Capuchin updates its measure this way
// instead of lowering thousands of times). Every saved tensor of two zoo models, swap-ins at several
// steps of the idle interval, each against measure_schedule.
TEST(PolicyCommonTest, SubtractAwayIsTheLoweredMeasureOfOneSwap) {
  for (const char* model : {"resnet-mini", "gpt2-mini"}) {
    const ZooCase z(model);
    ASSERT_TRUE(z.facts);
    Result<PlanMeasure> keep = measure_schedule(*z.facts, empty_schedule(z.ctx, "none"), false);
    ASSERT_TRUE(keep.ok());
    int checked = 0;
    for (const Tensor& t : z.graph.tensors) {
      if (!z.facts->saved(t.id) || t.bytes == 0) continue;
      const OpId fe = z.facts->forward_end(t.id), back = z.facts->info(t.id).first_backward_use;
      for (OpId in_at : {fe + 1, (fe + back) / 2, back}) {
        if (in_at <= fe || in_at > back) continue;
        Schedule s = empty_schedule(z.ctx, "one swap");
        const OpId p = z.facts->producer[static_cast<size_t>(t.id)];
        if (p == kNoOp) add_before(s, 0, swap_out_action(t.id, Tier::kHost));
        else add_after(s, p, swap_out_action(t.id, Tier::kHost));
        add_after(s, fe, release_action(t.id));
        add_before(s, in_at, swap_in_action(t.id, Tier::kHost));
        Result<Schedule> complete = complete_schedule(*z.facts, s);
        ASSERT_TRUE(complete.ok()) << complete.status().message();
        Result<PlanMeasure> exact = measure_schedule(*z.facts, *complete, false);
        ASSERT_TRUE(exact.ok());
        PlanMeasure m = *keep;
        subtract_away(*z.facts, m, t.id, fe + 1, in_at - 1);
        EXPECT_EQ(m.live_bytes, exact->live_bytes) << model << " " << t.name << " back at " << in_at;
        EXPECT_EQ(m.live_peak_bytes, exact->live_peak_bytes) << model << " " << t.name;
        EXPECT_EQ(m.peak_step, exact->peak_step) << model << " " << t.name;
        ++checked;
      }
    }
    EXPECT_GT(checked, 20) << model;
  }
}

TEST(PolicyCommonTest, PlanningTimingChargesALateSwapInAsAStall) {
  Fixture f;
  Schedule s = f.intent();
  // a2 (4096 bytes: 10 + 4.096 us each way) is swapped in right before b3 reads it: b3 waits
  // for the whole copy. Issued one step earlier, before loss_bwd (1 us), the wait is 1 us less.
  add_after(s, f.c.forward[2], swap_out_action(f.c.a[2], Tier::kHost));
  add_after(s, f.c.forward[3], release_action(f.c.a[2]));
  add_before(s, f.c.backward[3], swap_in_action(f.c.a[2], Tier::kHost));
  Result<SimResult> e_late = simulate_for_planning(f.ctx, f.facts, f.complete(s));
  ASSERT_TRUE(e_late.ok()) << e_late.status().message();
  const double copy_us = f.cost.transfer_us(Direction::kSwapIn, Tier::kHost, 4096);
  EXPECT_NEAR(copy_us, 10 + 4096 / 1000.0, 1e-9);
  EXPECT_NEAR(e_late->swap_in_wait_us[static_cast<size_t>(f.c.a[2])], copy_us, 1e-9);

  Schedule early = f.intent();
  add_after(early, f.c.forward[2], swap_out_action(f.c.a[2], Tier::kHost));
  add_after(early, f.c.forward[3], release_action(f.c.a[2]));
  add_before(early, f.c.backward[3] - 1, swap_in_action(f.c.a[2], Tier::kHost));  // before loss_bwd (1 us)
  Result<SimResult> e = simulate_for_planning(f.ctx, f.facts, f.complete(early));
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_NEAR(e->swap_in_wait_us[static_cast<size_t>(f.c.a[2])], copy_us - 1.0, 1e-9);
  EXPECT_NEAR(e_late->iteration_us - e->iteration_us, 1.0, 1e-9);
}

TEST(PolicyCommonTest, PlanningTimingRecordsWaitsForASwapOut) {
  Fixture f;
  // a2's copy out (10 + 4.096 us) starts when f2 ends; released after f3 (10 us), the release
  // waits on the compute stream for the rest of the copy. Released after the loss op (1 us more),
  // it waits 1 us less.
  const double copy_us = f.cost.transfer_us(Direction::kSwapOut, Tier::kHost, 4096);
  ASSERT_GT(copy_us, 11);
  for (OpId extra : {0, 1}) {
    SCOPED_TRACE(extra);
    Schedule s = f.intent();
    add_after(s, f.c.forward[2], swap_out_action(f.c.a[2], Tier::kHost));
    add_after(s, f.c.forward[3] + extra, release_action(f.c.a[2]));
    add_before(s, f.c.backward[3], swap_in_action(f.c.a[2], Tier::kHost));
    Result<SimResult> e = simulate_for_planning(f.ctx, f.facts, f.complete(s));
    ASSERT_TRUE(e.ok()) << e.status().message();
    ASSERT_EQ(e->swap_out_wait_us.size(), f.c.g().tensors.size());
    for (const Tensor& t : f.c.g().tensors)
      EXPECT_NEAR(e->swap_out_wait_us[static_cast<size_t>(t.id)], t.id == f.c.a[2] ? copy_us - 10 - extra : 0, 1e-9)
          << t.name;
  }
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

// The smallest-budget search on resnet-mini (batch 2), with feasibilities made up from L, the
// bound no plan beats, and N, the keep plan's bytes: at(f) = L + f (N - L).
class MinBudgetSearch : public ::testing::Test {
 protected:
  void SetUp() override {
    ModelConfig config;
    config.batch = 2;
    Result<Graph> g = build_model("resnet-mini", config);
    ASSERT_TRUE(g.ok());
    graph_ = std::move(*g);
    ctx_.emplace(PlanContext{.graph = graph_, .cost = cost_});
    Result<PlanFacts> facts = make_plan_facts(*ctx_);
    ASSERT_TRUE(facts.ok());
    facts_ = std::move(*facts);
    lower_ = static_cast<double>(min_budget_lower_bound(*ctx_, facts_));
    none_ = static_cast<double>(facts_.none_device_bytes);
  }
  uint64_t at(double f) const { return static_cast<uint64_t>(lower_ + f * (none_ - lower_)); }
  Graph graph_;
  const CostModel cost_ = round_cost();
  std::optional<PlanContext> ctx_;
  PlanFacts facts_;
  double lower_ = 0, none_ = 0;
};

// A feasibility that is not monotone in the budget: it fits above at(0.8) and again between
// at(0.1) and at(0.3). Bisection alone lands near at(0.8); the scan below finds the lower window.
TEST_F(MinBudgetSearch, ScansBelowTheBisectionForANonMonotonePlanner) {
  const PlanContext& ctx = *ctx_;
  ASSERT_LT(lower_, none_ * 0.8);
  auto fits = [&](uint64_t b) -> Result<bool> { return b >= at(0.8) || (b >= at(0.1) && b <= at(0.3)); };
  Result<uint64_t> bisected = bisect_min_budget(ctx, facts_, fits);
  ASSERT_TRUE(bisected.ok());
  EXPECT_TRUE(*fits(*bisected));
  EXPECT_GE(*bisected, at(0.8)) << "bisection alone misses the lower window";
  Result<uint64_t> lowest = lowest_fit_below(ctx, facts_, fits, *bisected);
  ASSERT_TRUE(lowest.ok());
  EXPECT_TRUE(*fits(*lowest));
  EXPECT_EQ(*lowest % ctx.alignment, 0u);
  const uint64_t step = min_budget_scan_step(ctx, facts_);
  EXPECT_LT(*lowest, at(0.1) + step);
  for (uint64_t b = *lowest; b >= step;) {
    b -= step;
    EXPECT_FALSE(*fits(b)) << b << " bytes fits, below the answer " << *lowest;
  }
}

// The scan's probes on several threads give the answer of the scan on one, and its error: a
// non-monotone feasibility with three windows, and one whose probes fail below some budget.
TEST_F(MinBudgetSearch, ScanOnSeveralThreadsAnswersAsOnOne) {
  const PlanContext& ctx = *ctx_;
  std::atomic<int> probes{0};
  auto fits = [&](uint64_t b) -> Result<bool> {
    ++probes;
    return b >= at(0.8) || (b >= at(0.1) && b <= at(0.3)) || (b >= at(0.02) && b <= at(0.03));
  };
  const uint64_t found = at(0.85);
  Result<uint64_t> one = lowest_fit_below(ctx, facts_, fits, found);
  ASSERT_TRUE(one.ok());
  const int probed_by_one = probes.exchange(0);
  EXPECT_GT(probed_by_one, 20);
  for (int workers : {2, 3, 8}) {
    Result<uint64_t> many = lowest_fit_below(ctx, facts_, fits, found, false, workers);
    ASSERT_TRUE(many.ok());
    EXPECT_EQ(*many, *one) << workers << " workers";
    EXPECT_EQ(probes.exchange(0), probed_by_one) << workers << " workers: every probe once";
  }
  // Probes fail (a planner's error) below 40% and at 50%: the error is the one at 50%, the highest.
  auto failing = [&](uint64_t b) -> Result<bool> {
    if (b < at(0.4) || (b >= at(0.5) && b < at(0.5) + min_budget_scan_step(ctx, facts_)))
      return Status::Internal(b < at(0.4) ? "low" : "high");
    return fits(b);
  };
  for (int workers : {1, 2, 8}) {
    Result<uint64_t> r = lowest_fit_below(ctx, facts_, failing, found, false, workers);
    ASSERT_FALSE(r.ok()) << workers << " workers";
    EXPECT_EQ(r.status().message(), "high") << workers << " workers";
  }
}

}  // namespace
}  // namespace ferry
