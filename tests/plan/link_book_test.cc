// LinkBook (the ferry planner's fluid model of a copy link) against a plain scan of its buckets.

#include "plan/ferry/link_book.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace ferry::planner {
namespace {

constexpr double kEps = 1e-9;

// What a booking must be, found by walking the window bucket by bucket: `left` is the time each
// bucket has left, the window the `max_buckets` buckets from `at` on (forward) or up to `at`
// (backward), cyclic.
LinkBook::Booking reference(const std::vector<double>& left, size_t at, size_t max_buckets, double us, bool partial,
                            bool forward) {
  const size_t n = left.size();
  LinkBook::Booking b;
  at %= n;
  b.first = b.last = at;
  double need = us;
  for (size_t d = 0; d < std::min(max_buckets, n) && need > kEps; ++d) {
    const size_t j = forward ? (at + d) % n : (at + n - d) % n;
    if (left[j] <= kEps) continue;
    const double take = std::min(left[j], need);
    b.parts.emplace_back(j, take);
    need -= take;
  }
  if (need > kEps) {
    if (!partial) return LinkBook::Booking{};
    b.remainder_us = need;
  }
  b.ok = true;
  if (!b.parts.empty()) {
    const size_t near = b.parts.front().first, far = b.parts.back().first;
    b.first = forward ? near : far;
    b.last = forward ? far : near;
  }
  return b;
}

void expect_same(const LinkBook::Booking& got, const LinkBook::Booking& want, const std::string& where) {
  ASSERT_EQ(got.ok, want.ok) << where;
  if (!want.ok) return;
  EXPECT_EQ(got.first, want.first) << where;
  EXPECT_EQ(got.last, want.last) << where;
  EXPECT_NEAR(got.remainder_us, want.remainder_us, 1e-6) << where;
  ASSERT_EQ(got.parts.size(), want.parts.size()) << where;
  for (size_t k = 0; k < want.parts.size(); ++k) {
    EXPECT_EQ(got.parts[k].first, want.parts[k].first) << where << " part " << k;
    EXPECT_NEAR(got.parts[k].second, want.parts[k].second, 1e-6) << where << " part " << k;
  }
}

TEST(LinkBook, ForwardBooksFromTheStepOnAndBackwardUpToIt) {
  LinkBook link({10, 10, 10, 10});
  const LinkBook::Booking out = link.book_forward(1, 4, 15);
  ASSERT_TRUE(out.ok);
  EXPECT_EQ(out.first, 1u);
  EXPECT_EQ(out.last, 2u);
  ASSERT_EQ(out.parts.size(), 2u);
  EXPECT_DOUBLE_EQ(out.parts[1].second, 5);
  link.commit(out);

  // Backward from bucket 2: its 5 us left, then bucket 1 is full, then bucket 0.
  const LinkBook::Booking in = link.book_backward(2, 4, 12);
  ASSERT_TRUE(in.ok);
  EXPECT_EQ(in.last, 2u);
  EXPECT_EQ(in.first, 0u);
  ASSERT_EQ(in.parts.size(), 2u);
  EXPECT_EQ(in.parts[1].first, 0u);
  EXPECT_DOUBLE_EQ(in.parts[1].second, 7);
  EXPECT_NEAR(link.utilisation(), 15.0 / 40, 1e-12);
}

TEST(LinkBook, WindowsWrapAroundTheIterationAndFailOrSplitWhenTooSmall) {
  LinkBook link({4, 4, 4});
  const LinkBook::Booking wrap = link.book_forward(2, 2, 6);  // bucket 2, then bucket 0 of the next iteration
  ASSERT_TRUE(wrap.ok);
  EXPECT_EQ(wrap.first, 2u);
  EXPECT_EQ(wrap.last, 0u);

  EXPECT_FALSE(link.book_forward(0, 2, 9).ok);  // two buckets hold 8
  const LinkBook::Booking part = link.book_backward(0, 2, 9, /*partial=*/true);
  ASSERT_TRUE(part.ok);
  EXPECT_NEAR(part.remainder_us, 1, 1e-12);
  EXPECT_EQ(part.first, 2u);
  EXPECT_EQ(part.last, 0u);

  const LinkBook::Booking none = link.book_forward(1, 0, 3, /*partial=*/true);
  ASSERT_TRUE(none.ok);
  EXPECT_TRUE(none.parts.empty());
  EXPECT_DOUBLE_EQ(none.remainder_us, 3);
}

// Random bookings, committed or not, both directions, against the plain scan; the skip pointers
// over full buckets must never change what is booked.
TEST(LinkBook, MatchesAPlainScanOfTheBuckets) {
  for (unsigned seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    const size_t n = 1 + rng() % 40;
    std::vector<double> left(n);
    for (double& x : left) x = rng() % 4 == 0 ? 0.0 : 1.0 + rng() % 50;
    LinkBook link(left);
    for (int k = 0; k < 300; ++k) {
      const bool forward = rng() % 2 == 0;
      const size_t at = rng() % (2 * n);
      const size_t window = rng() % (n + 1);
      const double us = 0.5 + rng() % 120;
      const bool partial = rng() % 3 == 0;
      const LinkBook::Booking got = forward ? link.book_forward(at, window, us, partial)
                                            : link.book_backward(at, window, us, partial);
      const std::string where = fmt::format("seed {} booking {} ({} from {} over {} buckets, {} us{})", seed, k,
                                            forward ? "forward" : "backward", at, window, us,
                                            partial ? ", partial" : "");
      expect_same(got, reference(left, at, window, us, partial, forward), where);
      if (got.ok && rng() % 2 == 0) {
        link.commit(got);
        for (auto [bucket, t] : got.parts) left[bucket] = std::max(0.0, left[bucket] - t);
      }
    }
  }
}

// After cancels a bucket may have time back that the skip pointers pass over (documented as
// conservative): a booking may then take less than it could, but never more than a bucket holds.
TEST(LinkBook, CancelGivesTimeBackAndNoBookingOverfillsABucket) {
  std::mt19937 rng(7);
  const size_t n = 16;
  const std::vector<double> capacity(n, 10);
  LinkBook link(capacity);
  std::vector<double> left = capacity;
  std::vector<LinkBook::Booking> held;
  for (int k = 0; k < 400; ++k) {
    if (!held.empty() && rng() % 3 == 0) {
      const size_t pick = rng() % held.size();
      link.cancel(held[pick]);
      for (auto [bucket, t] : held[pick].parts) left[bucket] = std::min(capacity[bucket], left[bucket] + t);
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(pick));
      continue;
    }
    const LinkBook::Booking b = rng() % 2 ? link.book_forward(rng() % n, 1 + rng() % n, 1 + rng() % 30)
                                          : link.book_backward(rng() % n, 1 + rng() % n, 1 + rng() % 30);
    if (!b.ok) continue;
    for (auto [bucket, t] : b.parts) ASSERT_LE(t, left[bucket] + 1e-9) << "booking " << k << " bucket " << bucket;
    link.commit(b);
    for (auto [bucket, t] : b.parts) left[bucket] -= t;
    held.push_back(b);
  }
  double used = 0;
  for (size_t i = 0; i < n; ++i) used += capacity[i] - left[i];
  EXPECT_NEAR(link.utilisation(), used / (10.0 * n), 1e-9);
}

}  // namespace
}  // namespace ferry::planner
