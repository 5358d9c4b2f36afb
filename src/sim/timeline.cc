// Chrome trace and SVG memory plot of a SimResult.

#include "sim/timeline.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "common/units.h"

namespace ferry {

namespace {

using Json = nlohmann::json;

// XML-escapes text for SVG.
std::string xml(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// A "nice" tick step (1, 2 or 5 x 10^k) giving about `ticks` intervals over `range`.
double nice_step(double range, int ticks) {
  if (!(range > 0)) return 1;
  const double raw = range / ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  return (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10) * mag;
}

std::string trim_number(double v) {
  std::string s = fmt::format("{:.3f}", v);
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

struct Unit {
  double scale;
  const char* name;
};
Unit time_unit(double max_us) {
  if (max_us >= 1e6) return {1e6, "s"};
  if (max_us >= 1e3) return {1e3, "ms"};
  return {1, "us"};
}
Unit byte_unit(double max_bytes) {
  if (max_bytes >= double(uint64_t{1} << 30)) return {double(uint64_t{1} << 30), "GiB"};
  if (max_bytes >= double(uint64_t{1} << 20)) return {double(uint64_t{1} << 20), "MiB"};
  if (max_bytes >= 1024) return {1024, "KiB"};
  return {1, "B"};
}

std::string time_text(double us) {
  const Unit u = time_unit(us);
  return fmt::format("{} {}", trim_number(us / u.scale), u.name);
}

}  // namespace

std::string to_chrome_trace_json(const SimResult& r) {
  constexpr int kPid = 1;
  Json events = Json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", kPid}, {"tid", 0},
                    {"args", {{"name", fmt::format("ferry sim: {} on {} (policy {})", r.model, r.device, r.policy)}}}});
  for (size_t s = 0; s < kNumSimStreams; ++s) {
    const int tid = static_cast<int>(s) + 1;
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", kPid}, {"tid", tid},
                      {"args", {{"name", std::string(to_string(static_cast<SimStream>(s)))}}}});
    events.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", kPid}, {"tid", tid},
                      {"args", {{"sort_index", tid}}}});
  }
  for (const SimEvent& e : r.events) {
    Json args = {{"step", e.step}};
    if (e.bytes > 0) args["bytes"] = e.bytes;
    events.push_back({{"name", e.name},
                      {"cat", std::string(to_string(e.kind))},
                      {"ph", "X"},
                      {"ts", e.start_us},
                      {"dur", e.end_us - e.start_us},
                      {"pid", kPid},
                      {"tid", static_cast<int>(e.stream) + 1},
                      {"args", std::move(args)}});
  }
  if (r.failure)
    events.push_back({{"name", "out of memory"}, {"ph", "i"}, {"s", "p"}, {"ts", r.failure->time_us}, {"pid", kPid},
                      {"tid", 1}, {"args", {{"reason", r.reason}}}});
  for (const MemorySample& m : r.memory)
    events.push_back({{"name", "device memory"}, {"ph", "C"}, {"ts", m.time_us}, {"pid", kPid},
                      {"args", {{"in_use_bytes", m.in_use_bytes}, {"high_water_bytes", m.high_water_bytes}}}});
  Json doc = {{"traceEvents", std::move(events)},
              {"displayTimeUnit", "ms"},
              {"otherData",
               {{"model", r.model},
                {"device", r.device},
                {"policy", r.policy},
                {"feasible", r.feasible},
                {"reason", r.reason},
                {"iteration_us", r.iteration_us},
                {"compute_us", r.compute_busy_us},
                {"stall_us", r.stall_us},
                {"peak_device_bytes", r.peak_device_bytes},
                {"budget_bytes", r.budget_bytes}}}};
  return doc.dump() + "\n";
}

Status write_chrome_trace(const SimResult& r, const std::string& path) {
  return write_file_atomically(path, to_chrome_trace_json(r), "Chrome trace");
}

namespace {

// The plot area of memory_svg() and its two scales.
struct MemoryPlot {
  static constexpr double kWidth = 960, kHeight = 590;
  static constexpr double kLeft = 90, kRight = 30, kTop = 64, kBottom = 170;  // lanes below the plot
  static constexpr double kPlotW = kWidth - kLeft - kRight, kPlotH = kHeight - kTop - kBottom;

  double t_max = 1;  // us at the right edge
  double y_top = 1;  // bytes at the top edge
  Unit tu{1, "us"}, bu{1, "B"};

  MemoryPlot(const SimResult& r, uint64_t budget_bytes) {
    t_max = r.iteration_us;
    uint64_t v_max = std::max(r.peak_device_bytes, budget_bytes);
    for (const MemorySample& m : r.memory) {
      t_max = std::max(t_max, m.time_us);
      v_max = std::max({v_max, m.in_use_bytes, m.high_water_bytes});
    }
    if (!(t_max > 0)) t_max = 1;
    y_top = v_max > 0 ? double(v_max) * 1.08 : 1.0;
    tu = time_unit(t_max);
    bu = byte_unit(y_top);
  }
  double x(double us) const { return kLeft + us / t_max * kPlotW; }
  double y(double bytes) const { return kTop + kPlotH - bytes / y_top * kPlotH; }
};

std::string svg_title(const SimResult& r, uint64_t budget_bytes) {
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n",
      MemoryPlot::kWidth, MemoryPlot::kHeight);
  svg += fmt::format("<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"white\"/>\n", MemoryPlot::kWidth,
                     MemoryPlot::kHeight);
  svg += fmt::format("<text x=\"{}\" y=\"24\" font-size=\"16\" font-weight=\"bold\">{}</text>\n", MemoryPlot::kLeft,
                     xml(fmt::format("Device memory: {} on {} (policy {})", r.model, r.device, r.policy)));
  std::string sub = fmt::format("predicted: iteration {}, peak {} (in use {}), {}", time_text(r.iteration_us),
                                format_bytes(r.peak_device_bytes), format_bytes(r.peak_in_use_bytes),
                                budget_bytes > 0 ? "budget " + format_bytes(budget_bytes) : std::string("no budget"));
  svg += fmt::format("<text x=\"{}\" y=\"44\" fill=\"{}\">{}</text>\n", MemoryPlot::kLeft, r.feasible ? "#333" : "#c00",
                     xml(r.feasible ? sub : "INFEASIBLE: " + sub));
  return svg;
}

std::string svg_axes(const MemoryPlot& p) {
  using P = MemoryPlot;
  std::string svg;
  const double y_step = nice_step(p.y_top / p.bu.scale, 6);
  for (double v = 0; v <= p.y_top / p.bu.scale + 1e-9; v += y_step) {
    const double y = p.y(v * p.bu.scale);
    svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e5e5e5\"/>\n", P::kLeft, y,
                       P::kLeft + P::kPlotW, y);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", P::kLeft - 8, y + 4,
                       trim_number(v));
  }
  const double x_step = nice_step(p.t_max / p.tu.scale, 8);
  for (double v = 0; v <= p.t_max / p.tu.scale + 1e-9; v += x_step) {
    const double x = p.x(v * p.tu.scale);
    svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e5e5e5\"/>\n", x, P::kTop,
                       x, P::kTop + P::kPlotH);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", x,
                       P::kTop + P::kPlotH + 18, trim_number(v));
  }
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n", P::kLeft,
                     P::kTop, P::kPlotW, P::kPlotH);
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">time ({})</text>\n",
                     P::kLeft + P::kPlotW / 2, P::kHeight - 18, p.tu.name);
  svg += fmt::format(
      "<text x=\"22\" y=\"{:.1f}\" text-anchor=\"middle\" transform=\"rotate(-90 22 {:.1f})\">device memory ({})</text>\n",
      P::kTop + P::kPlotH / 2, P::kTop + P::kPlotH / 2, p.bu.name);
  return svg;
}

// A step function of one sample field, reduced to min/max per pixel column.
template <typename ValueOf>
std::string step_path(const MemoryPlot& p, const std::vector<MemorySample>& memory, ValueOf value_of) {
  std::string d;
  if (memory.empty()) return d;
  double prev = 0;
  d += fmt::format("M{:.1f},{:.1f}", p.x(0), p.y(0));
  size_t i = 0;
  while (i < memory.size()) {
    const int column = static_cast<int>(p.x(memory[i].time_us));
    double lo = prev, hi = prev, last = prev;
    const double x = p.x(memory[i].time_us);
    while (i < memory.size() && static_cast<int>(p.x(memory[i].time_us)) == column) {
      last = double(value_of(memory[i]));
      lo = std::min(lo, last);
      hi = std::max(hi, last);
      ++i;
    }
    d += fmt::format("H{:.1f}V{:.1f}V{:.1f}V{:.1f}", x, p.y(hi), p.y(lo), p.y(last));
    prev = last;
  }
  d += fmt::format("H{:.1f}", p.x(p.t_max));
  return d;
}

// In use (filled, with its outline) and the allocator's high-water mark (dashed).
std::string svg_curves(const MemoryPlot& p, const SimResult& r) {
  const std::string in_use = step_path(p, r.memory, [](const MemorySample& m) { return m.in_use_bytes; });
  const std::string high = step_path(p, r.memory, [](const MemorySample& m) { return m.high_water_bytes; });
  if (in_use.empty()) return "";
  std::string svg = fmt::format("<path d=\"{}V{:.1f}Z\" fill=\"#9ecae1\" fill-opacity=\"0.55\" stroke=\"none\"/>\n",
                                in_use, p.y(0));
  svg += fmt::format("<path d=\"{}\" fill=\"none\" stroke=\"#3182bd\" stroke-width=\"1.2\"/>\n", in_use);
  svg += fmt::format("<path d=\"{}\" fill=\"none\" stroke=\"#636363\" stroke-width=\"1\" stroke-dasharray=\"2,2\"/>\n",
                     high);
  return svg;
}

// The budget line, where an infeasible plan runs out of memory, and the peak of the in-use curve.
std::string svg_markers(const MemoryPlot& p, const SimResult& r, uint64_t budget_bytes) {
  using P = MemoryPlot;
  std::string svg;
  if (budget_bytes > 0) {
    const double y = p.y(double(budget_bytes));
    svg += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#d62728\" stroke-width=\"1.5\" "
        "stroke-dasharray=\"6,4\"/>\n",
        P::kLeft, y, P::kLeft + P::kPlotW, y);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\" fill=\"#d62728\">budget {}</text>\n",
                       P::kLeft + P::kPlotW - 6, y - 6, xml(format_bytes(budget_bytes)));
  }
  if (r.failure) {
    const double x = p.x(r.failure->time_us);
    const bool right_half = x > P::kLeft + P::kPlotW * 0.6;
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#d62728\" stroke-width=\"1.2\" "
        "stroke-dasharray=\"3,3\"/>\n",
        x, P::kTop, P::kTop + P::kPlotH);
    svg += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"{}\" fill=\"#d62728\">out of memory at step {}</text>\n",
        right_half ? x - 6 : x + 6, P::kTop + P::kPlotH - 8, right_half ? "end" : "start", r.failure->step);
  }
  if (!r.memory.empty()) {
    const auto peak = std::max_element(r.memory.begin(), r.memory.end(), [](const MemorySample& a, const MemorySample& b) {
      return a.in_use_bytes < b.in_use_bytes;
    });
    const double px = p.x(peak->time_us), py = p.y(double(peak->in_use_bytes));
    const bool right_half = px > P::kLeft + P::kPlotW * 0.6;
    svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"#08519c\"/>\n", px, py);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"{}\" fill=\"#08519c\">peak {} at {}</text>\n",
                       right_half ? px - 8 : px + 8, std::max(py - 8, P::kTop + 14), right_half ? "end" : "start",
                       xml(format_bytes(peak->in_use_bytes)), xml(time_text(peak->time_us)));
  }
  return svg;
}

// Lanes under the plot, on its time axis: recomputation and stalls on the compute stream, and
// each copy stream (both directions of the host link, the SSD legs). Busy time is drawn per pixel
// column, so the file stays small for any number of events.
std::string svg_lanes(const MemoryPlot& p, const SimResult& r) {
  using P = MemoryPlot;
  struct Lane {
    const char* label;
    const char* color;
    bool (*match)(const SimEvent&);
  };
  static const Lane kLanes[] = {
      {"recompute", "#ff7f0e", [](const SimEvent& e) { return e.kind == EventKind::kRecompute; }},
      {"stall", "#7f0000", [](const SimEvent& e) { return e.kind == EventKind::kStall; }},
      {"to host", "#2ca02c", [](const SimEvent& e) { return e.stream == SimStream::kDeviceToHost; }},
      {"to device", "#9467bd", [](const SimEvent& e) { return e.stream == SimStream::kHostToDevice; }},
      {"SSD write", "#8c564b", [](const SimEvent& e) { return e.stream == SimStream::kSsdWrite; }},
      {"SSD read", "#e377c2", [](const SimEvent& e) { return e.stream == SimStream::kSsdRead; }},
      {"host update", "#17becf", [](const SimEvent& e) { return e.stream == SimStream::kHost; }},
  };
  constexpr double kLaneH = 14, kLaneGap = 4;
  const int columns = static_cast<int>(P::kPlotW);
  std::string svg;
  double y = P::kTop + P::kPlotH + 30;
  for (const Lane& lane : kLanes) {
    std::vector<uint8_t> busy(static_cast<size_t>(columns), 0);
    double busy_us = 0;
    for (const SimEvent& e : r.events) {
      if (!lane.match(e) || !(e.end_us > e.start_us)) continue;
      busy_us += e.end_us - e.start_us;
      const int a = std::clamp(static_cast<int>(p.x(e.start_us) - P::kLeft), 0, columns - 1);
      const int b = std::clamp(static_cast<int>(std::ceil(p.x(e.end_us) - P::kLeft)), a + 1, columns);
      std::fill(busy.begin() + a, busy.begin() + b, 1);
    }
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\" font-size=\"10\">{}</text>\n", P::kLeft - 6,
                       y + kLaneH - 3, lane.label);
    svg += fmt::format("<rect x=\"{}\" y=\"{:.1f}\" width=\"{}\" height=\"{}\" fill=\"#f4f4f4\"/>\n", P::kLeft, y, P::kPlotW,
                       kLaneH);
    for (int c = 0; c < columns;) {
      if (!busy[static_cast<size_t>(c)]) {
        ++c;
        continue;
      }
      int end = c;
      while (end < columns && busy[static_cast<size_t>(end)]) ++end;
      svg += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>\n", P::kLeft + c, y,
                         end - c, kLaneH, lane.color);
      c = end;
    }
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\" fill=\"#555\">{}</text>\n",
                       P::kLeft + P::kPlotW + 4, y + kLaneH - 3, busy_us > 0 ? xml(time_text(busy_us)) : "");
    y += kLaneH + kLaneGap;
  }
  return svg;
}

// The legend, in the header to the right, where it never covers the curve.
std::string svg_legend() {
  const double lx = MemoryPlot::kLeft + MemoryPlot::kPlotW - 250, ly = 44;
  std::string svg = fmt::format(
      "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"14\" height=\"10\" fill=\"#9ecae1\" stroke=\"#3182bd\"/>\n", lx, ly - 9);
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">in use</text>\n", lx + 20, ly);
  svg += fmt::format(
      "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#636363\" stroke-dasharray=\"2,2\"/>\n",
      lx + 80, ly - 4, lx + 100, ly - 4);
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">allocator high-water</text>\n", lx + 106, ly);
  return svg;
}

}  // namespace

std::string memory_svg(const SimResult& r, uint64_t budget_bytes) {
  const MemoryPlot plot(r, budget_bytes);
  return svg_title(r, budget_bytes) + svg_axes(plot) + svg_curves(plot, r) + svg_markers(plot, r, budget_bytes) +
         svg_lanes(plot, r) + svg_legend() + "</svg>\n";
}

Status write_memory_svg(const SimResult& r, uint64_t budget_bytes, const std::string& path) {
  return write_file_atomically(path, memory_svg(r, budget_bytes), "memory plot");
}

}  // namespace ferry
