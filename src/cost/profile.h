// Hardware profiles: what a device, its host link and its SSD can do, as plain data loaded from
// JSON files ("ferry-hardware-profile", version 1) shipped in profiles/.
//
// Design
// - A profile holds the numbers the cost model needs and nothing else: peak FLOP/s per compute
//   dtype, device memory capacity and bandwidth, per-op-class efficiencies for the roofline, the
//   host link per direction (nominal rate x assumed efficiency, latency, whether both directions
//   run at once) and the SSD (read/write bandwidth, latency, queue depth).
// - Link bandwidth is stored as nominal rate and efficiency, not as one effective number, so the
//   assumption behind it stays visible and reviewable next to its source. A measured profile
//   (`ferry profile`) stores the measured rate as nominal with efficiency 1.
// - Every shipped number cites its source in `sources` (JSON path -> citation); the loader keeps
//   them but does not require them, so a profile written by a tool still loads.
// - Loading is strict: unknown keys, missing fields, non-finite, zero or negative rates are
//   InvalidArgument naming the file and the JSON path at fault. Nothing throws out of this API.
//
// Usage:
//   Result<HardwareProfile> p = load_profile("a100-40gb-pcie4");   // or a path to a .json file
//   if (!p.ok()) return p.status();
//   CostModel cost(*p);                                             // cost_model.h
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "graph/graph.h"

namespace ferry {

inline constexpr std::string_view kProfileFormatName = "ferry-hardware-profile";
inline constexpr int kProfileVersion = 1;

// Arithmetic units a kernel can run on. kTf32/kFp16/kBf16 are dense tensor-core (matrix) rates;
// kFp32 is the vector (CUDA core / SIMD) rate. Structured-sparsity rates are never used.
enum class ComputeDType : uint8_t { kFp32, kTf32, kFp16, kBf16 };
inline constexpr size_t kNumComputeDTypes = 4;

// Classes of ops that share a roofline efficiency (see cost_model.h for the OpType mapping).
enum class OpClass : uint8_t {
  kConv,          // convolutions, forward and both backward kernels
  kMatMul,        // linear layers and batched matmuls, forward and backward
  kElementwise,   // relu, gelu, add, dropout, gradient accumulation, and their backward
  kNorm,          // batch norm, layer norm, and their backward
  kPooling,       // max / average / global pooling, and their backward
  kSoftmax,       // softmax and cross-entropy, and their backward
  kEmbedding,     // embedding gather and its scatter-add backward
  kDataMovement,  // concat, split/merge heads: pure copies and transposes
  kOptimizer,     // SGD / Adam parameter updates
  kOther,         // opaque ops of imported traces
};
inline constexpr size_t kNumOpClasses = 10;

// Fraction of a peak an op class reaches: `compute` of the FLOP/s peak, `memory` of the
// device memory bandwidth. All in (0, 1].
// Profiles fitted per precision give a compute efficiency per unit: `compute` is then the fp32
// one and compute_by_unit holds every other unit the device has (validate_profile checks that it
// is all or nothing); JSON writes the pair as "compute": {"fp32": .., "tf32": .., ...}.
struct OpEfficiency {
  double compute = 1.0;
  double memory = 1.0;
  std::array<std::optional<double>, kNumComputeDTypes> compute_by_unit{};  // [fp32] always empty
  double compute_for(ComputeDType u) const { return compute_by_unit[static_cast<size_t>(u)].value_or(compute); }
  bool per_unit() const {
    for (const auto& e : compute_by_unit)
      if (e) return true;
    return false;
  }
  bool operator==(const OpEfficiency&) const = default;
};

// One direction of the host link.
struct LinkDirection {
  double nominal_bytes_per_s = 0;  // the link's raw rate in this direction (after line encoding)
  double efficiency = 1.0;         // achieved / nominal for large pinned copies, in (0, 1]
  double latency_us = 0;           // fixed cost per copy (launch, DMA setup, completion)
  // Compute interference: while a copy in this direction runs, every op runs (1 + this) times
  // slower (copies that share the cores and memory bus with the kernels: the CPU backend's memcpy);
  // 0 for a copy engine that leaves the compute units alone (a GPU's DMA). JSON: optional, 0.
  double compute_interference = 0;
  double effective_bytes_per_s() const { return nominal_bytes_per_s * efficiency; }
  bool operator==(const LinkDirection&) const = default;
};

struct HostLink {
  std::string name;  // "PCIe 4.0 x16"
  LinkDirection host_to_device;
  LinkDirection device_to_host;
  // True when a host->device and a device->host copy can run at the same time at full rate
  // (separate copy engines on a full-duplex link); false when they share one channel.
  bool concurrent_directions = true;
  bool operator==(const HostLink&) const = default;
};

// The SSD that spilled tensors go to; reached through host memory (device -> host -> SSD), or
// straight from device memory where `device_direct` says so.
struct StorageProfile {
  std::string name;
  double read_bytes_per_s = 0;   // sequential, large requests, at queue_depth
  double write_bytes_per_s = 0;
  double read_latency_us = 0;    // per request
  double write_latency_us = 0;
  int32_t queue_depth = 1;       // requests in flight per direction that reach the bandwidth above
  // Compute interference of the disk's data phase (LinkDirection::compute_interference): the CPU
  // time of direct I/O (a virtual disk's is the hypervisor's). JSON: optional, 0.
  double read_compute_interference = 0;
  double write_compute_interference = 0;
  // The SSD tier reads and writes device memory in place, with no device<->host leg: the CPU
  // backend, whose device memory is host memory (runtime/ssd_tier.h, Note [In-place transfers]),
  // or GPUDirect Storage. JSON: optional, false.
  bool device_direct = false;
  bool operator==(const StorageProfile&) const = default;
};

struct HardwareProfile {
  std::string name;         // "a100-40gb-pcie4"; the file stem for shipped profiles
  std::string description;
  std::string notes;        // assumptions, caveats (e.g. "placeholders until `ferry profile` runs")

  // Peak FLOP/s per compute dtype; nullopt where the device has no such unit (V100: no TF32/BF16).
  std::array<std::optional<double>, kNumComputeDTypes> peak_flops{};
  double launch_overhead_us = 0;  // added to every modelled (not measured) op
  std::array<OpEfficiency, kNumOpClasses> efficiency{};
  // The algorithm a vendor library really runs for 3x3 stride-1 convolutions, per unit: the
  // fraction of a direct convolution's multiply-adds it performs (Winograd F(2x2,3x3): 16/36).
  // 1 = direct / implicit GEMM. JSON: compute.conv3x3_flop_fraction {unit: fraction}, optional.
  std::array<double, kNumComputeDTypes> conv3x3_flop_fraction{1.0, 1.0, 1.0, 1.0};

  uint64_t memory_capacity_bytes = 0;
  double memory_bandwidth_bytes_per_s = 0;

  HostLink host_link;
  StorageProfile storage;
  // The host CPU's rate for an optimizer update run on the host (ZeRO-Offload's placement): bytes
  // of update operands streamed per second (each operand read once, each written once; Adam on
  // fp32: 28 bytes per parameter). 0: not known, and the planner runs no update on the host.
  // JSON: host.optimizer_bytes_per_s, optional.
  double host_optimizer_bytes_per_s = 0;

  // JSON path (dotted, e.g. "compute.peak_flops.fp32", or a section "host_link") -> citation.
  std::map<std::string, std::string> sources;

  bool operator==(const HardwareProfile&) const = default;
};

std::string_view to_string(ComputeDType d);
std::string_view to_string(OpClass c);
std::optional<ComputeDType> compute_dtype_from_string(std::string_view s);
std::optional<OpClass> op_class_from_string(std::string_view s);

// Checks every number: FLOP/s and bandwidths (also times their efficiencies) in [1, 1e21] per
// second (fp32 peak required), capacity > 0, efficiencies and flop fractions in (0, 1], per-unit
// efficiencies for exactly the non-fp32 units the device has, latencies and launch overhead in
// [0, 1e9] us, compute interferences in [0, 100], queue depth in [1, 1024], a non-empty name: within these bounds every prediction is
// finite. InvalidArgument names the field by its JSON path.
Status validate_profile(const HardwareProfile& p);

// The compute unit conv and matmul ops of a graph in precision `p` run on: fp32, tf32, fp16, bf16.
ComputeDType matrix_unit(Precision p);
// OK when `profile` has a peak rate for the matrix unit of `precision`; otherwise InvalidArgument
// naming the precision, the missing rate and the profile ("profile 'v100-16gb-sxm2' has no tf32
// rate (compute.peak_flops.tf32): ...").
Status check_precision(const HardwareProfile& profile, Precision precision);

// Parses profile JSON text; `source_name` starts every error message. The result validates.
Result<HardwareProfile> parse_profile(std::string_view json_text, std::string_view source_name);

// Serialises `p` as version-1 JSON (one field per line); parse_profile gives back an equal profile.
std::string to_profile_json(const HardwareProfile& p);

// The directory of named profiles: $FERRY_PROFILES_DIR when set and non-empty, else the source
// tree's profiles/ (compiled in).
std::string profiles_dir();

// Names (file stems) of the *.json files in profiles_dir(), sorted; empty if it cannot be read.
std::vector<std::string> list_profiles();

// A profile file is at most this long (profiles are a few KiB of JSON).
inline constexpr uint64_t kMaxProfileBytes = uint64_t{16} << 20;

// Loads a profile by name (looked up as profiles_dir()/NAME.json) or by path (anything containing
// a '/' or ending in ".json"). Errors: InvalidArgument for an unknown name (the message lists the
// known ones), a path that is not a regular file of at most kMaxProfileBytes (a directory,
// /dev/zero, a FIFO) or a malformed file, or figures whose predictions would not be finite;
// IoError when an existing file cannot be read.
Result<HardwareProfile> load_profile(const std::string& name_or_path);

// Validates `p` and writes to_profile_json(p) to `path`. IoError names the path and the reason.
Status save_profile(const HardwareProfile& p, const std::string& path);

}  // namespace ferry
