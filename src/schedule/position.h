// Positions in a lowered program: (step, part, index) with part = before-list < op < after-list,
// packed in one integer so that positions compare in program order. Lowering (program.cc) and the
// planners' completion of a schedule (plan/policy_common.cc) both order actions this way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include "graph/graph.h"

namespace ferry::program_position {

using Pos = uint64_t;
constexpr Pos kNever = std::numeric_limits<Pos>::max();
enum Part : uint64_t { kBefore = 0, kOp = 1, kAfter = 2 };

// 32 bits of step, 2 of part, 30 of index within the part's list.
constexpr Pos pos(OpId step, Part part, size_t index = 0) {
  return (static_cast<uint64_t>(step) << 32) | (static_cast<uint64_t>(part) << 30) | static_cast<uint64_t>(index);
}
constexpr OpId pos_step(Pos p) { return static_cast<OpId>(p >> 32); }

}  // namespace ferry::program_position
