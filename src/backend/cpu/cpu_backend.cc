// CPU backend and its CompiledGraph: layout assignment, kernel creation, run dispatch, layout
// conversion for the host.
//
// Note [Layouts]
//   oneDNN runs convolutions about twice as fast on blocked layouts (nChw16c: channels in blocks
//   of 16, padded with zeros) as on plain NCHW, so layouts are chosen per tensor at compile time,
//   walking the ops in execution order:
//   - data inputs are plain row-major (the loader writes them directly);
//   - a tensor produced by an op gets the layout its producer's kernel prefers (a convolution
//     asks oneDNN with format_tag::any; eltwise, batch norm and pooling keep their input's
//     layout; hand-written kernels produce plain row-major);
//   - a weight gets the layout its first forward consumer prefers; optimizer state follows its
//     weight (the update kernel is element-wise over identical layouts);
//   - a gradient (grad_of set) gets exactly the layout of the tensor it is the gradient of, so
//     that grad_accumulate, in-place reuse and the optimizer see identical byte sizes.
//   When a kernel wants an argument in another layout (convolution backward-data asks for other
//   weight blocking than forward; linear reads a blocked feature map as a plain matrix), the
//   kernel stages it through scratch it counts (kernel.h). Padding of blocked layouts is always
//   zero: oneDNN primitives write it, from_plain zeroes it, and element-wise kernels preserve it.
#include "backend/cpu/cpu_backend.h"

#include <omp.h>

#include <cstring>
#include <map>

#include <fmt/format.h>

#include "backend/cpu/dnnl_util.h"
#include "backend/cpu/kernel.h"
#include "common/host_region.h"

namespace ferry {
namespace cpu {
namespace {

class CpuCompiledGraph final : public CompiledGraph {
 public:
  CpuCompiledGraph(const Graph& g, const dnnl::engine& engine, const BackendOptions& options)
      : tensors_(g.tensors), engine_(engine), stream_(engine), options_(options) {}

  // Decides layouts and builds kernels (see Note [Layouts]). Throws; compile() guards it.
  void build(const Graph& g) {
    std::vector<std::optional<Md>> layout(g.tensors.size());
    for (const Tensor& t : g.tensors)
      if (t.role == TensorRole::kInput) layout[static_cast<size_t>(t.id)] = plain_md(t);
    kernels_.reserve(g.ops.size());
    for (const Op& op : g.ops) {
      OpSetup setup{g, op, engine_, options_, {}, {}};
      for (TensorId t : op.inputs) setup.in.push_back(layout[static_cast<size_t>(t)]);
      for (TensorId t : op.outputs) {
        const Tensor& tt = g.tensor(t);
        std::optional<Md> md = layout[static_cast<size_t>(t)];
        if (!md && tt.grad_of != kNoTensor && layout[static_cast<size_t>(tt.grad_of)])
          md = retype(*layout[static_cast<size_t>(tt.grad_of)], dnnl_type(tt.dtype, tt.name));
        setup.out.push_back(md);
      }
      std::unique_ptr<Kernel> k;
      Status st = dnnl_guard(fmt::format("compiling op '{}' ({})", op.name, to_string(op.type)),
                             [&] { k = make_kernel(setup); });
      if (!st.ok()) throw StatusError{st};
      auto record = [&](TensorId t, const Md& md) {
        std::optional<Md>& slot = layout[static_cast<size_t>(t)];
        const Tensor& tt = g.tensor(t);
        if (md_numel(md) != tt.numel() || md.data_type() != dnnl_type(tt.dtype, tt.name))
          throw StatusError{Status::Internal(
              fmt::format("op '{}' stores tensor '{}' ({} elements of {}) with {} elements of dnnl type {}", op.name,
                          tt.name, tt.numel(), to_string(tt.dtype), md_numel(md), static_cast<int>(md.data_type())))};
        if (!slot) slot = md;
        FERRY_CHECK(*slot == md, "op '{}' disagrees on the layout of tensor '{}'", op.name, tt.name);
      };
      for (size_t i = 0; i < op.inputs.size(); ++i) record(op.inputs[i], k->input_layout(i));
      for (size_t i = 0; i < op.outputs.size(); ++i) record(op.outputs[i], k->output_layout(i));
      kernels_.push_back(std::move(k));
    }
    layouts_.resize(g.tensors.size());
    for (size_t i = 0; i < g.tensors.size(); ++i) {
      if (layout[i]) {
        layouts_[i] = *layout[i];
      } else if (g.tensors[i].dtype != DType::kI64) {
        layouts_[i] = plain_md(g.tensors[i]);  // never touched by an op
      }
    }
  }

  size_t num_tensors() const override { return tensors_.size(); }
  size_t num_ops() const override { return kernels_.size(); }

  uint64_t tensor_bytes(TensorId t) const override {
    FERRY_CHECK(t >= 0 && static_cast<size_t>(t) < tensors_.size(), "tensor id {}", t);
    const Md& md = layouts_[static_cast<size_t>(t)];
    return is_zero(md) ? tensors_[static_cast<size_t>(t)].bytes : md.get_size();
  }

  uint64_t scratch_bytes(OpId op) const override {
    FERRY_CHECK(op >= 0 && static_cast<size_t>(op) < kernels_.size(), "op id {}", op);
    return kernels_[static_cast<size_t>(op)]->scratch_bytes();
  }

  std::string layout(TensorId t) const override {
    FERRY_CHECK(t >= 0 && static_cast<size_t>(t) < tensors_.size(), "tensor id {}", t);
    const Md& md = layouts_[static_cast<size_t>(t)];
    return is_zero(md) ? "plain" : layout_name(md);
  }

  std::string implementation(OpId op) const override {
    FERRY_CHECK(op >= 0 && static_cast<size_t>(op) < kernels_.size(), "op id {}", op);
    return kernels_[static_cast<size_t>(op)]->implementation();
  }

  Status run(OpId op, std::span<const DevicePtr> inputs, std::span<const DevicePtr> outputs, DevicePtr scratch,
             const RunContext& ctx) override {
    if (op < 0 || static_cast<size_t>(op) >= kernels_.size())
      return Status::InvalidArgument(fmt::format("run: op id {} out of range (graph has {} ops)", op, kernels_.size()));
    const Kernel& k = *kernels_[static_cast<size_t>(op)];
    if (inputs.size() != k.num_inputs() || outputs.size() != k.num_outputs())
      return Status::InvalidArgument(fmt::format("run: op '{}' takes {} inputs and {} outputs, got {} and {}",
                                                 k.op_name(), k.num_inputs(), k.num_outputs(), inputs.size(),
                                                 outputs.size()));
    std::vector<void*> in(inputs.size()), out(outputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i]) return Status::InvalidArgument(fmt::format("run: op '{}' input {} is null", k.op_name(), i));
      in[i] = host_address(inputs[i]);
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (!outputs[i]) return Status::InvalidArgument(fmt::format("run: op '{}' output {} is null", k.op_name(), i));
      out[i] = host_address(outputs[i]);
    }
    if (!scratch && k.scratch_bytes() > 0)
      return Status::InvalidArgument(
          fmt::format("run: op '{}' needs {} bytes of scratch, got none", k.op_name(), k.scratch_bytes()));
    return k.run(in, out, host_address(scratch), ctx, stream_);
  }

  Status to_plain(TensorId t, DevicePtr src, std::span<std::byte> dst) override {
    return convert_to_plain(t, host_address(src), dst);
  }
  Status from_plain(TensorId t, std::span<const std::byte> src, DevicePtr dst) override {
    return convert_from_plain(t, src, host_address(dst));
  }
  Status layout_to_plain(TensorId t, std::span<const std::byte> layout, std::span<std::byte> plain) override {
    FERRY_RETURN_IF_ERROR(check_layout_size(t, layout.size(), "layout_to_plain"));
    return convert_to_plain(t, const_cast<std::byte*>(layout.data()), plain);
  }
  Status plain_to_layout(TensorId t, std::span<const std::byte> plain, std::span<std::byte> layout) override {
    FERRY_RETURN_IF_ERROR(check_layout_size(t, layout.size(), "plain_to_layout"));
    return convert_from_plain(t, plain, layout.data());
  }

 private:
  // Device memory is host memory here: the conversions work on plain pointers.
  Status convert_to_plain(TensorId t, void* src, std::span<std::byte> dst) {
    FERRY_RETURN_IF_ERROR(check_plain_size(t, dst.size(), "to_plain"));
    const Md& md = layouts_[static_cast<size_t>(t)];
    return dnnl_guard(fmt::format("to_plain of tensor '{}'", tensors_[static_cast<size_t>(t)].name), [&] {
      if (is_zero(md) || is_plain(md)) {
        std::memcpy(dst.data(), src, dst.size());
      } else {
        reorder(md, src, plain_like(md), dst.data());
      }
    });
  }

  Status convert_from_plain(TensorId t, std::span<const std::byte> src, void* dst) {
    FERRY_RETURN_IF_ERROR(check_plain_size(t, src.size(), "from_plain"));
    const Md& md = layouts_[static_cast<size_t>(t)];
    return dnnl_guard(fmt::format("from_plain of tensor '{}'", tensors_[static_cast<size_t>(t)].name), [&] {
      if (is_zero(md) || is_plain(md)) {
        std::memcpy(dst, src.data(), src.size());
        return;
      }
      if (md.get_size() > src.size()) std::memset(dst, 0, md.get_size());  // zero the padding
      reorder(plain_like(md), const_cast<std::byte*>(src.data()), md, dst);
    });
  }

  Status check_layout_size(TensorId t, size_t bytes, std::string_view what) const {
    if (t < 0 || static_cast<size_t>(t) >= tensors_.size())
      return Status::InvalidArgument(fmt::format("{}: tensor id {} out of range ({} tensors)", what, t, tensors_.size()));
    if (bytes != tensor_bytes(t))
      return Status::InvalidArgument(fmt::format("{}: tensor '{}' has {} bytes in its layout, buffer has {}", what,
                                                 tensors_[static_cast<size_t>(t)].name, tensor_bytes(t), bytes));
    return Status::Ok();
  }

  Status check_plain_size(TensorId t, size_t bytes, std::string_view what) const {
    if (t < 0 || static_cast<size_t>(t) >= tensors_.size())
      return Status::InvalidArgument(
          fmt::format("{}: tensor id {} out of range ({} tensors)", what, t, tensors_.size()));
    const Tensor& tt = tensors_[static_cast<size_t>(t)];
    uint64_t want = static_cast<uint64_t>(tt.numel()) * dtype_size(tt.dtype);
    if (bytes != want)
      return Status::InvalidArgument(fmt::format("{}: tensor '{}' has {} plain bytes ({} x {}), host buffer has {}",
                                                 what, tt.name, want, tt.numel(), to_string(tt.dtype), bytes));
    return Status::Ok();
  }

  // A one-off reorder outside any op: its own stream (it may run concurrently with run()) and
  // oneDNN's own scratchpad (conversions happen outside training steps and are not planned).
  void reorder(const Md& from_md, void* from, const Md& to_md, void* to) const {
    dnnl::stream s(engine_);
    dnnl::memory src_mem(from_md, engine_, from), dst_mem(to_md, engine_, to);
    dnnl::reorder(src_mem, dst_mem).execute(s, src_mem, dst_mem);
    s.wait();
  }

  std::vector<Tensor> tensors_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  BackendOptions options_;
  std::vector<Md> layouts_;  // zero descriptor: a tensor no kernel can describe (never touched)
  std::vector<std::unique_ptr<Kernel>> kernels_;
};

// The CPU backend computes in fp32 only. TF32 is a GPU tensor-core mode; mixed precision would
// need 16-bit versions of the hand-written kernels (loss, embedding, optimizer updates with the
// weight-copy refresh, softmax, dropout), which do not exist, even where oneDNN could run bf16
// convolutions and matmuls on this CPU.
Status check_precision(Precision p) {
  if (p == Precision::kFp32) return Status::Ok();
  if (p == Precision::kTf32)
    return Status::InvalidArgument("the CPU backend computes in fp32: tf32 is an NVIDIA tensor-core mode (use --precision "
                               "fp32 to train here; plan tf32 on a GPU profile)");
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  const bool bf16_isa = isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
  return Status::InvalidArgument(fmt::format(
      "the CPU backend trains in fp32 only: {} needs 16-bit versions of Ferry's hand-written kernels (cross-entropy, "
      "embedding, softmax, dropout, optimizer updates that refresh the 16-bit weight copies), which are not "
      "implemented; {}",
      to_string(p),
      p == Precision::kAmpFp16 ? "oneDNN 2.6 has no fp16 training primitives for CPUs either"
      : bf16_isa               ? "oneDNN could run the bf16 convolutions and matmuls on this CPU (avx512_bf16)"
                               : "this CPU also lacks avx512_bf16, which oneDNN needs for bf16 training primitives"));
}

class CpuBackend final : public Backend {
 public:
  CpuBackend(dnnl::engine engine, const BackendOptions& options) : engine_(std::move(engine)), options_(options) {}

  std::string_view name() const override { return "cpu"; }

  Result<std::unique_ptr<CompiledGraph>> compile(const Graph& graph) override {
    FERRY_RETURN_IF_ERROR(graph.validate());
    FERRY_RETURN_IF_ERROR(check_precision(graph.info.precision));
    std::unique_ptr<CpuCompiledGraph> cg;
    FERRY_RETURN_IF_ERROR(dnnl_guard("cpu backend", [&] {
      cg = std::make_unique<CpuCompiledGraph>(graph, engine_, options_);
      cg->build(graph);
    }));
    return std::unique_ptr<CompiledGraph>(std::move(cg));
  }

  // Device memory is a pre-faulted HostRegion per allocate() (Note [Prefaulting] in
  // common/host_region.cc) with guard pages on both sides, so a kernel that writes past the
  // budget faults with the op's name (common/fault_guard.h) instead of passing silently; and so the first training step pays no page faults inside kernels, and
  // a region the host cannot hold is refused here with the numbers instead of meeting the OOM
  // killer later. allocate() and free() are not thread-safe: call them from one thread (the
  // executor allocates its arena once, when it is created, and frees it when destroyed).
  Result<DevicePtr> allocate(uint64_t bytes) override {
    FERRY_ASSIGN_OR_RETURN(HostRegion region,
                           HostRegion::map(bytes, {.name = "cpu device memory",
                                                   .min_alignment = kDeviceAlignment,
                                                   .prefault_threads = omp_get_max_threads(),
                                                   .guard_bytes = kGuardBytes}));
    const DevicePtr ptr = device_address(region.data());
    regions_.emplace(ptr.address, std::move(region));
    return ptr;
  }

  void free(DevicePtr region) override {
    if (!region) return;
    auto it = regions_.find(region.address);
    FERRY_CHECK(it != regions_.end(), "cpu backend: free of {:#x}, which is not a region allocate() returned",
                region.address);
    regions_.erase(it);  // unmaps
  }

  Status copy_to_device(DevicePtr dst, std::span<const std::byte> src) override {
    if (src.empty()) return Status::Ok();
    std::memcpy(host_address(dst), src.data(), src.size());
    return Status::Ok();
  }
  std::byte* direct_io_address(DevicePtr p) override { return host_address(p); }

  Status copy_to_host(std::span<std::byte> dst, DevicePtr src) override {
    if (dst.empty()) return Status::Ok();
    std::memcpy(dst.data(), host_address(src), dst.size());
    return Status::Ok();
  }
  Status copy_on_device(DevicePtr dst, DevicePtr src, uint64_t bytes) override {
    std::memmove(host_address(dst), host_address(src), bytes);
    return Status::Ok();
  }
  Status fill(DevicePtr dst, uint64_t bytes, uint8_t value) override {
    if (bytes > 0) std::memset(host_address(dst), value, bytes);
    return Status::Ok();
  }
  Status synchronize() override { return Status::Ok(); }

 private:
  // Inaccessible address space on each side of every region (costs no memory): wide enough that
  // a kernel running past a tensor at the arena's end meets it rather than some other mapping.
  static constexpr uint64_t kGuardBytes = 16ull << 20;
  dnnl::engine engine_;
  BackendOptions options_;
  std::map<uint64_t, HostRegion> regions_;  // live allocations, by base address
};

}  // namespace
}  // namespace cpu

Result<std::unique_ptr<Backend>> make_cpu_backend(const BackendOptions& options) {
  std::unique_ptr<Backend> backend;
  FERRY_RETURN_IF_ERROR(cpu::dnnl_guard("creating the oneDNN CPU engine", [&] {
    backend = std::make_unique<cpu::CpuBackend>(dnnl::engine(dnnl::engine::kind::cpu, 0), options);
  }));
  return backend;
}

}  // namespace ferry
