// Profiler: information collection (the seed design's second module). It measures what one
// training iteration costs on this machine: every op's time (median over several iterations after
// warm-up) and the bandwidth and latency of each transfer path Ferry uses here, device arena <->
// host pool (memcpy through the backend) and device <-> SSD (direct I/O files), at several request
// sizes and queue depths. The results become a trace with `time_us` filled and a hardware profile.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "common/status.h"
#include "cost/profile.h"
#include "data/data.h"
#include "graph/graph.h"

namespace ferry {

struct OpProfile {
  std::vector<double> median_us;   // per op
  std::vector<double> iteration_ms;  // every measured iteration (warm-up excluded)
  uint64_t measured_peak_bytes = 0;  // high-water of the bytes the executor held (measured)
};

// Runs `warmup + iters` training iterations and returns every op's median time.
Result<OpProfile> profile_ops(const Graph& g, Backend& backend, DataSource& data, int warmup, int iters,
                              uint64_t seed);

struct TransferSample {
  std::string path;          // a Link: "d2h", "h2d", "ssd_write", "ssd_read"
  uint64_t request_bytes = 0;
  int queue_depth = 1;
  double bytes_per_s = 0;
  double latency_us = 0;     // time of one request (per worker at queue_depth)
};

// Device arena <-> host pool copies through the backend, at several sizes.
Result<std::vector<TransferSample>> measure_host_link(Backend& backend);
// Direct-I/O writes and reads of a temporary file in `dir`, at several request sizes and queue
// depths. The file has no name on disk while it is used (O_TMPFILE, or created exclusively under a
// random name and unlinked at once), so no signal or error leaves it behind and no planted file
// or symlink is opened. Errors: kIoError naming the directory (e.g. a full disk).
Result<std::vector<TransferSample>> measure_storage(const std::string& dir, uint64_t total_bytes);

// Compute interference of one transfer path: the median iteration time of `g` (no plan) alone
// and while a copy on the path runs back to back beside it the whole time.
struct InterferenceSample {
  std::string path;      // a Link, as TransferSample::path
  double alone_ms = 0;   // the mean of the medians measured before and after every path
  double with_ms = 0;
  // with / alone - 1, clamped to [0, 100]: ops run (1 + factor) times slower while the path
  // moves data (HardwareProfile's compute_interference).
  double factor() const;
};

// Runs `warmup` and then, per condition (alone, each path, alone again), `iters` iterations of
// `g` with the path's copies looping on another thread: device arena <-> host memcpy through the
// backend (d2h, h2d) and 8 MiB direct-I/O writes and reads of a temporary file in `dir`, as
// measure_storage makes it (ssd_write, ssd_read). Beside a path, more iterations run until its
// loop has completed two copies (a small model's iteration can be shorter than one copy), for at
// most 30 s. Errors: the executor's; kIoError naming the directory, or a path that completed no
// copy in that time.
Result<std::vector<InterferenceSample>> measure_interference(const Graph& g, Backend& backend, DataSource& data,
                                                             const std::string& dir, int warmup, int iters,
                                                             uint64_t seed);

// A hardware profile of this machine from the measurements (peak FLOP/s = the best rate an op of
// `g` reached; transfer paths from the samples; each path's compute interference from
// `interference`, 0 for a path it lacks).
HardwareProfile make_local_profile(const Graph& g, const OpProfile& ops, const std::vector<TransferSample>& link,
                                   const std::vector<TransferSample>& storage,
                                   const std::vector<InterferenceSample>& interference = {});

}  // namespace ferry
