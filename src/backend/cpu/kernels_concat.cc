// Concatenation along one axis (oneDNN concat) and its backward (one reorder per input gradient).
//
// Forward: the inputs stay in their layouts and oneDNN picks the output layout; when it only has a
// reference implementation for them (blocked inputs whose channel counts are not multiples of the
// block), everything goes through plain row-major, where concat is a copy.
// Backward: dx_i is the slice of dy at offset sum_{j<i} size_j along the axis. A slice of a
// blocked dy is described by a sub-memory descriptor and reordered into dx_i's layout; when the
// offsets do not fall on block boundaries, dy is staged to plain first.
#include <fmt/format.h>

#include "backend/cpu/kernel.h"

namespace ferry::cpu {
namespace {

using Tag = dnnl::memory::format_tag;

void check_shapes(const OpSetup& s, const Tensor& whole, const std::vector<const Tensor*>& parts) {
  const int axis = s.op.attrs.axis;
  s.require(axis >= 0 && static_cast<size_t>(axis) < whole.shape.size(),
            fmt::format("axis {} out of range for rank {}", axis, whole.shape.size()));
  int64_t total = 0;
  for (const Tensor* p : parts) {
    s.require(p->shape.size() == whole.shape.size(), fmt::format("'{}' has another rank", p->name));
    for (size_t d = 0; d < whole.shape.size(); ++d)
      if (static_cast<int>(d) != axis)
        s.require(p->shape[d] == whole.shape[d], fmt::format("'{}' differs off the concat axis", p->name));
    total += p->shape[static_cast<size_t>(axis)];
  }
  s.require(total == whole.shape[static_cast<size_t>(axis)], "part sizes do not add up to the concat axis");
}

std::unique_ptr<Kernel> concat_forward(const OpSetup& s) {
  s.expect_arity(1, 1024, 1, 1);
  std::vector<const Tensor*> parts;
  for (size_t i = 0; i < s.op.inputs.size(); ++i) {
    parts.push_back(&s.in_tensor(i));
    s.require(s.in[i].has_value(), "concat input has no layout");
  }
  const Tensor& y = s.out_tensor(0);
  check_shapes(s, y, parts);
  const Dims y_dims(y.shape.begin(), y.shape.end());
  auto make = [&](bool plain) {
    std::vector<Md> srcs;
    for (size_t i = 0; i < parts.size(); ++i) srcs.push_back(plain ? plain_md(*parts[i]) : *s.in[i]);
    Md dst = s.out[0] ? *s.out[0] : plain ? plain_md(y) : Md(y_dims, DataType::f32, Tag::any);
    return dnnl::concat::primitive_desc(dst, s.op.attrs.axis, srcs, s.engine, user_scratchpad_attr());
  };
  auto pd = make(false);
  if (is_reference_impl(pd)) pd = make(true);
  PrimitiveKernelBuilder b(s, pd);
  for (size_t i = 0; i < parts.size(); ++i)
    b.in(i, DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i), pd.src_desc(static_cast<int>(i)));
  b.out(0, DNNL_ARG_DST, pd.dst_desc());
  return std::move(b).finish(make_prim<dnnl::concat>(pd));
}

std::unique_ptr<Kernel> concat_backward(const OpSetup& s) {
  s.expect_arity(1, 1, 1, 1024);
  s.require(s.in[0].has_value(), "concat_bwd input has no layout");
  std::vector<const Tensor*> parts;
  for (size_t i = 0; i < s.op.outputs.size(); ++i) parts.push_back(&s.out_tensor(i));
  const Tensor& dy = s.in_tensor(0);
  check_shapes(s, dy, parts);
  const size_t axis = static_cast<size_t>(s.op.attrs.axis);

  // Slices of dy as stored; if one is impossible (offset inside a block), slices of plain dy.
  auto slices_of = [&](const Md& whole) {
    std::vector<Md> subs;
    Dims offsets(whole.dims().size(), 0);
    for (const Tensor* p : parts) {
      Dims dims(p->shape.begin(), p->shape.end());
      subs.push_back(whole.submemory_desc(dims, offsets, /*allow_empty=*/true));
      offsets[axis] += dims[axis];
    }
    return subs;
  };
  Md dy_md = *s.in[0];
  std::vector<Md> subs = slices_of(dy_md);
  bool all = true;
  for (const Md& m : subs) all = all && !is_zero(m);
  if (!all) {
    dy_md = plain_md(dy);
    subs = slices_of(dy_md);
  }

  auto k = new_kernel(s);
  k->read_input(0, s.input_or(0, dy_md), dy_md);
  std::vector<Prim> reorders;
  std::vector<Md> dst_mds;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Md dst = s.output_or(i, plain_md(*parts[i]));
    k->write_output(i, dst, dst);
    dnnl::reorder::primitive_desc pd(s.engine, subs[i], s.engine, dst, user_scratchpad_attr());
    k->use_scratchpad(pd);
    reorders.push_back(make_prim<dnnl::reorder>(pd));
    dst_mds.push_back(dst);
  }
  k->set_body([reorders, subs, dst_mds](const ExecArgs& a) {
    for (size_t i = 0; i < reorders.size(); ++i)
      a.exec(reorders[i], {{DNNL_ARG_FROM, a.mem(subs[i], a.in(0))}, {DNNL_ARG_TO, a.mem(dst_mds[i], a.out(i))}});
    return Status::Ok();
  });
  return k;
}

}  // namespace

std::unique_ptr<Kernel> make_concat_kernel(const OpSetup& s) {
  return s.op.type == OpType::kConcat ? concat_forward(s) : concat_backward(s);
}

}  // namespace ferry::cpu
