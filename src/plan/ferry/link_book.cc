#include "plan/ferry/link_book.h"

#include <algorithm>

namespace ferry::planner {

namespace {
constexpr double kEpsilonUs = 1e-9;
}

LinkBook::LinkBook(const std::vector<double>& step_us) : n_(step_us.size()), capacity_(step_us), left_(step_us) {
  next_.resize(n_);
  prev_.resize(n_);
  for (size_t i = 0; i < n_; ++i) next_[i] = prev_[i] = i;
}

size_t LinkBook::next_open(size_t i) const {
  // Follows next_ pointers over full buckets; bounded by n to stop on a full link.
  size_t root = i;
  for (size_t hops = 0; hops <= n_ && left_[root] <= kEpsilonUs; ++hops) {
    const size_t nxt = next_[root] == root ? (root + 1) % n_ : next_[root];
    root = nxt;
  }
  for (size_t k = i; k != root && left_[k] <= kEpsilonUs;) {  // path compression
    const size_t nxt = next_[k] == k ? (k + 1) % n_ : next_[k];
    next_[k] = root;
    k = nxt;
  }
  return root;
}

size_t LinkBook::prev_open(size_t i) const {
  size_t root = i;
  for (size_t hops = 0; hops <= n_ && left_[root] <= kEpsilonUs; ++hops) {
    const size_t prv = prev_[root] == root ? (root + n_ - 1) % n_ : prev_[root];
    root = prv;
  }
  for (size_t k = i; k != root && left_[k] <= kEpsilonUs;) {
    const size_t prv = prev_[k] == k ? (k + n_ - 1) % n_ : prev_[k];
    prev_[k] = root;
    k = prv;
  }
  return root;
}

// Distance from `a` to `b` going forward (cyclic).
static size_t forward_distance(size_t a, size_t b, size_t n) { return b >= a ? b - a : b + n - a; }

LinkBook::Booking LinkBook::book_forward(size_t from, size_t max_buckets, double us, bool partial) const {
  Booking b;
  if (n_ == 0 || max_buckets == 0) {
    if (partial) {
      b.ok = true;
      b.first = b.last = from % std::max<size_t>(n_, 1);
      b.remainder_us = us;
    }
    return b;
  }
  from %= n_;
  b.first = from;
  b.last = from;
  double need = us;
  size_t i = from;
  size_t span = 0;  // buckets from `from` to i
  while (need > kEpsilonUs) {
    const size_t j = next_open(i);
    span += forward_distance(i, j, n_);
    if (span >= max_buckets || left_[j] <= kEpsilonUs) {
      if (!partial) return Booking{};
      b.remainder_us = need;
      break;
    }
    const double take = std::min(left_[j], need);
    b.parts.emplace_back(j, take);
    need -= take;
    b.last = j;
    if (need <= kEpsilonUs) break;
    i = (j + 1) % n_;
    ++span;
  }
  b.ok = true;
  if (!b.parts.empty()) b.first = b.parts.front().first;
  return b;
}

LinkBook::Booking LinkBook::book_backward(size_t to, size_t max_buckets, double us, bool partial) const {
  Booking b;
  if (n_ == 0 || max_buckets == 0) {
    if (partial) {
      b.ok = true;
      b.first = b.last = to % std::max<size_t>(n_, 1);
      b.remainder_us = us;
    }
    return b;
  }
  to %= n_;
  b.first = to;
  b.last = to;
  double need = us;
  size_t i = to;
  size_t span = 0;
  while (need > kEpsilonUs) {
    const size_t j = prev_open(i);
    span += forward_distance(j, i, n_);
    if (span >= max_buckets || left_[j] <= kEpsilonUs) {
      if (!partial) return Booking{};
      b.remainder_us = need;
      break;
    }
    const double take = std::min(left_[j], need);
    b.parts.emplace_back(j, take);
    need -= take;
    b.first = j;
    if (need <= kEpsilonUs) break;
    i = (j + n_ - 1) % n_;
    ++span;
  }
  b.ok = true;
  if (!b.parts.empty()) b.last = b.parts.front().first;
  return b;
}

void LinkBook::commit(const Booking& b) {
  for (auto [bucket, us] : b.parts) left_[bucket] = std::max(0.0, left_[bucket] - us);
}

void LinkBook::cancel(const Booking& b) {
  for (auto [bucket, us] : b.parts) left_[bucket] = std::min(capacity_[bucket], left_[bucket] + us);
}

double LinkBook::utilisation() const {
  double cap = 0, used = 0;
  for (size_t i = 0; i < n_; ++i) {
    cap += capacity_[i];
    used += capacity_[i] - left_[i];
  }
  return cap > 0 ? used / cap : 0;
}

}  // namespace ferry::planner
