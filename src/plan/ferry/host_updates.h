// ZeRO-Offload's placement as a rewrite of a schedule: optimizer updates run on the host.
//
// For each chosen update op u (gradient g, weight w, optimizer state): every persistent operand of
// u lives in the host tier between iterations (offloaded, never updated on the device, so never
// swapped out), g is swapped out to the host after its producer and released one step later, and
// the kHostUpdate(g) action stands after that release and after the last device read of every
// operand. Optimizer state then never occupies the device, gradients only for a step or two, and
// weights only between their first read and their update (less where the plan also swaps them
// between forward and backward). The update runs on the simulator's and the runtime's host lane.
#pragma once

#include <vector>

#include "plan/policy_common.h"

namespace ferry::planner {

// The update ops a plan may run on the host: PlanFacts::host_updatable.

// `ops` (update ops) in the order their gradients (each update's second input) are produced.
std::vector<OpId> by_gradient_order(const PlanFacts& f, std::vector<OpId> ops);

// The updates of `ops` that the host lane can finish behind the device's backward pass, in the
// order their gradients are produced: each starts when its gradient has crossed the link (cost
// model) and the previous one is done, and must end before the device's last op would. Where the
// host is slow (a fast GPU beside a CPU optimizer) running every update there would make the host
// lane the iteration's critical path; this subset keeps the rest on the device.
std::vector<OpId> host_ops_in_shadow(const PlanContext& ctx, const PlanFacts& f, const std::vector<OpId>& ops);

// Where running every update of `ops` on the host would make the host lane longer than the
// device's compute (a fast GPU beside a CPU optimizer, e.g. mixed precision): `ops` in the order
// their gradients are produced, the order in which host/link splits take them (the first k on the
// host, the rest on the device, whose master weights and optimizer state the planner may then
// stream over the link; plan_ferry searches k). Empty where the host lane keeps up.
std::vector<OpId> host_split_order(const PlanContext& ctx, const PlanFacts& f, const std::vector<OpId>& ops);

// The split of `order` (host_split_order) that balances the host lane (the first k updates' host
// time) against one link direction (the first k gradients leaving, plus the rest's persistent
// outputs crossing once: every device update's state streamed, as at a tight budget), from the
// cost model. A starting point for plan_ferry's search of k.
size_t balanced_host_split(const PlanContext& ctx, const PlanFacts& f, const std::vector<OpId>& order);

// `s` with `ops` run on the host (as above). Actions `s` has on the gradients of `ops` are
// dropped, and swap-outs of their persistent operands (the host writes their copies). `at`, when
// given, says per tensor where to issue the swap-in of an operand `s` kept on the device and after
// which step to release a gradient (the step its swap-out is expected to be done); otherwise (or
// kNoOp) the weight is fetched right before its first read and the gradient released one step
// after its producer. The planner passes its link bookings (ferry_planner.cc).
Schedule with_host_updates(const PlanFacts& f, Schedule s, const std::vector<OpId>& ops,
                           const std::vector<OpId>* at = nullptr);

}  // namespace ferry::planner
