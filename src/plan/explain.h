// What a plan does with each tensor, what it costs and saves, and the alternative it did not take
// (`ferry plan --explain`). Derived from the Schedule alone, so it explains any policy's plan,
// including a ferry plan that came from its portfolio.
#pragma once

#include <string>
#include <vector>

#include "cost/cost_model.h"
#include "graph/graph.h"
#include "schedule/schedule.h"
#include "sim/simulator.h"

namespace ferry {

struct TensorDecision {
  TensorId tensor = kNoTensor;
  std::string move;        // "swap", "recompute", "swap+recompute", "offload" (a persistent tensor lives in a tier) or
                           // "host-update" (a gradient whose optimizer update runs on the host)
  uint64_t bytes = 0;      // device bytes freed while it is away
  int32_t away_steps = 0;  // steps of the iteration during which it is not on the device
  int swap_outs = 0, swap_ins = 0, recomputes = 0;
  CodecId ssd_codec = CodecId::kNone;  // how its SSD copies are coded (Schedule::ssd_codecs)
  double link_us = 0;       // estimated link time of its copies (both directions, the cost model's transfer time)
  double recompute_us = 0;  // estimated time of the ops that recompute it
  // Simulated time the compute stream waited for its copies (swap-ins landing, swap-outs
  // finishing), from the simulation of this schedule; 0 when none was given.
  double wait_us = 0;
  // What it adds to the iteration: its recomputes and the waits for it. Its link time is not in
  // it: where a copy overlaps compute it costs nothing, and where it does not, the wait says so.
  double exposed_us() const { return recompute_us + wait_us; }
  std::string alternative;  // the option not taken and its estimated cost
};

// Every tensor the schedule moves, costliest first: by exposed time, then by link time. `sim`:
// a simulation of `s` with SimOptions::record_waits (its per-tensor waits), or null.
std::vector<TensorDecision> explain_schedule(const Graph& g, const CostModel& cost, const Schedule& s,
                                             const SimResult* sim = nullptr);

}  // namespace ferry
