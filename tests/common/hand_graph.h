// Test graphs written by hand (tensors and ops filled in directly, no GraphBuilder), shared by
// the analysis, plan and sim tests, and a substring assertion with a readable failure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "graph/graph.h"

namespace ferry::test {

// Appends tensors and ops to a Graph with consecutive ids. Tensors are byte arrays of the given size.
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
  // An op without a time, phase first (the analysis tests' form).
  OpId op(const std::string& name, Phase phase, std::vector<TensorId> inputs, std::vector<TensorId> outputs,
          bool inplace = false) {
    return op(name, std::move(inputs), std::move(outputs), std::nullopt, phase, inplace);
  }

  void set_loss(TensorId t) { g_.loss = t; }
  Graph& graph() { return g_; }
  const Graph& graph() const { return g_; }

 private:
  Graph g_;
};

// Passes when `text` contains `part`; on failure shows both.
inline ::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

}  // namespace ferry::test
