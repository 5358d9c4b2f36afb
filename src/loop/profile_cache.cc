// The profile cache. See profile_cache.h for the design.
#include "loop/profile_cache.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/checksum.h"
#include "common/file_io.h"

namespace ferry {

namespace {

using Json = nlohmann::json;

constexpr uint64_t kMaxFiguresBytes = uint64_t{64} << 20;

std::string key_text(const ProfileKey& k) {
  return fmt::format("v{}|{}|{}|{}|{}|{}|{}", k.format_version, k.machine, k.threads, k.conv_algorithm, k.tier,
                     k.model, k.graph_hash);
}

std::string hex(uint64_t v) { return fmt::format("{:016x}", v); }

Json link_json(const LinkFit& f) {
  return {{"bytes_per_s", f.bytes_per_s}, {"latency_us", f.latency_us}, {"samples", f.samples}, {"bytes", f.bytes}};
}

// A finite number in [lo, hi] at j[name], or an error naming `where.name`.
Result<double> number(const Json& j, const char* name, double lo, double hi, const std::string& where) {
  if (!j.is_object() || !j.contains(name) || !j[name].is_number())
    return Status::InvalidArgument(fmt::format("{}.{}: missing or not a number", where, name));
  const double v = j[name].get<double>();
  if (!std::isfinite(v) || v < lo || v > hi)
    return Status::InvalidArgument(fmt::format("{}.{}: {} is outside [{}, {}]", where, name, v, lo, hi));
  return v;
}

Result<std::string> text(const Json& j, const char* name) {
  if (!j.contains(name) || !j[name].is_string())
    return Status::InvalidArgument(fmt::format("key.{}: missing or not a string", name));
  return j[name].get<std::string>();
}

}  // namespace

std::string ProfileKey::digest() const {
  const std::string t = key_text(*this);
  return hex(hash64(std::as_bytes(std::span<const char>(t.data(), t.size()))));
}

std::string machine_description() {
  std::string model = "unknown CPU";
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) model = line.substr(line.find_first_not_of(" \t", colon + 1));
      break;
    }
  return fmt::format("{}, {} logical cores", model, std::thread::hardware_concurrency());
}

ProfileKey make_profile_key(const Graph& sized, int threads, const std::string& conv_algorithm,
                            const std::string& tier) {
  ProfileKey k;
  k.machine = machine_description();
  k.threads = threads;
  k.conv_algorithm = conv_algorithm;
  k.tier = tier;
  k.model = sized.info.model;
  Hash64 h;
  auto add = [&](std::string_view s) { h.update(std::as_bytes(std::span<const char>(s.data(), s.size()))); };
  for (const Op& op : sized.ops) add(fmt::format("{}:{};", op.name, static_cast<int>(op.type)));
  for (const Tensor& t : sized.tensors) add(fmt::format("{}={};", t.name, t.bytes));
  k.graph_hash = hex(h.digest());
  return k;
}

std::optional<std::string> profile_cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0')
    return (std::filesystem::path(xdg) / "ferry" / "profiles").string();
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0')
    return (std::filesystem::path(home) / ".cache" / "ferry" / "profiles").string();
  return std::nullopt;
}

std::string profile_cache_path(const std::string& dir, const ProfileKey& key) {
  return (std::filesystem::path(dir) / (key.digest() + ".json")).string();
}

std::string to_figures_json(const ProfileKey& key, const MeasuredFigures& f) {
  Json j;
  j["format_version"] = key.format_version;
  j["key"] = {{"machine", key.machine},   {"threads", key.threads},    {"conv_algorithm", key.conv_algorithm},
              {"tier", key.tier},         {"model", key.model},       {"graph_hash", key.graph_hash}};
  j["op_us"] = f.op_us;
  Json links = Json::object();
  for (size_t l = 0; l < kNumLinks; ++l)
    if (f.links[l]) links[std::string(to_string(static_cast<Link>(l)))] = link_json(*f.links[l]);
  j["links"] = links;
  Json codecs = Json::array();
  for (const CodecFigure& c : f.codecs)
    codecs.push_back({{"class", c.tensor_class},
                      {"codec", std::string(to_string(c.codec))},
                      {"ratio", c.estimate.ratio},
                      {"encode_bytes_per_s", c.estimate.encode_bytes_per_s},
                      {"decode_bytes_per_s", c.estimate.decode_bytes_per_s},
                      {"samples", c.estimate.samples}});
  j["codecs"] = codecs;
  return j.dump(1) + "\n";
}

Result<CachedFigures> parse_figures_json(std::string_view text_in, std::string_view source_name, size_t num_ops) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(fmt::format("{}: {}", source_name, why));
  };
  Json j;
  try {
    j = Json::parse(text_in);
  } catch (const Json::exception& e) {
    return bad(fmt::format("not valid JSON ({})", e.what()));
  }
  if (!j.is_object()) return bad("not a JSON object");
  if (!j.contains("format_version") || !j["format_version"].is_number_integer())
    return bad("format_version: missing or not an integer");
  CachedFigures c;
  c.key.format_version = j["format_version"].get<int>();
  if (c.key.format_version != kProfileCacheFormatVersion)
    return bad(fmt::format("format_version {} (this Ferry reads {})", c.key.format_version, kProfileCacheFormatVersion));
  if (!j.contains("key") || !j["key"].is_object()) return bad("key: missing or not an object");
  const Json& k = j["key"];
  Status st;
  auto field = [&](const char* name, std::string& out) {
    Result<std::string> v = text(k, name);
    if (!v.ok() && st.ok()) st = v.status();
    if (v.ok()) out = *v;
  };
  field("machine", c.key.machine);
  field("conv_algorithm", c.key.conv_algorithm);
  field("tier", c.key.tier);
  field("model", c.key.model);
  field("graph_hash", c.key.graph_hash);
  if (!st.ok()) return bad(st.message());
  if (!k.contains("threads") || !k["threads"].is_number_integer()) return bad("key.threads: missing or not an integer");
  c.key.threads = k["threads"].get<int>();
  if (!j.contains("op_us") || !j["op_us"].is_array()) return bad("op_us: missing or not an array");
  if (j["op_us"].size() != num_ops) return bad(fmt::format("op_us has {} entries, the graph has {} ops", j["op_us"].size(), num_ops));
  for (size_t i = 0; i < num_ops; ++i) {
    const Json& v = j["op_us"][i];
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0 || v.get<double>() > 1e12)
      return bad(fmt::format("op_us[{}]: not a time in [0, 1e12] us", i));
    c.figures.op_us.push_back(v.get<double>());
  }
  if (!j.contains("links") || !j["links"].is_object()) return bad("links: missing or not an object");
  for (auto it = j["links"].begin(); it != j["links"].end(); ++it) {
    std::optional<size_t> which;
    for (size_t l = 0; l < kNumLinks; ++l)
      if (it.key() == to_string(static_cast<Link>(l))) which = l;
    if (!which) return bad(fmt::format("links.{}: unknown link (h2d, d2h, ssd_read, ssd_write)", it.key()));
    const std::string where = "links." + it.key();
    LinkFit f;
    Result<double> rate = number(*it, "bytes_per_s", 1, 1e21, where);
    Result<double> latency = number(*it, "latency_us", 0, 1e9, where);
    Result<double> samples = number(*it, "samples", 0, 1e15, where);
    Result<double> bytes = number(*it, "bytes", 0, 1e19, where);
    for (const Result<double>* r : {&rate, &latency, &samples, &bytes})
      if (!r->ok()) return bad(r->status().message());
    f.bytes_per_s = *rate;
    f.latency_us = *latency;
    f.samples = static_cast<size_t>(*samples);
    f.bytes = static_cast<uint64_t>(*bytes);
    c.figures.links[*which] = f;
  }
  if (!j.contains("codecs") || !j["codecs"].is_array()) return bad("codecs: missing or not an array");
  for (size_t i = 0; i < j["codecs"].size(); ++i) {
    const Json& e = j["codecs"][i];
    const std::string where = fmt::format("codecs[{}]", i);
    if (!e.is_object()) return bad(where + ": not an object");
    CodecFigure f;
    Result<std::string> cls = text(e, "class");
    Result<std::string> codec = text(e, "codec");
    if (!cls.ok()) return bad(where + ": " + cls.status().message());
    if (!codec.ok()) return bad(where + ": " + codec.status().message());
    std::optional<CodecId> id = codec_from_string(*codec);
    if (!id || *id == CodecId::kNone || is_lossy(*id))
      return bad(fmt::format("{}.codec: '{}' is not a lossless codec other than none", where, *codec));
    Result<double> ratio = number(e, "ratio", 1e-6, 4, where);
    Result<double> enc = number(e, "encode_bytes_per_s", 1, 1e21, where);
    Result<double> dec = number(e, "decode_bytes_per_s", 1, 1e21, where);
    Result<double> samples = number(e, "samples", 0, 1e15, where);
    for (const Result<double>* r : {&ratio, &enc, &dec, &samples})
      if (!r->ok()) return bad(r->status().message());
    f.tensor_class = *cls;
    f.codec = *id;
    f.estimate = CodecEstimate{*ratio, *enc, *dec, static_cast<uint64_t>(*samples)};
    c.figures.codecs.push_back(std::move(f));
  }
  return c;
}

Result<std::optional<MeasuredFigures>> read_figures(const std::string& path, const ProfileKey& key, size_t num_ops) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::optional<MeasuredFigures>();
  FERRY_ASSIGN_OR_RETURN(std::string content, read_regular_file(path, kMaxFiguresBytes, "measured profile"));
  Result<CachedFigures> parsed = parse_figures_json(content, path, num_ops);
  if (!parsed.ok()) return Status::InvalidArgument(parsed.status().message());
  const ProfileKey& got = parsed->key;
  auto differs = [&](const char* what, const std::string& mine, const std::string& theirs) {
    return Status::InvalidArgument(fmt::format("{}: measured for {} '{}', this run is '{}'", path, what, theirs, mine));
  };
  if (got.machine != key.machine) return differs("machine", key.machine, got.machine);
  if (got.model != key.model) return differs("model", key.model, got.model);
  if (got.conv_algorithm != key.conv_algorithm) return differs("convolution algorithm", key.conv_algorithm, got.conv_algorithm);
  if (got.tier != key.tier) return differs("swap tier", key.tier, got.tier);
  if (got.threads != key.threads) return differs("threads", std::to_string(key.threads), std::to_string(got.threads));
  if (got.graph_hash != key.graph_hash)
    return differs("graph (ops and tensor sizes; another shape, optimizer or update order?)", key.graph_hash, got.graph_hash);
  return std::optional<MeasuredFigures>(parsed->figures);
}

Status write_figures(const std::string& path, const ProfileKey& key, const MeasuredFigures& f) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec)
    return Status::IoError(fmt::format("cannot create the profile cache directory {}: {}",
                                       std::filesystem::path(path).parent_path().string(), ec.message()));
  return write_file_atomically(path, to_figures_json(key, f), "measured profile");
}

}  // namespace ferry
