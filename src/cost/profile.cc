// Hardware profile JSON: strict parsing, validation, serialisation and lookup by name.
//
// Parsing walks the document section by section with a small Reader that knows the JSON path of
// where it is, so every error names the file and the field ("a100.json: host_link.
// host_to_device.efficiency: 1.5 is not in (0, 1]"). Unknown keys are errors too: a typo in a
// hand-edited profile must not silently fall back to a default.

#include "cost/profile.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "common/units.h"

#ifndef FERRY_PROFILES_DIR_DEFAULT
#error "FERRY_PROFILES_DIR_DEFAULT must be defined by the build (CMakeLists.txt, ferry_cost)"
#endif

namespace ferry {

namespace {

using Json = nlohmann::ordered_json;  // keeps the documented field order when saving

constexpr std::array<std::string_view, kNumComputeDTypes> kComputeDTypeNames = {"fp32", "tf32", "fp16", "bf16"};
constexpr std::array<std::string_view, kNumOpClasses> kOpClassNames = {
    "conv", "matmul", "elementwise", "norm", "pooling", "softmax", "embedding", "data_movement", "optimizer", "other"};
constexpr int32_t kMaxQueueDepth = 1024;

std::string join_path(const std::string& parent, std::string_view key) {
  return parent.empty() ? std::string(key) : parent + "." + std::string(key);
}

// Reads fields of one JSON object, remembering which keys were consumed so that finish() can
// reject the rest. Every failure is recorded once (the first) and turns later reads into no-ops.
class Reader {
 public:
  Reader(const Json& obj, std::string path, std::string_view source, Status& status)
      : obj_(obj), path_(std::move(path)), source_(source), status_(status) {
    if (status_.ok() && !obj_.is_object()) fail(path_, "must be a JSON object");
  }

  bool has(std::string_view key) const { return obj_.is_object() && obj_.contains(std::string(key)); }
  bool has_object(std::string_view key) const { return has(key) && obj_.at(std::string(key)).is_object(); }

  // A nested object; reading from a missing or non-object value records an error.
  Reader object(std::string_view key) {
    const Json& v = child(key, /*required=*/true);
    return Reader(v.is_null() ? empty_object() : v, join_path(path_, key), source_, status_);
  }

  std::string string(std::string_view key, bool required = true) {
    const Json& v = child(key, required);
    if (v.is_null()) return "";
    if (!v.is_string()) {
      fail(join_path(path_, key), "must be a string");
      return "";
    }
    return v.get<std::string>();
  }

  bool boolean(std::string_view key) {
    const Json& v = child(key, true);
    if (v.is_null()) return false;
    if (!v.is_boolean()) {
      fail(join_path(path_, key), "must be true or false");
      return false;
    }
    return v.get<bool>();
  }

  // A finite number (any JSON number type).
  double number(std::string_view key) {
    const Json& v = child(key, true);
    if (v.is_null()) return 0;
    if (!v.is_number()) {
      fail(join_path(path_, key), fmt::format("must be a number, not {}", v.dump()));
      return 0;
    }
    const double d = v.get<double>();
    if (!std::isfinite(d)) fail(join_path(path_, key), "must be finite");
    return d;
  }

  int64_t integer(std::string_view key) {
    const Json& v = child(key, true);
    if (v.is_null()) return 0;
    if (!v.is_number_integer()) {
      fail(join_path(path_, key), fmt::format("must be an integer, not {}", v.dump()));
      return 0;
    }
    return v.get<int64_t>();
  }

  // Bytes: a non-negative integer, or a string parse_bytes() accepts ("40GiB").
  uint64_t bytes(std::string_view key) {
    const Json& v = child(key, true);
    if (v.is_null()) return 0;
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    if (v.is_string()) {
      Result<uint64_t> b = parse_bytes(v.get<std::string>());
      if (b.ok()) return *b;
      fail(join_path(path_, key), b.status().message());
      return 0;
    }
    fail(join_path(path_, key), fmt::format("must be a byte count (integer or \"40GiB\"), not {}", v.dump()));
    return 0;
  }

  // Every key of this object, in document order, marking all as consumed.
  std::vector<std::string> keys() {
    std::vector<std::string> out;
    if (!obj_.is_object()) return out;
    for (auto it = obj_.begin(); it != obj_.end(); ++it) {
      out.push_back(it.key());
      used_.insert(it.key());
    }
    return out;
  }

  const std::string& path() const { return path_; }

  // Records an error for the first key that was never read.
  void finish() {
    if (!status_.ok() || !obj_.is_object()) return;
    for (auto it = obj_.begin(); it != obj_.end(); ++it)
      if (!used_.count(it.key())) {
        fail(join_path(path_, it.key()), "unknown field");
        return;
      }
  }

  void fail(const std::string& where, const std::string& why) {
    if (status_.ok())
      status_ = Status::InvalidArgument(fmt::format("{}: {}: {}", source_, where.empty() ? "(top level)" : where, why));
  }

 private:
  static const Json& empty_object() {
    static const Json kEmpty = Json::object();
    return kEmpty;
  }
  static const Json& null_value() {
    static const Json kNull;
    return kNull;
  }
  const Json& child(std::string_view key, bool required) {
    used_.insert(std::string(key));
    const auto it = obj_.is_object() ? obj_.find(std::string(key)) : obj_.end();
    if (it == obj_.end()) {
      if (required) fail(join_path(path_, key), "missing field");
      return null_value();
    }
    return *it;
  }

  const Json& obj_;
  std::string path_;
  std::string_view source_;
  Status& status_;
  std::set<std::string> used_;
};

// "compute": {"fp32": .., "tf32": ..}: fp32 and one entry per other unit the profile has a peak
// for (the peaks are read first), no others.
void read_per_unit(Reader r, const HardwareProfile& p, OpEfficiency& e) {
  for (const std::string& key : r.keys()) {
    const std::optional<ComputeDType> unit = compute_dtype_from_string(key);
    if (!unit) {
      r.fail(join_path(r.path(), key), "unknown compute dtype (known: fp32, tf32, fp16, bf16)");
      return;
    }
    if (*unit != ComputeDType::kFp32 && !p.peak_flops[static_cast<size_t>(*unit)]) {
      r.fail(join_path(r.path(), key), fmt::format("the profile has no {} rate (compute.peak_flops.{})", key, key));
      return;
    }
  }
  for (size_t u = 0; u < kNumComputeDTypes; ++u) {
    if (!p.peak_flops[u] && u != static_cast<size_t>(ComputeDType::kFp32)) continue;  // fp32: always required
    const double v = r.number(kComputeDTypeNames[u]);  // missing: "missing field"
    if (u == static_cast<size_t>(ComputeDType::kFp32)) e.compute = v;
    else e.compute_by_unit[u] = v;
  }
}

LinkDirection read_direction(Reader r) {
  LinkDirection d;
  d.nominal_bytes_per_s = r.number("nominal_bytes_per_s");
  d.efficiency = r.number("efficiency");
  d.latency_us = r.number("latency_us");
  if (r.has("compute_interference")) d.compute_interference = r.number("compute_interference");
  r.finish();
  return d;
}

Json direction_json(const LinkDirection& d) {
  Json j{{"nominal_bytes_per_s", d.nominal_bytes_per_s}, {"efficiency", d.efficiency}, {"latency_us", d.latency_us}};
  if (d.compute_interference != 0) j["compute_interference"] = d.compute_interference;
  return j;
}

Status fraction(double v, std::string_view path) {
  if (std::isfinite(v) && v > 0 && v <= 1) return Status::Ok();
  return Status::InvalidArgument(fmt::format("{}: {} is not in (0, 1]", path, v));
}

// Rates and latencies are bounded so that every prediction stays finite: the largest graph
// (2^64 bytes or FLOPs per op, 2^31 ops) at the slowest rate (1 per second) with the longest
// latency still sums to well below the double range. Both ends are far outside any real device.
constexpr double kMinRate = 1, kMaxRate = 1e21;  // FLOP/s or bytes/s: 1 to a zetta
constexpr double kMaxLatencyUs = 1e9;            // 1000 s per copy, request or launch

Status rate(double v, std::string_view path, std::string_view unit) {
  if (std::isfinite(v) && v >= kMinRate && v <= kMaxRate) return Status::Ok();
  return Status::InvalidArgument(fmt::format(
      "{}: {} is outside [{:g}, {:g}] {} (predictions made with it would not be finite or not meaningful)", path, v,
      kMinRate, kMaxRate, unit));
}
Status latency(double v, std::string_view path) {
  if (std::isfinite(v) && v >= 0 && v <= kMaxLatencyUs) return Status::Ok();
  return Status::InvalidArgument(fmt::format("{}: {} is outside [0, {:g}] us", path, v, kMaxLatencyUs));
}

// A copy slows compute by at most 101x: beyond that the copy is the iteration.
constexpr double kMaxInterference = 100;
Status interference(double v, std::string_view path) {
  if (std::isfinite(v) && v >= 0 && v <= kMaxInterference) return Status::Ok();
  return Status::InvalidArgument(fmt::format("{}: {} is outside [0, {:g}]", path, v, kMaxInterference));
}

Status validate_direction(const LinkDirection& d, const std::string& path) {
  FERRY_RETURN_IF_ERROR(interference(d.compute_interference, path + ".compute_interference"));
  FERRY_RETURN_IF_ERROR(rate(d.nominal_bytes_per_s, path + ".nominal_bytes_per_s", "bytes/s"));
  FERRY_RETURN_IF_ERROR(fraction(d.efficiency, path + ".efficiency"));
  FERRY_RETURN_IF_ERROR(rate(d.effective_bytes_per_s(), path + ".nominal_bytes_per_s x efficiency", "bytes/s"));
  return latency(d.latency_us, path + ".latency_us");
}

bool looks_like_path(const std::string& s) {
  return s.find('/') != std::string::npos || (s.size() > 5 && s.ends_with(".json"));
}


}  // namespace

std::string_view to_string(ComputeDType d) { return kComputeDTypeNames[static_cast<size_t>(d)]; }
std::string_view to_string(OpClass c) { return kOpClassNames[static_cast<size_t>(c)]; }

std::optional<ComputeDType> compute_dtype_from_string(std::string_view s) {
  for (size_t i = 0; i < kNumComputeDTypes; ++i)
    if (kComputeDTypeNames[i] == s) return static_cast<ComputeDType>(i);
  return std::nullopt;
}

std::optional<OpClass> op_class_from_string(std::string_view s) {
  for (size_t i = 0; i < kNumOpClasses; ++i)
    if (kOpClassNames[i] == s) return static_cast<OpClass>(i);
  return std::nullopt;
}

Status validate_profile(const HardwareProfile& p) {
  if (p.name.empty()) return Status::InvalidArgument("name: must not be empty");
  if (!p.peak_flops[static_cast<size_t>(ComputeDType::kFp32)])
    return Status::InvalidArgument("compute.peak_flops.fp32: missing (every device has an fp32 rate)");
  for (size_t i = 0; i < kNumComputeDTypes; ++i)
    if (p.peak_flops[i])
      FERRY_RETURN_IF_ERROR(rate(*p.peak_flops[i], fmt::format("compute.peak_flops.{}", kComputeDTypeNames[i]), "FLOP/s"));
  FERRY_RETURN_IF_ERROR(latency(p.launch_overhead_us, "compute.launch_overhead_us"));
  for (size_t i = 0; i < kNumOpClasses; ++i) {
    const OpEfficiency& e = p.efficiency[i];
    const std::string path = fmt::format("compute.efficiency.{}.compute", kOpClassNames[i]);
    FERRY_RETURN_IF_ERROR(fraction(e.compute, e.per_unit() ? path + ".fp32" : path));
    FERRY_RETURN_IF_ERROR(fraction(e.memory, fmt::format("compute.efficiency.{}.memory", kOpClassNames[i])));
    if (!e.per_unit()) continue;
    for (size_t u = 0; u < kNumComputeDTypes; ++u) {
      const std::string unit_path = path + "." + std::string(kComputeDTypeNames[u]);
      const bool wanted = p.peak_flops[u] && u != static_cast<size_t>(ComputeDType::kFp32);
      if (e.compute_by_unit[u] && !wanted)
        return Status::InvalidArgument(fmt::format("{}: set, but the profile has no {} rate{}", unit_path,
                                                   kComputeDTypeNames[u], u == 0 ? " override (fp32 is `compute`)" : ""));
      if (!e.compute_by_unit[u] && wanted)
        return Status::InvalidArgument(fmt::format(
            "{}: missing (the profile has a {} rate and per-unit efficiencies for this class)", unit_path,
            kComputeDTypeNames[u]));
      if (e.compute_by_unit[u]) FERRY_RETURN_IF_ERROR(fraction(*e.compute_by_unit[u], unit_path));
    }
  }
  for (size_t u = 0; u < kNumComputeDTypes; ++u)
    FERRY_RETURN_IF_ERROR(
        fraction(p.conv3x3_flop_fraction[u], fmt::format("compute.conv3x3_flop_fraction.{}", kComputeDTypeNames[u])));
  if (p.memory_capacity_bytes == 0) return Status::InvalidArgument("memory.capacity_bytes: 0 must be > 0");
  FERRY_RETURN_IF_ERROR(rate(p.memory_bandwidth_bytes_per_s, "memory.bandwidth_bytes_per_s", "bytes/s"));
  // The rates ops reach: peaks times efficiencies.
  for (size_t i = 0; i < kNumOpClasses; ++i) {
    for (size_t d = 0; d < kNumComputeDTypes; ++d)
      if (p.peak_flops[d])
        FERRY_RETURN_IF_ERROR(rate(*p.peak_flops[d] * p.efficiency[i].compute,
                                   fmt::format("compute.peak_flops.{} x compute.efficiency.{}.compute",
                                               kComputeDTypeNames[d], kOpClassNames[i]),
                                   "FLOP/s"));
    FERRY_RETURN_IF_ERROR(rate(p.memory_bandwidth_bytes_per_s * p.efficiency[i].memory,
                               fmt::format("memory.bandwidth_bytes_per_s x compute.efficiency.{}.memory",
                                           kOpClassNames[i]),
                               "bytes/s"));
  }
  FERRY_RETURN_IF_ERROR(validate_direction(p.host_link.host_to_device, "host_link.host_to_device"));
  FERRY_RETURN_IF_ERROR(validate_direction(p.host_link.device_to_host, "host_link.device_to_host"));
  FERRY_RETURN_IF_ERROR(rate(p.storage.read_bytes_per_s, "storage.read_bytes_per_s", "bytes/s"));
  if (p.host_optimizer_bytes_per_s != 0)
    FERRY_RETURN_IF_ERROR(rate(p.host_optimizer_bytes_per_s, "host.optimizer_bytes_per_s", "bytes/s"));
  FERRY_RETURN_IF_ERROR(rate(p.storage.write_bytes_per_s, "storage.write_bytes_per_s", "bytes/s"));
  FERRY_RETURN_IF_ERROR(latency(p.storage.read_latency_us, "storage.read_latency_us"));
  FERRY_RETURN_IF_ERROR(latency(p.storage.write_latency_us, "storage.write_latency_us"));
  FERRY_RETURN_IF_ERROR(interference(p.storage.read_compute_interference, "storage.read_compute_interference"));
  FERRY_RETURN_IF_ERROR(interference(p.storage.write_compute_interference, "storage.write_compute_interference"));
  if (p.storage.queue_depth < 1 || p.storage.queue_depth > kMaxQueueDepth)
    return Status::InvalidArgument(
        fmt::format("storage.queue_depth: {} is not in [1, {}]", p.storage.queue_depth, kMaxQueueDepth));
  return Status::Ok();
}

Result<HardwareProfile> parse_profile(std::string_view json_text, std::string_view source_name) {
  Json doc;
  try {
    doc = Json::parse(json_text);
  } catch (const Json::parse_error& e) {
    return Status::InvalidArgument(fmt::format("{}: malformed JSON: {}", source_name, e.what()));
  } catch (const Json::exception& e) {  // e.g. out_of_range 406: a number literal past double's range (found by fuzz_profile)
    return Status::InvalidArgument(fmt::format("{}: malformed JSON: {}", source_name, e.what()));
  }

  Status st;
  HardwareProfile p;
  try {
    Reader top(doc, "", source_name, st);
    const std::string format = top.string("format");
    if (st.ok() && format != kProfileFormatName)
      top.fail("format", fmt::format("'{}' is not '{}'", format, kProfileFormatName));
    const int64_t version = top.integer("version");
    if (st.ok() && version != kProfileVersion)
      top.fail("version", fmt::format("{} is not supported (this Ferry reads version {})", version, kProfileVersion));
    p.name = top.string("name");
    p.description = top.string("description", /*required=*/false);
    p.notes = top.string("notes", /*required=*/false);

    Reader compute = top.object("compute");
    {
      Reader peaks = compute.object("peak_flops");
      for (const std::string& key : peaks.keys())
        if (!compute_dtype_from_string(key)) {
          peaks.fail(join_path(peaks.path(), key), "unknown compute dtype (known: fp32, tf32, fp16, bf16)");
          break;
        }
      for (size_t i = 0; i < kNumComputeDTypes; ++i)
        if (peaks.has(kComputeDTypeNames[i])) p.peak_flops[i] = peaks.number(kComputeDTypeNames[i]);
    }
    p.launch_overhead_us = compute.number("launch_overhead_us");
    {
      Reader eff = compute.object("efficiency");
      for (size_t i = 0; i < kNumOpClasses; ++i) {
        Reader cls = eff.object(kOpClassNames[i]);
        if (cls.has_object("compute")) read_per_unit(cls.object("compute"), p, p.efficiency[i]);
        else p.efficiency[i].compute = cls.number("compute");
        p.efficiency[i].memory = cls.number("memory");
        cls.finish();
      }
      eff.finish();
    }
    if (compute.has("conv3x3_flop_fraction")) {
      Reader fractions = compute.object("conv3x3_flop_fraction");
      for (const std::string& key : fractions.keys())
        if (!compute_dtype_from_string(key)) {
          fractions.fail(join_path(fractions.path(), key), "unknown compute dtype (known: fp32, tf32, fp16, bf16)");
          break;
        }
      for (size_t u = 0; u < kNumComputeDTypes; ++u)
        if (fractions.has(kComputeDTypeNames[u])) p.conv3x3_flop_fraction[u] = fractions.number(kComputeDTypeNames[u]);
    }
    compute.finish();

    Reader memory = top.object("memory");
    p.memory_capacity_bytes = memory.bytes("capacity_bytes");
    p.memory_bandwidth_bytes_per_s = memory.number("bandwidth_bytes_per_s");
    memory.finish();

    Reader link = top.object("host_link");
    p.host_link.name = link.string("name");
    p.host_link.host_to_device = read_direction(link.object("host_to_device"));
    p.host_link.device_to_host = read_direction(link.object("device_to_host"));
    p.host_link.concurrent_directions = link.boolean("concurrent_directions");
    link.finish();

    Reader storage = top.object("storage");
    p.storage.name = storage.string("name");
    p.storage.read_bytes_per_s = storage.number("read_bytes_per_s");
    p.storage.write_bytes_per_s = storage.number("write_bytes_per_s");
    p.storage.read_latency_us = storage.number("read_latency_us");
    p.storage.write_latency_us = storage.number("write_latency_us");
    const int64_t depth = storage.integer("queue_depth");
    if (st.ok() && (depth < 1 || depth > kMaxQueueDepth))
      storage.fail("storage.queue_depth", fmt::format("{} is not in [1, {}]", depth, kMaxQueueDepth));
    p.storage.queue_depth = static_cast<int32_t>(depth);
    if (storage.has("read_compute_interference"))
      p.storage.read_compute_interference = storage.number("read_compute_interference");
    if (storage.has("write_compute_interference"))
      p.storage.write_compute_interference = storage.number("write_compute_interference");
    if (storage.has("device_direct")) p.storage.device_direct = storage.boolean("device_direct");
    storage.finish();

    if (top.has("host")) {
      Reader host = top.object("host");
      p.host_optimizer_bytes_per_s = host.number("optimizer_bytes_per_s");
      host.finish();
    }
    if (top.has("sources")) {
      Reader sources = top.object("sources");
      for (const std::string& key : sources.keys()) p.sources[key] = sources.string(key);
    }
    top.finish();
  } catch (const Json::exception& e) {  // defensive: the Reader checks types before every get()
    return Status::InvalidArgument(fmt::format("{}: {}", source_name, e.what()));
  }
  if (!st.ok()) return st;
  if (Status v = validate_profile(p); !v.ok()) return Status::InvalidArgument(fmt::format("{}: {}", source_name, v.message()));
  return p;
}

std::string to_profile_json(const HardwareProfile& p) {
  Json peaks = Json::object();
  for (size_t i = 0; i < kNumComputeDTypes; ++i)
    if (p.peak_flops[i]) peaks[std::string(kComputeDTypeNames[i])] = *p.peak_flops[i];
  Json eff = Json::object();
  for (size_t i = 0; i < kNumOpClasses; ++i) {
    const OpEfficiency& e = p.efficiency[i];
    Json compute = e.compute;
    if (e.per_unit()) {
      compute = Json::object();
      for (size_t u = 0; u < kNumComputeDTypes; ++u)
        if (p.peak_flops[u]) compute[std::string(kComputeDTypeNames[u])] = e.compute_for(static_cast<ComputeDType>(u));
    }
    eff[std::string(kOpClassNames[i])] = Json{{"compute", compute}, {"memory", e.memory}};
  }
  Json fractions = Json::object();
  for (size_t u = 0; u < kNumComputeDTypes; ++u)
    if (p.conv3x3_flop_fraction[u] != 1.0) fractions[std::string(kComputeDTypeNames[u])] = p.conv3x3_flop_fraction[u];
  Json doc = Json::object();
  doc["format"] = kProfileFormatName;
  doc["version"] = kProfileVersion;
  doc["name"] = p.name;
  doc["description"] = p.description;
  doc["notes"] = p.notes;
  doc["compute"] = Json{{"peak_flops", peaks}, {"launch_overhead_us", p.launch_overhead_us}, {"efficiency", eff}};
  if (!fractions.empty()) doc["compute"]["conv3x3_flop_fraction"] = fractions;
  doc["memory"] = Json{{"capacity_bytes", p.memory_capacity_bytes}, {"bandwidth_bytes_per_s", p.memory_bandwidth_bytes_per_s}};
  doc["host_link"] = Json{{"name", p.host_link.name},
                          {"host_to_device", direction_json(p.host_link.host_to_device)},
                          {"device_to_host", direction_json(p.host_link.device_to_host)},
                          {"concurrent_directions", p.host_link.concurrent_directions}};
  doc["storage"] = Json{{"name", p.storage.name},
                        {"read_bytes_per_s", p.storage.read_bytes_per_s},
                        {"write_bytes_per_s", p.storage.write_bytes_per_s},
                        {"read_latency_us", p.storage.read_latency_us},
                        {"write_latency_us", p.storage.write_latency_us},
                        {"queue_depth", p.storage.queue_depth}};
  if (p.storage.read_compute_interference != 0)
    doc["storage"]["read_compute_interference"] = p.storage.read_compute_interference;
  if (p.storage.write_compute_interference != 0)
    doc["storage"]["write_compute_interference"] = p.storage.write_compute_interference;
  if (p.storage.device_direct) doc["storage"]["device_direct"] = true;
  if (p.host_optimizer_bytes_per_s > 0) doc["host"] = Json{{"optimizer_bytes_per_s", p.host_optimizer_bytes_per_s}};
  Json sources = Json::object();
  for (const auto& [k, v] : p.sources) sources[k] = v;
  doc["sources"] = sources;
  return doc.dump(2) + "\n";
}

ComputeDType matrix_unit(Precision p) {
  switch (p) {
    case Precision::kFp32: return ComputeDType::kFp32;
    case Precision::kTf32: return ComputeDType::kTf32;
    case Precision::kAmpFp16: return ComputeDType::kFp16;
    case Precision::kAmpBf16: return ComputeDType::kBf16;
  }
  return ComputeDType::kFp32;
}

Status check_precision(const HardwareProfile& profile, Precision precision) {
  const ComputeDType unit = matrix_unit(precision);
  if (profile.peak_flops[static_cast<size_t>(unit)]) return Status::Ok();
  std::vector<std::string> supported;
  for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kAmpFp16, Precision::kAmpBf16})
    if (profile.peak_flops[static_cast<size_t>(matrix_unit(p))]) supported.emplace_back(to_string(p));
  return Status::InvalidArgument(fmt::format(
      "precision {} needs a {} rate, and hardware profile '{}' has none (compute.peak_flops.{}: the device has no "
      "{} unit); this profile supports {}",
      to_string(precision), to_string(unit), profile.name, to_string(unit), to_string(unit),
      fmt::join(supported, ", ")));
}

std::string profiles_dir() {
  const char* env = std::getenv("FERRY_PROFILES_DIR");
  if (env != nullptr && *env != '\0') return env;
  return FERRY_PROFILES_DIR_DEFAULT;
}

std::vector<std::string> list_profiles() {
  std::vector<std::string> names;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(profiles_dir(), ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".json") names.push_back(it->path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

Result<HardwareProfile> load_profile(const std::string& name_or_path) {
  std::string path = name_or_path;
  if (!looks_like_path(name_or_path)) {
    path = (std::filesystem::path(profiles_dir()) / (name_or_path + ".json")).string();
    std::error_code ec;
    if (name_or_path.empty() || !std::filesystem::is_regular_file(path, ec)) {
      const std::vector<std::string> known = list_profiles();
      return Status::InvalidArgument(fmt::format(
          "unknown hardware profile '{}'; known profiles (in {}): {} (or give the path of a .json file)", name_or_path,
          profiles_dir(), known.empty() ? "none" : fmt::format("{}", fmt::join(known, ", "))));
    }
  }
  // A regular file within the size limit: /dev/zero or a FIFO named as a profile is refused
  // before a byte is read (reading either never ends).
  FERRY_ASSIGN_OR_RETURN(std::string text, read_regular_file(path, kMaxProfileBytes, "hardware profile"));
  return parse_profile(text, path);
}

Status save_profile(const HardwareProfile& p, const std::string& path) {
  if (Status v = validate_profile(p); !v.ok()) return v.with_context(fmt::format("hardware profile '{}'", p.name));
  return write_file_atomically(path, to_profile_json(p), "hardware profile");
}

}  // namespace ferry
