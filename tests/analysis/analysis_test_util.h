// Helpers shared by the analysis tests: graphs written by hand (common/hand_graph.h) and a
// brute-force plan checker to hold the real one against.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "analysis/analysis.h"
#include "common/hand_graph.h"
#include "graph/graph.h"

namespace ferry::analysis_test {

using test::contains;
using test::HandGraph;

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
