// GraphBuilder: write a network as a forward graph; finish() derives the backward and optimizer ops.
//
// Usage:
//   GraphBuilder b("tiny", {.batch = 2});
//   TensorId x = b.input("image", {2, 3, 32, 32});
//   TensorId y = b.labels("label", {2});
//   TensorId h = b.relu("relu1", b.batch_norm("bn1", b.conv2d("conv1", x, 16, 3, 1, 1)));
//   TensorId logits = b.linear("fc", b.global_avg_pool("pool", h), 10);
//   b.cross_entropy("loss", logits, y);
//   Result<Graph> g = std::move(b).finish(TrainOptions{});
//
// Shapes are checked as ops are added; a bad shape or a byte count that overflows 64 bits makes
// every later call a no-op and finish() return InvalidArgument naming the op at fault.
//
// Autodiff (finish): ops are differentiated in reverse order. Each backward op reads exactly what
// the real kernel needs (conv backward-data reads the weights, backward-weights the input; ReLU
// backward reads its output; batch norm reads its input and saved statistics; max pool reads its
// indices). Gradients of a tensor with several consumers are summed by grad_accumulate ops;
// add's backward passes the incoming gradient through without a copy. No gradient is computed
// for data inputs. The update phase has one optimizer op per weight, in weight creation order.
//
// Precision (GraphInfo::precision, Note [Mixed precision] in graph.h): under amp-fp16/amp-bf16
// activations, float data inputs and gradients are 16-bit, weight() creates an fp32 master plus a
// 16-bit copy and returns the copy (the tensor layers read), the gradient of a copy is the
// master's weight gradient, and each update rewrites the copy. Norm statistics, the loss and the
// log-probabilities stay fp32.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace ferry {

struct TrainOptions {
  OptimizerKind optimizer = OptimizerKind::kSgd;
  float lr = 0.01f;
  float momentum = 0.9f;      // SGD momentum; 0 = plain SGD (no state tensor)
  float weight_decay = 0.0f;  // decoupled for Adam (AdamW)
  float beta1 = 0.9f, beta2 = 0.999f, adam_eps = 1e-8f;
};

class GraphBuilder {
 public:
  explicit GraphBuilder(GraphInfo info);

  // Leaves. A float input is stored in the activation dtype (16-bit under AMP).
  TensorId input(const std::string& name, std::vector<int64_t> shape, DType dtype = DType::kF32);
  TensorId labels(const std::string& name, std::vector<int64_t> shape);  // int32 class ids
  // A trainable weight; under AMP its 16-bit copy (`name.f16` / `name.bf16`), which ops read.
  TensorId weight(const std::string& name, std::vector<int64_t> shape);

  // Layers that create their own weights (named `name.weight`, `name.bias`).
  TensorId conv2d(const std::string& name, TensorId x, int64_t out_channels, int kernel, int stride = 1,
                  int pad = 0, bool bias = false, int groups = 1);
  TensorId conv2d_rect(const std::string& name, TensorId x, int64_t out_channels, int kernel_h, int kernel_w,
                       int stride, int pad_h, int pad_w, bool bias = false);
  TensorId batch_norm(const std::string& name, TensorId x, float eps = 1e-5f);
  TensorId layer_norm(const std::string& name, TensorId x, float eps = 1e-5f);
  TensorId linear(const std::string& name, TensorId x, int64_t out_features, bool bias = true);
  // y = x W^T (+ b) with an existing weight [out, in] (tied embeddings); `b` may be kNoTensor.
  TensorId linear_with(const std::string& name, TensorId x, TensorId w, TensorId b);
  // Token embedding (+ optional learned position and token-type embeddings, summed).
  // Creates `name.word` [vocab, dim], `name.position` [max_pos, dim] when max_pos > 0,
  // `name.token_type` [type_vocab, dim] when type_vocab > 0 (all tokens use type 0).
  TensorId embedding(const std::string& name, TensorId ids, int64_t vocab, int64_t dim, int64_t max_pos,
                     int64_t type_vocab = 0);
  TensorId embedding_weight(TensorId embedding_output) const;  // the word table of an embedding

  // Parameter-free ops.
  TensorId relu(const std::string& name, TensorId x);
  TensorId gelu(const std::string& name, TensorId x, bool tanh_approx);
  TensorId max_pool(const std::string& name, TensorId x, int kernel, int stride, int pad = 0);
  TensorId avg_pool(const std::string& name, TensorId x, int kernel, int stride, int pad = 0,
                    bool count_include_pad = true);
  TensorId global_avg_pool(const std::string& name, TensorId x);  // [N,C,H,W] -> [N,C]
  TensorId matmul(const std::string& name, TensorId a, TensorId b, bool transpose_a, bool transpose_b,
                  float scale = 1.0f);
  TensorId softmax(const std::string& name, TensorId x, bool causal = false);
  TensorId concat(const std::string& name, const std::vector<TensorId>& xs, int axis = 1);
  TensorId add(const std::string& name, TensorId a, TensorId b);
  TensorId dropout(const std::string& name, TensorId x, float p);
  // [B,T,parts*D] -> `parts` tensors [B,heads,T,D/heads].
  std::vector<TensorId> split_heads(const std::string& name, TensorId x, int heads, int parts);
  TensorId merge_heads(const std::string& name, TensorId x);  // [B,H,T,dh] -> [B,T,H*dh]
  // Mean cross-entropy of logits against int32 labels; becomes the graph's loss. The classes lie
  // along `class_axis` (-1: the last), and the labels have the logits' shape without that axis:
  // logits [..., C] with labels [...], or span logits [B,T,2] over positions (class_axis 1) with
  // labels [B,2].
  TensorId cross_entropy(const std::string& name, TensorId logits, TensorId labels, int class_axis = -1);

  const Tensor& tensor(TensorId id) const;
  const std::vector<int64_t>& shape(TensorId id) const;
  bool failed() const { return !status_.ok(); }

  // Derives backward and update ops and returns the validated graph.
  Result<Graph> finish(const TrainOptions& options) &&;

 private:
  TensorId new_tensor(const std::string& name, std::vector<int64_t> shape, DType dtype, TensorRole role);
  // A float activation: in the activation dtype of the graph's precision.
  TensorId activation(const std::string& name, std::vector<int64_t> shape) {
    return new_tensor(name, std::move(shape), act_dtype_, TensorRole::kActivation);
  }
  OpId new_op(const std::string& name, OpType type, std::vector<TensorId> inputs, std::vector<TensorId> outputs,
              const OpAttrs& attrs);
  void fail(const std::string& op_name, const std::string& why);
  bool usable(TensorId id) const;

  Graph g_;
  Status status_;
  DType act_dtype_ = DType::kF32;
  std::vector<TensorId> weights_in_order_;  // fp32 masters
  std::vector<TensorId> master_of_;         // per tensor: the master of a weight copy, else kNoTensor
};

// Fills flops, macs, bytes_read and bytes_written of `op` from its type, attributes and tensors.
void compute_op_costs(const Graph& g, Op& op);

}  // namespace ferry
