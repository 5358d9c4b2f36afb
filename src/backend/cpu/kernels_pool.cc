// Pooling kernels on oneDNN: max (with its workspace of argmax positions), average (padding
// counted or not), global average; forward and backward.
//
// Pooling keeps its input's layout. Max pooling's backward reads only dy and the workspace the
// forward wrote, never x. Global average pooling outputs a plain [N, C] matrix (what linear reads)
// computed as a 4-D [N, C, 1, 1] pooling; oneDNN only has a reference implementation for a plain
// destination next to a blocked source, so the kernel lets oneDNN pick the destination layout and
// stages the tiny result.
#include <fmt/format.h>

#include "backend/cpu/kernel.h"

namespace ferry::cpu {
namespace {

using dnnl::algorithm;
using dnnl::prop_kind;
using Tag = dnnl::memory::format_tag;

struct PoolGeometry {
  Dims src, dst, strides, kernel, pad_l, pad_r;
};

PoolGeometry pool_geometry(const OpSetup& s, const Tensor& x, const Tensor& y, bool global) {
  const OpAttrs& a = s.op.attrs;
  s.require(x.shape.size() == 4, fmt::format("pooling needs NCHW input, got rank {}", x.shape.size()));
  PoolGeometry g;
  g.src = Dims(x.shape.begin(), x.shape.end());
  if (global) {
    s.require(y.shape == std::vector<int64_t>{x.shape[0], x.shape[1]}, "global_avg_pool output must be [N, C]");
    g.dst = {x.shape[0], x.shape[1], 1, 1};
    g.strides = {1, 1};
    g.kernel = {x.shape[2], x.shape[3]};
    g.pad_l = g.pad_r = {0, 0};
    return g;
  }
  s.require(y.shape.size() == 4 && y.shape[0] == x.shape[0] && y.shape[1] == x.shape[1], "pooling output must be NCHW");
  s.require(a.kernel_h > 0 && a.kernel_w > 0 && a.stride_h > 0 && a.stride_w > 0 && a.pad_h >= 0 && a.pad_w >= 0 &&
                a.pad_h < a.kernel_h && a.pad_w < a.kernel_w,
            fmt::format("bad kernel {}x{} / stride {}x{} / pad {}x{}", a.kernel_h, a.kernel_w, a.stride_h, a.stride_w,
                        a.pad_h, a.pad_w));
  const int64_t h = x.shape[2], w = x.shape[3], oh = y.shape[2], ow = y.shape[3];
  s.require(
      oh == (h + 2 * a.pad_h - a.kernel_h) / a.stride_h + 1 && ow == (w + 2 * a.pad_w - a.kernel_w) / a.stride_w + 1,
      fmt::format("output {}x{} does not follow from input {}x{}", oh, ow, h, w));
  g.dst = Dims(y.shape.begin(), y.shape.end());
  g.strides = {a.stride_h, a.stride_w};
  g.kernel = {a.kernel_h, a.kernel_w};
  g.pad_l = {a.pad_h, a.pad_w};
  g.pad_r = {(oh - 1) * a.stride_h + a.kernel_h - h - a.pad_h, (ow - 1) * a.stride_w + a.kernel_w - w - a.pad_w};
  return g;
}

algorithm pool_algorithm(const Op& op) {
  switch (op.type) {
    case OpType::kMaxPool:
    case OpType::kMaxPoolBwd:
      return algorithm::pooling_max;
    case OpType::kGlobalAvgPool:
    case OpType::kGlobalAvgPoolBwd:
      return algorithm::pooling_avg_exclude_padding;  // no padding anyway
    default:
      return op.attrs.count_include_pad ? algorithm::pooling_avg_include_padding
                                        : algorithm::pooling_avg_exclude_padding;
  }
}

dnnl::pooling_forward::primitive_desc forward_pd(const OpSetup& s, algorithm alg, const Md& src, const Md& dst,
                                                 const PoolGeometry& g) {
  return {{prop_kind::forward_training, alg, src, dst, g.strides, g.kernel, g.pad_l, g.pad_r},
          user_scratchpad_attr(),
          s.engine};
}

std::unique_ptr<Kernel> pool_forward(const OpSetup& setup) {
  const bool max = setup.op.type == OpType::kMaxPool, global = setup.op.type == OpType::kGlobalAvgPool;
  OpSetup s = setup;
  if (global && !s.out[0]) s.out[0] = plain_md(s.out_tensor(0));  // [N, C] row-major for linear
  s.expect_arity(1, 1, max ? 2 : 1, max ? 2 : 1);
  s.require(s.in[0].has_value(), "pooling input has no layout");
  const PoolGeometry g = pool_geometry(s, s.in_tensor(0), s.out_tensor(0), global);
  const algorithm alg = pool_algorithm(s.op);
  auto pd = forward_pd(s, alg, *s.in[0], Md(g.dst, DataType::f32, global ? Tag::abcd : Tag::any), g);
  if (global && is_reference_impl(pd)) pd = forward_pd(s, alg, *s.in[0], Md(g.dst, DataType::f32, Tag::any), g);
  PrimitiveKernelBuilder b(s, pd);
  b.in(0, DNNL_ARG_SRC, pd.src_desc());
  b.out(0, DNNL_ARG_DST, pd.dst_desc());
  if (max) {
    const Tensor& ws = s.out_tensor(1);
    s.require(pd.workspace_desc().data_type() == dnnl_type(ws.dtype, ws.name),
              fmt::format("max_pool indices '{}' are {}, but oneDNN keeps them as dnnl type {}", ws.name,
                          to_string(ws.dtype), static_cast<int>(pd.workspace_desc().data_type())));
    b.out(1, DNNL_ARG_WORKSPACE, pd.workspace_desc());
  }
  return std::move(b).finish(make_prim<dnnl::pooling_forward>(pd));
}

std::unique_ptr<Kernel> pool_backward(const OpSetup& s) {
  const bool max = s.op.type == OpType::kMaxPoolBwd, global = s.op.type == OpType::kGlobalAvgPoolBwd;
  s.expect_arity(max ? 2 : 1, max ? 2 : 1, 1, 1);
  s.require(s.in[0].has_value() && s.out[0].has_value(), "pooling gradients have no layout");
  const Tensor& dx = s.out_tensor(0);
  const Tensor& dy = s.in_tensor(0);
  const PoolGeometry g = pool_geometry(s, dx, dy, global);
  const algorithm alg = pool_algorithm(s.op);
  const Md diff_src = *s.out[0];
  auto make = [&](const Md& diff_dst) {
    auto hint = forward_pd(s, alg, diff_src, diff_dst, g);
    return dnnl::pooling_backward::primitive_desc({alg, diff_src, diff_dst, g.strides, g.kernel, g.pad_l, g.pad_r},
                                                  user_scratchpad_attr(), s.engine, hint);
  };
  // dy as stored, viewed with the 4-D dims (global pooling's [N, C] is [N, C, 1, 1]).
  Md dy_view = try_reshape(*s.in[0], g.dst);
  if (is_zero(dy_view)) dy_view = Md(g.dst, DataType::f32, Tag::any);
  auto pd = make(dy_view);
  if (is_reference_impl(pd)) pd = make(Md(g.dst, DataType::f32, Tag::any));
  PrimitiveKernelBuilder b(s, pd);
  b.in(0, DNNL_ARG_DIFF_DST, pd.diff_dst_desc());
  if (max) b.in(1, DNNL_ARG_WORKSPACE, pd.workspace_desc());
  b.out(0, DNNL_ARG_DIFF_SRC, pd.diff_src_desc());
  return std::move(b).finish(make_prim<dnnl::pooling_backward>(pd));
}

}  // namespace

std::unique_ptr<Kernel> make_pool_kernel(const OpSetup& s) {
  switch (s.op.type) {
    case OpType::kMaxPool:
    case OpType::kAvgPool:
    case OpType::kGlobalAvgPool:
      return pool_forward(s);
    default:
      return pool_backward(s);
  }
}

}  // namespace ferry::cpu
