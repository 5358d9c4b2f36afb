// Views of a simulated iteration: a Chrome trace event file (opens in Perfetto, ui.perfetto.dev,
// or chrome://tracing) and an SVG plot of device memory against the budget.
//
// Both read only a SimResult, which must have been simulated with SimOptions::record_timeline.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "sim/simulator.h"

namespace ferry {

// The trace as Chrome's JSON trace event format: one process ("ferry sim: MODEL on DEVICE"),
// one thread per stream (compute, d2h, h2d, ssd_write, ssd_read) holding complete ("X") events,
// stalls as events on the compute thread, a counter track "device memory" (bytes in use and the
// allocator's high-water mark), and for an infeasible plan an instant event "out of memory" where
// the allocation failed. Times are microseconds, as the format expects; `otherData` carries the
// summary (feasible, iteration_us, peak_device_bytes, ...).
std::string to_chrome_trace_json(const SimResult& r);
// Writes to_chrome_trace_json(r) to `path`. IoError names the path.
Status write_chrome_trace(const SimResult& r, const std::string& path);

// A self-contained SVG: device memory in use over the iteration (filled), the allocator's
// high-water mark, the budget as a red dashed line (omitted when `budget_bytes` is 0), the peak
// marked, axes in time (us/ms/s) and bytes (KiB/MiB/GiB) units, and a title with the model,
// device, policy, iteration time and feasibility. Samples are reduced to one min/max column per
// pixel, so the file stays small for any graph size while keeping every peak visible.
std::string memory_svg(const SimResult& r, uint64_t budget_bytes);
// Writes memory_svg(r, budget_bytes) to `path`. IoError names the path.
Status write_memory_svg(const SimResult& r, uint64_t budget_bytes, const std::string& path);

}  // namespace ferry
