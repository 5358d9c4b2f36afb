#include "runtime/executor.h"

#include <chrono>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "common/units.h"

namespace ferry {

namespace {

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// How a weight is initialised, read off the op that consumes it.
enum class Init { kHeUniform, kSmallUniform, kFanInUniform, kOnes, kZeros };

Init init_of(const Graph& g, TensorId w, bool transformer) {
  for (const Op& op : g.ops) {
    if (op.phase != Phase::kForward) continue;
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      if (op.inputs[k] != w) continue;
      switch (op.type) {
        case OpType::kBatchNorm:
        case OpType::kLayerNorm: return k == 1 ? Init::kOnes : Init::kZeros;
        case OpType::kConv2d: return k == 1 ? Init::kHeUniform : Init::kZeros;
        case OpType::kLinear:
          if (k == 2) return Init::kZeros;
          return transformer ? Init::kSmallUniform : Init::kFanInUniform;
        case OpType::kEmbedding: return Init::kSmallUniform;
        default: return Init::kSmallUniform;
      }
    }
  }
  return Init::kZeros;
}

}  // namespace

Executor::Executor(Graph graph, Backend& backend, std::unique_ptr<CompiledGraph> compiled, Analysis analysis,
                   const ExecutorOptions& options, uint64_t budget)
    : graph_(std::move(graph)),
      backend_(backend),
      compiled_(std::move(compiled)),
      analysis_(std::move(analysis)),
      options_(options),
      budget_bytes_(budget),
      allocator_(budget, analysis_.plan.alignment, "device") {}

Executor::~Executor() {
  if (arena_) backend_.free(arena_);
}

Result<std::unique_ptr<Executor>> Executor::create(const Graph& graph, Backend& backend,
                                                   const ExecutorOptions& options) {
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<CompiledGraph> compiled, backend.compile(graph));
  // Analyse with the sizes the backend will really use.
  Graph sized = graph;
  for (Tensor& t : sized.tensors) t.bytes = compiled->tensor_bytes(t.id);
  AnalysisOptions ao;
  ao.op_scratch_bytes = compiled->all_scratch_bytes();
  ao.alignment = Backend::kDeviceAlignment;
  FERRY_ASSIGN_OR_RETURN(Analysis analysis, analyze(sized, ao));
  FERRY_RETURN_IF_ERROR(check_memory_plan(sized, analysis.buffers, analysis.plan));

  const uint64_t persistent = analysis.persistent_region_bytes;
  const uint64_t required = persistent + analysis.plan.arena_bytes;
  if (options.budget_bytes != 0 && options.budget_bytes < required) {
    return Status::OutOfMemory(fmt::format(
        "budget {} ({} bytes) is too small: this iteration needs {} ({} bytes) without a swap/recompute plan "
        "(weights and optimizer state {}, activations and workspace {})",
        format_bytes(options.budget_bytes), options.budget_bytes, format_bytes(required), required,
        format_bytes(persistent), format_bytes(analysis.plan.arena_bytes)));
  }
  const uint64_t budget = options.budget_bytes != 0 ? options.budget_bytes : required;
  std::unique_ptr<Executor> ex(
      new Executor(std::move(sized), backend, std::move(compiled), std::move(analysis), options, budget));
  ex->persistent_region_bytes_ = persistent;
  FERRY_ASSIGN_OR_RETURN(ex->arena_, backend.allocate(std::max<uint64_t>(budget, 1)));

  const Graph& g = ex->graph_;
  ex->persistent_offset_.assign(g.tensors.size(), 0);
  uint64_t offset = 0;
  for (const Tensor& t : g.tensors) {
    if (!t.persistent()) continue;
    ex->persistent_offset_[t.id] = offset;
    bool placed = ex->allocator_.allocate_at(offset, t.bytes);
    FERRY_CHECK(placed, "persistent tensor {} could not be placed at {}", t.name, offset);
    offset += align_up(t.bytes, ao.alignment);
  }
  const size_t steps = g.ops.size();
  ex->buffers_starting_.assign(steps, {});
  ex->buffers_ending_.assign(steps, {});
  ex->scratch_buffer_.assign(steps, -1);
  for (const Buffer& b : ex->analysis_.buffers) {
    ex->buffers_starting_[b.first_step].push_back(b.id);
    ex->buffers_ending_[b.last_step].push_back(b.id);
    if (b.scratch_of != kNoOp) ex->scratch_buffer_[b.scratch_of] = b.id;
  }
  return ex;
}

DevicePtr Executor::address_of(TensorId t) const {
  const Tensor& tt = graph_.tensor(t);
  if (tt.persistent()) return arena_ + persistent_offset_[t];
  int32_t b = analysis_.tensors[t].buffer;
  FERRY_CHECK(b >= 0, "tensor {} has no buffer", tt.name);
  return arena_ + (persistent_region_bytes_ + analysis_.plan.offsets[b]);
}

Status Executor::initialize() {
  const bool transformer = graph_.info.seq > 0;
  for (const Tensor& t : graph_.tensors) {
    if (!t.persistent()) continue;
    std::vector<float> host(static_cast<size_t>(t.numel()), 0.0f);
    if (t.role == TensorRole::kWeight) {
      Init init = init_of(graph_, t.id, transformer);
      int64_t fan_in = 1;
      for (size_t d = 1; d < t.shape.size(); ++d) fan_in *= t.shape[d];
      float bound = 0;
      switch (init) {
        case Init::kHeUniform: bound = std::sqrt(6.0f / static_cast<float>(fan_in)); break;
        case Init::kFanInUniform: bound = 1.0f / std::sqrt(static_cast<float>(fan_in)); break;
        case Init::kSmallUniform: bound = 0.02f * std::sqrt(3.0f); break;  // std 0.02
        case Init::kOnes: std::fill(host.begin(), host.end(), 1.0f); break;
        case Init::kZeros: break;
      }
      if (bound > 0)
        for (size_t i = 0; i < host.size(); ++i) {
          uint64_t h = mix(mix(options_.seed ^ (static_cast<uint64_t>(t.id) << 32)) ^ i);
          float u = static_cast<float>(h >> 40) * (1.0f / 16777216.0f);
          host[i] = (2.0f * u - 1.0f) * bound;
        }
    }
    FERRY_RETURN_IF_ERROR(compiled_->from_plain(
        t.id, std::as_bytes(std::span<const float>(host.data(), host.size())), address_of(t.id)));
  }
  optimizer_step_ = 0;
  return Status::Ok();
}

Result<IterationStats> Executor::run_iteration(int64_t iteration, DataSource& data) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::vector<std::byte>> host_inputs;
  FERRY_RETURN_IF_ERROR(data.fill(graph_, iteration, host_inputs));
  std::vector<TensorId> inputs = data_inputs(graph_);
  RunContext ctx;
  ctx.iteration = iteration;
  ctx.optimizer_step = ++optimizer_step_;
  ctx.dropout_seed = options_.seed;
  std::vector<DevicePtr> in_ptrs, out_ptrs;
  float loss = std::nanf("");
  for (size_t step = 0; step < graph_.ops.size(); ++step) {
    for (int32_t b : buffers_starting_[step]) {
      const Buffer& buf = analysis_.buffers[b];
      bool placed = allocator_.allocate_at(persistent_region_bytes_ + analysis_.plan.offsets[b], buf.bytes);
      FERRY_CHECK(placed, "buffer {} does not fit at its planned offset", b);
    }
    if (step == 0)
      for (size_t i = 0; i < inputs.size(); ++i)
        if (analysis_.tensors[inputs[i]].buffer >= 0)
          FERRY_RETURN_IF_ERROR(compiled_->from_plain(inputs[i], host_inputs[i], address_of(inputs[i])));
    const Op& op = graph_.ops[step];
    in_ptrs.clear();
    out_ptrs.clear();
    for (TensorId t : op.inputs) in_ptrs.push_back(address_of(t));
    for (TensorId t : op.outputs) out_ptrs.push_back(address_of(t));
    DevicePtr scratch{};
    if (scratch_buffer_[step] >= 0)
      scratch = arena_ + (persistent_region_bytes_ + analysis_.plan.offsets[scratch_buffer_[step]]);
    Status s = compiled_->run(static_cast<OpId>(step), in_ptrs, out_ptrs, scratch, ctx);
    if (!s.ok()) return s.with_context(fmt::format("op '{}'", op.name));
    if (step + 1 == graph_.ops.size() && graph_.loss != kNoTensor) {
      FERRY_RETURN_IF_ERROR(compiled_->to_plain(
          graph_.loss, address_of(graph_.loss), std::as_writable_bytes(std::span<float>(&loss, 1))));
    }
    for (int32_t b : buffers_ending_[step])
      allocator_.free(persistent_region_bytes_ + analysis_.plan.offsets[b]);
  }
  FERRY_RETURN_IF_ERROR(backend_.synchronize());
  IterationStats st;
  st.iteration = iteration;
  st.loss = loss;
  st.time_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return st;
}

Result<std::vector<std::byte>> Executor::read_persistent(TensorId t) {
  const Tensor& tt = graph_.tensor(t);
  if (!tt.persistent()) return Status::InvalidArgument(fmt::format("tensor '{}' is not persistent", tt.name));
  std::vector<std::byte> host(static_cast<size_t>(tt.numel()) * dtype_size(tt.dtype));
  FERRY_RETURN_IF_ERROR(compiled_->to_plain(t, address_of(t), host));
  return host;
}

}  // namespace ferry
