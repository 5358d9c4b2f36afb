// Checker of a memory-sharing plan, independent of the planner that produced it.
//
// Design
// - Per-buffer checks first (placed, aligned, inside the arena), then one sweep over steps: buffers
//   enter in order of first step and leave after their last step; the live ones sit in a set
//   ordered by offset. Live buffers never overlap (else we have already returned), so a newcomer
//   overlaps some live buffer iff it overlaps its predecessor or its successor in that order: the
//   predecessor ends highest among the buffers starting at or below it, the successor starts
//   lowest among the rest. O(n log n), so it runs on every plan, not only in tests.
// - Overlap is judged on the bytes a buffer really holds, not on its aligned size.

#include <algorithm>
#include <bit>
#include <iterator>
#include <numeric>
#include <queue>
#include <set>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "memory/sharing_plan.h"

namespace ferry {

namespace {

// "buffer 7 (tensors 'conv1.out', 'relu1.out'; 4096 bytes at offset 128; steps [3, 9])".
std::string describe(const Graph* g, const Buffer& b, uint64_t offset) {
  std::string what;
  if (b.scratch_of != kNoOp) {
    what = g != nullptr && static_cast<size_t>(b.scratch_of) < g->ops.size()
               ? fmt::format("scratch of op '{}'", g->op(b.scratch_of).name)
               : fmt::format("scratch of op {}", b.scratch_of);
  } else {
    what = b.tensors.size() == 1 ? "tensor " : "tensors ";
    for (size_t i = 0; i < b.tensors.size(); ++i) {
      const TensorId t = b.tensors[i];
      if (i > 0) what += ", ";
      what += g != nullptr && t >= 0 && static_cast<size_t>(t) < g->tensors.size()
                  ? fmt::format("'{}'", g->tensor(t).name)
                  : fmt::format("{}", t);
    }
  }
  return fmt::format("buffer {} ({}; {} bytes at offset {}; steps [{}, {}])", b.id, what, b.bytes, offset,
                     b.first_step, b.last_step);
}

Status check(const Graph* g, const std::vector<Buffer>& buffers, const MemoryPlan& plan) {
  if (plan.alignment == 0 || !std::has_single_bit(plan.alignment))
    return Status::InvalidArgument(fmt::format("memory plan alignment {} is not a power of two", plan.alignment));
  if (plan.offsets.size() != buffers.size())
    return Status::InvalidArgument(
        fmt::format("memory plan places {} buffers but there are {}", plan.offsets.size(), buffers.size()));
  for (size_t i = 0; i < buffers.size(); ++i) {
    const Buffer& b = buffers[i];
    const uint64_t offset = plan.offsets[i];
    if (b.first_step < 0 || b.first_step > b.last_step)
      return Status::InvalidArgument(fmt::format("{} has an empty or negative lifetime", describe(g, b, offset)));
    if (b.offset_alignment != 0 && !std::has_single_bit(b.offset_alignment))
      return Status::InvalidArgument(fmt::format("{} asks for an offset alignment of {}, not a power of two",
                                                 describe(g, b, offset), b.offset_alignment));
    // An empty buffer holds no byte: only the plan's alignment applies to it.
    const uint64_t alignment = b.bytes > 0 ? std::max(plan.alignment, b.offset_alignment) : plan.alignment;
    if (offset % alignment != 0)
      return Status::InvalidArgument(fmt::format("{} is not aligned to {} bytes", describe(g, b, offset), alignment));
    if (offset > plan.arena_bytes || b.bytes > plan.arena_bytes - offset)
      return Status::InvalidArgument(
          fmt::format("{} ends past the arena of {} bytes", describe(g, b, offset), plan.arena_bytes));
  }

  std::vector<size_t> by_start(buffers.size());
  std::iota(by_start.begin(), by_start.end(), size_t{0});
  std::stable_sort(by_start.begin(), by_start.end(),
                   [&](size_t x, size_t y) { return buffers[x].first_step < buffers[y].first_step; });
  using Leaving = std::pair<OpId, size_t>;  // (last step, buffer index)
  std::priority_queue<Leaving, std::vector<Leaving>, std::greater<>> leaving;
  std::set<std::pair<uint64_t, size_t>> live;  // (offset, buffer index) of live, non-empty buffers
  for (size_t i : by_start) {
    const Buffer& b = buffers[i];
    if (b.bytes == 0) continue;
    while (!leaving.empty() && leaving.top().first < b.first_step) {
      live.erase({plan.offsets[leaving.top().second], leaving.top().second});
      leaving.pop();
    }
    const uint64_t offset = plan.offsets[i];
    auto conflict = [&](size_t other) {
      const Buffer& o = buffers[other];
      return Status::InvalidArgument(fmt::format("{} overlaps {} at step {}", describe(g, b, offset),
                                                 describe(g, o, plan.offsets[other]),
                                                 std::max(b.first_step, o.first_step)));
    };
    auto next = live.lower_bound({offset, i});
    if (next != live.end() && offset + b.bytes > next->first) return conflict(next->second);
    if (next != live.begin()) {
      auto prev = std::prev(next);
      if (prev->first + buffers[prev->second].bytes > offset) return conflict(prev->second);
    }
    live.emplace(offset, i);
    leaving.emplace(b.last_step, i);
  }
  return Status::Ok();
}

}  // namespace

Status check_memory_plan(const std::vector<Buffer>& buffers, const MemoryPlan& plan) {
  return check(nullptr, buffers, plan);
}

Status check_memory_plan(const Graph& g, const std::vector<Buffer>& buffers, const MemoryPlan& plan) {
  return check(&g, buffers, plan);
}

}  // namespace ferry
