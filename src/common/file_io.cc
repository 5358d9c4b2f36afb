#include "common/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "common/units.h"

namespace ferry {

namespace {

// Closes a descriptor on every path out of a function.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  int release() {
    int f = fd;
    fd = -1;
    return f;
  }
};

std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

Status write_all(int fd, std::string_view content) {
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::IoError(n < 0 ? std::strerror(errno) : "no progress");
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

// The file a write to `path` should replace: the target of a symlink chain, else `path`.
std::string resolve_target(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return path;
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved) == nullptr) return path;  // dangling: replace the link
  return resolved;
}

// Creates a new file next to `target` under a random name; O_EXCL | O_NOFOLLOW: never an
// existing file or a symlink someone planted.
Result<std::pair<int, std::string>> create_temporary(const std::string& target, mode_t mode) {
  std::random_device entropy;
  for (int attempt = 0; attempt < 16; ++attempt) {
    const std::string name =
        fmt::format("{}.tmp-{}-{:08x}", target, static_cast<long>(::getpid()), static_cast<uint32_t>(entropy()));
    const int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd >= 0) return std::make_pair(fd, name);
    if (errno != EEXIST) return Status::IoError(std::strerror(errno));
  }
  return Status::IoError("no free temporary name after 16 attempts");
}

}  // namespace

Result<std::string> read_regular_file(const std::string& path, uint64_t max_bytes, std::string_view what) {
  Fd f{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
  if (f.fd < 0) return Status::InvalidArgument(fmt::format("cannot open {} '{}': {}", what, path, std::strerror(errno)));
  struct stat st;
  if (::fstat(f.fd, &st) != 0)
    return Status::IoError(fmt::format("cannot read {} '{}': {}", what, path, std::strerror(errno)));
  if (!S_ISREG(st.st_mode))
    return Status::InvalidArgument(
        fmt::format("cannot read {} '{}': it is {}, not a regular file", what, path, kind_of(st.st_mode)));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes)
    return Status::InvalidArgument(fmt::format("{} '{}' is {} bytes, over the limit of {} bytes ({})", what, path,
                                               size, max_bytes, format_bytes(max_bytes)));
  // Regular files never block, but read them in blocking mode anyway, as the kernel expects.
  ::fcntl(f.fd, F_SETFL, ::fcntl(f.fd, F_GETFL) & ~O_NONBLOCK);
  std::string text;
  try {
    text.resize(size);
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory(fmt::format("out of host memory reading {} '{}' ({} bytes)", what, path, size));
  }
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(f.fd, text.data() + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::IoError(fmt::format("cannot read {} '{}': {}", what, path, std::strerror(errno)));
    if (n == 0) break;  // shrank while we read: keep what is there
    done += static_cast<size_t>(n);
  }
  text.resize(done);
  return text;
}

Status write_file_atomically(const std::string& path, std::string_view content, std::string_view what) {
  auto fail = [&](const Status& s) {
    return Status::IoError(fmt::format("cannot write {} '{}': {}", what, path, s.message()));
  };
  const std::string target = resolve_target(path);
  struct stat st;
  const bool exists = ::stat(target.c_str(), &st) == 0;
  if (exists && !S_ISREG(st.st_mode)) {
    // A device or a FIFO: it cannot be replaced by renaming; write into it.
    Fd f{::open(target.c_str(), O_WRONLY | O_CLOEXEC)};
    if (f.fd < 0) return fail(Status::IoError(std::strerror(errno)));
    if (Status s = write_all(f.fd, content); !s.ok()) return fail(s);
    if (::close(f.release()) != 0) return fail(Status::IoError(std::strerror(errno)));
    return Status::Ok();
  }
  Result<std::pair<int, std::string>> tmp = create_temporary(target, exists ? (st.st_mode & 07777) : 0666);
  if (!tmp.ok()) return fail(tmp.status());
  Fd f{tmp->first};
  const std::string& tmp_path = tmp->second;
  auto discard = [&](const Status& s) {
    ::unlink(tmp_path.c_str());
    return fail(s);
  };
  if (exists && ::fchmod(f.fd, st.st_mode & 07777) != 0) return discard(Status::IoError(std::strerror(errno)));
  if (Status s = write_all(f.fd, content); !s.ok()) return discard(s);
  if (::fdatasync(f.fd) != 0) return discard(Status::IoError(std::strerror(errno)));
  if (::close(f.release()) != 0) return discard(Status::IoError(std::strerror(errno)));
  if (::rename(tmp_path.c_str(), target.c_str()) != 0) return discard(Status::IoError(std::strerror(errno)));
  return Status::Ok();
}

}  // namespace ferry
