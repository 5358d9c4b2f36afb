// A registered temporary file is removed when SIGINT or SIGTERM ends the process, which still
// ends by that signal.
#include "common/unlink_on_signal.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace ferry {
namespace {

TEST(UnlinkOnSignal, ASignalRemovesTheFileAndStillEndsTheProcess) {
  for (int sig : {SIGTERM, SIGINT}) {
    const std::string path = std::filesystem::temp_directory_path().string() + "/ferry_unlink_on_signal_" +
                             std::to_string(::getpid()) + "_" + std::to_string(sig);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      UnlinkOnSignal guard(path);
      const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
      if (fd < 0 || !guard.registered()) ::_exit(3);
      ::raise(sig);
      ::_exit(4);  // not reached: the signal ends the process
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFSIGNALED(status)) << "the process must end by the signal, status " << status;
    if (WIFSIGNALED(status)) {
      EXPECT_EQ(WTERMSIG(status), sig);
    }
    EXPECT_FALSE(std::filesystem::exists(path)) << path << " survived signal " << sig;
    std::filesystem::remove(path);
  }
}

TEST(UnlinkOnSignal, AGuardThatEndedLeavesTheFileToItsOwner) {
  const std::string path = std::filesystem::temp_directory_path().string() + "/ferry_unlink_on_signal_kept_" +
                           std::to_string(::getpid());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    { UnlinkOnSignal guard(path); }
    const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
    if (fd < 0) ::_exit(3);
    ::raise(SIGTERM);
    ::_exit(4);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_TRUE(std::filesystem::exists(path)) << "an unregistered path is not touched";
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace ferry
