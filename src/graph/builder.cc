// GraphBuilder: forward ops with shape inference, then reverse-mode autodiff and optimizer ops.
//
// Op conventions (inputs -> outputs, in this order; the backend relies on them):
//   conv2d           {x, w[, b]}            -> {y}
//   conv2d_bwd_data  {dy, w}                -> {dx}
//   conv2d_bwd_weights {dy, x}              -> {dw[, db]}
//   batch_norm       {x, gamma, beta}       -> {y, mean, var}        (batch statistics)
//   batch_norm_bwd   {dy, x, gamma, mean, var} -> {dx, dgamma, dbeta}
//   layer_norm       {x, gamma, beta}       -> {y, mean, var}        (per row of the last dim)
//   layer_norm_bwd   {dy, x, gamma, mean, var} -> {dx, dgamma, dbeta}
//   relu {x} -> {y};  relu_bwd {dy, y} -> {dx}
//   gelu {x} -> {y};  gelu_bwd {dy, x} -> {dx}
//   max_pool {x} -> {y, indices};  max_pool_bwd {dy, indices} -> {dx}
//   avg_pool {x} -> {y};  avg_pool_bwd {dy} -> {dx};  global_avg_pool(_bwd) likewise
//   linear {x, w[, b]} -> {y};  linear_bwd_data {dy, w} -> {dx};  linear_bwd_weights {dy, x} -> {dw[, db]}
//   matmul {a, b} -> {c}; its backward is two matmuls with transposes (see matmul_backward below)
//   softmax {x} -> {y};  softmax_bwd {dy, y} -> {dx}
//   concat {x1..xn} -> {y};  concat_bwd {dy} -> {dx1..dxn}
//   add {a, b} -> {y};  no backward op: dy is the gradient contribution of both a and b
//   embedding {ids, word[, position][, token_type]} -> {y}
//   embedding_bwd {dy, ids} -> {dword[, dposition][, dtoken_type]}
//   dropout {x} -> {y, mask};  dropout_bwd {dy, mask} -> {dx}
//   split_heads {x} -> {q[, k, v]};  its backward is merge_heads {dq[, dk, dv]} -> {dx}
//   merge_heads {x} -> {y};  its backward is split_heads (parts = 1)
//   cross_entropy {logits, labels} -> {loss, log_probs}
//   cross_entropy_bwd {log_probs, labels[, loss_scale]} -> {dlogits}
//   grad_accumulate {g1, g2} -> {g}   (emitted eagerly when a second partial gradient arrives)
//   sgd_update {w, dw[, momentum][, w16][, loss_scale]} -> {w[, momentum][, w16]}
//   adam_update {w, dw, m, v[, w16][, loss_scale]} -> {w, m, v[, w16]}
//   (w16: the 16-bit weight copy of AMP graphs; loss_scale: amp-fp16 only. Ferry's CPU backend
//   runs fp32 graphs, which have neither.)
#include "graph/builder.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "common/units.h"

namespace ferry {

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ","));
}

}  // namespace

GraphBuilder::GraphBuilder(GraphInfo info) : act_dtype_(activation_dtype(info.precision)) { g_.info = std::move(info); }

void GraphBuilder::fail(const std::string& op_name, const std::string& why) {
  if (status_.ok()) status_ = Status::InvalidArgument(fmt::format("{}: {}", op_name, why));
}

bool GraphBuilder::usable(TensorId id) const {
  return status_.ok() && id >= 0 && id < static_cast<TensorId>(g_.tensors.size());
}

const Tensor& GraphBuilder::tensor(TensorId id) const { return g_.tensor(id); }
const std::vector<int64_t>& GraphBuilder::shape(TensorId id) const { return g_.tensor(id).shape; }

TensorId GraphBuilder::new_tensor(const std::string& name, std::vector<int64_t> shape, DType dtype, TensorRole role) {
  if (!status_.ok()) return kNoTensor;
  uint64_t bytes = dtype_size(dtype);
  for (int64_t d : shape) {
    if (d <= 0) {
      fail(name, fmt::format("shape {} has a non-positive dimension (input too small for this network?)",
                             shape_str(shape)));
      return kNoTensor;
    }
    auto b = checked_mul(bytes, static_cast<uint64_t>(d));
    if (!b || *b > (uint64_t{1} << 62)) {
      fail(name, fmt::format("shape {} is too large: its byte count overflows 64 bits", shape_str(shape)));
      return kNoTensor;
    }
    bytes = *b;
  }
  Tensor t;
  t.id = static_cast<TensorId>(g_.tensors.size());
  t.name = name;
  t.shape = std::move(shape);
  t.dtype = dtype;
  t.role = role;
  t.bytes = bytes;
  g_.tensors.push_back(std::move(t));
  master_of_.push_back(kNoTensor);
  return g_.tensors.back().id;
}

OpId GraphBuilder::new_op(const std::string& name, OpType type, std::vector<TensorId> inputs,
                          std::vector<TensorId> outputs, const OpAttrs& attrs) {
  if (!status_.ok()) return kNoOp;
  for (TensorId t : outputs)
    if (t == kNoTensor) return kNoOp;
  Op op;
  op.id = static_cast<OpId>(g_.ops.size());
  op.name = name;
  op.type = type;
  op.phase = Phase::kForward;
  op.inputs = std::move(inputs);
  op.outputs = std::move(outputs);
  op.attrs = attrs;
  op.inplace_capable = type == OpType::kRelu || type == OpType::kAdd || type == OpType::kDropout;
  g_.ops.push_back(std::move(op));
  return g_.ops.back().id;
}

TensorId GraphBuilder::input(const std::string& name, std::vector<int64_t> shape, DType dtype) {
  return new_tensor(name, std::move(shape), dtype == DType::kF32 ? act_dtype_ : dtype, TensorRole::kInput);
}

TensorId GraphBuilder::labels(const std::string& name, std::vector<int64_t> shape) {
  return new_tensor(name, std::move(shape), DType::kI32, TensorRole::kInput);
}

TensorId GraphBuilder::weight(const std::string& name, std::vector<int64_t> shape) {
  TensorId id = new_tensor(name, shape, DType::kF32, TensorRole::kWeight);
  if (id == kNoTensor) return kNoTensor;
  weights_in_order_.push_back(id);
  if (act_dtype_ == DType::kF32) return id;
  TensorId copy = new_tensor(fmt::format("{}.{}", name, to_string(act_dtype_)), std::move(shape), act_dtype_,
                             TensorRole::kWeightCopy);
  if (copy != kNoTensor) master_of_[static_cast<size_t>(copy)] = id;
  return copy;
}

TensorId GraphBuilder::conv2d(const std::string& name, TensorId x, int64_t out_channels, int kernel, int stride,
                              int pad, bool bias, int groups) {
  if (!usable(x)) return kNoTensor;
  const auto s = shape(x);
  if (s.size() != 4) return fail(name, fmt::format("conv2d needs an NCHW input, got {}", shape_str(s))), kNoTensor;
  if (groups <= 0 || s[1] % groups != 0 || out_channels % groups != 0)
    return fail(name, fmt::format("groups {} must divide channels {} and {}", groups, s[1], out_channels)), kNoTensor;
  TensorId w = weight(name + ".weight", {out_channels, s[1] / groups, kernel, kernel});
  TensorId b = bias ? weight(name + ".bias", {out_channels}) : kNoTensor;
  if (!status_.ok()) return kNoTensor;
  int64_t oh = (s[2] + 2 * pad - kernel) / stride + 1, ow = (s[3] + 2 * pad - kernel) / stride + 1;
  if (s[2] + 2 * pad < kernel || s[3] + 2 * pad < kernel) oh = ow = 0;
  TensorId y = activation(name, {s[0], out_channels, oh, ow});
  OpAttrs a;
  a.kernel_h = a.kernel_w = kernel;
  a.stride_h = a.stride_w = stride;
  a.pad_h = a.pad_w = pad;
  a.groups = groups;
  a.has_bias = bias;
  std::vector<TensorId> in = {x, w};
  if (bias) in.push_back(b);
  new_op(name, OpType::kConv2d, in, {y}, a);
  return y;
}

TensorId GraphBuilder::conv2d_rect(const std::string& name, TensorId x, int64_t out_channels, int kernel_h,
                                   int kernel_w, int stride, int pad_h, int pad_w, bool bias) {
  if (!usable(x)) return kNoTensor;
  const auto s = shape(x);
  if (s.size() != 4) return fail(name, fmt::format("conv2d needs an NCHW input, got {}", shape_str(s))), kNoTensor;
  TensorId w = weight(name + ".weight", {out_channels, s[1], kernel_h, kernel_w});
  TensorId b = bias ? weight(name + ".bias", {out_channels}) : kNoTensor;
  if (!status_.ok()) return kNoTensor;
  int64_t oh = (s[2] + 2 * pad_h - kernel_h) / stride + 1, ow = (s[3] + 2 * pad_w - kernel_w) / stride + 1;
  if (s[2] + 2 * pad_h < kernel_h || s[3] + 2 * pad_w < kernel_w) oh = ow = 0;
  TensorId y = activation(name, {s[0], out_channels, oh, ow});
  OpAttrs a;
  a.kernel_h = kernel_h;
  a.kernel_w = kernel_w;
  a.stride_h = a.stride_w = stride;
  a.pad_h = pad_h;
  a.pad_w = pad_w;
  a.has_bias = bias;
  std::vector<TensorId> in = {x, w};
  if (bias) in.push_back(b);
  new_op(name, OpType::kConv2d, in, {y}, a);
  return y;
}

TensorId GraphBuilder::batch_norm(const std::string& name, TensorId x, float eps) {
  if (!usable(x)) return kNoTensor;
  const auto s = shape(x);
  if (s.size() < 2) return fail(name, "batch_norm needs at least [N,C]"), kNoTensor;
  int64_t c = s[1];
  TensorId gamma = weight(name + ".weight", {c});
  TensorId beta = weight(name + ".bias", {c});
  TensorId y = activation(name, s);
  TensorId mean = new_tensor(name + ".mean", {c}, DType::kF32, TensorRole::kActivation);
  TensorId var = new_tensor(name + ".var", {c}, DType::kF32, TensorRole::kActivation);
  OpAttrs a;
  a.eps = eps;
  new_op(name, OpType::kBatchNorm, {x, gamma, beta}, {y, mean, var}, a);
  return y;
}

TensorId GraphBuilder::layer_norm(const std::string& name, TensorId x, float eps) {
  if (!usable(x)) return kNoTensor;
  const auto s = shape(x);
  if (s.empty()) return fail(name, "layer_norm needs at least one dimension"), kNoTensor;
  int64_t d = s.back();
  int64_t rows = tensor(x).numel() / d;
  TensorId gamma = weight(name + ".weight", {d});
  TensorId beta = weight(name + ".bias", {d});
  TensorId y = activation(name, s);
  TensorId mean = new_tensor(name + ".mean", {rows}, DType::kF32, TensorRole::kActivation);
  TensorId var = new_tensor(name + ".var", {rows}, DType::kF32, TensorRole::kActivation);
  OpAttrs a;
  a.eps = eps;
  new_op(name, OpType::kLayerNorm, {x, gamma, beta}, {y, mean, var}, a);
  return y;
}

TensorId GraphBuilder::linear(const std::string& name, TensorId x, int64_t out_features, bool bias) {
  if (!usable(x)) return kNoTensor;
  const auto s = shape(x);
  if (s.size() < 2) return fail(name, fmt::format("linear needs a batched input, got {}", shape_str(s))), kNoTensor;
  // NCHW feature maps are flattened per sample (VGG's classifier); other ranks keep their leading dims.
  int64_t in_features = s.size() == 4 ? s[1] * s[2] * s[3] : s.back();
  TensorId w = weight(name + ".weight", {out_features, in_features});
  TensorId b = bias ? weight(name + ".bias", {out_features}) : kNoTensor;
  return linear_with(name, x, w, b);
}

TensorId GraphBuilder::linear_with(const std::string& name, TensorId x, TensorId w, TensorId b) {
  if (!usable(x) || !usable(w)) return kNoTensor;
  const auto s = shape(x);
  const auto ws = shape(w);
  if (ws.size() != 2) return fail(name, "linear weight must be [out, in]"), kNoTensor;
  int64_t in_features = ws[1];
  std::vector<int64_t> out_shape;
  if (s.size() == 4) {
    if (s[1] * s[2] * s[3] != in_features)
      return fail(name, fmt::format("input {} does not flatten to {} features", shape_str(s), in_features)), kNoTensor;
    out_shape = {s[0], ws[0]};
  } else {
    if (s.back() != in_features)
      return fail(name, fmt::format("input {} has last dim != {} features", shape_str(s), in_features)), kNoTensor;
    out_shape = s;
    out_shape.back() = ws[0];
  }
  if (b != kNoTensor && (!usable(b) || shape(b) != std::vector<int64_t>{ws[0]}))
    return fail(name, "linear bias must be [out]"), kNoTensor;
  TensorId y = activation(name, out_shape);
  OpAttrs a;
  a.in_features = in_features;
  a.has_bias = b != kNoTensor;
  std::vector<TensorId> in = {x, w};
  if (b != kNoTensor) in.push_back(b);
  new_op(name, OpType::kLinear, in, {y}, a);
  return y;
}

TensorId GraphBuilder::embedding(const std::string& name, TensorId ids, int64_t vocab, int64_t dim, int64_t max_pos,
                                 int64_t type_vocab) {
  if (!usable(ids)) return kNoTensor;
  const auto s = shape(ids);
  if (s.size() != 2 || tensor(ids).dtype != DType::kI32)
    return fail(name, "embedding needs int32 ids [B,T]"), kNoTensor;
  if (max_pos > 0 && s[1] > max_pos)
    return fail(name, fmt::format("sequence length {} exceeds the {} learned positions", s[1], max_pos)), kNoTensor;
  std::vector<TensorId> in = {ids, weight(name + ".word", {vocab, dim})};
  if (max_pos > 0) in.push_back(weight(name + ".position", {max_pos, dim}));
  if (type_vocab > 0) in.push_back(weight(name + ".token_type", {type_vocab, dim}));
  TensorId y = activation(name, {s[0], s[1], dim});
  new_op(name, OpType::kEmbedding, in, {y}, OpAttrs{});
  return y;
}

TensorId GraphBuilder::embedding_weight(TensorId embedding_output) const {
  for (const Op& op : g_.ops)
    if (op.type == OpType::kEmbedding && op.outputs[0] == embedding_output) return op.inputs[1];
  return kNoTensor;
}

TensorId GraphBuilder::relu(const std::string& name, TensorId x) {
  if (!usable(x)) return kNoTensor;
  TensorId y = activation(name, shape(x));
  new_op(name, OpType::kRelu, {x}, {y}, OpAttrs{});
  return y;
}

TensorId GraphBuilder::gelu(const std::string& name, TensorId x, bool tanh_approx) {
  if (!usable(x)) return kNoTensor;
  TensorId y = activation(name, shape(x));
  OpAttrs a;
  a.gelu_tanh = tanh_approx;
  new_op(name, OpType::kGelu, {x}, {y}, a);
  return y;
}

namespace {
int64_t pool_out(int64_t in, int kernel, int stride, int pad) {
  if (in + 2 * pad < kernel) return 0;
  return (in + 2 * pad - kernel) / stride + 1;
}
}  // namespace

TensorId GraphBuilder::max_pool(const std::string& name, TensorId x, int kernel, int stride, int pad) {
  if (!usable(x)) return kNoTensor;
  const auto s = shape(x);
  if (s.size() != 4) return fail(name, "max_pool needs NCHW"), kNoTensor;
  std::vector<int64_t> ys = {s[0], s[1], pool_out(s[2], kernel, stride, pad), pool_out(s[3], kernel, stride, pad)};
  TensorId y = activation(name, ys);
  // oneDNN keeps the argmax as u8 when the window has fewer than 256 elements, else s32.
  DType ws_type = kernel * kernel < 256 ? DType::kU8 : DType::kI32;
  TensorId ws = new_tensor(name + ".indices", ys, ws_type, TensorRole::kWorkspace);
  OpAttrs a;
  a.kernel_h = a.kernel_w = kernel;
  a.stride_h = a.stride_w = stride;
  a.pad_h = a.pad_w = pad;
  new_op(name, OpType::kMaxPool, {x}, {y, ws}, a);
  return y;
}

TensorId GraphBuilder::avg_pool(const std::string& name, TensorId x, int kernel, int stride, int pad,
                                bool count_include_pad) {
  if (!usable(x)) return kNoTensor;
  const auto s = shape(x);
  if (s.size() != 4) return fail(name, "avg_pool needs NCHW"), kNoTensor;
  std::vector<int64_t> ys = {s[0], s[1], pool_out(s[2], kernel, stride, pad), pool_out(s[3], kernel, stride, pad)};
  TensorId y = activation(name, ys);
  OpAttrs a;
  a.kernel_h = a.kernel_w = kernel;
  a.stride_h = a.stride_w = stride;
  a.pad_h = a.pad_w = pad;
  a.count_include_pad = count_include_pad;
  new_op(name, OpType::kAvgPool, {x}, {y}, a);
  return y;
}

TensorId GraphBuilder::global_avg_pool(const std::string& name, TensorId x) {
  if (!usable(x)) return kNoTensor;
  const auto s = shape(x);
  if (s.size() != 4) return fail(name, "global_avg_pool needs NCHW"), kNoTensor;
  TensorId y = activation(name, {s[0], s[1]});
  OpAttrs a;
  a.kernel_h = static_cast<int32_t>(s[2]);
  a.kernel_w = static_cast<int32_t>(s[3]);
  new_op(name, OpType::kGlobalAvgPool, {x}, {y}, a);
  return y;
}

TensorId GraphBuilder::matmul(const std::string& name, TensorId a, TensorId b, bool transpose_a, bool transpose_b,
                              float scale) {
  if (!usable(a) || !usable(b)) return kNoTensor;
  const auto sa = shape(a), sb = shape(b);
  if (sa.size() < 2 || sa.size() != sb.size() || !std::equal(sa.begin(), sa.end() - 2, sb.begin()))
    return fail(name, fmt::format("matmul shapes {} and {} do not batch", shape_str(sa), shape_str(sb))), kNoTensor;
  size_t r = sa.size();
  int64_t m = transpose_a ? sa[r - 1] : sa[r - 2], ka = transpose_a ? sa[r - 2] : sa[r - 1];
  int64_t kb = transpose_b ? sb[r - 1] : sb[r - 2], n = transpose_b ? sb[r - 2] : sb[r - 1];
  if (ka != kb)
    return fail(name, fmt::format("matmul inner dims differ: {} vs {}", ka, kb)), kNoTensor;
  std::vector<int64_t> sc = sa;
  sc[r - 2] = m;
  sc[r - 1] = n;
  TensorId c = activation(name, sc);
  OpAttrs at;
  at.transpose_a = transpose_a;
  at.transpose_b = transpose_b;
  at.scale = scale;
  new_op(name, OpType::kMatMul, {a, b}, {c}, at);
  return c;
}

TensorId GraphBuilder::softmax(const std::string& name, TensorId x, bool causal) {
  if (!usable(x)) return kNoTensor;
  TensorId y = activation(name, shape(x));
  OpAttrs a;
  a.causal = causal;
  new_op(name, OpType::kSoftmax, {x}, {y}, a);
  return y;
}

TensorId GraphBuilder::concat(const std::string& name, const std::vector<TensorId>& xs, int axis) {
  if (xs.empty()) return fail(name, "concat of nothing"), kNoTensor;
  for (TensorId x : xs)
    if (!usable(x)) return kNoTensor;
  std::vector<int64_t> s = shape(xs[0]);
  if (axis < 0 || axis >= static_cast<int>(s.size())) return fail(name, "concat axis out of range"), kNoTensor;
  for (size_t i = 1; i < xs.size(); ++i) {
    const auto si = shape(xs[i]);
    bool ok = si.size() == s.size();
    for (size_t d = 0; ok && d < s.size(); ++d) ok = static_cast<int>(d) == axis || si[d] == s[d];
    if (!ok) return fail(name, fmt::format("concat shapes {} and {} differ off axis {}", shape_str(s), shape_str(si), axis)), kNoTensor;
    s[axis] += si[axis];
  }
  TensorId y = activation(name, s);
  OpAttrs a;
  a.axis = axis;
  new_op(name, OpType::kConcat, xs, {y}, a);
  return y;
}

TensorId GraphBuilder::add(const std::string& name, TensorId a, TensorId b) {
  if (!usable(a) || !usable(b)) return kNoTensor;
  if (shape(a) != shape(b))
    return fail(name, fmt::format("add shapes differ: {} vs {}", shape_str(shape(a)), shape_str(shape(b)))), kNoTensor;
  TensorId y = activation(name, shape(a));
  new_op(name, OpType::kAdd, {a, b}, {y}, OpAttrs{});
  return y;
}

TensorId GraphBuilder::dropout(const std::string& name, TensorId x, float p) {
  if (!usable(x)) return kNoTensor;
  if (!(p >= 0.0f && p < 1.0f)) return fail(name, fmt::format("dropout probability {} not in [0, 1)", p)), kNoTensor;
  TensorId y = activation(name, shape(x));
  TensorId mask = new_tensor(name + ".mask", shape(x), DType::kU8, TensorRole::kWorkspace);
  OpAttrs a;
  a.dropout_p = p;
  new_op(name, OpType::kDropout, {x}, {y, mask}, a);
  return y;
}

std::vector<TensorId> GraphBuilder::split_heads(const std::string& name, TensorId x, int heads, int parts) {
  if (!usable(x)) return std::vector<TensorId>(static_cast<size_t>(std::max(parts, 1)), kNoTensor);
  const auto s = shape(x);
  if (s.size() != 3 || heads <= 0 || parts <= 0 || s[2] % (int64_t{heads} * parts) != 0) {
    fail(name, fmt::format("cannot split {} into {} parts of {} heads", shape_str(s), parts, heads));
    return std::vector<TensorId>(static_cast<size_t>(std::max(parts, 1)), kNoTensor);
  }
  int64_t dh = s[2] / (int64_t{heads} * parts);
  std::vector<TensorId> outs;
  static const char* kPartNames[] = {"q", "k", "v"};
  for (int p = 0; p < parts; ++p) {
    std::string pname = parts == 3 ? name + "." + kPartNames[p] : fmt::format("{}.{}", name, p);
    outs.push_back(activation(pname, {s[0], heads, s[1], dh}));
  }
  OpAttrs a;
  a.heads = heads;
  a.parts = parts;
  new_op(name, OpType::kSplitHeads, {x}, outs, a);
  return outs;
}

TensorId GraphBuilder::merge_heads(const std::string& name, TensorId x) {
  if (!usable(x)) return kNoTensor;
  const auto s = shape(x);
  if (s.size() != 4) return fail(name, "merge_heads needs [B,H,T,dh]"), kNoTensor;
  TensorId y = activation(name, {s[0], s[2], s[1] * s[3]});
  OpAttrs a;
  a.heads = static_cast<int32_t>(s[1]);
  a.parts = 1;
  new_op(name, OpType::kMergeHeads, {x}, {y}, a);
  return y;
}

TensorId GraphBuilder::cross_entropy(const std::string& name, TensorId logits, TensorId labels, int class_axis) {
  if (!usable(logits) || !usable(labels)) return kNoTensor;
  const auto sl = shape(logits);
  const auto sy = shape(labels);
  const int rank = static_cast<int>(sl.size());
  if (class_axis < -1 || class_axis >= rank)
    return fail(name, fmt::format("cross_entropy class axis {} is outside [-1, {})", class_axis, rank)), kNoTensor;
  std::vector<int64_t> expected = sl;
  if (!expected.empty()) expected.erase(expected.begin() + (class_axis < 0 ? rank - 1 : class_axis));
  if (sl.empty() || sy != expected || tensor(labels).dtype != DType::kI32)
    return fail(name, fmt::format("cross_entropy needs int32 labels shaped like the logits without the class axis "
                                  "{}, got logits {} and labels {}",
                                  class_axis, shape_str(sl), shape_str(sy))), kNoTensor;
  // Loss and log-probabilities in fp32 whatever the precision (autocast runs the loss in fp32).
  TensorId loss = new_tensor(name, {}, DType::kF32, TensorRole::kActivation);
  TensorId logp = new_tensor(name + ".log_probs", sl, DType::kF32, TensorRole::kActivation);
  OpAttrs a;
  a.class_axis = class_axis == rank - 1 ? -1 : class_axis;
  new_op(name, OpType::kCrossEntropy, {logits, labels}, {loss, logp}, a);
  g_.loss = loss;
  return loss;
}

// ---------------------------------------------------------------------------------------------
// Costs

void compute_op_costs(const Graph& g, Op& op) {
  auto numel = [&](TensorId t) { return static_cast<uint64_t>(g.tensor(t).numel()); };
  op.bytes_read = 0;
  op.bytes_written = 0;
  for (TensorId t : op.inputs) op.bytes_read += g.tensor(t).bytes;
  for (TensorId t : op.outputs) op.bytes_written += g.tensor(t).bytes;
  const OpAttrs& a = op.attrs;
  uint64_t macs = 0, flops = 0;
  switch (op.type) {
    case OpType::kConv2d:
    case OpType::kConvBwdData:
    case OpType::kConvBwdWeights: {
      // Output of the forward conv: y for fwd, dy (first input) for both backward ops.
      const Tensor& y = g.tensor(op.type == OpType::kConv2d ? op.outputs[0] : op.inputs[0]);
      const Tensor& w = g.tensor(op.type == OpType::kConvBwdWeights ? op.outputs[0] : op.inputs[1]);
      macs = static_cast<uint64_t>(y.numel()) * static_cast<uint64_t>(w.shape[1] * w.shape[2] * w.shape[3]);
      flops = 2 * macs + (a.has_bias ? numel(y.id) : 0);
      break;
    }
    case OpType::kLinear:
    case OpType::kLinearBwdData:
    case OpType::kLinearBwdWeights: {
      const Tensor& y = g.tensor(op.type == OpType::kLinear ? op.outputs[0] : op.inputs[0]);
      macs = static_cast<uint64_t>(y.numel()) * static_cast<uint64_t>(a.in_features);
      flops = 2 * macs + (a.has_bias ? numel(y.id) : 0);
      break;
    }
    case OpType::kMatMul: {
      const Tensor& ta = g.tensor(op.inputs[0]);
      size_t r = ta.shape.size();
      int64_t k = a.transpose_a ? ta.shape[r - 2] : ta.shape[r - 1];
      macs = numel(op.outputs[0]) * static_cast<uint64_t>(k);
      flops = 2 * macs;
      break;
    }
    case OpType::kBatchNorm: case OpType::kLayerNorm: flops = 8 * numel(op.inputs[0]); break;
    case OpType::kBatchNormBwd: case OpType::kLayerNormBwd: flops = 12 * numel(op.inputs[0]); break;
    case OpType::kRelu: case OpType::kReluBwd: case OpType::kDropout: case OpType::kDropoutBwd:
    case OpType::kAdd: flops = numel(op.outputs[0]); break;
    case OpType::kGelu: case OpType::kGeluBwd: flops = 12 * numel(op.outputs[0]); break;
    case OpType::kMaxPool: case OpType::kAvgPool:
      flops = numel(op.outputs[0]) * static_cast<uint64_t>(a.kernel_h * a.kernel_w); break;
    case OpType::kMaxPoolBwd: case OpType::kAvgPoolBwd:
      flops = numel(op.inputs[0]) * static_cast<uint64_t>(a.kernel_h * a.kernel_w); break;
    case OpType::kGlobalAvgPool: flops = numel(op.inputs[0]); break;
    case OpType::kGlobalAvgPoolBwd: flops = numel(op.outputs[0]); break;
    case OpType::kSoftmax: case OpType::kSoftmaxBwd: flops = 5 * numel(op.outputs[0]); break;
    case OpType::kCrossEntropy: case OpType::kCrossEntropyBwd: flops = 5 * numel(op.inputs[0]); break;
    case OpType::kGradAccumulate: flops = numel(op.outputs[0]) * (op.inputs.size() - 1); break;
    case OpType::kEmbedding: case OpType::kEmbeddingBwd:
      flops = numel(op.type == OpType::kEmbedding ? op.outputs[0] : op.inputs[0]) * (op.inputs.size() - 1); break;
    case OpType::kSgdUpdate: flops = 4 * numel(op.inputs[0]); break;
    case OpType::kAdamUpdate: flops = 14 * numel(op.inputs[0]); break;
    case OpType::kConcat: case OpType::kConcatBwd: case OpType::kSplitHeads: case OpType::kMergeHeads:
    case OpType::kOpaque: break;
  }
  op.macs = macs;
  op.flops = flops;
}

// ---------------------------------------------------------------------------------------------
// Autodiff

namespace {

class Autodiff {
 public:
  // `master_of[t]` is the fp32 master of a 16-bit weight copy t, else kNoTensor (one per tensor).
  Autodiff(Graph& g, const TrainOptions& opt, const std::vector<TensorId>& weights,
           const std::vector<TensorId>& master_of)
      : g_(g), opt_(opt), weights_(weights), master_of_(master_of), partial_(g.tensors.size(), kNoTensor),
        needs_grad_(g.tensors.size(), false), copy_of_(g.tensors.size(), kNoTensor) {}

  Status run() {
    const size_t n_forward = g_.ops.size();
    if (g_.loss == kNoTensor) return Status::InvalidArgument("the network has no loss (call cross_entropy)");
    for (TensorId w : weights_) needs_grad_[w] = true;
    for (size_t t = 0; t < master_of_.size(); ++t)
      if (master_of_[t] != kNoTensor) {
        needs_grad_[t] = true;
        copy_of_[static_cast<size_t>(master_of_[t])] = static_cast<TensorId>(t);
      }
    if (g_.info.precision == Precision::kAmpFp16) loss_scale_ = new_state("amp.loss_scale", {1});
    for (size_t i = 0; i < n_forward; ++i) {
      const Op& op = g_.ops[i];
      bool any = false;
      for (TensorId t : op.inputs) any = any || needs_grad_[t];
      if (op.type == OpType::kCrossEntropy || any)
        for (TensorId t : op.outputs) needs_grad_[t] = true;
    }
    for (size_t i = n_forward; i-- > 0;) {
      Op fwd = g_.ops[i];  // copy: g_.ops grows below
      differentiate(fwd);
    }
    for (TensorId w : weights_) {
      if (partial_[w] == kNoTensor)
        return Status::InvalidArgument(fmt::format("weight '{}' does not influence the loss", g_.tensor(w).name));
      emit_update(w, partial_[w]);
    }
    return Status::Ok();
  }

 private:
  // The tensor whose gradient `t` receives: the master of a weight copy, else t itself.
  TensorId param_of(TensorId t) const {
    const auto i = static_cast<size_t>(t);
    return i < master_of_.size() && master_of_[i] != kNoTensor ? master_of_[i] : t;
  }

  // A gradient of `of`, in `of`'s dtype (16-bit for AMP activations and weight copies); the
  // gradient of a weight copy is the gradient of its master.
  TensorId grad_tensor(TensorId of, TensorRole role) {
    const Tensor& src = g_.tensor(of);
    const TensorId param = param_of(of);
    Tensor t;
    t.id = static_cast<TensorId>(g_.tensors.size());
    t.name = g_.tensor(param).name + ".grad" + (count_[param]++ ? fmt::format("#{}", count_[param] - 1) : "");
    t.shape = src.shape;
    t.dtype = src.dtype;
    t.role = role;
    t.bytes = src.bytes;
    t.grad_of = param;
    g_.tensors.push_back(std::move(t));
    return g_.tensors.back().id;
  }
  TensorId new_grad(TensorId of) {
    const TensorRole r = g_.tensor(of).role;
    return grad_tensor(of, r == TensorRole::kWeight || r == TensorRole::kWeightCopy ? TensorRole::kWeightGradient
                                                                                    : TensorRole::kGradient);
  }

  OpId emit(const std::string& name, OpType type, Phase phase, std::vector<TensorId> in, std::vector<TensorId> out,
            const OpAttrs& attrs, OpId forward_op) {
    Op op;
    op.id = static_cast<OpId>(g_.ops.size());
    op.name = name;
    op.type = type;
    op.phase = phase;
    op.inputs = std::move(in);
    op.outputs = std::move(out);
    op.attrs = attrs;
    op.forward_op = forward_op;
    op.inplace_capable = type == OpType::kReluBwd || type == OpType::kGeluBwd || type == OpType::kDropoutBwd ||
                         type == OpType::kGradAccumulate;
    g_.ops.push_back(std::move(op));
    return g_.ops.back().id;
  }

  // Records a gradient contribution to `of`; a second contribution is summed at once (eagerly,
  // as PyTorch's autograd does), so at most one partial gradient per tensor is alive.
  // Contributions to a weight copy are collected under its master.
  void contribute(TensorId of, TensorId grad, OpId forward_op) {
    const auto key = static_cast<size_t>(param_of(of));
    if (partial_[key] == kNoTensor) {
      partial_[key] = grad;
      return;
    }
    TensorId sum = new_grad(of);
    emit(g_.tensor(param_of(of)).name + ".grad_accumulate", OpType::kGradAccumulate, Phase::kBackward,
         {partial_[key], grad}, {sum}, OpAttrs{}, forward_op);
    partial_[key] = sum;
  }

  bool wants(TensorId t) const { return needs_grad_[t] && g_.tensor(t).role != TensorRole::kInput; }

  void differentiate(const Op& f) {
    const auto& in = f.inputs;
    const auto& out = f.outputs;
    TensorId dy = f.type == OpType::kCrossEntropy ? kNoTensor : partial_[out[0]];
    if (f.type != OpType::kCrossEntropy && f.type != OpType::kSplitHeads && dy == kNoTensor) return;
    const std::string& n = f.name;
    const OpAttrs& a = f.attrs;
    auto grads_for = [&](std::initializer_list<size_t> idx) {
      std::vector<TensorId> gs;
      for (size_t k : idx) gs.push_back(new_grad(in[k]));
      return gs;
    };
    switch (f.type) {
      case OpType::kConv2d:
      case OpType::kLinear: {
        bool conv = f.type == OpType::kConv2d;
        if (wants(in[0])) {
          TensorId dx = new_grad(in[0]);
          emit(n + ".bwd_data", conv ? OpType::kConvBwdData : OpType::kLinearBwdData, Phase::kBackward, {dy, in[1]},
               {dx}, a, f.id);
          contribute(in[0], dx, f.id);
        }
        std::vector<TensorId> gw = a.has_bias ? grads_for({1, 2}) : grads_for({1});
        emit(n + ".bwd_weights", conv ? OpType::kConvBwdWeights : OpType::kLinearBwdWeights, Phase::kBackward,
             {dy, in[0]}, gw, a, f.id);
        for (size_t k = 0; k < gw.size(); ++k) contribute(in[1 + k], gw[k], f.id);
        break;
      }
      case OpType::kBatchNorm:
      case OpType::kLayerNorm: {
        std::vector<TensorId> gs = grads_for({0, 1, 2});
        emit(n + ".bwd", f.type == OpType::kBatchNorm ? OpType::kBatchNormBwd : OpType::kLayerNormBwd,
             Phase::kBackward, {dy, in[0], in[1], out[1], out[2]}, gs, a, f.id);
        for (size_t k = 0; k < 3; ++k) contribute(in[k], gs[k], f.id);
        break;
      }
      case OpType::kRelu: unary(f, OpType::kReluBwd, {dy, out[0]}); break;
      case OpType::kGelu: unary(f, OpType::kGeluBwd, {dy, in[0]}); break;
      case OpType::kSoftmax: unary(f, OpType::kSoftmaxBwd, {dy, out[0]}); break;
      case OpType::kMaxPool: unary(f, OpType::kMaxPoolBwd, {dy, out[1]}); break;
      case OpType::kAvgPool: unary(f, OpType::kAvgPoolBwd, {dy}); break;
      case OpType::kGlobalAvgPool: unary(f, OpType::kGlobalAvgPoolBwd, {dy}); break;
      case OpType::kDropout: unary(f, OpType::kDropoutBwd, {dy, out[1]}); break;
      case OpType::kMergeHeads: {
        if (!wants(in[0])) break;
        TensorId dx = new_grad(in[0]);
        OpAttrs sa = a;
        sa.parts = 1;
        emit(n + ".bwd", OpType::kSplitHeads, Phase::kBackward, {dy}, {dx}, sa, f.id);
        contribute(in[0], dx, f.id);
        break;
      }
      case OpType::kSplitHeads: {
        if (!wants(in[0])) break;
        std::vector<TensorId> douts;
        for (TensorId o : out) {
          if (partial_[o] == kNoTensor) return;  // a part with no gradient: cannot merge (not in the zoo)
          douts.push_back(partial_[o]);
        }
        TensorId dx = new_grad(in[0]);
        emit(n + ".bwd", OpType::kMergeHeads, Phase::kBackward, douts, {dx}, a, f.id);
        contribute(in[0], dx, f.id);
        break;
      }
      case OpType::kAdd:
        for (TensorId t : in)
          if (wants(t)) contribute(t, dy, f.id);
        break;
      case OpType::kConcat: {
        std::vector<TensorId> gs;
        for (TensorId t : in) gs.push_back(new_grad(t));
        emit(n + ".bwd", OpType::kConcatBwd, Phase::kBackward, {dy}, gs, a, f.id);
        for (size_t k = 0; k < in.size(); ++k)
          if (wants(in[k])) contribute(in[k], gs[k], f.id);
        break;
      }
      case OpType::kMatMul: matmul_backward(f, dy); break;
      case OpType::kEmbedding: {
        std::vector<TensorId> gs;
        for (size_t k = 1; k < in.size(); ++k) gs.push_back(new_grad(in[k]));
        emit(n + ".bwd", OpType::kEmbeddingBwd, Phase::kBackward, {dy, in[0]}, gs, a, f.id);
        for (size_t k = 1; k < in.size(); ++k) contribute(in[k], gs[k - 1], f.id);
        break;
      }
      case OpType::kCrossEntropy: {
        if (!wants(in[0])) break;
        TensorId dlogits = new_grad(in[0]);
        std::vector<TensorId> reads = {out[1], in[1]};
        if (loss_scale_ != kNoTensor) reads.push_back(loss_scale_);  // d(scaled loss)
        emit(n + ".bwd", OpType::kCrossEntropyBwd, Phase::kBackward, reads, {dlogits}, a, f.id);
        contribute(in[0], dlogits, f.id);
        break;
      }
      default: FERRY_CHECK(false, "no derivative for op type {}", to_string(f.type));
    }
  }

  void unary(const Op& f, OpType type, std::vector<TensorId> reads) {
    TensorId x = f.inputs[0];
    if (!wants(x)) return;
    TensorId dx = new_grad(x);
    emit(f.name + ".bwd", type, Phase::kBackward, std::move(reads), {dx}, f.attrs, f.id);
    contribute(x, dx, f.id);
  }

  // C = s * op(A) op(B). dA and dB are matmuls of dC with the other operand (see builder.h).
  void matmul_backward(const Op& f, TensorId dc) {
    TensorId a = f.inputs[0], b = f.inputs[1];
    bool ta = f.attrs.transpose_a, tb = f.attrs.transpose_b;
    OpAttrs at;
    at.scale = f.attrs.scale;
    if (wants(a)) {
      TensorId da = new_grad(a);
      OpAttrs x = at;
      std::vector<TensorId> in;
      if (!ta) { x.transpose_a = false; x.transpose_b = !tb; in = {dc, b}; }
      else { x.transpose_a = tb; x.transpose_b = true; in = {b, dc}; }
      emit(f.name + ".bwd_a", OpType::kMatMul, Phase::kBackward, in, {da}, x, f.id);
      contribute(a, da, f.id);
    }
    if (wants(b)) {
      TensorId db = new_grad(b);
      OpAttrs x = at;
      std::vector<TensorId> in;
      if (!tb) { x.transpose_a = !ta; x.transpose_b = false; in = {a, dc}; }
      else { x.transpose_a = true; x.transpose_b = ta; in = {dc, a}; }
      emit(f.name + ".bwd_b", OpType::kMatMul, Phase::kBackward, in, {db}, x, f.id);
      contribute(b, db, f.id);
    }
  }

  // Optimizer state: fp32, whatever the precision.
  TensorId new_state(const std::string& name, std::vector<int64_t> shape) {
    Tensor t;
    t.id = static_cast<TensorId>(g_.tensors.size());
    t.name = name;
    t.role = TensorRole::kOptimizerState;
    t.dtype = DType::kF32;
    t.bytes = dtype_size(DType::kF32);
    for (int64_t d : shape) t.bytes *= static_cast<uint64_t>(d);
    t.shape = std::move(shape);
    g_.tensors.push_back(std::move(t));
    return g_.tensors.back().id;
  }
  TensorId state_tensor(TensorId w, const char* suffix) {
    return new_state(g_.tensor(w).name + suffix, g_.tensor(w).shape);
  }

  // {w, dw, state...[, copy][, loss_scale]} -> {w, state...[, copy]}: under AMP the update also
  // unscales dw and rewrites the 16-bit copy from the new master.
  void emit_update(TensorId w, TensorId dw) {
    OpAttrs a;
    a.lr = opt_.lr;
    a.weight_decay = opt_.weight_decay;
    const std::string name = g_.tensor(w).name + ".update";
    std::vector<TensorId> in = {w, dw}, out = {w};
    OpType type = OpType::kAdamUpdate;
    if (opt_.optimizer == OptimizerKind::kSgd) {
      type = OpType::kSgdUpdate;
      a.momentum_sgd = opt_.momentum;
      if (opt_.momentum > 0) {
        TensorId m = state_tensor(w, ".momentum");
        in.push_back(m);
        out.push_back(m);
      }
    } else {
      a.beta1 = opt_.beta1;
      a.beta2 = opt_.beta2;
      a.adam_eps = opt_.adam_eps;
      for (const char* suffix : {".exp_avg", ".exp_avg_sq"}) {
        TensorId s = state_tensor(w, suffix);
        in.push_back(s);
        out.push_back(s);
      }
    }
    if (const TensorId copy = copy_of_[static_cast<size_t>(w)]; copy != kNoTensor) {
      in.push_back(copy);
      out.push_back(copy);
    }
    if (loss_scale_ != kNoTensor) in.push_back(loss_scale_);
    emit(name, type, Phase::kUpdate, in, out, a, kNoOp);
  }

  Graph& g_;
  const TrainOptions& opt_;
  const std::vector<TensorId>& weights_;
  const std::vector<TensorId>& master_of_;
  std::vector<TensorId> partial_;
  std::vector<bool> needs_grad_;
  std::vector<TensorId> copy_of_;  // per master: its 16-bit copy (kNoTensor in fp32 graphs)
  std::map<TensorId, int> count_;
  TensorId loss_scale_ = kNoTensor;  // amp-fp16 only
};

}  // namespace

Result<Graph> GraphBuilder::finish(const TrainOptions& options) && {
  if (!status_.ok()) return status_;
  if (!(options.lr >= 0) || !(options.momentum >= 0 && options.momentum < 1))
    return Status::InvalidArgument(fmt::format("invalid optimizer settings: lr {} momentum {}", options.lr,
                                               options.momentum));
  g_.info.optimizer = options.optimizer;
  Autodiff ad(g_, options, weights_in_order_, master_of_);
  FERRY_RETURN_IF_ERROR(ad.run());
  for (Op& op : g_.ops) compute_op_costs(g_, op);
  FERRY_RETURN_IF_ERROR(g_.validate());
  return std::move(g_);
}

}  // namespace ferry
