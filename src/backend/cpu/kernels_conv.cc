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
// Algorithm (BackendOptions::conv_algorithm, Note [Winograd] below): direct, or oneDNN's
// Winograd F(4x4, 3x3) for 3x3 stride-1 ungrouped convolutions. Each of a convolution's three
// kernels (forward, backward-data, backward-weights) decides for itself, from the shared geometry
// and its own scratch; where oneDNN has no Winograd kernel (it needs AVX-512) the kernel is
// direct, so implementation() tells what really runs.
//
// Right padding is derived from the output size, pad_r = (out - 1) * stride + kernel - in - pad,
// which is what floor division in the output-size formula implies (it may be negative: a 1x1
// stride-2 convolution over an even input never reads the last row).
#include <fmt/format.h>
#include <omp.h>

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

// Note [Winograd]
// oneDNN's Winograd F(4x4, 3x3) (jit_wino_4x3, AVX-512) computes a 4x4 output tile from a 6x6
// input tile with 36 instead of 144 multiplications per channel pair. Measured on this project's
// 2-core AVX-512 machine with oneDNN 2.6, f32, forward + backward-data + backward-weights summed:
// ResNet-50's 3x3 layers at batch 8 run 2.1x (56x56, 64 channels), 2.2x (28x28, 128) and 1.9x
// (14x14, 256) faster than direct; at 7x7 with 512 channels (32 tiles of 4x4 over the batch)
// only 1.14x, and at batch 1 on 14x14 (16 tiles) direct is faster. Winograd parallelises over
// tiles, so `auto` wants at least kWinogradTilesPerThread tiles per thread (32 tiles paid off on
// 1 thread, 1.1-1.2x on 2; 64 on 2 threads gave 1.7x).
//
// The price is scratch, counted in the arena like every workspace: 7-45 MiB per kernel on
// ResNet-50 at batch 8, and about 9 MiB even for a 16-channel 32x32 layer at batch 4, where the
// tensors themselves are a few hundred KiB (resnet-mini's peak would triple). In a system whose
// job is memory, `auto` therefore also caps it: a kernel goes Winograd only when its scratch is at
// most 1/kWinogradScratchShare of all the graph's tensor bytes (what keeping everything would
// take), so the peak grows by a few percent at most. The choice depends only on the graph, the
// thread count and oneDNN, never on a budget or a memory plan, so a plan never changes numbers.
constexpr int64_t kWinogradTilesPerThread = 32;
constexpr uint64_t kWinogradScratchShare = 32;

bool winograd_shape(const OpAttrs& a) {
  return a.kernel_h == 3 && a.kernel_w == 3 && a.stride_h == 1 && a.stride_w == 1 && a.groups == 1;
}

// Logical bytes (numel x dtype), so that the choice is the same whether the graph carries
// logical sizes or a backend's padded ones.
uint64_t graph_tensor_bytes(const Graph& g) {
  uint64_t total = 0;
  for (const Tensor& t : g.tensors) total += static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype);
  return total;
}

// Builds the primitive descriptor make(alg) with Winograd where BackendOptions and Note [Winograd]
// call for it, and direct otherwise (and where oneDNN has no Winograd kernel for the problem).
template <typename MakePd>
auto make_conv_pd(const OpSetup& s, const ConvGeometry& g, MakePd make) {
  const ConvAlgorithm choice = s.options.conv_algorithm;
  const int64_t tiles = g.dst[0] * ((g.dst[2] + 3) / 4) * ((g.dst[3] + 3) / 4);
  const int64_t threads = std::max(1, omp_get_max_threads());
  const bool try_winograd =
      winograd_shape(s.op.attrs) &&
      (choice == ConvAlgorithm::kWinograd ||
       (choice == ConvAlgorithm::kAuto && tiles >= kWinogradTilesPerThread * threads));
  if (try_winograd) {
    try {
      auto pd = make(algorithm::convolution_winograd);
      if (choice == ConvAlgorithm::kWinograd ||
          pd.scratchpad_desc().get_size() * kWinogradScratchShare <= graph_tensor_bytes(s.graph))
        return pd;
    } catch (const dnnl::error& e) {
      if (e.status != dnnl_unimplemented) throw;
    }
  }
  return make(algorithm::convolution_direct);
}

dnnl::convolution_forward::primitive_desc forward_pd(const OpSetup& s, const ConvGeometry& g, algorithm alg) {
  dnnl::convolution_forward::desc d =
      s.op.attrs.has_bias
          ? dnnl::convolution_forward::desc(prop_kind::forward_training, alg, any_md(g.src), any_md(g.weights),
                                            Md(g.bias, DataType::f32, Tag::a), any_md(g.dst), g.strides, g.pad_l,
                                            g.pad_r)
          : dnnl::convolution_forward::desc(prop_kind::forward_training, alg, any_md(g.src), any_md(g.weights),
                                            any_md(g.dst), g.strides, g.pad_l, g.pad_r);
  return {d, user_scratchpad_attr(), s.engine};
}

std::unique_ptr<Kernel> conv_forward(const OpSetup& s, const ConvGeometry& g) {
  s.expect_arity(s.op.attrs.has_bias ? 3 : 2, s.op.attrs.has_bias ? 3 : 2, 1, 1);
  auto pd = make_conv_pd(s, g, [&](algorithm alg) { return forward_pd(s, g, alg); });
  PrimitiveKernelBuilder b(s, pd);
  b.in(0, DNNL_ARG_SRC, pd.src_desc()).in(1, DNNL_ARG_WEIGHTS, pd.weights_desc());
  if (s.op.attrs.has_bias) b.in(2, DNNL_ARG_BIAS, pd.bias_desc());
  b.out(0, DNNL_ARG_DST, pd.dst_desc());
  return std::move(b).finish(make_prim<dnnl::convolution_forward>(pd));
}

std::unique_ptr<Kernel> conv_backward_data(const OpSetup& s, const ConvGeometry& g) {
  s.expect_arity(2, 2, 1, 1);
  auto pd = make_conv_pd(s, g, [&](algorithm alg) {
    dnnl::convolution_backward_data::desc d(alg, any_md(g.src), any_md(g.weights), any_md(g.dst), g.strides, g.pad_l,
                                            g.pad_r);
    return dnnl::convolution_backward_data::primitive_desc(d, user_scratchpad_attr(), s.engine,
                                                           forward_pd(s, g, alg));
  });
  PrimitiveKernelBuilder b(s, pd);
  b.in(0, DNNL_ARG_DIFF_DST, pd.diff_dst_desc())
      .in(1, DNNL_ARG_WEIGHTS, pd.weights_desc())
      .out(0, DNNL_ARG_DIFF_SRC, pd.diff_src_desc());
  return std::move(b).finish(make_prim<dnnl::convolution_backward_data>(pd));
}

std::unique_ptr<Kernel> conv_backward_weights(const OpSetup& s, const ConvGeometry& g) {
  const bool bias = s.op.attrs.has_bias;
  s.expect_arity(2, 2, bias ? 2 : 1, bias ? 2 : 1);
  auto pd = make_conv_pd(s, g, [&](algorithm alg) {
    dnnl::convolution_backward_weights::desc d =
        bias ? dnnl::convolution_backward_weights::desc(alg, any_md(g.src), any_md(g.weights),
                                                        Md(g.bias, DataType::f32, Tag::a), any_md(g.dst), g.strides,
                                                        g.pad_l, g.pad_r)
             : dnnl::convolution_backward_weights::desc(alg, any_md(g.src), any_md(g.weights), any_md(g.dst),
                                                        g.strides, g.pad_l, g.pad_r);
    return dnnl::convolution_backward_weights::primitive_desc(d, user_scratchpad_attr(), s.engine,
                                                              forward_pd(s, g, alg));
  });
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
