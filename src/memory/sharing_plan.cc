// Static memory-sharing planner (greedy best fit over lifetimes).
//
// Design
// - Offline placement, as in TVM's and MXNet's planners: every lifetime is known before anything
//   is placed. Buffers are visited in some order; each goes to the smallest gap, among the byte
//   ranges held by already-placed buffers whose lifetimes overlap its own, that fits it (best
//   fit), or on top of them. Offsets and sizes are rounded up to the alignment, so every gap
//   boundary is aligned and "fits" is a plain comparison.
// - The costly part is the conflict query. In a deep network a saved activation overlaps thousands
//   of others (every activation saved for backward is live at the turn from forward to backward),
//   so enumerating conflicting buffers per query is quadratic. We never enumerate them: an
//   occupancy tree over steps keeps *unions* of occupied byte ranges (Note [Occupancy tree]), and
//   a query unites O(log steps) short range lists. Adjacent placed buffers coalesce into one
//   range, so the lists stay short exactly when the packing is good: on pre-activation
//   ResNet-1001 (9k buffers) a query in start order unites 55-85 ranges and a whole placement
//   takes ~0.05 s; in size order the packing is looser (~630 ranges from ~22 lists a query with
//   a budget's swaps and recomputes, 14k buffers).
//   Longest-lifetime-first scatters buffers (~2000 ranges a query, 15x slower), one reason it is
//   not among the default orders.
// - No order wins on every graph: size-descending packs big feature maps first; start order is
//   what an online allocator would do, and it follows the first-in-last-out stack of saved
//   activations; reverse order does the same from the end of the iteration, which suits graphs
//   whose backward pass is the crowded part. plan_memory_sharing() tries each and keeps the
//   smallest, then, if that is not within 0.4% of the lower bound, refines the time-ordered
//   sequences (Note [Promoting the buffer on top]).
//
// Note [Promoting the buffer on top]
//   Placement in time order fails in one typical way: a buffer arrives when the bytes below the
//   current top are cut into holes too small for it, so it lands on top and sets the arena size.
//   Visiting it first instead reserves it a place at the bottom, and the others fit around it.
//   Refinement repeats that move: rotate the buffer that ends highest to the front of the
//   sequence, place everything again, keep the best plan seen. It helps the time-ordered
//   sequences (size-descending already visits large buffers first); on the model zoo at batch 1
//   it takes BERT-base from 2.7% above the bound to 0.01%. Each round is a full placement, so
//   rounds are capped by a budget of buffer placements, which keeps large graphs fast.
//
// Note [Warm start]
//   A planner's polish places hundreds of programs that differ from its current plan by one
//   decision. When that plan fitted only after promotions, each fresh search repeats them (a full
//   placement per round) and, as often as not, misses the budget by a fraction of a percent where
//   the plan's own sequence would have fitted. A hint names the plan's sequence: its order and its
//   promoted buffers by buffer_key(). The hinted sequence (the promoted buffers still present,
//   then the others in the order's sequence) is placed first; then the orders as without a hint,
//   and the promotion rounds of the hint's order continue from the hinted sequence. The search is
//   deterministic in (buffers, hint), and a caller with a budget stops at a prefix of the search a
//   caller without one makes, so whoever places the plan later with the same hint never gets a
//   larger arena.
//   A hint is an order alone where the plan fitted without promotions; it is used all the same
//   (only the first default order, which the search tries first anyway, makes a hint empty). A
//   caller that does not refine (the polish, which rejects a change that does not fit at once)
//   stops after the sequence of such a hint: the plan was placed in that order because the orders
//   before it had missed. Pre-activation ResNet-1001 (b16, 33%, A100 profile): 33 of 35 polish
//   placements missed the budget, each in all three orders, and none fitted in another order
//   than the hint's; with the hint's order alone, the same plan in half the planning time
//   (10.7 -> 5.3 s, measured side by side). A hint with promotions is followed by the orders as
//   before: stopping there too made H100 GPT-2 XL at 33% 0.25% slower.
//
// Note [Occupancy tree]
//   A segment tree over steps; node v covers a range of steps R(v). Each node keeps two sets of
//   disjoint byte ranges:
//     stored(v): ranges of buffers whose lifetime's canonical decomposition contains v (their
//                lifetime covers all of R(v));
//     below(v):  contains stored(u) for every u in v's subtree, and only ranges of buffers whose
//                lifetime intersects R(v).
//   Adding buffer X with lifetime [a, b] inserts its range into stored and below of its canonical
//   nodes, and into below of every node on the leaf-to-root paths of a and b (those nodes contain
//   a or b, so X intersects them; the ancestors of all canonical nodes lie on these two paths).
//   The bytes occupied at some step of a query [a, b] are exactly
//     union of below(c) over the canonical nodes c of [a, b]
//     union of stored(p) over the nodes p on the leaf-to-root paths of a and b.
//   Completeness: a placed X overlapping [a, b] at step s has a canonical node d containing s, and
//   so does the query (node c). Either d is in c's subtree (X is in below(c)), or d is a strict
//   ancestor of c; canonical nodes are maximal, so d is not inside [a, b] yet intersects it, hence
//   contains a or b and lies on one of the two paths (X is in stored(d)). Soundness follows from
//   the two invariants. Each add and query touches O(log steps) nodes.

#include "memory/sharing_plan.h"

#include <algorithm>
#include <array>
#include <bit>
#include <limits>
#include <numeric>
#include <optional>

#include "common/units.h"

namespace ferry {

namespace {

// Refinement runs only when the arena is not within bound/256 (0.4%) of the lower bound; per
// order it spends at most kPromotionBudget buffer placements and kMaxPromotionRounds full
// placements, and gives up after kMaxStalledRounds rounds without a smaller arena.
constexpr uint64_t kGoodEnoughDivisor = 256;
constexpr size_t kPromotionBudget = 32768;
constexpr size_t kMaxPromotionRounds = 32;
constexpr size_t kMaxStalledRounds = 8;

struct ByteRange {
  uint64_t lo = 0;  // first byte
  uint64_t hi = 0;  // one past the last byte
};

// A union of byte ranges kept as sorted, disjoint, non-touching ranges.
class RangeSet {
 public:
  // Unites [lo, hi) into the set, coalescing with every range it overlaps or touches.
  void add(ByteRange r) {
    // First range that ends at or after r.lo: everything before it lies strictly below r.
    auto first = std::lower_bound(ranges_.begin(), ranges_.end(), r.lo,
                                  [](const ByteRange& x, uint64_t lo) { return x.hi < lo; });
    auto last = first;
    while (last != ranges_.end() && last->lo <= r.hi) {
      r.lo = std::min(r.lo, last->lo);
      r.hi = std::max(r.hi, last->hi);
      ++last;
    }
    if (first == last) {
      ranges_.insert(first, r);
    } else {
      *first = r;
      ranges_.erase(first + 1, last);
    }
  }

  const std::vector<ByteRange>& ranges() const { return ranges_; }
  void clear() { ranges_.clear(); }

 private:
  std::vector<ByteRange> ranges_;
};

// See Note [Occupancy tree].
class OccupancyTree {
 public:
  explicit OccupancyTree(size_t num_steps)
      : leaves_(std::bit_ceil(std::max<size_t>(num_steps, 1))), stored_(2 * leaves_), below_(2 * leaves_) {}

  // Empties every node and keeps the ranges' storage: plan_memory_sharing() places the same
  // buffers many times, and allocating the nodes' lists anew each time was a tenth of its time.
  void clear() {
    for (RangeSet& s : stored_) s.clear();
    for (RangeSet& s : below_) s.clear();
  }

  // Marks `r` occupied during steps [first, last].
  void add(size_t first, size_t last, ByteRange r) {
    for (size_t lo = first + leaves_, hi = last + leaves_ + 1; lo < hi; lo >>= 1, hi >>= 1) {
      if (lo & 1) {
        stored_[lo].add(r);
        below_[lo++].add(r);
      }
      if (hi & 1) {
        stored_[--hi].add(r);
        below_[hi].add(r);
      }
    }
    size_t a = first + leaves_, b = last + leaves_;
    for (; a != b; a >>= 1, b >>= 1) {
      below_[a].add(r);
      below_[b].add(r);
    }
    for (; a >= 1; a >>= 1) below_[a].add(r);
  }

  // Appends every range occupied at some step of [first, last]: O(log steps) runs, each sorted by
  // lo (one RangeSet), possibly overlapping each other. `runs` receives where each run ends.
  void collect(size_t first, size_t last, std::vector<ByteRange>& out, std::vector<size_t>& runs) const {
    auto append = [&out, &runs](const RangeSet& s) {
      if (s.ranges().empty()) return;
      out.insert(out.end(), s.ranges().begin(), s.ranges().end());
      runs.push_back(out.size());
    };
    for (size_t lo = first + leaves_, hi = last + leaves_ + 1; lo < hi; lo >>= 1, hi >>= 1) {
      if (lo & 1) append(below_[lo++]);
      if (hi & 1) append(below_[--hi]);
    }
    size_t a = first + leaves_, b = last + leaves_;
    for (; a != b; a >>= 1, b >>= 1) {
      append(stored_[a]);
      append(stored_[b]);
    }
    for (; a >= 1; a >>= 1) append(stored_[a]);
  }

 private:
  size_t leaves_;
  std::vector<RangeSet> stored_;
  std::vector<RangeSet> below_;
};

size_t num_steps_of(const std::vector<Buffer>& buffers) {
  size_t n = 0;
  for (const Buffer& b : buffers) n = std::max(n, static_cast<size_t>(b.last_step) + 1);
  return n;
}

std::vector<size_t> visiting_order(const std::vector<Buffer>& buffers, PlacementOrder order) {
  std::vector<size_t> idx(buffers.size());
  std::iota(idx.begin(), idx.end(), size_t{0});
  auto length = [&](size_t i) { return buffers[i].last_step - buffers[i].first_step; };
  auto by = [&](auto&& less) { std::sort(idx.begin(), idx.end(), less); };
  switch (order) {
    case PlacementOrder::kSizeDesc:
      by([&](size_t x, size_t y) {
        const Buffer &a = buffers[x], &b = buffers[y];
        if (a.bytes != b.bytes) return a.bytes > b.bytes;
        if (length(x) != length(y)) return length(x) > length(y);
        if (a.first_step != b.first_step) return a.first_step < b.first_step;
        return x < y;
      });
      break;
    case PlacementOrder::kLifetimeDesc:
      by([&](size_t x, size_t y) {
        const Buffer &a = buffers[x], &b = buffers[y];
        if (length(x) != length(y)) return length(x) > length(y);
        if (a.bytes != b.bytes) return a.bytes > b.bytes;
        if (a.first_step != b.first_step) return a.first_step < b.first_step;
        return x < y;
      });
      break;
    case PlacementOrder::kStartOrder:
      by([&](size_t x, size_t y) {
        const Buffer &a = buffers[x], &b = buffers[y];
        if (a.first_step != b.first_step) return a.first_step < b.first_step;
        if (a.bytes != b.bytes) return a.bytes > b.bytes;
        return x < y;
      });
      break;
    case PlacementOrder::kReverseOrder:
      by([&](size_t x, size_t y) {
        const Buffer &a = buffers[x], &b = buffers[y];
        if (a.last_step != b.last_step) return a.last_step > b.last_step;
        if (a.bytes != b.bytes) return a.bytes > b.bytes;
        return x < y;
      });
      break;
  }
  return idx;
}

// Offset of the smallest gap in `occupied` (sorted by lo) that holds `size` bytes at an offset
// that is a multiple of `offset_alignment`, or the top of the occupied ranges (rounded up to it)
// when none does. All bounds are aligned to the plan's alignment, so with the plan's alignment
// gaps need no rounding; a larger offset_alignment starts its candidate at the gap's first multiple
// of it, and the gap is still measured whole (the bytes skipped are as lost as the ones left over).
uint64_t best_fit(const std::vector<ByteRange>& occupied, uint64_t size, uint64_t offset_alignment) {
  uint64_t cursor = 0;  // end of the ranges seen so far
  uint64_t best_offset = 0, best_gap = std::numeric_limits<uint64_t>::max();
  bool found = false;
  for (const ByteRange& r : occupied) {
    if (r.lo > cursor) {
      const uint64_t gap = r.lo - cursor;
      const uint64_t start = align_up(cursor, offset_alignment);
      if (start < r.lo && r.lo - start >= size && gap < best_gap) {
        best_gap = gap;
        best_offset = start;
        found = true;
        if (gap == size) break;  // an exact fit cannot be beaten
      }
    }
    cursor = std::max(cursor, r.hi);
  }
  return found ? best_offset : align_up(cursor, offset_alignment);
}

// Appends the union of two sets of sorted, disjoint ranges to `out`, coalescing ranges that
// overlap or touch; returns the new end of `out`.
ByteRange* unite(const ByteRange* a, const ByteRange* a_end, const ByteRange* b, const ByteRange* b_end,
                 ByteRange* out) {
  ByteRange* const first = out;
  auto push = [&](const ByteRange& r) {
    if (out != first && (out - 1)->hi >= r.lo) {
      (out - 1)->hi = std::max((out - 1)->hi, r.hi);
    } else {
      *out++ = r;
    }
  };
  while (a != a_end && b != b_end) push(a->lo <= b->lo ? *a++ : *b++);
  while (a != a_end) push(*a++);
  while (b != b_end) push(*b++);
  return out;
}

// Replaces `v`, the concatenation of sets of sorted, disjoint ranges ending at `runs`, by their
// union (sorted, disjoint, non-touching): pairwise unions through `scratch` (no allocation once it
// has grown). The runs of one query repeat each other a lot (a long-lived buffer is in the lists
// of several tree nodes), so every round of unions leaves less for the next; best_fit() sees the
// same gaps as in the plain merge.
void unite_runs(std::vector<ByteRange>& v, std::vector<size_t>& runs, std::vector<ByteRange>& scratch) {
  while (runs.size() > 1) {
    scratch.resize(v.size());
    size_t kept = 0, begin = 0;
    const ByteRange* at = v.data();
    ByteRange* out = scratch.data();
    for (size_t k = 0; k < runs.size(); k += 2) {
      const size_t mid = runs[k], end = k + 1 < runs.size() ? runs[k + 1] : runs[k];
      out = unite(at + begin, at + mid, at + mid, at + end, out);
      runs[kept++] = static_cast<size_t>(out - scratch.data());
      begin = end;
    }
    runs.resize(kept);
    scratch.resize(runs.back());
    v.swap(scratch);
  }
}

// Places a set of buffers, best fit, in any number of visiting orders; the occupancy tree's
// storage and the query's scratch lists are reused from one placement to the next.
class Placer {
 public:
  Placer(const std::vector<Buffer>& buffers, uint64_t alignment)
      : buffers_(buffers), alignment_(alignment), tree_(num_steps_of(buffers)) {
    FERRY_CHECK(alignment > 0 && std::has_single_bit(alignment), "alignment {} is not a power of two", alignment);
  }

  // Places the buffers one by one in `sequence` (a permutation of buffer indices). Once the arena
  // exceeds `give_up_above` the placement stops there: the rest cannot make it smaller, so the
  // arena so far is already too large for a caller asking only whether the buffers fit in that
  // much (the plan then has offsets for a prefix of the sequence only; see plan_memory_sharing).
  MemoryPlan place(const std::vector<size_t>& sequence,
                   uint64_t give_up_above = std::numeric_limits<uint64_t>::max()) {
    MemoryPlan plan;
    plan.alignment = alignment_;
    plan.offsets.assign(buffers_.size(), 0);
    if (used_) tree_.clear();
    used_ = true;
    for (size_t i : sequence) {
      const Buffer& b = buffers_[i];
      FERRY_CHECK(b.first_step >= 0 && b.first_step <= b.last_step, "buffer {} has lifetime [{}, {}]", b.id,
                  b.first_step, b.last_step);
      if (b.bytes == 0) continue;  // occupies nothing; offset 0 conflicts with no one
      const uint64_t size = align_up(b.bytes, alignment_);
      occupied_.clear();
      runs_.clear();
      tree_.collect(static_cast<size_t>(b.first_step), static_cast<size_t>(b.last_step), occupied_, runs_);
      unite_runs(occupied_, runs_, scratch_);
      const uint64_t offset = best_fit(occupied_, size, std::max(alignment_, b.offset_alignment));
      plan.offsets[i] = offset;
      plan.arena_bytes = std::max(plan.arena_bytes, offset + size);
      if (plan.arena_bytes > give_up_above) break;
      tree_.add(static_cast<size_t>(b.first_step), static_cast<size_t>(b.last_step), {offset, offset + size});
    }
    return plan;
  }

 private:
  const std::vector<Buffer>& buffers_;
  const uint64_t alignment_;
  OccupancyTree tree_;
  bool used_ = false;
  std::vector<ByteRange> occupied_, scratch_;
  std::vector<size_t> runs_;
};

// The hinted sequence: the promoted buffers present in `buffers`, in the hint's order, then the
// rest in the hint's visiting order (exactly the sequence that the promotions had built).
// `present` receives the hint of that sequence: the promoted keys found.
std::vector<size_t> hinted_sequence(const std::vector<Buffer>& buffers, const PlacementHint& hint,
                                    PlacementHint& present) {
  std::vector<size_t> base = visiting_order(buffers, hint.order);
  std::vector<std::pair<uint64_t, size_t>> by_key(buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) by_key[i] = {buffer_key(buffers[i]), i};
  std::sort(by_key.begin(), by_key.end());
  std::vector<size_t> sequence;
  std::vector<bool> taken(buffers.size(), false);
  for (uint64_t key : hint.promoted) {
    auto it = std::lower_bound(by_key.begin(), by_key.end(), std::pair<uint64_t, size_t>{key, 0});
    if (it == by_key.end() || it->first != key || taken[it->second]) continue;
    taken[it->second] = true;
    sequence.push_back(it->second);
    present.promoted.push_back(key);
  }
  present.order = hint.order;
  for (size_t i : base)
    if (!taken[i]) sequence.push_back(i);
  return sequence;
}

// The buffer whose aligned end is highest in `plan` (the lowest index among equals).
size_t highest_buffer(const std::vector<Buffer>& buffers, const MemoryPlan& plan) {
  size_t top = 0;
  uint64_t top_end = 0;
  for (size_t i = 0; i < buffers.size(); ++i) {
    const uint64_t end = plan.offsets[i] + align_up(buffers[i].bytes, plan.alignment);
    if (buffers[i].bytes > 0 && end > top_end) {
      top = i;
      top_end = end;
    }
  }
  return top;
}

}  // namespace

uint64_t buffer_key(const Buffer& b) {
  const uint64_t owner = !b.tensors.empty()      ? static_cast<uint64_t>(static_cast<uint32_t>(b.tensors.front()))
                         : b.scratch_of != kNoOp ? (uint64_t{1} << 32) | static_cast<uint32_t>(b.scratch_of)
                                                 : (uint64_t{2} << 32) | static_cast<uint32_t>(b.id);
  // owner < 2^34 (two bits of kind, 32 of id) above a 30-bit step: distinct for every pair of
  // buffers of a graph with fewer than 2^30 steps (an XOR of owner << 24 with the step, before,
  // made buffers collide from 2^24 steps on).
  constexpr uint64_t kStepBits = 30;
  const uint64_t step = static_cast<uint64_t>(static_cast<uint32_t>(b.first_step)) & ((uint64_t{1} << kStepBits) - 1);
  return (owner << kStepBits) | step;
}

std::string_view to_string(PlacementOrder order) {
  switch (order) {
    case PlacementOrder::kSizeDesc: return "size-desc";
    case PlacementOrder::kLifetimeDesc: return "lifetime-desc";
    case PlacementOrder::kStartOrder: return "start-order";
    case PlacementOrder::kReverseOrder: return "reverse-order";
  }
  return "?";
}

MemoryPlan place_buffers(const std::vector<Buffer>& buffers, uint64_t alignment, PlacementOrder order) {
  MemoryPlan plan = Placer(buffers, alignment).place(visiting_order(buffers, order));
  plan.how.order = order;
  return plan;
}

MemoryPlan plan_memory_sharing(const std::vector<Buffer>& buffers, uint64_t alignment, uint64_t good_enough_bytes,
                               bool refine, const PlacementHint* hint) {
  const uint64_t bound = std::max(aligned_live_lower_bound(buffers, alignment), good_enough_bytes);
  Placer placer(buffers, alignment);
  // Without refinement, a caller with a budget learns only whether the buffers fit: an order is
  // abandoned as soon as its arena passes the budget (the partial arena is already too large, and
  // is what this returns when no order fits).
  const uint64_t give_up_above =
      !refine && good_enough_bytes > 0 ? good_enough_bytes : std::numeric_limits<uint64_t>::max();
  // See Note [Warm start]: the hinted sequence first.
  std::optional<MemoryPlan> hinted;
  std::vector<size_t> hinted_order;
  if (hint != nullptr && !hint->empty()) {
    PlacementHint present;
    hinted_order = hinted_sequence(buffers, *hint, present);
    hinted = placer.place(hinted_order, give_up_above);
    hinted->how = std::move(present);
    if (hinted->arena_bytes <= bound) return *hinted;
    // A caller that rejects what does not fit at once (no refinement), with a hint that is an
    // order alone: stop (Note [Warm start]).
    if (!refine && hinted->how.promoted.empty()) return *hinted;
  }
  std::array<MemoryPlan, kDefaultPlacementOrders.size()> plans;
  size_t best = 0;
  for (size_t k = 0; k < plans.size(); ++k) {
    if (hinted && hinted->how.promoted.empty() && hinted->how.order == kDefaultPlacementOrders[k]) {
      plans[k] = *hinted;  // the hint is this order alone: already placed
    } else {
      plans[k] = placer.place(visiting_order(buffers, kDefaultPlacementOrders[k]), give_up_above);
      plans[k].how = {kDefaultPlacementOrders[k], {}};
    }
    if (plans[k].arena_bytes < plans[best].arena_bytes) best = k;
    if (plans[best].arena_bytes <= bound) return plans[best];  // optimal: nothing can do better
  }
  MemoryPlan refined = hinted && hinted->arena_bytes < plans[best].arena_bytes ? *hinted : plans[best];
  if (!refine || refined.arena_bytes - bound <= bound / kGoodEnoughDivisor) return refined;

  // See Note [Promoting the buffer on top].
  const size_t rounds = std::min(kMaxPromotionRounds, kPromotionBudget / std::max<size_t>(buffers.size(), 1));
  for (size_t k = 0; k < plans.size(); ++k) {
    const PlacementOrder order = kDefaultPlacementOrders[k];
    if (order != PlacementOrder::kStartOrder && order != PlacementOrder::kReverseOrder) continue;
    const bool from_hint = hinted && hint->order == order;
    std::vector<size_t> sequence = from_hint ? hinted_order : visiting_order(buffers, order);
    MemoryPlan plan = from_hint ? *hinted : plans[k];
    uint64_t order_best = plan.arena_bytes;
    for (size_t round = 0, stalled = 0; round < rounds && stalled < kMaxStalledRounds; ++round) {
      const size_t top_buffer = highest_buffer(buffers, plan);
      const auto top = std::find(sequence.begin(), sequence.end(), top_buffer);
      std::rotate(sequence.begin(), top, top + 1);
      PlacementHint how = plan.how;
      const uint64_t key = buffer_key(buffers[top_buffer]);
      std::erase(how.promoted, key);
      how.promoted.insert(how.promoted.begin(), key);
      plan = placer.place(sequence);
      plan.how = std::move(how);
      stalled = plan.arena_bytes < order_best ? 0 : stalled + 1;
      order_best = std::min(order_best, plan.arena_bytes);
      if (plan.arena_bytes < refined.arena_bytes) refined = plan;
      if (refined.arena_bytes <= bound) return refined;
    }
  }
  return refined;
}

uint64_t aligned_live_lower_bound(const std::vector<Buffer>& buffers, uint64_t alignment) {
  // Difference array: +size at the first step, -size one past the last.
  std::vector<uint64_t> delta(num_steps_of(buffers) + 1, 0);
  for (const Buffer& b : buffers) {
    if (b.bytes == 0) continue;
    const uint64_t size = align_up(b.bytes, alignment);
    delta[static_cast<size_t>(b.first_step)] += size;
    delta[static_cast<size_t>(b.last_step) + 1] -= size;  // wraps, and the running sum wraps back
  }
  uint64_t live = 0, peak = 0;
  for (size_t s = 0; s + 1 < delta.size(); ++s) {
    live += delta[s];
    peak = std::max(peak, live);
  }
  return peak;
}

}  // namespace ferry
