// The training-graph IR: one training iteration as tensors and ops in execution order.
//
// Design
// - A Graph is plain data: `tensors` and `ops` are vectors indexed by TensorId / OpId, and the
//   order of `ops` IS the execution order (forward, then backward, then optimizer update).
// - Every tensor has a role. Weights and optimizer state are *persistent*: they live across
//   iterations, are never freed, and update ops mutate them in place (an update op lists the
//   tensors it writes in `outputs`, although they already existed). Every other tensor is
//   *transient*: it is produced by exactly one op (or, for kInput, exists at the start of the
//   iteration) and dies after its last use. See Note [Persistent vs transient tensors].
// - Ops carry enough attributes (OpAttrs) for a backend to run them; graphs imported from a trace
//   may carry no attributes, in which case they can be analysed, costed and planned but not run.
// - Backward and update ops are derived from the forward graph by autodiff (builder.h); each
//   backward op reads exactly what the real kernel needs (see autodiff.cc).
//
// Note [Persistent vs transient tensors]
//   Persistent = kWeight, kWeightCopy and kOptimizerState. The analysis puts them in a separate
//   region that is allocated once; lifetimes and the memory-sharing plan only concern transient
//   tensors. Weight gradients are transient: they are produced in backward and die at the update op.
//
// Note [Mixed precision]
//   GraphInfo::precision says how an iteration computes. fp32 and tf32 graphs are identical (every
//   float tensor f32; tf32 only tells the cost model to run conv/matmul on TF32 tensor cores).
//   amp-fp16 and amp-bf16 graphs (GraphBuilder) store activations, data inputs and every gradient
//   in 16 bits; each weight is an fp32 master (kWeight) plus a 16-bit working copy (kWeightCopy)
//   that forward and backward read and the update op rewrites; optimizer state stays fp32; norm
//   statistics, the loss and cross-entropy's log-probabilities stay fp32 (as under autocast).
//   amp-fp16 adds the loss scale (an fp32 scalar of optimizer state) that cross-entropy's backward
//   multiplies by and the updates divide by. This is Apex O2 / Megatron-style mixed precision.
//
// Note [Storage versions and release points]
//   Frameworks write tensors in place (relu_, add_, out= forms, gradient accumulation) and free
//   memory when their own references go, not at the last read. The IR keeps "every transient tensor
//   is written once" and expresses both as tensor fields (trace format v2 reads them):
//   - `overwrites`: this tensor is a new version of another's storage, written by its producer (which
//     reads the old version). The old version may not be read after that. Like `inplace_capable`,
//     it lets the new version take over the old one's buffer when the old one dies at the producer
//     (Graph::in_place_sources), so a storage's chain of versions is one buffer.
//   - `free_after`: the tensor lives through that step (its last use is at least there), so the
//     analysis, the planners and the executor hold it as the framework does.
//   Several forward/backward passes in one iteration (gradient accumulation) need no field: ops
//   carry their phase, and a weight gradient accumulated over passes is a chain of versions.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ferry {

using TensorId = int32_t;
using OpId = int32_t;
inline constexpr TensorId kNoTensor = -1;
inline constexpr OpId kNoOp = -1;

enum class DType : uint8_t { kF32, kF16, kBF16, kI32, kI64, kU8 };

enum class TensorRole : uint8_t {
  kInput,           // a batch of data or labels, present at the start of the iteration
  kWeight,          // trainable parameter (persistent)
  kActivation,      // forward intermediate (feature map), including saved statistics
  kGradient,        // gradient of an activation or input (backward intermediate)
  kWeightGradient,  // gradient of a weight, consumed by the optimizer update
  kOptimizerState,  // momentum, Adam moments (persistent)
  kWorkspace,       // kernel-private data kept from forward to backward (max-pool indices, dropout mask)
  kWeightCopy,      // 16-bit working copy of a weight under mixed precision (persistent; Note [Mixed precision])
};

// The memory layout of 4-D activations on a GPU (`--layout`): NHWC (channels last) is what
// tensor-core convolutions read; with NCHW (PyTorch's default) the library transposes each 16-bit
// convolution's operands in and its result out. Only the cost model reads it (cost_model.h); the
// tensors and their sizes are the same, and the CPU backend picks its own layouts.
enum class Layout : uint8_t { kNhwc, kNchw };

// How an iteration computes (Note [Mixed precision]); `--precision` on the command line.
enum class Precision : uint8_t { kFp32, kTf32, kAmpFp16, kAmpBf16 };

enum class Phase : uint8_t { kForward, kBackward, kUpdate };

// Op types. Forward kernels, then the backward kernels autodiff emits, then optimizer updates.
// `kOpaque` is for traces recorded elsewhere whose op types Ferry does not know.
#define FERRY_OP_TYPES(X)                                                                        \
  X(kConv2d, "conv2d")                                                                            \
  X(kBatchNorm, "batch_norm")                                                                     \
  X(kRelu, "relu")                                                                                \
  X(kGelu, "gelu")                                                                                \
  X(kMaxPool, "max_pool")                                                                         \
  X(kAvgPool, "avg_pool")                                                                         \
  X(kGlobalAvgPool, "global_avg_pool")                                                            \
  X(kLinear, "linear")                                                                            \
  X(kMatMul, "matmul")                                                                            \
  X(kSoftmax, "softmax")                                                                          \
  X(kLayerNorm, "layer_norm")                                                                     \
  X(kConcat, "concat")                                                                            \
  X(kAdd, "add")                                                                                  \
  X(kEmbedding, "embedding")                                                                      \
  X(kDropout, "dropout")                                                                          \
  X(kSplitHeads, "split_heads")                                                                   \
  X(kMergeHeads, "merge_heads")                                                                   \
  X(kCrossEntropy, "cross_entropy")                                                               \
  X(kConvBwdData, "conv2d_bwd_data")                                                              \
  X(kConvBwdWeights, "conv2d_bwd_weights")                                                        \
  X(kBatchNormBwd, "batch_norm_bwd")                                                              \
  X(kReluBwd, "relu_bwd")                                                                         \
  X(kGeluBwd, "gelu_bwd")                                                                         \
  X(kMaxPoolBwd, "max_pool_bwd")                                                                  \
  X(kAvgPoolBwd, "avg_pool_bwd")                                                                  \
  X(kGlobalAvgPoolBwd, "global_avg_pool_bwd")                                                     \
  X(kLinearBwdData, "linear_bwd_data")                                                            \
  X(kLinearBwdWeights, "linear_bwd_weights")                                                      \
  X(kSoftmaxBwd, "softmax_bwd")                                                                   \
  X(kLayerNormBwd, "layer_norm_bwd")                                                              \
  X(kConcatBwd, "concat_bwd")                                                                     \
  X(kEmbeddingBwd, "embedding_bwd")                                                               \
  X(kDropoutBwd, "dropout_bwd")                                                                   \
  X(kCrossEntropyBwd, "cross_entropy_bwd")                                                        \
  X(kGradAccumulate, "grad_accumulate")                                                           \
  X(kSgdUpdate, "sgd_update")                                                                     \
  X(kAdamUpdate, "adam_update")                                                                   \
  X(kOpaque, "opaque")

enum class OpType : uint8_t {
#define FERRY_OP_ENUM(e, s) e,
  FERRY_OP_TYPES(FERRY_OP_ENUM)
#undef FERRY_OP_ENUM
};

// Attributes a backend needs to run an op. One flat struct for all op types (fields that do not
// apply keep their defaults); backward ops copy the attributes of their forward op.
struct OpAttrs {
  // conv2d / pooling (NCHW). Padding is symmetric per dimension.
  int32_t kernel_h = 0, kernel_w = 0;
  int32_t stride_h = 1, stride_w = 1;
  int32_t pad_h = 0, pad_w = 0;
  int32_t groups = 1;
  bool has_bias = false;               // conv2d, linear
  bool count_include_pad = true;       // avg_pool
  // linear: number of input features K; the input is viewed as [numel/K, K].
  int64_t in_features = 0;
  // cross_entropy (and its backward): the class axis of the logits; -1 = the last. The labels
  // have the logits' shape without that axis (span prediction: logits [B,T,2], labels [B,2]).
  int32_t class_axis = -1;
  // matmul: C[b] = scale * op(A[b]) x op(B[b]); op() transposes the last two dims when set.
  bool transpose_a = false, transpose_b = false;
  float scale = 1.0f;
  // softmax over the last axis; causal masks positions j > i of the last two dims.
  bool causal = false;
  // batch_norm / layer_norm
  float eps = 1e-5f;
  float momentum = 0.1f;  // batch_norm running statistics
  // gelu: tanh approximation (GPT-2) or exact erf (BERT)
  bool gelu_tanh = false;
  // dropout
  float dropout_p = 0.0f;
  // concat axis (concat, concat_bwd)
  int32_t axis = 1;
  // split_heads / merge_heads: number of heads; split_heads splits [B,T,parts*H*dh] into `parts`
  // tensors [B,H,T,dh] (parts = 3 for a fused QKV projection).
  int32_t heads = 0;
  int32_t parts = 1;
  // optimizer
  float lr = 0.0f, momentum_sgd = 0.0f, beta1 = 0.9f, beta2 = 0.999f, adam_eps = 1e-8f,
        weight_decay = 0.0f;

  bool operator==(const OpAttrs&) const = default;
};

struct Tensor {
  TensorId id = kNoTensor;
  std::string name;
  std::vector<int64_t> shape;  // empty for a scalar
  DType dtype = DType::kF32;
  TensorRole role = TensorRole::kActivation;
  uint64_t bytes = 0;  // storage size; for trace-imported tensors the only size known
  // For gradients: the tensor this is the gradient of (kNoTensor otherwise).
  TensorId grad_of = kNoTensor;
  // Storage versions (Note [Storage versions and release points]): the tensor whose storage this
  // one's producer writes in place, making this tensor its new version; kNoTensor for a fresh one.
  TensorId overwrites = kNoTensor;
  // The framework's own release point: the tensor stays allocated through this step even when no
  // op reads it there; kNoOp (the default) frees it after its last use.
  OpId free_after = kNoOp;

  bool persistent() const {
    return role == TensorRole::kWeight || role == TensorRole::kWeightCopy || role == TensorRole::kOptimizerState;
  }
  int64_t numel() const;
};

struct Op {
  OpId id = kNoOp;
  std::string name;
  OpType type = OpType::kOpaque;
  Phase phase = Phase::kForward;
  std::vector<TensorId> inputs;
  std::vector<TensorId> outputs;
  OpAttrs attrs;
  uint64_t flops = 0;   // floating-point operations (a multiply-add counts 2)
  uint64_t macs = 0;    // multiply-accumulates of conv/linear/matmul (0 for other ops)
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  std::optional<double> time_us;  // measured time, when known (profiler, imported trace)
  OpId forward_op = kNoOp;        // for backward ops: the forward op they differentiate
  // The op may write its first output over its first input's buffer when that input dies here
  // (relu, add, dropout, their backward counterparts, grad accumulation).
  bool inplace_capable = false;

  // Whether the op writes t (t is among its outputs).
  bool writes(TensorId t) const { return std::find(outputs.begin(), outputs.end(), t) != outputs.end(); }
};

enum class OptimizerKind : uint8_t { kSgd, kAdam };

struct GraphInfo {
  std::string model;       // zoo name, or the trace's model name
  int64_t batch = 0;
  int64_t image = 0;       // input side for CNNs (0 if n/a)
  int64_t seq = 0;         // sequence length for transformers (0 if n/a)
  int64_t num_classes = 0; // classes or vocabulary size
  OptimizerKind optimizer = OptimizerKind::kSgd;
  Precision precision = Precision::kFp32;
  Layout layout = Layout::kNhwc;
};

struct Graph {
  GraphInfo info;
  std::vector<Tensor> tensors;
  std::vector<Op> ops;  // execution order
  TensorId loss = kNoTensor;

  const Tensor& tensor(TensorId id) const { return tensors[static_cast<size_t>(id)]; }
  const Op& op(OpId id) const { return ops[static_cast<size_t>(id)]; }

  // The structural half of the in-place rule, per output of `op`: the input whose buffer output k
  // may take over, or kNoTensor. The first output of an inplace_capable op may take its first
  // input's; any output may take the tensor it `overwrites` (a new version of a storage). The two
  // tensors must be distinct transient tensors of equal byte size, the input not a data input, and
  // no input is taken by two outputs (the earlier output wins). The other half of the rule, that the
  // input dies at this op, depends on the schedule and is the caller's.
  std::vector<TensorId> in_place_sources(const Op& op) const;

  // Structural validation: ids in range, each transient tensor produced exactly once and before
  // its first use, inputs exist at the start, persistent tensors never produced by forward or
  // backward ops, no op reads its own output. Errors name the op and tensor at fault.
  Status validate() const;

  uint64_t param_count() const;        // elements of all kWeight tensors
  uint64_t weight_bytes() const;       // bytes of all kWeight tensors
  uint64_t forward_macs() const;       // sum of macs over forward ops
  uint64_t total_flops() const;        // sum of flops over all ops
};

// Per tensor, its class for codec figures: "<producing op type>/<role>" ("relu/activation"),
// "input/<role>" for tensors no op produces. Tensors of one class compress alike (a ReLU output
// is half zeros, a convolution's is dense), so codecs are measured and chosen per class.
std::vector<std::string> tensor_classes(const Graph& g);

// Names for enums, used by the CLI, the trace format and messages.
std::string_view to_string(OpType t);
std::string_view to_string(TensorRole r);
std::string_view to_string(Phase p);
std::string_view to_string(DType d);
std::string_view to_string(OptimizerKind k);
std::string_view to_string(Precision p);  // "fp32", "tf32", "amp-fp16", "amp-bf16"
std::optional<Precision> precision_from_string(std::string_view s);
std::string_view to_string(Layout l);  // "nhwc", "nchw"
std::optional<Layout> layout_from_string(std::string_view s);
// The dtype of activations and gradients under `p`: f16 / bf16 for AMP, else f32.
DType activation_dtype(Precision p);
std::optional<OpType> op_type_from_string(std::string_view s);
std::optional<TensorRole> role_from_string(std::string_view s);
std::optional<Phase> phase_from_string(std::string_view s);
std::optional<DType> dtype_from_string(std::string_view s);
uint64_t dtype_size(DType d);

}  // namespace ferry
