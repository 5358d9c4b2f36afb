// Trace files: one training iteration as JSON ("ferry-trace", versions 1 and 2), so that iterations
// recorded elsewhere (another framework, a real GPU) can be analysed and planned, and so that any
// Ferry graph can be exported. The format is specified in docs/trace-format.md; the example
// docs/examples/tiny-trace.json is a complete 3-layer MLP.
//
// Usage:
//   Result<Graph> g = load_trace("resnet50-a100.json");
//   if (!g.ok()) { fmt::print(stderr, "{}\n", g.status().message()); return g.status().exit_code(); }
//   Status st = save_trace(*g, "copy.json");  // lossless: load_trace gives back an equal Graph
//
// Import is strict: every malformed input is rejected with InvalidArgument and a one-line message
// that names the source, the JSON path of the field at fault and the tensor or op it belongs to,
//   trace.json: ops[12] ('conv3_bwd').inputs[1]: 57 is not a tensor id
// and the imported graph always passes Graph::validate(). Nothing throws out of these functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "graph/graph.h"

namespace ferry {

inline constexpr std::string_view kTraceFormatName = "ferry-trace";
// The newest version this build reads (it reads every version from 1). Version 2 adds views,
// storage versions (in-place writes) and release points (docs/trace-format.md).
inline constexpr int kTraceVersion = 2;
// Limits that reject absurd inputs before they reach code that sums or allocates by them.
inline constexpr uint64_t kMaxTraceTextBytes = uint64_t{1} << 30;    // 1 GiB of JSON
inline constexpr uint64_t kMaxTraceTensorBytes = uint64_t{1} << 50;  // 1 PiB for one tensor
inline constexpr size_t kMaxTraceShapeRank = 16;
// 10^15 us (31 years) for one op: sums over 2^31 ops stay finite, so predictions do too.
inline constexpr double kMaxTraceOpTimeUs = 1e15;

// Parses a trace from JSON text. `source_name` (usually the file name) starts every error
// message. Tensor ids of the file are remapped to dense ids in file order; the result validates.
Result<Graph> parse_trace(std::string_view json_text, std::string_view source_name);

// Reads and parses the trace file at `path`. InvalidArgument when it is not a regular file of
// at most kMaxTraceTextBytes (checked before reading: /dev/zero or a FIFO never hang) or is
// malformed (the message starts with `path`); IoError when reading fails part-way.
Result<Graph> load_trace(const std::string& path);

// The version to_trace_json writes for `g`: 1 unless a tensor overwrites another or has a release
// point (version 2), so that graphs that need nothing new stay readable by older builds.
int trace_version_needed(const Graph& g);

// Serialises `g` (which should validate) as a trace of trace_version_needed(g); views, which the
// reader resolves to their storage's tensor, are not written back. Compact, or with one tensor or op
// per line when `pretty`. Fields equal to their defaults are left out. parse_trace() of the
// result gives a Graph equal to `g` in every field (see graph_difference()), provided every
// number is finite and every shaped tensor's bytes equal its element count times its dtype size.
std::string to_trace_json(const Graph& g, bool pretty);

// Writes to_trace_json(g, true) to `path` atomically (common/file_io.h: a failed write keeps
// the old file). IoError names the path and the system's reason.
Status save_trace(const Graph& g, const std::string& path);

// The first field in which `a` and `b` differ, as a path and both values
// ("ops[3].attrs.stride_h: 1 vs 2"), or an empty string when they are equal in every field.
// Doubles and floats compare exactly; used to check that export -> import is lossless.
std::string graph_difference(const Graph& a, const Graph& b);

}  // namespace ferry
