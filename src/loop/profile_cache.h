// The profile cache: measured figures (loop/figures.h) kept per machine, model, shape and backend
// options, so that the next run plans from this machine's measurements from its first iteration.
//
// Design
// - A key says what the figures are valid for: the cache format version, the machine (CPU model
//   and logical cores, from /proc/cpuinfo), the compute threads, the convolution algorithm, the
//   swap tier, and
//   the graph as the backend runs it (model name, and a hash of every op's name and type and every
//   tensor's backend size). Any difference is a different file: `<dir>/<16 hex digits>.json`,
//   the digits an XXH64 of the key's text. The file also stores the key's fields, and a read
//   compares them, so a hash collision or a hand-edited file is refused (as stale), not used.
// - The directory is $XDG_CACHE_HOME/ferry/profiles, else $HOME/.cache/ferry/profiles; without
//   either there is no cache. Files are written atomically (common/file_io.h).
// - A cache is advisory: a missing, stale, unreadable or malformed entry is a miss with a reason,
//   never an error. The same file read as `--profile FILE` is a user input: there a malformed
//   file is an InvalidArgument naming the problem, and a key for another machine or model is
//   refused too.
#pragma once

#include <optional>
#include <string>

#include "common/status.h"
#include "graph/graph.h"
#include "loop/figures.h"

namespace ferry {

// 2: codec figures ("codecs") added. 3: the swap tier ("tier") joined the key.
inline constexpr int kProfileCacheFormatVersion = 3;

struct ProfileKey {
  int format_version = kProfileCacheFormatVersion;
  std::string machine;        // "AMD EPYC 7B13, 2 logical cores"
  int threads = 0;            // compute threads
  std::string conv_algorithm;
  // The swap tier the figures were measured on ("host", "ssd", "none"): a tier's copies slow the
  // ops beside them by their own amount, and only its own links are measured. Until format 3 an
  // SSD run after host runs of a model began from their figures, with the profile's disk.
  std::string tier;
  std::string model;          // Graph::info.model
  std::string graph_hash;     // ops' names and types, tensors' backend bytes (16 hex digits)
  bool operator==(const ProfileKey&) const = default;
  // The file name's digits.
  std::string digest() const;
};

// This machine's description (CPU model name and logical cores).
std::string machine_description();
// The key of `sized` (backend sizes) run with `threads`, `conv_algorithm` and swap tier `tier` on
// this machine.
ProfileKey make_profile_key(const Graph& sized, int threads, const std::string& conv_algorithm,
                            const std::string& tier);

// The cache directory, or nullopt when neither $XDG_CACHE_HOME nor $HOME is set.
std::optional<std::string> profile_cache_dir();
// Where `key`'s figures live in `dir`.
std::string profile_cache_path(const std::string& dir, const ProfileKey& key);

// Serialises / parses one entry. parse errors (InvalidArgument) name the field.
std::string to_figures_json(const ProfileKey& key, const MeasuredFigures& f);
struct CachedFigures {
  ProfileKey key;
  MeasuredFigures figures;
};
Result<CachedFigures> parse_figures_json(std::string_view text, std::string_view source_name, size_t num_ops);

// Reads `path` as figures for `key`; nullopt when there is no such file. Errors
// (InvalidArgument): unreadable or malformed, or a key that differs from `key` (the message
// names the field).
Result<std::optional<MeasuredFigures>> read_figures(const std::string& path, const ProfileKey& key, size_t num_ops);
// Writes figures for `key` to `path` atomically, creating its directory.
Status write_figures(const std::string& path, const ProfileKey& key, const MeasuredFigures& f);

}  // namespace ferry
