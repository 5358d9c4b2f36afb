// Trace format version 2: views (byte ranges of a storage), storage versions written in place
// (`overwrites`, on any output), release points (`free_after`), and what bad input gets. The
// analysis, program and planners on such graphs: tests/plan/trace_v2_plan_test.cc.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/trace.h"

namespace ferry {
namespace {

using Json = nlohmann::json;

#define EXPECT_CONTAINS(haystack, needle)               \
  EXPECT_NE((haystack).find(needle), std::string::npos) \
      << "message: " << (haystack) << "\nexpected to contain: " << (needle)

// What a recorder of a framework writes for: y = relu_(conv(x, w)) saved for backward, a view
// of y (its second half, as a slice would be) read by an op, a batch-norm-like op whose second
// output updates a statistics buffer in place, and a gradient held by the framework to the end.
//   ops: 0 conv(x, w) -> c      1 relu_(c) -> y (overwrites c)     2 init_s() -> s (born mid-iteration)
//        3 head(y[half]) -> h   4 stats(h, s) -> h2, s2 (s2 overwrites s)   5 loss(h2, s2) -> loss
//        6 grad(loss, y) -> dy (held to the end)   7 wgrad(dy, x, y[half]) -> dw   8 sgd(w, dw) -> w
Json storage_trace() {
  return Json::parse(R"({
    "format": "ferry-trace", "version": 2, "model": "v2",
    "tensors": [
      {"id": 10, "name": "x", "role": "input", "bytes": 256},
      {"id": 11, "name": "w", "role": "weight", "bytes": 64},
      {"id": 12, "name": "c", "role": "activation", "bytes": 1024},
      {"id": 13, "name": "y", "role": "activation", "bytes": 1024, "overwrites": 12},
      {"id": 14, "name": "y.half", "view_of": 13, "offset": 512, "bytes": 512, "shape": [128]},
      {"id": 15, "name": "h", "role": "activation", "bytes": 128},
      {"id": 16, "name": "s", "role": "activation", "bytes": 32},
      {"id": 17, "name": "h2", "role": "activation", "bytes": 128},
      {"id": 18, "name": "s2", "role": "activation", "bytes": 32, "overwrites": 16},
      {"id": 19, "name": "loss", "role": "activation", "bytes": 4},
      {"id": 20, "name": "dy", "role": "gradient", "bytes": 1024, "grad_of": 13, "free_after": 8},
      {"id": 21, "name": "dw", "role": "weight_gradient", "bytes": 64, "grad_of": 11}
    ],
    "ops": [
      {"name": "conv", "type": "opaque", "phase": "forward", "inputs": [10, 11], "outputs": [12]},
      {"name": "relu_", "type": "opaque", "phase": "forward", "inputs": [12], "outputs": [13]},
      {"name": "init_s", "type": "opaque", "phase": "forward", "inputs": [], "outputs": [16]},
      {"name": "head", "type": "opaque", "phase": "forward", "inputs": [14], "outputs": [15]},
      {"name": "stats", "type": "opaque", "phase": "forward", "inputs": [15, 16], "outputs": [17, 18]},
      {"name": "loss", "type": "opaque", "phase": "forward", "inputs": [17, 18], "outputs": [19]},
      {"name": "grad", "type": "opaque", "phase": "backward", "inputs": [19, 13], "outputs": [20]},
      {"name": "wgrad", "type": "opaque", "phase": "backward", "inputs": [20, 10, 14], "outputs": [21]},
      {"name": "sgd", "type": "sgd_update", "phase": "update", "inputs": [11, 21], "outputs": [11]}
    ],
    "loss": 19
  })");
}

std::string error_of(const Json& doc) {
  Result<Graph> r = parse_trace(doc.dump(), "v2.json");
  EXPECT_FALSE(r.ok()) << "accepted: " << doc.dump().substr(0, 300);
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message().rfind("v2.json: ", 0), 0u) << r.status().message();
  return r.status().message();
}

size_t index_of(const Json& array, const std::string& name) {
  for (size_t i = 0; i < array.size(); ++i)
    if (array[i]["name"] == name) return i;
  ADD_FAILURE() << "no entry named " << name;
  return 0;
}

TEST(TraceV2, ViewsResolveToTheirStorageAndCountTheirBytes) {
  Result<Graph> r = parse_trace(storage_trace().dump(), "v2.json");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const Graph& g = *r;
  ASSERT_EQ(g.tensors.size(), 11u) << "the view is no tensor of the graph";
  const TensorId y = 3;
  EXPECT_EQ(g.tensors[3].name, "y");
  EXPECT_EQ(g.tensors[4].name, "h") << "dense ids skip the view";
  EXPECT_EQ(g.ops[3].inputs, (std::vector<TensorId>{y})) << "head reads y's storage";
  EXPECT_EQ(g.ops[3].bytes_read, 512u) << "but only the view's 512 bytes of it";
  // wgrad names dy, x and the view: 1024 + 256 + 512 bytes read, inputs dy, x, y.
  EXPECT_EQ(g.ops[7].inputs, (std::vector<TensorId>{9, 0, y}));
  EXPECT_EQ(g.ops[7].bytes_read, 1024u + 256u + 512u);
  EXPECT_EQ(g.tensors[y].overwrites, 2);
  EXPECT_EQ(g.tensors[7].overwrites, 5) << "s2 overwrites s";
  EXPECT_EQ(g.tensors[9].free_after, 8);
  EXPECT_EQ(g.tensors[9].grad_of, y);
}

TEST(TraceV2, ExportWritesVersionTwoOnlyWhenNeededAndRoundTrips) {
  Result<Graph> r = parse_trace(storage_trace().dump(), "v2.json");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const std::string text = to_trace_json(*r, true);
  EXPECT_EQ(Json::parse(text)["version"], 2);
  Result<Graph> again = parse_trace(text, "again.json");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(graph_difference(*r, *again), "");
  // The lowered graph needs no view: the exported file has none, and bytes_read keeps the range.
  EXPECT_EQ(Json::parse(text)["tensors"].size(), 11u);
  EXPECT_EQ(Json::parse(text)["ops"][3]["bytes_read"], 512);

  Graph plain = *r;
  for (Tensor& t : plain.tensors) t.overwrites = kNoTensor, t.free_after = kNoOp;
  EXPECT_EQ(trace_version_needed(plain), 1);
  EXPECT_EQ(Json::parse(to_trace_json(plain, false))["version"], 1) << "older builds still read it";
  Graph freed = plain;
  freed.tensors[9].free_after = 8;
  EXPECT_EQ(trace_version_needed(freed), 2);
  // graph_difference sees both new fields.
  EXPECT_NE(graph_difference(*r, plain).find(".overwrites"), std::string::npos);
  EXPECT_NE(graph_difference(freed, plain).find("tensors[9].free_after"), std::string::npos);
}

TEST(TraceV2, VersionOneRejectsVersionTwoFieldsByName) {
  Json doc = storage_trace();
  doc["version"] = 1;
  EXPECT_CONTAINS(error_of(doc),
                  "v2.json: tensors[3] ('y').overwrites: this field is part of trace format version 2; the trace "
                  "says \"version\": 1");
  doc["version"] = 3;
  EXPECT_CONTAINS(error_of(doc), "version: unsupported trace version 3 (this build of Ferry reads versions 1 to 2)");
}

TEST(TraceV2, BadViews) {
  Json doc = storage_trace();
  const size_t view = index_of(doc["tensors"], "y.half");
  doc["tensors"][view]["offset"] = 768;
  EXPECT_CONTAINS(error_of(doc), "tensors[4] ('y.half'): the view's 512 bytes at offset 768 lie outside its storage "
                                 "'y' of 1024 bytes");
  doc = storage_trace();
  doc["tensors"][view]["view_of"] = 21;  // listed later
  EXPECT_CONTAINS(error_of(doc), "tensors[4] ('y.half').view_of: 21 is not the id of an earlier tensor");
  doc = storage_trace();
  doc["tensors"][view]["role"] = "gradient";
  EXPECT_CONTAINS(error_of(doc), "a view has its storage's role, activation (of 'y'), not gradient");
  doc = storage_trace();
  doc["tensors"][view]["grad_of"] = 13;
  EXPECT_CONTAINS(error_of(doc), "tensors[4] ('y.half'): unknown field 'grad_of'");
  doc = storage_trace();
  doc["tensors"][view]["shape"] = {64};
  EXPECT_CONTAINS(error_of(doc), "512 bytes disagrees with shape [64] of dtype f32");
  doc = storage_trace();
  doc["ops"][index_of(doc["ops"], "head")]["outputs"] = {14};
  EXPECT_CONTAINS(error_of(doc), "ops[3] ('head').outputs[0]: 14 is a view; an op writes whole tensors");
  // A view of a view is a range of the same storage.
  doc = storage_trace();
  doc["tensors"].push_back({{"id", 30}, {"name", "y.quarter"}, {"view_of", 14}, {"offset", 768}, {"bytes", 256}});
  doc["ops"][index_of(doc["ops"], "loss")]["inputs"].push_back(30);
  doc["loss"] = 19;
  Result<Graph> r = parse_trace(doc.dump(), "v2.json");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->ops[5].inputs.back(), 3);
  EXPECT_EQ(r->ops[5].bytes_read, 128u + 32u + 256u);
}

TEST(TraceV2, BadVersionsAndReleasePoints) {
  auto with = [](const std::string& tensor, const char* key, const Json& value) {
    Json doc = storage_trace();
    doc["tensors"][index_of(doc["tensors"], tensor)][key] = value;
    return doc;
  };
  EXPECT_CONTAINS(error_of(with("y", "overwrites", 99)), "tensors[3] ('y').overwrites: 99 is not a tensor id");
  EXPECT_CONTAINS(error_of(with("y", "overwrites", 13)), "tensor 'y' overwrites tensor id 3, which is itself");
  EXPECT_CONTAINS(error_of(with("y", "overwrites", 15)),
                  "tensor 'y' (1024 bytes) overwrites 'h' (128 bytes): a new version of a storage has the storage's size");
  EXPECT_CONTAINS(error_of(with("y", "overwrites", 11)), "persistent tensors are not versioned");
  // The overwriting op must read the old version, and nobody may read it afterwards.
  Json doc = storage_trace();
  doc["ops"][index_of(doc["ops"], "relu_")]["inputs"] = {10};
  EXPECT_CONTAINS(error_of(doc), "tensor 'y' overwrites 'c', so its producer 'relu_' must list 'c' among its inputs");
  doc = storage_trace();
  doc["ops"][index_of(doc["ops"], "grad")]["inputs"] = {19, 12};
  EXPECT_CONTAINS(error_of(doc), "op 'grad' reads 'c' after op 'relu_' overwrote its storage (the new version is 'y')");
  doc = storage_trace();  // a read after the overwrite is caught first, so: one op, two versions of c
  doc["tensors"].push_back({{"id", 40}, {"name", "z"}, {"role", "activation"}, {"bytes", 1024}, {"overwrites", 12}});
  doc["ops"][index_of(doc["ops"], "relu_")]["outputs"].push_back(40);
  EXPECT_CONTAINS(error_of(doc), "tensor 'c' is overwritten twice (by 'y' and 'z')");
  // Release points.
  EXPECT_CONTAINS(error_of(with("dy", "free_after", 6)), "op 'wgrad' reads tensor 'dy' after its release point (op 'grad')");
  EXPECT_CONTAINS(error_of(with("dy", "free_after", 2)), "tensor 'dy' is released after op 'init_s', before its producer 'grad'");
  EXPECT_CONTAINS(error_of(with("dy", "free_after", 9)), "tensor 'dy' is released after op index 9, which does not exist");
  EXPECT_CONTAINS(error_of(with("w", "free_after", 8)), "tensor 'w' is persistent and never released");
  EXPECT_CONTAINS(error_of(with("c", "free_after", 6)), "tensor 'c' has a release point (free_after) but 'y' overwrites");
  EXPECT_CONTAINS(error_of(with("dy", "free_after", -1)), "free_after: expected a non-negative integer, got -1");
}

}  // namespace
}  // namespace ferry
