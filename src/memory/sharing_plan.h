// Static memory-sharing planner: gives every Buffer an offset in one arena so that buffers whose
// lifetimes overlap never share a byte. The algorithm and its cost are described in sharing_plan.cc.
//
// Usage (analyze() does this for you):
//   MemoryPlan plan = plan_memory_sharing(analysis.buffers, 64);
//   // plan.offsets[b] is where buffer b lives; plan.arena_bytes is the arena to allocate.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "graph/graph.h"

namespace ferry {

// One buffer of the memory-sharing plan (a merged group of in-place tensors, or one op's scratch).
struct Buffer {
  int32_t id = -1;
  uint64_t bytes = 0;
  OpId first_step = 0;   // live during [first_step, last_step], inclusive
  OpId last_step = 0;
  std::vector<TensorId> tensors;  // tensors stored here; empty for op scratch
  OpId scratch_of = kNoOp;        // the op whose scratch this is, or kNoOp
  // 0: the plan's alignment. Else this buffer's offset is a multiple of it (a power of two): 4 KiB
  // for the blocks of tensors that the SSD tier moves with direct I/O straight from device memory
  // (schedule/placement.h). Its size is still rounded to the plan's alignment only.
  uint64_t offset_alignment = 0;
};

// The order in which the greedy planner visits buffers. No order is best on every graph, so
// plan_memory_sharing() tries several.
enum class PlacementOrder : uint8_t {
  kSizeDesc,      // largest first; ties: longer lifetime, then earlier start
  kStartOrder,    // by first step, larger first within a step (what an online best-fit allocator sees)
  kReverseOrder,  // by last step, latest first, larger first within a step (start order run backwards)
  kLifetimeDesc,  // longest lifetime first; ties: larger, then earlier start
};
// How a placement was found, in terms that outlive buffer indices: the visiting order and the
// buffers promoted to its front (Note [Promoting the buffer on top] in sharing_plan.cc), each named
// by buffer_key(). A planner that places many similar programs in a row (a polish changing one
// decision at a time) passes the placement of its last accepted plan as the start of the next
// search (Note [Warm start]); the plan carries the hint it was placed with, so that every later
// placement of it (simulator, executor) searches from the same start.
struct PlacementHint {
  PlacementOrder order{};
  std::vector<uint64_t> promoted;  // buffer_key of each promoted buffer, in visiting order
  // Nothing the search without a hint would not try first: no promotions, the first default order.
  bool empty() const { return promoted.empty() && order == PlacementOrder::kSizeDesc; }
  bool operator==(const PlacementHint&) const = default;
};

struct MemoryPlan {
  std::vector<uint64_t> offsets;  // offset of each Buffer inside the arena
  uint64_t arena_bytes = 0;       // end of the highest placed buffer, aligned
  uint64_t alignment = 64;
  PlacementHint how;              // the sequence that produced these offsets
};

// A name for a buffer that stays the same when the program around it changes: its first tensor
// (or the op whose scratch it is) and its first step; distinct for distinct (owner, step) below
// 2^30 steps. Keys only guide a search: two buffers that shared one would be visited in an order
// still valid, only not the hinted one.
uint64_t buffer_key(const Buffer& b);

inline constexpr std::array<PlacementOrder, 4> kAllPlacementOrders = {
    PlacementOrder::kSizeDesc, PlacementOrder::kStartOrder, PlacementOrder::kReverseOrder,
    PlacementOrder::kLifetimeDesc};
// The orders plan_memory_sharing() tries. Longest-lifetime-first is left out: on the model zoo it
// never beats the others, and the scattered layouts it builds make its queries ~10x slower
// (0.75 s against 0.05 s on pre-activation ResNet-1001).
inline constexpr std::array<PlacementOrder, 3> kDefaultPlacementOrders = {
    PlacementOrder::kSizeDesc, PlacementOrder::kStartOrder, PlacementOrder::kReverseOrder};

std::string_view to_string(PlacementOrder order);

// Places the buffers one by one in `order`, each at the smallest gap (best fit) left by the
// already-placed buffers whose lifetimes overlap its own, or on top of them when no gap fits.
// Requires first_step <= last_step for every buffer and a power-of-two alignment.
MemoryPlan place_buffers(const std::vector<Buffer>& buffers, uint64_t alignment, PlacementOrder order);

// Runs place_buffers() for each of kDefaultPlacementOrders and keeps the smallest arena (the
// earliest order on ties); stops early once an order reaches aligned_live_lower_bound(), which no
// plan can beat, or `good_enough_bytes` (a caller asking only whether the buffers fit in that
// much: planners probing a budget). The full search never returns a larger arena than the early
// answer, so "fits" stays true for whoever places the same buffers without the shortcut.
// Without `refine`, only the orders are tried (no Note [Promoting the buffer on top] rounds): a
// larger arena at times, for a fraction of the time (a caller that may reject what does not fit
// at once, such as a planner's polish trying many small changes). Without `refine` and with
// `good_enough_bytes`, an order is also abandoned as soon as its arena passes good_enough_bytes:
// the answer fits exactly when the full search of the orders would fit, but an arena above
// good_enough_bytes is then only a lower bound of what the buffers need (with offsets for part of
// them): good for "does not fit", not for "needs this much".
// With a non-empty `hint` (Note [Warm start]), the hinted sequence is placed first and the
// promotion rounds of the hint's order continue from it; without `refine`, the sequence of a hint
// that is an order alone is the whole search. A caller with a budget still gets an arena no larger
// than the full search with that hint would (its search is a prefix of the full one).
MemoryPlan plan_memory_sharing(const std::vector<Buffer>& buffers, uint64_t alignment,
                               uint64_t good_enough_bytes = 0, bool refine = true,
                               const PlacementHint* hint = nullptr);

// Max over steps of the summed sizes, each rounded up to `alignment`, of the buffers live at that
// step. With aligned offsets no arena can be smaller (two aligned buffers cannot share a padding
// tail), so this is the bound the planner is judged against.
uint64_t aligned_live_lower_bound(const std::vector<Buffer>& buffers, uint64_t alignment);


// Verifies an offset plan: every buffer placed, aligned (to its own offset_alignment too), inside
// arena_bytes, and no two buffers
// whose lifetimes overlap share any byte. Returns InvalidArgument naming the first conflict.
Status check_memory_plan(const std::vector<Buffer>& buffers, const MemoryPlan& plan);
// The same, naming tensors and scratch owners by their names in `g`.
Status check_memory_plan(const Graph& g, const std::vector<Buffer>& buffers, const MemoryPlan& plan);

}  // namespace ferry
