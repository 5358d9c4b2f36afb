// Convolution kernels: forward, backward-data, backward-weights (+bias, groups) on oneDNN.
//
// Every descriptor is created with format_tag::any so oneDNN picks its fastest blocked layouts
// (nChw16c activations, OIhw16i16o-style weights on AVX-512); arguments whose tensors are
// already stored differently are staged by the kernel (kernel.h). Backward primitives take the
// forward primitive descriptor as a hint, built with the same descriptors as the forward kernel,
// so forward and backward agree on activation layouts in the common case.
//
// Grouped weights [O, C/G, kh, kw] are described to oneDNN as [G, O/G, C/G, kh, kw]: the same
// bytes in plain row-major order, so to_plain/from_plain of the 5-D layout give the graph's 4-D
// tensor.
//
// Right padding is derived from the output size, pad_r = (out - 1) * stride + kernel - in - pad,
// which is what floor division in the output-size formula implies (it may be negative: a 1x1
// stride-2 convolution over an even input never reads the last row).
#include <fmt/format.h>

#include "backend/cpu/kernel.h"

namespace ferry::cpu {
namespace {

using dnnl::algorithm;
using dnnl::prop_kind;
using Tag = dnnl::memory::format_tag;

struct ConvGeometry {
  Dims src, weights, bias, dst;
  Dims strides, pad_l, pad_r;
};

ConvGeometry conv_geometry(const OpSetup& s) {
  const Op& op = s.op;
  const OpAttrs& a = op.attrs;
  const bool fwd = op.type == OpType::kConv2d, bwd_w = op.type == OpType::kConvBwdWeights;
  const Tensor& x = fwd ? s.in_tensor(0) : bwd_w ? s.in_tensor(1) : s.out_tensor(0);
  const Tensor& y = fwd ? s.out_tensor(0) : s.in_tensor(0);
  const Tensor& w = bwd_w ? s.out_tensor(0) : s.in_tensor(1);
  s.require(x.shape.size() == 4 && y.shape.size() == 4 && w.shape.size() == 4,
            fmt::format("needs NCHW data and OIHW weights, got ranks {}, {} and {}", x.shape.size(), y.shape.size(),
                        w.shape.size()));
  s.require(a.kernel_h > 0 && a.kernel_w > 0 && a.stride_h > 0 && a.stride_w > 0 && a.pad_h >= 0 && a.pad_w >= 0,
            fmt::format("bad kernel {}x{} / stride {}x{} / pad {}x{}", a.kernel_h, a.kernel_w, a.stride_h, a.stride_w,
                        a.pad_h, a.pad_w));
  const int64_t n = x.shape[0], c = x.shape[1], h = x.shape[2], wd = x.shape[3];
  const int64_t o = y.shape[1], oh = y.shape[2], ow = y.shape[3], g = a.groups;
  s.require(g >= 1 && c % g == 0 && o % g == 0, fmt::format("groups {} must divide channels {} and {}", g, c, o));
  s.require(y.shape[0] == n, "batch of input and output differ");
  s.require(w.shape == std::vector<int64_t>{o, c / g, a.kernel_h, a.kernel_w},
            fmt::format("weights [{}] do not match [{},{},{},{}]", fmt::join(w.shape, ","), o, c / g, a.kernel_h,
                        a.kernel_w));
  s.require(
      oh == (h + 2 * a.pad_h - a.kernel_h) / a.stride_h + 1 && ow == (wd + 2 * a.pad_w - a.kernel_w) / a.stride_w + 1,
      fmt::format("output {}x{} does not follow from input {}x{}", oh, ow, h, wd));
  ConvGeometry geo;
  geo.src = {n, c, h, wd};
  geo.dst = {n, o, oh, ow};
  geo.weights = g == 1 ? Dims{o, c, a.kernel_h, a.kernel_w} : Dims{g, o / g, c / g, a.kernel_h, a.kernel_w};
  geo.bias = {o};
  geo.strides = {a.stride_h, a.stride_w};
  geo.pad_l = {a.pad_h, a.pad_w};
  geo.pad_r = {(oh - 1) * a.stride_h + a.kernel_h - h - a.pad_h, (ow - 1) * a.stride_w + a.kernel_w - wd - a.pad_w};
  return geo;
}

Md any_md(const Dims& dims) { return Md(dims, DataType::f32, Tag::any); }

dnnl::convolution_forward::primitive_desc forward_pd(const OpSetup& s, const ConvGeometry& g) {
  dnnl::convolution_forward::desc d =
      s.op.attrs.has_bias
          ? dnnl::convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct, any_md(g.src),
                                            any_md(g.weights), Md(g.bias, DataType::f32, Tag::a), any_md(g.dst),
                                            g.strides, g.pad_l, g.pad_r)
          : dnnl::convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct, any_md(g.src),
                                            any_md(g.weights), any_md(g.dst), g.strides, g.pad_l, g.pad_r);
  return {d, user_scratchpad_attr(), s.engine};
}

std::unique_ptr<Kernel> conv_forward(const OpSetup& s, const ConvGeometry& g) {
  s.expect_arity(s.op.attrs.has_bias ? 3 : 2, s.op.attrs.has_bias ? 3 : 2, 1, 1);
  auto pd = forward_pd(s, g);
  PrimitiveKernelBuilder b(s, pd);
  b.in(0, DNNL_ARG_SRC, pd.src_desc()).in(1, DNNL_ARG_WEIGHTS, pd.weights_desc());
  if (s.op.attrs.has_bias) b.in(2, DNNL_ARG_BIAS, pd.bias_desc());
  b.out(0, DNNL_ARG_DST, pd.dst_desc());
  return std::move(b).finish(make_prim<dnnl::convolution_forward>(pd));
}

std::unique_ptr<Kernel> conv_backward_data(const OpSetup& s, const ConvGeometry& g) {
  s.expect_arity(2, 2, 1, 1);
  auto hint = forward_pd(s, g);
  dnnl::convolution_backward_data::desc d(algorithm::convolution_direct, any_md(g.src), any_md(g.weights),
                                          any_md(g.dst), g.strides, g.pad_l, g.pad_r);
  dnnl::convolution_backward_data::primitive_desc pd(d, user_scratchpad_attr(), s.engine, hint);
  PrimitiveKernelBuilder b(s, pd);
  b.in(0, DNNL_ARG_DIFF_DST, pd.diff_dst_desc())
      .in(1, DNNL_ARG_WEIGHTS, pd.weights_desc())
      .out(0, DNNL_ARG_DIFF_SRC, pd.diff_src_desc());
  return std::move(b).finish(make_prim<dnnl::convolution_backward_data>(pd));
}

std::unique_ptr<Kernel> conv_backward_weights(const OpSetup& s, const ConvGeometry& g) {
  const bool bias = s.op.attrs.has_bias;
  s.expect_arity(2, 2, bias ? 2 : 1, bias ? 2 : 1);
  auto hint = forward_pd(s, g);
  dnnl::convolution_backward_weights::desc d =
      bias ? dnnl::convolution_backward_weights::desc(algorithm::convolution_direct, any_md(g.src), any_md(g.weights),
                                                      Md(g.bias, DataType::f32, Tag::a), any_md(g.dst), g.strides,
                                                      g.pad_l, g.pad_r)
           : dnnl::convolution_backward_weights::desc(algorithm::convolution_direct, any_md(g.src), any_md(g.weights),
                                                      any_md(g.dst), g.strides, g.pad_l, g.pad_r);
  dnnl::convolution_backward_weights::primitive_desc pd(d, user_scratchpad_attr(), s.engine, hint);
  PrimitiveKernelBuilder b(s, pd);
  b.in(0, DNNL_ARG_DIFF_DST, pd.diff_dst_desc())
      .in(1, DNNL_ARG_SRC, pd.src_desc())
      .out(0, DNNL_ARG_DIFF_WEIGHTS, pd.diff_weights_desc());
  if (bias) b.out(1, DNNL_ARG_DIFF_BIAS, pd.diff_bias_desc());
  return std::move(b).finish(make_prim<dnnl::convolution_backward_weights>(pd));
}

}  // namespace

std::unique_ptr<Kernel> make_conv_kernel(const OpSetup& s) {
  s.expect_arity(2, 3, 1, 2);
  ConvGeometry g = conv_geometry(s);
  switch (s.op.type) {
    case OpType::kConv2d:
      return conv_forward(s, g);
    case OpType::kConvBwdData:
      return conv_backward_data(s, g);
    default:
      return conv_backward_weights(s, g);
  }
}

}  // namespace ferry::cpu
