// The host-budget cascade. See tier_cascade.h for the design.
#include "plan/tier_cascade.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/units.h"
#include "plan/policy_common.h"
#include "schedule/program.h"
#include "schedule/tier_placement.h"
#include "sim/simulator.h"

namespace ferry {

namespace {

Result<Program> lower_for(const PlanContext& ctx, const Schedule& s) {
  return lower_schedule(ctx.graph, s, program_options_of(ctx));
}

// The simulator's iteration time of `p` (timing only).
Result<double> predicted_us(const PlanContext& ctx, const Program& p) {
  SimOptions so;
  so.op_scratch_bytes = ctx.op_scratch_bytes;
  so.allow_inplace = ctx.allow_inplace;
  so.alignment = ctx.alignment;
  so.record_timeline = false;
  so.timing_only = true;
  FERRY_ASSIGN_OR_RETURN(SimResult r, simulate_program(ctx.graph, p, ctx.cost, so));
  return r.iteration_us;
}

TierNeeds needs_of(const Graph& g, const Program& p) {
  const TierPlacement host = place_tier(g, p, Tier::kHost);
  const TierPlacement ssd = place_tier(g, p, Tier::kSsd);
  return {.host_bytes = host.bytes, .ssd_bytes = ssd.bytes, .host_copies = host.copies.size(),
          .ssd_copies = ssd.copies.size()};
}

// Per host copy: predicted slack (us) of moving it to the SSD tier (tier_cascade.h), where it would
// be coded with codecs[tensor].
std::unordered_map<TensorId, double> slack_us(const PlanContext& ctx, const Program& p,
                                              const std::vector<TierCopy>& copies, const std::vector<CodecId>& codecs) {
  const std::vector<double> op_us = ctx.cost.op_times_us(ctx.graph);
  std::vector<double> at(op_us.size() + 1, 0);  // predicted start of each step
  for (size_t i = 0; i < op_us.size(); ++i) at[i + 1] = at[i] + op_us[i];
  const double iteration_us = at.back();
  const std::vector<std::string> classes = tensor_classes(ctx.graph);
  std::unordered_map<TensorId, OpId> out_step, in_step;  // last swap-out; first swap-in after it
  for (const Instruction& in : p.instructions) {
    if (in.tier != Tier::kHost) continue;
    if (in.kind == InstrKind::kSwapOut) {
      out_step[in.tensor] = in.step;
      in_step.erase(in.tensor);
    } else if (in.kind == InstrKind::kSwapIn && out_step.contains(in.tensor) && !in_step.contains(in.tensor)) {
      in_step[in.tensor] = in.step;
    }
  }
  // Offloaded tensors come back next iteration: their first swap-in of the program.
  std::unordered_map<TensorId, OpId> first_in;
  for (const Instruction& in : p.instructions)
    if (in.kind == InstrKind::kSwapIn && in.tier == Tier::kHost && !first_in.contains(in.tensor))
      first_in[in.tensor] = in.step;
  std::unordered_map<TensorId, double> slack;
  for (const TierCopy& c : copies) {
    double gap_us = iteration_us;
    const auto out = out_step.find(c.tensor);
    if (auto in = in_step.find(c.tensor); out != out_step.end() && in != in_step.end()) {
      gap_us = at[static_cast<size_t>(in->second)] - at[static_cast<size_t>(out->second)];
    } else if (auto next = first_in.find(c.tensor); out != out_step.end() && next != first_in.end()) {
      gap_us = iteration_us - at[static_cast<size_t>(out->second)] + at[static_cast<size_t>(next->second)];
    }
    const CodecId codec = codecs[static_cast<size_t>(c.tensor)];
    const std::string& cls = classes[static_cast<size_t>(c.tensor)];
    const double ssd_us = ctx.cost.transfer_us(Direction::kSwapOut, Tier::kSsd, c.bytes, codec, cls) +
                          ctx.cost.transfer_us(Direction::kSwapIn, Tier::kSsd, c.bytes, codec, cls);
    slack[c.tensor] = gap_us - ssd_us;
  }
  return slack;
}

// The instruction where the copies in `copies` hold the most aligned bytes, and those bytes.
struct Busiest {
  size_t instruction = 0;
  uint64_t bytes = 0;
};
Busiest busiest_instruction(const std::vector<TierCopy>& copies) {
  std::vector<std::pair<size_t, int64_t>> events;  // (instruction, +-bytes); ends after their instruction
  for (const TierCopy& c : copies) {
    const auto b = static_cast<int64_t>(align_up(c.bytes, kTierSlotAlignment));
    events.emplace_back(c.first_instruction * 2, b);
    events.emplace_back(c.last_instruction * 2 + 1, -b);
  }
  std::sort(events.begin(), events.end());
  int64_t live = 0, best = -1;
  size_t where = 0;
  for (const auto& [key, delta] : events) {
    live += delta;
    if (live > best) {
      best = live;
      where = key / 2;
    }
  }
  return {.instruction = where, .bytes = static_cast<uint64_t>(std::max<int64_t>(best, 0))};
}

void move_to_ssd(Schedule& s, const std::unordered_set<TensorId>& moved) {
  auto rewrite = [&](std::vector<std::vector<Action>>& steps) {
    for (std::vector<Action>& actions : steps)
      for (Action& a : actions)
        if ((a.kind == ActionKind::kSwapOut || a.kind == ActionKind::kSwapIn) && a.tier == Tier::kHost &&
            moved.contains(a.tensor))
          a.tier = Tier::kSsd;
  };
  rewrite(s.before);
  rewrite(s.after);
  for (Offload& o : s.offloaded)
    if (o.tier == Tier::kHost && moved.contains(o.tensor)) o.tier = Tier::kSsd;
}

}  // namespace

Result<TierNeeds> tier_needs(const PlanContext& ctx, const Schedule& s) {
  FERRY_ASSIGN_OR_RETURN(Program p, lower_for(ctx, s));
  return needs_of(ctx.graph, p);
}

Result<CascadeReport> cascade_to_ssd(const PlanContext& ctx, Schedule& s, uint64_t host_budget_bytes) {
  FERRY_ASSIGN_OR_RETURN(Program p, lower_for(ctx, s));
  CascadeReport r;
  r.before = needs_of(ctx.graph, p);
  r.after = r.before;
  if (r.before.host_bytes <= host_budget_bytes) return r;

  std::vector<TierCopy> host = tier_copies(ctx.graph, p, Tier::kHost);
  const std::vector<CodecId> codecs = ssd_codec_choice(ctx);  // what a spilled copy is coded with
  const std::unordered_map<TensorId, double> slack = slack_us(ctx, p, host, codecs);
  std::unordered_set<TensorId> moved;
  while (!host.empty()) {
    // Placing is exact but costs more than the live-bytes sweep, which bounds it from below.
    const Busiest busiest = busiest_instruction(host);
    if (busiest.bytes <= host_budget_bytes && place_tier_copies(host, Tier::kHost).bytes <= host_budget_bytes) break;
    const size_t k = busiest.instruction;
    size_t pick = host.size();
    for (size_t i = 0; i < host.size(); ++i) {
      const TierCopy& c = host[i];
      if (c.first_instruction > k || c.last_instruction < k) continue;
      if (pick == host.size()) {
        pick = i;
        continue;
      }
      const TierCopy& b = host[pick];
      const double sc = slack.at(c.tensor), sb = slack.at(b.tensor);
      if (sc > sb || (sc == sb && (c.bytes > b.bytes || (c.bytes == b.bytes && c.tensor < b.tensor)))) pick = i;
    }
    FERRY_CHECK(pick < host.size(), "cascade: no host copy is live at its busiest instruction {}", k);
    moved.insert(host[pick].tensor);
    r.moved_bytes += host[pick].bytes;
    host.erase(host.begin() + static_cast<std::ptrdiff_t>(pick));
  }
  move_to_ssd(s, moved);
  attach_ssd_codecs(codecs, s);  // the spilled copies are coded as the plan's others
  r.moved_tensors = moved.size();
  Result<Program> after = lower_for(ctx, s);
  if (!after.ok())
    return Status::Internal("the host-budget cascade made a schedule that does not lower: " + after.status().message());
  if (!ctx.ssd_codec && !s.ssd_codecs.empty()) {
    // --codec auto: the copies keep their codecs only when the plan is predicted more than
    // kCodecMinGain faster with them than with every copy raw, as plan_policy asks of a policy's
    // own plan.
    Program raw_program = *after;  // the codecs are all lowering carries of them
    raw_program.ssd_codecs.clear();
    FERRY_ASSIGN_OR_RETURN(const double coded_us, predicted_us(ctx, *after));
    FERRY_ASSIGN_OR_RETURN(const double raw_us, predicted_us(ctx, raw_program));
    if (coded_us >= (1 - kCodecMinGain) * raw_us) {
      s.ssd_codecs.clear();
      after = std::move(raw_program);
    }
  }
  r.after = needs_of(ctx.graph, *after);
  FERRY_CHECK(r.after.host_bytes <= host_budget_bytes, "cascade: host tier still needs {} above the budget {}",
              r.after.host_bytes, host_budget_bytes);
  return r;
}

}  // namespace ferry
