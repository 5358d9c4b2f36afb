// Ferry's planner, its lower bound and its exact MILP on small generated graphs:
//   lower bound <= simulated time of every plan (ferry's, ferry-exact's),
//   ferry-exact's stage time <= the stage time of ferry's plan (the MILP is optimal in its model,
//   whose space contains ferry's plans), and the MILP never calls a budget infeasible that ferry
//   fits;
// plus the planner's behaviour: nothing moves when everything fits, every plan it returns is
// legal and within the budget, --tier none recomputes only, and on the zoo's small models it is
// at least as fast as every seed policy that fits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>

#include "common/hand_graph.h"
#include "cost/profile.h"
#include "graph/trace.h"
#include "graph/zoo/zoo.h"
#include "plan/ferry/bound.h"
#include "plan/ferry/exact.h"
#include "plan/ferry/ferry_planner.h"
#include "plan/ferry/gaps.h"
#include "plan/policy_common.h"
#include "plan/policy_test_util.h"
#include "sim/simulator.h"

namespace ferry {
namespace {

using policy_test::Chain;
using policy_test::round_cost;
using policy_test::simulated_us;

// `scale`: 16 makes the tensors 16-256 KiB, some of them large enough to move in place
// (kDirectIoMinBytes).
Chain random_chain(uint64_t seed, uint64_t scale = 1) {
  std::mt19937_64 rng(seed);
  const int n = 3 + static_cast<int>(rng() % 4);
  std::vector<uint64_t> bytes;
  std::vector<double> op_us{0};
  for (int i = 0; i <= n; ++i) bytes.push_back(scale * 64 * (16 + rng() % 240));  // 1-16 KiB x scale
  for (int i = 1; i <= n; ++i) op_us.push_back(static_cast<double>(2 + rng() % 40));
  return Chain(bytes, op_us);
}

struct Case {
  uint64_t seed;
  double fraction;
  Tier tier;
  bool codecs = false;  // measured codec figures: every class compresses to 40%, the disk is slow
  bool direct = false;  // the storage is device_direct: raw SSD copies cross no host leg
};

CostModel direct_cost() {
  HardwareProfile p = cost_test::round_profile();
  p.storage.device_direct = true;
  return CostModel(p);
}

// Codec figures for every class of `g`: ratio 0.4, encoding at 1000 B/us, decoding at 2000 B/us
// (round_profile's disk writes 250 B/us and reads 500 B/us, so coding pays).
CostModel codec_cost(const Graph& g) {
  std::vector<CodecFigure> figures;
  for (const std::string& cls : tensor_classes(g))
    if (std::none_of(figures.begin(), figures.end(), [&](const CodecFigure& f) { return f.tensor_class == cls; }))
      figures.push_back({cls, CodecId::kLz4, CodecEstimate{0.4, 1e9, 2e9, 1}});
  return CostModel(cost_test::round_profile(), CostOptions{.codecs = figures});
}

class BoundExactFerry : public ::testing::TestWithParam<Case> {};

TEST_P(BoundExactFerry, BoundBelowExactBelowFerry) {
  const Case c = GetParam();
  const Chain chain = random_chain(c.seed, c.direct ? 16 : 1);
  const CostModel cost = c.codecs ? codec_cost(chain.g()) : c.direct ? direct_cost() : round_cost();
  PlanContext ctx{.graph = chain.g(), .cost = cost, .tier = c.tier};
  ctx.options.checkmate_time_limit_s = 60;
  const uint64_t full = policy_test::must_plan("none", ctx).device_bytes;
  ctx.budget_bytes = static_cast<uint64_t>(static_cast<double>(full) * c.fraction);
  SCOPED_TRACE(::testing::Message() << "seed " << c.seed << ", " << chain.n << " layers, budget " << ctx.budget_bytes
                                    << " of " << full << ", tier " << to_string(c.tier));
  Result<PlanFacts> facts = make_plan_facts(ctx);
  ASSERT_TRUE(facts.ok());
  Result<LowerBound> bound = plan_lower_bound(ctx, *facts);
  ASSERT_TRUE(bound.ok()) << bound.status().message();
  Result<PlanAttempt> exact = plan_exact(ctx, *facts);
  if (!exact.ok() && exact.status().code() == StatusCode::kUnsupported) GTEST_SKIP() << exact.status().message();
  ASSERT_TRUE(exact.ok()) << exact.status().message();
  Result<PlanAttempt> ferry = plan_ferry(ctx, *facts);
  ASSERT_TRUE(ferry.ok()) << ferry.status().message();
  if (ferry->fits) {
    EXPECT_LE(bound->us, simulated_us(ctx, ferry->schedule) * (1 + 1e-9));
    EXPECT_TRUE(exact->fits || !exact->notes.starts_with("the MILP proves"))
        << "the MILP calls infeasible a budget ferry fits: " << exact->notes;
  }
  // Whatever the MILP solved, its plan's live bytes stay within the budget its memory rows hold:
  // the schedule does what the solution says, no more (a swap-in column on where the tensor is
  // absent once brought the tensor back for good).
  if (exact->notes.starts_with("MILP")) {
    EXPECT_LE(exact->measure.live_peak_bytes, ctx.budget_bytes) << "the MILP's plan holds more than its rows: " << exact->notes;
  }
  if (!exact->fits) return;
  EXPECT_TRUE(exact->proven_optimal) << exact->notes;
  EXPECT_LE(bound->us, simulated_us(ctx, exact->schedule) * (1 + 1e-9));
  // An optimum solved with the rows lowered for placement is of a narrower space than ferry's.
  if (!ferry->fits || exact->notes.find("memory rows lowered") != std::string::npos) return;
  Result<double> exact_stage = stage_time(ctx, *facts, exact->schedule);
  Result<double> ferry_stage = stage_time(ctx, *facts, ferry->schedule);
  ASSERT_TRUE(exact_stage.ok() && ferry_stage.ok());
  EXPECT_LE(*exact_stage, *ferry_stage * (1 + 1e-9)) << exact->notes;
  if (std::getenv("FERRY_TEST_VERBOSE") && std::string(std::getenv("FERRY_TEST_VERBOSE")) == "2") {
    for (const auto* which : {&exact->schedule, &ferry->schedule}) {
      std::fprintf(stderr, "%s:", which == &exact->schedule ? "exact" : "ferry");
      for (const policy_test::Placed& p : policy_test::actions_of(*which))
        std::fprintf(stderr, " %s%d:%s(%s)", p.before ? "<" : ">", p.step, std::string(to_string(p.action.kind)).c_str(),
                     chain.g().tensor(p.action.tensor).name.c_str());
      std::fprintf(stderr, "\n");
    }
    for (const Op& op : chain.g().ops) std::fprintf(stderr, "%d:%s(%.0fus) ", op.id, op.name.c_str(), facts->op_us[op.id]);
    std::fprintf(stderr, "\n");
    for (const Tensor& t : chain.g().tensors) std::fprintf(stderr, "%s=%llu ", t.name.c_str(), (unsigned long long)t.bytes);
    std::fprintf(stderr, "\n");
  }
  if (std::getenv("FERRY_TEST_VERBOSE"))
    std::fprintf(stderr, "bound %.1f exact %.1f (stage %.1f) ferry %.1f (stage %.1f) actions %zu/%zu\n", bound->us,
                 simulated_us(ctx, exact->schedule), *exact_stage, simulated_us(ctx, ferry->schedule), *ferry_stage,
                 exact->schedule.num_actions(), ferry->schedule.num_actions());
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (uint64_t seed = 1; seed <= 8; ++seed)
    for (double fraction : {0.85, 0.7, 0.55}) {
      out.push_back({seed, fraction, seed % 3 == 0 ? Tier::kSsd : Tier::kHost});
      if (seed % 3 == 0) out.push_back({seed, fraction, Tier::kSsd, true});
      if (seed % 3 == 0) out.push_back({seed, fraction, Tier::kSsd, false, true});
    }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Chains, BoundExactFerry, ::testing::ValuesIn(cases()), [](const auto& info) {
  return fmt::format("seed{}_{}pct_{}{}{}", info.param.seed, static_cast<int>(info.param.fraction * 100),
                     to_string(info.param.tier), info.param.codecs ? "_codecs" : "",
                     info.param.direct ? "_direct" : "");
});

// A chain of (norm, relu) pairs whose norm outputs only the relu reads (a ResNet's pattern): the
// relu's backward reads its own output, the norm's its input, so a recompute of a relu output
// needs the norm output, gone by then (Note [Dead sources] in bound.cc).
struct NormReluChain {
  plan_test::HandGraph h{"norm_relu_chain"};
  explicit NormReluChain(uint64_t seed) {
    std::mt19937_64 rng(seed);
    const int pairs = 2 + static_cast<int>(rng() % 3);
    const TensorId w = h.weight("w", 256);
    std::vector<TensorId> a{h.input("x", 64 * (16 + rng() % 240))};
    std::vector<double> us{0};
    for (int i = 1; i <= 2 * pairs; ++i) {
      a.push_back(h.tensor(fmt::format("a{}", i), 64 * (16 + rng() % 240)));
      us.push_back(static_cast<double>(2 + rng() % 40));
      std::vector<TensorId> in{a[static_cast<size_t>(i - 1)]};
      if (i == 1) in.push_back(w);
      h.op(fmt::format("{}{}", i % 2 == 1 ? "norm" : "relu", i), in, {a.back()}, us.back());
    }
    const TensorId loss = h.tensor("loss", 64);
    h.op("loss_op", {a.back()}, {loss}, 1.0);
    TensorId d = h.tensor("d_out", h.graph().tensor(a.back()).bytes, TensorRole::kGradient);
    h.op("loss_bwd", {a.back()}, {d}, 1.0, Phase::kBackward);
    for (int i = 2 * pairs; i >= 1; --i) {
      const size_t k = static_cast<size_t>(i);
      const TensorId out =
          i > 1 ? h.tensor(fmt::format("d{}", i - 1), h.graph().tensor(a[k - 1]).bytes, TensorRole::kGradient)
                : h.tensor("dw", 256, TensorRole::kWeightGradient);
      const TensorId saved = i % 2 == 0 ? a[k] : a[k - 1];  // relu: its output; norm: its input
      h.op(fmt::format("b{}", i), {d, saved}, {out}, us[k], Phase::kBackward);
      d = out;
    }
    h.op("update", {w, d}, {w}, 1.0, Phase::kUpdate);
    h.set_loss(loss);
  }
};

// The dead-source rows keep the bound below ferry-exact's optimum and ferry's plan, never lower it,
// and raise it in some cell (the chains of BoundExactFerry have no dead sources): with the round
// profile's link, one 20 times slower, and recompute only. Their third way (the source fetched
// from its copy) is there by the argument of the note: no plan of these cells fetches a dead
// source for a recompute, and the test passes without it too.
TEST(FerryPlanner, DeadSourceRowsRaiseTheBoundAndKeepItBelowThePlans) {
  // The round profile's link, one 20 times slower (swaps cost more than recomputes) and no swaps.
  HardwareProfile slow = cost_test::round_profile();
  slow.host_link.host_to_device.nominal_bytes_per_s /= 20;
  slow.host_link.device_to_host.nominal_bytes_per_s /= 20;
  const CostModel round = round_cost(), slow_link(slow);
  int raised = 0, compared = 0;
  for (int setting = 0; setting < 3; ++setting)
    for (uint64_t seed = 1; seed <= 6; ++seed)
      for (double fraction : {0.8, 0.65, 0.5}) {
        const NormReluChain chain(seed);
        PlanContext ctx{.graph = chain.h.graph(), .cost = setting == 1 ? slow_link : round, .tier = Tier::kHost,
                        .recompute_only = setting == 2};
        const uint64_t full = policy_test::must_plan("none", ctx).device_bytes;
        ctx.budget_bytes = static_cast<uint64_t>(static_cast<double>(full) * fraction);
        SCOPED_TRACE(::testing::Message() << "seed " << seed << ", budget " << ctx.budget_bytes << " of " << full
                                          << ", setting " << setting);
        Result<PlanFacts> facts = make_plan_facts(ctx);
        ASSERT_TRUE(facts.ok());
        Result<LowerBound> with = plan_lower_bound(ctx, *facts);
        Result<LowerBound> without = plan_lower_bound(ctx, *facts, LowerBoundOptions{.dead_sources = false});
        ASSERT_TRUE(with.ok() && without.ok());
        if (with->method != "lp") continue;
        EXPECT_GE(with->us, without->us * (1 - 1e-6));  // the solver's tolerance
        if (with->us > without->us * 1.001) ++raised;
        Result<PlanAttempt> exact = plan_exact(ctx, *facts);
        if (!exact.ok() && exact.status().code() == StatusCode::kUnsupported) GTEST_SKIP() << exact.status().message();
        ASSERT_TRUE(exact.ok()) << exact.status().message();
        if (exact->fits) {
          EXPECT_LE(with->us, simulated_us(ctx, exact->schedule) * (1 + 1e-9));
          ++compared;
        }
        Result<PlanAttempt> ferry = plan_ferry(ctx, *facts);
        ASSERT_TRUE(ferry.ok()) << ferry.status().message();
        if (ferry->fits) {
          EXPECT_LE(with->us, simulated_us(ctx, ferry->schedule) * (1 + 1e-9));
        }
        if (std::getenv("FERRY_TEST_VERBOSE"))
          std::fprintf(stderr, "setting %d seed %llu %.2f: bound %.2f (without %.2f) exact %.2f ferry %.2f\n",
                       setting, static_cast<unsigned long long>(seed), fraction, with->us, without->us,
                       exact->fits ? simulated_us(ctx, exact->schedule) : -1.0,
                       ferry->fits ? simulated_us(ctx, ferry->schedule) : -1.0);
      }
  EXPECT_GT(raised, 0);
  EXPECT_GT(compared, 0);
}

// Every policy's plan carries the SSD codecs (Schedule::ssd_codecs): with measured figures, the
// codec the cost model picks for each tensor it swaps to the SSD tier, only where it pays (the
// compressible class); a codec named in the context on every SSD copy; none off the SSD tier, and
// none where coding would not make the iteration faster.
TEST(FerryPlanner, PlansCarryTheCodecsOfTheirSsdCopies) {
  ModelConfig config;
  config.batch = 4;
  const Graph g = build_model("resnet-mini", config).value();
  const std::vector<CodecFigure> figures = {
      {"relu/activation", CodecId::kZeroMask, CodecEstimate{0.5, 4e9, 8e9, 1}},
      {"conv2d/activation", CodecId::kZeroMask, CodecEstimate{1.0, 4e9, 8e9, 1}},
  };
  HardwareProfile slow_disk = cost_test::round_profile();
  const CostModel cost(slow_disk, CostOptions{.codecs = figures});
  const std::vector<std::string> classes = tensor_classes(g);
  PlanContext ctx{.graph = g, .cost = cost, .tier = Tier::kSsd};
  const uint64_t full = policy_test::must_plan("none", ctx).device_bytes;
  ctx.budget_bytes = full * 7 / 10;
  for (const char* policy : {"ferry", "vdnn-all", "lru"}) {
    SCOPED_TRACE(policy);
    auto on_ssd = [](const Schedule& s) {
      std::set<TensorId> out;
      for (const auto* lists : {&s.before, &s.after})
        for (const auto& v : *lists)
          for (const Action& a : v)
            if (a.kind == ActionKind::kSwapOut && a.tier == Tier::kSsd) out.insert(a.tensor);
      for (const Offload& o : s.offloaded)
        if (o.tier == Tier::kSsd) out.insert(o.tensor);
      return out;
    };
    const PlanReport chosen = policy_test::must_plan(policy, ctx);
    const std::set<TensorId> swapped = on_ssd(chosen.schedule);
    ASSERT_FALSE(swapped.empty());
    size_t relu_swapped = 0;
    for (TensorId t : swapped) relu_swapped += classes[static_cast<size_t>(t)] == "relu/activation";
    EXPECT_EQ(chosen.schedule.ssd_codecs.size(), relu_swapped) << "exactly the ReLU outputs it swaps";
    for (const TensorCodec& c : chosen.schedule.ssd_codecs) {
      EXPECT_EQ(c.codec, CodecId::kZeroMask);
      EXPECT_EQ(classes[static_cast<size_t>(c.tensor)], "relu/activation");
      EXPECT_TRUE(swapped.contains(c.tensor));
    }
    PlanContext forced = ctx;
    forced.ssd_codec = CodecId::kLz4;
    const PlanReport all = policy_test::must_plan(policy, forced);
    EXPECT_EQ(all.schedule.ssd_codecs.size(), on_ssd(all.schedule).size());
    forced.ssd_codec = CodecId::kNone;
    EXPECT_TRUE(policy_test::must_plan(policy, forced).schedule.ssd_codecs.empty());
    PlanContext host = ctx;
    host.tier = Tier::kHost;
    EXPECT_TRUE(policy_test::must_plan(policy, host).schedule.ssd_codecs.empty());
  }
  // Where every transfer hides behind compute (ops of 100 ms), coding gains nothing: `auto` plans
  // carry no codec (the raw plan is as fast), a named codec is still applied.
  Graph slow = g;
  for (Op& op : slow.ops) op.time_us = 1e5;
  PlanContext hidden{.graph = slow, .cost = cost, .budget_bytes = ctx.budget_bytes, .tier = Tier::kSsd};
  const PlanReport plain = policy_test::must_plan("vdnn-all", hidden);
  EXPECT_FALSE(plain.schedule.distinct_tensors(ActionKind::kSwapOut) == 0);
  EXPECT_TRUE(plain.schedule.ssd_codecs.empty());
  hidden.ssd_codec = CodecId::kZeroMask;
  EXPECT_FALSE(policy_test::must_plan("vdnn-all", hidden).schedule.ssd_codecs.empty());
}

// The bound counts each tensor's SSD leg at its fastest codec: where the disk is what limits the
// iteration (swaps only, a slow disk), codec figures lower the bound, and it stays below the
// coded plan.
TEST(FerryPlanner, TheBoundCountsCodedSsdLegs) {
  const Chain chain = random_chain(3);
  HardwareProfile slow = cost_test::round_profile();
  slow.storage.write_bytes_per_s = slow.storage.read_bytes_per_s = 2e7;  // 20 B/us
  const CostModel raw_cost(slow);
  std::vector<CodecFigure> figures;
  for (const std::string& cls : tensor_classes(chain.g()))
    if (std::none_of(figures.begin(), figures.end(), [&](const CodecFigure& f) { return f.tensor_class == cls; }))
      figures.push_back({cls, CodecId::kLz4, CodecEstimate{0.4, 1e9, 2e9, 1}});
  const CostModel coded_cost(slow, CostOptions{.codecs = figures});
  double bound_us[2] = {0, 0};
  for (int coded = 0; coded < 2; ++coded) {
    PlanContext ctx{.graph = chain.g(), .cost = coded ? coded_cost : raw_cost, .tier = Tier::kSsd};
    const uint64_t full = policy_test::must_plan("none", ctx).device_bytes;
    ctx.budget_bytes = full * 7 / 10;
    ctx.allow_recompute = false;  // swaps only: the disk bounds the iteration
    Result<PlanFacts> facts = make_plan_facts(ctx);
    ASSERT_TRUE(facts.ok()) << facts.status().message();
    Result<LowerBound> bound = plan_lower_bound(ctx, *facts);
    ASSERT_TRUE(bound.ok()) << bound.status().message();
    bound_us[coded] = bound->us;
    const PlanReport plan = policy_test::must_plan("ferry", ctx);
    EXPECT_LE(bound->us, simulated_us(ctx, plan.schedule) * (1 + 1e-9)) << (coded ? "coded" : "raw");
  }
  EXPECT_LT(bound_us[1], 0.9 * bound_us[0]) << "the codecs' shorter SSD legs are not in the bound";
}

// An executor that acts only through a framework's saved tensors (the PyTorch adapter): the plan
// frees only the marked tensors, only between forward and backward, and never recomputes.
TEST(FerryPlanner, FrameworkSavedRestrictsWhatMovesAndWhen) {
  const Chain chain({4096, 8192, 8192, 8192, 4096}, {0, 10, 10, 10, 10});
  const CostModel cost = round_cost();
  PlanContext ctx{.graph = chain.g(), .cost = cost, .tier = Tier::kHost};
  const uint64_t full = policy_test::must_plan("none", ctx).device_bytes;
  ctx.framework_saved.assign(chain.g().tensors.size(), false);
  ctx.framework_saved[static_cast<size_t>(chain.a[1])] = true;
  ctx.framework_saved[static_cast<size_t>(chain.a[2])] = true;
  ctx.allow_recompute = false;
  ctx.budget_bytes = full - 8192;  // one of the marked tensors must leave
  const PlanReport r = policy_test::must_plan("ferry", ctx);
  EXPECT_LE(r.device_bytes, ctx.budget_bytes);
  EXPECT_GE(r.swapped_tensors, 1u);
  EXPECT_EQ(r.recomputed_tensors, 0u);
  OpId num_forward = 0;
  while (chain.g().op(num_forward).phase == Phase::kForward) ++num_forward;
  for (size_t step = 0; step < r.schedule.before.size(); ++step)
    for (const auto* list : {&r.schedule.before[step], &r.schedule.after[step]})
      for (const Action& a : *list) {
        SCOPED_TRACE(fmt::format("{} of '{}' at step {}", to_string(a.kind), chain.g().tensor(a.tensor).name, step));
        EXPECT_TRUE(ctx.framework_saved[static_cast<size_t>(a.tensor)]);
        EXPECT_NE(a.kind, ActionKind::kRecompute);
        if (a.kind == ActionKind::kSwapIn) {
          EXPECT_GE(static_cast<OpId>(step), num_forward);
        }
        if (a.kind == ActionKind::kRelease) {
          EXPECT_GE(static_cast<OpId>(step), chain.forward[2] - 1);  // not before its forward reads
        }
      }
  // Nothing marked: nothing may move, so the budget that needed a move cannot fit.
  ctx.framework_saved.assign(chain.g().tensors.size(), false);
  Result<PlanReport> none = plan_policy("ferry", ctx);
  ASSERT_FALSE(none.ok()) << "device bytes " << none->device_bytes << " of budget " << ctx.budget_bytes << ", full "
                         << full << ", actions " << none->schedule.num_actions() << " " << [&] {
                           std::string a;
                           for (size_t i = 0; i < none->schedule.before.size(); ++i)
                             for (const auto* l : {&none->schedule.before[i], &none->schedule.after[i]})
                               for (const Action& x : *l)
                                 a += fmt::format("{}:{}:{} ", i, to_string(x.kind), chain.g().tensor(x.tensor).name);
                           return a;
                         }();
  EXPECT_EQ(none.status().code(), StatusCode::kOutOfMemory) << none.status().message();
  // The other policies cannot honour the restriction and say so.
  Result<PlanReport> capuchin = plan_policy("capuchin", ctx);
  ASSERT_FALSE(capuchin.ok());
  EXPECT_NE(capuchin.status().message().find("use 'ferry'"), std::string::npos) << capuchin.status().message();
  ctx.framework_saved.assign(3, true);
  EXPECT_EQ(plan_policy("ferry", ctx).status().code(), StatusCode::kInvalidArgument);
}

// Where copies slow the kernels (the CPU backend: compute interference), a hidden swap is no longer
// free: the simulator stretches the ops beside copies (the plan made as if copies cost nothing is
// predicted slower under the interference than without it), and the planner, which scores swaps
// with what their copies add and judges every variant under the interference, gives a plan
// strictly faster under it than that blind plan at every budget, and swaps fewer bytes where the
// budget leaves it the choice (at 80%; at 65% the two swap about the same bytes, different ones:
// bytes are only a proxy, the time under the interference is what the planner answers for).
TEST(FerryPlanner, CopiesThatSlowComputeMakeSwapsCostlier) {
  ModelConfig config;
  config.batch = 4;
  Graph g = build_model("resnet-mini", config).value();
  const CostModel free_copies = round_cost();
  HardwareProfile p = cost_test::round_profile();
  for (LinkDirection* d : {&p.host_link.device_to_host, &p.host_link.host_to_device}) d->compute_interference = 3;
  const CostModel slowing(p);
  for (double fraction : {0.8, 0.65}) {
    SCOPED_TRACE(fraction);
    PlanContext blind{.graph = g, .cost = free_copies, .tier = Tier::kHost};
    blind.budget_bytes = static_cast<uint64_t>(fraction * static_cast<double>(policy_test::must_plan("none", blind).device_bytes));
    PlanContext aware{.graph = g, .cost = slowing, .budget_bytes = blind.budget_bytes, .tier = Tier::kHost};
    const PlanReport a = policy_test::must_plan("ferry", aware);
    const PlanReport b = policy_test::must_plan("ferry", blind);
    ASSERT_GT(b.swapped_tensors, 0u) << "with free copies the planner swaps";
    auto swapped_bytes = [&](const Schedule& s) {
      uint64_t bytes = 0;
      for (const auto* lists : {&s.before, &s.after})
        for (const auto& v : *lists)
          for (const Action& x : v)
            if (x.kind == ActionKind::kSwapOut) bytes += g.tensor(x.tensor).bytes;
      return bytes;
    };
    if (fraction == 0.8) {
      EXPECT_LT(swapped_bytes(a.schedule), swapped_bytes(b.schedule));
    }
    EXPECT_LE(a.device_bytes, blind.budget_bytes);
    // Both plans timed under the interference (the blind one predicted faster than it runs).
    EXPECT_LT(simulated_us(aware, a.schedule), simulated_us(aware, b.schedule));
    EXPECT_LT(simulated_us(blind, b.schedule), simulated_us(aware, b.schedule));
  }
}

// The polish of the winner's costliest recomputes (FerryTuning::max_recompute_polish_tries) keeps
// a change only where the plan fits and simulates faster: with it a plan is never slower than
// without it, and it wins cells (the GPU profiles, where recomputing a convolution costs more per
// byte than the link time of its output).
TEST(FerryPlanner, RecomputePolishIsNeverSlowerAndWinsACell) {
  FerryTuning without_polish;
  without_polish.max_recompute_polish_tries = 0;
  const policy_test::CellTally t = policy_test::compare_over_cells(
      {"a100-40gb-pcie4", "v100-16gb-pcie3"}, {"resnet-mini", "densenet-mini"}, 32, {0.5, 0.33, 0.25}, without_polish);
  EXPECT_GT(t.compared, 0u);
  EXPECT_GT(t.won, 0u) << "the recompute polish won no cell: the comparison above proved nothing";
}

// Note [Far behind]: a candidate more than 1.5x behind the fastest other one is not polished. On
// these cells (2026-12-07) the rule fires and changes no plan: the times are those of every
// candidate polished. Polishing only the fastest candidate (a margin of 1) changes plans here
// (GPT-2 mini and resnet-mini on the H100 profile: 666 -> 713 us, 1.53 -> 2.07 ms predicted), so
// the comparison can tell a polish that mattered.
TEST(FerryPlanner, CandidatesFarBehindAreNotPolishedAndThePlansStayTheSame) {
  FerryTuning every_polish, fastest_only;
  every_polish.polish_far_behind = 0;
  fastest_only.polish_far_behind = 1;
  size_t fired = 0, changed = 0, cells = 0;
  for (const auto& [device, name, batch, fraction] : std::vector<std::tuple<const char*, const char*, int, double>>{
           {"v100-16gb-pcie3", "bert-mini", 8, 0.2},
           {"h100-80gb-pcie5", "bert-mini", 8, 0.2},
           {"h100-80gb-pcie5", "gpt2-mini", 8, 0.33},
           {"h100-80gb-pcie5", "resnet-mini", 32, 0.5}}) {
    SCOPED_TRACE(::testing::Message() << name << " on " << device << " at " << 100 * fraction << "%");
    const CostModel cost(load_profile(device).value());
    ModelConfig c;
    c.batch = batch;
    const Graph g = build_model(name, c).value();
    PlanContext ctx{.graph = g, .cost = cost};
    ctx.budget_bytes = static_cast<uint64_t>(fraction * static_cast<double>(policy_test::must_plan("none", ctx).device_bytes));
    const PlanFacts facts = make_plan_facts(ctx).value();
    const PlanAttempt all = plan_ferry(ctx, facts, every_polish).value();
    const PlanAttempt rule = plan_ferry(ctx, facts).value();
    const PlanAttempt one = plan_ferry(ctx, facts, fastest_only).value();
    ASSERT_TRUE(all.fits && rule.fits && one.fits);
    ++cells;
    const double all_us = simulated_us(ctx, all.schedule);
    EXPECT_EQ(simulated_us(ctx, rule.schedule), all_us);
    fired += rule.notes.find("far behind left out") != std::string::npos ? 1 : 0;
    changed += simulated_us(ctx, one.schedule) != all_us ? 1 : 0;
  }
  EXPECT_EQ(cells, 4u);
  EXPECT_GE(fired, 1u) << "the rule left out no polish here: the comparison above proved nothing";
  EXPECT_GE(changed, 1u) << "polishing only the fastest candidate changed nothing here: the cells cannot tell";
}

// The second polish's swap-out waits (FerryTuning::polish_swap_out_waits): a swapped activation
// whose release waits on the compute stream for its copy to leave (the link is queued) is released
// later, recomputed or kept where that is faster. Never slower than without, and faster in some
// cells (resnet-mini at 50% on the A100 profile: 1.30 -> 1.18 ms predicted when it was added),
// where the compute stream waits less for swap-outs.
TEST(FerryPlanner, SwapOutWaitPolishIsNeverSlowerAndWinsACell) {
  FerryTuning without;
  without.polish_swap_out_waits = false;
  const policy_test::CellTally t = policy_test::compare_over_cells(
      {"a100-40gb-pcie4", "v100-16gb-pcie3"}, {"resnet-mini", "gpt2-mini"}, 8, {0.5, 0.33, 0.25}, without);
  EXPECT_GT(t.compared, 0u);
  EXPECT_GT(t.won, 0u) << "the swap-out wait polish won no cell: the comparison above proved nothing";
}

// The copies in the order the link serves them (releases moved to where their copy is done,
// host-updated weights issued in the order they are read), at the end of every polish: each change
// is kept only where the plan fits and simulates faster, but on the candidates, before they are
// compared, it can change which one wins and what the winner's second polish finds after it. So:
// faster on the geometric mean over the cells and in some cell (resnet-mini at 50% on both
// profiles, gpt2-mini at 33% on the V100 profile), never more than 1% slower in any (gpt2-mini at
// 25% on the V100 profile: 0.1%).
TEST(FerryPlanner, CopyOrderPolishIsFasterOverTheCellsAndWinsACell) {
  FerryTuning without;
  without.polish_copy_order = false;
  const policy_test::CellTally t = policy_test::compare_over_cells({"a100-40gb-pcie4", "v100-16gb-pcie3"},
                                                                   {"resnet-mini", "gpt2-mini"}, 8, {0.5, 0.33, 0.25},
                                                                   without, policy_test::faster, /*slack=*/0.01);
  EXPECT_GT(t.compared, 0u);
  EXPECT_GT(t.won, 0u) << "the copy order polish won no cell: the comparison above proved nothing";
  EXPECT_LT(t.log_ratio_sum, 0.0) << "not faster over the cells";
}

// Recomputes that read what is on the device (FerryTuning::kept_source_variants): a forward-only
// input a quarter of the recomputed tensor's size or less is kept to the recompute instead of
// recomputed along, and a source another recompute took away is recomputed before its reader. On
// DenseNet each layer's concatenation otherwise recomputes through every earlier layer of its
// block, and a recompute whose source was recomputed away fell back to a swap. Taken only where it
// simulates faster after its polish: never slower, and it wins DenseNet cells at low budgets.
TEST(FerryPlanner, KeptSourceVariantsAreNeverSlowerAndWinACell) {
  // Without the LP-guided variants on both sides (their kept-source half would blur which pass won,
  // and they double this test's planning time).
  FerryTuning with;
  with.lp_guided = false;
  FerryTuning without = with;
  without.kept_source_variants = false;
  const policy_test::CellTally t = policy_test::compare_over_cells(
      {"v100-16gb-pcie3", "h100-80gb-pcie5"}, {"densenet-mini", "resnet-mini"}, 32, {0.5, 0.33}, without,
      policy_test::faster, 1e-9, with);
  EXPECT_GT(t.compared, 0u);
  // DenseNet-121's blocks of 6 to 24 layers on CIFAR-sized images, at 15% of its peak on the V100
  // profile: 16.23 -> 13.23 ms predicted when the variants were added.
  ModelConfig c;
  c.batch = 32;
  c.image = 32;
  const Graph g = build_model("densenet121", c).value();
  const CostModel cost(load_profile("v100-16gb-pcie3").value());
  PlanContext ctx{.graph = g, .cost = cost};
  ctx.budget_bytes = static_cast<uint64_t>(0.15 * static_cast<double>(policy_test::must_plan("none", ctx).device_bytes));
  const std::optional<policy_test::WithAndWithout> r = policy_test::compare_with_default(ctx, without, 1e-9, with);
  ASSERT_TRUE(r.has_value()) << "the plan without the variants does not fit: the case proves nothing";
  EXPECT_TRUE(policy_test::faster(ctx, *r)) << r->with_us << " us with, " << r->without_us << " us without";
  EXPECT_NE(r->with_notes.find("(kept sources:"), std::string::npos) << r->with_notes;
}

// The bound's primal values (LowerBoundOptions::keep_solution), which the LP-guided variants read:
// one entry per gap of find_gaps() in its order, fractions in [0, 1] (-1: the LP has no such
// column), no gap away more than once, the same bound as without, and at the keep plan's peak step
// (always a constrained step) the gaps spanning it take away at least what must leave: every
// memory row of the LP implies sum over those gaps of bytes * (x + y) >= live - budget. Values
// mapped to the wrong gaps fail that check.
// The portfolio solves the bound before its workers start (for the LP-guided variants) and hands
// it on in its plan, so that `ferry plan` reports it without solving the LP again: the same figure
// as lower_bound() of the same context. A budget probe (first_fit) and a plan without a budget
// solve none and hand on none.
TEST(FerryPlanner, ThePortfolioHandsOnTheBoundItSolved) {
  ModelConfig c;
  c.batch = 4;
  const Graph g = build_model("resnet-mini", c).value();
  const CostModel cost(load_profile("v100-16gb-pcie3").value());
  PlanContext ctx{.graph = g, .cost = cost};
  ctx.budget_bytes = policy_test::must_plan("none", ctx).device_bytes / 2;
  const LowerBound alone = lower_bound(ctx).value();
  if (alone.method != "lp") GTEST_SKIP() << "built without COIN-OR";
  const PlanReport r = plan_policy("ferry", ctx).value();
  ASSERT_NE(r.bound, nullptr);
  EXPECT_EQ(r.bound->method, "lp");
  EXPECT_NEAR(r.bound->us, alone.us, 1e-6 * alone.us);
  EXPECT_FALSE(r.bound->solution.empty());
  PlanContext probe = ctx;
  probe.options.first_fit = true;
  Result<PlanReport> probed = plan_policy("ferry", probe);
  ASSERT_TRUE(probed.ok()) << probed.status().message();
  EXPECT_EQ(probed->bound, nullptr);
  PlanContext unlimited = ctx;  // no budget: nothing to guide, no bound solved
  unlimited.budget_bytes = 0;
  Result<PlanReport> free_plan = plan_policy("ferry", unlimited);
  ASSERT_TRUE(free_plan.ok()) << free_plan.status().message();
  EXPECT_EQ(free_plan->bound, nullptr);
}

TEST(FerryPlanner, TheBoundsSolutionCoversThePeakStep) {
  int checked = 0;
  for (const char* device : {"v100-16gb-pcie3", "a100-40gb-pcie4"})
    for (const char* name : {"densenet-mini", "resnet-mini", "gpt2-mini"})
      for (double fraction : {0.5, 0.33}) {
        SCOPED_TRACE(::testing::Message() << name << " on " << device << " at " << 100 * fraction << "%");
        ModelConfig c;
        c.batch = 8;
        const Graph g = build_model(name, c).value();
        const CostModel cost(load_profile(device).value());
        PlanContext ctx{.graph = g, .cost = cost};
        ctx.budget_bytes =
            static_cast<uint64_t>(fraction * static_cast<double>(policy_test::must_plan("none", ctx).device_bytes));
        const PlanFacts facts = make_plan_facts(ctx).value();
        Result<LowerBound> plain = plan_lower_bound(ctx, facts);
        Result<LowerBound> kept = plan_lower_bound(ctx, facts, LowerBoundOptions{.keep_solution = true});
        ASSERT_TRUE(plain.ok() && kept.ok());
        if (kept->method != "lp") continue;  // built without COIN-OR
        if (!std::isfinite(kept->us)) {       // no plan fits: nothing to guide
          EXPECT_TRUE(kept->solution.empty());
          continue;
        }
        EXPECT_TRUE(plain->solution.empty());
        EXPECT_NEAR(kept->us, plain->us, 1e-6 * plain->us);
        const std::vector<planner::GapSpec> gaps =
            planner::find_gaps(facts, planner::collect_accesses(g), /*swaps_allowed=*/true);
        ASSERT_EQ(kept->solution.size(), gaps.size());
        const Program program = lower_schedule(g, empty_schedule(ctx, "none"), facts.program_options).value();
        const std::vector<uint64_t> live = live_bytes_per_step(facts, program);
        const int64_t peak = std::max_element(live.begin(), live.end()) - live.begin();
        double away = 0;
        for (size_t i = 0; i < gaps.size(); ++i) {
          const LowerBound::GapValue& v = kept->solution[i];
          EXPECT_EQ(v.gap.tensor, gaps[i].tensor);
          EXPECT_EQ(v.gap.from, gaps[i].from);
          EXPECT_EQ(v.gap.to, gaps[i].to);
          for (float x : {v.swap, v.recompute}) EXPECT_TRUE(x == -1 || (x >= -1e-6 && x <= 1 + 1e-6)) << x;
          const double taken = std::max(0.0f, v.swap) + std::max(0.0f, v.recompute);
          EXPECT_LE(taken, 1 + 1e-6);
          const bool spans =
              v.gap.cyclic ? (peak > v.gap.from || peak < v.gap.to) : (peak > v.gap.from && peak < v.gap.to);
          if (spans) away += taken * static_cast<double>(facts.aligned_bytes(v.gap.tensor));
        }
        const double need = static_cast<double>(live[static_cast<size_t>(peak)] - ctx.budget_bytes);
        EXPECT_GE(away, need * (1 - 1e-5) - 1024) << "peak step " << peak;
        ++checked;
      }
  EXPECT_GT(checked, 0);
}

// LP-guided variants (FerryTuning::lp_guided, Note [LP-guided greedy] in ferry_planner.cc): the
// greedy scored by the bound's relaxation, taken only where it simulates faster after its polish.
// Never slower than without, and faster in some cell: densenet-mini (batch 32) at 50% on the
// V100 profile, 4.214 -> 4.125 ms predicted when the variants were added.
TEST(FerryPlanner, LpGuidedVariantsAreNeverSlowerAndWinACell) {
  FerryTuning without;
  without.lp_guided = false;
  const policy_test::CellTally t = policy_test::compare_over_cells(
      {"v100-16gb-pcie3", "a100-40gb-pcie4"}, {"densenet-mini", "resnet-mini"}, 32, {0.5, 0.33}, without,
      [](const PlanContext& ctx, const policy_test::WithAndWithout& r) {
        const bool won = policy_test::faster(ctx, r);
        if (won) {
          EXPECT_NE(r.with_notes.find("(LP-guided"), std::string::npos) << r.with_notes;
        }
        return won;
      });
  EXPECT_GT(t.compared, 0u);
  EXPECT_GT(t.won, 0u) << "the LP-guided variants won no cell: the comparison above proved nothing";
}

// The second polish swaps a recomputed gap only where the tensor can make its copy: ResNet-50
// (batch 2, A100 profile) at 15% of its peak recomputes maxpool's output in two gaps; swapping the
// second booked its copy while the first had it away, and the plan failed with an internal error
// (a swap-out of a tensor not on the device) instead of fitting.
TEST(FerryPlanner, RecomputePolishSwapsOnlyWhatIsOnTheDevice) {
  ModelConfig c;
  c.batch = 2;
  const Graph g = build_model("resnet50", c).value();
  const CostModel cost(load_profile("a100-40gb-pcie4").value());
  PlanContext ctx{.graph = g, .cost = cost};
  const uint64_t full = policy_test::must_plan("none", ctx).device_bytes;
  for (double fraction : {0.15, 0.1}) {
    SCOPED_TRACE(fraction);
    ctx.budget_bytes = static_cast<uint64_t>(fraction * static_cast<double>(full));
    Result<PlanFacts> f = make_plan_facts(ctx);
    ASSERT_TRUE(f.ok());
    Result<PlanAttempt> a = plan_ferry(ctx, *f);
    ASSERT_TRUE(a.ok()) << a.status().message();
    EXPECT_TRUE(a->fits);
  }
}

// Note [Swap-outs where the tensor is] (ferry_planner.cc): every plan ferry makes lowers, whatever
// the op and link times. On figures one training run measured (resnet-mini b8 at 70% on the SSD
// tier) a polish recomputed the gap whose swap booked the tensor's swap-out while a later gap's
// swap still read the copy, and planning failed with an internal error (a swap-out of a tensor not
// on the device). Here the op times are drawn at random around the profile's, and the disk's and
// host link's speeds too, as a run's measurements vary from one machine and minute to the next.
// Of seeds 0-299 (1,200 plans) seed 87 hit it at 50% on the SSD tier before the fix, so these
// twelve seeds include it.
TEST(FerryPlanner, PlansLowerWhateverTheMeasuredTimes) {
  ModelConfig c;
  c.batch = 8;
  const Graph base = build_model("resnet-mini", c).value();
  size_t planned = 0;
  for (uint64_t seed = 80; seed < 92; ++seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> factor(0.25, 4.0);
    Graph g = base;
    HardwareProfile p = load_profile("cpu-local").value();
    const CostModel nominal(p);
    for (Op& op : g.ops) op.time_us = nominal.op_time_us(base, op) * factor(rng);
    p.storage.write_bytes_per_s *= factor(rng);
    p.storage.read_bytes_per_s *= factor(rng);
    p.host_link.device_to_host.nominal_bytes_per_s *= factor(rng);
    p.host_link.host_to_device.nominal_bytes_per_s *= factor(rng);
    const CostModel cost(p);
    for (Tier tier : {Tier::kSsd, Tier::kHost})
      for (double fraction : {0.5, 0.7}) {
        SCOPED_TRACE(::testing::Message() << "seed " << seed << " tier " << to_string(tier) << " at "
                                          << 100 * fraction << "%");
        PlanContext ctx{.graph = g, .cost = cost, .tier = tier};
        ctx.budget_bytes =
            static_cast<uint64_t>(fraction * static_cast<double>(policy_test::must_plan("none", ctx).device_bytes));
        Result<PlanFacts> f = make_plan_facts(ctx);
        ASSERT_TRUE(f.ok()) << f.status().message();
        Result<PlanAttempt> a = plan_ferry(ctx, *f);
        ASSERT_TRUE(a.ok()) << a.status().message();
        EXPECT_TRUE(a->fits);
        EXPECT_TRUE(lower_schedule(g, a->schedule).ok());
        ++planned;
      }
  }
  EXPECT_EQ(planned, 48u);
}

// Note [Sources a recompute keeps] (ferry_planner.cc): under a framework's restriction only saved
// tensors may be recomputed, so a saved tensor whose producer reads an unsaved one (an attention
// head cut from its QKV projection) is recomputed from that source kept on the device. The
// planner must count the source: recomputing the 32 KiB head keeps the 96 KiB projection from the
// forward pass to the head's backward read, which costs 64 KiB at every step between. With links
// so slow that every swap costs milliseconds, the plan recomputes the chain's layers (their
// sources are saved and live anyway), never the head, and is faster than the swaps-only plan; it
// used to recompute the head first, find the projection in the measured profile, have nothing
// left to take away and fall back to the swaps-only plan.
TEST(FerryPlanner, RecomputesCountTheSourcesTheyKeep) {
  test::HandGraph h("head");
  const TensorId w = h.weight("w", 256);
  const TensorId x = h.input("x", 4096);
  std::vector<TensorId> a{x};  // a1..a3 before the projection, then c1..c6 after the head
  for (int i = 1; i <= 3; ++i) a.push_back(h.tensor(fmt::format("a{}", i), 16384));
  const TensorId qkv = h.tensor("qkv", 98304);  // unsaved: only the head reads it
  const TensorId head = h.tensor("head", 32768);
  std::vector<TensorId> c{head};
  for (int i = 1; i <= 6; ++i) c.push_back(h.tensor(fmt::format("c{}", i), 16384));
  const TensorId loss = h.tensor("loss", 64);
  h.op("f1", {x, w}, {a[1]}, 10.0);
  for (size_t i = 2; i <= 3; ++i) h.op(fmt::format("f{}", i), {a[i - 1]}, {a[i]}, 10.0);
  h.op("proj", {a[3]}, {qkv}, 10.0);
  h.op("cut", {qkv}, {head}, 1.0);  // the cheapest recompute per byte, were its source free
  for (size_t i = 1; i <= 6; ++i) h.op(fmt::format("g{}", i), {c[i - 1]}, {c[i]}, 10.0);
  h.op("loss_op", {c[6]}, {loss}, 1.0);
  auto grad = [&](const std::string& name, uint64_t bytes) { return h.tensor(name, bytes, TensorRole::kGradient); };
  TensorId d = grad("dc6", 16384);
  h.op("loss_bwd", {c[6]}, {d}, 1.0, Phase::kBackward);
  for (size_t i = 6; i >= 1; --i) {
    const TensorId next = grad(fmt::format("dc{}", i - 1), i == 1 ? 32768 : 16384);
    h.op(fmt::format("g{}_bwd", i), {d, c[i - 1]}, {next}, 10.0, Phase::kBackward);
    d = next;
  }
  const TensorId dqkv = grad("dqkv", 98304);
  h.op("cut_bwd", {d}, {dqkv}, 1.0, Phase::kBackward);  // a slice's backward reads no input
  d = dqkv;
  for (size_t i = 3; i >= 1; --i) {
    const TensorId next = i > 1 ? grad(fmt::format("da{}", i - 1), 16384) : h.tensor("dw", 256, TensorRole::kWeightGradient);
    h.op(fmt::format("f{}_bwd", i), {d, a[i - 1]}, {next}, 10.0, Phase::kBackward);
    d = next;
  }
  h.op("update", {w, d}, {w}, 1.0, Phase::kUpdate);
  h.set_loss(loss);
  const Graph& g = h.graph();

  HardwareProfile slow = cost_test::round_profile();
  slow.host_link.host_to_device.nominal_bytes_per_s /= 1000;
  slow.host_link.device_to_host.nominal_bytes_per_s /= 1000;
  const CostModel cost(slow);
  PlanContext ctx{.graph = g, .cost = cost, .tier = Tier::kHost};
  const uint64_t full = policy_test::must_plan("none", ctx).device_bytes;
  ctx.framework_saved.assign(g.tensors.size(), false);
  for (const std::vector<TensorId>* saved : {&a, &c})
    for (TensorId t : *saved)
      if (t != x) ctx.framework_saved[static_cast<size_t>(t)] = true;
  for (uint64_t off : {8192, 24576, 40960}) {
    ctx.budget_bytes = full - off;
    SCOPED_TRACE(::testing::Message() << "budget " << ctx.budget_bytes << " of " << full);
    const PlanReport r = policy_test::must_plan("ferry", ctx);
    EXPECT_LE(r.device_bytes, ctx.budget_bytes);
    EXPECT_GE(r.recomputed_tensors, 1u);
    for (const policy_test::Placed& p : policy_test::actions_of(r.schedule))
      EXPECT_FALSE(p.action.kind == ActionKind::kRecompute && p.action.tensor == head) << "at step " << p.step;
    PlanContext swaps_only = ctx;
    swaps_only.allow_recompute = false;
    const PlanReport s = policy_test::must_plan("ferry", swaps_only);
    EXPECT_LT(simulated_us(ctx, r.schedule), simulated_us(ctx, s.schedule));
  }
}

// Recomputation only of what the executor can replay: with no op replayable nothing is recomputed,
// even where recomputing is all that fits (recompute-only tier).
TEST(FerryPlanner, ReplayableOpsBoundRecomputation) {
  const Chain chain({4096, 8192, 8192, 8192, 4096}, {0, 10, 10, 10, 10});
  const CostModel cost = round_cost();
  PlanContext ctx{.graph = chain.g(), .cost = cost, .recompute_only = true};
  const uint64_t full = policy_test::must_plan("none", ctx).device_bytes;
  ctx.budget_bytes = full - 8192;
  const PlanReport free_choice = policy_test::must_plan("ferry", ctx);
  ASSERT_GE(free_choice.recomputed_tensors, 1u);  // recomputation is what makes it fit
  ctx.replayable_ops.assign(chain.g().ops.size(), false);
  Result<PlanReport> none = plan_policy("ferry", ctx);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kOutOfMemory) << none.status().message();
  ctx.replayable_ops.assign(chain.g().ops.size(), true);
  EXPECT_GE(policy_test::must_plan("ferry", ctx).recomputed_tensors, 1u);
  ctx.replayable_ops.assign(2, true);
  EXPECT_EQ(plan_policy("ferry", ctx).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(plan_policy("checkmate", ctx).status().code(), StatusCode::kInvalidArgument);
}

// Where no variant fits, the inner offloads (Note [Inner offloads]) run for every host set
// before the tight fallback. The graph is an MLP iteration from bench/exact_gap.py (7 layers, SGD,
// batch 1024, every update on the device). At 50% of its peak on the cpu-local profile, the
// greedy got stuck in the backward pass, at a step only a 1 MiB weight's gap between its forward
// and backward reads would free. The tight fallback then swapped 1-step gradient gaps, each
// exposed: 12.81 ms predicted, against 12.31 ms for ferry-exact's proven optimum. With the
// booked inner offloads it offloads 4 weights: 12.05 ms.
TEST(FerryPlanner, InnerOffloadsComeBeforeTheTightFallback) {
  const Graph g = load_trace(std::string(FERRY_SOURCE_DIR) + "/tests/plan/data/mlp7-sgd.json").value();
  const CostModel cost(load_profile("cpu-local").value());
  PlanContext ctx{.graph = g, .cost = cost, .tier = Tier::kHost};
  ctx.op_scratch_bytes = policy_test::backend_like_scratch(g);
  ctx.budget_bytes = policy_test::must_plan("none", ctx).device_bytes / 2;
  Result<PlanFacts> f = make_plan_facts(ctx);
  ASSERT_TRUE(f.ok());
  FerryTuning without_variants;
  without_variants.inner_offload_variants = false;
  Result<PlanAttempt> without = plan_ferry(ctx, *f, without_variants);
  Result<PlanAttempt> with = plan_ferry(ctx, *f);
  ASSERT_TRUE(without.ok() && with.ok());
  ASSERT_TRUE(without->fits && with->fits);
  EXPECT_NE(without->notes.find("tight"), std::string::npos) << "without them, only the tight fallback fits: " << without->notes;
  EXPECT_EQ(with->notes.find("tight"), std::string::npos) << with->notes;
  EXPECT_NE(with->notes.find("offloaded for their inner gaps"), std::string::npos) << with->notes;
  EXPECT_LT(simulated_us(ctx, with->schedule), simulated_us(ctx, without->schedule));
  Result<PlanMeasure> m = measure_schedule(*f, with->schedule);
  ASSERT_TRUE(m.ok());
  EXPECT_LE(m->device_bytes, ctx.budget_bytes);
}

// Note [Stall bans]: the winner's variant planned again with the transients whose copies its
// simulation waits for longest kept on the device. On two MLP iterations from bench/exact_gap.py
// (SGD, every update on the device; the traces in tests/plan/data), host tier, cpu-local, at
// budgets between 60% and 45% of the peak: never slower than without, and faster somewhere. The
// 5-layer one at 50% (batch 256) swapped gradients read one step after they are made, whose
// copies have no window and are waited for: 1026 us; with them kept, 881 us.
TEST(FerryPlanner, StallBansAreNeverSlowerAndWinACell) {
  FerryTuning without;
  without.stall_ban_variant = false;
  size_t won = 0;
  for (const char* trace : {"mlp5-sgd.json", "mlp7-sgd.json"}) {
    const Graph g = load_trace(std::string(FERRY_SOURCE_DIR) + "/tests/plan/data/" + trace).value();
    const CostModel cost(load_profile("cpu-local").value());
    PlanContext ctx{.graph = g, .cost = cost, .tier = Tier::kHost};
    ctx.op_scratch_bytes = policy_test::backend_like_scratch(g);
    const uint64_t full = policy_test::must_plan("none", ctx).device_bytes;
    for (double fraction : {0.6, 0.5, 0.45}) {
      SCOPED_TRACE(::testing::Message() << trace << " at " << 100 * fraction << "%");
      ctx.budget_bytes = static_cast<uint64_t>(fraction * static_cast<double>(full));
      Result<PlanFacts> f = make_plan_facts(ctx);
      ASSERT_TRUE(f.ok());
      Result<PlanAttempt> off = plan_ferry(ctx, *f, without);
      Result<PlanAttempt> on = plan_ferry(ctx, *f);
      ASSERT_TRUE(off.ok() && on.ok());
      ASSERT_EQ(off->fits, on->fits);
      if (!on->fits) continue;
      const double on_us = simulated_us(ctx, on->schedule), off_us = simulated_us(ctx, off->schedule);
      if (on->notes.find("Note [Stall bans]") == std::string::npos) {
        EXPECT_DOUBLE_EQ(on_us, off_us);  // not taken: the same plan
        continue;
      }
      EXPECT_LT(on_us, off_us);
      ++won;
      Result<PlanMeasure> m = measure_schedule(*f, on->schedule);
      ASSERT_TRUE(m.ok());
      EXPECT_LE(m->device_bytes, ctx.budget_bytes);
    }
  }
  EXPECT_GT(won, 0u) << "no budget was won by a stall-ban variant";
}

// Where the winner's variant keeps its weights on the device (no inner offloads), the stall bans
// replan it with inner offloads too: keeping the 1-step gradients it waited for frees no other
// transient, and the weights' inner gaps are what ferry-exact takes at those peaks. A 5-layer Adam
// MLP (bench/exact_gap.py, seed 2's mlp5-r4): at 45% ferry was 1.12x ferry-exact's proven optimum
// (3,191 us against 2,858, predicted) with the bans replanning only the winner's own variant.
TEST(FerryPlanner, StallBansOffloadWeightsWithinThreePercentOfExact) {
  const Graph g = load_trace(std::string(FERRY_SOURCE_DIR) + "/tests/plan/data/mlp5-adam.json").value();
  const CostModel cost(load_profile("cpu-local").value());
  PlanContext ctx{.graph = g, .cost = cost, .tier = Tier::kHost};
  ctx.op_scratch_bytes = policy_test::backend_like_scratch(g);
  ctx.options.checkmate_time_limit_s = 60;
  const uint64_t full = policy_test::must_plan("none", ctx).device_bytes;
  size_t compared = 0;
  for (double fraction : {0.45, 0.4}) {
    SCOPED_TRACE(::testing::Message() << "at " << 100 * fraction << "%");
    ctx.budget_bytes = static_cast<uint64_t>(fraction * static_cast<double>(full));
    Result<PlanFacts> f = make_plan_facts(ctx);
    ASSERT_TRUE(f.ok());
    Result<PlanAttempt> exact = plan_exact(ctx, *f);
    Result<PlanAttempt> ferry = plan_ferry(ctx, *f);
    ASSERT_TRUE(exact.ok() && ferry.ok());
    if (std::getenv("FERRY_TEST_VERBOSE"))
      std::fprintf(stderr, "%.2f: exact %s %.1f us (%s), ferry %.1f us\n", fraction, exact->fits ? "fits" : "does not fit",
                   exact->fits ? simulated_us(ctx, exact->schedule) : -1.0, exact->notes.c_str(),
                   ferry->fits ? simulated_us(ctx, ferry->schedule) : -1.0);
    if (!exact->fits || !exact->proven_optimal || exact->notes.find("memory rows lowered") != std::string::npos)
      continue;
    ASSERT_TRUE(ferry->fits);
    EXPECT_LE(ferry->measure.device_bytes, ctx.budget_bytes);
    EXPECT_LE(simulated_us(ctx, ferry->schedule), 1.03 * simulated_us(ctx, exact->schedule)) << ferry->notes;
    ++compared;
  }
  EXPECT_GT(compared, 0u);
}

}  // namespace
}  // namespace ferry
