// Shared planner machinery (see policy_common.h for the design).

#include "plan/policy_common.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <limits>
#include <optional>
#include <system_error>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "common/units.h"
#include "schedule/placement.h"
#include "schedule/position.h"

namespace ferry {

namespace {

// Program positions ordered as lowering orders them: before-list, op, after-list of each step.
using namespace program_position;

size_t tier_index(Tier t) { return t == Tier::kHost ? 0 : 1; }
constexpr std::array<Tier, 2> kTiers = {Tier::kHost, Tier::kSsd};

// complete_schedule's walk: lowering's state machine without deaths (those are decided once the
// schedule is complete, from its reads).
class Completion {
 public:
  Completion(const PlanFacts& f, const Schedule& intent) : f_(f), g_(f.g()), in_(intent) {}

  Result<Schedule> run() {
    const size_t n = g_.ops.size();
    out_ = Schedule::keep_all(n);
    out_.policy = in_.policy;
    out_.budget_bytes = in_.budget_bytes;
    out_.offloaded = in_.offloaded;
    on_.assign(g_.tensors.size(), false);
    born_.assign(g_.tensors.size(), false);
    copy_.assign(g_.tensors.size(), {false, false});
    offloaded_.assign(g_.tensors.size(), false);
    last_read_.assign(g_.tensors.size(), kNoOp);
    for (const Tensor& t : g_.tensors)
      if (t.persistent() || t.role == TensorRole::kInput) on_[idx(t.id)] = born_[idx(t.id)] = true;
    for (const Offload& o : in_.offloaded) {  // in their tier since the last iteration
      on_[idx(o.tensor)] = false;
      offloaded_[idx(o.tensor)] = true;
      copy_[idx(o.tensor)][tier_index(o.tier)] = true;
    }
    const bool has_intent = !in_.before.empty();
    host_op_.assign(n, false);
    if (has_intent)
      for (const auto* lists : {&in_.before, &in_.after})
        for (const auto& list : *lists)
          for (const Action& a : list) {
            if (a.kind != ActionKind::kHostUpdate) continue;
            if (updates_.empty()) updates_ = UpdateOps(g_);  // built only for schedules with host updates
            if (OpId u = updates_.of(a.tensor); u != kNoOp) host_op_[static_cast<size_t>(u)] = true;
          }
    for (OpId i = 0; i < static_cast<OpId>(n); ++i) {
      if (has_intent)
        for (const Action& a : in_.before[static_cast<size_t>(i)]) FERRY_RETURN_IF_ERROR(apply(i, a, out_.before[i]));
      if (host_op_[static_cast<size_t>(i)]) {  // runs on the host where its action stands
        if (has_intent)
          for (const Action& a : in_.after[static_cast<size_t>(i)]) FERRY_RETURN_IF_ERROR(apply(i, a, out_.after[i]));
        continue;
      }
      for (TensorId t : g_.op(i).inputs) {
        if (!on_[idx(t)]) FERRY_RETURN_IF_ERROR(fetch(i, t, out_.before[static_cast<size_t>(i)], 0));
        last_read_[idx(t)] = i;
      }
      for (TensorId t : g_.op(i).outputs) {
        on_[idx(t)] = born_[idx(t)] = true;
        copy_[idx(t)] = {false, false};  // a new value (or an update of a persistent tensor)
      }
      if (has_intent)
        for (const Action& a : in_.after[static_cast<size_t>(i)]) FERRY_RETURN_IF_ERROR(apply(i, a, out_.after[i]));
    }
    // An offloaded tensor still on the device that nothing wrote since its copy was made (one the
    // host updates only read, such as AMP's loss scale, which device ops read too) ends the
    // iteration in its tier: released after its last read.
    for (const Tensor& t : g_.tensors)
      if (t.persistent() && offloaded_[idx(t.id)] && on_[idx(t.id)] && (copy_[idx(t.id)][0] || copy_[idx(t.id)][1]) &&
          last_read_[idx(t.id)] != kNoOp)
        out_.after[static_cast<size_t>(last_read_[idx(t.id)])].push_back(release_action(t.id));
    drop_dead_actions();
    return std::move(out_);
  }

 private:
  static size_t idx(TensorId t) { return static_cast<size_t>(t); }
  const std::string& name(TensorId t) const { return g_.tensor(t).name; }

  Status bug(OpId step, const Action& a, const std::string& why) const {
    return Status::Internal(fmt::format("policy '{}' at step {} ('{}'): {} '{}': {}", in_.policy, step,
                                        g_.op(step).name, to_string(a.kind), name(a.tensor), why));
  }

  Status apply(OpId step, const Action& a, std::vector<Action>& list) {
    if (a.tensor < 0 || idx(a.tensor) >= g_.tensors.size())
      return Status::Internal(
          fmt::format("policy '{}' at step {}: tensor id {} out of range", in_.policy, step, a.tensor));
    const size_t t = idx(a.tensor);
    if (!born_[t]) return bug(step, a, "it does not exist yet");
    // An empty tensor holds no memory: moving or dropping it frees nothing and costs a transfer's
    // latency or a recompute, so it stays where it is (and plans like a graph without it).
    if (g_.tensor(a.tensor).bytes == 0 && a.kind != ActionKind::kHostUpdate) return Status::Ok();
    switch (a.kind) {
      case ActionKind::kSwapOut:
        if (copy_[t][tier_index(a.tier)]) return Status::Ok();  // the copy is still valid: nothing to move
        if (!on_[t]) return bug(step, a, "it is not on the device");
        copy_[t][tier_index(a.tier)] = true;
        list.push_back(a);
        return Status::Ok();
      case ActionKind::kRelease:
        if (!on_[t]) return Status::Ok();
        if ((g_.tensor(a.tensor).persistent() && !offloaded_[t]) || a.tensor == g_.loss)
          return bug(step, a, "it must stay on the device");
        if (g_.tensor(a.tensor).persistent() && !copy_[t][0] && !copy_[t][1])
          return bug(step, a, "an offloaded tensor released without a valid copy would lose its update");
        on_[t] = false;
        list.push_back(a);
        return Status::Ok();
      case ActionKind::kSwapIn: {
        if (on_[t]) return Status::Ok();
        Action in = a;
        if (!copy_[t][tier_index(a.tier)]) {
          if (!copy_[t][tier_index(a.tier == Tier::kHost ? Tier::kSsd : Tier::kHost)])
            return bug(step, a, "it has no copy to swap in from");
          in.tier = a.tier == Tier::kHost ? Tier::kSsd : Tier::kHost;
        }
        on_[t] = true;
        list.push_back(in);
        return Status::Ok();
      }
      case ActionKind::kRecompute:
        if (on_[t]) return Status::Ok();
        return recompute(step, a.tensor, list, 0);
      case ActionKind::kHostUpdate:
        return host_update(step, a, list);
    }
    return Status::Ok();
  }

  // The operands the update writes leave the device where they have a valid copy (a release is
  // free); one it only reads may stay (the host reads its copy). Anything else is the planner's bug.
  Status host_update(OpId step, const Action& a, std::vector<Action>& list) {
    const OpId u = updates_.of(a.tensor);
    if (u == kNoOp) return bug(step, a, "no optimizer update reads it as its gradient");
    if (!copy_[idx(a.tensor)][tier_index(a.tier)]) return bug(step, a, "the gradient has no copy in that tier");
    std::vector<TensorId> operands = g_.op(u).inputs;
    operands.insert(operands.end(), g_.op(u).outputs.begin(), g_.op(u).outputs.end());
    for (TensorId t : operands) {
      if (g_.tensor(t).persistent() && !offloaded_[idx(t)])
        return bug(step, a, fmt::format("'{}' of its update is not offloaded", name(t)));
      if (!on_[idx(t)] || g_.tensor(t).bytes == 0) continue;
      if (!copy_[idx(t)][0] && !copy_[idx(t)][1]) return bug(step, a, fmt::format("'{}' has no valid copy", name(t)));
      if (!g_.op(u).writes(t)) continue;
      list.push_back(release_action(t));
      on_[idx(t)] = false;
    }
    list.push_back(a);
    return Status::Ok();
  }

  // Brings t back for a read at `step`: from its copy when it has one, else by recomputation.
  Status fetch(OpId step, TensorId t, std::vector<Action>& list, int depth) {
    for (Tier tier : kTiers)
      if (copy_[idx(t)][tier_index(tier)]) {
        list.push_back(swap_in_action(t, tier));
        on_[idx(t)] = true;
        return Status::Ok();
      }
    return recompute(step, t, list, depth);
  }

  Status recompute(OpId step, TensorId t, std::vector<Action>& list, int depth) {
    const Action a = recompute_action(t);
    if (!f_.recomputable(t)) return bug(step, a, "it was released without a copy and cannot be recomputed");
    if (depth > static_cast<int>(g_.ops.size())) return bug(step, a, "recompute chain does not terminate");
    const Op& p = g_.op(f_.producer[idx(t)]);
    for (TensorId u : p.inputs) {
      if (!on_[idx(u)]) FERRY_RETURN_IF_ERROR(fetch(step, u, list, depth + 1));
      last_read_[idx(u)] = std::max(last_read_[idx(u)], step);
    }
    list.push_back(a);
    on_[idx(t)] = true;
    return Status::Ok();
  }

  // Deaths follow from the complete schedule's reads (as lowering decides them); an action at a
  // position after its tensor's death is removed. Removing a recompute removes reads, so repeat.
  void drop_dead_actions() {
    for (bool changed = true; changed;) {
      changed = false;
      const std::vector<Pos> death = deaths();
      for (OpId i = 0; i < static_cast<OpId>(g_.ops.size()); ++i)
        for (Part part : {kBefore, kAfter}) {
          std::vector<Action>& list = part == kBefore ? out_.before[i] : out_.after[i];
          size_t kept = 0;  // filtered in place, keeping the relative order
          for (size_t k = 0; k < list.size(); ++k) {
            // Deaths were computed with this pass's indices (k, not kept).
            if (pos(i, part, k) > death[idx(list[k].tensor)]) {
              changed = true;
              continue;
            }
            if (kept != k) list[kept] = list[k];
            ++kept;
          }
          list.resize(kept);
        }
    }
  }

  std::vector<Pos> deaths() const {
    std::vector<Pos> last(g_.tensors.size(), kNever);
    auto read = [&](TensorId t, Pos p) { last[idx(t)] = last[idx(t)] == kNever ? p : std::max(last[idx(t)], p); };
    std::vector<Pos> host_at(g_.ops.size(), kNever);  // a host update reads where its action stands
    for (OpId i = 0; i < static_cast<OpId>(g_.ops.size()); ++i)
      for (Part part : {kBefore, kAfter}) {
        const std::vector<Action>& list = part == kBefore ? out_.before[i] : out_.after[i];
        for (size_t k = 0; k < list.size(); ++k)
          if (list[k].kind == ActionKind::kHostUpdate)
            if (OpId u = updates_.of(list[k].tensor); u != kNoOp) host_at[static_cast<size_t>(u)] = pos(i, part, k);
      }
    for (OpId i = 0; i < static_cast<OpId>(g_.ops.size()); ++i) {
      const Pos at = host_at[static_cast<size_t>(i)] != kNever ? host_at[static_cast<size_t>(i)] : pos(i, kOp);
      for (TensorId t : g_.op(i).inputs) read(t, at);
      for (Part part : {kBefore, kAfter}) {
        const std::vector<Action>& list = part == kBefore ? out_.before[i] : out_.after[i];
        for (size_t k = 0; k < list.size(); ++k)
          if (list[k].kind == ActionKind::kRecompute)
            for (TensorId u : g_.op(f_.producer[idx(list[k].tensor)]).inputs) read(u, pos(i, part, k));
      }
    }
    std::vector<Pos> death(g_.tensors.size(), kNever);
    for (const Tensor& t : g_.tensors) {
      if (t.persistent() || t.id == g_.loss) continue;
      const OpId p = f_.producer[idx(t.id)];
      if (t.role != TensorRole::kInput && p == kNoOp) continue;
      const Pos birth = t.role == TensorRole::kInput ? pos(0, kOp) : pos(p, kOp);
      death[idx(t.id)] = last[idx(t.id)] == kNever ? birth : std::max(last[idx(t.id)], birth);
    }
    return death;
  }

  const PlanFacts& f_;
  const Graph& g_;
  const Schedule& in_;
  Schedule out_;
  std::vector<bool> on_, born_, offloaded_;
  UpdateOps updates_;  // weight gradient -> the update op reading it
  std::vector<OpId> last_read_;  // per tensor: the last device op that read it
  std::vector<bool> host_op_;  // per op: it runs on the host (a kHostUpdate action in the intent)
  std::vector<std::array<bool, 2>> copy_;
};

}  // namespace

double PlanFacts::transfer_us(const CostModel& cost, Direction d, Tier tier, TensorId t) const {
  const size_t i = static_cast<size_t>(t);
  const CodecId codec = i < ssd_codec.size() ? ssd_codec[i] : CodecId::kNone;
  if (codec == CodecId::kNone || tier != Tier::kSsd) return cost.transfer_us(d, tier, g().tensor(t).bytes);
  return cost.transfer_us(d, tier, g().tensor(t).bytes, codec, tensor_class[i]);
}

double PlanFacts::interference_us(const CostModel& cost, Direction d, Tier tier, TensorId t) const {
  const size_t i = static_cast<size_t>(t);
  const CodecId codec = i < ssd_codec.size() && tier == Tier::kSsd ? ssd_codec[i] : CodecId::kNone;
  if (codec == CodecId::kNone) return cost.interference_us(d, tier, g().tensor(t).bytes);
  return cost.interference_us(d, tier, g().tensor(t).bytes, codec, tensor_class[i]);
}

std::vector<CodecId> ssd_codec_choice(const PlanContext& ctx) {
  const Graph& g = ctx.graph;
  std::vector<CodecId> out(g.tensors.size(), CodecId::kNone);
  if (ctx.recompute_only) return out;
  if (ctx.ssd_codec) {
    std::fill(out.begin(), out.end(), *ctx.ssd_codec);
    return out;
  }
  if (!ctx.cost.has_codec_figures()) return out;
  const std::vector<std::string> classes = tensor_classes(g);
  for (const Tensor& t : g.tensors) out[static_cast<size_t>(t.id)] = ctx.cost.best_ssd_codec(t.bytes, classes[static_cast<size_t>(t.id)]);
  return out;
}

void attach_ssd_codecs(const std::vector<CodecId>& codecs, Schedule& s) {
  std::vector<bool> on_ssd(codecs.size(), false);
  for (const auto* lists : {&s.before, &s.after})
    for (const auto& v : *lists)
      for (const Action& a : v)
        if (a.kind == ActionKind::kSwapOut && a.tier == Tier::kSsd) on_ssd[static_cast<size_t>(a.tensor)] = true;
  for (const Offload& o : s.offloaded)
    if (o.tier == Tier::kSsd) on_ssd[static_cast<size_t>(o.tensor)] = true;
  s.ssd_codecs.clear();
  for (size_t t = 0; t < codecs.size(); ++t)
    if (on_ssd[t] && codecs[t] != CodecId::kNone) s.ssd_codecs.push_back({static_cast<TensorId>(t), codecs[t]});
}

uint64_t PlanFacts::aligned_bytes(TensorId t) const { return align_up(g().tensor(t).bytes, alignment); }

bool PlanFacts::saved(TensorId t) const {
  const Tensor& tensor = g().tensor(t);
  if (tensor.persistent() || t == g().loss) return false;
  const TensorInfo& i = info(t);
  return i.last_forward_use != kNoOp && i.first_backward_use != kNoOp;
}

bool PlanFacts::recomputable(TensorId t) const {
  const Tensor& tensor = g().tensor(t);
  if (!allow_recompute) return false;
  if (!framework_saved.empty() && !framework_saved[static_cast<size_t>(t)]) return false;
  if (tensor.persistent() || tensor.role == TensorRole::kInput || t == g().loss) return false;
  const OpId p = producer[static_cast<size_t>(t)];
  if (p != kNoOp && !replayable_ops.empty() && !replayable_ops[static_cast<size_t>(p)]) return false;
  return p != kNoOp && g().op(p).phase == Phase::kForward;
}

bool PlanFacts::gap_allowed(TensorId t, OpId from, OpId to, bool cyclic) const {
  if (framework_saved.empty()) return true;
  if (cyclic || !framework_saved[static_cast<size_t>(t)]) return false;
  return from < num_forward && to >= num_forward;
}

OpId PlanFacts::forward_end(TensorId t) const { return info(t).last_forward_use; }

namespace {

std::vector<OpId> find_host_updatable(const PlanContext& ctx, const PlanFacts& f) {
  std::vector<OpId> out;
  if (ctx.recompute_only || ctx.restricts_executor() || ctx.cost.profile().host_optimizer_bytes_per_s <= 0) return out;
  const Graph& g = f.g();
  std::vector<int> readers(g.tensors.size(), 0), writers(g.tensors.size(), 0);
  for (const Op& op : g.ops) {
    for (TensorId t : op.inputs) ++readers[static_cast<size_t>(t)];
    for (TensorId t : op.outputs) ++writers[static_cast<size_t>(t)];
  }
  for (const Op& op : g.ops) {
    if ((op.type != OpType::kSgdUpdate && op.type != OpType::kAdamUpdate) || op.inputs.size() < 2) continue;
    const TensorId grad = op.inputs[1];
    if (g.tensor(grad).persistent() || f.producer[static_cast<size_t>(grad)] == kNoOp ||
        readers[static_cast<size_t>(grad)] != 1)
      continue;
    bool ok = true;
    for (TensorId t : op.outputs) ok = ok && g.tensor(t).persistent() && writers[static_cast<size_t>(t)] == 1;
    if (ok) out.push_back(op.id);
  }
  return out;
}

}  // namespace

ProgramOptions program_options_of(const PlanContext& ctx) {
  return ProgramOptions{.op_scratch_bytes = ctx.op_scratch_bytes, .allow_inplace = ctx.allow_inplace};
}

Result<PlanFacts> make_plan_facts(const PlanContext& ctx) {
  const Graph& g = ctx.graph;
  if (g.ops.empty()) return Status::InvalidArgument(fmt::format("graph '{}' has no ops to plan", g.info.model));
  if (ctx.alignment == 0 || (ctx.alignment & (ctx.alignment - 1)) != 0)
    return Status::InvalidArgument(fmt::format("alignment {} is not a power of two", ctx.alignment));
  PlanFacts f;
  f.graph = &g;
  f.alignment = ctx.alignment;
  if (!ctx.framework_saved.empty() && ctx.framework_saved.size() != g.tensors.size())
    return Status::InvalidArgument(fmt::format("framework_saved has {} entries for a graph of {} tensors",
                                               ctx.framework_saved.size(), g.tensors.size()));
  if (!ctx.replayable_ops.empty() && ctx.replayable_ops.size() != g.ops.size())
    return Status::InvalidArgument(fmt::format("replayable_ops has {} entries for a graph of {} ops",
                                               ctx.replayable_ops.size(), g.ops.size()));
  f.framework_saved = ctx.framework_saved;
  f.allow_recompute = ctx.allow_recompute;
  f.replayable_ops = ctx.replayable_ops;
  f.program_options = program_options_of(ctx);
  AnalysisOptions ao;
  ao.op_scratch_bytes = ctx.op_scratch_bytes;
  ao.allow_inplace = ctx.allow_inplace;
  ao.alignment = ctx.alignment;
  Result<Analysis> a = analyze(g, ao);
  if (!a.ok()) return a.status().with_context("plan");
  f.analysis = std::move(a).value();
  f.producer.assign(g.tensors.size(), kNoOp);
  for (const Op& op : g.ops)
    for (TensorId t : op.outputs)
      if (!g.tensor(t).persistent()) f.producer[static_cast<size_t>(t)] = op.id;
  f.op_us = ctx.cost.op_times_us(g);
  for (const Op& op : g.ops) {
    const double us = f.op_us[static_cast<size_t>(op.id)];
    if (!std::isfinite(us) || us < 0)
      return Status::InvalidArgument(
          fmt::format("op '{}' (step {}) has time {} us; op times must be finite and >= 0", op.name, op.id, us));
  }
  while (f.num_forward < static_cast<OpId>(g.ops.size()) && g.op(f.num_forward).phase == Phase::kForward) ++f.num_forward;
  for (OpId i = f.num_forward; i < static_cast<OpId>(g.ops.size()); ++i)
    if (g.op(i).phase == Phase::kForward) f.single_pass = false;
  Schedule keep = Schedule::keep_all(g.ops.size());
  keep.policy = "none";
  FERRY_ASSIGN_OR_RETURN(PlanMeasure m, measure_schedule(f, keep));
  f.none_device_bytes = m.device_bytes;
  f.host_updatable = find_host_updatable(ctx, f);
  f.ssd_codec = ssd_codec_choice(ctx);
  if (std::any_of(f.ssd_codec.begin(), f.ssd_codec.end(), [](CodecId c) { return c != CodecId::kNone; }))
    f.tensor_class = tensor_classes(g);
  return f;
}

std::vector<uint64_t> live_bytes_per_step(const PlanFacts& facts, const Program& program) {
  const Graph& g = facts.g();
  const size_t n = program.num_steps;
  // Difference array over steps; open[t] is the step t's current block opened at (and its size).
  std::vector<int64_t> delta(n + 1, 0);
  std::vector<std::pair<OpId, uint64_t>> open(g.tensors.size(), {kNoOp, 0});
  std::pair<OpId, uint64_t> scratch{kNoOp, 0};
  uint64_t persistent = 0;
  const std::vector<bool> resident = program.device_resident(g);
  auto close = [&](std::pair<OpId, uint64_t>& block, OpId last) {
    if (block.first == kNoOp) return;
    delta[static_cast<size_t>(block.first)] += static_cast<int64_t>(block.second);
    delta[static_cast<size_t>(last) + 1] -= static_cast<int64_t>(block.second);
    block = {kNoOp, 0};
  };
  for (const Instruction& in : program.instructions) {
    switch (in.kind) {
      case InstrKind::kAlloc:
        if (resident[static_cast<size_t>(in.tensor)]) {
          persistent += align_up(in.bytes, facts.alignment);
        } else if (in.inherit != kNoTensor) {
          open[static_cast<size_t>(in.tensor)] = open[static_cast<size_t>(in.inherit)];
          open[static_cast<size_t>(in.inherit)] = {kNoOp, 0};
        } else {
          open[static_cast<size_t>(in.tensor)] = {in.step, align_up(in.bytes, facts.alignment)};
        }
        break;
      case InstrKind::kAllocScratch: scratch = {in.step, align_up(in.bytes, facts.alignment)}; break;
      case InstrKind::kFreeScratch: close(scratch, in.step); break;
      case InstrKind::kFree:
      case InstrKind::kRelease:
        if (!resident[static_cast<size_t>(in.tensor)]) close(open[static_cast<size_t>(in.tensor)], in.step);
        break;
      default: break;
    }
  }
  const OpId last = n == 0 ? 0 : static_cast<OpId>(n - 1);
  for (auto& block : open) close(block, last);
  std::vector<uint64_t> live(n, 0);
  int64_t running = 0;
  for (size_t s = 0; s < n; ++s) {
    running += delta[s];
    live[s] = persistent + static_cast<uint64_t>(running);
  }
  return live;
}

namespace {

// m.live_peak_bytes and m.peak_step (the first step at the peak) from m.live_bytes.
void set_live_peak(PlanMeasure& m) {
  m.live_peak_bytes = 0;
  m.peak_step = 0;
  for (size_t i = 0; i < m.live_bytes.size(); ++i)
    if (m.live_bytes[i] > m.live_peak_bytes) {
      m.live_peak_bytes = m.live_bytes[i];
      m.peak_step = static_cast<OpId>(i);
    }
}

}  // namespace

Result<Program> lower_for_planning(const PlanFacts& facts, const Schedule& s) {
  Result<Program> program = lower_schedule_for_valid_graph(facts.g(), s, facts.program_options);
  if (!program.ok()) return Status::Internal(program.status().message());
  return program;
}

Result<PlanMeasure> measure_schedule(const PlanFacts& facts, const Schedule& s, bool place, uint64_t good_enough_bytes,
                                     bool refine) {
  FERRY_ASSIGN_OR_RETURN(Program program, lower_for_planning(facts, s));
  return measure_program(facts, s, program, place, good_enough_bytes, refine);
}

Result<PlanMeasure> measure_program(const PlanFacts& facts, const Schedule& s, const Program& program, bool place,
                                    uint64_t good_enough_bytes, bool refine) {
  PlanMeasure m;
  m.live_bytes = live_bytes_per_step(facts, program);
  set_live_peak(m);
  if (place) {
    FERRY_ASSIGN_OR_RETURN(ProgramPlacement placement,
                           place_program(facts.g(), program, facts.alignment, good_enough_bytes, refine));
    m.device_bytes = placement.arena_bytes;
    m.placement = std::move(placement.plan.how);
  } else {
    m.device_bytes = m.live_peak_bytes;
  }
  m.swapped_tensors = s.distinct_tensors(ActionKind::kSwapOut);
  m.recomputed_tensors = s.distinct_tensors(ActionKind::kRecompute);
  return m;
}

void subtract_away(const PlanFacts& facts, PlanMeasure& m, TensorId t, OpId first, OpId last) {
  const uint64_t bytes = facts.aligned_bytes(t);
  for (OpId s = std::max<OpId>(first, 0); s <= last && static_cast<size_t>(s) < m.live_bytes.size(); ++s)
    m.live_bytes[static_cast<size_t>(s)] -= bytes;
  set_live_peak(m);
  m.device_bytes = m.live_peak_bytes;
}

Result<Schedule> complete_schedule(const PlanFacts& facts, Schedule intent) {
  const size_t n = facts.g().ops.size();
  if (!intent.before.empty() && (intent.before.size() != n || intent.after.size() != n))
    return Status::Internal(fmt::format("policy '{}' built a schedule for {} steps, graph has {}", intent.policy,
                                        intent.before.size(), n));
  return Completion(facts, intent).run();
}

size_t close_recompute_sources(const PlanFacts& facts, std::vector<bool>& dropped,
                               const std::function<bool(TensorId, TensorId)>& kept) {
  const Graph& g = facts.g();
  std::vector<TensorId> work;
  for (const Tensor& t : g.tensors)
    if (dropped[static_cast<size_t>(t.id)]) work.push_back(t.id);
  size_t added = 0;
  while (!work.empty()) {
    const TensorId t = work.back();
    work.pop_back();
    const OpId p = facts.producer[static_cast<size_t>(t)];
    if (p == kNoOp) continue;
    for (TensorId u : g.op(p).inputs) {
      if (dropped[static_cast<size_t>(u)] || !facts.recomputable(u)) continue;
      if (facts.info(u).first_backward_use != kNoOp) continue;  // saved: alive in backward anyway
      if (kept && kept(u, t)) continue;
      dropped[static_cast<size_t>(u)] = true;
      ++added;
      work.push_back(u);
    }
  }
  return added;
}

Result<SimResult> simulate_for_planning(const PlanContext& ctx, const PlanFacts& facts, const Schedule& schedule,
                                        const Program* lowered) {
  Schedule coded;  // predicted with the codecs plan_policy gives the plan (attach_ssd_codecs)
  const bool attach = schedule.ssd_codecs.empty() && !facts.tensor_class.empty();
  if (attach) {
    coded = schedule;
    attach_ssd_codecs(facts.ssd_codec, coded);
  }
  const bool lower_here = attach || lowered == nullptr;
  Program own;
  if (lower_here) {
    FERRY_ASSIGN_OR_RETURN(own, lower_schedule_for_valid_graph(facts.g(), attach ? coded : schedule, facts.program_options));
  }
  const Program& program = lower_here ? own : *lowered;
  SimOptions so;
  so.budget_bytes = 0;  // memory is judged by measure_schedule(); time does not depend on the budget
  so.op_scratch_bytes = facts.program_options.op_scratch_bytes;
  so.allow_inplace = facts.program_options.allow_inplace;
  so.alignment = facts.alignment;
  so.record_timeline = false;
  so.record_waits = true;
  so.timing_only = true;  // memory is not its question (and the program's budget is not read)
  return simulate_program(ctx.graph, program, ctx.cost, so);
}

Schedule empty_schedule(const PlanContext& ctx, std::string_view policy) {
  Schedule s = Schedule::keep_all(ctx.graph.ops.size());
  s.policy = std::string(policy);
  s.budget_bytes = ctx.budget_bytes;
  return s;
}

uint64_t min_budget_lower_bound(const PlanContext& ctx, const PlanFacts& facts, bool persistent_may_leave) {
  // No plan beats the persistent region plus what one op reads at once (or, when persistent
  // tensors may leave, what one op needs at once).
  // An update that may run on the host needs no device memory at all.
  std::vector<bool> on_host(ctx.graph.ops.size(), false);
  if (persistent_may_leave)
    for (OpId u : facts.host_updatable) on_host[static_cast<size_t>(u)] = true;
  uint64_t step_inputs = 0;
  for (const Op& op : ctx.graph.ops) {
    if (on_host[static_cast<size_t>(op.id)]) continue;
    uint64_t sum = 0;
    for (TensorId t : facts.analysis.step_inputs[static_cast<size_t>(op.id)])
      if (persistent_may_leave || !ctx.graph.tensor(t).persistent()) sum += facts.aligned_bytes(t);
    step_inputs = std::max(step_inputs, sum);
  }
  return (persistent_may_leave ? 0 : facts.analysis.persistent_region_bytes) + step_inputs;
}

uint64_t min_budget_scan_step(const PlanContext& ctx, const PlanFacts& facts) {
  return align_up(std::max<uint64_t>(facts.none_device_bytes / 100, 1), ctx.alignment);
}

Result<uint64_t> bisect_min_budget(const PlanContext& ctx, const PlanFacts& facts,
                                   const std::function<Result<bool>(uint64_t)>& fits, bool persistent_may_leave) {
  uint64_t lo = min_budget_lower_bound(ctx, facts, persistent_may_leave);  // infeasible, or unknown
  uint64_t hi = facts.none_device_bytes;             // feasible once checked
  for (int grow = 0;; ++grow) {
    FERRY_ASSIGN_OR_RETURN(bool ok, fits(hi));
    if (ok) break;
    if (grow == 4)
      return Status::Internal(fmt::format("the plan does not fit even in {} ({} bytes)", format_bytes(hi), hi));
    hi += hi / 4;
  }
  lo = std::min(lo, hi);
  const uint64_t tolerance = std::max(ctx.alignment, facts.none_device_bytes / 200);
  while (hi - lo > tolerance) {
    const uint64_t mid = align_up(lo + (hi - lo) / 2, ctx.alignment);
    if (mid >= hi) break;
    FERRY_ASSIGN_OR_RETURN(bool ok, fits(mid));
    (ok ? hi : lo) = mid;
  }
  return hi;
}

Result<uint64_t> lowest_fit_below(const PlanContext& ctx, const PlanFacts& facts,
                                  const std::function<Result<bool>(uint64_t)>& fits, uint64_t found,
                                  bool persistent_may_leave, int workers) {
  const uint64_t step = min_budget_scan_step(ctx, facts);
  const uint64_t floor = min_budget_lower_bound(ctx, facts, persistent_may_leave);
  std::vector<uint64_t> grid;  // the budgets probed, from the top down
  for (uint64_t budget = found; budget >= floor + step && budget >= step;) {
    budget -= step;
    grid.push_back(budget);
  }
  std::vector<std::optional<Result<bool>>> answers(grid.size());
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  auto probe = [&] {
    // Every probe below a failed one is moot: its error is the answer (the one of the highest
    // budget that failed, found below, whichever thread saw it first).
    for (size_t k = next++; k < grid.size() && !failed; k = next++) {
      answers[k].emplace(fits(grid[k]));
      if (!answers[k]->ok()) failed = true;
    }
  };
  const size_t threads = std::min<size_t>(static_cast<size_t>(std::max(workers, 1)), grid.size());
  std::vector<std::thread> others;
  for (size_t w = 1; w < threads; ++w) {
    try {
      others.emplace_back(probe);
    } catch (const std::system_error&) {
      break;  // no thread to be had (a process limit): the threads there are share the probes
    }
  }
  probe();
  for (std::thread& t : others) t.join();
  uint64_t lowest = found;
  for (size_t k = 0; k < grid.size(); ++k) {
    if (!answers[k]) continue;  // after a failure above it
    FERRY_ASSIGN_OR_RETURN(bool ok, std::move(*answers[k]));
    if (ok) lowest = grid[k];
  }
  return lowest;
}

// --tier none: a policy's swaps become recomputations where the tensor can be recomputed (the
// completion recomputes on demand what was released without a copy); a tensor that cannot be is
// kept instead. The same intent, restricted to recomputation.
Schedule recompute_only(const PlanFacts& facts, Schedule intent) {
  for (auto* lists : {&intent.before, &intent.after})
    for (std::vector<Action>& list : *lists) {
      std::vector<Action> kept;
      for (const Action& a : list) {
        if (a.kind == ActionKind::kSwapOut || a.kind == ActionKind::kSwapIn) continue;
        if (a.kind == ActionKind::kRelease && !facts.recomputable(a.tensor)) continue;
        kept.push_back(a);
      }
      list = std::move(kept);
    }
  intent.offloaded.clear();
  return intent;
}

Result<PlanAttempt> finish_attempt(const PlanContext& ctx, const PlanFacts& facts, Schedule intent) {
  if (ctx.recompute_only) intent = recompute_only(facts, std::move(intent));
  PlanAttempt a;
  FERRY_ASSIGN_OR_RETURN(a.schedule, complete_schedule(facts, std::move(intent)));
  FERRY_ASSIGN_OR_RETURN(a.measure, measure_schedule(facts, a.schedule));
  a.fits = ctx.budget_bytes == 0 || a.measure.device_bytes <= ctx.budget_bytes;
  return a;
}

}  // namespace ferry
