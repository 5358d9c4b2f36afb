// Temporary files that must not outlive the process, even when SIGINT, SIGTERM or SIGHUP ends it.
//
// Design
// - A fixed table of paths (no allocation in the handler), each slot claimed with an atomic flag.
//   The handler, installed once with sigaction, unlinks every registered path (unlink is
//   async-signal-safe), restores the signal's previous disposition and raises it again, so the
//   process still ends by that signal (exit status and core behaviour unchanged).
// - Destroying the guard unregisters the path; it does not unlink it: the owner removes its file
//   on its own paths out (or, better, unlinks it right after creating it and keeps the
//   descriptor, which leaves only the moment in between to this guard).
//
// Usage:
//   UnlinkOnSignal guard(path);              // before the file exists
//   int fd = open(path, O_CREAT | O_EXCL | O_NOFOLLOW | ...);
//   unlink(path);                            // nothing left to clean up, whatever happens next
#pragma once

#include <string>

namespace ferry {

class UnlinkOnSignal {
 public:
  // Registers `path` (at most kMaxPaths at once; beyond that the path is not protected and
  // registered() is false).
  explicit UnlinkOnSignal(const std::string& path);
  ~UnlinkOnSignal();
  UnlinkOnSignal(const UnlinkOnSignal&) = delete;
  UnlinkOnSignal& operator=(const UnlinkOnSignal&) = delete;

  bool registered() const { return slot_ >= 0; }

  static constexpr int kMaxPaths = 16;
  static constexpr int kMaxPathBytes = 4096;

 private:
  int slot_ = -1;
};

}  // namespace ferry
