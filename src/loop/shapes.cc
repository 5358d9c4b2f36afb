// Variable shapes. See shapes.h for the design.
#include "loop/shapes.h"

#include <algorithm>
#include <charconv>
#include <unordered_map>

#include <fmt/format.h>

#include "common/hash.h"

namespace ferry {

Result<ShapeRange> parse_shape_range(std::string_view dimension, std::string_view text, int64_t bucket) {
  auto bad = [&] {
    return Status::InvalidArgument(fmt::format("--{}-range '{}': expected MIN:MAX with 1 <= MIN <= MAX (e.g. 128:1024)",
                                               dimension, text));
  };
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) return bad();
  ShapeRange r{.dimension = std::string(dimension), .bucket = bucket};
  auto number = [](std::string_view s, int64_t& out) {
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && end == s.data() + s.size();
  };
  if (!number(text.substr(0, colon), r.min) || !number(text.substr(colon + 1), r.max) || r.min < 1 || r.max < r.min)
    return bad();
  if (bucket < 1)
    return Status::InvalidArgument(fmt::format("--bucket must be at least 1, got {}", bucket));
  return r;
}

int64_t draw_shape(const ShapeRange& r, uint64_t seed, int64_t iteration) {
  const uint64_t h = splitmix64(splitmix64(seed ^ 0x5ba9e5ull) ^ static_cast<uint64_t>(iteration));
  return r.min + static_cast<int64_t>(h % static_cast<uint64_t>(r.max - r.min + 1));
}

int64_t bucket_of(const ShapeRange& r, int64_t value) {
  return std::min((value + r.bucket - 1) / r.bucket * r.bucket, r.max);
}

Result<TrainingState> carry_state(const TrainingState& state, const Graph& from, const Graph& to) {
  std::unordered_map<std::string, TensorId> by_name;
  for (const Tensor& t : from.tensors)
    if (t.persistent()) by_name.emplace(t.name, t.id);
  TrainingState out;
  out.optimizer_step = state.optimizer_step;
  out.persistent.resize(to.tensors.size());
  for (const Tensor& t : to.tensors) {
    if (!t.persistent()) continue;
    auto it = by_name.find(t.name);
    if (it == by_name.end())
      return Status::InvalidArgument(fmt::format("tensor '{}' of the new shape has no counterpart", t.name));
    const std::vector<std::byte>& bytes = state.persistent[static_cast<size_t>(it->second)];
    if (bytes.size() != static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype))
      return Status::InvalidArgument(
          fmt::format("tensor '{}' has another size in the new shape: weights cannot be shared", t.name));
    out.persistent[static_cast<size_t>(t.id)] = bytes;
  }
  return out;
}

Result<LoopIteration> ShapeBuckets::run_iteration(int64_t iteration) {
  FERRY_RETURN_IF_ERROR(prepare(iteration));
  Bucket& b = *buckets_.at(active_);
  ++b.iterations;
  return b.loop->run_iteration(iteration, *b.parts.data);
}

Status ShapeBuckets::prepare(int64_t iteration) {
  const int64_t value = bucket_of(range_, draw_shape(range_, seed_, iteration));
  if (value != active_) {
    std::optional<TrainingState> state;
    const Graph* from = nullptr;
    if (active_ >= 0) {
      Bucket& old = *buckets_.at(active_);
      FERRY_ASSIGN_OR_RETURN(state, old.loop->suspend());
      from = &old.parts.graph;
    }
    auto it = buckets_.find(value);
    if (it == buckets_.end()) {
      auto b = std::make_unique<Bucket>();
      b->value = value;
      FERRY_ASSIGN_OR_RETURN(b->parts, factory_(value));
      FERRY_ASSIGN_OR_RETURN(b->loop, TrainingLoop::create(b->parts.graph, b->parts.sized, backend_, b->parts.plan,
                                                           b->parts.options));
      if (state) {
        FERRY_ASSIGN_OR_RETURN(TrainingState carried, carry_state(*state, *from, b->parts.graph));
        FERRY_RETURN_IF_ERROR(b->loop->executor().restore_state(carried));
      } else {
        FERRY_RETURN_IF_ERROR(b->loop->initialize());
      }
      it = buckets_.emplace(value, std::move(b)).first;
    } else {
      FERRY_ASSIGN_OR_RETURN(TrainingState carried, carry_state(*state, *from, it->second->parts.graph));
      FERRY_RETURN_IF_ERROR(it->second->loop->resume(carried));
    }
    active_ = value;
  }
  return Status::Ok();
}

uint64_t ShapeBuckets::predicted_live_peak_bytes() const {
  uint64_t m = 0;
  for (const auto& [v, b] : buckets_) m = std::max(m, b->loop->predicted_live_peak_bytes());
  return m;
}

uint64_t ShapeBuckets::predicted_peak_bytes() const {
  uint64_t m = 0;
  for (const auto& [v, b] : buckets_) m = std::max(m, b->loop->predicted_peak_bytes());
  return m;
}

uint64_t ShapeBuckets::measured_peak_bytes() const {
  uint64_t m = 0;
  for (const auto& [v, b] : buckets_) m = std::max(m, b->loop->measured_peak_bytes());
  return m;
}

Result<uint64_t> ShapeBuckets::measured_extent_bytes() const {
  uint64_t m = 0;
  for (const auto& [v, b] : buckets_) {
    FERRY_ASSIGN_OR_RETURN(uint64_t e, b->loop->measured_extent_bytes());
    m = std::max(m, e);
  }
  return m;
}

uint64_t ShapeBuckets::tier_peak_bytes(Tier t) const {
  uint64_t m = 0;
  for (const auto& [v, b] : buckets_) m = std::max(m, b->loop->tier_peak_bytes(t));
  return m;
}

HostIoStats ShapeBuckets::host_io_stats() const {
  HostIoStats s;
  for (const auto& [v, b] : buckets_) s += b->loop->host_io_stats();
  return s;
}

SsdIoStats ShapeBuckets::ssd_io_stats() const {
  SsdIoStats s;
  for (const auto& [v, b] : buckets_) s += b->loop->ssd_io_stats();
  return s;
}

uint64_t ShapeBuckets::bytes_moved(Direction d) const {
  uint64_t n = 0;
  for (const auto& [v, b] : buckets_) n += b->loop->bytes_moved(d);
  return n;
}

double ShapeBuckets::planning_seconds() const {
  double s = 0;
  for (const auto& [v, b] : buckets_)
    for (const PlanVersion& p : b->loop->plan_versions()) s += p.planning_seconds;
  return s;
}

}  // namespace ferry
