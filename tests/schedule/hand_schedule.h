// Helpers shared by the schedule, sim and plan tests: graphs written by hand (common/hand_graph.h),
// schedules built action by action, and a compact view of a Program to compare against
// instruction lists written by hand.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/hand_graph.h"
#include "graph/graph.h"
#include "schedule/program.h"
#include "schedule/schedule.h"

namespace ferry::plan_test {

using test::contains;
using test::HandGraph;

inline Action swap_out(TensorId t, Tier tier = Tier::kHost) { return {ActionKind::kSwapOut, t, tier}; }
inline Action release(TensorId t) { return {ActionKind::kRelease, t, Tier::kHost}; }
inline Action swap_in(TensorId t, Tier tier = Tier::kHost) { return {ActionKind::kSwapIn, t, tier}; }
inline Action recompute(TensorId t) { return {ActionKind::kRecompute, t, Tier::kHost}; }

// "alloc a@1", "run f@1", "alloc b@2<a" (in place of a), "alloc_scratch f@1", "run f@3 R" (recompute).
inline std::vector<std::string> summary(const Program& p, const Graph& g) {
  std::vector<std::string> out;
  for (const Instruction& in : p.instructions) {
    const bool op_named =
        in.kind == InstrKind::kRun || in.kind == InstrKind::kAllocScratch || in.kind == InstrKind::kFreeScratch;
    std::string s = fmt::format("{} {}@{}", to_string(in.kind), op_named ? g.op(in.op).name : g.tensor(in.tensor).name,
                                in.step);
    if (in.inherit != kNoTensor) s += "<" + g.tensor(in.inherit).name;
    if (in.kind == InstrKind::kSwapOut || in.kind == InstrKind::kSwapIn) s += in.tier == Tier::kHost ? ":host" : ":ssd";
    if (in.recompute) s += " R";
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace ferry::plan_test
