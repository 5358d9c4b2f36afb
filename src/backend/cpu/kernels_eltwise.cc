// Element-wise kernels: relu and gelu (oneDNN eltwise, forward and backward), add (oneDNN binary)
// and grad_accumulate (a hand-written sum).
//
// All of them work in their first input's layout, so they run on blocked feature maps without
// reorders and may write in place (outputs[0] == inputs[0]); oneDNN supports in-place for eltwise
// and binary. grad_accumulate is hand-written because oneDNN's sum falls back to a scalar
// reference implementation for padded blocked layouts; over identical layouts a sum is a loop
// over the whole buffer, padding included (zero + zero stays zero).
#include <fmt/format.h>

#include "backend/cpu/kernel.h"

namespace ferry::cpu {
namespace {

using dnnl::algorithm;
using dnnl::prop_kind;

Md first_input_md(const OpSetup& s) {
  s.require(s.in[0].has_value(), "first input has no layout");
  s.require(s.in[0]->data_type() == DataType::f32, "element-wise ops need f32 tensors");
  return *s.in[0];
}

std::unique_ptr<Kernel> eltwise_forward(const OpSetup& s, algorithm alg) {
  s.expect_arity(1, 1, 1, 1);
  const Md md = first_input_md(s);
  dnnl::eltwise_forward::primitive_desc pd({prop_kind::forward_training, alg, md, 0.f}, user_scratchpad_attr(),
                                           s.engine);
  PrimitiveKernelBuilder b(s, pd);
  b.in(0, DNNL_ARG_SRC, pd.src_desc()).out(0, DNNL_ARG_DST, pd.dst_desc());
  return std::move(b).finish(make_prim<dnnl::eltwise_forward>(pd));
}

// {dy, y or x} -> {dx}: relu (use_dst_for_bwd) reads its output, gelu reads its input.
std::unique_ptr<Kernel> eltwise_backward(const OpSetup& s, algorithm alg, bool reads_dst) {
  s.expect_arity(2, 2, 1, 1);
  const Md diff_md = first_input_md(s);
  const Md data_md = s.in[1].value_or(diff_md);
  dnnl::eltwise_forward::primitive_desc hint({prop_kind::forward_training, alg, data_md, 0.f}, user_scratchpad_attr(),
                                             s.engine);
  dnnl::eltwise_backward::primitive_desc pd({alg, diff_md, data_md, 0.f}, user_scratchpad_attr(), s.engine, hint);
  PrimitiveKernelBuilder b(s, pd);
  b.in(0, DNNL_ARG_DIFF_DST, pd.diff_dst_desc())
      .in(1, reads_dst ? DNNL_ARG_DST : DNNL_ARG_SRC, reads_dst ? pd.dst_desc() : pd.src_desc())
      .out(0, DNNL_ARG_DIFF_SRC, pd.diff_src_desc());
  return std::move(b).finish(make_prim<dnnl::eltwise_backward>(pd));
}

std::unique_ptr<Kernel> add(const OpSetup& s) {
  s.expect_arity(2, 2, 1, 1);
  const Md md = first_input_md(s);
  s.require(s.in_tensor(0).shape == s.in_tensor(1).shape, "add needs inputs of equal shape");
  dnnl::binary::primitive_desc pd({algorithm::binary_add, md, md, md}, user_scratchpad_attr(), s.engine);
  PrimitiveKernelBuilder b(s, pd);
  b.in(0, DNNL_ARG_SRC_0, md).in(1, DNNL_ARG_SRC_1, md).out(0, DNNL_ARG_DST, md);
  return std::move(b).finish(make_prim<dnnl::binary>(pd));
}

std::unique_ptr<Kernel> grad_accumulate(const OpSetup& s) {
  s.expect_arity(2, 64, 1, 1);
  const Md md = s.out[0].value_or(first_input_md(s));
  s.require(md.data_type() == DataType::f32, "grad_accumulate needs f32 tensors");
  for (size_t i = 1; i < s.op.inputs.size(); ++i)
    s.require(s.in_tensor(i).numel() == s.in_tensor(0).numel(), "grad_accumulate needs inputs of equal size");
  auto k = new_kernel(s);
  for (size_t i = 0; i < s.op.inputs.size(); ++i) k->read_input(i, s.in[i], md);
  k->write_output(0, s.out[0], md);
  const int64_t n = static_cast<int64_t>(md.get_size() / sizeof(float));  // padding included
  const size_t inputs = s.op.inputs.size();
  k->set_body([n, inputs](const ExecArgs& a) {
    float* out = a.out_as<float>(0);
    const float* in0 = a.in_as<const float>(0);
    const float* in1 = a.in_as<const float>(1);
#pragma omp parallel for simd schedule(static) if (parallel_worth(n))
    for (int64_t i = 0; i < n; ++i) out[i] = in0[i] + in1[i];
    for (size_t j = 2; j < inputs; ++j) {
      const float* ink = a.in_as<const float>(j);
#pragma omp parallel for simd schedule(static) if (parallel_worth(n))
      for (int64_t i = 0; i < n; ++i) out[i] += ink[i];
    }
    return Status::Ok();
  });
  return k;
}

}  // namespace

std::unique_ptr<Kernel> make_eltwise_kernel(const OpSetup& s) {
  const bool tanh = s.op.attrs.gelu_tanh;
  const algorithm gelu = tanh ? algorithm::eltwise_gelu_tanh : algorithm::eltwise_gelu_erf;
  switch (s.op.type) {
    case OpType::kRelu:
      return eltwise_forward(s, algorithm::eltwise_relu_use_dst_for_bwd);
    case OpType::kReluBwd:
      return eltwise_backward(s, algorithm::eltwise_relu_use_dst_for_bwd, /*reads_dst=*/true);
    case OpType::kGelu:
      return eltwise_forward(s, gelu);
    case OpType::kGeluBwd:
      return eltwise_backward(s, gelu, /*reads_dst=*/false);
    case OpType::kAdd:
      return add(s);
    default:
      return grad_accumulate(s);
  }
}

}  // namespace ferry::cpu
