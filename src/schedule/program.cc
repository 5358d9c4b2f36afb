// Lowering a Schedule to a Program (the rules are in program.h).
//
// Design
// - Two passes, both O(ops + op inputs + actions). Pass 1 finds every tensor's last read in
//   program order: positions are (step, part, index) with part = before < op < after, packed in
//   one integer so they compare in program order. Pass 2 walks the program once, keeping a small
//   state machine per tensor (unborn -> on device <-> off device -> dead, plus which tiers hold a
//   valid copy), checks every action against it and emits instructions.
// - Deaths are decided from pass 1 alone, so where a tensor is freed never depends on timing or
//   on the order the interpreters happen to process things in.

#include "schedule/program.h"

#include <algorithm>
#include <array>
#include <limits>
#include <unordered_map>

#include <fmt/format.h>

#include "common/units.h"
#include "schedule/position.h"

namespace ferry {

namespace {

using namespace program_position;

enum class State : uint8_t { kUnborn, kOnDevice, kOffDevice, kDead };

struct TensorState {
  State state = State::kUnborn;
  std::array<bool, 2> copy{false, false};  // valid copy per tier (kHost, kSsd)
  OpId released_at = kNoOp;                // last step that released it, for messages
};

size_t tier_index(Tier t) { return t == Tier::kHost ? 0 : 1; }

class Lowering {
 public:
  Lowering(const Graph& g, const Schedule& s, const ProgramOptions& o) : g_(g), s_(s), o_(o) {}

  Result<Program> run() {
    FERRY_RETURN_IF_ERROR(check_shapes());
    FERRY_RETURN_IF_ERROR(find_host_updates());
    find_producers();
    FERRY_RETURN_IF_ERROR(find_last_reads());
    FERRY_RETURN_IF_ERROR(emit());
    return std::move(p_);
  }

 private:
  size_t num_ops() const { return g_.ops.size(); }
  bool keep_all() const { return s_.before.empty() && s_.after.empty(); }
  const std::vector<Action>& actions(OpId step, Part part) const {
    static const std::vector<Action> kNone;
    if (keep_all()) return kNone;
    return part == kBefore ? s_.before[static_cast<size_t>(step)] : s_.after[static_cast<size_t>(step)];
  }
  uint64_t scratch(OpId op) const {
    return o_.op_scratch_bytes.empty() ? 0 : o_.op_scratch_bytes[static_cast<size_t>(op)];
  }
  const std::string& tname(TensorId t) const { return g_.tensor(t).name; }

  // "before step 4 ('conv2'), action 1 (swap_in 'conv1.out')"
  std::string where(OpId step, Part part, size_t index, const Action& a) const {
    return fmt::format("schedule '{}' {} step {} ('{}'), action {} ({} '{}')", s_.policy,
                       part == kBefore ? "before" : "after", step, g_.op(step).name, index, to_string(a.kind),
                       tname(a.tensor));
  }
  Status error(OpId step, Part part, size_t index, const Action& a, const std::string& why) const {
    return Status::InvalidArgument(fmt::format("{}: {}", where(step, part, index, a), why));
  }

  Status check_shapes() {
    if (!keep_all() && (s_.before.size() != num_ops() || s_.after.size() != num_ops()))
      return Status::InvalidArgument(fmt::format(
          "schedule '{}' has {} before-lists and {} after-lists but graph '{}' has {} ops", s_.policy,
          s_.before.size(), s_.after.size(), g_.info.model, num_ops()));
    if (!o_.op_scratch_bytes.empty() && o_.op_scratch_bytes.size() != num_ops())
      return Status::InvalidArgument(fmt::format("op_scratch_bytes has {} entries but graph '{}' has {} ops",
                                                 o_.op_scratch_bytes.size(), g_.info.model, num_ops()));
    for (OpId i = 0; i < static_cast<OpId>(num_ops()); ++i)
      for (Part part : {kBefore, kAfter}) {
        const std::vector<Action>& list = actions(i, part);
        if (list.size() >= (size_t{1} << 30))
          return Status::InvalidArgument(fmt::format("schedule '{}': step {} has {} actions", s_.policy, i, list.size()));
        for (size_t k = 0; k < list.size(); ++k) {
          const Action& a = list[k];
          if (a.tensor < 0 || static_cast<size_t>(a.tensor) >= g_.tensors.size())
            return Status::InvalidArgument(fmt::format(
                "schedule '{}' {} step {} ('{}'), action {} ({}): tensor id {} is not in [0, {})", s_.policy,
                part == kBefore ? "before" : "after", i, g_.op(i).name, k, to_string(a.kind), a.tensor,
                g_.tensors.size()));
        }
      }
    return Status::Ok();
  }

  // Which update ops run on the host, and where (kHostUpdate actions).
  Status find_host_updates() {
    host_at_.assign(num_ops(), kNever);
    bool any = false;
    for (OpId i = 0; i < static_cast<OpId>(num_ops()) && !any; ++i)
      for (Part part : {kBefore, kAfter})
        for (const Action& a : actions(i, part)) any = any || a.kind == ActionKind::kHostUpdate;
    if (!any) return Status::Ok();
    updates_ = UpdateOps(g_);
    for (OpId i = 0; i < static_cast<OpId>(num_ops()); ++i)
      for (Part part : {kBefore, kAfter}) {
        const std::vector<Action>& list = actions(i, part);
        for (size_t k = 0; k < list.size(); ++k) {
          const Action& a = list[k];
          if (a.kind != ActionKind::kHostUpdate) continue;
          const OpId u = updates_.of(a.tensor);
          if (u == kNoOp || g_.tensor(a.tensor).persistent())
            return error(i, part, k, a, "no optimizer update (sgd_update, adam_update) reads it as its gradient");
          if (host_at_[static_cast<size_t>(u)] != kNever)
            return error(i, part, k, a, fmt::format("update '{}' already runs on the host", g_.op(u).name));
          host_at_[static_cast<size_t>(u)] = pos(i, part, k);
        }
      }
    return Status::Ok();
  }

  void find_producers() {
    producer_.assign(g_.tensors.size(), kNoOp);
    for (const Op& op : g_.ops)
      for (TensorId t : op.outputs)
        if (!g_.tensor(t).persistent()) producer_[static_cast<size_t>(t)] = op.id;
  }

  // Pass 1: last read of every tensor, then its death position.
  Status find_last_reads() {
    last_read_.assign(g_.tensors.size(), kNever);
    auto read = [&](TensorId t, Pos p) {
      Pos& r = last_read_[static_cast<size_t>(t)];
      r = r == kNever ? p : std::max(r, p);
    };
    for (OpId i = 0; i < static_cast<OpId>(num_ops()); ++i) {
      for (Part part : {kBefore, kOp, kAfter}) {
        if (part == kOp) {
          // A host update reads its operands where its action stands.
          const Pos at = host_at_[static_cast<size_t>(i)] != kNever ? host_at_[static_cast<size_t>(i)] : pos(i, kOp);
          for (TensorId t : g_.op(i).inputs) read(t, at);
          continue;
        }
        const std::vector<Action>& list = actions(i, part);
        for (size_t k = 0; k < list.size(); ++k) {
          const Action& a = list[k];
          if (a.kind != ActionKind::kRecompute) continue;
          const Tensor& t = g_.tensor(a.tensor);
          const OpId p = producer_[static_cast<size_t>(a.tensor)];
          if (t.persistent()) return error(i, part, k, a, "persistent tensors cannot be recomputed");
          if (t.role == TensorRole::kInput) return error(i, part, k, a, "data inputs cannot be recomputed");
          if (p == kNoOp) return error(i, part, k, a, "no op produces it");
          for (TensorId in : g_.op(p).inputs) read(in, pos(i, part, k));
        }
      }
    }
    death_.assign(g_.tensors.size(), kNever);
    released_.assign(num_ops(), {});
    for (const Tensor& t : g_.tensors) {
      if (t.persistent() || t.id == g_.loss) continue;
      const OpId p = producer_[static_cast<size_t>(t.id)];
      if (t.role != TensorRole::kInput && p == kNoOp) continue;  // never exists
      const Pos birth = t.role == TensorRole::kInput ? pos(0, kOp) : pos(p, kOp);
      const Pos last = last_read_[static_cast<size_t>(t.id)];
      Pos& death = death_[static_cast<size_t>(t.id)];
      death = last == kNever ? birth : std::max(last, birth);
      if (t.free_after != kNoOp) {  // the framework's release point (graph.h)
        death = std::max(death, pos(t.free_after, kOp));
        released_[static_cast<size_t>(t.free_after)].push_back(t.id);
      }
    }
    return Status::Ok();
  }

  void push(Instruction in) { p_.instructions.push_back(in); }
  void push_alloc(OpId step, TensorId t, bool recompute, TensorId inherit = kNoTensor) {
    push({.kind = InstrKind::kAlloc, .recompute = recompute, .step = step, .tensor = t, .inherit = inherit,
          .bytes = g_.tensor(t).bytes});
  }
  void push_tensor(InstrKind kind, OpId step, TensorId t, bool recompute = false, Tier tier = Tier::kHost) {
    push({.kind = kind, .tier = tier, .recompute = recompute, .step = step, .tensor = t, .bytes = g_.tensor(t).bytes});
  }

  // t dies now: free its block and forget its copies.
  void kill(OpId step, TensorId t) {
    TensorState& ts = st_[static_cast<size_t>(t)];
    FERRY_CHECK(ts.state == State::kOnDevice, "tensor '{}' dies off the device at step {}", tname(t), step);
    push_tensor(InstrKind::kFree, step, t);
    ts.state = State::kDead;
    ts.copy = {false, false};
  }

  // Why `t` is not on the device, for messages.
  std::string absence(TensorId t) const {
    const TensorState& ts = st_[static_cast<size_t>(t)];
    switch (ts.state) {
      case State::kUnborn:
        return producer_[static_cast<size_t>(t)] == kNoOp
                   ? "it is never produced"
                   : fmt::format("it is not produced until step {}", producer_[static_cast<size_t>(t)]);
      case State::kOffDevice:
        if (ts.released_at == kNoOp)
          return fmt::format("it lives on {} between iterations and was not swapped in", to_string(home_tier(t)));
        return fmt::format("it was released at step {} and not brought back (swap_in or recompute)", ts.released_at);
      case State::kDead:
        return fmt::format("it is dead: its last use was step {}", pos_step(death_[static_cast<size_t>(t)]));
      case State::kOnDevice: break;
    }
    return "it is on the device";
  }

  Status emit_prologue() {
    home_.assign(g_.tensors.size(), -1);
    for (const Offload& o : s_.offloaded) {
      if (o.tensor < 0 || static_cast<size_t>(o.tensor) >= g_.tensors.size())
        return Status::InvalidArgument(
            fmt::format("schedule '{}' offloads tensor id {}, not in [0, {})", s_.policy, o.tensor, g_.tensors.size()));
      if (!g_.tensor(o.tensor).persistent())
        return Status::InvalidArgument(fmt::format("schedule '{}' offloads '{}', which is not persistent (only "
                                                   "weights and optimizer state have a home between iterations)",
                                                   s_.policy, tname(o.tensor)));
      if (home_[static_cast<size_t>(o.tensor)] >= 0)
        return Status::InvalidArgument(fmt::format("schedule '{}' offloads '{}' twice", s_.policy, tname(o.tensor)));
      home_[static_cast<size_t>(o.tensor)] = static_cast<int8_t>(tier_index(o.tier));
    }
    std::vector<bool> coded(g_.tensors.size(), false);
    for (const TensorCodec& c : s_.ssd_codecs) {
      if (c.tensor < 0 || static_cast<size_t>(c.tensor) >= g_.tensors.size())
        return Status::InvalidArgument(fmt::format("schedule '{}' gives a codec to tensor id {}, not in [0, {})",
                                                   s_.policy, c.tensor, g_.tensors.size()));
      if (c.codec == CodecId::kNone || is_lossy(c.codec))
        return Status::InvalidArgument(fmt::format("schedule '{}' codes '{}' with '{}': a plan's SSD codec must be a "
                                                   "lossless codec other than none",
                                                   s_.policy, tname(c.tensor), to_string(c.codec)));
      if (coded[static_cast<size_t>(c.tensor)])
        return Status::InvalidArgument(fmt::format("schedule '{}' gives '{}' two codecs", s_.policy, tname(c.tensor)));
      coded[static_cast<size_t>(c.tensor)] = true;
    }
    p_.ssd_codecs = s_.ssd_codecs;
    p_.placement_hint = s_.placement_hint;
    for (const Tensor& t : g_.tensors) {
      if (!t.persistent()) continue;
      TensorState& ts = st_[static_cast<size_t>(t.id)];
      if (home_[static_cast<size_t>(t.id)] >= 0) {
        ts.state = State::kOffDevice;  // in its tier since the last iteration
        ts.copy[static_cast<size_t>(home_[static_cast<size_t>(t.id)])] = true;
        continue;
      }
      push_alloc(0, t.id, false);
      ts.state = State::kOnDevice;
      p_.persistent_bytes += t.bytes;
    }
    for (const Tensor& t : g_.tensors)
      if (t.role == TensorRole::kInput) {
        push_alloc(0, t.id, false);
        st_[static_cast<size_t>(t.id)].state = State::kOnDevice;
      }
    return Status::Ok();
  }

  // Per output of `op`: the input whose block it takes over (in-place), or kNoTensor.
  std::vector<TensorId> in_place(const Op& op) const {
    if (!o_.allow_inplace) return std::vector<TensorId>(op.outputs.size(), kNoTensor);
    std::vector<TensorId> sources = g_.in_place_sources(op);
    for (TensorId& in : sources)
      if (in != kNoTensor && death_[static_cast<size_t>(in)] != pos(op.id, kOp)) in = kNoTensor;
    return sources;
  }

  Status emit_op(const Op& op) {
    const OpId i = op.id;
    if (host_at_[static_cast<size_t>(i)] != kNever) {  // ran on the host (kHostRun): nothing here
      for (TensorId t : released_[static_cast<size_t>(i)])
        if (death_[static_cast<size_t>(t)] == pos(i, kOp) && st_[static_cast<size_t>(t)].state == State::kOnDevice)
          kill(i, t);
      return Status::Ok();
    }
    for (TensorId t : op.inputs)
      if (st_[static_cast<size_t>(t)].state != State::kOnDevice)
        return Status::InvalidArgument(fmt::format("schedule '{}': op '{}' (step {}) reads '{}' but {}", s_.policy,
                                                   op.name, i, tname(t), absence(t)));
    const std::vector<TensorId> inherit = in_place(op);
    for (size_t k = 0; k < op.outputs.size(); ++k) {
      const TensorId t = op.outputs[k];
      TensorState& ts = st_[static_cast<size_t>(t)];
      if (g_.tensor(t).persistent()) {
        if (ts.state != State::kOnDevice)
          return Status::InvalidArgument(fmt::format("schedule '{}': op '{}' (step {}) updates '{}' but {}",
                                                     s_.policy, op.name, i, tname(t), absence(t)));
        ts.copy = {false, false};  // the update makes every copy stale
        continue;
      }
      FERRY_CHECK(ts.state == State::kUnborn, "tensor '{}' produced twice", tname(t));
      if (inherit[k] != kNoTensor) {
        const TensorId in = inherit[k];
        push_alloc(i, t, false, in);
        st_[static_cast<size_t>(in)].state = State::kDead;
        st_[static_cast<size_t>(in)].copy = {false, false};
      } else {
        push_alloc(i, t, false);
      }
      ts.state = State::kOnDevice;
    }
    if (scratch(i) > 0) push({.kind = InstrKind::kAllocScratch, .step = i, .op = i, .bytes = scratch(i)});
    push({.kind = InstrKind::kRun, .step = i, .op = i});
    if (scratch(i) > 0) push({.kind = InstrKind::kFreeScratch, .step = i, .op = i, .bytes = scratch(i)});
    // Deaths at this op: inputs in input order, then outputs, then (step 0) unread data inputs,
    // then tensors released here (free_after) in id order.
    auto dies_here = [&](TensorId t) {
      return death_[static_cast<size_t>(t)] == pos(i, kOp) && st_[static_cast<size_t>(t)].state == State::kOnDevice;
    };
    for (TensorId t : op.inputs)
      if (dies_here(t)) kill(i, t);
    for (TensorId t : op.outputs)
      if (dies_here(t)) kill(i, t);
    if (i == 0)
      for (const Tensor& t : g_.tensors)
        if (t.role == TensorRole::kInput && dies_here(t.id)) kill(i, t.id);
    for (TensorId t : released_[static_cast<size_t>(i)])
      if (dies_here(t)) kill(i, t);
    return Status::Ok();
  }

  Status emit_action(OpId i, Part part, size_t k, const Action& a) {
    const TensorId t = a.tensor;
    TensorState& ts = st_[static_cast<size_t>(t)];
    if (ts.state == State::kDead) return error(i, part, k, a, absence(t));
    switch (a.kind) {
      case ActionKind::kSwapOut:
        if (ts.state != State::kOnDevice) return error(i, part, k, a, "it is not on the device: " + absence(t));
        if (ts.copy[tier_index(a.tier)])
          return error(i, part, k, a, fmt::format("it already has a valid copy on {}", to_string(a.tier)));
        push_tensor(InstrKind::kSwapOut, i, t, false, a.tier);
        ts.copy[tier_index(a.tier)] = true;
        return Status::Ok();
      case ActionKind::kRelease:
        if (ts.state != State::kOnDevice) return error(i, part, k, a, "it is not on the device: " + absence(t));
        if (g_.tensor(t).persistent() && home_[static_cast<size_t>(t)] < 0)
          return error(i, part, k, a, "it is persistent and lives on the device between iterations; only an offloaded "
                                      "persistent tensor may leave the device (Schedule::offloaded)");
        if (g_.tensor(t).persistent() && !ts.copy[static_cast<size_t>(home_[static_cast<size_t>(t)])])
          return error(i, part, k, a,
                       fmt::format("its copy on {} is stale (an update wrote it): swap it out before releasing it",
                                   to_string(home_tier(t))));
        push_tensor(InstrKind::kRelease, i, t);
        ts.state = State::kOffDevice;
        ts.released_at = i;
        return Status::Ok();
      case ActionKind::kSwapIn:
        if (ts.state != State::kOffDevice)
          return error(i, part, k, a, ts.state == State::kOnDevice ? "it is already on the device" : absence(t));
        if (host_written_[static_cast<size_t>(t)])
          return error(i, part, k, a, "a host update has written it: the next iteration reads the new value");
        if (!ts.copy[tier_index(a.tier)])
          return error(i, part, k, a, fmt::format("it has no copy on {} (swap it out first)", to_string(a.tier)));
        push_alloc(i, t, false);
        push_tensor(InstrKind::kSwapIn, i, t, false, a.tier);
        ts.state = State::kOnDevice;
        return Status::Ok();
      case ActionKind::kRecompute:
        return emit_recompute(i, part, k, a);
      case ActionKind::kHostUpdate:
        return emit_host_update(i, part, k, a);
    }
    return Status::Ok();
  }

  Status emit_host_update(OpId i, Part part, size_t k, const Action& a) {
    const TensorId g = a.tensor;
    TensorState& gs = st_[static_cast<size_t>(g)];
    const Op& u = g_.op(updates_.of(g));
    if (gs.state != State::kOffDevice)
      return error(i, part, k, a,
                   gs.state == State::kOnDevice ? "the gradient is still on the device (swap it out and release it)"
                                                : absence(g));
    if (!gs.copy[tier_index(a.tier)])
      return error(i, part, k, a, fmt::format("the gradient has no copy on {}", to_string(a.tier)));
    auto operands = u.inputs;
    operands.insert(operands.end(), u.outputs.begin(), u.outputs.end());
    for (TensorId t : operands) {
      if (!g_.tensor(t).persistent()) continue;
      const TensorState& ps = st_[static_cast<size_t>(t)];
      const int8_t home = home_[static_cast<size_t>(t)];
      if (home < 0)
        return error(i, part, k, a, fmt::format("update '{}' runs on the host but '{}' lives on the device between "
                                                "iterations (offload it)", u.name, tname(t)));
      // One it only reads (AMP's loss scale) may also be on the device: the host reads its copy.
      const bool writes = u.writes(t);
      if (writes && ps.state != State::kOffDevice)
        return error(i, part, k, a, fmt::format("'{}' of update '{}' is on the device (release it first)", tname(t),
                                                u.name));
      if (!ps.copy[static_cast<size_t>(home)] || ps.copy[static_cast<size_t>(1 - home)])
        return error(i, part, k, a, fmt::format("'{}' of update '{}' must have a valid copy in its home tier ({}) and "
                                                "none elsewhere", tname(t), u.name, to_string(home_tier(t))));
    }
    push({.kind = InstrKind::kHostRun, .tier = a.tier, .step = i, .op = u.id, .tensor = g});
    ++p_.num_host_updates;
    for (TensorId t : u.outputs)
      if (g_.tensor(t).persistent()) host_written_[static_cast<size_t>(t)] = true;
    gs.state = State::kDead;  // its copy stays until the end (kDrop), when the host lane is done
    host_drops_.push_back(g);
    return Status::Ok();
  }

  Status emit_recompute(OpId i, Part part, size_t k, const Action& a) {
    const TensorId t = a.tensor;
    TensorState& ts = st_[static_cast<size_t>(t)];
    if (ts.state != State::kOffDevice)
      return error(i, part, k, a, ts.state == State::kOnDevice ? "it is already on the device" : absence(t));
    const Op& p = g_.op(producer_[static_cast<size_t>(t)]);
    for (TensorId in : p.inputs)
      if (st_[static_cast<size_t>(in)].state != State::kOnDevice)
        return error(i, part, k, a,
                     fmt::format("its producer '{}' reads '{}' but {}", p.name, tname(in), absence(in)));
    push_alloc(i, t, true);
    ts.state = State::kOnDevice;
    std::vector<std::pair<TensorId, State>> temporaries;
    for (TensorId u : p.outputs) {
      TensorState& us = st_[static_cast<size_t>(u)];
      if (u == t || us.state == State::kOnDevice) continue;
      temporaries.emplace_back(u, us.state);
      push_alloc(i, u, true);
    }
    if (scratch(p.id) > 0)
      push({.kind = InstrKind::kAllocScratch, .recompute = true, .step = i, .op = p.id, .bytes = scratch(p.id)});
    push({.kind = InstrKind::kRun, .recompute = true, .step = i, .op = p.id});
    if (scratch(p.id) > 0)
      push({.kind = InstrKind::kFreeScratch, .recompute = true, .step = i, .op = p.id, .bytes = scratch(p.id)});
    for (auto [u, prior] : temporaries)
      push_tensor(prior == State::kDead ? InstrKind::kFree : InstrKind::kRelease, i, u, true);
    const Pos here = pos(i, part, k);
    for (TensorId in : p.inputs)
      if (death_[static_cast<size_t>(in)] == here && st_[static_cast<size_t>(in)].state == State::kOnDevice)
        kill(i, in);
    return Status::Ok();
  }

  Status emit() {
    st_.assign(g_.tensors.size(), TensorState{});
    host_written_.assign(g_.tensors.size(), false);
    p_.policy = s_.policy;
    p_.budget_bytes = s_.budget_bytes;
    p_.num_steps = num_ops();
    p_.num_actions = keep_all() ? 0 : s_.num_actions();
    FERRY_RETURN_IF_ERROR(emit_prologue());
    for (const Op& op : g_.ops) {
      for (Part part : {kBefore, kOp, kAfter}) {
        if (part == kOp) {
          FERRY_RETURN_IF_ERROR(emit_op(op));
          continue;
        }
        const std::vector<Action>& list = actions(op.id, part);
        for (size_t k = 0; k < list.size(); ++k) FERRY_RETURN_IF_ERROR(emit_action(op.id, part, k, list[k]));
      }
    }
    const OpId last = num_ops() == 0 ? 0 : static_cast<OpId>(num_ops() - 1);
    for (TensorId t : host_drops_) {
      push_tensor(InstrKind::kDrop, last, t);
      st_[static_cast<size_t>(t)].copy = {false, false};
    }
    for (const Tensor& t : g_.tensors) {
      const TensorState& ts = st_[static_cast<size_t>(t.id)];
      if (t.persistent() && home_[static_cast<size_t>(t.id)] >= 0) {
        if (ts.state != State::kOffDevice)
          return Status::InvalidArgument(fmt::format(
              "schedule '{}': offloaded persistent tensor '{}' is still on the device when the iteration ends; it "
              "must end in its tier ({}): release it after its last use",
              s_.policy, t.name, to_string(home_tier(t.id))));
        continue;  // its copy is valid: a release requires it
      }
      if ((t.persistent() || t.id == g_.loss) && ts.state != State::kOnDevice)
        return Status::InvalidArgument(fmt::format(
            "schedule '{}': {} '{}' is not on the device when the iteration ends ({}); bring it back before the end",
            s_.policy, t.persistent() ? "persistent tensor" : "the loss", t.name, absence(t.id)));
    }
    p_.offloaded = s_.offloaded;
    std::sort(p_.offloaded.begin(), p_.offloaded.end(),
              [](const Offload& a, const Offload& b) { return a.tensor < b.tensor; });
    return Status::Ok();
  }

  Tier home_tier(TensorId t) const { return home_[static_cast<size_t>(t)] == 0 ? Tier::kHost : Tier::kSsd; }

  const Graph& g_;
  const Schedule& s_;
  const ProgramOptions& o_;
  Program p_;
  std::vector<OpId> producer_;
  std::vector<Pos> last_read_;
  std::vector<Pos> death_;
  std::vector<std::vector<TensorId>> released_;  // per step: tensors whose free_after is that step
  std::vector<TensorState> st_;
  std::vector<int8_t> home_;  // per tensor: tier index of an offloaded persistent tensor, or -1
  std::vector<Pos> host_at_;  // per op: position of its kHostUpdate action, or kNever
  UpdateOps updates_;  // built only for schedules with host updates
  std::vector<bool> host_written_;   // per tensor: a host update wrote it this iteration
  std::vector<TensorId> host_drops_;  // gradients consumed by host updates, dropped at the end
};

}  // namespace

std::string_view to_string(InstrKind k) {
  switch (k) {
    case InstrKind::kAlloc: return "alloc";
    case InstrKind::kFree: return "free";
    case InstrKind::kRelease: return "release";
    case InstrKind::kAllocScratch: return "alloc_scratch";
    case InstrKind::kFreeScratch: return "free_scratch";
    case InstrKind::kRun: return "run";
    case InstrKind::kSwapOut: return "swap_out";
    case InstrKind::kSwapIn: return "swap_in";
    case InstrKind::kHostRun: return "host_run";
    case InstrKind::kDrop: return "drop";
  }
  return "?";
}

std::vector<bool> Program::device_resident(const Graph& g) const {
  std::vector<bool> out(g.tensors.size(), false);
  for (const Tensor& t : g.tensors) out[static_cast<size_t>(t.id)] = t.persistent();
  for (const Offload& o : offloaded) out[static_cast<size_t>(o.tensor)] = false;
  return out;
}

std::string Program::to_text(const Graph& g) const {
  std::string out;
  for (const Instruction& in : instructions) {
    std::string what;
    switch (in.kind) {
      case InstrKind::kRun:
      case InstrKind::kHostRun:
      case InstrKind::kAllocScratch:
      case InstrKind::kFreeScratch: what = g.op(in.op).name; break;
      default: what = g.tensor(in.tensor).name; break;
    }
    out += fmt::format("step {:<5} {:<13} {}", in.step, to_string(in.kind), what);
    if (in.kind == InstrKind::kSwapOut || in.kind == InstrKind::kSwapIn) out += fmt::format(" ({})", to_string(in.tier));
    if (in.kind == InstrKind::kHostRun)
      out += fmt::format(" (on the host; gradient {} on {})", g.tensor(in.tensor).name, to_string(in.tier));
    if (in.bytes > 0 && in.kind != InstrKind::kRun) out += "  " + format_bytes(in.bytes);
    if (in.inherit != kNoTensor) out += fmt::format("  (in place of {})", g.tensor(in.inherit).name);
    if (in.recompute) out += "  [recompute]";
    out += '\n';
  }
  return out;
}

Result<Program> lower_schedule(const Graph& g, const Schedule& s, const ProgramOptions& options) {
  if (Status st = g.validate(); !st.ok()) return st.with_context(fmt::format("lower schedule '{}'", s.policy));
  return lower_schedule_for_valid_graph(g, s, options);
}

Result<Program> lower_schedule_for_valid_graph(const Graph& g, const Schedule& s, const ProgramOptions& options) {
  return Lowering(g, s, options).run();
}

}  // namespace ferry
