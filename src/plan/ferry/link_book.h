// LinkBook: a fluid model of one copy link's time over the iteration, for the Ferry planner's
// choice of what may be swapped without stalling.
//
// Design
// - The iteration's nominal timeline (op times, no stalls) is cut into buckets, one per step,
//   each holding that step's duration of link time. A transfer of `us` microseconds books link
//   time in consecutive buckets: swap-outs as soon as possible after their tensor is produced,
//   swap-ins as late as possible before their use (the first bucket a swap-in touches is where it
//   must be issued, the last bucket a swap-out touches is where its copy is done).
// - Buckets are cyclic: bucket n-1 is followed by bucket 0 of the next iteration, so the copy of a
//   weight updated at the end of an iteration may finish while the next one starts.
// - A booking that needs more time than its window holds fails: the planner then recomputes or
//   keeps the tensor. The model ignores the order within a bucket; the simulator judges the plan.
// - Full buckets are skipped with a union-find pointer (amortised near O(1) per booking); a
//   cancelled booking gives its time back but does not reopen skipped buckets (rare; conservative).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace ferry::planner {
using std::size_t;

class LinkBook {
 public:
  // One bucket per step, holding `step_us[i]` microseconds of link time.
  explicit LinkBook(const std::vector<double>& step_us);

  struct Booking {
    bool ok = false;
    size_t first = 0;  // first bucket touched (in booking direction order: earliest in time)
    size_t last = 0;   // last bucket touched (latest in time)
    std::vector<std::pair<size_t, double>> parts;  // (bucket, microseconds)
    double remainder_us = 0;  // partial bookings: what did not fit in the window
  };
  // Books `us` from bucket `from` onwards, through at most `max_buckets` buckets (cyclic).
  // Fails (ok = false) when the window cannot hold it, unless `partial`: then it books what fits
  // and says what is left (remainder_us), which the transfer will take beyond the window.
  Booking book_forward(size_t from, size_t max_buckets, double us, bool partial = false) const {
    return book(from, max_buckets, us, partial, /*forward=*/true);
  }
  // Books `us` backwards from bucket `to`, through at most `max_buckets` buckets (cyclic).
  Booking book_backward(size_t to, size_t max_buckets, double us, bool partial = false) const {
    return book(to, max_buckets, us, partial, /*forward=*/false);
  }
  void commit(const Booking& b);
  void cancel(const Booking& b);
  // Fraction of the link's time booked.
  double utilisation() const;

 private:
  Booking book(size_t at, size_t max_buckets, double us, bool partial, bool forward) const;
  // The first bucket from i on (forward) or the last up to i (backward), cyclic, with time left.
  size_t open_bucket(size_t i, bool forward) const;
  size_t n_ = 0;
  std::vector<double> capacity_, left_;
  mutable std::vector<size_t> next_, prev_;  // union-find pointers over full buckets
};

}  // namespace ferry::planner
