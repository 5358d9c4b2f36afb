// Optimizer update loops (see host_optimizer.h).
#include "backend/host_optimizer.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace ferry {

namespace {
// As the CPU kernels' rule (backend/cpu/kernel.h): threads only pay above this many elements.
constexpr int64_t kMinParallelElements = int64_t{1} << 15;
}  // namespace

void sgd_update_loop(int64_t n, const OpAttrs& at, const float* w_in, const float* dw, float* w, const float* buf_in,
                     float* buf) {
  const float lr = at.lr, wd = at.weight_decay, mu = at.momentum_sgd;
  if (buf != nullptr) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallelElements)
    for (int64_t i = 0; i < n; ++i) {
      const float g = dw[i] + wd * w_in[i];
      const float b = mu * buf_in[i] + g;
      buf[i] = b;
      w[i] = w_in[i] - lr * b;
    }
  } else {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallelElements)
    for (int64_t i = 0; i < n; ++i) w[i] = w_in[i] - lr * (dw[i] + wd * w_in[i]);
  }
}

Status adam_update_loop(int64_t n, const OpAttrs& at, int64_t step, const float* w_in, const float* dw,
                        const float* m_in, const float* v_in, float* w, float* m, float* v) {
  if (step < 1) return Status::InvalidArgument(fmt::format("optimizer step {} must be >= 1", step));
  const double bc1 = 1.0 - std::pow(static_cast<double>(at.beta1), static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(at.beta2), static_cast<double>(step));
  const float step_size = static_cast<float>(at.lr / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  const float decay = 1.0f - at.lr * at.weight_decay;
  const float b1 = at.beta1, b2 = at.beta2, eps = at.adam_eps;
#pragma omp parallel for simd schedule(static) if (n >= kMinParallelElements)
  for (int64_t i = 0; i < n; ++i) {
    const float g = dw[i];
    const float mi = b1 * m_in[i] + (1.0f - b1) * g;
    const float vi = b2 * v_in[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    w[i] = w_in[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
  }
  return Status::Ok();
}

Status run_update_on_host(const Graph& g, const Op& op, int64_t step, std::span<const TensorId> tensors,
                          std::span<const std::span<std::byte>> operands) {
  auto fail = [&](const std::string& why) {
    return Status::InvalidArgument(fmt::format("host update of op '{}': {}", op.name, why));
  };
  if (op.type != OpType::kSgdUpdate && op.type != OpType::kAdamUpdate)
    return fail(fmt::format("'{}' is not an optimizer update", to_string(op.type)));
  if (tensors.size() != operands.size()) return fail("operand count mismatch");
  auto buffer = [&](TensorId t) -> float* {
    const auto it = std::find(tensors.begin(), tensors.end(), t);
    if (it == tensors.end()) return nullptr;
    return reinterpret_cast<float*>(operands[static_cast<size_t>(it - tensors.begin())].data());
  };
  for (TensorId t : op.inputs)
    if (g.tensor(t).dtype != DType::kF32) return fail(fmt::format("'{}' is not f32", g.tensor(t).name));
  const size_t bytes = operands.empty() ? 0 : operands.front().size();
  for (const auto& o : operands)
    if (o.size() != bytes || bytes % sizeof(float) != 0)
      return fail("operands must have the weight's size, a whole number of f32 elements");
  for (TensorId t : op.inputs)
    if (buffer(t) == nullptr) return fail(fmt::format("no buffer for '{}'", g.tensor(t).name));
  for (TensorId t : op.outputs)
    if (buffer(t) == nullptr) return fail(fmt::format("no buffer for '{}'", g.tensor(t).name));
  const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
  const OpAttrs& at = op.attrs;
  if (op.type == OpType::kSgdUpdate) {
    const bool momentum = op.inputs.size() == 3;
    if (op.inputs.size() < 2 || op.outputs.empty()) return fail("sgd_update needs weight and gradient");
    sgd_update_loop(n, at, buffer(op.inputs[0]), buffer(op.inputs[1]), buffer(op.outputs[0]),
                    momentum ? buffer(op.inputs[2]) : nullptr, momentum ? buffer(op.outputs[1]) : nullptr);
    return Status::Ok();
  }
  if (op.inputs.size() != 4 || op.outputs.size() != 3) return fail("adam_update needs {w, dw, m, v} -> {w, m, v}");
  Status s = adam_update_loop(n, at, step, buffer(op.inputs[0]), buffer(op.inputs[1]), buffer(op.inputs[2]),
                              buffer(op.inputs[3]), buffer(op.outputs[0]), buffer(op.outputs[1]),
                              buffer(op.outputs[2]));
  return s.ok() ? s : fail(s.message());
}

}  // namespace ferry
