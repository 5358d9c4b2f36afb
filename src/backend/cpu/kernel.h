// Kernel: one compiled op of the CPU backend, with its argument staging and scratch accounting.
//
// Design
// - A kernel reads each input and writes each output in a memory descriptor of its choice (the
//   one its oneDNN primitive asked for, or plain row-major for a hand-written loop). When that
//   differs from the tensor's stored layout, the argument is *staged*: run() reorders the input
//   into a scratch buffer before the body, or lets the body write a scratch buffer and reorders
//   it into the output afterwards. A view with other dims but the same bytes (linear reading
//   [B,T,D] as [B*T,D]) needs no staging.
// - Scratch of one op = [shared region | private buffers]. The shared region is used by one
//   oneDNN primitive at a time (the op's scratchpad, each staging reorder's scratchpad), so it is
//   the maximum of their sizes; private buffers (staging, kernel temporaries) get their own
//   64-byte aligned slots. The total is exactly what run() touches besides inputs and outputs.
// - The body is a closure built by the op's factory (cpu/kernels_*.cc); it sees plain pointers
//   in the kernel's descriptors. Anything it throws becomes a Status in run().
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/dnnl_util.h"

namespace ferry::cpu {

// Hand-written loops go parallel only above this many elements: waking OpenMP threads costs
// more than updating a bias vector, and far more on a machine whose cores are shared.
inline constexpr int64_t kMinParallelElements = int64_t{1} << 15;
inline bool parallel_worth(int64_t elements) { return elements >= kMinParallelElements; }

// A primitive together with the scratchpad descriptor it was created with.
struct Prim {
  dnnl::primitive primitive;
  Md scratchpad_md;
};

template <typename PrimitiveT, typename Pd>
Prim make_prim(const Pd& pd) {
  return Prim{PrimitiveT(pd), pd.scratchpad_desc()};
}

// What a kernel body sees while it runs.
class ExecArgs {
 public:
  void* in(size_t i) const { return in_[i]; }
  void* out(size_t i) const { return out_[i]; }
  template <typename T>
  T* in_as(size_t i) const {
    return static_cast<T*>(in_[i]);
  }
  template <typename T>
  T* out_as(size_t i) const {
    return static_cast<T*>(out_[i]);
  }
  // A private scratch buffer reserved with Kernel::add_buffer().
  void* buffer(int id) const;
  const RunContext& ctx() const { return *ctx_; }
  const dnnl::engine& engine() const { return *engine_; }
  dnnl::stream& stream() const { return *stream_; }

  // A oneDNN memory object over `ptr` (no copy, no zero padding).
  dnnl::memory mem(const Md& md, void* ptr) const { return dnnl::memory(md, *engine_, ptr); }
  // Executes `prim` with `args`, adding the shared scratch region as its scratchpad.
  void exec(const Prim& prim, std::unordered_map<int, dnnl::memory> args) const;

 private:
  friend class Kernel;
  std::vector<void*> in_, out_;
  std::byte* shared_ = nullptr;
  std::byte* private_ = nullptr;
  const std::vector<uint64_t>* buffer_offsets_ = nullptr;
  const RunContext* ctx_ = nullptr;
  const dnnl::engine* engine_ = nullptr;
  dnnl::stream* stream_ = nullptr;
};

class Kernel {
 public:
  using Body = std::function<Status(const ExecArgs&)>;

  Kernel(std::string op_name, const dnnl::engine& engine, size_t num_inputs, size_t num_outputs);

  // --- Setup (called by factories) ---------------------------------------------------------
  // Input i is stored as `stored` (nullopt: not decided yet, store it as `wanted`) and the body
  // reads it as `wanted`. Stages it when the bytes differ.
  void read_input(size_t i, const std::optional<Md>& stored, const Md& wanted);
  // Output i must be stored as `stored` (nullopt: the kernel decides, store it as `produced`) and
  // the body writes it as `produced`. Stages it when the bytes differ.
  void write_output(size_t i, const std::optional<Md>& stored, const Md& produced);
  // Makes the shared scratch region large enough for `pd`'s scratchpad.
  void use_scratchpad(const dnnl::primitive_desc_base& pd) { need_shared(pd.scratchpad_desc().get_size()); }
  void need_shared(uint64_t bytes) { shared_bytes_ = std::max(shared_bytes_, bytes); }
  // Reserves a private scratch buffer; returns its id for ExecArgs::buffer().
  int add_buffer(uint64_t bytes);
  void set_body(Body body) { body_ = std::move(body); }
  // What runs the body: oneDNN's implementation name, or "hand-written" (the default).
  void set_implementation(std::string name) { implementation_ = std::move(name); }

  // --- Queries ------------------------------------------------------------------------------
  const std::string& op_name() const { return op_name_; }
  const std::string& implementation() const { return implementation_; }
  const Md& input_layout(size_t i) const { return inputs_[i].stored; }
  const Md& output_layout(size_t i) const { return outputs_[i].stored; }
  bool input_staged(size_t i) const { return inputs_[i].staged; }
  bool output_staged(size_t i) const { return outputs_[i].staged; }
  size_t num_inputs() const { return inputs_.size(); }
  size_t num_outputs() const { return outputs_.size(); }
  uint64_t scratch_bytes() const;

  // Stages inputs, runs the body, stages outputs back. Pointers are host pointers.
  Status run(std::span<void* const> inputs, std::span<void* const> outputs, std::byte* scratch, const RunContext& ctx,
             dnnl::stream& stream) const;

 private:
  struct Arg {
    bool set = false;
    Md stored;   // the tensor's layout
    Md staging;  // staged copy, in the tensor's dims, with the bytes the body expects
    bool staged = false;
    Prim reorder;  // stored -> staging (inputs) or staging -> stored (outputs)
    int buffer = -1;
  };
  void stage(Arg& arg, const Md& stored, const Md& seen, bool is_input);
  uint64_t shared_aligned() const;

  std::string op_name_;
  std::string what_;  // "op 'name'", the context of every error run() returns
  std::string implementation_ = "hand-written";
  dnnl::engine engine_;
  std::vector<Arg> inputs_, outputs_;
  uint64_t shared_bytes_ = 0;
  std::vector<uint64_t> buffer_offsets_;  // from the private base
  uint64_t private_bytes_ = 0;
  Body body_;
};

// Everything a kernel factory knows about its op at compile time.
struct OpSetup {
  const Graph& graph;
  const Op& op;
  const dnnl::engine& engine;
  const BackendOptions& options;
  std::vector<std::optional<Md>> in;   // stored layout of each input; nullopt = first use of a weight/state
  std::vector<std::optional<Md>> out;  // required layout of each output; nullopt = the kernel decides

  const Tensor& in_tensor(size_t i) const { return graph.tensor(op.inputs[i]); }
  const Tensor& out_tensor(size_t i) const { return graph.tensor(op.outputs[i]); }
  // Stored layout for input i when the kernel reads it as `wanted`: the decided layout, else
  // (first use of a weight) `wanted`, recorded in the tensor's own dims when it is plain.
  Md input_or(size_t i, const Md& wanted) const;
  // Layout for output i when the kernel produces `produced`: the required layout, else
  // `produced`, recorded in the tensor's own dims when it is plain.
  Md output_or(size_t i, const Md& produced) const;
  // Throws InvalidArgument unless the op has `lo`..`hi` inputs and `olo`..`ohi` outputs.
  void expect_arity(size_t lo, size_t hi, size_t olo, size_t ohi) const;
  // Throws InvalidArgument naming the op unless `cond`.
  void require(bool cond, std::string_view what) const;
};

// Builds a kernel whose body executes one oneDNN primitive. Each in()/out() call binds a tensor
// argument both for staging (Kernel::read_input / write_output) and in the primitive's argument
// map, with the descriptor the primitive was created for.
class PrimitiveKernelBuilder {
 public:
  PrimitiveKernelBuilder(const OpSetup& setup, const dnnl::primitive_desc_base& pd);
  PrimitiveKernelBuilder& in(size_t i, int dnnl_arg, const Md& md);
  PrimitiveKernelBuilder& out(size_t i, int dnnl_arg, const Md& md);
  // Passes input i (already bound with in()) once more, as `dnnl_arg`.
  PrimitiveKernelBuilder& in_again(size_t i, int dnnl_arg, const Md& md);
  // Extra scratch buffer passed to the primitive as `dnnl_arg` (a workspace the graph does not hold).
  PrimitiveKernelBuilder& buffer(int dnnl_arg, const Md& md);
  std::unique_ptr<Kernel> finish(Prim prim) &&;

 private:
  struct Ref {
    int dnnl_arg;
    int kind;  // 0 input, 1 output, 2 private buffer
    size_t index;
    Md md;
  };
  const OpSetup& setup_;
  std::unique_ptr<Kernel> kernel_;
  std::vector<Ref> refs_;
};

// A new kernel with one slot per op argument.
std::unique_ptr<Kernel> new_kernel(const OpSetup& setup);
// Hand-written kernels read and write plain row-major tensors in their logical shapes.
void read_plain(Kernel& k, const OpSetup& setup, size_t i);
void write_plain(Kernel& k, const OpSetup& setup, size_t i);

// Builds the kernel for setup.op. Throws StatusError / dnnl::error (compile() guards it):
// InvalidArgument for a tensor over 2^31 - 1 elements (checked before oneDNN sees it) and for a
// tensor whose shape or dtype disagrees with what the op's other tensors and attributes imply.
std::unique_ptr<Kernel> make_kernel(const OpSetup& setup);

// Factories per op family (kernels_*.cc).
std::unique_ptr<Kernel> make_conv_kernel(const OpSetup& s);       // conv2d, bwd data, bwd weights
std::unique_ptr<Kernel> make_norm_kernel(const OpSetup& s);       // batch/layer norm and their bwd
std::unique_ptr<Kernel> make_eltwise_kernel(const OpSetup& s);    // relu, gelu (+bwd), add, grad_accumulate
std::unique_ptr<Kernel> make_pool_kernel(const OpSetup& s);       // max/avg/global pool (+bwd)
std::unique_ptr<Kernel> make_linear_kernel(const OpSetup& s);     // linear (+bwd), matmul
std::unique_ptr<Kernel> make_softmax_kernel(const OpSetup& s);    // softmax (+bwd)
std::unique_ptr<Kernel> make_concat_kernel(const OpSetup& s);     // concat (+bwd)
std::unique_ptr<Kernel> make_loss_kernel(const OpSetup& s);       // cross_entropy (+bwd)
std::unique_ptr<Kernel> make_embedding_kernel(const OpSetup& s);  // embedding (+bwd)
std::unique_ptr<Kernel> make_dropout_kernel(const OpSetup& s);    // dropout (+bwd)
std::unique_ptr<Kernel> make_heads_kernel(const OpSetup& s);      // split/merge heads
std::unique_ptr<Kernel> make_optimizer_kernel(const OpSetup& s);  // sgd, adam

}  // namespace ferry::cpu
