// Files a user names on the command line: read safely, written without losing the old version.
//
// Design
// - read_regular_file() opens without blocking (O_NONBLOCK, so a FIFO with no writer does not
//   hang the open), fstat()s the open descriptor (no race between a check and the read), and
//   refuses what is not a regular file (a directory, /dev/zero, a FIFO, a socket) and files over
//   the caller's size limit, before reading a byte.
// - write_file_atomically() writes a new temporary file in the target's directory (created with
//   O_CREAT | O_EXCL | O_NOFOLLOW under a random name, so a planted file or symlink is never
//   opened), flushes it to disk and renames it over the target: readers see the old file or the
//   new one, never a truncated one, and a failed write (a full disk, a file-size limit) leaves the
//   old file as it was, removes the temporary and returns an IoError. A target that is a symlink
//   is resolved, so the link survives and the file it points to is replaced; a target that exists
//   and is not a regular file (/dev/stdout, /dev/null, a FIFO) is written in place, since it
//   cannot be replaced by renaming. The new file keeps an existing target's permission bits.
//
// Usage:
//   FERRY_ASSIGN_OR_RETURN(std::string text, read_regular_file(path, 1 << 20, "hardware profile"));
//   FERRY_RETURN_IF_ERROR(write_file_atomically(path, svg, "memory plot"));
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace ferry {

// The contents of the regular file `path`, at most `max_bytes` long. `what` names the file in
// messages ("trace", "hardware profile"). Errors: InvalidArgument when the path does not name a
// readable regular file or the file is over the limit (the message gives both sizes); IoError
// when reading fails part-way.
Result<std::string> read_regular_file(const std::string& path, uint64_t max_bytes, std::string_view what);

// Replaces `path` with `content` atomically (see the design note). Errors: IoError naming the
// path and the system's reason (no space left, file too large, permission denied).
Status write_file_atomically(const std::string& path, std::string_view content, std::string_view what);

}  // namespace ferry
