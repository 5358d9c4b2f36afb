// Training data: a learnable synthetic set (deterministic from a seed) and a CIFAR-10 reader.
//
// A DataSource fills the graph's data inputs for one iteration, in the plain host layout
// (row-major NCHW float images, int32 labels and token ids). The role of each input is read off the
// graph: a float [N,C,H,W] input is an image batch, an int32 input read by an embedding holds
// token ids, an int32 input read by cross_entropy holds labels.
//
// Synthetic images: every class has a fixed smooth template; a sample is its class template plus
// noise, so a CNN can learn the classes and the loss goes down. Synthetic tokens: a fixed random
// successor table `next` over the vocabulary; a sequence follows it with probability 0.9, else a
// random token. Causal LMs predict the next token; encoders (BERT) reconstruct their input;
// span labels (SQuAD start and end positions) are random positions, not learnable.
// Everything is a pure function of (seed, iteration, position): bitwise reproducible.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "graph/graph.h"

namespace ferry {

enum class InputKind : uint8_t { kImages, kLabels, kTokenIds, kUnknown };

// What each data input of `g` holds (index: position in `data_inputs(g)`).
std::vector<TensorId> data_inputs(const Graph& g);
InputKind input_kind(const Graph& g, TensorId t);

class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual std::string name() const = 0;
  // Fills every data input of `g` for `iteration` into `host[i]` (plain layout, sized to
  // the tensor's logical bytes).
  virtual Status fill(const Graph& g, int64_t iteration, std::vector<std::vector<std::byte>>& host) = 0;
};

// The built-in learnable synthetic set.
std::unique_ptr<DataSource> make_synthetic_data(uint64_t seed);
// CIFAR-10 binary version from `dir` (data_batch_1.bin .. data_batch_5.bin). Errors: missing or
// truncated files (InvalidArgument, naming the file). Needs a CNN at image 32 with 10 classes.
Result<std::unique_ptr<DataSource>> open_cifar10(const std::string& dir, const Graph& g);
// Parses --data: "synthetic" or "cifar10:DIR".
Result<std::unique_ptr<DataSource>> open_data(const std::string& spec, const Graph& g, uint64_t seed);

}  // namespace ferry
