// Helpers shared by the analysis tests: graphs written by hand (tensor and op vectors filled
// directly, no GraphBuilder), and a brute-force plan checker to hold the real one against.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "analysis/analysis.h"
#include "graph/graph.h"

namespace ferry::analysis_test {

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

  OpId op(const std::string& name, Phase phase, std::vector<TensorId> inputs, std::vector<TensorId> outputs,
          bool inplace = false) {
    Op o;
    o.id = static_cast<OpId>(g_.ops.size());
    o.name = name;
    o.phase = phase;
    o.inputs = std::move(inputs);
    o.outputs = std::move(outputs);
    o.inplace_capable = inplace;
    g_.ops.push_back(std::move(o));
    return g_.ops.back().id;
  }

  void set_loss(TensorId t) { g_.loss = t; }
  const Graph& graph() const { return g_; }

 private:
  Graph g_;
};

// Passes when `text` contains `part`; on failure shows both.
inline ::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

// All-pairs version of check_memory_plan's overlap test: true when no two buffers with
// overlapping lifetimes share a byte. Quadratic; for small inputs only.
inline bool brute_force_disjoint(const std::vector<Buffer>& buffers, const std::vector<uint64_t>& offsets) {
  for (size_t i = 0; i < buffers.size(); ++i) {
    for (size_t j = i + 1; j < buffers.size(); ++j) {
      const Buffer &a = buffers[i], &b = buffers[j];
      const bool same_time = a.first_step <= b.last_step && b.first_step <= a.last_step;
      const bool same_bytes = offsets[i] < offsets[j] + b.bytes && offsets[j] < offsets[i] + a.bytes;
      if (same_time && same_bytes && a.bytes > 0 && b.bytes > 0) return false;
    }
  }
  return true;
}

}  // namespace ferry::analysis_test
