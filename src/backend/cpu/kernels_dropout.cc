// Dropout with a counter-based random number generator, hand-written.
//
// Forward {x} -> {y, mask u8}: element i is kept iff bits(key, i) >= p * 2^32, where
// key = mix(seed, iteration, op id) and bits(key, i) is the high half of the SplitMix64 output
// for counter i (a strong 64-bit finaliser of key + i * golden ratio). Kept elements are scaled by
// 1 / (1 - p). Because each element's bits depend only on (seed, iteration, op, i), masks are
// bitwise reproducible whatever the thread count or the order elements are visited in, and the
// loop vectorises. i is the index in the tensor's storage (the logical index for plain layouts).
// Backward {dy, mask} -> {dx}: dx = dy * mask / (1 - p).
// All three tensors share x's layout (the mask with u8 elements); padding of blocked layouts is 0
// in x and stays 0 in y and dx.
#include <cmath>

#include <fmt/format.h>

#include "backend/cpu/kernel.h"

namespace ferry::cpu {
namespace {

inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

uint64_t dropout_key(uint64_t seed, int64_t iteration, OpId op) {
  return mix64(mix64(mix64(seed + kGolden) ^ static_cast<uint64_t>(iteration)) ^ static_cast<uint64_t>(op));
}

// p * 2^32 rounded, as the threshold a uniform 32-bit value must reach to be kept.
uint64_t keep_threshold(float p) { return static_cast<uint64_t>(std::llround(static_cast<double>(p) * 4294967296.0)); }

std::unique_ptr<Kernel> dropout_forward(const OpSetup& s) {
  s.expect_arity(1, 1, 2, 2);
  const float p = s.op.attrs.dropout_p;
  s.require(p >= 0.0f && p < 1.0f, fmt::format("dropout probability {} is not in [0, 1)", p));
  s.require(s.in[0].has_value() && s.in[0]->data_type() == DataType::f32, "dropout input must be f32 with a layout");
  s.require(s.out_tensor(1).dtype == DType::kU8 && s.out_tensor(1).numel() == s.in_tensor(0).numel(),
            "dropout mask must be u8 with the input's shape");
  const Md md = *s.in[0];
  auto k = new_kernel(s);
  k->read_input(0, md, md);
  k->write_output(0, s.output_or(0, md), md);
  const Md mask_md = retype(md, DataType::u8);
  k->write_output(1, s.output_or(1, mask_md), mask_md);
  const int64_t n = static_cast<int64_t>(md.get_size() / sizeof(float));
  const uint64_t threshold = keep_threshold(p);
  const float scale = 1.0f / (1.0f - p);
  const OpId op = s.op.id;
  k->set_body([=](const ExecArgs& a) {
    const uint64_t key = dropout_key(a.ctx().dropout_seed, a.ctx().iteration, op);
    const float* x = a.in_as<const float>(0);
    float* y = a.out_as<float>(0);
    uint8_t* mask = a.out_as<uint8_t>(1);
#pragma omp parallel for simd schedule(static) if (parallel_worth(n))
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t bits = mix64(key + static_cast<uint64_t>(i) * kGolden) >> 32;
      const bool keep = bits >= threshold;
      mask[i] = keep ? 1 : 0;
      y[i] = keep ? x[i] * scale : 0.0f;
    }
    return Status::Ok();
  });
  return k;
}

std::unique_ptr<Kernel> dropout_backward(const OpSetup& s) {
  s.expect_arity(2, 2, 1, 1);
  const float p = s.op.attrs.dropout_p;
  s.require(p >= 0.0f && p < 1.0f, fmt::format("dropout probability {} is not in [0, 1)", p));
  s.require(s.in[0].has_value() && s.in[0]->data_type() == DataType::f32, "dropout gradient must be f32 with a layout");
  const Md md = *s.in[0];
  auto k = new_kernel(s);
  k->read_input(0, md, md);
  const Md mask_md = retype(md, DataType::u8);
  k->read_input(1, s.input_or(1, mask_md), mask_md);
  k->write_output(0, s.output_or(0, md), md);
  const int64_t n = static_cast<int64_t>(md.get_size() / sizeof(float));
  const float scale = 1.0f / (1.0f - p);
  k->set_body([=](const ExecArgs& a) {
    const float* dy = a.in_as<const float>(0);
    const uint8_t* mask = a.in_as<const uint8_t>(1);
    float* dx = a.out_as<float>(0);
#pragma omp parallel for simd schedule(static) if (parallel_worth(n))
    for (int64_t i = 0; i < n; ++i) dx[i] = mask[i] ? dy[i] * scale : 0.0f;
    return Status::Ok();
  });
  return k;
}

}  // namespace

std::unique_ptr<Kernel> make_dropout_kernel(const OpSetup& s) {
  return s.op.type == OpType::kDropout ? dropout_forward(s) : dropout_backward(s);
}

}  // namespace ferry::cpu
