// StepTree: live bytes per step under range updates, with the peak and where it is, in O(log n)
// (a segment tree with lazy range add and range max). The Ferry planner keeps its memory profile
// in one: every decision frees (or holds) a tensor's bytes over an interval of steps.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ferry::planner {
using std::size_t;

class StepTree {
 public:
  explicit StepTree(const std::vector<int64_t>& values) : n_(values.size()) {
    size_ = 1;
    while (size_ < n_) size_ *= 2;
    max_.assign(2 * size_, kMinusInf);
    lazy_.assign(2 * size_, 0);
    for (size_t i = 0; i < n_; ++i) max_[size_ + i] = values[i];
    for (size_t i = size_ - 1; i >= 1; --i) max_[i] = std::max(max_[2 * i], max_[2 * i + 1]);
  }

  size_t size() const { return n_; }
  // Adds `delta` to every step in [first, last] (inclusive; nothing when first > last).
  void add(int64_t first, int64_t last, int64_t delta) {
    if (first > last || n_ == 0) return;
    add(1, 0, size_ - 1, static_cast<size_t>(std::max<int64_t>(first, 0)),
        static_cast<size_t>(std::min<int64_t>(last, static_cast<int64_t>(n_) - 1)), delta);
  }
  // The largest value in [first, last].
  int64_t max(int64_t first, int64_t last) const {
    if (first > last || n_ == 0) return kMinusInf;
    return max(1, 0, size_ - 1, static_cast<size_t>(std::max<int64_t>(first, 0)),
               static_cast<size_t>(std::min<int64_t>(last, static_cast<int64_t>(n_) - 1)));
  }
  int64_t peak() const { return max_[1]; }
  // The first step holding the peak.
  size_t peak_step() const {
    size_t node = 1, lo = 0, hi = size_ - 1;
    int64_t carry = 0;
    while (lo != hi) {
      carry += lazy_[node];
      const size_t mid = (lo + hi) / 2;
      if (max_[2 * node] + carry == max_[1]) {
        node = 2 * node;
        hi = mid;
      } else {
        node = 2 * node + 1;
        lo = mid + 1;
      }
    }
    return lo;
  }
  int64_t at(size_t step) const { return max(static_cast<int64_t>(step), static_cast<int64_t>(step)); }

 private:
  static constexpr int64_t kMinusInf = INT64_MIN / 4;
  void add(size_t node, size_t lo, size_t hi, size_t first, size_t last, int64_t delta) {
    if (last < lo || hi < first) return;
    if (first <= lo && hi <= last) {
      max_[node] += delta;
      lazy_[node] += delta;
      return;
    }
    const size_t mid = (lo + hi) / 2;
    add(2 * node, lo, mid, first, last, delta);
    add(2 * node + 1, mid + 1, hi, first, last, delta);
    max_[node] = std::max(max_[2 * node], max_[2 * node + 1]) + lazy_[node];
  }
  int64_t max(size_t node, size_t lo, size_t hi, size_t first, size_t last) const {
    if (last < lo || hi < first) return kMinusInf;
    if (first <= lo && hi <= last) return max_[node];
    const size_t mid = (lo + hi) / 2;
    return std::max(max(2 * node, lo, mid, first, last), max(2 * node + 1, mid + 1, hi, first, last)) + lazy_[node];
  }

  size_t n_ = 0, size_ = 1;
  std::vector<int64_t> max_, lazy_;  // max_[node] includes lazy_[node] but not its ancestors'
};

}  // namespace ferry::planner
