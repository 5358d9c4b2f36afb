// Variable shapes: a transformer trained on sentences of varying length, or a network fed
// batches of varying size, draws a shape per iteration; shapes are rounded up to buckets and each
// bucket gets its own plan (a TrainingLoop: planned once, measured, cached, re-planned on drift),
// made the first time the bucket comes up and reused after.
//
// Design
// - A shape is drawn uniformly from [min, max] per iteration, from the run's seed and the
//   iteration number only (the same run draws the same shapes), and rounded up to a multiple of
//   the bucket size, capped at max. Bucketing bounds the number of plans (and compiled graphs) at
//   ceil((max - min) / bucket) + 1, at the price of padding: a bucket runs its full shape.
// - One executor at a time: device memory holds one arena. Changing bucket suspends the active
//   loop (its training state saved, its executor freed; its plan and compiled kernels kept),
//   carries the state over by tensor name (weights and optimizer state do not depend on the
//   sequence length or the batch: position embeddings are sized by the model's maximum), and
//   resumes or creates the other bucket's loop. Every bucket's plan is made for the same budget,
//   so the budget holds for every shape; each bucket's measured memory is its own executors'.
// - Planning time is measured per bucket (every plan version's planning and prediction time), so
//   a report can say what fraction of the run planning took.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "backend/backend.h"
#include "common/status.h"
#include "data/data.h"
#include "graph/graph.h"
#include "loop/training_loop.h"

namespace ferry {

struct ShapeRange {
  std::string dimension;  // "seq" or "batch"
  int64_t min = 0, max = 0;
  int64_t bucket = 1;     // values are rounded up to a multiple of this (capped at max)
};

// Parses "MIN:MAX" (1 <= MIN <= MAX) for `dimension`, with bucket size `bucket` (>= 1).
// InvalidArgument names the option and the accepted form.
Result<ShapeRange> parse_shape_range(std::string_view dimension, std::string_view text, int64_t bucket);
// The value drawn for `iteration` (uniform in [min, max]; a function of seed and iteration only).
int64_t draw_shape(const ShapeRange& r, uint64_t seed, int64_t iteration);
// min(ceil(value / bucket) * bucket, max).
int64_t bucket_of(const ShapeRange& r, int64_t value);

// The training state of `from` carried to `to`: persistent tensors by name. InvalidArgument when
// one of `to`'s is missing in `from` or has another size.
Result<TrainingState> carry_state(const TrainingState& state, const Graph& from, const Graph& to);

// What a bucket needs to train: its graph, the graph with the backend's sizes, how to plan it,
// the loop's options, and its data.
struct BucketParts {
  Graph graph;
  Graph sized;
  PlanFunction plan;
  LoopOptions options;
  std::unique_ptr<DataSource> data;
};
using BucketFactory = std::function<Result<BucketParts>(int64_t value)>;

class ShapeBuckets {
 public:
  struct Bucket {
    int64_t value = 0;
    BucketParts parts;
    std::unique_ptr<TrainingLoop> loop;
    int64_t iterations = 0;
  };

  ShapeBuckets(Backend& backend, ShapeRange range, uint64_t seed, BucketFactory factory)
      : backend_(backend), range_(std::move(range)), seed_(seed), factory_(std::move(factory)) {}

  // Runs `iteration` in the bucket of its drawn shape: makes that bucket's loop on first use
  // (planning it), switching the executor over when the bucket changes. The first bucket's
  // weights are initialised from the seed.
  Result<LoopIteration> run_iteration(int64_t iteration);
  // Makes the bucket of `iteration`'s shape the active one (planning it and making its executor
  // when it is new) without running anything: a caller reports set-up errors (a budget no plan
  // fits, a precision the backend cannot train) before the first iteration starts.
  Status prepare(int64_t iteration);

  const std::map<int64_t, std::unique_ptr<Bucket>>& buckets() const { return buckets_; }
  const ShapeRange& range() const { return range_; }
  // The bucket of the last iteration (an iteration must have run).
  const Bucket& active() const { return *buckets_.at(active_); }
  TrainingLoop& active_loop() { return *buckets_.at(active_)->loop; }
  // Maxima over every bucket's executors (measured).
  uint64_t measured_peak_bytes() const;
  Result<uint64_t> measured_extent_bytes() const;
  // Maxima over every bucket's plans (predicted): the counterparts of the measured maxima.
  uint64_t predicted_live_peak_bytes() const;
  uint64_t predicted_peak_bytes() const;
  uint64_t tier_peak_bytes(Tier t) const;
  uint64_t bytes_moved(Direction d) const;
  SsdIoStats ssd_io_stats() const;
  HostIoStats host_io_stats() const;
  // Planning and prediction time of every plan of every bucket (measured).
  double planning_seconds() const;

 private:
  Backend& backend_;
  ShapeRange range_;
  uint64_t seed_;
  BucketFactory factory_;
  std::map<int64_t, std::unique_ptr<Bucket>> buckets_;
  int64_t active_ = -1;
};

}  // namespace ferry
