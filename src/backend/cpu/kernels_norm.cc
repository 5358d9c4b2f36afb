// Batch normalization and layer normalization, forward (training) and backward, on oneDNN.
//
// - batch_norm normalises over (N, H, W) per channel with batch statistics and the biased
//   variance, in its input's layout (blocked or plain). Running statistics are not modelled: the
//   graph has no tensors for them, so OpAttrs::momentum is ignored.
// - layer_norm normalises each row of the last dimension, on plain row-major data; mean and
//   variance are saved per row with the dims of the input minus its last one.
// Scale (gamma) and shift (beta) are separate [C] tensors (use_scale | use_shift).
#include <fmt/format.h>

#include "backend/cpu/kernel.h"

namespace ferry::cpu {
namespace {

using dnnl::normalization_flags;
using dnnl::prop_kind;
using Tag = dnnl::memory::format_tag;

const normalization_flags kScaleShift = normalization_flags::use_scale | normalization_flags::use_shift;

std::unique_ptr<Kernel> batch_norm(const OpSetup& s) {
  const bool fwd = s.op.type == OpType::kBatchNorm;
  if (fwd)
    s.expect_arity(3, 3, 3, 3);
  else
    s.expect_arity(5, 5, 3, 3);
  const size_t x_index = fwd ? 0 : 1;
  const Tensor& x = s.in_tensor(x_index);
  s.require(x.shape.size() >= 2, "batch_norm needs [N, C, ...]");
  s.require(s.in[x_index].has_value(), "batch_norm input has no layout");
  const int64_t c = x.shape[1];
  const Md data_md = *s.in[x_index];
  const Md channel_md({c}, DataType::f32, Tag::a);
  const float eps = s.op.attrs.eps;
  dnnl::batch_normalization_forward::primitive_desc fwd_pd({prop_kind::forward_training, data_md, eps, kScaleShift},
                                                           user_scratchpad_attr(), s.engine);
  if (fwd) {
    PrimitiveKernelBuilder b(s, fwd_pd);
    b.in(0, DNNL_ARG_SRC, fwd_pd.src_desc())
        .in(1, DNNL_ARG_SCALE, channel_md)
        .in(2, DNNL_ARG_SHIFT, channel_md)
        .out(0, DNNL_ARG_DST, fwd_pd.dst_desc())
        .out(1, DNNL_ARG_MEAN, fwd_pd.mean_desc())
        .out(2, DNNL_ARG_VARIANCE, fwd_pd.variance_desc());
    return std::move(b).finish(make_prim<dnnl::batch_normalization_forward>(fwd_pd));
  }
  // {dy, x, gamma, mean, var} -> {dx, dgamma, dbeta}; dy has y's layout, which is x's.
  dnnl::batch_normalization_backward::primitive_desc pd(
      {prop_kind::backward, s.in[0].value_or(data_md), data_md, eps, kScaleShift}, user_scratchpad_attr(), s.engine,
      fwd_pd);
  PrimitiveKernelBuilder b(s, pd);
  // oneDNN 2.6 requires a shift argument although the backward pass never reads it (beta does
  // not enter dx); gamma's buffer stands in, so the graph need not keep beta alive for backward.
  b.in(0, DNNL_ARG_DIFF_DST, pd.diff_dst_desc())
      .in(1, DNNL_ARG_SRC, pd.src_desc())
      .in(2, DNNL_ARG_SCALE, channel_md)
      .in_again(2, DNNL_ARG_SHIFT, channel_md)
      .in(3, DNNL_ARG_MEAN, pd.mean_desc())
      .in(4, DNNL_ARG_VARIANCE, pd.variance_desc())
      .out(0, DNNL_ARG_DIFF_SRC, pd.diff_src_desc())
      .out(1, DNNL_ARG_DIFF_SCALE, channel_md)
      .out(2, DNNL_ARG_DIFF_SHIFT, channel_md);
  return std::move(b).finish(make_prim<dnnl::batch_normalization_backward>(pd));
}

std::unique_ptr<Kernel> layer_norm(const OpSetup& s) {
  const bool fwd = s.op.type == OpType::kLayerNorm;
  if (fwd)
    s.expect_arity(3, 3, 3, 3);
  else
    s.expect_arity(5, 5, 3, 3);
  const Tensor& x = s.in_tensor(fwd ? 0 : 1);
  s.require(!x.shape.empty(), "layer_norm needs at least one dimension");
  Dims dims(x.shape.begin(), x.shape.end());
  if (dims.size() == 1) dims.insert(dims.begin(), 1);  // one row
  const Md data_md = plain_md(dims, DataType::f32);
  const Md stat_md = plain_md(Dims(dims.begin(), dims.end() - 1), DataType::f32);
  const Md channel_md({dims.back()}, DataType::f32, Tag::a);
  const float eps = s.op.attrs.eps;
  dnnl::layer_normalization_forward::primitive_desc fwd_pd(
      {prop_kind::forward_training, data_md, stat_md, eps, kScaleShift}, user_scratchpad_attr(), s.engine);
  if (fwd) {
    PrimitiveKernelBuilder b(s, fwd_pd);
    b.in(0, DNNL_ARG_SRC, data_md)
        .in(1, DNNL_ARG_SCALE, channel_md)
        .in(2, DNNL_ARG_SHIFT, channel_md)
        .out(0, DNNL_ARG_DST, data_md)
        .out(1, DNNL_ARG_MEAN, stat_md)
        .out(2, DNNL_ARG_VARIANCE, stat_md);
    return std::move(b).finish(make_prim<dnnl::layer_normalization_forward>(fwd_pd));
  }
  dnnl::layer_normalization_backward::primitive_desc pd(
      {prop_kind::backward, data_md, data_md, stat_md, eps, kScaleShift}, user_scratchpad_attr(), s.engine, fwd_pd);
  PrimitiveKernelBuilder b(s, pd);
  b.in(0, DNNL_ARG_DIFF_DST, data_md)
      .in(1, DNNL_ARG_SRC, data_md)
      .in(2, DNNL_ARG_SCALE, channel_md)
      .in_again(2, DNNL_ARG_SHIFT, channel_md)  // unread; see batch_norm
      .in(3, DNNL_ARG_MEAN, stat_md)
      .in(4, DNNL_ARG_VARIANCE, stat_md)
      .out(0, DNNL_ARG_DIFF_SRC, data_md)
      .out(1, DNNL_ARG_DIFF_SCALE, channel_md)
      .out(2, DNNL_ARG_DIFF_SHIFT, channel_md);
  return std::move(b).finish(make_prim<dnnl::layer_normalization_backward>(pd));
}

}  // namespace

std::unique_ptr<Kernel> make_norm_kernel(const OpSetup& s) {
  if (s.op.type == OpType::kBatchNorm || s.op.type == OpType::kBatchNormBwd) return batch_norm(s);
  return layer_norm(s);
}

}  // namespace ferry::cpu
