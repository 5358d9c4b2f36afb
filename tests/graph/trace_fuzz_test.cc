// Fuzz-style robustness test of trace import: thousands of seeded random mutations of valid
// traces, at the byte level (delete, duplicate, insert, truncate, change digits) and at the JSON
// level (replace a value by a string, a negative or huge number, null, a deep array; drop a field;
// duplicate or reorder entries; change ids). Whatever the input, parse_trace must return, and
// either give a graph that validates and survives export -> import unchanged, or an
// InvalidArgument whose message is one non-empty line starting with the source name.
//
// FERRY_FUZZ_ITERATIONS overrides the number of mutants (default 3000, a fraction of a second;
// 1000 under AddressSanitizer).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/trace.h"

namespace ferry {
namespace {

using Json = nlohmann::json;
using Rng = std::mt19937_64;

// Uses every optional field, ids that are neither dense nor ordered, a forward grad_of reference,
// extension fields and attributes of several types.
constexpr const char* kRichTrace = R"({
  "format": "ferry-trace", "version": 1, "model": "rich", "x_note": "seed",
  "info": {"batch": 4, "image": 8, "seq": 0, "num_classes": 3, "optimizer": "adam"},
  "tensors": [
    {"id": 40, "name": "img", "role": "input", "shape": [4, 2, 8, 8], "bytes": 2048},
    {"id": 3, "name": "lbl", "role": "input", "dtype": "i64", "shape": [4], "bytes": 32},
    {"id": 17, "name": "conv.w", "role": "weight", "shape": [3, 2, 3, 3], "bytes": 216},
    {"id": 5, "name": "conv.out", "role": "activation", "shape": [4, 3, 8, 8], "bytes": 3072},
    {"id": 6, "name": "pool.out", "role": "activation", "dtype": "f16", "shape": [4, 3], "bytes": 24},
    {"id": 7, "name": "loss", "role": "activation", "bytes": 4},
    {"id": 8, "name": "pool.out.grad", "role": "gradient", "dtype": "f16", "shape": [4, 3], "bytes": 24,
     "grad_of": 6},
    {"id": 9, "name": "conv.out.grad", "role": "gradient", "bytes": 3072, "grad_of": 5},
    {"id": 10, "name": "conv.w.grad", "role": "weight_gradient", "bytes": 216, "grad_of": 17},
    {"id": 11, "name": "conv.w.m", "role": "optimizer_state", "bytes": 216},
    {"id": 12, "name": "conv.w.v", "role": "optimizer_state", "bytes": 216},
    {"id": 13, "name": "scratch", "role": "workspace", "dtype": "u8", "bytes": 100}
  ],
  "ops": [
    {"name": "conv", "type": "conv2d", "phase": "forward", "inputs": [40, 17], "outputs": [5, 13],
     "time_us": 12.5, "flops": 82944, "macs": 41472,
     "attrs": {"kernel_h": 3, "kernel_w": 3, "pad_h": 1, "pad_w": 1, "x_algo": "implicit_gemm"}},
    {"name": "pool", "type": "global_avg_pool", "phase": "forward", "inputs": [5], "outputs": [6], "time_us": 1},
    {"name": "loss", "type": "cross_entropy", "phase": "forward", "inputs": [6, 3], "outputs": [7]},
    {"name": "loss_bwd", "type": "cross_entropy_bwd", "phase": "backward", "inputs": [6, 3], "outputs": [8],
     "forward_op": 2},
    {"name": "pool_bwd", "type": "global_avg_pool_bwd", "phase": "backward", "inputs": [8], "outputs": [9],
     "forward_op": 1, "bytes_read": 24},
    {"name": "conv_bwd_w", "type": "conv2d_bwd_weights", "phase": "backward", "inputs": [9, 40], "outputs": [10],
     "forward_op": 0, "attrs": {"kernel_h": 3, "kernel_w": 3, "pad_h": 1, "pad_w": 1}},
    {"name": "mystery", "type": "opaque", "phase": "backward", "inputs": [10], "outputs": [], "time_us": 0.25,
     "inplace": false},
    {"name": "adam", "type": "adam_update", "phase": "update", "inputs": [17, 10, 11, 12], "outputs": [17, 11, 12],
     "attrs": {"lr": 0.001, "beta2": 0.98, "weight_decay": 0.05}}
  ],
  "loss": 7
})";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t pick(Rng& rng, size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); }

// ---------------------------------------------------------------------------------------------
// Byte-level mutations.

std::string mutate_text(std::string s, Rng& rng) {
  static const std::string kAlphabet = "{}[]\",:-+.0123456789eE truefalsnul\\\n";
  static const std::string kOdd = std::string("\0\x7f\xc3\xff", 4);
  if (s.empty()) return "{";
  const size_t pos = pick(rng, s.size());
  const size_t len = 1 + pick(rng, 8);
  switch (pick(rng, 5)) {
    case 0:  // delete a span
      s.erase(pos, len);
      break;
    case 1:  // duplicate a span
      s.insert(pos, s.substr(pos, len));
      break;
    case 2: {  // insert a few characters, mostly JSON punctuation
      std::string ins;
      for (size_t k = 0; k < 1 + pick(rng, 4); ++k)
        ins += pick(rng, 10) == 0 ? kOdd[pick(rng, kOdd.size())] : kAlphabet[pick(rng, kAlphabet.size())];
      s.insert(pos, ins);
      break;
    }
    case 3:  // truncate
      s.resize(pos);
      break;
    default: {  // change a digit: ids, sizes and times drift
      for (size_t k = 0; k < s.size(); ++k) {
        size_t i = (pos + k) % s.size();
        if (s[i] >= '0' && s[i] <= '9') {
          s[i] = static_cast<char>('0' + pick(rng, 10));
          break;
        }
      }
    }
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// JSON-level mutations.

// A random node: descend from the root into random children, stopping early now and then so
// that whole arrays and objects get picked too. `parent` is null for the root.
struct Site {
  Json* node;
  Json* parent;
  std::string key;  // in `parent`, when it is an object
  size_t index;     // in `parent`, when it is an array
};

Site random_site(Json& root, Rng& rng) {
  Site site{&root, nullptr, "", 0};
  while ((site.node->is_object() || site.node->is_array()) && !site.node->empty() && pick(rng, 8) != 0) {
    Json& n = *site.node;
    const size_t i = pick(rng, n.size());
    if (n.is_array()) {
      site = Site{&n[i], &n, "", i};
    } else {
      auto it = n.begin();
      std::advance(it, static_cast<std::ptrdiff_t>(i));
      site = Site{&*it, &n, it.key(), 0};
    }
  }
  return site;
}

Json odd_value(Rng& rng) {
  switch (pick(rng, 14)) {
    case 0:
      return "str";
    case 1:
      return -1;
    case 2:
      return std::numeric_limits<int64_t>::min();
    case 3:
      return std::numeric_limits<uint64_t>::max();
    case 4:
      return 1e300;
    case 5:
      return 0.5;
    case 6:
      return nullptr;
    case 7:
      return true;
    case 8:
      return Json::array();
    case 9:
      return Json::object();
    case 10:
      return 0;
    case 11:
      return (uint64_t{1} << 50) + 1;
    case 12: {  // deep nesting
      Json deep = Json::array();
      for (int k = 0; k < 300; ++k) deep = Json::array({deep});
      return deep;
    }
    default:
      return pick(rng, 30);  // a plausible id or count
  }
}

std::string mutate_json(Json doc, Rng& rng) {
  const Site site = random_site(doc, rng);
  Json& node = *site.node;
  switch (pick(rng, 6)) {
    case 0:  // replace by a value of another type or range
      node = odd_value(rng);
      break;
    case 1:  // drop it
      if (site.parent != nullptr && site.parent->is_object())
        site.parent->erase(site.key);
      else if (site.parent != nullptr)
        site.parent->erase(site.index);
      break;
    case 2:  // duplicate an array entry (a duplicate id, a second producer, ...)
      if (node.is_array() && !node.empty())
        node.insert(node.begin() + pick(rng, node.size()), node[pick(rng, node.size())]);
      break;
    case 3:  // reorder an array (ops out of execution order, ids moved)
      if (node.is_array() && node.size() > 1) std::swap(node[pick(rng, node.size())], node[pick(rng, node.size())]);
      break;
    case 4:  // change a number: usually an id, to another small id
      if (node.is_number()) node = pick(rng, 50);
      break;
    default:  // an extra field
      if (node.is_object()) node[pick(rng, 2) == 0 ? "x_extra" : "extra"] = 1;
  }
  return doc.dump(pick(rng, 2) == 0 ? -1 : 1);
}

struct Outcome {
  size_t accepted = 0;
  size_t rejected = 0;
};

// Parses one mutant and checks the contract; returns false after the first broken invariant.
bool check_mutant(const std::string& text, Outcome& outcome) {
  Result<Graph> r = parse_trace(text, "fuzz.json");
  if (r.ok()) {
    ++outcome.accepted;
    Status st = r->validate();
    EXPECT_TRUE(st.ok()) << st.message() << "\ninput: " << text;
    Result<Graph> again = parse_trace(to_trace_json(*r, false), "again.json");
    EXPECT_TRUE(again.ok()) << again.status().message() << "\ninput: " << text;
    if (!st.ok() || !again.ok()) return false;
    std::string diff = graph_difference(*r, *again);
    EXPECT_EQ(diff, "") << "input: " << text;
    return diff.empty();
  }
  ++outcome.rejected;
  const std::string& msg = r.status().message();
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << msg;
  EXPECT_EQ(msg.rfind("fuzz.json: ", 0), 0u) << msg;
  EXPECT_GT(msg.size(), std::string("fuzz.json: ").size()) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  return r.status().code() == StatusCode::kInvalidArgument && msg.rfind("fuzz.json: ", 0) == 0 &&
         msg.find('\n') == std::string::npos;
}

// Version 2: a view of a view, a version on a second output, a release point.
constexpr const char* kV2Trace = R"({
  "format": "ferry-trace", "version": 2, "model": "v2",
  "tensors": [
    {"id": 9, "name": "x", "role": "input", "bytes": 256},
    {"id": 1, "name": "a", "role": "activation", "bytes": 1024},
    {"id": 2, "name": "a.v", "view_of": 1, "offset": 256, "bytes": 512},
    {"id": 4, "name": "b", "role": "activation", "bytes": 64},
    {"id": 5, "name": "a2", "role": "activation", "bytes": 1024, "overwrites": 1},
    {"id": 7, "name": "a2.v", "view_of": 5, "offset": 256, "bytes": 512},
    {"id": 3, "name": "a2.vv", "view_of": 7, "offset": 512, "bytes": 128, "shape": [32]},
    {"id": 6, "name": "d", "role": "gradient", "bytes": 64, "grad_of": 4, "free_after": 3}
  ],
  "ops": [
    {"name": "f", "type": "opaque", "phase": "forward", "inputs": [9], "outputs": [1]},
    {"name": "g", "type": "opaque", "phase": "forward", "inputs": [2, 1], "outputs": [4, 5]},
    {"name": "h", "type": "opaque", "phase": "backward", "inputs": [4, 5], "outputs": [6]},
    {"name": "k", "type": "opaque", "phase": "backward", "inputs": [3], "outputs": []}
  ],
  "loss": 4
})";

TEST(TraceFuzz, RandomMutationsNeverCrashAndAlwaysExplain) {
  std::vector<std::string> seeds = {read_file(std::string(FERRY_SOURCE_DIR) + "/docs/examples/tiny-trace.json"),
                                    kRichTrace, kV2Trace};
  for (const std::string& s : std::vector<std::string>(seeds)) {
    Result<Graph> g = parse_trace(s, "seed.json");
    ASSERT_TRUE(g.ok()) << g.status().message();
    seeds.push_back(to_trace_json(*g, false));  // the compact form too
  }
  std::vector<Json> docs;
  for (const std::string& s : seeds) docs.push_back(Json::parse(s));

#ifdef __SANITIZE_ADDRESS__
  size_t iterations = 1000;  // sanitizer builds run nlohmann several times slower
#else
  size_t iterations = 3000;
#endif
  if (const char* env = std::getenv("FERRY_FUZZ_ITERATIONS")) iterations = std::strtoul(env, nullptr, 10);
  Rng rng(20240611);
  Outcome outcome;
  for (size_t i = 0; i < iterations; ++i) {
    const size_t seed = pick(rng, seeds.size());
    std::string mutant = pick(rng, 2) == 0 ? mutate_text(seeds[seed], rng) : mutate_json(docs[seed], rng);
    for (size_t extra = pick(rng, 3); extra > 0; --extra)  // sometimes stack a few byte edits
      mutant = mutate_text(std::move(mutant), rng);
    ASSERT_TRUE(check_mutant(mutant, outcome)) << "mutant " << i;
  }
  // Both outcomes occur, so both halves of the contract were exercised.
  EXPECT_GT(outcome.accepted, iterations / 50);
  EXPECT_GT(outcome.rejected, iterations / 2);
  std::printf("[ fuzz     ] %zu mutants: %zu accepted, %zu rejected\n", iterations, outcome.accepted, outcome.rejected);
}

}  // namespace
}  // namespace ferry
