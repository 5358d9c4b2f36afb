#include "runtime/executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "common/fault_guard.h"
#include "common/hash.h"
#include "common/checksum.h"
#include "common/units.h"
#include "backend/host_optimizer.h"
#include "runtime/plan_corruption.h"

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

constexpr uint64_t kAlignment = Backend::kDeviceAlignment;
constexpr uint64_t kZeroBlock = ~uint64_t{0} - 1;  // block_of_ of a 0-byte tensor: holds no memory

// A copy of `p` whose blocks are widened by `guard` bytes on each side, for placing guards.
Program widened(const Program& p, uint64_t guard) {
  Program w = p;
  for (Instruction& in : w.instructions)
    if ((in.kind == InstrKind::kAlloc && in.inherit == kNoTensor) || in.kind == InstrKind::kAllocScratch)
      in.bytes += 2 * guard;
  return w;
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
      block_(graph_.tensors.size(), kNoBlock),
      block_of_(graph_.tensors.size(), kNoBlock),
      gone_at_(graph_.tensors.size(), -1),
      out_ticket_(graph_.tensors.size()),
      in_ticket_(graph_.tensors.size()),
      has_copy_(graph_.tensors.size(), 0),
      resident_(program_.device_resident(graph_)) {
  for (const Op& op : graph_.ops) op_labels_.push_back(fmt::format("op '{}' (step {})", op.name, op.id));
}

Executor::~Executor() {
  engine_.reset();  // its threads may still be copying from or into the arena
  if (arena_) backend_.free(arena_);
}

Result<std::unique_ptr<Executor>> Executor::create(const Graph& graph, Backend& backend,
                                                   const ExecutorOptions& options, const Schedule* schedule) {
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<CompiledGraph> compiled, backend.compile(graph));
  return create(graph, backend, options, schedule, std::move(compiled));
}

std::unique_ptr<CompiledGraph> Executor::take_compiled() {
  engine_.reset();  // its threads may still be copying from or into the arena
  host_tier_.reset();
  ssd_tier_.reset();
  verifier_.reset();
  if (arena_) backend_.free(arena_);
  arena_ = DevicePtr{};
  return std::move(compiled_);
}

Result<std::unique_ptr<Executor>> Executor::create(const Graph& graph, Backend& backend,
                                                   const ExecutorOptions& options, const Schedule* schedule,
                                                   std::unique_ptr<CompiledGraph> compiled) {
  FERRY_CHECK(compiled != nullptr, "Executor::create without a compiled graph");
  if (options.ssd_lossy_activations && options.verify_memory)
    return Status::InvalidArgument(
        "lossy stashing (bf16) changes swapped activations by design; the memory checks (verify_memory) would call "
        "that corruption: use one or the other");
  // Analyse and plan with the sizes the backend will really use.
  Graph sized = with_backend_sizes(graph, *compiled);
  AnalysisOptions ao;
  ao.op_scratch_bytes = compiled->all_scratch_bytes();
  ao.alignment = kAlignment;
  FERRY_ASSIGN_OR_RETURN(Analysis analysis, analyze(sized, ao));
  ProgramOptions po;
  po.op_scratch_bytes = ao.op_scratch_bytes;
  const Schedule keep = Schedule::keep_all(sized.ops.size());
  FERRY_ASSIGN_OR_RETURN(Program program, lower_schedule(sized, schedule ? *schedule : keep, po));
  FERRY_ASSIGN_OR_RETURN(ProgramPlacement placement, place_program(sized, program, kAlignment));

  // The prediction, made before anything (a corruption included) touches the plan.
  const uint64_t predicted = placement.arena_bytes;
  const uint64_t predicted_live = program_live_peak(sized, program, kAlignment).bytes;
  if (options.budget_bytes != 0 && options.budget_bytes < predicted) {
    return Status::OutOfMemory(fmt::format(
        "budget {} ({} bytes) is too small: this iteration needs {} ({} bytes) with plan '{}' "
        "(weights and optimizer state {}, activations and workspace {})",
        format_bytes(options.budget_bytes), options.budget_bytes, format_bytes(predicted), predicted,
        program.policy, format_bytes(placement.persistent_region_bytes),
        format_bytes(predicted - placement.persistent_region_bytes)));
  }
  const uint64_t budget = options.budget_bytes != 0 ? options.budget_bytes : predicted;

  // What runs: the program (as corrupted, for tests), placed with guards in verify mode.
  FERRY_ASSIGN_OR_RETURN(TensorId program_victim, corrupt_program(options.corruption, sized, program));
  const uint64_t guard = options.verify_memory ? MemoryVerifier::kGuardBytes : 0;
  ProgramPlacement run_placement;
  if (guard > 0 || program_victim != kNoTensor) {
    FERRY_ASSIGN_OR_RETURN(run_placement, place_program(sized, guard > 0 ? widened(program, guard) : program,
                                                        kAlignment));
  } else {
    run_placement = placement;
  }
  FERRY_ASSIGN_OR_RETURN(TensorId placement_victim,
                         corrupt_placement(options.corruption, sized, program, run_placement));
  (void)placement_victim;
  FERRY_ASSIGN_OR_RETURN(TensorId victim, corruption_victim(options.corruption, sized, program));

  std::unique_ptr<Executor> ex(new Executor(std::move(sized), backend, std::move(compiled), std::move(analysis),
                                            std::move(program), std::move(run_placement), options, budget));
  ex->predicted_peak_bytes_ = predicted;
  ex->predicted_live_peak_bytes_ = predicted_live;
  ex->guard_bytes_ = guard;
  ex->victim_ = victim;
  FERRY_RETURN_IF_ERROR(ex->setup_arena());
  FERRY_RETURN_IF_ERROR(ex->make_tiers());
  return ex;
}

Status Executor::setup_arena() {
  // Without guards the arena is the budget; with them, the widened placement (the budget then
  // bounds the measured live bytes, which exclude the guards).
  arena_bytes_ = guard_bytes_ > 0 ? std::max<uint64_t>(placement_.arena_bytes, 1) : budget_bytes_;
  // With SSD swaps, a region of whole pages, so that its base is page-aligned (Backend::allocate)
  // and the page-aligned blocks of swapped tensors (schedule/placement.h) are at page-aligned
  // addresses, which the SSD tier moves in place. It maps no more memory (a region maps whole
  // pages anyway) and the executor still uses [0, arena_bytes_) only; the backend's guard page then
  // sits up to a page past the budget's end.
  const bool ssd_swaps =
      std::any_of(program_.instructions.begin(), program_.instructions.end(),
                  [](const Instruction& in) { return in.kind == InstrKind::kSwapOut && in.tier == Tier::kSsd; });
  const uint64_t region_bytes = std::max<uint64_t>(arena_bytes_, 1);
  FERRY_ASSIGN_OR_RETURN(arena_,
                         backend_.allocate(ssd_swaps ? align_up(region_bytes, kDirectIoAlignment) : region_bytes));
  // The untouched pattern, so measured_extent_bytes() can find the highest byte written.
  FERRY_RETURN_IF_ERROR(backend_.fill(arena_, arena_bytes_, MemoryVerifier::kUntouchedByte));
  if (options_.verify_memory)
    verifier_ = std::make_unique<MemoryVerifier>(backend_, arena_, arena_bytes_, graph_.tensors.size());
  // Persistent tensors that live on the device across iterations: placed once, where the prologue
  // puts them.
  for (size_t k = 0; k < program_.instructions.size(); ++k) {
    const Instruction& in = program_.instructions[k];
    if (in.kind != InstrKind::kAlloc || !resident_[in.tensor]) continue;
    FERRY_RETURN_IF_ERROR(alloc_tensor(k, in));
  }
  return Status::Ok();
}

Status Executor::make_tiers() {
  // Every copy gets a fixed slot where the tier placement put it (schedule/tier_placement.h), so
  // no order of copies can fragment a tier, and a tier's capacity (a host-memory budget) is
  // checked against the placement before anything runs.
  tier_placement_[0] = place_tier(graph_, program_, Tier::kHost);
  tier_placement_[1] = place_tier(graph_, program_, Tier::kSsd);
  auto fixed = [](const TierPlacement& tp) {
    std::vector<FixedSlot> slots;
    for (size_t i = 0; i < tp.copies.size(); ++i)
      slots.push_back({.tensor = tp.copies[i].tensor, .bytes = tp.copies[i].bytes, .offset = tp.offsets[i]});
    return slots;
  };
  const TierPlacement& host_need = tier_placement_[0];
  const TierPlacement& ssd_need = tier_placement_[1];
  if (host_need.copies.empty() && ssd_need.copies.empty()) return Status::Ok();
  if (!host_need.copies.empty()) {
    HostTierOptions ho;
    ho.capacity_bytes = options_.host_tier_bytes ? options_.host_tier_bytes : host_need.bytes;
    if (ho.capacity_bytes < host_need.bytes)
      return Status::OutOfMemory(fmt::format(
          "the plan keeps up to {} ({} bytes) of copies on the host tier at once (placed in 4 KiB slots), above "
          "the host tier's capacity of {} ({} bytes); plan with that host budget (--host-budget) to spill the rest "
          "to the SSD tier",
          format_bytes(host_need.bytes), host_need.bytes, format_bytes(ho.capacity_bytes), ho.capacity_bytes));
    ho.checksum = options_.checksum;
    ho.codec = options_.host_codec;
    FERRY_ASSIGN_OR_RETURN(std::unique_ptr<HostTier> host, HostTier::create(ho));
    FERRY_RETURN_IF_ERROR(host->fix_slots(fixed(host_need)));
    host_tier_ = std::move(host);
  }
  if (!ssd_need.copies.empty()) {
    SsdTierOptions so;
    so.directory = options_.ssd_dir;
    so.capacity_bytes = options_.ssd_tier_bytes ? options_.ssd_tier_bytes : ssd_need.bytes;
    so.checksum = options_.checksum;
    so.fault = options_.ssd_fault;
    so.in_place = options_.ssd_in_place;
    if (!program_.ssd_codecs.empty()) {
      so.tensor_codecs.assign(graph_.tensors.size(), CodecId::kNone);
      for (const TensorCodec& c : program_.ssd_codecs) so.tensor_codecs[static_cast<size_t>(c.tensor)] = c.codec;
    }
    if (options_.ssd_measure_codecs) so.measure_codecs = true, so.tensor_classes = tensor_classes(graph_);
    if (options_.ssd_lossy_activations) {
      so.lossy_tensors.assign(graph_.tensors.size(), false);
      for (const Tensor& t : graph_.tensors)
        so.lossy_tensors[static_cast<size_t>(t.id)] = t.role == TensorRole::kActivation && t.dtype == DType::kF32;
    }
    FERRY_ASSIGN_OR_RETURN(std::unique_ptr<SsdTier> ssd, SsdTier::create(so));
    FERRY_RETURN_IF_ERROR(ssd->fix_slots(fixed(ssd_need)));
    ssd_tier_ = std::move(ssd);
  }
  FERRY_ASSIGN_OR_RETURN(engine_, TransferEngine::create(backend_));
  return Status::Ok();
}

// ---- the block table (Note [Measured memory]) ----

uint64_t Executor::payload_bytes_of(TensorId t) const {
  if (options_.corruption == PlanCorruption::kUndersizeTensor && t == victim_)
    return align_up(compiled_->tensor_bytes(t) / 2, kAlignment);  // a backend that misreports
  return compiled_->tensor_bytes(t);
}

std::string Executor::block_name(const LiveBlock& b) const {
  if (b.tensor != kNoTensor) return fmt::format("tensor '{}'", graph_.tensor(b.tensor).name);
  return fmt::format("the scratch of op '{}'", graph_.op(b.scratch_of).name);
}

Status Executor::acquire(uint64_t offset, const LiveBlock& b, OpId step) {
  const std::string name = block_name(b);
  if (offset > arena_bytes_ || b.block_bytes > arena_bytes_ - offset)
    return Status::Internal(fmt::format(
        "memory plan is corrupt: {} ({} bytes at arena offset {}, step {}) ends past the arena of {} bytes", name,
        b.block_bytes, offset, step, arena_bytes_));
  auto next = live_.lower_bound(offset);
  auto clash = [&](const std::map<uint64_t, LiveBlock>::iterator& it) {
    return Status::Internal(fmt::format(
        "memory plan is corrupt: {} at arena bytes [{}, {}) (step {}) overlaps {} at [{}, {}), which is still live",
        name, offset, offset + b.block_bytes, step, block_name(it->second), it->first,
        it->first + it->second.block_bytes));
  };
  if (next != live_.end() && next->first < offset + b.block_bytes) return clash(next);
  if (next != live_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.block_bytes > offset) return clash(prev);
  }
  live_.emplace_hint(next, offset, b);
  live_bytes_ += align_up(b.payload_bytes, kAlignment);
  peak_live_bytes_ = std::max(peak_live_bytes_, live_bytes_);
  if (verifier_) FERRY_RETURN_IF_ERROR(verifier_->on_acquire(offset, b.block_bytes, b.payload_bytes, name));
  return Status::Ok();
}

Status Executor::release(uint64_t offset, OpId step) {
  auto it = live_.find(offset);
  if (it == live_.end())
    return Status::Internal(
        fmt::format("memory plan is corrupt: step {} frees arena offset {}, where no block is live", step, offset));
  if (verifier_)
    FERRY_RETURN_IF_ERROR(verifier_->on_release(offset, fmt::format("the program before freeing it at step {}", step)));
  live_bytes_ -= align_up(it->second.payload_bytes, kAlignment);
  live_.erase(it);
  return Status::Ok();
}

Result<uint64_t> Executor::measured_extent_bytes() const {
  constexpr uint64_t kChunk = 1ull << 20;
  std::vector<std::byte> host(kChunk);
  for (uint64_t end = arena_bytes_; end > 0;) {
    const uint64_t begin = end > kChunk ? end - kChunk : 0;
    std::span<std::byte> chunk(host.data(), end - begin);
    FERRY_RETURN_IF_ERROR(backend_.copy_to_host(chunk, arena_ + begin));
    for (uint64_t i = chunk.size(); i > 0; --i)
      if (chunk[i - 1] != std::byte{MemoryVerifier::kUntouchedByte}) return begin + i;
    end = begin;
  }
  return uint64_t{0};
}

// ---- transfers ----

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

Status Executor::drop_copies(TensorId t) {
  if (has_copy_[t] & 1) FERRY_RETURN_IF_ERROR(engine_->discard(t, *host_tier_));
  if (has_copy_[t] & 2) FERRY_RETURN_IF_ERROR(engine_->discard(t, *ssd_tier_));
  has_copy_[t] = 0;
  return Status::Ok();
}

// ---- initialisation ----

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
    FERRY_RETURN_IF_ERROR(store_persistent(t.id, std::as_bytes(std::span<const float>(host.data(), host.size()))));
  }
  optimizer_step_ = 0;
  return Status::Ok();
}

Status Executor::store_persistent(TensorId t, std::span<const std::byte> plain) {
  if (!resident_[t]) return write_home_copy(t, plain);
  FERRY_RETURN_IF_ERROR(compiled_->from_plain(t, plain, address_of(t)));
  if (verifier_) FERRY_RETURN_IF_ERROR(verifier_->record(t, address_of(t), payload_bytes_of(t)));
  return Status::Ok();
}

Result<TrainingState> Executor::save_state() {
  if (engine_) FERRY_RETURN_IF_ERROR(engine_->drain());
  TrainingState state;
  state.persistent.resize(graph_.tensors.size());
  for (const Tensor& t : graph_.tensors) {
    if (!t.persistent()) continue;
    FERRY_ASSIGN_OR_RETURN(state.persistent[t.id], read_persistent(t.id));
  }
  state.optimizer_step = optimizer_step_;
  return state;
}

Status Executor::restore_state(const TrainingState& state) {
  if (state.persistent.size() != graph_.tensors.size())
    return Status::InvalidArgument(fmt::format("training state of {} tensors, this graph has {}",
                                               state.persistent.size(), graph_.tensors.size()));
  for (const Tensor& t : graph_.tensors) {
    if (!t.persistent()) continue;
    const std::vector<std::byte>& plain = state.persistent[t.id];
    const uint64_t expected = static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype);
    if (plain.size() != expected)
      return Status::InvalidArgument(fmt::format("training state of '{}': {} bytes, expected {}", t.name,
                                                 plain.size(), expected));
    FERRY_RETURN_IF_ERROR(store_persistent(t.id, plain));
  }
  optimizer_step_ = state.optimizer_step;
  return Status::Ok();
}

Status Executor::write_home_copy(TensorId t, std::span<const std::byte> plain) {
  const Tier home = *program_.home_tier(t);
  SwapTier& where = tier(home);
  std::vector<std::byte> layout(compiled_->tensor_bytes(t));
  FERRY_RETURN_IF_ERROR(compiled_->plain_to_layout(t, plain, layout));
  if (std::optional<SwapSlot> old = where.find(t)) where.release(*old);
  FERRY_ASSIGN_OR_RETURN(SwapSlot slot, where.reserve(t, layout.size()));
  FERRY_RETURN_IF_ERROR(where.write(slot, std::span<const std::byte>(layout)));
  has_copy_[t] = home == Tier::kHost ? 1 : 2;
  if (verifier_) {
    // The hash of the layout bytes, as a swap-in will land them.
    Hash64 h;
    h.update(layout);
    verifier_->set_record(t, h.digest());
  }
  return Status::Ok();
}

// ---- one iteration ----

Status Executor::alloc_tensor(size_t k, const Instruction& in) {
  const TensorId t = in.tensor;
  if (resident_[t] && block_of_[t] != kNoBlock) return Status::Ok();  // placed in create()
  if (in.inherit != kNoTensor) {
    // In place: the output takes over the input's block; the input is still read by this step's
    // op and dies with it (with its copies).
    FERRY_RETURN_IF_ERROR(wait_out(in.inherit));
    FERRY_RETURN_IF_ERROR(drop_copies(in.inherit));
    block_[t] = block_[in.inherit];
    block_of_[t] = block_of_[in.inherit];
    inherited_.push_back(in.inherit);
    return Status::Ok();
  }
  const uint64_t offset = placement_.offset[k];
  LiveBlock b{.payload_bytes = payload_bytes_of(t), .tensor = t};
  b.block_bytes = guard_bytes_ > 0 ? align_up(b.payload_bytes + 2 * guard_bytes_, kAlignment)
                                   : align_up(b.payload_bytes, kAlignment);
  if (b.block_bytes == 0) {  // holds no memory; its address is never dereferenced
    block_[t] = offset;
    block_of_[t] = kZeroBlock;
  } else {
    FERRY_RETURN_IF_ERROR(acquire(offset, b, in.step));
    block_[t] = offset + guard_bytes_;
    block_of_[t] = offset;
  }
  if (options_.corruption == PlanCorruption::kWriteAfterFree && t == victim_) {
    // A runtime bug: the block goes back to the free space while the tensor keeps its address.
    FERRY_RETURN_IF_ERROR(release(offset, in.step));
    block_of_[t] = kNoBlock;
  }
  return Status::Ok();
}

Status Executor::load_input(TensorId t, const std::vector<TensorId>& inputs,
                            const std::vector<std::vector<std::byte>>& host_inputs) {
  size_t i = static_cast<size_t>(std::find(inputs.begin(), inputs.end(), t) - inputs.begin());
  FERRY_RETURN_IF_ERROR(compiled_->from_plain(t, host_inputs[i], address_of(t)));
  if (verifier_) FERRY_RETURN_IF_ERROR(verifier_->record(t, address_of(t), payload_bytes_of(t)));
  return Status::Ok();
}

Status Executor::free_tensor(const Instruction& in) {
  const TensorId t = in.tensor;
  if (resident_[t]) return Status::Ok();
  // A block is released only after its swap-out has completed.
  FERRY_RETURN_IF_ERROR(wait_out(t));
  if (block_of_[t] == kNoBlock)
    return Status::Internal(fmt::format("memory plan is corrupt: step {} frees tensor '{}', which holds no block",
                                        in.step, graph_.tensor(t).name));
  if (block_of_[t] != kZeroBlock) FERRY_RETURN_IF_ERROR(release(block_of_[t], in.step));
  block_[t] = block_of_[t] = kNoBlock;
  gone_at_[t] = in.step;
  if (in.kind == InstrKind::kFree) {
    FERRY_RETURN_IF_ERROR(drop_copies(t));
    if (verifier_) verifier_->forget(t);
  }
  return Status::Ok();
}

Status Executor::check_resident(const Op& op, OpId step) const {
  auto missing = [&](TensorId t, std::string_view how) {
    const int32_t gone = gone_at_[t];
    return Status::Internal(fmt::format(
        "memory plan is corrupt: {} {} tensor '{}', which is not on the device ({})", op_labels_[op.id], how,
        graph_.tensor(t).name, gone < 0 ? "it was never brought there" : fmt::format("it left at step {}", gone)));
  };
  for (TensorId t : op.inputs)
    if (block_[t] == kNoBlock) return missing(t, "reads");
  for (TensorId t : op.outputs)
    if (block_[t] == kNoBlock) return missing(t, "writes");
  (void)step;
  return Status::Ok();
}

Status Executor::run_op(OpId id, const RunContext& ctx, DevicePtr scratch) {
  const Op& op = graph_.ops[id];
  in_ptrs_.clear();
  out_ptrs_.clear();
  for (TensorId t : op.inputs) in_ptrs_.push_back(address_of(t));
  for (TensorId t : op.outputs) out_ptrs_.push_back(address_of(t));
  const auto op_start = std::chrono::steady_clock::now();
  Status s;
  {
    ScopedFaultActivity activity(op_labels_[id].c_str());
    s = compiled_->run(id, in_ptrs_, out_ptrs_, scratch, ctx);
  }
  if (options_.record_op_times) {
    op_times_us_.resize(graph_.ops.size());
    op_times_us_[id] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - op_start).count();
  }
  if (!s.ok()) return s.with_context(fmt::format("op '{}'", op.name));
  return Status::Ok();
}

Status Executor::run_kernel(const Instruction& in, const RunContext& ctx) {
  const Op& op = graph_.ops[in.op];
  // A consumer never starts before its swap-ins have completed, and never overwrites a block a
  // swap-out is still reading.
  for (TensorId t : op.inputs) FERRY_RETURN_IF_ERROR(wait_in(t));
  for (TensorId t : op.outputs) FERRY_RETURN_IF_ERROR(wait_out(t));
  FERRY_RETURN_IF_ERROR(check_resident(op, in.step));
  const std::string& label = op_labels_[op.id];
  if (verifier_)
    for (TensorId t : op.inputs)
      FERRY_RETURN_IF_ERROR(
          verifier_->verify(t, graph_.tensor(t).name, address_of(t), payload_bytes_of(t), label));
  // An update makes every copy of the persistent tensors it writes stale.
  for (TensorId t : op.outputs)
    if (graph_.tensor(t).persistent() && has_copy_[t] != 0) FERRY_RETURN_IF_ERROR(drop_copies(t));
  DevicePtr scratch = scratch_block_ != kNoBlock ? arena_ + (scratch_block_ + guard_bytes_) : DevicePtr{};
  FERRY_RETURN_IF_ERROR(run_op(in.op, ctx, scratch));
  if (in.recompute) ++recomputed_ops_;
  for (TensorId t : inherited_) {
    if (block_of_[t] != kZeroBlock) live_.at(block_of_[t]).tensor = op.outputs.front();
    block_[t] = block_of_[t] = kNoBlock;
    gone_at_[t] = in.step;
    if (verifier_) verifier_->forget(t);
  }
  inherited_.clear();
  if (!verifier_) return Status::Ok();
  for (TensorId t : op.outputs) {
    // A recompute must reproduce the bits it replaces; anything else records what it wrote.
    if (in.recompute && verifier_->has_record(t)) {
      FERRY_RETURN_IF_ERROR(verifier_->verify(t, graph_.tensor(t).name, address_of(t), payload_bytes_of(t),
                                              fmt::format("the recompute of {}", label)));
    } else {
      FERRY_RETURN_IF_ERROR(verifier_->record(t, address_of(t), payload_bytes_of(t)));
    }
  }
  return verifier_->check(label);
}

Status Executor::run_instruction(size_t k, const Instruction& in, const RunContext& ctx,
                                 const std::vector<TensorId>& inputs,
                                 const std::vector<std::vector<std::byte>>& host_inputs) {
  switch (in.kind) {
    case InstrKind::kAlloc:
      FERRY_RETURN_IF_ERROR(alloc_tensor(k, in));
      if (graph_.tensor(in.tensor).role == TensorRole::kInput) return load_input(in.tensor, inputs, host_inputs);
      return Status::Ok();
    case InstrKind::kFree:
    case InstrKind::kRelease: return free_tensor(in);
    case InstrKind::kAllocScratch: {
      LiveBlock b{.payload_bytes = compiled_->scratch_bytes(in.op), .scratch_of = in.op};
      b.block_bytes = align_up(b.payload_bytes + 2 * guard_bytes_, kAlignment);
      FERRY_RETURN_IF_ERROR(acquire(placement_.offset[k], b, in.step));
      scratch_block_ = placement_.offset[k];
      return Status::Ok();
    }
    case InstrKind::kFreeScratch: {
      const uint64_t offset = std::exchange(scratch_block_, kNoBlock);
      return release(offset, in.step);
    }
    case InstrKind::kRun: return run_kernel(in, ctx);
    case InstrKind::kSwapOut:
      out_ticket_[in.tensor] = engine_->swap_out(in.tensor, address_of(in.tensor), in.bytes, tier(in.tier));
      has_copy_[in.tensor] |= in.tier == Tier::kHost ? 1 : 2;
      return Status::Ok();
    case InstrKind::kSwapIn:
      if (options_.corruption == PlanCorruption::kDropSwapIn && in.tensor == victim_)
        return Status::Ok();  // a runtime bug: the copy back is never issued
      in_ticket_[in.tensor] = engine_->swap_in(in.tensor, address_of(in.tensor), in.bytes, tier(in.tier));
      return Status::Ok();
    case InstrKind::kHostRun: return host_update(in, ctx);
    case InstrKind::kDrop: return drop_copies(in.tensor);
  }
  return Status::Ok();
}

// Note [Host updates]
//   An update the plan runs on the host (kHostRun) is a task on the transfer engine's host thread:
//   it reads the gradient's copy and the copies of the weight and optimizer state from their tiers
//   into host buffers, runs the update with the loops the device kernels run
//   (backend/host_optimizer.h), and writes the persistent operands back to their slots. The
//   engine starts it after the transfers of those slots (the gradient's swap-out), and orders later
//   swap-ins and discards of them after it; the compute thread does not wait for it. Reading
//   through buffers costs two host copies per operand on the host tier; it is what lets the same
//   task run on SSD copies. With the memory checks, the task hashes what it wrote and the next
//   iteration's swap-ins of those tensors are checked against it.
Status Executor::host_update(const Instruction& in, const RunContext& ctx) {
  const Op& op = graph_.ops[in.op];
  std::vector<TensorId> tensors;  // distinct operands, inputs first
  std::vector<TransferEngine::SlotRef> reads, writes;
  for (const auto* list : {&op.inputs, &op.outputs})
    for (TensorId t : *list) {
      if (std::find(tensors.begin(), tensors.end(), t) != tensors.end()) continue;
      tensors.push_back(t);
    }
  // What it writes back: the persistent tensors among its outputs (one it only reads, such as
  // AMP's loss scale, is not a write: later swap-ins of it need not wait for this task).
  const auto written = [&op, this](TensorId t) {
    return graph_.tensor(t).persistent() && op.writes(t);
  };
  std::vector<bool> writes_back;
  for (TensorId t : tensors) writes_back.push_back(written(t));
  std::vector<SwapTier*> where;
  for (TensorId t : tensors) {
    const std::optional<Tier> home = program_.home_tier(t);
    SwapTier* tr = &tier(graph_.tensor(t).persistent() && home ? *home : in.tier);
    where.push_back(tr);
    reads.push_back({tr, t});
    if (written(t)) writes.push_back({tr, t});
  }
  const int64_t step = ctx.optimizer_step;
  const bool record = verifier_ != nullptr;
  auto task = [this, id = op.id, tensors, where, writes_back, step, record]() -> Status {
    const Op& u = graph_.ops[id];
    std::vector<std::vector<std::byte>> buffers(tensors.size());
    std::vector<std::span<std::byte>> spans;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const std::optional<SwapSlot> slot = where[i]->find(tensors[i]);
      if (!slot)
        return Status::Internal(fmt::format("host update '{}': the {} tier holds no copy of '{}'", u.name,
                                            where[i]->name(), graph_.tensor(tensors[i]).name));
      buffers[i].resize(slot->bytes);
      FERRY_RETURN_IF_ERROR(where[i]->read(*slot, std::span<std::byte>(buffers[i])));
      spans.emplace_back(buffers[i]);
    }
    FERRY_RETURN_IF_ERROR(run_update_on_host(graph_, u, step, tensors, spans));
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (!writes_back[i]) continue;
      const std::optional<SwapSlot> slot = where[i]->find(tensors[i]);
      FERRY_RETURN_IF_ERROR(where[i]->write(*slot, std::span<const std::byte>(buffers[i])));
      if (record) {  // the content the next swap-in must bring (memory checks), set at the boundary
        Hash64 h;
        h.update(buffers[i]);
        std::lock_guard lock(host_records_mu_);
        host_records_.emplace_back(tensors[i], h.digest());
      }
    }
    return Status::Ok();
  };
  const TransferTicket ticket = engine_->run_on_host(std::move(task), reads, writes);
  if (!ticket) return engine_->status().ok() ? Status::Internal("host update refused") : engine_->status();
  ++host_updates_;
  if (verifier_)  // the new values' hashes come from the task, at the end of the iteration
    for (TensorId t : tensors)
      if (written(t)) verifier_->forget(t);
  return Status::Ok();
}

Status Executor::end_iteration() {
  if (engine_) FERRY_RETURN_IF_ERROR(engine_->drain());
  if (verifier_) {  // what the host updates wrote: the next swap-ins are checked against it
    std::lock_guard lock(host_records_mu_);
    for (const auto& [t, hash] : host_records_) verifier_->set_record(t, hash);
    host_records_.clear();
  }
  FERRY_RETURN_IF_ERROR(backend_.synchronize());
  if (engine_) {
    // One iteration's records, in iteration time: the engine keeps nothing beyond them.
    last_transfers_ = engine_->take_records();
    for (TransferRecord& r : last_transfers_) {
      r.issue_us -= iteration_start_us_;
      r.start_us -= iteration_start_us_;
      r.end_us -= iteration_start_us_;
    }
  }
  // Whatever the program leaves allocated besides persistent tensors (the loss) dies now.
  for (const Tensor& t : graph_.tensors) {
    if (resident_[t.id] || block_of_[t.id] == kNoBlock) continue;
    if (block_of_[t.id] != kZeroBlock) FERRY_RETURN_IF_ERROR(release(block_of_[t.id], static_cast<OpId>(graph_.ops.size())));
    block_[t.id] = block_of_[t.id] = kNoBlock;
    if (verifier_) verifier_->forget(t.id);
  }
  if (verifier_) return verifier_->check("the end of the iteration");
  return Status::Ok();
}

Result<IterationStats> Executor::run_iteration(int64_t iteration, DataSource& data) {
  const auto start = std::chrono::steady_clock::now();
  iteration_start_us_ = engine_ ? engine_->now_us() : 0;
  std::vector<std::vector<std::byte>> host_inputs;
  FERRY_RETURN_IF_ERROR(data.fill(graph_, iteration, host_inputs));
  const std::vector<TensorId> inputs = data_inputs(graph_);
  RunContext ctx;
  ctx.iteration = iteration;
  ctx.optimizer_step = ++optimizer_step_;
  ctx.dropout_seed = options_.seed;
  stall_seconds_ = 0;
  recomputed_ops_ = 0;
  host_updates_ = 0;
  std::fill(gone_at_.begin(), gone_at_.end(), -1);
  for (size_t k = 0; k < program_.instructions.size(); ++k)
    FERRY_RETURN_IF_ERROR(run_instruction(k, program_.instructions[k], ctx, inputs, host_inputs));
  float loss = std::nanf("");
  if (graph_.loss != kNoTensor && block_[graph_.loss] != kNoBlock) {
    if (engine_) FERRY_RETURN_IF_ERROR(engine_->drain());
    FERRY_RETURN_IF_ERROR(compiled_->to_plain(graph_.loss, address_of(graph_.loss),
                                              std::as_writable_bytes(std::span<float>(&loss, 1))));
  }
  FERRY_RETURN_IF_ERROR(end_iteration());
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
  if (block_[t] != kNoBlock) {
    FERRY_RETURN_IF_ERROR(compiled_->to_plain(t, address_of(t), host));
    return host;
  }
  // Off the device between iterations: its home tier holds it, in the device layout.
  const std::optional<Tier> home = program_.home_tier(t);
  if (!home) return Status::Internal(fmt::format("persistent tensor '{}' is nowhere", tt.name));
  if (engine_) FERRY_RETURN_IF_ERROR(engine_->drain());
  std::optional<SwapSlot> slot = tier(*home).find(t);
  if (!slot) return Status::Internal(fmt::format("offloaded tensor '{}' has no copy on {}", tt.name, to_string(*home)));
  std::vector<std::byte> layout(slot->bytes);
  FERRY_RETURN_IF_ERROR(tier(*home).read(*slot, std::span<std::byte>(layout)));
  FERRY_RETURN_IF_ERROR(compiled_->layout_to_plain(t, layout, host));
  return host;
}

}  // namespace ferry
