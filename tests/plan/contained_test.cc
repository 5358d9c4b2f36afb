// Solver calls in a child process (plan/contained.h): the answer comes back whole, and a child that
// crashes or hangs becomes an error naming the solver instead of taking the planner with it.
#include "plan/contained.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>

#include <gtest/gtest.h>

namespace ferry {
namespace {

TEST(Contained, TheChildsValuesComeBackBitwise) {
  const std::vector<double> want = {1.0, -0.0, 3.5e-300, std::nan(""), 1e308, 42};
  Result<std::vector<double>> got = run_contained("a test solver", 10, [&] { return want; });
  ASSERT_TRUE(got.ok()) << got.status().message();
  ASSERT_EQ(got->size(), want.size());
  EXPECT_EQ(0, std::memcmp(got->data(), want.data(), want.size() * sizeof(double)));
  // Larger than a pipe's buffer: the parent reads while the child writes.
  const std::vector<double> large(1 << 18, 0.25);
  got = run_contained("a test solver", 10, [&] { return large; });
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(*got, large);
}

TEST(Contained, ACrashIsAnErrorNamingTheSolver) {
  Result<std::vector<double>> got = run_contained("a test solver", 10, []() -> std::vector<double> {
    ::raise(SIGABRT);
    return {};
  });
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kInternal);
  EXPECT_NE(got.status().message().find("a test solver crashed"), std::string::npos) << got.status().message();
}

// A child that never answers (as one forked while another thread held its allocator's lock did)
// is stopped at twice its time limit and the grace, and the parent goes on.
TEST(Contained, AChildThatHangsIsStoppedAtItsDeadline) {
  const auto t0 = std::chrono::steady_clock::now();
  Result<std::vector<double>> got = run_contained(
      "a test solver", 0.05,
      []() -> std::vector<double> {
        for (;;) ::pause();
      },
      /*grace_s=*/0.2);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kInternal);
  EXPECT_NE(got.status().message().find("did not answer within 0.3 s"), std::string::npos) << got.status().message();
  EXPECT_GE(s, 0.3);
}

// The caller works while the child solves (`ferry plan`'s bound beside its planning): the answer
// is the same as run_contained's.
TEST(Contained, AStartedRunAnswersWhenWaitedFor) {
  const std::vector<double> want(1 << 17, -1.5);  // more than a pipe holds: the child waits on it
  Result<ContainedRun> run = ContainedRun::start("a test solver", 10, [&] { return want; });
  ASSERT_TRUE(run.ok()) << run.status().message();
  double parent_work = 0;
  for (int i = 0; i < 1000; ++i) parent_work += std::sqrt(static_cast<double>(i));
  EXPECT_GT(parent_work, 0);
  Result<std::vector<double>> got = run->wait();
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(*got, want);
  // Answered once: a second wait is an error, not a hang or a second answer.
  EXPECT_FALSE(run->wait().ok());
}

// An answer that waits in the pipe is read however late the parent comes: only a child with
// nothing to say is stuck (the parent may plan for longer than the bound's deadline).
TEST(Contained, AnAnswerReadyBeforeTheDeadlineIsReadAfterIt) {
  Result<ContainedRun> run = ContainedRun::start("a test solver", 0.05, [] { return std::vector<double>{7, 8}; },
                                                 /*grace_s=*/0.05);
  ASSERT_TRUE(run.ok()) << run.status().message();
  ::usleep(400'000);  // well past the deadline (0.15 s)
  Result<std::vector<double>> got = run->wait();
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(*got, (std::vector<double>{7, 8}));
}

// A run dropped without wait() (the planner failed first) stops its child: the destructor
// returns although the child would never answer.
TEST(Contained, ADroppedRunStopsItsChild) {
  pid_t child = -1;
  {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    Result<ContainedRun> run = ContainedRun::start("a test solver", 0, [&]() -> std::vector<double> {
      const pid_t me = ::getpid();
      (void)!::write(fds[1], &me, sizeof me);
      for (;;) ::pause();
    });
    ASSERT_TRUE(run.ok()) << run.status().message();
    ASSERT_EQ(::read(fds[0], &child, sizeof child), static_cast<ssize_t>(sizeof child));
    ::close(fds[0]);
    ::close(fds[1]);
  }
  // Reaped by the destructor: no such process (not even a zombie) remains.
  EXPECT_EQ(::kill(child, 0), -1);
  EXPECT_EQ(errno, ESRCH);
}

}  // namespace
}  // namespace ferry
