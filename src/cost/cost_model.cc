#include "cost/cost_model.h"

#include "codec/choice.h"

#include <algorithm>

namespace ferry {

namespace {

bool is_floating(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }

// The dtype an op computes in: its first floating-point output, else its first floating-point
// input (cross-entropy writes a float loss from float logits; embedding reads int ids), else f32.
DType compute_dtype(const Graph& g, const Op& op) {
  for (TensorId t : op.outputs)
    if (is_floating(g.tensor(t).dtype)) return g.tensor(t).dtype;
  for (TensorId t : op.inputs)
    if (is_floating(g.tensor(t).dtype)) return g.tensor(t).dtype;
  return DType::kF32;
}

LinkCost make_link(double bytes_per_s, double latency_us, double interference) {
  return LinkCost{latency_us, bytes_per_s / 1e6, interference};
}

// The convolutions (forward and both backward kernels) that Winograd-style algorithms apply to:
// dense 3x3 kernels with stride 1.
bool is_conv3x3_stride1(const Op& op) {
  return op_class_of(op.type) == OpClass::kConv && op.attrs.kernel_h == 3 && op.attrs.kernel_w == 3 &&
         op.attrs.stride_h == 1 && op.attrs.stride_w == 1 && op.attrs.groups == 1;
}

}  // namespace

OpClass op_class_of(OpType t) {
  switch (t) {
    case OpType::kConv2d: case OpType::kConvBwdData: case OpType::kConvBwdWeights:
      return OpClass::kConv;
    case OpType::kLinear: case OpType::kMatMul: case OpType::kLinearBwdData: case OpType::kLinearBwdWeights:
      return OpClass::kMatMul;
    case OpType::kRelu: case OpType::kGelu: case OpType::kAdd: case OpType::kDropout: case OpType::kReluBwd:
    case OpType::kGeluBwd: case OpType::kDropoutBwd: case OpType::kGradAccumulate:
      return OpClass::kElementwise;
    case OpType::kBatchNorm: case OpType::kLayerNorm: case OpType::kBatchNormBwd: case OpType::kLayerNormBwd:
      return OpClass::kNorm;
    case OpType::kMaxPool: case OpType::kAvgPool: case OpType::kGlobalAvgPool: case OpType::kMaxPoolBwd:
    case OpType::kAvgPoolBwd: case OpType::kGlobalAvgPoolBwd:
      return OpClass::kPooling;
    case OpType::kSoftmax: case OpType::kSoftmaxBwd: case OpType::kCrossEntropy: case OpType::kCrossEntropyBwd:
      return OpClass::kSoftmax;
    case OpType::kEmbedding: case OpType::kEmbeddingBwd:
      return OpClass::kEmbedding;
    case OpType::kConcat: case OpType::kConcatBwd: case OpType::kSplitHeads: case OpType::kMergeHeads:
      return OpClass::kDataMovement;
    case OpType::kSgdUpdate: case OpType::kAdamUpdate:
      return OpClass::kOptimizer;
    case OpType::kOpaque:
      return OpClass::kOther;
  }
  return OpClass::kOther;
}

std::string_view to_string(Link l) {
  switch (l) {
    case Link::kHostToDevice: return "h2d";
    case Link::kDeviceToHost: return "d2h";
    case Link::kSsdRead: return "ssd_read";
    case Link::kSsdWrite: return "ssd_write";
  }
  return "?";
}

CostModel::CostModel(HardwareProfile profile, CostOptions options)
    : profile_(std::move(profile)), options_(options) {
  const Status valid = validate_profile(profile_);
  FERRY_CHECK(valid.ok(), "CostModel needs a valid profile: {}", valid.message());
  const HostLink& h = profile_.host_link;
  const StorageProfile& s = profile_.storage;
  links_[static_cast<size_t>(Link::kHostToDevice)] =
      make_link(h.host_to_device.effective_bytes_per_s(), h.host_to_device.latency_us,
                h.host_to_device.compute_interference);
  links_[static_cast<size_t>(Link::kDeviceToHost)] =
      make_link(h.device_to_host.effective_bytes_per_s(), h.device_to_host.latency_us,
                h.device_to_host.compute_interference);
  links_[static_cast<size_t>(Link::kSsdRead)] = make_link(s.read_bytes_per_s, s.read_latency_us, s.read_compute_interference);
  links_[static_cast<size_t>(Link::kSsdWrite)] = make_link(s.write_bytes_per_s, s.write_latency_us, s.write_compute_interference);
}

ComputeDType CostModel::compute_unit(OpClass c, DType dtype, bool tf32) const {
  ComputeDType unit = ComputeDType::kFp32;
  if (c == OpClass::kConv || c == OpClass::kMatMul) {
    if (dtype == DType::kF16) unit = ComputeDType::kFp16;
    else if (dtype == DType::kBF16) unit = ComputeDType::kBf16;
    else if (dtype == DType::kF32 && tf32) unit = ComputeDType::kTf32;
  }
  return profile_.peak_flops[static_cast<size_t>(unit)] ? unit : ComputeDType::kFp32;
}

double CostModel::peak_flops(ComputeDType unit) const {
  const std::optional<double>& p = profile_.peak_flops[static_cast<size_t>(unit)];
  return p ? *p : *profile_.peak_flops[static_cast<size_t>(ComputeDType::kFp32)];
}

OpCost CostModel::op_cost(const Graph& g, const Op& op) const {
  OpCost c;
  c.op_class = op_class_of(op.type);
  if (options_.use_measured_times && op.time_us) {
    c.measured = true;
    c.total_us = *op.time_us;
    return c;
  }
  const OpEfficiency& eff = profile_.efficiency[static_cast<size_t>(c.op_class)];
  c.unit = compute_unit(c.op_class, compute_dtype(g, op), options_.allow_tf32 || g.info.precision == Precision::kTf32);
  if (is_conv3x3_stride1(op)) c.flop_fraction = profile_.conv3x3_flop_fraction[static_cast<size_t>(c.unit)];
  c.compute_us = c.flop_fraction * static_cast<double>(op.flops) / (peak_flops(c.unit) * eff.compute_for(c.unit)) * 1e6;
  c.memory_us = static_cast<double>(op.bytes_read + op.bytes_written) /
                (profile_.memory_bandwidth_bytes_per_s * eff.memory) * 1e6;
  c.overhead_us = profile_.launch_overhead_us;
  if (g.info.layout == Layout::kNchw && c.op_class == OpClass::kConv &&
      (c.unit == ComputeDType::kFp16 || c.unit == ComputeDType::kBf16)) {
    const OpEfficiency& move = profile_.efficiency[static_cast<size_t>(OpClass::kDataMovement)];
    c.layout_us = 2 * static_cast<double>(op.bytes_read + op.bytes_written) /
                      (profile_.memory_bandwidth_bytes_per_s * move.memory) * 1e6 +
                  2 * profile_.launch_overhead_us;
  }
  c.total_us = c.overhead_us + std::max(c.compute_us, c.memory_us) + c.layout_us;
  return c;
}

std::optional<double> CostModel::host_update_us(const Graph& g, const Op& op) const {
  if (profile_.host_optimizer_bytes_per_s <= 0) return std::nullopt;
  double bytes = 0;
  for (TensorId t : op.inputs) bytes += static_cast<double>(g.tensor(t).bytes);
  for (TensorId t : op.outputs) bytes += static_cast<double>(g.tensor(t).bytes);
  return bytes / profile_.host_optimizer_bytes_per_s * 1e6;
}

std::vector<double> CostModel::op_times_us(const Graph& g) const {
  std::vector<double> out(g.ops.size());
  for (const Op& op : g.ops) out[static_cast<size_t>(op.id)] = op_time_us(g, op);
  return out;
}

double CostModel::transfer_us(Direction d, Tier tier, uint64_t bytes) const {
  return transfer_us(d, tier, bytes, CodecId::kNone, {});
}

double CostModel::transfer_us(Direction d, Tier tier, uint64_t bytes, CodecId codec,
                              std::string_view tensor_class) const {
  const double host_leg = link(d == Direction::kSwapOut ? Link::kDeviceToHost : Link::kHostToDevice).time_us(bytes);
  if (tier == Tier::kHost) return host_leg;
  const LinkCost ssd = link(d == Direction::kSwapOut ? Link::kSsdWrite : Link::kSsdRead);
  // In place only raw: a coded copy is encoded from, or decoded into, a staging buffer.
  if (ssd_direct() && codec == CodecId::kNone && bytes >= kDirectIoMinBytes)
    return ssd.latency_us + ssd_data_us(d, bytes, codec, tensor_class);
  return host_leg + ssd.latency_us + ssd_data_us(d, bytes, codec, tensor_class);
}

double CostModel::interference_us(Direction d, Tier tier, uint64_t bytes, CodecId codec,
                                  std::string_view tensor_class) const {
  // An op beside a copy of t us does t / (1 + f) us of its work meanwhile: it ends t f / (1 + f) later.
  auto added = [](double f, double t) { return t * f / (1 + f); };
  const LinkCost host = link(d == Direction::kSwapOut ? Link::kDeviceToHost : Link::kHostToDevice);
  const bool in_place = tier == Tier::kSsd && ssd_direct() && codec == CodecId::kNone && bytes >= kDirectIoMinBytes;
  double us = in_place ? 0 : added(host.interference, host.time_us(bytes));
  if (tier == Tier::kSsd)
    us += added(link(d == Direction::kSwapOut ? Link::kSsdWrite : Link::kSsdRead).interference,
                ssd_data_us(d, bytes, codec, tensor_class));
  return us;
}

bool CostModel::has_interference() const {
  for (const LinkCost& l : links_)
    if (l.interference > 0) return true;
  return false;
}

std::optional<CodecEstimate> CostModel::codec_estimate(std::string_view tensor_class, CodecId codec) const {
  if (codec == CodecId::kNone) return std::nullopt;
  for (const CodecFigure& f : options_.codecs)
    if (f.codec == codec && f.tensor_class == tensor_class) return f.estimate;
  return std::nullopt;
}

double CostModel::ssd_data_us(Direction d, uint64_t bytes, CodecId codec, std::string_view tensor_class) const {
  const LinkCost ssd = link(d == Direction::kSwapOut ? Link::kSsdWrite : Link::kSsdRead);
  const std::optional<CodecEstimate> e = codec_estimate(tensor_class, codec);
  if (!e) return ssd.data_us(bytes);
  const TransferPrediction p = predict_transfer(d, bytes, codec, *e, ssd.bytes_per_us * 1e6);
  return p.total_seconds * 1e6;
}

CodecId CostModel::best_ssd_codec(uint64_t bytes, std::string_view tensor_class) const {
  std::vector<CodecCandidate> candidates;
  for (const CodecFigure& f : options_.codecs)
    if (f.tensor_class == tensor_class && !is_lossy(f.codec)) candidates.push_back({f.codec, f.estimate});
  if (candidates.empty() || bytes == 0) return CodecId::kNone;
  const WireRates wire{.swap_out_bytes_per_s = link(Link::kSsdWrite).bytes_per_us * 1e6,
                       .swap_in_bytes_per_s = link(Link::kSsdRead).bytes_per_us * 1e6};
  const CodecId best = choose_codec(bytes, candidates, wire).codec;
  if (best == CodecId::kNone || !ssd_direct()) return best;
  // In place, raw crosses no host leg and a coded copy still does: the codec must beat raw by
  // more than 5% over the whole round trip, that leg and its compute interference included.
  auto round_trip = [&](CodecId c) {
    double us = 0;
    for (Direction d : {Direction::kSwapOut, Direction::kSwapIn})
      us += transfer_us(d, Tier::kSsd, bytes, c, tensor_class) + interference_us(d, Tier::kSsd, bytes, c, tensor_class);
    return us;
  };
  return round_trip(best) * 1.05 < round_trip(CodecId::kNone) ? best : CodecId::kNone;
}

double CostModel::min_codec_ratio() const {
  double r = 1;
  for (const CodecFigure& f : options_.codecs) r = std::min(r, f.estimate.ratio);
  return r;
}

}  // namespace ferry
