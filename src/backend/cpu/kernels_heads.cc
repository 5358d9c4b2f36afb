// split_heads / merge_heads: the attention reshapes, hand-written copies on plain tensors.
//
// split_heads {x [B, T, parts*H*dh]} -> parts x [B, H, T, dh]:
//   out_p[b, h, t, :] = x[b, t, (p*H + h)*dh : (p*H + h + 1)*dh]
// merge_heads {x_1..x_parts [B, H, T, dh]} -> y [B, T, parts*H*dh] is its exact inverse; with one
// input it is the usual head merge, with `parts` inputs it is split_heads' backward.
// Each (b, t) row is independent: rows run in parallel and copy dh-float segments.
#include <cstring>

#include <fmt/format.h>

#include "backend/cpu/kernel.h"

namespace ferry::cpu {
namespace {

struct HeadsShape {
  int64_t batch = 0, seq = 0, heads = 0, head_dim = 0, parts = 0;
};

HeadsShape heads_shape(const OpSetup& s, const Tensor& packed, const std::vector<const Tensor*>& split) {
  s.require(packed.shape.size() == 3, fmt::format("packed tensor '{}' must be [B, T, D]", packed.name));
  HeadsShape h;
  h.batch = packed.shape[0];
  h.seq = packed.shape[1];
  h.parts = static_cast<int64_t>(split.size());
  s.require(!split.empty() && split[0]->shape.size() == 4, "split tensors must be [B, H, T, dh]");
  h.heads = split[0]->shape[1];
  h.head_dim = split[0]->shape[3];
  if (s.op.attrs.heads > 0)
    s.require(s.op.attrs.heads == h.heads,
              fmt::format("attribute heads={} but tensors have {} heads", s.op.attrs.heads, h.heads));
  const std::vector<int64_t> want = {h.batch, h.heads, h.seq, h.head_dim};
  for (const Tensor* t : split)
    s.require(t->shape == want, fmt::format("'{}' must be [{}]", t->name, fmt::join(want, ",")));
  s.require(packed.shape[2] == h.parts * h.heads * h.head_dim,
            fmt::format("last dim {} != {} parts x {} heads x {}", packed.shape[2], h.parts, h.heads, h.head_dim));
  return h;
}

// Copies between the packed [B, T, parts*H*dh] buffer and the split ones, in either direction.
void copy_heads(const HeadsShape& h, float* packed, const std::vector<float*>& split, bool to_split) {
  const int64_t rows = h.batch * h.seq, dh = h.head_dim;
  const size_t seg = static_cast<size_t>(dh) * sizeof(float);
#pragma omp parallel for schedule(static) if (parallel_worth(rows * h.parts * h.heads * dh))
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t b = r / h.seq, t = r % h.seq;
    float* row = packed + r * h.parts * h.heads * dh;
    for (int64_t p = 0; p < h.parts; ++p)
      for (int64_t hd = 0; hd < h.heads; ++hd) {
        float* part = split[static_cast<size_t>(p)] + ((b * h.heads + hd) * h.seq + t) * dh;
        float* packed_seg = row + (p * h.heads + hd) * dh;
        if (to_split)
          std::memcpy(part, packed_seg, seg);
        else
          std::memcpy(packed_seg, part, seg);
      }
  }
}

std::unique_ptr<Kernel> split_heads(const OpSetup& s) {
  s.expect_arity(1, 1, 1, 64);
  std::vector<const Tensor*> split;
  for (size_t i = 0; i < s.op.outputs.size(); ++i) split.push_back(&s.out_tensor(i));
  const HeadsShape h = heads_shape(s, s.in_tensor(0), split);
  auto k = new_kernel(s);
  read_plain(*k, s, 0);
  for (size_t i = 0; i < split.size(); ++i) write_plain(*k, s, i);
  k->set_body([h](const ExecArgs& a) {
    std::vector<float*> parts;
    for (int64_t p = 0; p < h.parts; ++p) parts.push_back(a.out_as<float>(static_cast<size_t>(p)));
    copy_heads(h, a.in_as<float>(0), parts, /*to_split=*/true);
    return Status::Ok();
  });
  return k;
}

std::unique_ptr<Kernel> merge_heads(const OpSetup& s) {
  s.expect_arity(1, 64, 1, 1);
  std::vector<const Tensor*> split;
  for (size_t i = 0; i < s.op.inputs.size(); ++i) split.push_back(&s.in_tensor(i));
  const HeadsShape h = heads_shape(s, s.out_tensor(0), split);
  auto k = new_kernel(s);
  for (size_t i = 0; i < split.size(); ++i) read_plain(*k, s, i);
  write_plain(*k, s, 0);
  k->set_body([h](const ExecArgs& a) {
    std::vector<float*> parts;
    for (int64_t p = 0; p < h.parts; ++p) parts.push_back(a.in_as<float>(static_cast<size_t>(p)));
    copy_heads(h, a.out_as<float>(0), parts, /*to_split=*/false);
    return Status::Ok();
  });
  return k;
}

}  // namespace

std::unique_ptr<Kernel> make_heads_kernel(const OpSetup& s) {
  return s.op.type == OpType::kSplitHeads ? split_heads(s) : merge_heads(s);
}

}  // namespace ferry::cpu
