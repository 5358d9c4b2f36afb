// A host-memory budget for the swap tiers: what a plan keeps on the host tier, and the cascade
// that moves copies from the host tier to the SSD tier until the host tier fits its budget (as
// ZeRO-Infinity spills from CPU memory to NVMe).
//
// Design
// - A tier's need is its copies placed as the executor places them (schedule/tier_placement.h):
//   the executor sizes the host tier at the budget and fixes every slot where the placement puts
//   it, so "fits" here means the run never exceeds the host budget.
// - The cascade runs after any policy. It works on the copies' lifetimes in the lowered program:
//   while the host tier's placed bytes exceed the budget, it finds the instruction where the most
//   host bytes are alive and moves one copy alive there to the SSD tier: the one with the most
//   slack, that is the predicted time between its swap-out and the swap-in that brings it back
//   (cyclically for offloaded persistent tensors, which come back next iteration) minus what the
//   SSD tier takes to write and read it (cost model). The coldest copies go first, where the
//   SSD's slower transfers are most likely hidden behind compute; ties go to the larger copy,
//   then the lower tensor id (deterministic).
// - Moving a copy rewrites every kSwapOut and kSwapIn of that tensor (and its Offload entry) from
//   the host tier to the SSD tier; nothing else changes, so the device memory and the numbers
//   computed are those of the original plan. Only the predicted time changes (simulate again).
// - The policy that made the plan chose what to move assuming the host tier's speed; the cascade
//   does not re-plan for the SSD's (docs/dynamic.md says what that costs).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "plan/policies.h"
#include "schedule/schedule.h"

namespace ferry {

// Placed bytes a plan keeps in each tier at once (what the executor will size the tiers at).
struct TierNeeds {
  uint64_t host_bytes = 0;
  uint64_t ssd_bytes = 0;
  size_t host_copies = 0;
  size_t ssd_copies = 0;
};
// Lowers `s` as the executor will (ctx's scratch and in-place rule) and places its tier copies.
Result<TierNeeds> tier_needs(const PlanContext& ctx, const Schedule& s);

struct CascadeReport {
  TierNeeds before;             // of the plan as the policy made it
  TierNeeds after;              // after the cascade: after.host_bytes <= the host budget
  size_t moved_tensors = 0;     // copies moved from the host tier to the SSD tier
  uint64_t moved_bytes = 0;
};

// Moves copies of `s` from the host tier to the SSD tier until the host tier's placed bytes are
// at most `host_budget_bytes` (always possible: with every copy moved the host tier holds none).
// Errors: InvalidArgument for a schedule that does not lower; Internal if the rewritten one does
// not (a schedule naming one tensor on both tiers).
Result<CascadeReport> cascade_to_ssd(const PlanContext& ctx, Schedule& s, uint64_t host_budget_bytes);

}  // namespace ferry
