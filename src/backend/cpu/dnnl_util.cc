#include "backend/cpu/dnnl_util.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

namespace ferry::cpu {

Status status_from_dnnl(const dnnl::error& e, std::string_view what) {
  std::string msg = fmt::format("{}: oneDNN: {}", what, e.what());
  switch (e.status) {
    case dnnl_out_of_memory:
      return Status::OutOfMemory(msg);
    case dnnl_unimplemented:
      return Status::Unsupported(msg + " (no oneDNN implementation)");
    case dnnl_invalid_arguments:
      return Status::InvalidArgument(msg + " (invalid arguments)");
    default:
      return Status::Internal(msg);
  }
}

void fail_invalid(std::string msg) { throw StatusError{Status::InvalidArgument(std::move(msg))}; }
void fail_unsupported(std::string msg) { throw StatusError{Status::Unsupported(std::move(msg))}; }

DataType dnnl_type(DType dtype, std::string_view tensor_name) {
  switch (dtype) {
    case DType::kF32:
      return DataType::f32;
    case DType::kF16:
      return DataType::f16;
    case DType::kBF16:
      return DataType::bf16;
    case DType::kI32:
      return DataType::s32;
    case DType::kU8:
      return DataType::u8;
    case DType::kI64:
      break;
  }
  fail_unsupported(
      fmt::format("tensor '{}' has dtype {}, which the CPU backend does not support", tensor_name, to_string(dtype)));
}

Md plain_md(const Dims& dims, DataType type) {
  Dims d = dims.empty() ? Dims{1} : dims;
  Dims strides(d.size(), 1);
  for (size_t i = d.size() - 1; i > 0; --i) strides[i - 1] = strides[i] * d[i];
  return Md(d, type, strides);
}

Md plain_md(const Tensor& t) { return plain_md(Dims(t.shape.begin(), t.shape.end()), dnnl_type(t.dtype, t.name)); }

Md plain_like(const Md& md) { return plain_md(md.dims(), md.data_type()); }

Md retype(const Md& md, DataType type) {
  dnnl_memory_desc_t c = md.data;
  c.data_type = static_cast<dnnl_data_type_t>(type);
  c.extra = dnnl_memory_extra_desc_t{};  // compensation flags etc. do not carry over
  return Md(c);
}

bool is_plain(const Md& md) { return md == plain_like(md); }

int64_t md_numel(const Md& md) {
  int64_t n = 1;
  for (int i = 0; i < md.data.ndims; ++i) n *= md.data.dims[i];
  return n;
}

Md try_reshape(const Md& md, const Dims& dims) {
  if (md.dims() == dims) return md;
  return md.reshape(dims, /*allow_empty=*/true);
}

std::string layout_name(const Md& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.format_kind != dnnl_blocked) return "opaque";
  const auto& blk = d.format_desc.blocking;
  std::vector<int> order(static_cast<size_t>(d.ndims));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return blk.strides[a] > blk.strides[b]; });
  std::string name;
  for (int dim : order) {
    bool blocked = false;
    for (int i = 0; i < blk.inner_nblks; ++i) blocked = blocked || blk.inner_idxs[i] == dim;
    name += static_cast<char>((blocked ? 'A' : 'a') + dim);
  }
  for (int i = 0; i < blk.inner_nblks; ++i)
    name += fmt::format("{}{}", blk.inner_blks[i], static_cast<char>('a' + blk.inner_idxs[i]));
  return name;
}

dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

bool is_reference_impl(const dnnl::primitive_desc_base& pd) {
  return std::string_view(pd.impl_info_str()).starts_with("ref");
}

}  // namespace ferry::cpu
