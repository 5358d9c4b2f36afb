// The backend interface: device memory, copies, and a graph compiled into kernels.
//
// Design
// - Device-neutral. Everything above the backend sees device memory only as DevicePtr values
//   (backend/device_ptr.h) and never dereferences them; a CUDA backend can implement the same
//   interface. Host memory appears only as std::span<std::byte> on the host side of a copy or a
//   layout conversion.
// - compile() turns a Graph into a CompiledGraph: one kernel per op with its layouts decided and
//   its scratch counted. The executor owns all memory: it places every tensor and every op's
//   scratch (following its own plan) and passes the addresses to run(). Kernels never allocate.
// - Sizes are the backend's, not the graph's: a tensor stored in a blocked layout (oneDNN
//   nChw16c with channels padded to 16) takes more than numel * dtype bytes, and an op's scratch
//   is everything its kernel touches besides its inputs and outputs (library scratchpad,
//   reorder buffers). Feeding tensor_bytes() and scratch_bytes() into the analysis makes the
//   predicted peak equal the measured one. See Note [Layouts] in cpu/cpu_backend.cc.
// - Layouts are private to the backend. to_plain/from_plain convert one tensor between its
//   device layout and the plain row-major layout of its logical shape, for initialisation, data
//   loading, checking and checkpoints.
//
// Usage:
//   Result<std::unique_ptr<Backend>> be = make_backend("cpu");
//   Result<std::unique_ptr<CompiledGraph>> cg = (*be)->compile(graph);
//   for each tensor t: bytes = (*cg)->tensor_bytes(t)          // place it in the arena
//   (*cg)->from_plain(w, host_bytes, w_ptr);                    // weights, optimizer state
//   (*cg)->run(op, input_ptrs, output_ptrs, scratch_ptr, RunContext{...});
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/device_ptr.h"
#include "common/status.h"
#include "graph/graph.h"

namespace ferry {

// How a backend implements convolutions. Every choice is deterministic for a given thread count;
// they differ in speed, scratch and rounding.
// - kDirect: direct convolution (the arithmetic of the definition).
// - kWinograd: Winograd F(4x4, 3x3) wherever the backend has it (3x3, stride 1, no dilation or
//   groups), direct elsewhere. About 2x fewer cycles on ResNet's 3x3 layers, at the price of
//   several MiB of scratch per op and about 4x direct's rounding error (max |err| / max |y| of
//   1.7e-6 instead of 3.8e-7 on a 64-channel 28x28 layer).
// - kAuto: Winograd where it is measured to pay off (see the backend), direct elsewhere.
enum class ConvAlgorithm { kAuto, kDirect, kWinograd };
std::string_view to_string(ConvAlgorithm a);
// "auto", "direct" or "winograd"; InvalidArgument lists them otherwise.
Result<ConvAlgorithm> parse_conv_algorithm(std::string_view s);

// Choices a backend makes when it compiles a graph.
struct BackendOptions {
  ConvAlgorithm conv_algorithm = ConvAlgorithm::kAuto;
};

// Per-call parameters of run() that change from iteration to iteration.
struct RunContext {
  int64_t iteration = 0;       // 0-based training iteration; selects the dropout masks
  int64_t optimizer_step = 1;  // 1-based count of optimizer updates including this one (Adam)
  uint64_t dropout_seed = 0;   // with iteration and op id, determines every dropout mask
};

// A graph compiled for one backend. Not copyable. run() calls must come from one thread at a
// time; to_plain/from_plain may run concurrently with run() on memory that run() does not touch.
class CompiledGraph {
 public:
  virtual ~CompiledGraph() = default;

  virtual size_t num_tensors() const = 0;
  virtual size_t num_ops() const = 0;
  // Bytes tensor `t` occupies in device memory in the backend's layout (>= numel * dtype size).
  virtual uint64_t tensor_bytes(TensorId t) const = 0;
  // Bytes of scratch op `op` needs during run(); 0 means run() accepts a null scratch pointer.
  virtual uint64_t scratch_bytes(OpId op) const = 0;
  // Human-readable layout of tensor `t` in oneDNN tag notation ("abcd", "aBcd16b") or another
  // backend's; for logs and tests only.
  virtual std::string layout(TensorId t) const = 0;
  // The implementation that runs op `op` ("jit_wino_4x3:avx512_core", "hand-written"); for
  // profiles, logs and tests only.
  virtual std::string implementation(OpId op) const = 0;

  // tensor_bytes() of every tensor, indexed by TensorId.
  std::vector<uint64_t> all_tensor_bytes() const;
  // scratch_bytes() of every op, indexed by OpId (the form AnalysisOptions::op_scratch_bytes takes).
  std::vector<uint64_t> all_scratch_bytes() const;

  // Runs op `op`. inputs[i] / outputs[i] hold the tensors op.inputs[i] / op.outputs[i], each
  // tensor_bytes() long; `scratch` holds scratch_bytes(op) bytes whose content is undefined on
  // entry and garbage on exit. outputs[0] may equal inputs[0] for in-place capable ops. Errors:
  // InvalidArgument for wrong argument counts or bad data (a label out of range), Internal for
  // a library failure.
  virtual Status run(OpId op, std::span<const DevicePtr> inputs, std::span<const DevicePtr> outputs, DevicePtr scratch,
                     const RunContext& ctx) = 0;

  // Converts tensor `t` at `src` (device layout) to plain row-major host bytes; `dst` must be
  // exactly numel * dtype size bytes.
  virtual Status to_plain(TensorId t, DevicePtr src, std::span<std::byte> dst) = 0;
  // Writes plain row-major host bytes `src` (numel * dtype size) to tensor `t` at `dst` in its
  // device layout, including any padding of the layout (zeroed).
  virtual Status from_plain(TensorId t, std::span<const std::byte> src, DevicePtr dst) = 0;
  // The same two conversions between host buffers: `layout` holds the tensor's bytes as device
  // memory holds them (tensor_bytes(t) long), which is what a swap tier stores. For tensors that
  // live in a tier (offloaded weights and optimizer state): initialisation and checks.
  virtual Status layout_to_plain(TensorId t, std::span<const std::byte> layout, std::span<std::byte> plain) = 0;
  virtual Status plain_to_layout(TensorId t, std::span<const std::byte> plain, std::span<std::byte> layout) = 0;
};

// A device: its memory, copies between host and device, and graph compilation.
class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;
  // Compiles `graph` (which must validate). Errors: InvalidArgument for a graph whose ops lack
  // the attributes or shapes a kernel needs, Unsupported for op types or dtypes with no kernel.
  virtual Result<std::unique_ptr<CompiledGraph>> compile(const Graph& graph) = 0;

  // Allocates one region of device memory (an arena the executor carves up), aligned to at least
  // kDeviceAlignment, and to kDirectIoAlignment (a page) when `bytes` is a multiple of it. Bytes
  // past the region's end (rounded up to kDeviceAlignment) are not
  // accessible: a kernel that writes there faults with a message naming the op running (the CPU
  // backend maps guard pages; common/fault_guard.h). OutOfMemory names the size.
  virtual Result<DevicePtr> allocate(uint64_t bytes) = 0;
  // Releases a region returned by allocate(). A null pointer is ignored.
  virtual void free(DevicePtr region) = 0;

  // Copies. They are complete when synchronize() returns (the CPU backend completes them before
  // returning).
  virtual Status copy_to_device(DevicePtr dst, std::span<const std::byte> src) = 0;
  virtual Status copy_to_host(std::span<std::byte> dst, DevicePtr src) = 0;
  virtual Status copy_on_device(DevicePtr dst, DevicePtr src, uint64_t bytes) = 0;
  // Sets `bytes` bytes at `dst` to `value` (cudaMemset): poison patterns for memory checks.
  virtual Status fill(DevicePtr dst, uint64_t bytes, uint8_t value) = 0;
  // Waits for all copies and kernels issued so far.
  virtual Status synchronize() = 0;
  // Where device memory is also host memory (the CPU backend), the host address of `p`, for I/O
  // that the kernel does in place (the SSD tier's direct I/O, runtime/ssd_tier.h); null where it is
  // not (a GPU without GPUDirect Storage), and then every such transfer goes through host staging.
  virtual std::byte* direct_io_address(DevicePtr /*p*/) { return nullptr; }

  static constexpr uint64_t kDeviceAlignment = 64;
};

// The backend named `name` ("cpu"), compiling with `options`. InvalidArgument lists the known
// names.
Result<std::unique_ptr<Backend>> make_backend(std::string_view name, const BackendOptions& options = {});

// `g` with every tensor's bytes as `compiled` (a compilation of `g`) lays it out: the sizes plans
// must be made for.
Graph with_backend_sizes(const Graph& g, const CompiledGraph& compiled);

}  // namespace ferry
