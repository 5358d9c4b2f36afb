// Solver calls in a child process (plan/contained.h): the answer comes back whole, and a child that
// crashes or hangs becomes an error naming the solver instead of taking the planner with it.
#include "plan/contained.h"

#include <signal.h>
#include <unistd.h>

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

}  // namespace
}  // namespace ferry
