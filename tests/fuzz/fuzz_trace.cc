// libFuzzer harness of the trace reader (docs/trace-format.md). Whatever the bytes, parse_trace
// returns; a graph it accepts validates and survives export -> import unchanged; an error is one
// line starting with the source name. Run with scripts/fuzz.sh trace SECONDS.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "graph/graph.h"
#include "graph/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  ferry::Result<ferry::Graph> g = ferry::parse_trace(text, "fuzz.json");
  if (!g.ok()) {
    const std::string& m = g.status().message();
    if (m.rfind("fuzz.json", 0) != 0 || m.find('\n') != std::string::npos) std::abort();
    if (g.status().code() != ferry::StatusCode::kInvalidArgument && g.status().code() != ferry::StatusCode::kOutOfMemory)
      std::abort();
    return 0;
  }
  if (!g->validate().ok()) std::abort();
  ferry::Result<ferry::Graph> again = ferry::parse_trace(ferry::to_trace_json(*g, false), "again.json");
  if (!again.ok() || !ferry::graph_difference(*g, *again).empty()) std::abort();
  return 0;
}
