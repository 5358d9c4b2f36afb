// Solver calls in a child process. See contained.h for why.
#include "plan/contained.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

Result<std::vector<double>> run_contained(std::string_view what, const std::function<std::vector<double>()>& work) {
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
  std::vector<char> bytes;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    bytes.insert(bytes.end(), buf, buf + n);
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
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

}  // namespace ferry
