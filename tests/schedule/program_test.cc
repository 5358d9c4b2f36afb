#include "schedule/program.h"

#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "analysis/analysis.h"
#include "graph/zoo/zoo.h"
#include "schedule/hand_schedule.h"
#include "schedule/placement.h"
#include "memory/sharing_plan.h"

namespace ferry {
namespace {

using plan_test::contains;
using plan_test::HandGraph;
using plan_test::recompute;
using plan_test::release;
using plan_test::summary;
using plan_test::swap_in;
using plan_test::swap_out;
using Strings = std::vector<std::string>;

// x (input), w (weight) -> f -> a -> g -> b -> loss_op -> loss; backward g_bwd reads b and the
// saved a; upd writes w.
struct Saved {
  HandGraph h{"saved"};
  TensorId w, x, a, b, loss, da;
  explicit Saved(uint64_t a_bytes = 200) {
    w = h.weight("w", 64);
    x = h.input("x", 100);
    a = h.tensor("a", a_bytes);
    b = h.tensor("b", 300);
    loss = h.tensor("loss", 4);
    da = h.tensor("da", 200, TensorRole::kGradient);
    h.op("f", {x, w}, {a});
    h.op("g", {a}, {b});
    h.op("loss_op", {b}, {loss});
    h.op("g_bwd", {b, a}, {da}, std::nullopt, Phase::kBackward);
    h.op("upd", {w, da}, {w}, std::nullopt, Phase::kUpdate);
    h.set_loss(loss);
  }
  const Graph& g() const { return h.graph(); }
  Schedule empty() const { return Schedule::keep_all(g().ops.size()); }
};

Strings lower_summary(const Graph& g, const Schedule& s, const ProgramOptions& o = {}) {
  Result<Program> p = lower_schedule(g, s, o);
  EXPECT_TRUE(p.ok()) << p.status().message();
  return p.ok() ? summary(*p, g) : Strings{};
}

std::string lower_error(const Graph& g, const Schedule& s, const ProgramOptions& o = {}) {
  Result<Program> p = lower_schedule(g, s, o);
  EXPECT_FALSE(p.ok());
  if (p.ok()) return "";
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  return p.status().message();
}

TEST(ProgramTest, KeepAllAllocatesAtProductionAndFreesAfterLastUse) {
  Saved s;
  const Strings expected = {"alloc w@0",    "alloc x@0",        "alloc a@0",   "run f@0",   "free x@0",
                            "alloc b@1",    "run g@1",          "alloc loss@2", "run loss_op@2", "alloc da@3",
                            "run g_bwd@3",  "free b@3",         "free a@3",    "run upd@4", "free da@4"};
  EXPECT_EQ(lower_summary(s.g(), s.empty()), expected);
  // An empty Schedule (no per-step vectors) means the same.
  EXPECT_EQ(lower_summary(s.g(), Schedule{}), expected);
}

TEST(ProgramTest, ScratchIsAllocatedAroundItsOpOnly) {
  Saved s;
  ProgramOptions o;
  o.op_scratch_bytes = {0, 32, 0, 0, 0};
  const Strings got = lower_summary(s.g(), s.empty(), o);
  const Strings step1 = {"alloc b@1", "alloc_scratch g@1", "run g@1", "free_scratch g@1", "alloc loss@2"};
  auto it = std::find(got.begin(), got.end(), "alloc b@1");
  ASSERT_NE(it, got.end());
  EXPECT_EQ(Strings(it, it + 5), step1);
}

TEST(ProgramTest, SwapOutReleaseSwapInAreLoweredInPlace) {
  Saved s;
  Schedule sch = s.empty();
  sch.after[0] = {swap_out(s.a)};
  sch.after[1] = {release(s.a)};
  sch.before[3] = {swap_in(s.a)};
  const Strings expected = {"alloc w@0",  "alloc x@0",     "alloc a@0",      "run f@0",         "free x@0",
                            "swap_out a@0:host",            "alloc b@1",      "run g@1",         "release a@1",
                            "alloc loss@2", "run loss_op@2", "alloc a@3",     "swap_in a@3:host", "alloc da@3",
                            "run g_bwd@3", "free b@3",      "free a@3",       "run upd@4",       "free da@4"};
  EXPECT_EQ(lower_summary(s.g(), sch), expected);
}

// The device blocks of a swapped tensor of at least 64 KiB start at multiples of 4 KiB (the SSD
// tier then moves it in place with direct I/O), every time it is on the device, whichever tier its
// copy is in (so that the host-budget cascade can change the tier without moving anything on the
// device), and so does the transient region. A smaller swapped tensor packs at the device
// alignment: its padding would cost more than its copy.
TEST(ProgramTest, PlacementPageAlignsTheBlocksOfLargeSwappedTensors) {
  auto swapped = [](const Saved& s, Tier tier) {
    Schedule sch = s.empty();
    sch.after[0] = {swap_out(s.a, tier)};
    sch.after[1] = {release(s.a)};
    sch.before[3] = {swap_in(s.a, tier)};
    return lower_schedule(s.g(), sch, {});
  };
  const Saved large(100 << 10);
  std::vector<uint64_t> arena;
  std::vector<std::vector<uint64_t>> offsets;
  for (Tier tier : {Tier::kHost, Tier::kSsd}) {
    Result<Program> p = swapped(large, tier);
    ASSERT_TRUE(p.ok()) << p.status().message();
    EXPECT_TRUE(pages_align_swapped_blocks(*p));
    Result<ProgramPlacement> placed = place_program(large.g(), *p, 64);
    ASSERT_TRUE(placed.ok()) << placed.status().message();
    EXPECT_TRUE(check_memory_plan(large.g(), placed->blocks, placed->plan).ok());
    int allocs_of_a = 0;
    for (size_t k = 0; k < p->instructions.size(); ++k) {
      const Instruction& in = p->instructions[k];
      if (in.kind != InstrKind::kAlloc || in.tensor != large.a) continue;
      ++allocs_of_a;
      EXPECT_EQ(placed->offset[k] % 4096, 0u) << "instruction " << k;
    }
    EXPECT_EQ(allocs_of_a, 2);  // produced, then swapped back in
    EXPECT_EQ(placed->persistent_region_bytes % 4096, 0u);
    arena.push_back(placed->arena_bytes);
    offsets.push_back(placed->offset);
  }
  EXPECT_EQ(arena[0], arena[1]);
  EXPECT_EQ(offsets[0], offsets[1]);
  // Small: no padding. The whole graph is under 1 KiB and packs below 4 KiB, swapped or not.
  const Saved small;
  Result<Program> p = swapped(small, Tier::kSsd);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(pages_align_swapped_blocks(*p));
  Result<ProgramPlacement> packed = place_program(small.g(), *p, 64);
  ASSERT_TRUE(packed.ok());
  EXPECT_LT(packed->arena_bytes, 4096u);
}

TEST(ProgramTest, RecomputeKeepsItsProducersInputsAliveUntilIt) {
  Saved s;
  Schedule sch = s.empty();
  sch.after[1] = {release(s.a)};
  sch.before[3] = {recompute(s.a)};
  // x is read again by the recompute of f, so it is no longer freed at step 0 but right after
  // the recompute.
  const Strings expected = {"alloc w@0",  "alloc x@0",   "alloc a@0",   "run f@0",      "alloc b@1",
                            "run g@1",    "release a@1", "alloc loss@2", "run loss_op@2", "alloc a@3 R",
                            "run f@3 R",  "free x@3",    "alloc da@3",  "run g_bwd@3",  "free b@3",
                            "free a@3",   "run upd@4",   "free da@4"};
  EXPECT_EQ(lower_summary(s.g(), sch), expected);
}

// x -> f -> a -> relu (in place) -> r -> h -> loss; backward reads r.
struct InPlace {
  HandGraph h{"inplace"};
  TensorId x, a, r, loss, dr;
  InPlace() {
    x = h.input("x", 100);
    a = h.tensor("a", 256);
    r = h.tensor("r", 256);
    loss = h.tensor("loss", 4);
    dr = h.tensor("dr", 256, TensorRole::kGradient);
    h.op("f", {x}, {a});
    h.op("relu", {a}, {r}, std::nullopt, Phase::kForward, /*inplace=*/true);
    h.op("h", {r}, {loss});
    h.op("h_bwd", {r}, {dr}, std::nullopt, Phase::kBackward);
    h.set_loss(loss);
  }
  const Graph& g() const { return h.graph(); }
};

TEST(ProgramTest, InPlaceOutputTakesOverTheDyingInputsBlock) {
  InPlace t;
  const Strings expected = {"alloc x@0",   "alloc a@0", "run f@0",    "free x@0",  "alloc r@1<a", "run relu@1",
                            "alloc loss@2", "run h@2",  "alloc dr@3", "run h_bwd@3", "free r@3",  "free dr@3"};
  EXPECT_EQ(lower_summary(t.g(), Schedule::keep_all(4)), expected);

  ProgramOptions no_inplace;
  no_inplace.allow_inplace = false;
  const Strings got = lower_summary(t.g(), Schedule::keep_all(4), no_inplace);
  const Strings step1 = {"alloc r@1", "run relu@1", "free a@1"};
  auto it = std::find(got.begin(), got.end(), "alloc r@1");
  ASSERT_NE(it, got.end());
  EXPECT_EQ(Strings(it, it + 3), step1);
}

TEST(ProgramTest, InPlaceIsOffWhenALaterRecomputeReadsTheInput) {
  InPlace t;
  Schedule sch = Schedule::keep_all(4);
  sch.after[2] = {release(t.r)};
  sch.before[3] = {recompute(t.r)};
  const Strings expected = {"alloc x@0",    "alloc a@0",   "run f@0",     "free x@0",   "alloc r@1",
                            "run relu@1",   "alloc loss@2", "run h@2",    "release r@2", "alloc r@3 R",
                            "run relu@3 R", "free a@3",    "alloc dr@3",  "run h_bwd@3", "free r@3", "free dr@3"};
  EXPECT_EQ(lower_summary(t.g(), sch), expected);
}

TEST(ProgramTest, RecomputeGivesOffDeviceSiblingOutputsATemporaryBlock) {
  HandGraph h("bn");
  const TensorId x = h.input("x", 100);
  const TensorId a = h.tensor("a", 200);
  const TensorId y = h.tensor("y", 200);
  const TensorId m = h.tensor("m", 8);
  const TensorId loss = h.tensor("loss", 4);
  const TensorId da = h.tensor("da", 200, TensorRole::kGradient);
  h.op("f", {x}, {a});
  h.op("bn", {a}, {y, m});
  h.op("l", {y}, {loss});
  h.op("bn_bwd", {y, m, a}, {da}, std::nullopt, Phase::kBackward);
  h.set_loss(loss);
  const Graph& g = h.graph();

  Schedule keep_m = Schedule::keep_all(4);
  keep_m.after[2] = {release(y)};
  keep_m.before[3] = {recompute(y)};
  Strings got = lower_summary(g, keep_m);
  auto it = std::find(got.begin(), got.end(), "alloc y@3 R");
  ASSERT_NE(it, got.end());
  EXPECT_EQ(*(it + 1), "run bn@3 R");  // m is on the device: overwritten in place, no temporary

  Schedule drop_m = Schedule::keep_all(4);
  drop_m.after[2] = {swap_out(m), release(m), release(y)};
  drop_m.before[3] = {recompute(y), swap_in(m)};
  got = lower_summary(g, drop_m);
  it = std::find(got.begin(), got.end(), "alloc y@3 R");
  ASSERT_NE(it, got.end());
  const Strings expected = {"alloc y@3 R", "alloc m@3 R", "run bn@3 R", "release m@3 R", "alloc m@3",
                            "swap_in m@3:host"};
  EXPECT_EQ(Strings(it, it + 6), expected);
}

TEST(ProgramTest, UnreadDataInputsAndOutputsLiveOneStepAndTheLossStays) {
  HandGraph h("unread");
  const TensorId x = h.input("x", 10);
  const TensorId unused = h.input("unused", 10);
  const TensorId a = h.tensor("a", 20);
  const TensorId side = h.tensor("side", 30);
  const TensorId loss = h.tensor("loss", 4);
  h.op("f", {x}, {a, side});
  h.op("l", {a}, {loss});
  h.set_loss(loss);
  (void)unused;
  const Strings expected = {"alloc x@0", "alloc unused@0", "alloc a@0",    "alloc side@0", "run f@0",
                            "free x@0",  "free side@0",    "free unused@0", "alloc loss@1", "run l@1", "free a@1"};
  EXPECT_EQ(lower_summary(h.graph(), Schedule::keep_all(2)), expected);
}

TEST(ProgramTest, ScheduleErrorsNameTheStepActionAndTensor) {
  Saved s;
  {
    Schedule sch = s.empty();
    sch.after[1] = {release(s.a)};
    const std::string msg = lower_error(s.g(), sch);
    EXPECT_TRUE(contains(msg, "op 'g_bwd' (step 3) reads 'a'"));
    EXPECT_TRUE(contains(msg, "released at step 1"));
  }
  {
    Schedule sch = s.empty();
    sch.after[1] = {release(s.a)};
    sch.before[3] = {swap_in(s.a)};
    const std::string msg = lower_error(s.g(), sch);
    EXPECT_TRUE(contains(msg, "before step 3 ('g_bwd'), action 0 (swap_in 'a')"));
    EXPECT_TRUE(contains(msg, "no copy on host"));
  }
  {
    Schedule sch = s.empty();
    sch.after[3] = {swap_out(s.a)};
    EXPECT_TRUE(contains(lower_error(s.g(), sch), "it is dead: its last use was step 3"));
  }
  {
    Schedule sch = s.empty();
    sch.before[2] = {recompute(s.x)};
    EXPECT_TRUE(contains(lower_error(s.g(), sch), "data inputs cannot be recomputed"));
    sch.before[2] = {recompute(s.w)};
    EXPECT_TRUE(contains(lower_error(s.g(), sch), "persistent tensors cannot be recomputed"));
    sch.before[0] = {recompute(s.b)};
    sch.before[2] = {};
    EXPECT_TRUE(contains(lower_error(s.g(), sch), "not produced until step 1"));
  }
  {
    Schedule sch = s.empty();
    sch.after[0] = {swap_out(s.a)};
    sch.after[1] = {swap_out(s.a)};
    EXPECT_TRUE(contains(lower_error(s.g(), sch), "already has a valid copy on host"));
    sch.after[1] = {swap_out(s.a, Tier::kSsd)};  // another tier is fine
    EXPECT_TRUE(lower_schedule(s.g(), sch).ok());
    sch.after[1] = {swap_in(s.a)};
    EXPECT_TRUE(contains(lower_error(s.g(), sch), "already on the device"));
  }
  {
    Schedule sch = s.empty();
    sch.after[4] = {swap_out(s.w), release(s.w)};
    EXPECT_TRUE(contains(lower_error(s.g(), sch), "only an offloaded persistent tensor may leave the device"));
    sch.offloaded = {{s.w, Tier::kHost}};
    EXPECT_TRUE(contains(lower_error(s.g(), sch), "lives on host between iterations and was not swapped in"));
    sch.offloaded.clear();
    sch.after[4] = {release(s.loss)};
    EXPECT_TRUE(contains(lower_error(s.g(), sch), "the loss 'loss' is not on the device"));
  }
  {
    Schedule sch = s.empty();
    sch.before.pop_back();
    EXPECT_TRUE(contains(lower_error(s.g(), sch), "has 4 before-lists and 5 after-lists but graph 'saved' has 5 ops"));
    sch = s.empty();
    sch.before[2] = {release(99)};
    EXPECT_TRUE(contains(lower_error(s.g(), sch), "tensor id 99 is not in [0, 6)"));
    ProgramOptions o;
    o.op_scratch_bytes = {1, 2};
    EXPECT_TRUE(contains(lower_error(s.g(), s.empty(), o), "op_scratch_bytes has 2 entries"));
  }
}

TEST(ProgramTest, AnUpdateMakesEveryCopyOfTheWeightStale) {
  HandGraph h("stale");
  const TensorId w = h.weight("w", 64);
  const TensorId x = h.input("x", 16);
  const TensorId loss = h.tensor("loss", 4);
  const TensorId dw = h.tensor("dw", 64, TensorRole::kWeightGradient);
  h.op("f", {x, w}, {loss});
  h.op("f_bwd", {x, w}, {dw}, std::nullopt, Phase::kBackward);
  h.op("upd", {w, dw}, {w}, std::nullopt, Phase::kUpdate);
  h.op("read_w", {w}, {}, std::nullopt, Phase::kUpdate);
  h.set_loss(loss);
  // w lives on the host between iterations (offloaded).
  Schedule sch = Schedule::keep_all(4);
  sch.offloaded = {{w, Tier::kHost}};
  sch.before[0] = {swap_in(w)};
  sch.after[0] = {release(w)};
  sch.before[1] = {swap_in(w)};  // fine: nothing wrote w since the copy was made
  sch.after[3] = {swap_out(w), release(w)};
  EXPECT_TRUE(lower_schedule(h.graph(), sch).ok());
  // The update at step 2 made the host copy stale: releasing w then would lose the update.
  sch.after[2] = {release(w)};
  sch.before[3] = {swap_in(w)};
  EXPECT_TRUE(contains(lower_error(h.graph(), sch), "its copy on host is stale"));
  // Ending the iteration with w on the device strands it.
  sch.after[2].clear();
  sch.before[3].clear();
  sch.after[3] = {swap_out(w)};
  EXPECT_TRUE(contains(lower_error(h.graph(), sch), "is still on the device when the iteration ends"));
}

// Live bytes while each op runs, from the program alone: what the interpreters will allocate.
std::vector<uint64_t> live_at_runs(const Program& p, const Graph& g) {
  std::vector<uint64_t> out(g.ops.size(), 0);
  std::map<TensorId, uint64_t> live;  // tensor -> bytes
  uint64_t scratch = 0;
  for (const Instruction& in : p.instructions) {
    switch (in.kind) {
      case InstrKind::kAlloc:
        EXPECT_EQ(live.count(in.tensor), 0u) << g.tensor(in.tensor).name << " allocated twice";
        if (in.inherit != kNoTensor) {
          EXPECT_EQ(live.count(in.inherit), 1u);
          live.erase(in.inherit);
        }
        live[in.tensor] = in.bytes;
        break;
      case InstrKind::kFree:
      case InstrKind::kRelease:
        EXPECT_EQ(live.erase(in.tensor), 1u) << g.tensor(in.tensor).name << " freed while not allocated";
        break;
      case InstrKind::kAllocScratch: scratch = in.bytes; break;
      case InstrKind::kFreeScratch: scratch = 0; break;
      case InstrKind::kRun: {
        uint64_t sum = scratch;
        for (auto& [t, bytes] : live) sum += bytes;
        out[static_cast<size_t>(in.op)] = sum;
        break;
      }
      default: break;
    }
  }
  // What stays allocated at the end: persistent tensors and the loss, nothing else.
  for (auto& [t, bytes] : live)
    EXPECT_TRUE(g.tensor(t).persistent() || t == g.loss) << g.tensor(t).name << " leaked";
  return out;
}

// The keep plan's program must allocate exactly what the analysis (an independent implementation
// of the same memory model) says is live at every step, with and without in-place sharing.
TEST(ProgramTest, KeepPlanMatchesTheAnalysisLiveBytesOnZooModels) {
  for (const char* name : {"resnet-mini", "densenet-mini", "gpt2-mini", "bert-mini"}) {
    SCOPED_TRACE(name);
    ModelConfig cfg;
    cfg.batch = 2;
    Result<Graph> g = build_model(name, cfg);
    ASSERT_TRUE(g.ok()) << g.status().message();
    std::vector<uint64_t> scratch(g->ops.size());
    for (size_t i = 0; i < scratch.size(); ++i) scratch[i] = (i * 7919) % 5 == 0 ? 4096 + i : 0;
    for (bool inplace : {true, false}) {
      AnalysisOptions ao;
      ao.op_scratch_bytes = scratch;
      ao.allow_inplace = inplace;
      Result<Analysis> a = analyze(*g, ao);
      ASSERT_TRUE(a.ok()) << a.status().message();
      ProgramOptions po;
      po.op_scratch_bytes = scratch;
      po.allow_inplace = inplace;
      Result<Program> p = lower_schedule(*g, Schedule::keep_all(g->ops.size()), po);
      ASSERT_TRUE(p.ok()) << p.status().message();
      EXPECT_EQ(p->persistent_bytes, a->persistent_bytes);
      const std::vector<uint64_t> live = live_at_runs(*p, *g);
      const std::vector<uint64_t>& expected = inplace ? a->live_bytes_shared : a->live_bytes_free_at_last_use;
      for (size_t i = 0; i < live.size(); ++i)
        ASSERT_EQ(live[i], expected[i] + a->persistent_bytes) << "step " << i << " (" << g->ops[i].name << ")";
    }
  }
}

}  // namespace
}  // namespace ferry
