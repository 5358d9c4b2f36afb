// Measured figures from a run's own op and transfer times. See figures.h for the design.
#include "loop/figures.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include <fmt/format.h>

namespace ferry {

namespace {

// validate_profile's bounds: rates in [1, 1e21] bytes/s, latencies in [0, 1e9] us.
constexpr double kMinRate = 1, kMaxRate = 1e21, kMaxLatencyUs = 1e9;

struct Sample {
  uint64_t bytes;
  double us;
};

std::optional<LinkFit> fit(const std::vector<Sample>& samples) {
  if (samples.empty()) return std::nullopt;
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  uint64_t bytes = 0;
  for (const Sample& s : samples) {
    const double x = static_cast<double>(s.bytes), y = std::max(s.us, 0.0);
    n += 1;
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
    bytes += s.bytes;
  }
  LinkFit f;
  f.samples = samples.size();
  f.bytes = bytes;
  const double var = n * sxx - sx * sx;
  double slope = 0, intercept = 0;  // us per byte, us
  if (samples.size() >= 3 && var > 1e-9 * n * sxx) {
    slope = (n * sxy - sx * sy) / var;
    intercept = (sy - slope * sx) / n;
  }
  if (!(slope > 0) || intercept < 0) {  // no usable regression: the summed rate, no latency
    slope = sx > 0 ? sy / sx : 0;
    intercept = 0;
  }
  f.bytes_per_s = slope > 0 ? std::clamp(1e6 / slope, kMinRate, kMaxRate) : kMaxRate;
  f.latency_us = std::clamp(intercept, 0.0, kMaxLatencyUs);
  return f;
}

// Codec rates too fast to time are infinite; figures keep them finite (JSON, validation).
constexpr double kMaxCodecRate = 1e15;

bool codec_order(const CodecFigure& a, const CodecFigure& b) {
  return a.tensor_class != b.tensor_class ? a.tensor_class < b.tensor_class : a.codec < b.codec;
}

double link_us(const LinkFit& f, uint64_t bytes) { return f.latency_us + static_cast<double>(bytes) / f.bytes_per_s * 1e6; }

}  // namespace

MeasuredFigures fit_figures(const std::vector<double>& op_us, const std::vector<TransferRecord>& transfers,
                            const CostModel& base, const std::vector<CodecFigure>& codecs,
                            const std::vector<TensorCodec>& coded) {
  MeasuredFigures f;
  f.op_us = op_us;
  f.codecs = codecs;
  for (CodecFigure& c : f.codecs) {
    c.estimate.encode_bytes_per_s = std::min(c.estimate.encode_bytes_per_s, kMaxCodecRate);
    c.estimate.decode_bytes_per_s = std::min(c.estimate.decode_bytes_per_s, kMaxCodecRate);
    c.estimate.ratio = std::clamp(c.estimate.ratio, 1e-6, 4.0);  // a frame's headers make tiny samples grow
  }
  std::sort(f.codecs.begin(), f.codecs.end(), codec_order);
  std::unordered_set<TensorId> is_coded;
  for (const TensorCodec& c : coded) is_coded.insert(c.tensor);
  std::vector<Sample> host[2];  // [swap-out, swap-in]
  for (const TransferRecord& r : transfers)
    if (r.ok && r.tier == "host") host[r.direction == Direction::kSwapOut ? 0 : 1].push_back({r.bytes, r.end_us - r.start_us});
  f.links[static_cast<size_t>(Link::kDeviceToHost)] = fit(host[0]);
  f.links[static_cast<size_t>(Link::kHostToDevice)] = fit(host[1]);
  std::vector<Sample> ssd[2];
  for (const TransferRecord& r : transfers) {
    if (!r.ok || r.tier != "ssd" || is_coded.contains(r.tensor)) continue;
    const bool out = r.direction == Direction::kSwapOut;
    const Link leg = out ? Link::kDeviceToHost : Link::kHostToDevice;
    const std::optional<LinkFit>& measured = f.links[static_cast<size_t>(leg)];
    // In place (a device_direct profile; coded copies are left out above) there is no host leg.
    const double host_us = base.ssd_direct() && r.bytes >= kDirectIoMinBytes ? 0.0
                           : measured                                          ? link_us(*measured, r.bytes)
                                                                               : base.link(leg).time_us(r.bytes);
    ssd[out ? 0 : 1].push_back({r.bytes, std::max(r.end_us - r.start_us - host_us, 1e-3)});
  }
  f.links[static_cast<size_t>(Link::kSsdWrite)] = fit(ssd[0]);
  f.links[static_cast<size_t>(Link::kSsdRead)] = fit(ssd[1]);
  return f;
}

std::vector<double> unstretched_op_times(std::vector<double> measured, const std::vector<double>& stretch) {
  if (stretch.size() != measured.size()) return measured;
  for (size_t i = 0; i < measured.size(); ++i)
    if (stretch[i] > 0) measured[i] /= stretch[i];
  return measured;
}

MeasuredFigures merge_figures(const MeasuredFigures& older, const MeasuredFigures& newer) {
  // Per link and codec the newer figure, else the older (with_known_links); per op the smaller time.
  MeasuredFigures m = with_known_links(newer, older);
  if (older.op_us.size() == newer.op_us.size())
    for (size_t i = 0; i < m.op_us.size(); ++i)
      if (older.op_us[i] > 0) m.op_us[i] = m.op_us[i] > 0 ? std::min(m.op_us[i], older.op_us[i]) : older.op_us[i];
  return m;
}

MeasuredFigures with_known_links(MeasuredFigures recent, const MeasuredFigures& known) {
  for (size_t l = 0; l < kNumLinks; ++l)
    if (!recent.links[l]) recent.links[l] = known.links[l];
  for (const CodecFigure& c : known.codecs)
    if (std::none_of(recent.codecs.begin(), recent.codecs.end(), [&](const CodecFigure& n) {
          return n.tensor_class == c.tensor_class && n.codec == c.codec;
        }))
      recent.codecs.push_back(c);
  std::sort(recent.codecs.begin(), recent.codecs.end(), codec_order);
  return recent;
}

void apply_op_times(const MeasuredFigures& f, Graph& g) {
  FERRY_CHECK(f.op_us.size() == g.ops.size(), "figures of {} ops applied to a graph of {}", f.op_us.size(),
              g.ops.size());
  for (size_t i = 0; i < g.ops.size(); ++i) g.ops[i].time_us = f.op_us[i];
}

HardwareProfile apply_links(const MeasuredFigures& f, HardwareProfile p) {
  auto direction = [](LinkDirection& d, const LinkFit& fit) {
    d.nominal_bytes_per_s = fit.bytes_per_s;
    d.efficiency = 1.0;
    d.latency_us = fit.latency_us;
  };
  if (const auto& l = f.links[static_cast<size_t>(Link::kDeviceToHost)]) direction(p.host_link.device_to_host, *l);
  if (const auto& l = f.links[static_cast<size_t>(Link::kHostToDevice)]) direction(p.host_link.host_to_device, *l);
  if (const auto& l = f.links[static_cast<size_t>(Link::kSsdWrite)]) {
    p.storage.write_bytes_per_s = l->bytes_per_s;
    p.storage.write_latency_us = l->latency_us;
  }
  if (const auto& l = f.links[static_cast<size_t>(Link::kSsdRead)]) {
    p.storage.read_bytes_per_s = l->bytes_per_s;
    p.storage.read_latency_us = l->latency_us;
  }
  return p;
}

CostOptions cost_options(const MeasuredFigures& f) {
  CostOptions o;
  o.codecs = f.codecs;
  return o;
}

FiguresChange compare_figures(const MeasuredFigures& a, const MeasuredFigures& b) {
  FiguresChange c;
  auto consider = [&](double before, double after, const std::string& name) {
    if (!(before > 0) || !(after > 0)) return;
    const double r = after / before;
    if (std::abs(r - 1) > c.relative) {
      c.relative = std::abs(r - 1);
      c.what = r >= 1 ? fmt::format("{} {:.2f}x slower", name, r) : fmt::format("{} {:.2f}x faster", name, 1 / r);
    }
  };
  double sa = 0, sb = 0;
  for (double v : a.op_us) sa += v;
  for (double v : b.op_us) sb += v;
  if (a.op_us.size() == b.op_us.size()) consider(sa, sb, "compute");
  for (size_t l = 0; l < kNumLinks; ++l)
    if (a.links[l] && b.links[l])
      consider(link_us(*a.links[l], 1 << 20), link_us(*b.links[l], 1 << 20), std::string(to_string(static_cast<Link>(l))));
  return c;
}

}  // namespace ferry
