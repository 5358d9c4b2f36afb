// Liveness extraction: per-step inputs, per-tensor uses, buffers after in-place merging, live bytes.
//
// Design
// - Pass 1 walks the ops once and records, per tensor, its producer and its readers (in execution
//   order, so first/last/forward/backward uses fall out without sorting).
// - Pass 2 walks the steps again and creates a buffer whenever a tensor comes alive; an in-place
//   output joins its input's buffer instead (the rule in analysis.h). Because
//   `in` must die at the op, only the newest tensor of a buffer is ever alive, so a chain of
//   in-place ops (batch norm -> relu -> dropout) becomes one buffer whose lifetime is the union.
//   Creating buffers in step order leaves `buffers` sorted by first_step.
// - Live bytes per step come from difference arrays (+bytes at the first step, -bytes one past the
//   last), so the whole extraction is O(ops + tensors + op inputs).
// - Byte sums are checked for overflow once, up front, over everything any later sum can contain
//   (persistent + transient + scratch + alignment padding per buffer), so the arithmetic below and
//   in the planner can be plain.

#include "analysis/liveness.h"

#include <algorithm>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "common/units.h"

namespace ferry {

namespace {

// A transient tensor is materialized when it exists at some step: a data input, or produced by an op.
bool materialized(const Tensor& t, const TensorInfo& info) { return !t.persistent() && info.first_use != kNoOp; }

// The in-place rule of analysis.h, per output of `op`: Graph::in_place_sources, and the input
// still has its buffer and dies at this op.
std::vector<TensorId> in_place_inputs(const Graph& g, const Op& op, const std::vector<TensorInfo>& info,
                                      const std::vector<int32_t>& buffer_of) {
  std::vector<TensorId> sources = g.in_place_sources(op);
  for (TensorId& in : sources)
    if (in != kNoTensor &&
        !(buffer_of[static_cast<size_t>(in)] >= 0 && info[static_cast<size_t>(in)].last_use == op.id))
      in = kNoTensor;
  return sources;
}

uint64_t scratch_bytes(const AnalysisOptions& options, size_t op) {
  return options.op_scratch_bytes.empty() ? 0 : options.op_scratch_bytes[op];
}

// Running sum of a difference array: out[s] = delta[0] + ... + delta[s] for s < out.size().
// Intermediate wrap-around of uint64 cancels out because every true partial sum fits.
void prefix_sum(const std::vector<uint64_t>& delta, std::vector<uint64_t>& out) {
  uint64_t running = 0;
  for (size_t s = 0; s < out.size(); ++s) out[s] = running += delta[s];
}

// Pass 1: distinct readers per step and per tensor; producers of transient tensors.
void record_uses(const Graph& g, Analysis& out) {
  const size_t num_tensors = g.tensors.size();
  out.step_inputs.assign(g.ops.size(), {});
  out.tensors.assign(num_tensors, TensorInfo{});
  std::vector<OpId> read_at(num_tensors, kNoOp);  // the last op seen reading each tensor
  for (const Op& op : g.ops) {
    std::vector<TensorId>& reads = out.step_inputs[static_cast<size_t>(op.id)];
    for (TensorId t : op.inputs) {
      if (read_at[static_cast<size_t>(t)] == op.id) continue;
      read_at[static_cast<size_t>(t)] = op.id;
      reads.push_back(t);
      out.tensors[static_cast<size_t>(t)].consumers.push_back(op.id);
    }
    for (TensorId t : op.outputs)
      if (!g.tensor(t).persistent()) out.tensors[static_cast<size_t>(t)].producer = op.id;
  }
}

// First and last use of every tensor, its last forward and first backward use, and the idle
// interval between them.
void compute_lifetimes(const Graph& g, std::vector<TensorInfo>& info) {
  const OpId final_step = static_cast<OpId>(g.ops.size() - 1);
  for (const Tensor& t : g.tensors) {
    TensorInfo& ti = info[static_cast<size_t>(t.id)];
    if (t.persistent()) {
      ti.first_use = 0;  // resident for the whole iteration
      ti.last_use = final_step;
    } else {
      if (t.role == TensorRole::kInput) ti.first_use = 0;
      else if (ti.producer != kNoOp) ti.first_use = ti.producer;
      if (ti.first_use != kNoOp) {
        ti.last_use = ti.consumers.empty() ? ti.first_use : std::max(ti.first_use, ti.consumers.back());
        if (t.free_after != kNoOp) ti.last_use = std::max(ti.last_use, t.free_after);  // the framework holds it
        if (t.id == g.loss) ti.last_use = final_step;  // the caller reads the loss after the iteration
      }
    }
    // Forward uses: the step it comes alive (transient only) and forward readers, up to the first
    // backward reader (with several forward/backward passes, the gap of the first pass that reads it
    // in backward).
    OpId last_forward = kNoOp, first_backward = kNoOp;
    if (materialized(t, ti) && g.op(ti.first_use).phase == Phase::kForward) last_forward = ti.first_use;
    for (OpId c : ti.consumers) {
      const Phase phase = g.op(c).phase;
      if (phase == Phase::kForward && first_backward == kNoOp) last_forward = std::max(last_forward, c);
      else if (phase == Phase::kBackward && first_backward == kNoOp) first_backward = c;
    }
    ti.last_forward_use = last_forward;
    ti.first_backward_use = first_backward;
    if (last_forward != kNoOp && first_backward != kNoOp && first_backward > last_forward)
      ti.idle_steps = first_backward - last_forward;
  }
}

// Byte totals, checked once for overflow (see the design note).
Status sum_bytes(const Graph& g, const AnalysisOptions& options, Analysis& out) {
  const std::vector<TensorInfo>& info = out.tensors;
  out.persistent_bytes = out.weight_bytes = out.activation_bytes = 0;
  std::optional<uint64_t> tensor_total = 0, scratch_total = 0, activations = 0, persistent_region = 0;
  uint64_t max_buffers = 0;  // an upper bound on buffers: one per materialized tensor and per scratch
  auto add = [](std::optional<uint64_t>& sum, uint64_t bytes) {
    if (sum) sum = checked_add(*sum, bytes);
  };
  for (const Tensor& t : g.tensors) {
    const TensorInfo& ti = info[static_cast<size_t>(t.id)];
    if (t.persistent() || materialized(t, ti)) add(tensor_total, t.bytes);
    if (materialized(t, ti)) ++max_buffers;
    if (t.persistent()) {
      out.persistent_bytes += t.bytes;  // bounded by tensor_total
      add(persistent_region, align_up(t.bytes, options.alignment));
    }
    if (t.role == TensorRole::kWeight) out.weight_bytes += t.bytes;
    if (t.role == TensorRole::kActivation || t.role == TensorRole::kWorkspace) add(activations, t.bytes);
  }
  for (size_t i = 0; i < g.ops.size(); ++i) {
    add(scratch_total, scratch_bytes(options, i));
    max_buffers += scratch_bytes(options, i) > 0 ? 1 : 0;
  }
  const std::optional<uint64_t> padding = checked_mul(max_buffers, options.alignment - 1);
  std::optional<uint64_t> total = tensor_total;
  if (scratch_total) add(total, *scratch_total);
  if (padding) add(total, *padding);
  if (!total || !scratch_total || !padding || !activations || !persistent_region) {
    auto show = [](const std::optional<uint64_t>& v) { return v ? fmt::format("{}", *v) : std::string("over 2^64"); };
    return Status::InvalidArgument(fmt::format(
        "graph '{}': tensors ({} bytes), op scratch ({} bytes) and alignment padding (up to {} buffers "
        "aligned to {}) sum past 2^64 bytes; a tensor size or op_scratch_bytes is wrong",
        g.info.model, show(tensor_total), show(scratch_total), max_buffers, options.alignment));
  }
  out.activation_bytes = *activations;
  out.persistent_region_bytes = *persistent_region;
  return Status::Ok();
}

// Pass 2: buffers, in the order tensors come alive; an in-place output joins its input's buffer.
void build_buffers(const Graph& g, const AnalysisOptions& options, Analysis& out) {
  std::vector<TensorInfo>& info = out.tensors;
  std::vector<Buffer>& buffers = out.buffers;
  buffers.clear();
  std::vector<int32_t> buffer_of(g.tensors.size(), -1);
  auto open_buffer = [&](uint64_t bytes, OpId first, OpId last, TensorId tensor, OpId scratch_op) {
    Buffer b;
    b.id = static_cast<int32_t>(buffers.size());
    b.bytes = bytes;
    b.first_step = first;
    b.last_step = last;
    if (tensor != kNoTensor) b.tensors.push_back(tensor);
    b.scratch_of = scratch_op;
    buffers.push_back(std::move(b));
    return buffers.back().id;
  };
  auto open_tensor_buffer = [&](TensorId t) {
    const TensorInfo& ti = info[static_cast<size_t>(t)];
    buffer_of[static_cast<size_t>(t)] = open_buffer(g.tensor(t).bytes, ti.first_use, ti.last_use, t, kNoOp);
  };
  for (const Tensor& t : g.tensors)
    if (t.role == TensorRole::kInput) open_tensor_buffer(t.id);
  for (const Op& op : g.ops) {
    const std::vector<TensorId> sources =
        options.allow_inplace ? in_place_inputs(g, op, info, buffer_of) : std::vector<TensorId>(op.outputs.size(), kNoTensor);
    for (size_t k = 0; k < op.outputs.size(); ++k) {
      const TensorId t = op.outputs[k];
      if (g.tensor(t).persistent()) continue;
      if (sources[k] != kNoTensor) {
        const int32_t shared = buffer_of[static_cast<size_t>(sources[k])];
        Buffer& b = buffers[static_cast<size_t>(shared)];
        FERRY_CHECK(b.last_step == op.id, "buffer {} is still needed after in-place op '{}'", shared, op.name);
        b.tensors.push_back(t);
        b.last_step = std::max(b.last_step, info[static_cast<size_t>(t)].last_use);
        buffer_of[static_cast<size_t>(t)] = shared;
      } else {
        open_tensor_buffer(t);
      }
    }
    if (scratch_bytes(options, static_cast<size_t>(op.id)) > 0)
      open_buffer(scratch_bytes(options, static_cast<size_t>(op.id)), op.id, op.id, kNoTensor, op.id);
  }
  for (size_t t = 0; t < g.tensors.size(); ++t) info[t].buffer = buffer_of[t];
}

// Live bytes: free at last use (per tensor, plus scratch), shared (per buffer), keep-all
// (everything allocated so far, plus this step's scratch: scratch is op-private, not a tensor),
// and the three peaks.
void compute_live_bytes(const Graph& g, const AnalysisOptions& options, Analysis& out) {
  const size_t num_ops = g.ops.size();
  std::vector<uint64_t> free_delta(num_ops + 1, 0), shared_delta(num_ops + 1, 0), allocated_delta(num_ops + 1, 0);
  for (const Tensor& t : g.tensors) {
    const TensorInfo& ti = out.tensors[static_cast<size_t>(t.id)];
    if (!materialized(t, ti)) continue;
    free_delta[static_cast<size_t>(ti.first_use)] += t.bytes;
    free_delta[static_cast<size_t>(ti.last_use) + 1] -= t.bytes;
    allocated_delta[static_cast<size_t>(ti.first_use)] += t.bytes;
  }
  for (const Buffer& b : out.buffers) {
    shared_delta[static_cast<size_t>(b.first_step)] += b.bytes;
    shared_delta[static_cast<size_t>(b.last_step) + 1] -= b.bytes;
  }
  out.live_bytes_free_at_last_use.assign(num_ops, 0);
  out.live_bytes_shared.assign(num_ops, 0);
  std::vector<uint64_t> allocated(num_ops, 0);
  prefix_sum(free_delta, out.live_bytes_free_at_last_use);
  prefix_sum(shared_delta, out.live_bytes_shared);
  prefix_sum(allocated_delta, allocated);

  uint64_t keep_all = 0, free_at_last_use = 0, shared = 0;
  for (size_t s = 0; s < num_ops; ++s) {
    out.live_bytes_free_at_last_use[s] += scratch_bytes(options, s);
    keep_all = std::max(keep_all, allocated[s] + scratch_bytes(options, s));
    free_at_last_use = std::max(free_at_last_use, out.live_bytes_free_at_last_use[s]);
    shared = std::max(shared, out.live_bytes_shared[s]);
  }
  out.peak_bytes_keep_all = out.persistent_bytes + keep_all;
  out.peak_bytes_free_at_last_use = out.persistent_bytes + free_at_last_use;
  out.lower_bound_bytes = out.persistent_bytes + shared;
}

}  // namespace

Status compute_liveness(const Graph& g, const AnalysisOptions& options, Analysis& out) {
  FERRY_CHECK(!g.ops.empty(), "compute_liveness needs at least one op");
  record_uses(g, out);
  compute_lifetimes(g, out.tensors);
  FERRY_RETURN_IF_ERROR(sum_bytes(g, options, out));
  build_buffers(g, options, out);
  compute_live_bytes(g, options, out);
  return Status::Ok();
}

}  // namespace ferry
