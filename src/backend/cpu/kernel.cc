#include "backend/cpu/kernel.h"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "common/units.h"

namespace ferry::cpu {

namespace {
constexpr uint64_t kScratchAlign = 64;
}  // namespace

void* ExecArgs::buffer(int id) const { return private_ + (*buffer_offsets_)[static_cast<size_t>(id)]; }

void ExecArgs::exec(const Prim& prim, std::unordered_map<int, dnnl::memory> args) const {
  if (prim.scratchpad_md.get_size() > 0) args.emplace(DNNL_ARG_SCRATCHPAD, mem(prim.scratchpad_md, shared_));
  prim.primitive.execute(*stream_, args);
}

Kernel::Kernel(std::string op_name, const dnnl::engine& engine, size_t num_inputs, size_t num_outputs)
    : op_name_(std::move(op_name)),
      what_(fmt::format("op '{}'", op_name_)),
      engine_(engine),
      inputs_(num_inputs),
      outputs_(num_outputs) {}

void Kernel::read_input(size_t i, const std::optional<Md>& stored, const Md& wanted) {
  FERRY_CHECK(i < inputs_.size());
  stage(inputs_[i], stored.value_or(wanted), wanted, /*is_input=*/true);
}

void Kernel::write_output(size_t i, const std::optional<Md>& stored, const Md& produced) {
  FERRY_CHECK(i < outputs_.size());
  stage(outputs_[i], stored.value_or(produced), produced, /*is_input=*/false);
}

void Kernel::stage(Arg& arg, const Md& stored, const Md& seen, bool is_input) {
  arg.set = true;
  arg.stored = stored;
  Md view = try_reshape(stored, seen.dims());
  if (!is_zero(view) && view == seen) return;  // same bytes: the body works on the tensor itself
  Md staging = try_reshape(seen, stored.dims());
  if (is_zero(staging))
    fail_unsupported(fmt::format("op '{}': cannot view layout {} of dims [{}] as dims [{}]", op_name_,
                                 layout_name(seen), fmt::join(seen.dims(), ","), fmt::join(stored.dims(), ",")));
  arg.staged = true;
  arg.staging = staging;
  const Md& from = is_input ? stored : staging;
  const Md& to = is_input ? staging : stored;
  dnnl::reorder::primitive_desc pd(engine_, from, engine_, to, user_scratchpad_attr());
  use_scratchpad(pd);
  arg.reorder = make_prim<dnnl::reorder>(pd);
  arg.buffer = add_buffer(staging.get_size());
}

int Kernel::add_buffer(uint64_t bytes) {
  buffer_offsets_.push_back(private_bytes_);
  private_bytes_ += align_up(bytes, kScratchAlign);
  return static_cast<int>(buffer_offsets_.size() - 1);
}

uint64_t Kernel::shared_aligned() const { return align_up(shared_bytes_, kScratchAlign); }

uint64_t Kernel::scratch_bytes() const { return shared_aligned() + private_bytes_; }

Status Kernel::run(std::span<void* const> inputs, std::span<void* const> outputs, std::byte* scratch,
                   const RunContext& ctx, dnnl::stream& stream) const {
  FERRY_CHECK(inputs.size() == inputs_.size() && outputs.size() == outputs_.size());
  return dnnl_guard(what_, [&]() -> Status {
    ExecArgs a;
    a.in_.assign(inputs.begin(), inputs.end());
    a.out_.assign(outputs.begin(), outputs.end());
    a.shared_ = scratch;
    a.private_ = scratch + shared_aligned();
    a.buffer_offsets_ = &buffer_offsets_;
    a.ctx_ = &ctx;
    a.engine_ = &engine_;
    a.stream_ = &stream;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const Arg& arg = inputs_[i];
      if (!arg.staged) continue;
      void* buf = a.buffer(arg.buffer);
      a.exec(arg.reorder, {{DNNL_ARG_FROM, a.mem(arg.stored, inputs[i])}, {DNNL_ARG_TO, a.mem(arg.staging, buf)}});
      a.in_[i] = buf;
    }
    for (size_t i = 0; i < outputs_.size(); ++i)
      if (outputs_[i].staged) a.out_[i] = a.buffer(outputs_[i].buffer);
    Status st = body_(a);
    if (!st.ok()) return st;
    for (size_t i = 0; i < outputs_.size(); ++i) {
      const Arg& arg = outputs_[i];
      if (!arg.staged) continue;
      a.exec(arg.reorder,
             {{DNNL_ARG_FROM, a.mem(arg.staging, a.out_[i])}, {DNNL_ARG_TO, a.mem(arg.stored, outputs[i])}});
    }
    stream.wait();
    return Status::Ok();
  });
}

namespace {
Md decided_or(const std::optional<Md>& decided, const Md& chosen, const Tensor& t) {
  if (decided) return *decided;
  if (is_plain(chosen) && md_numel(chosen) == t.numel()) return plain_md(t);
  return chosen;
}
}  // namespace

Md OpSetup::input_or(size_t i, const Md& wanted) const { return decided_or(in[i], wanted, in_tensor(i)); }
Md OpSetup::output_or(size_t i, const Md& produced) const { return decided_or(out[i], produced, out_tensor(i)); }

// Setup errors carry no op name: compile() adds "compiling op 'NAME' (TYPE)" to every one.
void OpSetup::expect_arity(size_t lo, size_t hi, size_t olo, size_t ohi) const {
  if (op.inputs.size() < lo || op.inputs.size() > hi || op.outputs.size() < olo || op.outputs.size() > ohi)
    fail_invalid(fmt::format("{} inputs and {} outputs; a {} op has {}..{} inputs and {}..{} outputs",
                             op.inputs.size(), op.outputs.size(), to_string(op.type), lo, hi, olo, ohi));
}

void OpSetup::require(bool cond, std::string_view what) const {
  if (!cond) fail_invalid(std::string(what));
}

std::unique_ptr<Kernel> new_kernel(const OpSetup& s) {
  return std::make_unique<Kernel>(s.op.name, s.engine, s.op.inputs.size(), s.op.outputs.size());
}

void read_plain(Kernel& k, const OpSetup& s, size_t i) {
  const Md md = plain_md(s.in_tensor(i));
  k.read_input(i, s.input_or(i, md), md);
}

void write_plain(Kernel& k, const OpSetup& s, size_t i) {
  const Md md = plain_md(s.out_tensor(i));
  k.write_output(i, s.output_or(i, md), md);
}

PrimitiveKernelBuilder::PrimitiveKernelBuilder(const OpSetup& setup, const dnnl::primitive_desc_base& pd)
    : setup_(setup), kernel_(new_kernel(setup)) {
  kernel_->use_scratchpad(pd);
  kernel_->set_implementation(pd.impl_info_str());
}

PrimitiveKernelBuilder& PrimitiveKernelBuilder::in(size_t i, int dnnl_arg, const Md& md) {
  kernel_->read_input(i, setup_.input_or(i, md), md);
  refs_.push_back({dnnl_arg, 0, i, md});
  return *this;
}

PrimitiveKernelBuilder& PrimitiveKernelBuilder::in_again(size_t i, int dnnl_arg, const Md& md) {
  refs_.push_back({dnnl_arg, 0, i, md});
  return *this;
}

PrimitiveKernelBuilder& PrimitiveKernelBuilder::out(size_t i, int dnnl_arg, const Md& md) {
  kernel_->write_output(i, setup_.output_or(i, md), md);
  refs_.push_back({dnnl_arg, 1, i, md});
  return *this;
}

PrimitiveKernelBuilder& PrimitiveKernelBuilder::buffer(int dnnl_arg, const Md& md) {
  refs_.push_back({dnnl_arg, 2, static_cast<size_t>(kernel_->add_buffer(md.get_size())), md});
  return *this;
}

std::unique_ptr<Kernel> PrimitiveKernelBuilder::finish(Prim prim) && {
  kernel_->set_body([prim = std::move(prim), refs = std::move(refs_)](const ExecArgs& a) {
    std::unordered_map<int, dnnl::memory> args;
    for (const Ref& r : refs) {
      void* p = r.kind == 0 ? a.in(r.index) : r.kind == 1 ? a.out(r.index) : a.buffer(static_cast<int>(r.index));
      args.emplace(r.dnnl_arg, a.mem(r.md, p));
    }
    a.exec(prim, std::move(args));
    return Status::Ok();
  });
  return std::move(kernel_);
}

namespace {

// Ferry passes oneDNN no tensor of 2^31 elements or more. Far above that, on the development
// machine, primitive creation failed ("could not create a primitive": ResNet-18 at batch 10^6),
// spun for minutes (VGG-16 at batch 10^8) or reported wrong scratch sizes, and a SIGFPE inside
// oneDNN was reported at such sizes. 2^31 - 1 (the int32 range, 8 GiB of f32) is a conservative
// bound below all of those, far above what one CPU iteration can hold. Refusing before oneDNN sees the sizes turns each failure into
// an InvalidArgument that names the limit.
constexpr uint64_t kMaxTensorElements = (uint64_t{1} << 31) - 1;

void check_sizes(const OpSetup& s) {
  auto check = [&](const Tensor& t) {
    std::optional<uint64_t> elements = 1;
    for (int64_t d : t.shape)
      if (elements) elements = checked_mul(*elements, static_cast<uint64_t>(std::max<int64_t>(d, 0)));
    if (elements && *elements <= kMaxTensorElements) return;
    fail_invalid(fmt::format("tensor '{}' has shape [{}] ({} elements), over the CPU backend's limit of 2^31 - 1 = {} "
                             "elements per tensor; use a smaller batch, image or sequence",
                             t.name, fmt::join(t.shape, ","),
                             elements ? fmt::format("{}", *elements) : std::string("more than 2^64"),
                             kMaxTensorElements));
  };
  for (size_t i = 0; i < s.op.inputs.size(); ++i) check(s.in_tensor(i));
  for (size_t i = 0; i < s.op.outputs.size(); ++i) check(s.out_tensor(i));
}

// A kernel derives every argument's dims from the op's attributes and a few of its tensors; a
// tensor whose own shape or dtype disagrees (a trace whose shapes contradict each other) is the
// user's error, named in the user's terms.
void check_arguments(const OpSetup& s, const Kernel& k) {
  auto check = [&](const Tensor& t, const Md& md, const char* role, size_t i) {
    if (is_zero(md)) return;
    if (md_numel(md) != t.numel())
      fail_invalid(fmt::format("{} {} '{}' has shape [{}] ({} elements), but the op's other tensors and attributes "
                               "make it [{}] ({} elements)",
                               role, i, t.name, fmt::join(t.shape, ","), t.numel(), fmt::join(md.dims(), ","),
                               md_numel(md)));
    if (md.data_type() != dnnl_type(t.dtype, t.name))
      fail_invalid(fmt::format("{} {} '{}' has dtype {}, which this op does not take there", role, i, t.name,
                               to_string(t.dtype)));
  };
  for (size_t i = 0; i < s.op.inputs.size(); ++i) check(s.in_tensor(i), k.input_layout(i), "input", i);
  for (size_t i = 0; i < s.op.outputs.size(); ++i) check(s.out_tensor(i), k.output_layout(i), "output", i);
}

std::unique_ptr<Kernel> make_kernel_of_type(const OpSetup& s) {
  switch (s.op.type) {
    case OpType::kConv2d:
    case OpType::kConvBwdData:
    case OpType::kConvBwdWeights:
      return make_conv_kernel(s);
    case OpType::kBatchNorm:
    case OpType::kBatchNormBwd:
    case OpType::kLayerNorm:
    case OpType::kLayerNormBwd:
      return make_norm_kernel(s);
    case OpType::kRelu:
    case OpType::kReluBwd:
    case OpType::kGelu:
    case OpType::kGeluBwd:
    case OpType::kAdd:
    case OpType::kGradAccumulate:
      return make_eltwise_kernel(s);
    case OpType::kMaxPool:
    case OpType::kMaxPoolBwd:
    case OpType::kAvgPool:
    case OpType::kAvgPoolBwd:
    case OpType::kGlobalAvgPool:
    case OpType::kGlobalAvgPoolBwd:
      return make_pool_kernel(s);
    case OpType::kLinear:
    case OpType::kLinearBwdData:
    case OpType::kLinearBwdWeights:
    case OpType::kMatMul:
      return make_linear_kernel(s);
    case OpType::kSoftmax:
    case OpType::kSoftmaxBwd:
      return make_softmax_kernel(s);
    case OpType::kConcat:
    case OpType::kConcatBwd:
      return make_concat_kernel(s);
    case OpType::kCrossEntropy:
    case OpType::kCrossEntropyBwd:
      return make_loss_kernel(s);
    case OpType::kEmbedding:
    case OpType::kEmbeddingBwd:
      return make_embedding_kernel(s);
    case OpType::kDropout:
    case OpType::kDropoutBwd:
      return make_dropout_kernel(s);
    case OpType::kSplitHeads:
    case OpType::kMergeHeads:
      return make_heads_kernel(s);
    case OpType::kSgdUpdate:
    case OpType::kAdamUpdate:
      return make_optimizer_kernel(s);
    case OpType::kOpaque:
      break;
  }
  fail_unsupported(
      fmt::format("op '{}' has type {}, which has no CPU kernel (a trace-imported op can be analysed and "
                  "planned but not run)",
                  s.op.name, to_string(s.op.type)));
}

}  // namespace

std::unique_ptr<Kernel> make_kernel(const OpSetup& s) {
  check_sizes(s);
  std::unique_ptr<Kernel> k = make_kernel_of_type(s);
  check_arguments(s, *k);
  return k;
}

}  // namespace ferry::cpu
