// Softmax over the last axis on oneDNN, with an optional causal mask.
//
// oneDNN has no masked softmax, so the causal forward first copies x into y with -inf at the
// masked positions (column j > row i of the last two dims) and then runs oneDNN's softmax in
// place on y: exp(-inf) is exactly 0, so masked probabilities are exactly 0 and the unmasked
// ones are the softmax of the visible prefix. The backward, dx = y * (dy - sum(dy * y)), needs no
// mask because y is 0 wherever the mask applied.
#include <limits>

#include <fmt/format.h>

#include "backend/cpu/kernel.h"

namespace ferry::cpu {
namespace {

using dnnl::prop_kind;

std::unique_ptr<Kernel> softmax_forward(const OpSetup& s) {
  s.expect_arity(1, 1, 1, 1);
  const Tensor& x = s.in_tensor(0);
  s.require(!x.shape.empty(), "softmax needs at least one dimension");
  const bool causal = s.op.attrs.causal;
  s.require(!causal || x.shape.size() >= 2, "causal softmax needs at least two dimensions");
  const Md md = plain_md(x);
  const int axis = md.data.ndims - 1;
  dnnl::softmax_forward::primitive_desc pd({prop_kind::forward_training, md, axis}, user_scratchpad_attr(), s.engine);
  auto k = new_kernel(s);
  k->use_scratchpad(pd);
  k->read_input(0, s.input_or(0, md), md);
  k->write_output(0, s.output_or(0, md), md);
  Prim prim = make_prim<dnnl::softmax_forward>(pd);
  const int64_t cols = x.shape.back();
  const int64_t rows_per_matrix = causal ? x.shape[x.shape.size() - 2] : 1;
  const int64_t rows = x.numel() / cols;
  k->set_body([=](const ExecArgs& a) {
    if (!causal) {
      a.exec(prim, {{DNNL_ARG_SRC, a.mem(md, a.in(0))}, {DNNL_ARG_DST, a.mem(md, a.out(0))}});
      return Status::Ok();
    }
    const float* in = a.in_as<const float>(0);
    float* out = a.out_as<float>(0);
    constexpr float kMasked = -std::numeric_limits<float>::infinity();
#pragma omp parallel for schedule(static) if (parallel_worth(rows * cols))
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t visible = std::min(cols, r % rows_per_matrix + 1);  // columns j <= i
      const float* src = in + r * cols;
      float* dst = out + r * cols;
      for (int64_t j = 0; j < visible; ++j) dst[j] = src[j];
      for (int64_t j = visible; j < cols; ++j) dst[j] = kMasked;
    }
    a.exec(prim, {{DNNL_ARG_SRC, a.mem(md, out)}, {DNNL_ARG_DST, a.mem(md, out)}});
    return Status::Ok();
  });
  return k;
}

std::unique_ptr<Kernel> softmax_backward(const OpSetup& s) {
  s.expect_arity(2, 2, 1, 1);
  const Tensor& y = s.in_tensor(1);
  s.require(!y.shape.empty(), "softmax needs at least one dimension");
  const Md md = plain_md(y);
  const int axis = md.data.ndims - 1;
  dnnl::softmax_forward::primitive_desc hint({prop_kind::forward_training, md, axis}, user_scratchpad_attr(), s.engine);
  dnnl::softmax_backward::primitive_desc pd({md, md, axis}, user_scratchpad_attr(), s.engine, hint);
  PrimitiveKernelBuilder b(s, pd);
  b.in(0, DNNL_ARG_DIFF_DST, md).in(1, DNNL_ARG_DST, md).out(0, DNNL_ARG_DIFF_SRC, md);
  return std::move(b).finish(make_prim<dnnl::softmax_backward>(pd));
}

}  // namespace

std::unique_ptr<Kernel> make_softmax_kernel(const OpSetup& s) {
  return s.op.type == OpType::kSoftmax ? softmax_forward(s) : softmax_backward(s);
}

}  // namespace ferry::cpu
