// Solver calls in a child process. See contained.h for why.
#include "plan/contained.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <utility>

#include <fmt/format.h>

namespace ferry {

namespace {

bool write_all(int fd, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

Result<ContainedRun> ContainedRun::start(std::string_view what, double time_limit_s,
                                         const std::function<std::vector<double>()>& work, double grace_s) {
  using Clock = std::chrono::steady_clock;
  ContainedRun run;
  run.what_ = std::string(what);
  run.time_limit_s_ = time_limit_s;
  run.allowed_s_ = std::isfinite(time_limit_s) && time_limit_s > 0 ? 2 * time_limit_s + grace_s : 0;
  run.deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(run.allowed_s_));
  int fds[2];
  if (::pipe(fds) != 0)
    return Status::Internal(fmt::format("{}: cannot make a pipe for the solver's process: {}", what, std::strerror(errno)));
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return Status::Internal(fmt::format("{}: cannot start the solver's process: {}", what, std::strerror(errno)));
  }
  if (pid == 0) {  // the child: solve, write, leave without running the parent's exit handlers
    ::close(fds[0]);
    // A solver's assertion text would read as Ferry failing; the parent reports the crash itself.
    if (const int null = ::open("/dev/null", O_WRONLY); null >= 0) ::dup2(null, STDERR_FILENO);
    const std::vector<double> out = work();
    const uint64_t n = out.size();
    const bool ok = write_all(fds[1], &n, sizeof n) && write_all(fds[1], out.data(), n * sizeof(double));
    ::_exit(ok ? 0 : 3);
  }
  ::close(fds[1]);
  run.pid_ = pid;
  run.fd_ = fds[0];
  return run;
}

ContainedRun::ContainedRun(ContainedRun&& o) noexcept
    : what_(std::move(o.what_)), time_limit_s_(o.time_limit_s_), allowed_s_(o.allowed_s_), deadline_(o.deadline_),
      pid_(std::exchange(o.pid_, -1)), fd_(std::exchange(o.fd_, -1)) {}

ContainedRun& ContainedRun::operator=(ContainedRun&& o) noexcept {
  if (this != &o) {
    stop();
    what_ = std::move(o.what_);
    time_limit_s_ = o.time_limit_s_;
    allowed_s_ = o.allowed_s_;
    deadline_ = o.deadline_;
    pid_ = std::exchange(o.pid_, -1);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

ContainedRun::~ContainedRun() { stop(); }

void ContainedRun::stop() {
  if (fd_ >= 0) ::close(std::exchange(fd_, -1));
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }
}

Result<std::vector<double>> ContainedRun::wait() {
  using Clock = std::chrono::steady_clock;
  if (pid_ <= 0) return Status::Internal(fmt::format("{}: its process was already answered", what_));
  std::vector<char> bytes;
  char buf[1 << 16];
  bool stopped = false;
  for (;;) {
    if (allowed_s_ > 0) {
      // Rounded up: a truncated wait woke up to a millisecond before the deadline and stopped the
      // child early (Contained.AChildThatHangsIsStoppedAtItsDeadline, which requires the whole
      // deadline to pass, failed once on a loaded machine). Past the deadline, an answer already
      // in the pipe is still read (poll without waiting): only a child with nothing to say is stuck.
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
      pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
      const int ready = ::poll(&p, 1, static_cast<int>(std::clamp<long long>(left, 0, 1 << 30)));
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0 && Clock::now() < deadline_) continue;  // woke early: wait the rest
      if (ready == 0) {  // past the deadline: the child is stuck
        ::kill(pid_, SIGKILL);
        stopped = true;
        break;
      }
    }
    const ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    bytes.insert(bytes.end(), buf, buf + n);
  }
  ::close(std::exchange(fd_, -1));
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  const std::string_view what = what_;
  if (stopped)
    return Status::Internal(fmt::format("{} did not answer within {:.3g} s (its time limit is {:.3g} s); its process "
                                        "was stopped and Ferry goes on without its answer",
                                        what, allowed_s_, time_limit_s_));
  if (WIFSIGNALED(status))
    return Status::Internal(fmt::format("{} crashed (signal {}: {}) on this problem, in its own process; Ferry goes on "
                                        "without its answer",
                                        what, WTERMSIG(status), ::strsignal(WTERMSIG(status))));
  uint64_t n = 0;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || bytes.size() < sizeof n)
    return Status::Internal(fmt::format("{} failed in its own process (exit status {})", what,
                                        WIFEXITED(status) ? WEXITSTATUS(status) : -1));
  std::memcpy(&n, bytes.data(), sizeof n);
  if (bytes.size() != sizeof n + n * sizeof(double))
    return Status::Internal(fmt::format("{}: its process returned {} bytes for {} values", what, bytes.size(), n));
  std::vector<double> out(n);
  std::memcpy(out.data(), bytes.data() + sizeof n, n * sizeof(double));
  return out;
}

Result<std::vector<double>> run_contained(std::string_view what, double time_limit_s,
                                          const std::function<std::vector<double>()>& work, double grace_s) {
  FERRY_ASSIGN_OR_RETURN(ContainedRun run, ContainedRun::start(what, time_limit_s, work, grace_s));
  return run.wait();
}

}  // namespace ferry
