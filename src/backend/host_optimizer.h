// Optimizer updates as plain loops over host memory: the arithmetic of sgd_update and adam_update
// in one place. The CPU backend's update kernels run these loops on its device arena, and the
// runtime runs them on swap-tier copies when a plan puts an update on the host (ZeRO-Offload's
// placement, a kHostUpdate action), so the two give bitwise the same weights and state.
//
// Operands are in the device layout the update's weight has (a swap tier stores a tensor's bytes
// as the device holds them): every operand has the weight's bytes, padding included; padding is 0
// and every update maps zeros to zeros. Updates are in place: weight, momentum and Adam's moments
// are read and written through the same buffer.
//
// SGD (PyTorch semantics, dampening 0, no Nesterov):
//   g = dw + wd * w;  buf = momentum * buf + g (when momentum > 0);  w -= lr * buf (or lr * g)
// Adam, AdamW when weight_decay > 0 (decoupled, as torch.optim.AdamW), t = the optimizer step:
//   w *= 1 - lr * wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   w -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "common/status.h"
#include "graph/graph.h"

namespace ferry {

// The loops. `n` f32 elements; w_in/w (and buf_in/buf, m_in/m, v_in/v) may be the same memory.
void sgd_update_loop(int64_t n, const OpAttrs& at, const float* w_in, const float* dw, float* w, const float* buf_in,
                     float* buf);
// Errors: InvalidArgument when `step` < 1.
Status adam_update_loop(int64_t n, const OpAttrs& at, int64_t step, const float* w_in, const float* dw,
                        const float* m_in, const float* v_in, float* w, float* m, float* v);

// Runs update op `op` (sgd_update with or without momentum, adam_update; f32) on host buffers:
// `operands` holds one buffer per distinct tensor of the op, indexed like `tensors`
// (op.inputs, then outputs that are not inputs: none for in-place updates), each as long as the
// weight's buffer. `step` is the 1-based optimizer step (Adam). Errors: InvalidArgument for another
// op type, operands of unequal or non-f32-multiple sizes, a missing operand or bad settings.
Status run_update_on_host(const Graph& g, const Op& op, int64_t step,
                          std::span<const TensorId> tensors, std::span<const std::span<std::byte>> operands);

}  // namespace ferry
