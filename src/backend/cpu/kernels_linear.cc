// Linear (oneDNN inner product: forward, backward-data, backward-weights) and batched matmul
// (oneDNN matmul with transposes expressed as strides and the scale as an output scale).
//
// linear views its input as a row-major [M, K] matrix, M = numel / in_features; a blocked
// feature map (VGG's classifier input) is staged to plain first. Weights [N, K] take the layout
// the forward inner product prefers (blocked on AVX-512) unless they are already stored, e.g. a
// tied embedding table that the embedding kernel keeps plain; a stored layout is used as is
// unless oneDNN only has a reference implementation for it, in which case the kernel stages.
//
// matmul: C[b] = scale * op(A[b]) op(B[b]) over equal leading batch dims; op() transposes the
// last two dims. A transposed operand is the same plain buffer described with swapped strides,
// so no transpose is ever materialised. Matmul's backward is built from matmuls by autodiff.
#include <fmt/format.h>

#include "backend/cpu/kernel.h"

namespace ferry::cpu {
namespace {

using dnnl::prop_kind;
using Tag = dnnl::memory::format_tag;

struct LinearGeometry {
  int64_t m = 0, k = 0, n = 0;
};

LinearGeometry linear_geometry(const OpSetup& s) {
  const Op& op = s.op;
  const bool fwd = op.type == OpType::kLinear, bwd_w = op.type == OpType::kLinearBwdWeights;
  const Tensor& x = fwd ? s.in_tensor(0) : bwd_w ? s.in_tensor(1) : s.out_tensor(0);
  const Tensor& y = fwd ? s.out_tensor(0) : s.in_tensor(0);
  const Tensor& w = bwd_w ? s.out_tensor(0) : s.in_tensor(1);
  LinearGeometry g;
  g.k = op.attrs.in_features;
  s.require(w.shape.size() == 2 && w.shape[1] == g.k,
            fmt::format("weights [{}] are not [out, in_features={}]", fmt::join(w.shape, ","), g.k));
  g.n = w.shape[0];
  s.require(g.k > 0 && x.numel() % g.k == 0,
            fmt::format("input of {} elements is not a multiple of in_features {}", x.numel(), g.k));
  g.m = x.numel() / g.k;
  s.require(y.numel() == g.m * g.n, fmt::format("output has {} elements, expected {} x {}", y.numel(), g.m, g.n));
  return g;
}

Md f32(const Dims& dims, Tag tag) { return Md(dims, DataType::f32, tag); }

// The first primitive descriptor `make(weights_md)` gives for the stored weights layout, or for
// format_tag::any when there is none or oneDNN has only a reference (or no) implementation for it.
template <typename MakePd>
auto with_weights(const std::optional<Md>& stored, const Dims& dims, MakePd make) -> decltype(make(Md())) {
  if (stored && stored->dims() == dims) {
    try {
      auto pd = make(*stored);
      if (!is_reference_impl(pd)) return pd;
    } catch (const dnnl::error& e) {
      if (e.status != dnnl_unimplemented) throw;
    }
  }
  return make(f32(dims, Tag::any));
}

dnnl::inner_product_forward::primitive_desc ip_forward_pd(const OpSetup& s, const LinearGeometry& g, const Md& w_md) {
  const Md src = f32({g.m, g.k}, Tag::ab), dst = f32({g.m, g.n}, Tag::ab);
  auto d = s.op.attrs.has_bias
               ? dnnl::inner_product_forward::desc(prop_kind::forward_training, src, w_md, f32({g.n}, Tag::a), dst)
               : dnnl::inner_product_forward::desc(prop_kind::forward_training, src, w_md, dst);
  return {d, user_scratchpad_attr(), s.engine};
}

std::unique_ptr<Kernel> linear_forward(const OpSetup& s, const LinearGeometry& g) {
  const bool bias = s.op.attrs.has_bias;
  s.expect_arity(bias ? 3 : 2, bias ? 3 : 2, 1, 1);
  auto pd = with_weights(s.in[1], {g.n, g.k}, [&](const Md& w) { return ip_forward_pd(s, g, w); });
  PrimitiveKernelBuilder b(s, pd);
  b.in(0, DNNL_ARG_SRC, pd.src_desc()).in(1, DNNL_ARG_WEIGHTS, pd.weights_desc());
  if (bias) b.in(2, DNNL_ARG_BIAS, pd.bias_desc());
  b.out(0, DNNL_ARG_DST, pd.dst_desc());
  return std::move(b).finish(make_prim<dnnl::inner_product_forward>(pd));
}

std::unique_ptr<Kernel> linear_backward_data(const OpSetup& s, const LinearGeometry& g) {
  s.expect_arity(2, 2, 1, 1);
  auto pd = with_weights(s.in[1], {g.n, g.k}, [&](const Md& w) {
    auto hint = ip_forward_pd(s, g, w);
    return dnnl::inner_product_backward_data::primitive_desc({f32({g.m, g.k}, Tag::ab), w, f32({g.m, g.n}, Tag::ab)},
                                                             user_scratchpad_attr(), s.engine, hint);
  });
  PrimitiveKernelBuilder b(s, pd);
  b.in(0, DNNL_ARG_DIFF_DST, pd.diff_dst_desc())
      .in(1, DNNL_ARG_WEIGHTS, pd.weights_desc())
      .out(0, DNNL_ARG_DIFF_SRC, pd.diff_src_desc());
  return std::move(b).finish(make_prim<dnnl::inner_product_backward_data>(pd));
}

std::unique_ptr<Kernel> linear_backward_weights(const OpSetup& s, const LinearGeometry& g) {
  const bool bias = s.op.attrs.has_bias;
  s.expect_arity(2, 2, bias ? 2 : 1, bias ? 2 : 1);
  // dw has the weights' layout (it is their gradient), known from the forward kernel.
  auto pd = with_weights(s.out[0], {g.n, g.k}, [&](const Md& w) {
    auto hint = ip_forward_pd(s, g, w);
    const Md src = f32({g.m, g.k}, Tag::ab), diff_dst = f32({g.m, g.n}, Tag::ab);
    auto d = bias ? dnnl::inner_product_backward_weights::desc(src, w, f32({g.n}, Tag::a), diff_dst)
                  : dnnl::inner_product_backward_weights::desc(src, w, diff_dst);
    return dnnl::inner_product_backward_weights::primitive_desc(d, user_scratchpad_attr(), s.engine, hint);
  });
  PrimitiveKernelBuilder b(s, pd);
  b.in(0, DNNL_ARG_DIFF_DST, pd.diff_dst_desc())
      .in(1, DNNL_ARG_SRC, pd.src_desc())
      .out(0, DNNL_ARG_DIFF_WEIGHTS, pd.diff_weights_desc());
  if (bias) b.out(1, DNNL_ARG_DIFF_BIAS, pd.diff_bias_desc());
  return std::move(b).finish(make_prim<dnnl::inner_product_backward_weights>(pd));
}

// Plain `dims` with the last two axes swapped in the descriptor (not in memory) when `transpose`.
Md maybe_transposed(const Dims& stored_dims, bool transpose) {
  Md md = plain_md(stored_dims, DataType::f32);
  if (!transpose) return md;
  std::vector<int> perm(stored_dims.size());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int>(i);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return md.permute_axes(perm);
}

std::unique_ptr<Kernel> matmul(const OpSetup& s) {
  s.expect_arity(2, 2, 1, 1);
  const OpAttrs& at = s.op.attrs;
  const Tensor& a = s.in_tensor(0);
  const Tensor& b = s.in_tensor(1);
  const Tensor& c = s.out_tensor(0);
  const size_t r = a.shape.size();
  s.require(r >= 2 && b.shape.size() == r && c.shape.size() == r, "matmul operands need equal ranks >= 2");
  s.require(std::equal(a.shape.begin(), a.shape.end() - 2, b.shape.begin()) &&
                std::equal(a.shape.begin(), a.shape.end() - 2, c.shape.begin()),
            "matmul operands need equal batch dims");
  const Dims a_dims(a.shape.begin(), a.shape.end()), b_dims(b.shape.begin(), b.shape.end());
  const Md a_md = maybe_transposed(a_dims, at.transpose_a), b_md = maybe_transposed(b_dims, at.transpose_b);
  const Md c_md = plain_md(c);
  const int64_t m = a_md.dims()[r - 2], ka = a_md.dims()[r - 1], kb = b_md.dims()[r - 2], n = b_md.dims()[r - 1];
  s.require(ka == kb && c.shape[r - 2] == m && c.shape[r - 1] == n,
            fmt::format("shapes [{}] x [{}] -> [{}] do not multiply with transpose_a={} transpose_b={}",
                        fmt::join(a.shape, ","), fmt::join(b.shape, ","), fmt::join(c.shape, ","), at.transpose_a,
                        at.transpose_b));
  dnnl::primitive_attr attr = user_scratchpad_attr();
  if (at.scale != 1.0f) attr.set_output_scales(0, {at.scale});
  dnnl::matmul::primitive_desc pd({a_md, b_md, c_md}, attr, s.engine);
  auto k = new_kernel(s);
  k->use_scratchpad(pd);
  k->read_input(0, s.input_or(0, plain_md(a)), plain_md(a));
  k->read_input(1, s.input_or(1, plain_md(b)), plain_md(b));
  k->write_output(0, s.output_or(0, c_md), c_md);
  Prim prim = make_prim<dnnl::matmul>(pd);
  k->set_body([prim, a_md, b_md, c_md](const ExecArgs& x) {
    x.exec(prim, {{DNNL_ARG_SRC, x.mem(a_md, x.in(0))},
                  {DNNL_ARG_WEIGHTS, x.mem(b_md, x.in(1))},
                  {DNNL_ARG_DST, x.mem(c_md, x.out(0))}});
    return Status::Ok();
  });
  return k;
}

}  // namespace

std::unique_ptr<Kernel> make_linear_kernel(const OpSetup& s) {
  if (s.op.type == OpType::kMatMul) return matmul(s);
  s.expect_arity(2, 3, 1, 2);
  const LinearGeometry g = linear_geometry(s);
  switch (s.op.type) {
    case OpType::kLinear:
      return linear_forward(s, g);
    case OpType::kLinearBwdData:
      return linear_backward_data(s, g);
    default:
      return linear_backward_weights(s, g);
  }
}

}  // namespace ferry::cpu
