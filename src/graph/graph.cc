#include "graph/graph.h"

#include <algorithm>
#include <array>

#include <fmt/format.h>

namespace ferry {

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

// The rules of Note [Storage versions and release points] (graph.h), once ids and producers are
// known to be valid.
Status validate_versions(const Graph& g, const std::vector<OpId>& producer) {
  const size_t n = g.tensors.size();
  std::vector<OpId> last_read(n, kNoOp);
  for (const Op& op : g.ops)
    for (TensorId t : op.inputs) last_read[static_cast<size_t>(t)] = op.id;
  std::vector<TensorId> overwritten_by(n, kNoTensor);
  for (const Tensor& t : g.tensors) {
    if (t.overwrites != kNoTensor) {
      const TensorId o = t.overwrites;
      if (o < 0 || static_cast<size_t>(o) >= n || o == t.id)
        return Status::InvalidArgument(fmt::format("tensor '{}' overwrites tensor id {}, which is {}", t.name, o,
                                                   o == t.id ? "itself" : "not a tensor"));
      const Tensor& old = g.tensor(o);
      if (t.persistent() || old.persistent())
        return Status::InvalidArgument(fmt::format(
            "tensor '{}' overwrites '{}': persistent tensors are not versioned (update ops write them in place)",
            t.name, old.name));
      if (t.bytes != old.bytes)
        return Status::InvalidArgument(fmt::format("tensor '{}' ({} bytes) overwrites '{}' ({} bytes): a new version "
                                                   "of a storage has the storage's size",
                                                   t.name, t.bytes, old.name, old.bytes));
      const OpId p = producer[static_cast<size_t>(t.id)];
      if (p == kNoOp)
        return Status::InvalidArgument(
            fmt::format("tensor '{}' overwrites '{}' but no op produces it", t.name, old.name));
      const Op& op = g.op(p);
      if (std::find(op.inputs.begin(), op.inputs.end(), o) == op.inputs.end())
        return Status::InvalidArgument(fmt::format(
            "tensor '{}' overwrites '{}', so its producer '{}' must list '{}' among its inputs", t.name, old.name,
            op.name, old.name));
      if (overwritten_by[static_cast<size_t>(o)] != kNoTensor)
        return Status::InvalidArgument(fmt::format("tensor '{}' is overwritten twice (by '{}' and '{}')", old.name,
                                                   g.tensor(overwritten_by[static_cast<size_t>(o)]).name, t.name));
      overwritten_by[static_cast<size_t>(o)] = t.id;
      if (last_read[static_cast<size_t>(o)] > p)
        return Status::InvalidArgument(fmt::format(
            "op '{}' reads '{}' after op '{}' overwrote its storage (the new version is '{}')",
            g.op(last_read[static_cast<size_t>(o)]).name, old.name, op.name, t.name));
      if (old.free_after != kNoOp)
        return Status::InvalidArgument(fmt::format(
            "tensor '{}' has a release point (free_after) but '{}' overwrites its storage: the storage is released "
            "with its last version, so give free_after to that one",
            old.name, t.name));
    }
    if (t.free_after != kNoOp) {
      const OpId f = t.free_after;
      if (f < 0 || static_cast<size_t>(f) >= g.ops.size())
        return Status::InvalidArgument(
            fmt::format("tensor '{}' is released after op index {}, which does not exist", t.name, f));
      if (t.persistent())
        return Status::InvalidArgument(
            fmt::format("tensor '{}' is persistent and never released, so it has no free_after", t.name));
      const OpId p = producer[static_cast<size_t>(t.id)];
      if (t.role != TensorRole::kInput && p == kNoOp)
        return Status::InvalidArgument(
            fmt::format("tensor '{}' has a release point but no op produces it", t.name));
      if (p != kNoOp && f < p)
        return Status::InvalidArgument(fmt::format("tensor '{}' is released after op '{}', before its producer '{}'",
                                                   t.name, g.op(f).name, g.op(p).name));
      if (last_read[static_cast<size_t>(t.id)] > f)
        return Status::InvalidArgument(fmt::format("op '{}' reads tensor '{}' after its release point (op '{}')",
                                                   g.op(last_read[static_cast<size_t>(t.id)]).name, t.name,
                                                   g.op(f).name));
    }
  }
  return Status::Ok();
}

constexpr std::array<std::string_view, 38> kOpNames = {
#define FERRY_OP_NAME(e, s) s,
    FERRY_OP_TYPES(FERRY_OP_NAME)
#undef FERRY_OP_NAME
};
static_assert(kOpNames.size() == static_cast<size_t>(OpType::kOpaque) + 1, "update kOpNames size");

constexpr std::array<std::string_view, 8> kRoleNames = {"input",           "weight",          "activation",
                                                         "gradient",        "weight_gradient", "optimizer_state",
                                                         "workspace",       "weight_copy"};
constexpr std::array<std::string_view, 4> kPrecisionNames = {"fp32", "tf32", "amp-fp16", "amp-bf16"};
constexpr std::array<std::string_view, 3> kPhaseNames = {"forward", "backward", "update"};
constexpr std::array<std::string_view, 6> kDTypeNames = {"f32", "f16", "bf16", "i32", "i64", "u8"};

template <typename E, size_t N>
std::optional<E> from_names(const std::array<std::string_view, N>& names, std::string_view s) {
  for (size_t i = 0; i < N; ++i)
    if (names[i] == s) return static_cast<E>(i);
  return std::nullopt;
}

}  // namespace

std::string_view to_string(OpType t) { return kOpNames[static_cast<size_t>(t)]; }
std::string_view to_string(TensorRole r) { return kRoleNames[static_cast<size_t>(r)]; }
std::string_view to_string(Phase p) { return kPhaseNames[static_cast<size_t>(p)]; }
std::string_view to_string(DType d) { return kDTypeNames[static_cast<size_t>(d)]; }
std::string_view to_string(OptimizerKind k) { return k == OptimizerKind::kSgd ? "sgd" : "adam"; }
std::string_view to_string(Precision p) { return kPrecisionNames[static_cast<size_t>(p)]; }
std::optional<Precision> precision_from_string(std::string_view s) {
  return from_names<Precision>(kPrecisionNames, s);
}
std::string_view to_string(Layout l) { return l == Layout::kNhwc ? "nhwc" : "nchw"; }
std::optional<Layout> layout_from_string(std::string_view s) {
  if (s == "nhwc") return Layout::kNhwc;
  if (s == "nchw") return Layout::kNchw;
  return std::nullopt;
}
DType activation_dtype(Precision p) {
  return p == Precision::kAmpFp16 ? DType::kF16 : p == Precision::kAmpBf16 ? DType::kBF16 : DType::kF32;
}
std::optional<OpType> op_type_from_string(std::string_view s) { return from_names<OpType>(kOpNames, s); }
std::optional<TensorRole> role_from_string(std::string_view s) { return from_names<TensorRole>(kRoleNames, s); }
std::optional<Phase> phase_from_string(std::string_view s) { return from_names<Phase>(kPhaseNames, s); }
std::optional<DType> dtype_from_string(std::string_view s) { return from_names<DType>(kDTypeNames, s); }

uint64_t dtype_size(DType d) {
  switch (d) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
  }
  return 0;
}

Status Graph::validate() const {
  const auto n_tensors = static_cast<TensorId>(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].id != static_cast<TensorId>(i))
      return Status::InvalidArgument(fmt::format("tensor '{}' at index {} has id {}", tensors[i].name, i, tensors[i].id));
  }
  std::vector<OpId> producer(tensors.size(), kNoOp);
  std::vector<bool> available(tensors.size(), false);
  for (const Tensor& t : tensors)
    if (t.persistent() || t.role == TensorRole::kInput) available[static_cast<size_t>(t.id)] = true;
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    if (op.id != static_cast<OpId>(i))
      return Status::InvalidArgument(fmt::format("op '{}' at index {} has id {}", op.name, i, op.id));
    for (TensorId t : op.inputs) {
      if (t < 0 || t >= n_tensors)
        return Status::InvalidArgument(fmt::format("op '{}' reads tensor id {}, which does not exist", op.name, t));
      if (!available[static_cast<size_t>(t)])
        return Status::InvalidArgument(fmt::format(
            "op '{}' reads tensor '{}' before any op produces it (a cycle or wrong order)", op.name, tensors[t].name));
    }
    for (TensorId t : op.outputs) {
      if (t < 0 || t >= n_tensors)
        return Status::InvalidArgument(fmt::format("op '{}' writes tensor id {}, which does not exist", op.name, t));
      const Tensor& tt = tensors[static_cast<size_t>(t)];
      if (tt.persistent()) {
        if (op.phase != Phase::kUpdate)
          return Status::InvalidArgument(fmt::format(
              "op '{}' in phase {} writes persistent tensor '{}' (only update ops may)", op.name,
              to_string(op.phase), tt.name));
        continue;
      }
      if (tt.role == TensorRole::kInput)
        return Status::InvalidArgument(fmt::format("op '{}' writes input tensor '{}'", op.name, tt.name));
      if (producer[static_cast<size_t>(t)] != kNoOp)
        return Status::InvalidArgument(fmt::format("tensor '{}' is produced twice (by '{}' and '{}')", tt.name,
                                                   ops[producer[t]].name, op.name));
      for (TensorId in : op.inputs)
        if (in == t) return Status::InvalidArgument(fmt::format("op '{}' reads its own output '{}'", op.name, tt.name));
      producer[static_cast<size_t>(t)] = op.id;
      available[static_cast<size_t>(t)] = true;
    }
  }
  // Every byte count Ferry derives (peaks, sums, arena sizes) is at most the sum of all tensor
  // bytes; refusing graphs where that sum overflows keeps all later arithmetic exact.
  uint64_t total = 0;
  for (const Tensor& t : tensors) {
    if (__builtin_add_overflow(total, t.bytes, &total) || total > (uint64_t{1} << 62))
      return Status::InvalidArgument(fmt::format(
          "the tensors of this iteration need more than 2^62 bytes in total (at tensor '{}'): sizes too large",
          t.name));
  }
  if (loss != kNoTensor && (loss < 0 || loss >= n_tensors))
    return Status::InvalidArgument(fmt::format("loss tensor id {} does not exist", loss));
  return validate_versions(*this, producer);
}

std::vector<TensorId> Graph::in_place_sources(const Op& op) const {
  std::vector<TensorId> sources(op.outputs.size(), kNoTensor);
  auto shareable = [&](TensorId in, TensorId out) {
    const Tensor& i = tensor(in);
    const Tensor& o = tensor(out);
    return !i.persistent() && !o.persistent() && i.role != TensorRole::kInput && in != out && i.bytes == o.bytes;
  };
  for (size_t k = 0; k < op.outputs.size(); ++k) {
    const TensorId out = op.outputs[k];
    TensorId in = tensor(out).overwrites;
    if (in == kNoTensor && k == 0 && op.inplace_capable && !op.inputs.empty()) in = op.inputs[0];
    if (in == kNoTensor || !shareable(in, out)) continue;
    if (std::find(sources.begin(), sources.begin() + static_cast<std::ptrdiff_t>(k), in) !=
        sources.begin() + static_cast<std::ptrdiff_t>(k))
      continue;  // an earlier output takes this input's buffer
    sources[k] = in;
  }
  return sources;
}

uint64_t Graph::param_count() const {
  uint64_t n = 0;
  for (const Tensor& t : tensors)
    if (t.role == TensorRole::kWeight)
      n += t.shape.empty() ? t.bytes / dtype_size(t.dtype) : static_cast<uint64_t>(t.numel());
  return n;
}

uint64_t Graph::weight_bytes() const {
  uint64_t n = 0;
  for (const Tensor& t : tensors)
    if (t.role == TensorRole::kWeight) n += t.bytes;
  return n;
}

uint64_t Graph::forward_macs() const {
  uint64_t n = 0;
  for (const Op& op : ops)
    if (op.phase == Phase::kForward) n += op.macs;
  return n;
}

uint64_t Graph::total_flops() const {
  uint64_t n = 0;
  for (const Op& op : ops) n += op.flops;
  return n;
}

std::vector<std::string> tensor_classes(const Graph& g) {
  std::vector<std::string> classes(g.tensors.size());
  for (const Op& op : g.ops)
    for (TensorId t : op.outputs)
      if (classes[static_cast<size_t>(t)].empty())
        classes[static_cast<size_t>(t)] = std::string(to_string(op.type)) + "/" + std::string(to_string(g.tensor(t).role));
  for (const Tensor& t : g.tensors)
    if (classes[static_cast<size_t>(t.id)].empty()) classes[static_cast<size_t>(t.id)] = "input/" + std::string(to_string(t.role));
  return classes;
}

}  // namespace ferry
