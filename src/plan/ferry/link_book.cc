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

size_t LinkBook::open_bucket(size_t i, bool forward) const {
  // Follows the direction's pointers over full buckets; bounded by n to stop on a full link.
  std::vector<size_t>& skip = forward ? next_ : prev_;
  const size_t step = forward ? 1 : n_ - 1;  // to the neighbour in that direction, cyclic
  auto hop = [&](size_t k) { return skip[k] == k ? (k + step) % n_ : skip[k]; };
  size_t root = i;
  for (size_t hops = 0; hops <= n_ && left_[root] <= kEpsilonUs; ++hops) root = hop(root);
  for (size_t k = i; k != root && left_[k] <= kEpsilonUs;) {  // path compression
    const size_t nxt = hop(k);
    skip[k] = root;
    k = nxt;
  }
  return root;
}

// Distance from `a` to `b` going forward (cyclic).
static size_t forward_distance(size_t a, size_t b, size_t n) { return b >= a ? b - a : b + n - a; }

LinkBook::Booking LinkBook::book(size_t at, size_t max_buckets, double us, bool partial, bool forward) const {
  Booking b;
  if (n_ == 0 || max_buckets == 0) {
    if (partial) {
      b.ok = true;
      b.first = b.last = at % std::max<size_t>(n_, 1);
      b.remainder_us = us;
    }
    return b;
  }
  at %= n_;
  // `near`: the bucket the booking starts from; `far`: the one it reached (forward: first, last).
  size_t& near = forward ? b.first : b.last;
  size_t& far = forward ? b.last : b.first;
  near = far = at;
  double need = us;
  size_t i = at;
  size_t span = 0;  // buckets from `at` to i
  while (need > kEpsilonUs) {
    const size_t j = open_bucket(i, forward);
    span += forward ? forward_distance(i, j, n_) : forward_distance(j, i, n_);
    if (span >= max_buckets || left_[j] <= kEpsilonUs) {
      if (!partial) return Booking{};
      b.remainder_us = need;
      break;
    }
    const double take = std::min(left_[j], need);
    b.parts.emplace_back(j, take);
    need -= take;
    far = j;
    if (need <= kEpsilonUs) break;
    i = forward ? (j + 1) % n_ : (j + n_ - 1) % n_;
    ++span;
  }
  b.ok = true;
  if (!b.parts.empty()) near = b.parts.front().first;
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
