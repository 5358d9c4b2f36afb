// Optimizer updates, hand-written element-wise loops over the weight's storage.
//
// The weight, its gradient and its optimizer state share one layout (Note [Layouts]), so the
// update runs over the whole buffer, padding included: padding is 0 in every operand and every
// update below maps zeros to zeros. Weights and state are updated in place (outputs alias inputs).
//
// SGD (PyTorch semantics, dampening 0, no Nesterov):
//   g = dw + wd * w;  buf = momentum * buf + g (when momentum > 0);  w -= lr * buf (or lr * g)
// Adam, AdamW when weight_decay > 0 (decoupled, as torch.optim.AdamW), t = RunContext::optimizer_step:
//   w *= 1 - lr * wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   w -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
#include <cmath>

#include <fmt/format.h>

#include "backend/cpu/kernel.h"

namespace ferry::cpu {
namespace {

// Binds every input and output in the weight's layout; returns the number of f32 elements.
int64_t bind_all(Kernel& k, const OpSetup& s) {
  s.require(s.in_tensor(0).dtype == DType::kF32, "weight must be f32");
  const Md md = s.input_or(0, plain_md(s.in_tensor(0)));  // plain if no forward op used it
  for (size_t i = 0; i < s.op.inputs.size(); ++i) {
    s.require(s.in_tensor(i).numel() == s.in_tensor(0).numel(),
              fmt::format("'{}' does not have the weight's size", s.in_tensor(i).name));
    k.read_input(i, s.in[i].value_or(md), md);
  }
  for (size_t i = 0; i < s.op.outputs.size(); ++i) k.write_output(i, s.out[i].value_or(md), md);
  return static_cast<int64_t>(md.get_size() / sizeof(float));
}

std::unique_ptr<Kernel> sgd(const OpSetup& s) {
  const OpAttrs at = s.op.attrs;
  const bool momentum = s.op.inputs.size() == 3;
  s.expect_arity(2, 3, momentum ? 2 : 1, momentum ? 2 : 1);
  s.require(s.op.outputs[0] == s.op.inputs[0] && (!momentum || s.op.outputs[1] == s.op.inputs[2]),
            "sgd_update must write its weight (and momentum) in place");
  s.require(momentum == (at.momentum_sgd > 0), "a momentum buffer is given iff momentum > 0");
  auto k = new_kernel(s);
  const int64_t n = bind_all(*k, s);
  k->set_body([n, at, momentum](const ExecArgs& a) {
    const float* w_in = a.in_as<const float>(0);
    const float* dw = a.in_as<const float>(1);
    float* w = a.out_as<float>(0);
    const float lr = at.lr, wd = at.weight_decay, mu = at.momentum_sgd;
    if (momentum) {
      const float* buf_in = a.in_as<const float>(2);
      float* buf = a.out_as<float>(1);
#pragma omp parallel for simd schedule(static) if (parallel_worth(n))
      for (int64_t i = 0; i < n; ++i) {
        const float g = dw[i] + wd * w_in[i];
        const float b = mu * buf_in[i] + g;
        buf[i] = b;
        w[i] = w_in[i] - lr * b;
      }
    } else {
#pragma omp parallel for simd schedule(static) if (parallel_worth(n))
      for (int64_t i = 0; i < n; ++i) w[i] = w_in[i] - lr * (dw[i] + wd * w_in[i]);
    }
    return Status::Ok();
  });
  return k;
}

std::unique_ptr<Kernel> adam(const OpSetup& s) {
  const OpAttrs at = s.op.attrs;
  s.expect_arity(4, 4, 3, 3);
  s.require(s.op.outputs[0] == s.op.inputs[0] && s.op.outputs[1] == s.op.inputs[2] && s.op.outputs[2] == s.op.inputs[3],
            "adam_update must write {w, m, v} in place");
  s.require(at.beta1 >= 0 && at.beta1 < 1 && at.beta2 >= 0 && at.beta2 < 1 && at.adam_eps > 0,
            fmt::format("bad Adam settings beta1={} beta2={} eps={}", at.beta1, at.beta2, at.adam_eps));
  auto k = new_kernel(s);
  const int64_t n = bind_all(*k, s);
  k->set_body([n, at, name = s.op.name](const ExecArgs& a) {
    const int64_t t = a.ctx().optimizer_step;
    if (t < 1) return Status::InvalidArgument(fmt::format("op '{}': optimizer step {} must be >= 1", name, t));
    const double bc1 = 1.0 - std::pow(static_cast<double>(at.beta1), static_cast<double>(t));
    const double bc2 = 1.0 - std::pow(static_cast<double>(at.beta2), static_cast<double>(t));
    const float step_size = static_cast<float>(at.lr / bc1);
    const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
    const float decay = 1.0f - at.lr * at.weight_decay;
    const float b1 = at.beta1, b2 = at.beta2, eps = at.adam_eps;
    const float* w_in = a.in_as<const float>(0);
    const float* dw = a.in_as<const float>(1);
    const float* m_in = a.in_as<const float>(2);
    const float* v_in = a.in_as<const float>(3);
    float* w = a.out_as<float>(0);
    float* m = a.out_as<float>(1);
    float* v = a.out_as<float>(2);
#pragma omp parallel for simd schedule(static) if (parallel_worth(n))
    for (int64_t i = 0; i < n; ++i) {
      const float g = dw[i];
      const float mi = b1 * m_in[i] + (1.0f - b1) * g;
      const float vi = b2 * v_in[i] + (1.0f - b2) * g * g;
      m[i] = mi;
      v[i] = vi;
      w[i] = w_in[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
    }
    return Status::Ok();
  });
  return k;
}

}  // namespace

std::unique_ptr<Kernel> make_optimizer_kernel(const OpSetup& s) {
  return s.op.type == OpType::kSgdUpdate ? sgd(s) : adam(s);
}

}  // namespace ferry::cpu
