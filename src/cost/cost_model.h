// CostModel: how long an op or a transfer takes on a hardware profile (the seed design's
// performance analysis; the formulas and their rationale are in docs/cost-model.md).
//
// Ops
// - A measured time wins: when Op::time_us is set (profiler, imported trace) and
//   CostOptions::use_measured_times, that is the op's time, with nothing added.
// - Otherwise a roofline per op class c and compute unit u:
//       t = launch_overhead_us + max(f * flops / (peak_flops(u) * eff[c].compute(u)),
//                                    (bytes_read + bytes_written) / (mem_bw * eff[c].memory))
//   u is the tensor-core rate for conv/matmul in fp16/bf16 (and tf32 for fp32 when the graph's
//   precision is tf32 or CostOptions::allow_tf32), the vector fp32 rate for everything else; a
//   dtype the device lacks falls back to fp32 (check_precision() in profile.h turns that into an
//   error for a whole graph up front). f is the profile's conv3x3_flop_fraction[u] for 3x3
//   stride-1 convolutions (the fewer multiplies of Winograd), else 1.
// - Layout: tensor-core convolutions read NHWC. In an NCHW graph (GraphInfo::layout) each
//   convolution kernel on the fp16/bf16 unit is wrapped in transposes, each reading and writing
//   its tensor once: layout_us = 2 x (bytes_read + bytes_written) / (mem_bw x
//   eff[data_movement].memory) + 2 launches, added to t. TF32 and fp32 kernels run NCHW natively.
//
// Transfers
// - A copy over one link costs latency + bytes / effective bandwidth. The device reaches the
//   SSD through host memory, so device->SSD is device->host then host->SSD, store and forward
//   (transfer_us sums the legs; the simulator schedules the legs on their own queues), except
//   where the profile's storage is device_direct: then the SSD leg is the whole path of a raw
//   copy of at least kDirectIoMinBytes (a coded one still crosses host memory, where it is encoded
//   or decoded, and a smaller one is not page-aligned on the device).
// - Where copies share the cores and the memory bus with the kernels (the CPU backend), a link's
//   compute interference f says that ops run (1 + f) times slower while it moves data; the
//   simulator stretches every op by what overlaps it (docs/cost-model.md, "Compute interference").
//
// Codecs (SSD tier)
// - With measured codec figures (CostOptions::codecs: ratio and encode/decode rates per class of
//   tensor, codec/stats.h), the SSD leg of a tensor coded with a codec is predicted as the
//   chunk-by-chunk pipeline of the codec and the disk moving ratio x bytes (Note [Pipelined codec
//   time] in codec/choice.h); the device<->host leg moves the raw bytes. best_ssd_codec() picks a
//   tensor's codec as the SSD tier would be told to: the shortest predicted round trip, by more
//   than 5%, else raw. A codec without a figure for the tensor's class is predicted as raw.
//
// The model is immutable after construction and cheap to copy; all queries are const and O(1)
// (op_cost is O(op inputs + outputs) for the dtype lookup; the codec queries scan the codec figures,
// a few per class of tensor).
#pragma once

#include <array>
#include <optional>
#include <cstdint>
#include <string_view>
#include <vector>

#include "codec/codec.h"
#include "codec/stats.h"
#include "common/transfer.h"
#include "cost/profile.h"
#include "graph/graph.h"

namespace ferry {

// The class whose efficiency applies to an op type (profile.h lists the classes).
OpClass op_class_of(OpType t);

// Hardware channels a copy occupies.
enum class Link : uint8_t { kHostToDevice, kDeviceToHost, kSsdRead, kSsdWrite };
inline constexpr size_t kNumLinks = 4;
// "h2d", "d2h", "ssd_read", "ssd_write": the names of the simulator's copy streams and the
// profiler's measured paths.
std::string_view to_string(Link l);

// Time of one request on a link: latency_us + bytes / bytes_per_us.
struct LinkCost {
  double latency_us = 0;
  double bytes_per_us = 0;  // effective bandwidth
  double interference = 0;  // ops run (1 + this) times slower while the link moves data (profile.h)
  double data_us(uint64_t bytes) const { return static_cast<double>(bytes) / bytes_per_us; }
  double time_us(uint64_t bytes) const { return latency_us + data_us(bytes); }
};

struct CostOptions {
  bool use_measured_times = true;  // use Op::time_us when present
  bool allow_tf32 = false;         // fp32 conv/matmul run on TF32 tensor cores (PyTorch allow_tf32)
  // Measured codec figures per class of tensor (graph.h tensor_classes; loop/figures.h measures
  // them): coded SSD transfers are predicted with them. Empty: codecs are predicted as raw.
  std::vector<CodecFigure> codecs{};
};

// The modelled time of one op and where it came from.
struct OpCost {
  double total_us = 0;
  bool measured = false;      // total_us is Op::time_us; the fields below are then 0
  OpClass op_class = OpClass::kOther;
  ComputeDType unit = ComputeDType::kFp32;  // the peak used
  double flop_fraction = 1;   // of op.flops the chosen algorithm performs (Winograd 3x3 < 1)
  double compute_us = 0;      // flop_fraction * flops / achievable FLOP/s
  double memory_us = 0;       // bytes / achievable bandwidth
  double overhead_us = 0;     // launch overhead
  // 16-bit convolutions of an NCHW graph: the transposes of the operands in and the result out
  // (part of total_us; 0 otherwise).
  double layout_us = 0;
  bool compute_bound() const { return compute_us >= memory_us; }
};

class CostModel {
 public:
  // `profile` must validate (load_profile and parse_profile guarantee it); FERRY_CHECKs otherwise.
  explicit CostModel(HardwareProfile profile, CostOptions options = {});

  const HardwareProfile& profile() const { return profile_; }
  const CostOptions& options() const { return options_; }

  // Time of `op` (an op of `g`) and its breakdown.
  OpCost op_cost(const Graph& g, const Op& op) const;
  double op_time_us(const Graph& g, const Op& op) const { return op_cost(g, op).total_us; }
  // op_time_us of every op, indexed by OpId.
  std::vector<double> op_times_us(const Graph& g) const;

  // The unit (and so the FLOP/s peak, before efficiency) an op of class `c` computing in `dtype`
  // runs on; `tf32`: fp32 conv/matmul run on TF32 tensor cores.
  ComputeDType compute_unit(OpClass c, DType dtype, bool tf32) const;
  ComputeDType compute_unit(OpClass c, DType dtype) const { return compute_unit(c, dtype, options_.allow_tf32); }
  double peak_flops(ComputeDType unit) const;

  LinkCost link(Link l) const { return links_[static_cast<size_t>(l)]; }
  // Time of one swap of `bytes` between the device and `tier`: latency + bytes / bandwidth summed
  // over the path's legs (the SSD is reached through host memory, store and forward).
  double transfer_us(Direction d, Tier tier, uint64_t bytes) const;
  // The same for a tensor of class `tensor_class` whose SSD copy is coded with `codec`.
  double transfer_us(Direction d, Tier tier, uint64_t bytes, CodecId codec, std::string_view tensor_class) const;
  // The compute time such a swap adds when it runs beside the kernels: per leg of t us (the SSD
  // leg's data phase) on a link of interference f, t f / (1 + f) (the op beside it does t / (1 + f)
  // of its work meanwhile; always less than the t a stall for it would cost). 0 without interference.
  double interference_us(Direction d, Tier tier, uint64_t bytes, CodecId codec = CodecId::kNone,
                         std::string_view tensor_class = {}) const;
  // Whether any link slows compute (LinkCost::interference > 0).
  bool has_interference() const;
  // The data phase of the SSD leg (no latency) of `bytes` coded with `codec`: the pipelined time of
  // the codec and the disk (the disk's bytes / bandwidth for kNone or a codec without a figure).
  double ssd_data_us(Direction d, uint64_t bytes, CodecId codec, std::string_view tensor_class) const;
  // The figure of `codec` on `tensor_class`, or nullopt (always for kNone).
  std::optional<CodecEstimate> codec_estimate(std::string_view tensor_class, CodecId codec) const;
  bool has_codec_figures() const { return !options_.codecs.empty(); }
  // The lossless codec predicted fastest for the SSD round trip of a tensor of `bytes` of
  // `tensor_class` (choose_codec over the class's figures and the SSD links' rates; a codec must
  // beat raw by more than 5%): kNone without figures.
  CodecId best_ssd_codec(uint64_t bytes, std::string_view tensor_class) const;
  // The smallest ratio over every codec figure, 1 without any: no coded SSD transfer moves fewer
  // disk bytes than this fraction of its tensor (what a lower bound may assume).
  double min_codec_ratio() const;
  // Time of update op `op` (sgd_update, adam_update) of `g` run on the host CPU (a kHostUpdate):
  // its operands' bytes, each input read and each output written once, at the profile's
  // host.optimizer_bytes_per_s. nullopt when the profile has no host rate.
  std::optional<double> host_update_us(const Graph& g, const Op& op) const;
  // Whether an SSD swap has no device<->host leg (StorageProfile::device_direct).
  bool ssd_direct() const { return profile_.storage.device_direct; }
  // Whether a host->device and a device->host copy can run at the same time.
  bool copy_directions_concurrent() const { return profile_.host_link.concurrent_directions; }

 private:
  HardwareProfile profile_;
  CostOptions options_;
  std::array<LinkCost, kNumLinks> links_{};
};

}  // namespace ferry
