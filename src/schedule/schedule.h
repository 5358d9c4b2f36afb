// Schedule: a memory plan for one training iteration, as plain data. It is the contract between
// the planners (src/plan) and its two consumers, the simulator (src/sim) and the runtime
// (src/runtime): both execute the same Schedule, so what was predicted is what runs.
//
// Model
// - The iteration is the graph's ops in order (steps 0..n-1). Around every step the schedule
//   lists actions: `before[i]` run before op i starts, `after[i]` run after op i completes.
// - Without actions, a transient tensor is allocated when it comes alive (its producer's step,
//   step 0 for data inputs) and freed after its last use: the "keep" plan, policy `none`.
// - kSwapOut(t, tier): start copying t to the tier (host memory or SSD) on the device-to-host
//   stream. It does not free anything by itself.
// - kRelease(t): free t's device memory. If a swap-out of t is in flight, wait for it first
//   (a stall the simulator counts). A released tensor must be brought back (kSwapIn or
//   kRecompute) before any later op reads it.
// - kSwapIn(t): allocate device memory for t and start copying it back on the host-to-device
//   stream. An op that reads t waits for the copy (a stall if it is not done).
// - kRecompute(t): allocate t and re-run its producer op on the compute stream (its inputs must
//   be on the device then). Recomputing a chain is a sequence of kRecompute actions in order.
// - Persistent tensors (weights, optimizer state) live on the device between iterations unless
//   the schedule offloads them (`offloaded`): an offloaded tensor lives in its tier between
//   iterations, as ZeRO-Offload keeps optimizer state on the host. It starts every iteration off
//   the device with a valid copy in that tier, is brought in (kSwapIn) before an op reads or
//   updates it, may leave again (kRelease) whenever its copy is valid, and must end the iteration
//   off the device with a valid copy in its tier (after an update: kSwapOut, then kRelease).
// - Memory is allocated dynamically, in program order, by the same best-fit OffsetAllocator in
//   the simulator and the runtime; since the order of allocations and frees is a function of the
//   Schedule alone (never of timing), both see the same addresses and the same peak.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "codec/codec.h"
#include "common/transfer.h"
#include "graph/graph.h"
#include "memory/sharing_plan.h"

namespace ferry {

enum class ActionKind : uint8_t { kSwapOut, kRelease, kSwapIn, kRecompute, kHostUpdate };

struct Action {
  ActionKind kind = ActionKind::kRelease;
  TensorId tensor = kNoTensor;  // kHostUpdate: the weight gradient whose update runs on the host
  Tier tier = Tier::kHost;      // for kSwapOut / kSwapIn; kHostUpdate: the tier holding the gradient
  bool operator==(const Action&) const = default;
};

// A persistent tensor that lives in `tier` between iterations.
struct Offload {
  TensorId tensor = kNoTensor;
  Tier tier = Tier::kHost;
  bool operator==(const Offload&) const = default;
};

// A tensor whose SSD-tier copies are stored coded with `codec` (lossless, not kNone).
struct TensorCodec {
  TensorId tensor = kNoTensor;
  CodecId codec = CodecId::kNone;
  bool operator==(const TensorCodec&) const = default;
};

struct Schedule {
  std::string policy = "none";
  uint64_t budget_bytes = 0;                // the device capacity the plan was made for (0 = none)
  std::vector<std::vector<Action>> before;  // per step
  std::vector<std::vector<Action>> after;   // per step
  std::vector<Offload> offloaded;           // persistent tensors whose home is a tier
  std::vector<TensorCodec> ssd_codecs;      // coded SSD copies; every other tensor's travel raw
  // Where the search for this plan's placement starts (memory/sharing_plan.h, Note [Warm start]):
  // the planner that made the plan found it fitting from there. Guides placement only; two
  // schedules that differ in nothing else are the same plan (operator==).
  PlacementHint placement_hint;

  // The empty plan for a graph with `steps` ops: keep everything, free at last use.
  static Schedule keep_all(size_t steps) {
    Schedule s;
    s.before.resize(steps);
    s.after.resize(steps);
    return s;
  }
  // Distinct tensors named by actions of `kind` (swapped: kSwapOut, recomputed: kRecompute).
  size_t distinct_tensors(ActionKind kind) const;
  // Host updates (kHostUpdate actions) in the schedule.
  size_t num_host_updates() const {
    size_t n = 0;
    for (const auto* lists : {&before, &after})
      for (const auto& v : *lists)
        for (const Action& a : v) n += a.kind == ActionKind::kHostUpdate;
    return n;
  }
  // The same plan to execute: the same actions, offloads and codecs (the policy's name and the
  // budget aside).
  bool same_actions(const Schedule& o) const {
    return before == o.before && after == o.after && offloaded == o.offloaded && ssd_codecs == o.ssd_codecs;
  }
  size_t num_actions() const {
    size_t n = 0;
    for (const auto& v : before) n += v.size();
    for (const auto& v : after) n += v.size();
    return n;
  }
};

std::string_view to_string(ActionKind k);

// The optimizer update ops (sgd_update, adam_update) of a graph by the weight gradient each reads
// as its gradient operand (input 1): the op a kHostUpdate action on that gradient runs (the first
// in op order when several read it).
class UpdateOps {
 public:
  UpdateOps() = default;  // no updates
  explicit UpdateOps(const Graph& g);
  // The update reading `gradient`, or kNoOp when there is none.
  OpId of(TensorId gradient) const {
    auto it = by_gradient_.find(gradient);
    return it == by_gradient_.end() ? kNoOp : it->second;
  }
  bool empty() const { return by_gradient_.empty(); }

 private:
  std::unordered_map<TensorId, OpId> by_gradient_;
};

}  // namespace ferry
