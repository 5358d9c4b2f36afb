// Offloaded persistent tensors (Schedule::offloaded): weights and optimizer state that live in a
// tier between iterations, come in before each use and leave after it (after an update: swapped
// out, then released). Training with every persistent tensor offloaded, on both tiers, gives
// bitwise the losses, weights and optimizer state of training with everything on the device, and
// the executor's measured live peak equals the simulator's prediction; lowering refuses the
// schedules that would lose an update or leave a device-resident tensor off the device.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include <fmt/format.h>

#include "backend/backend.h"
#include "cost/cost_model.h"
#include "cost/profile.h"
#include "data/data.h"
#include "graph/update_order.h"
#include "graph/zoo/zoo.h"
#include "plan/ferry/host_updates.h"
#include "plan/policies.h"
#include "plan/policy_common.h"
#include "runtime/executor.h"
#include "training_run.h"
#include "schedule/program.h"
#include "sim/simulator.h"

namespace ferry {
namespace {

Graph model(const std::string& name) {
  ModelConfig c;
  c.batch = 4;
  c.train.optimizer = OptimizerKind::kAdam;
  c.train.lr = 1e-3f;
  if (name.rfind("gpt2", 0) == 0) c.seq = 32;
  return build_model(name, c).value();
}

// Every persistent tensor offloaded to `tier`: swapped in right before an op that uses it, released
// right after (swapped out first when the op wrote it).
Schedule offload_all(const Graph& g, Tier tier) {
  Schedule s = Schedule::keep_all(g.ops.size());
  s.policy = "offload-all";
  std::vector<bool> on(g.tensors.size(), false);
  for (const Tensor& t : g.tensors)
    if (t.persistent()) s.offloaded.push_back({t.id, tier});
  for (const Op& op : g.ops) {
    std::vector<TensorId> used;
    for (TensorId t : op.inputs)
      if (g.tensor(t).persistent()) used.push_back(t);
    for (TensorId t : op.outputs)
      if (g.tensor(t).persistent()) used.push_back(t);
    for (TensorId t : used)
      if (!on[t]) {
        s.before[op.id].push_back({ActionKind::kSwapIn, t, tier});
        on[t] = true;
      }
    for (TensorId t : used) {
      if (!on[t]) continue;
      const bool written = std::find(op.outputs.begin(), op.outputs.end(), t) != op.outputs.end();
      if (written) s.after[op.id].push_back({ActionKind::kSwapOut, t, tier});
      s.after[op.id].push_back({ActionKind::kRelease, t, tier});
      on[t] = false;
    }
  }
  return s;
}

// ZeRO-Offload's placement by hand: offload_all's schedule with every optimizer update run on the
// host (kHostUpdate) from `tier`'s copies: each gradient is swapped out to `tier` and released right
// after its producer, and the update runs where the update op stood.
Schedule host_update_all(const Graph& g, Tier tier) {
  Schedule s = offload_all(g, tier);
  s.policy = "host-update-all";
  for (const Op& op : g.ops) {
    if (op.type != OpType::kSgdUpdate && op.type != OpType::kAdamUpdate) continue;
    s.before[op.id].clear();  // the update no longer needs its operands on the device
    s.after[op.id].clear();
    const TensorId grad = op.inputs[1];
    OpId producer = kNoOp;
    for (const Op& p : g.ops)
      if (std::find(p.outputs.begin(), p.outputs.end(), grad) != p.outputs.end()) producer = p.id;
    s.after[producer].push_back({ActionKind::kSwapOut, grad, tier});
    s.after[producer].push_back({ActionKind::kRelease, grad, tier});
    s.before[op.id].push_back({ActionKind::kHostUpdate, grad, tier});
  }
  return s;
}

struct Outcome {
  std::vector<float> losses;
  std::vector<std::vector<std::byte>> persistent;
  uint64_t measured_peak = 0, predicted_live = 0, swapped_in = 0;
  size_t host_updates = 0;  // in the last iteration
};

Result<Outcome> train(const Graph& g, const Schedule* s, bool verify = false, uint64_t budget = 0) {
  ExecutorOptions o;
  o.budget_bytes = budget;
  o.seed = 9;
  o.checksum = true;
  o.verify_memory = verify;
  o.ssd_dir = std::filesystem::temp_directory_path().string();
  FERRY_ASSIGN_OR_RETURN(test::TrainingRun run, test::run_training(g, s, o, 3));
  Outcome out;
  out.losses = std::move(run.losses);
  out.persistent = std::move(run.persistent);
  out.measured_peak = run.executor->measured_peak_bytes();
  out.predicted_live = run.executor->predicted_live_peak_bytes();
  out.swapped_in = run.executor->transfer_stats().bytes_in;
  out.host_updates = run.executor->last_host_updates();
  return out;
}

size_t count_updates(const Graph& g) {
  return static_cast<size_t>(std::count_if(g.ops.begin(), g.ops.end(), [](const Op& op) {
    return op.type == OpType::kSgdUpdate || op.type == OpType::kAdamUpdate;
  }));
}

void expect_same_training(const Outcome& run, const Outcome& reference) {
  EXPECT_EQ(run.losses, reference.losses);
  ASSERT_EQ(run.persistent.size(), reference.persistent.size());
  for (size_t i = 0; i < run.persistent.size(); ++i)
    EXPECT_TRUE(run.persistent[i] == reference.persistent[i]) << "persistent tensor " << i;
}

// `g` with the CPU backend's tensor sizes, and the scratch its ops need: what the planner and the
// simulator see of the graph the executor runs.
struct CpuSized {
  Graph graph;
  std::vector<uint64_t> scratch_bytes;  // per op
};

CpuSized cpu_sized(const Graph& g) {
  auto backend = make_backend("cpu").value();
  auto compiled = backend->compile(g).value();
  return {with_backend_sizes(g, *compiled), compiled->all_scratch_bytes()};
}

// "gpt2_mini_ssd" for the (model, tier) suites below.
std::string model_tier_name(const ::testing::TestParamInfo<std::tuple<const char*, Tier>>& info) {
  std::string n = std::string(std::get<0>(info.param)) + "_" + std::string(to_string(std::get<1>(info.param)));
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

class OffloadAll : public ::testing::TestWithParam<std::tuple<const char*, Tier>> {};

TEST_P(OffloadAll, TrainsBitwiseLikeKeepingEverythingOnTheDevice) {
  const auto [name, tier] = GetParam();
  const Graph g = model(name);
  Result<Outcome> reference = train(g, nullptr);
  ASSERT_TRUE(reference.ok()) << reference.status().message();
  const Schedule s = offload_all(g, tier);
  Result<Outcome> run = train(g, &s);
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_GT(run->swapped_in, 0u);
  expect_same_training(*run, *reference);
  EXPECT_EQ(run->measured_peak, run->predicted_live);
  EXPECT_LT(run->measured_peak, reference->measured_peak);
  // The memory checks (contents of every swapped-in weight included) pass, with the same numbers.
  Result<Outcome> verified = train(g, &s, /*verify=*/true);
  ASSERT_TRUE(verified.ok()) << verified.status().message();
  EXPECT_EQ(verified->losses, reference->losses);
  // The simulator runs the same program: same live peak, and the tier holds every persistent byte.
  const CpuSized sized = cpu_sized(g);
  uint64_t persistent_bytes = 0;
  for (const Tensor& t : sized.graph.tensors)
    if (t.persistent()) persistent_bytes += t.bytes;
  const CostModel cost(load_profile("cpu-local").value());
  SimOptions so;
  so.op_scratch_bytes = sized.scratch_bytes;
  so.alignment = Backend::kDeviceAlignment;
  so.record_timeline = false;
  Result<SimResult> sim = simulate(sized.graph, s, cost, so);
  ASSERT_TRUE(sim.ok()) << sim.status().message();
  EXPECT_EQ(sim->peak_in_use_bytes, run->measured_peak);
  EXPECT_GE(tier == Tier::kHost ? sim->peak_host_bytes : sim->peak_ssd_bytes, persistent_bytes);
}

INSTANTIATE_TEST_SUITE_P(Models, OffloadAll,
                         ::testing::Combine(::testing::Values("resnet-mini", "gpt2-mini"),
                                            ::testing::Values(Tier::kHost, Tier::kSsd)),
                         model_tier_name);

class HostUpdates : public ::testing::TestWithParam<std::tuple<const char*, Tier>> {};

// Every update on the host, reading weights, gradients and optimizer state from `tier`: bitwise the
// losses, weights and optimizer state of updating on the device; the simulator runs the same
// program (same live peak, every update on its host lane).
TEST_P(HostUpdates, TrainBitwiseLikeUpdatingOnTheDevice) {
  const auto [name, tier] = GetParam();
  const Graph g = model(name);
  Result<Outcome> reference = train(g, nullptr);
  ASSERT_TRUE(reference.ok()) << reference.status().message();
  const Schedule s = host_update_all(g, tier);
  ASSERT_EQ(s.num_host_updates(), count_updates(g));
  Result<Outcome> run = train(g, &s);
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_EQ(run->host_updates, count_updates(g));
  expect_same_training(*run, *reference);
  EXPECT_EQ(run->measured_peak, run->predicted_live);
  Result<Outcome> verified = train(g, &s, /*verify=*/true);
  ASSERT_TRUE(verified.ok()) << verified.status().message();
  expect_same_training(*verified, *reference);

  const CpuSized sized = cpu_sized(g);
  HardwareProfile profile = load_profile("cpu-local").value();
  profile.host_optimizer_bytes_per_s = 18e9;  // cpu-local has none (its host is the device's CPU)
  const CostModel cost(profile);
  SimOptions so;
  so.op_scratch_bytes = sized.scratch_bytes;
  so.alignment = Backend::kDeviceAlignment;
  Result<SimResult> sim = simulate(sized.graph, s, cost, so);
  ASSERT_TRUE(sim.ok()) << sim.status().message();
  EXPECT_EQ(sim->peak_in_use_bytes, run->measured_peak);
  EXPECT_EQ(sim->num_host_updates, count_updates(g));
  EXPECT_GT(sim->host_update_us, 0);
  EXPECT_GE(sim->iteration_us, sim->compute_end_us);
}

INSTANTIATE_TEST_SUITE_P(Models, HostUpdates,
                         ::testing::Combine(::testing::Values("resnet-mini", "gpt2-mini"),
                                            ::testing::Values(Tier::kHost, Tier::kSsd)),
                         model_tier_name);

// The planner's rewrite (plan/ferry/host_updates.h) of the keep plan: updates overlap the backward
// pass, weights are prefetched; still bitwise, with no optimizer state on the device and less
// device memory than without a plan.
TEST(HostUpdatesPlanned, KeepPlanRewrittenTrainsBitwise) {
  for (const char* name : {"resnet-mini", "gpt2-mini"}) {
    SCOPED_TRACE(name);
    const Graph g = model(name);
    const CpuSized sized = cpu_sized(g);
    // cpu-local offers no host updates (its host is the CPU the kernels run on): give it a rate.
    HardwareProfile profile = load_profile("cpu-local").value();
    profile.host_optimizer_bytes_per_s = 18e9;
    const CostModel cost(profile);
    PlanContext ctx{.graph = sized.graph, .cost = cost, .op_scratch_bytes = sized.scratch_bytes};
    ctx.budget_bytes = 0;
    Result<PlanFacts> facts = make_plan_facts(ctx);
    ASSERT_TRUE(facts.ok()) << facts.status().message();
    const std::vector<OpId> ops = facts->host_updatable;
    ASSERT_EQ(ops.size(), count_updates(g));
    Result<Schedule> s = complete_schedule(*facts, planner::with_host_updates(*facts, empty_schedule(ctx, "t"), ops));
    ASSERT_TRUE(s.ok()) << s.status().message();
    Result<Outcome> reference = train(g, nullptr);
    ASSERT_TRUE(reference.ok()) << reference.status().message();
    Result<Outcome> run = train(g, &*s);
    ASSERT_TRUE(run.ok()) << run.status().message();
    EXPECT_EQ(run->host_updates, ops.size());
    expect_same_training(*run, *reference);
    EXPECT_LT(run->measured_peak, reference->measured_peak);
  }
}

// Ferry's plans at its smallest budget on a GPU profile (host updates and offloads allowed), where
// only its tight variants fit (plan/ferry/ferry_planner.cc: swap-outs issued before a saturated
// link's booking and waited for, weights offloaded to leave between their reads, or swaps only):
// trained on the CPU backend within that budget, bitwise the losses, weights and optimizer state
// of training without a plan.
TEST(TightPlans, AtTheSmallestBudgetTrainBitwise) {
  for (const char* name : {"resnet-mini", "gpt2-mini"}) {
    const Graph g = model(name);
    const CpuSized sized = cpu_sized(g);
    const CostModel cost(load_profile("a100-40gb-pcie4").value());
    Result<Outcome> reference = train(g, nullptr);
    ASSERT_TRUE(reference.ok()) << reference.status().message();
    int tight = 0, inner = 0;  // tight plans; those that offloaded weights to free their inner gaps
    for (Tier tier : {Tier::kHost, Tier::kSsd}) {
      SCOPED_TRACE(fmt::format("{} on {}", name, to_string(tier)));
      PlanContext ctx{.graph = sized.graph, .cost = cost, .tier = tier, .op_scratch_bytes = sized.scratch_bytes};
      Result<uint64_t> min = find_min_budget("ferry", ctx);
      ASSERT_TRUE(min.ok()) << min.status().message();
      ctx.budget_bytes = *min;
      Result<PlanReport> plan = plan_policy("ferry", ctx);
      ASSERT_TRUE(plan.ok()) << plan.status().message();
      if (plan->notes.find("(tight") != std::string::npos) ++tight;
      std::smatch m;
      if (std::regex_search(plan->notes, m, std::regex(R"(([0-9]+) offloaded for their inner gaps)")) &&
          std::stoul(m[1].str()) > 0)
        ++inner;
      Result<Outcome> run = train(g, &plan->schedule, false, *min);
      ASSERT_TRUE(run.ok()) << run.status().message();
      expect_same_training(*run, *reference);
      EXPECT_LE(run->measured_peak, *min);
      EXPECT_GT(run->swapped_in, 0u);
    }
    EXPECT_GE(tight, 1) << "no tight plan at the smallest budget: the case proves nothing new";
    EXPECT_GE(inner, 1) << "no tight plan offloaded a weight to free its inner gaps";
  }
}

// Ferry's plans whose recomputes read kept sources (FerryTuning::kept_source_variants: a small
// forward-only input kept on the device to the recompute, a source recomputed before its reader):
// DenseNet on the V100 profile at low budgets, where they win, trained on the CPU backend within the
// budget give bitwise the losses, weights and optimizer state of training without a plan.
TEST(KeptSourcePlans, TrainBitwiseWithinTheBudget) {
  ModelConfig c;  // DenseNet-121's blocks of 6 to 24 layers, on CIFAR-sized images
  c.batch = 16;
  c.image = 32;
  c.train.optimizer = OptimizerKind::kAdam;
  c.train.lr = 1e-3f;
  const Graph g = build_model("densenet121", c).value();
  const CpuSized sized = cpu_sized(g);
  const CostModel cost(load_profile("v100-16gb-pcie3").value());
  Result<Outcome> reference = train(g, nullptr);
  ASSERT_TRUE(reference.ok()) << reference.status().message();
  PlanContext ctx{.graph = sized.graph, .cost = cost, .op_scratch_bytes = sized.scratch_bytes};
  Result<PlanReport> none = plan_policy("none", ctx);
  ASSERT_TRUE(none.ok()) << none.status().message();
  int kept = 0;
  for (double fraction : {0.2, 0.15}) {
    ctx.budget_bytes = static_cast<uint64_t>(fraction * static_cast<double>(none->device_bytes));
    SCOPED_TRACE(fmt::format("densenet121 (image 32, batch 16) at {}% ({} bytes)", 100 * fraction, ctx.budget_bytes));
    Result<PlanReport> plan = plan_policy("ferry", ctx);
    if (!plan.ok() && plan.status().code() == StatusCode::kOutOfMemory) continue;
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    if (plan->notes.find("(kept sources:") == std::string::npos) continue;
    ++kept;
    Result<Outcome> run = train(g, &plan->schedule, true, ctx.budget_bytes);
    ASSERT_TRUE(run.ok()) << run.status().message();
    expect_same_training(*run, *reference);
    EXPECT_LE(run->measured_peak, ctx.budget_bytes);
  }
  EXPECT_GE(kept, 1) << "no plan read kept sources: the case proves nothing";
}

// Lowering refuses host updates whose operands are not where the host can read them.
TEST(HostUpdateRules, LoweringRefusesWhatTheHostCannotRun) {
  const Graph g = model("gpt2-mini");
  const Schedule good = host_update_all(g, Tier::kHost);
  ASSERT_TRUE(lower_schedule(g, good).ok());
  OpId u = kNoOp;
  for (const Op& op : g.ops)
    if (op.type == OpType::kAdamUpdate && u == kNoOp) u = op.id;
  ASSERT_NE(u, kNoOp);
  const TensorId grad = g.op(u).inputs[1], w = g.op(u).inputs[0];
  auto message = [&](const Schedule& s) {
    Result<Program> p = lower_schedule(g, s);
    return p.ok() ? std::string("lowered") : p.status().message();
  };
  // The gradient still on the device.
  Schedule a = good;
  for (auto& list : a.after) std::erase_if(list, [&](const Action& x) { return x.kind == ActionKind::kRelease && x.tensor == grad; });
  EXPECT_NE(message(a).find("still on the device"), std::string::npos) << message(a);
  // The weight lives on the device (not offloaded).
  Schedule b = good;
  std::erase_if(b.offloaded, [&](const Offload& o) { return o.tensor == w; });
  for (auto* lists : {&b.before, &b.after})
    for (auto& list : *lists) std::erase_if(list, [&](const Action& x) { return x.tensor == w; });
  EXPECT_NE(message(b).find("offload"), std::string::npos) << message(b);
  // The updated weight brought back in the same iteration.
  Schedule c = good;
  c.after[u].push_back({ActionKind::kSwapIn, w, Tier::kHost});
  EXPECT_NE(message(c).find("host update has written it"), std::string::npos) << message(c);
  // A tensor no update reads as its gradient.
  Schedule d = good;
  d.before[u].push_back({ActionKind::kHostUpdate, w, Tier::kHost});
  EXPECT_NE(message(d).find("no optimizer update"), std::string::npos) << message(d);
  // The same update twice.
  Schedule e = good;
  e.before[u].push_back({ActionKind::kHostUpdate, grad, Tier::kHost});
  EXPECT_NE(message(e).find("already runs on the host"), std::string::npos) << message(e);
}

TEST(OffloadRules, LoweringRefusesSchedulesThatLoseStateOrStrandIt) {
  const Graph g = model("resnet-mini");
  TensorId w = kNoTensor;
  OpId user = kNoOp;
  for (const Op& op : g.ops)
    for (TensorId t : op.inputs)
      if (g.tensor(t).role == TensorRole::kWeight && w == kNoTensor) {
        w = t;
        user = op.id;
      }
  ASSERT_NE(w, kNoTensor);
  auto lower = [&](const Schedule& s) { return lower_schedule(g, s); };
  // A device-resident weight may not leave.
  Schedule a = Schedule::keep_all(g.ops.size());
  a.after[user].push_back({ActionKind::kSwapOut, w, Tier::kHost});
  a.after[user].push_back({ActionKind::kRelease, w, Tier::kHost});
  auto ra = lower(a);
  ASSERT_FALSE(ra.ok());
  EXPECT_NE(ra.status().message().find("only an offloaded persistent tensor may leave"), std::string::npos)
      << ra.status().message();
  // An offloaded weight read without a swap-in.
  Schedule b = offload_all(g, Tier::kHost);
  b.before[user].clear();
  auto rb = lower(b);
  ASSERT_FALSE(rb.ok());
  EXPECT_NE(rb.status().message().find("lives on host between iterations"), std::string::npos) << rb.status().message();
  // An updated weight released without a swap-out loses the update.
  Schedule c = offload_all(g, Tier::kHost);
  for (auto& list : c.after)
    list.erase(std::remove_if(list.begin(), list.end(),
                              [&](const Action& x) { return x.kind == ActionKind::kSwapOut && x.tensor == w; }),
               list.end());
  auto rc = lower(c);
  ASSERT_FALSE(rc.ok());
  EXPECT_NE(rc.status().message().find("is stale"), std::string::npos) << rc.status().message();
  // Offloading something that is not persistent.
  Schedule d = Schedule::keep_all(g.ops.size());
  d.offloaded.push_back({g.ops.front().outputs.front(), Tier::kHost});
  EXPECT_FALSE(lower(d).ok());
}

}  // namespace
// Updates interleaved with the backward pass (graph/update_order.h) train bitwise as at the end,
// without a plan and with ferry's plans for the interleaved graph (on a GPU profile, where they
// offload weights and state and run updates on the host) at half the interleaved graph's no-swap
// peak and at ferry's smallest budget, within each budget.
TEST(InterleavedUpdates, TrainBitwiseAsAtTheEndWithAndWithoutAPlan) {
  for (const char* name : {"resnet-mini", "gpt2-mini"}) {
    SCOPED_TRACE(name);
    const Graph g = model(name);
    Result<Graph> h = interleave_updates(g);
    ASSERT_TRUE(h.ok()) << h.status().message();
    ASSERT_EQ(update_order_of(*h), UpdateOrder::kInterleaved);
    Result<Outcome> reference = train(g, nullptr);
    ASSERT_TRUE(reference.ok()) << reference.status().message();
    Result<Outcome> plain = train(*h, nullptr);
    ASSERT_TRUE(plain.ok()) << plain.status().message();
    expect_same_training(*plain, *reference);
    const CpuSized sized = cpu_sized(*h);
    const CostModel cost(load_profile("a100-40gb-pcie4").value());
    PlanContext ctx{.graph = sized.graph, .cost = cost, .tier = Tier::kHost, .op_scratch_bytes = sized.scratch_bytes};
    Result<PlanReport> none = plan_policy("none", ctx);
    ASSERT_TRUE(none.ok()) << none.status().message();
    Result<uint64_t> min = find_min_budget("ferry", ctx);
    ASSERT_TRUE(min.ok()) << min.status().message();
    for (uint64_t budget : {none->device_bytes / 2, *min}) {
      SCOPED_TRACE(::testing::Message() << "budget " << budget);
      ctx.budget_bytes = budget;
      Result<PlanReport> plan = plan_policy("ferry", ctx);
      ASSERT_TRUE(plan.ok()) << plan.status().message();
      Result<Outcome> run = train(*h, &plan->schedule, false, budget);
      ASSERT_TRUE(run.ok()) << run.status().message();
      expect_same_training(*run, *reference);
      EXPECT_LE(run->measured_peak, budget);
      EXPECT_GT(run->swapped_in, 0u);
    }
  }
}

}  // namespace ferry
