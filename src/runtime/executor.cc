#include "runtime/executor.h"

#include <chrono>
#include <cmath>
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "common/hash.h"
#include "common/units.h"

namespace ferry {

namespace {

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
                   Program program, ProgramPlacement placement, const ExecutorOptions& options, uint64_t budget)
    : graph_(std::move(graph)),
      backend_(backend),
      compiled_(std::move(compiled)),
      analysis_(std::move(analysis)),
      options_(options),
      budget_bytes_(budget),
      program_(std::move(program)),
      placement_(std::move(placement)),
      allocator_(budget, Backend::kDeviceAlignment, "device"),
      block_(graph_.tensors.size(), kNoBlock),
      out_ticket_(graph_.tensors.size()),
      in_ticket_(graph_.tensors.size()),
      has_copy_(graph_.tensors.size(), 0) {}

Executor::~Executor() {
  engine_.reset();  // its threads may still be copying from or into the arena
  if (arena_) backend_.free(arena_);
}

Result<std::unique_ptr<Executor>> Executor::create(const Graph& graph, Backend& backend,
                                                   const ExecutorOptions& options, const Schedule* schedule) {
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<CompiledGraph> compiled, backend.compile(graph));
  // Analyse and plan with the sizes the backend will really use.
  Graph sized = graph;
  for (Tensor& t : sized.tensors) t.bytes = compiled->tensor_bytes(t.id);
  AnalysisOptions ao;
  ao.op_scratch_bytes = compiled->all_scratch_bytes();
  ao.alignment = Backend::kDeviceAlignment;
  FERRY_ASSIGN_OR_RETURN(Analysis analysis, analyze(sized, ao));
  ProgramOptions po;
  po.op_scratch_bytes = ao.op_scratch_bytes;
  const Schedule keep = Schedule::keep_all(sized.ops.size());
  FERRY_ASSIGN_OR_RETURN(Program program, lower_schedule(sized, schedule ? *schedule : keep, po));
  FERRY_ASSIGN_OR_RETURN(ProgramPlacement placement, place_program(sized, program, ao.alignment));

  const uint64_t required = placement.arena_bytes;
  if (options.budget_bytes != 0 && options.budget_bytes < required) {
    return Status::OutOfMemory(fmt::format(
        "budget {} ({} bytes) is too small: this iteration needs {} ({} bytes) with plan '{}' "
        "(weights and optimizer state {}, activations and workspace {})",
        format_bytes(options.budget_bytes), options.budget_bytes, format_bytes(required), required,
        program.policy, format_bytes(placement.persistent_region_bytes),
        format_bytes(required - placement.persistent_region_bytes)));
  }
  const uint64_t budget = options.budget_bytes != 0 ? options.budget_bytes : required;
  std::unique_ptr<Executor> ex(new Executor(std::move(sized), backend, std::move(compiled), std::move(analysis),
                                            std::move(program), std::move(placement), options, budget));
  FERRY_ASSIGN_OR_RETURN(ex->arena_, backend.allocate(std::max<uint64_t>(budget, 1)));
  FERRY_RETURN_IF_ERROR(ex->make_tiers());
  // Persistent tensors live across iterations: place them once, where the prologue puts them.
  for (size_t k = 0; k < ex->program_.instructions.size(); ++k) {
    const Instruction& in = ex->program_.instructions[k];
    if (in.kind != InstrKind::kAlloc || !ex->graph_.tensor(in.tensor).persistent()) continue;
    bool placed = ex->allocator_.allocate_at(ex->placement_.offset[k], in.bytes);
    FERRY_CHECK(placed, "persistent tensor {} could not be placed", ex->graph_.tensor(in.tensor).name);
    ex->block_[in.tensor] = ex->placement_.offset[k];
  }
  return ex;
}

Status Executor::make_tiers() {
  // Capacity of a tier: the bytes of every distinct tensor the program swaps to it.
  uint64_t need[2] = {0, 0};
  std::vector<uint8_t> seen(graph_.tensors.size(), 0);
  for (const Instruction& in : program_.instructions) {
    if (in.kind != InstrKind::kSwapOut) continue;
    const uint8_t bit = in.tier == Tier::kHost ? 1 : 2;
    if (seen[in.tensor] & bit) continue;
    seen[in.tensor] |= bit;
    need[in.tier == Tier::kHost ? 0 : 1] += align_up(in.bytes, 4096);
  }
  if (need[0] == 0 && need[1] == 0) return Status::Ok();
  if (need[0] > 0) {
    HostTierOptions ho;
    ho.capacity_bytes = options_.host_tier_bytes ? options_.host_tier_bytes : need[0];
    ho.checksum = options_.checksum;
    FERRY_ASSIGN_OR_RETURN(std::unique_ptr<HostTier> host, HostTier::create(ho));
    host_tier_ = std::move(host);
  }
  if (need[1] > 0) {
    SsdTierOptions so;
    so.directory = options_.ssd_dir;
    so.capacity_bytes = options_.ssd_tier_bytes ? options_.ssd_tier_bytes : need[1];
    so.checksum = options_.checksum;
    so.fault = options_.ssd_fault;
    FERRY_ASSIGN_OR_RETURN(std::unique_ptr<SsdTier> ssd, SsdTier::create(so));
    ssd_tier_ = std::move(ssd);
  }
  FERRY_ASSIGN_OR_RETURN(engine_, TransferEngine::create(backend_));
  return Status::Ok();
}

Status Executor::wait_out(TensorId t) {
  if (!out_ticket_[t]) return Status::Ok();
  const auto start = std::chrono::steady_clock::now();
  Status s = engine_->wait(out_ticket_[t]);
  stall_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out_ticket_[t] = TransferTicket{};
  return s;
}

Status Executor::wait_in(TensorId t) {
  if (!in_ticket_[t]) return Status::Ok();
  const auto start = std::chrono::steady_clock::now();
  Status s = engine_->wait(in_ticket_[t]);
  stall_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  in_ticket_[t] = TransferTicket{};
  return s;
}

DevicePtr Executor::address_of(TensorId t) const {
  FERRY_CHECK(block_[t] != kNoBlock, "tensor {} is not on the device", graph_.tensor(t).name);
  return arena_ + block_[t];
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
          uint64_t h = splitmix64(splitmix64(options_.seed ^ (static_cast<uint64_t>(t.id) << 32)) ^ i);
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

Status Executor::drop_copies(TensorId t) {
  if (has_copy_[t] & 1) FERRY_RETURN_IF_ERROR(engine_->discard(t, *host_tier_));
  if (has_copy_[t] & 2) FERRY_RETURN_IF_ERROR(engine_->discard(t, *ssd_tier_));
  has_copy_[t] = 0;
  return Status::Ok();
}

Status Executor::run_op(OpId id, const RunContext& ctx, DevicePtr scratch) {
  const Op& op = graph_.ops[id];
  in_ptrs_.clear();
  out_ptrs_.clear();
  for (TensorId t : op.inputs) in_ptrs_.push_back(address_of(t));
  for (TensorId t : op.outputs) out_ptrs_.push_back(address_of(t));
  const auto op_start = std::chrono::steady_clock::now();
  Status s = compiled_->run(id, in_ptrs_, out_ptrs_, scratch, ctx);
  if (options_.record_op_times) {
    op_times_us_.resize(graph_.ops.size());
    op_times_us_[id] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - op_start).count();
  }
  if (!s.ok()) return s.with_context(fmt::format("op '{}'", op.name));
  return Status::Ok();
}

Result<IterationStats> Executor::run_iteration(int64_t iteration, DataSource& data) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::vector<std::byte>> host_inputs;
  FERRY_RETURN_IF_ERROR(data.fill(graph_, iteration, host_inputs));
  const std::vector<TensorId> inputs = data_inputs(graph_);
  RunContext ctx;
  ctx.iteration = iteration;
  ctx.optimizer_step = ++optimizer_step_;
  ctx.dropout_seed = options_.seed;
  uint64_t scratch_offset = kNoBlock;
  stall_seconds_ = 0;
  std::vector<TensorId> inherited;  // inputs whose block an output of the coming kRun took over
  for (size_t k = 0; k < program_.instructions.size(); ++k) {
    const Instruction& in = program_.instructions[k];
    switch (in.kind) {
      case InstrKind::kAlloc: {
        if (graph_.tensor(in.tensor).persistent() && block_[in.tensor] != kNoBlock) break;  // placed in create()
        if (in.inherit != kNoTensor) {
          // In place: the output takes over the input's block; the input is still read by this
          // step's op and dies with it (with its copies).
          FERRY_RETURN_IF_ERROR(wait_out(in.inherit));
          FERRY_RETURN_IF_ERROR(drop_copies(in.inherit));
          block_[in.tensor] = block_[in.inherit];
          inherited.push_back(in.inherit);
          break;
        }
        bool placed = allocator_.allocate_at(placement_.offset[k], in.bytes);
        FERRY_CHECK(placed, "instruction {}: '{}' does not fit at its planned offset", k, graph_.tensor(in.tensor).name);
        block_[in.tensor] = placement_.offset[k];
        if (graph_.tensor(in.tensor).role == TensorRole::kInput) {
          size_t i = static_cast<size_t>(std::find(inputs.begin(), inputs.end(), in.tensor) - inputs.begin());
          FERRY_RETURN_IF_ERROR(compiled_->from_plain(in.tensor, host_inputs[i], address_of(in.tensor)));
        }
        break;
      }
      case InstrKind::kFree:
      case InstrKind::kRelease:
        if (graph_.tensor(in.tensor).persistent()) break;
        // A block is released only after its swap-out has completed.
        FERRY_RETURN_IF_ERROR(wait_out(in.tensor));
        allocator_.free(block_[in.tensor]);
        block_[in.tensor] = kNoBlock;
        if (in.kind == InstrKind::kFree) FERRY_RETURN_IF_ERROR(drop_copies(in.tensor));
        break;
      case InstrKind::kAllocScratch: {
        bool placed = allocator_.allocate_at(placement_.offset[k], in.bytes);
        FERRY_CHECK(placed, "instruction {}: scratch of op {} does not fit at its planned offset", k, in.op);
        scratch_offset = placement_.offset[k];
        break;
      }
      case InstrKind::kFreeScratch:
        allocator_.free(scratch_offset);
        scratch_offset = kNoBlock;
        break;
      case InstrKind::kRun: {
        // A consumer never starts before its swap-ins have completed, and never overwrites a
        // block a swap-out is still reading.
        for (TensorId t : graph_.ops[in.op].inputs) FERRY_RETURN_IF_ERROR(wait_in(t));
        for (TensorId t : graph_.ops[in.op].outputs) FERRY_RETURN_IF_ERROR(wait_out(t));
        DevicePtr scratch = scratch_offset != kNoBlock ? arena_ + scratch_offset : DevicePtr{};
        FERRY_RETURN_IF_ERROR(run_op(in.op, ctx, scratch));
        for (TensorId t : inherited) block_[t] = kNoBlock;
        inherited.clear();
        break;
      }
      case InstrKind::kSwapOut:
        out_ticket_[in.tensor] = engine_->swap_out(in.tensor, address_of(in.tensor), in.bytes, tier(in.tier));
        has_copy_[in.tensor] |= in.tier == Tier::kHost ? 1 : 2;
        break;
      case InstrKind::kSwapIn:
        in_ticket_[in.tensor] = engine_->swap_in(in.tensor, address_of(in.tensor), in.bytes, tier(in.tier));
        break;
    }
  }
  if (engine_) FERRY_RETURN_IF_ERROR(engine_->drain());
  float loss = std::nanf("");
  if (graph_.loss != kNoTensor && block_[graph_.loss] != kNoBlock) {
    FERRY_RETURN_IF_ERROR(compiled_->to_plain(graph_.loss, address_of(graph_.loss),
                                              std::as_writable_bytes(std::span<float>(&loss, 1))));
  }
  FERRY_RETURN_IF_ERROR(backend_.synchronize());
  // Whatever the program leaves allocated besides persistent tensors (the loss) dies now.
  for (const Tensor& t : graph_.tensors)
    if (!t.persistent() && block_[t.id] != kNoBlock) {
      allocator_.free(block_[t.id]);
      block_[t.id] = kNoBlock;
    }
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
