// CandidateIndex: the planner's candidates (intervals of steps in which a tensor could leave the
// device), queried by a step: "the best candidate whose interval contains step s". A segment tree
// over steps whose nodes hold min-heaps of (key, id, version); an interval is stored in the
// O(log n) nodes that cover it, a query walks the O(log n) nodes on the path to its step. Entries
// are never removed eagerly: a candidate whose version changed (decided, re-keyed, skipped) is
// dropped when it reaches a heap's top.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <queue>
#include <vector>

namespace ferry::planner {
using std::size_t;

struct CandidateKey {
  double score = 0;      // lower is better (estimated microseconds per byte freed)
  uint64_t bytes = 0;    // ties: more bytes first
  bool operator<(const CandidateKey& o) const { return score != o.score ? score < o.score : bytes > o.bytes; }
};

class CandidateIndex {
 public:
  explicit CandidateIndex(size_t steps) : n_(steps) {
    size_ = 1;
    while (size_ < n_) size_ *= 2;
    heaps_.resize(2 * size_);
  }

  // Stores candidate `id` (at `version`) for every step in [first, last].
  void insert(int id, int version, int64_t first, int64_t last, CandidateKey key) {
    if (first > last || n_ == 0) return;
    insert(1, 0, size_ - 1, static_cast<size_t>(first), static_cast<size_t>(last), Entry{key, id, version});
  }

  // The best current entry containing `step`; `current(id, version)` says whether an entry is
  // still valid (invalid ones are discarded on the way).
  std::optional<std::pair<CandidateKey, int>> best(size_t step, const std::function<bool(int, int)>& current) {
    std::optional<std::pair<CandidateKey, int>> out;
    size_t node = 1, lo = 0, hi = size_ - 1;
    for (;;) {
      auto& heap = heaps_[node];
      while (!heap.empty() && !current(heap.top().id, heap.top().version)) heap.pop();
      if (!heap.empty() && (!out || heap.top().key < out->first || (!(out->first < heap.top().key) && heap.top().id < out->second)))
        out = std::make_pair(heap.top().key, heap.top().id);
      if (lo == hi) break;
      const size_t mid = (lo + hi) / 2;
      if (step <= mid) {
        node = 2 * node;
        hi = mid;
      } else {
        node = 2 * node + 1;
        lo = mid + 1;
      }
    }
    return out;
  }

 private:
  struct Entry {
    CandidateKey key;
    int id = 0;
    int version = 0;
    bool operator>(const Entry& o) const {
      if (key < o.key) return false;
      if (o.key < key) return true;
      return id > o.id;
    }
  };
  void insert(size_t node, size_t lo, size_t hi, size_t first, size_t last, const Entry& e) {
    if (last < lo || hi < first) return;
    if (first <= lo && hi <= last) {
      heaps_[node].push(e);
      return;
    }
    const size_t mid = (lo + hi) / 2;
    insert(2 * node, lo, mid, first, last, e);
    insert(2 * node + 1, mid + 1, hi, first, last, e);
  }

  size_t n_ = 0, size_ = 1;
  std::vector<std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>>> heaps_;
};

}  // namespace ferry::planner
