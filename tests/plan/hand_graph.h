// Helpers shared by the plan and sim tests: graphs written by hand (tensors and ops filled in
// directly, with measured op times), schedules built action by action, and a compact view of a
// Program to compare against instruction lists written by hand.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "graph/graph.h"
#include "plan/program.h"
#include "plan/schedule.h"

namespace ferry::plan_test {

// Appends tensors and ops to a Graph with consecutive ids.
class HandGraph {
 public:
  explicit HandGraph(std::string model = "hand") { g_.info.model = std::move(model); }

  TensorId tensor(const std::string& name, uint64_t bytes, TensorRole role = TensorRole::kActivation) {
    Tensor t;
    t.id = static_cast<TensorId>(g_.tensors.size());
    t.name = name;
    t.role = role;
    t.dtype = DType::kU8;
    t.shape = {static_cast<int64_t>(bytes)};
    t.bytes = bytes;
    g_.tensors.push_back(std::move(t));
    return g_.tensors.back().id;
  }
  TensorId input(const std::string& name, uint64_t bytes) { return tensor(name, bytes, TensorRole::kInput); }
  TensorId weight(const std::string& name, uint64_t bytes) { return tensor(name, bytes, TensorRole::kWeight); }

  // An op with a measured time (nullopt: leave it to the roofline).
  OpId op(const std::string& name, std::vector<TensorId> inputs, std::vector<TensorId> outputs,
          std::optional<double> time_us = std::nullopt, Phase phase = Phase::kForward, bool inplace = false) {
    Op o;
    o.id = static_cast<OpId>(g_.ops.size());
    o.name = name;
    o.phase = phase;
    o.inputs = std::move(inputs);
    o.outputs = std::move(outputs);
    o.time_us = time_us;
    o.inplace_capable = inplace;
    g_.ops.push_back(std::move(o));
    return g_.ops.back().id;
  }

  void set_loss(TensorId t) { g_.loss = t; }
  Graph& graph() { return g_; }
  const Graph& graph() const { return g_; }

 private:
  Graph g_;
};

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

// Passes when `text` contains `part`; on failure shows both.
inline ::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

}  // namespace ferry::plan_test
