// Measured figures (loop/figures.h) and the profile cache (loop/profile_cache.h).
#include "loop/figures.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cost/profile.h"
#include "graph/zoo/zoo.h"
#include "loop/profile_cache.h"

namespace ferry {
namespace {

HardwareProfile cpu_profile() { return load_profile("cpu-local").value(); }
// cpu-local as it was before in-place SSD transfers: every SSD copy crosses the host leg.
HardwareProfile staged_profile() {
  HardwareProfile p = cpu_profile();
  p.storage.device_direct = false;
  return p;
}

TransferRecord record(Direction d, const char* tier, uint64_t bytes, double us) {
  TransferRecord r;
  r.direction = d;
  r.tier = tier;
  r.bytes = bytes;
  r.start_us = 100;
  r.end_us = 100 + us;
  return r;
}

TEST(Figures, FitsLatencyAndBandwidthPerLink) {
  const CostModel base(cpu_profile());
  std::vector<TransferRecord> rs;
  // d2h: 5 us + 1 GB/s (1000 bytes per us); h2d: one size only -> summed rate, no latency.
  for (uint64_t b : {1u << 16, 1u << 20, 1u << 22, 1u << 24})
    rs.push_back(record(Direction::kSwapOut, "host", b, 5 + static_cast<double>(b) / 1000));
  rs.push_back(record(Direction::kSwapIn, "host", 1 << 20, 524.288));
  rs.push_back(record(Direction::kSwapIn, "host", 1 << 20, 524.288));
  const MeasuredFigures f = fit_figures({1, 2, 3}, rs, base);
  ASSERT_TRUE(f.links[static_cast<size_t>(Link::kDeviceToHost)]);
  EXPECT_NEAR(f.links[static_cast<size_t>(Link::kDeviceToHost)]->bytes_per_s, 1e9, 1e6);
  EXPECT_NEAR(f.links[static_cast<size_t>(Link::kDeviceToHost)]->latency_us, 5, 0.01);
  EXPECT_EQ(f.links[static_cast<size_t>(Link::kDeviceToHost)]->samples, 4u);
  ASSERT_TRUE(f.links[static_cast<size_t>(Link::kHostToDevice)]);
  EXPECT_NEAR(f.links[static_cast<size_t>(Link::kHostToDevice)]->bytes_per_s, 2e9, 1e6);
  EXPECT_EQ(f.links[static_cast<size_t>(Link::kHostToDevice)]->latency_us, 0);
  EXPECT_FALSE(f.links[static_cast<size_t>(Link::kSsdRead)]) << "nothing was read from the SSD";
  EXPECT_EQ(f.op_us, (std::vector<double>{1, 2, 3}));
}

TEST(Figures, SsdTransfersAreFittedAfterTheirHostLeg) {
  const CostModel base(staged_profile());
  std::vector<TransferRecord> rs;
  // Host leg: 1 GB/s both ways, no latency; the SSD transfers take the host leg + 0.25 GB/s.
  for (uint64_t b : {1u << 20, 1u << 22}) {
    rs.push_back(record(Direction::kSwapOut, "host", b, static_cast<double>(b) / 1000));
    rs.push_back(record(Direction::kSwapOut, "ssd", b, static_cast<double>(b) / 1000 + static_cast<double>(b) / 250));
  }
  const MeasuredFigures f = fit_figures({}, rs, base);
  ASSERT_TRUE(f.links[static_cast<size_t>(Link::kSsdWrite)]);
  EXPECT_NEAR(f.links[static_cast<size_t>(Link::kSsdWrite)]->bytes_per_s, 2.5e8, 1e6);
  // Applied, the cost model predicts those transfers.
  const CostModel measured(apply_links(f, staged_profile()));
  EXPECT_NEAR(measured.transfer_us(Direction::kSwapOut, Tier::kSsd, 1 << 22), 4194.304 + 16777.216, 1);
  EXPECT_TRUE(validate_profile(apply_links(f, staged_profile())).ok());
  // A coded tensor's SSD transfer (its time is the codec's pipeline) fits no link; the codec
  // figures pass through, their infinite rates capped.
  TransferRecord coded = record(Direction::kSwapOut, "ssd", 1 << 22, 1e6);
  coded.tensor = 7;
  rs.push_back(coded);
  const std::vector<CodecFigure> codecs = {
      {"relu/activation", CodecId::kZeroMask, CodecEstimate{0.5, INFINITY, 3e9, 1}}};
  const MeasuredFigures g = fit_figures({}, rs, base, codecs, {{7, CodecId::kZeroMask}});
  EXPECT_EQ(g.links[static_cast<size_t>(Link::kSsdWrite)], f.links[static_cast<size_t>(Link::kSsdWrite)]);
  ASSERT_EQ(g.codecs.size(), 1u);
  EXPECT_TRUE(std::isfinite(g.codecs[0].estimate.encode_bytes_per_s));
  EXPECT_EQ(cost_options(g).codecs, g.codecs);
  EXPECT_NE(fit_figures({}, rs, base).links[static_cast<size_t>(Link::kSsdWrite)], f.links[static_cast<size_t>(Link::kSsdWrite)])
      << "counted as raw, the coded transfer would have changed the fit";
}

// On a device_direct profile (cpu-local: the SSD tier moves raw copies in place) an SSD transfer
// crosses no host leg: its whole duration is the disk's.
TEST(Figures, InPlaceSsdTransfersAreTheDisksAlone) {
  ASSERT_TRUE(cpu_profile().storage.device_direct);
  std::vector<TransferRecord> rs;
  for (uint64_t b : {1u << 20, 1u << 22}) {
    rs.push_back(record(Direction::kSwapOut, "host", b, static_cast<double>(b) / 1000));
    rs.push_back(record(Direction::kSwapOut, "ssd", b, static_cast<double>(b) / 250));
  }
  const MeasuredFigures f = fit_figures({}, rs, CostModel(cpu_profile()));
  ASSERT_TRUE(f.links[static_cast<size_t>(Link::kSsdWrite)]);
  EXPECT_NEAR(f.links[static_cast<size_t>(Link::kSsdWrite)]->bytes_per_s, 2.5e8, 1e6);
  const CostModel measured(apply_links(f, cpu_profile()));
  EXPECT_NEAR(measured.transfer_us(Direction::kSwapOut, Tier::kSsd, 1 << 22), 16777.216, 1);
  // Read as staged, the same records would leave the disk a third of the time (b/250 - b/1000).
  const MeasuredFigures staged = fit_figures({}, rs, CostModel(staged_profile()));
  EXPECT_NEAR(staged.links[static_cast<size_t>(Link::kSsdWrite)]->bytes_per_s, 1e9 / 3, 1e6);
}

TEST(Figures, MergeKeepsTheFasterOpAndTheNewerLink) {
  MeasuredFigures a, b;
  a.op_us = {10, 5, 0};
  b.op_us = {8, 6, 3};
  a.links[0] = LinkFit{.bytes_per_s = 1e9, .samples = 1};
  b.links[1] = LinkFit{.bytes_per_s = 2e9, .samples = 1};
  const MeasuredFigures m = merge_figures(a, b);
  EXPECT_EQ(m.op_us, (std::vector<double>{8, 5, 3}));
  EXPECT_EQ(m.links[0]->bytes_per_s, 1e9);
  EXPECT_EQ(m.links[1]->bytes_per_s, 2e9);
}

TEST(Figures, OpTimesMeasuredBesideCopiesAreDividedByTheirPredictedStretch) {
  EXPECT_EQ(unstretched_op_times({100, 300, 50}, {1.0, 1.5, 2.0}), (std::vector<double>{100, 200, 25}));
  EXPECT_EQ(unstretched_op_times({100, 300}, {}), (std::vector<double>{100, 300}));       // no interference
  EXPECT_EQ(unstretched_op_times({100, 300}, {2.0}), (std::vector<double>{100, 300}));    // another plan's
  EXPECT_EQ(unstretched_op_times({100, 300}, {0.0, 2.0}), (std::vector<double>{100, 150}));
}

TEST(Figures, CompareNamesTheLargestChange) {
  MeasuredFigures a;
  a.op_us = {100, 100};
  a.links[static_cast<size_t>(Link::kSsdWrite)] = LinkFit{.bytes_per_s = 1e9};
  MeasuredFigures b = a;
  EXPECT_EQ(compare_figures(a, b).relative, 0);
  b.op_us = {110, 100};
  EXPECT_NEAR(compare_figures(a, b).relative, 0.05, 1e-9);
  b.links[static_cast<size_t>(Link::kSsdWrite)]->bytes_per_s = 0.25e9;
  const FiguresChange c = compare_figures(a, b);
  EXPECT_NEAR(c.relative, 3, 1e-6);
  EXPECT_EQ(c.what, "ssd_write 4.00x slower");
}

// ---- the cache ----

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() / ("ferry_cache_test_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

Graph mini(int64_t batch) {
  ModelConfig c;
  c.batch = batch;
  return build_model("resnet-mini", c).value();
}

MeasuredFigures some_figures(size_t ops) {
  MeasuredFigures f;
  for (size_t i = 0; i < ops; ++i) f.op_us.push_back(1.5 * static_cast<double>(i));
  f.links[static_cast<size_t>(Link::kSsdRead)] = LinkFit{.bytes_per_s = 3e8, .latency_us = 40, .samples = 7, .bytes = 1 << 24};
  f.codecs = {{"relu/activation", CodecId::kZeroMask, CodecEstimate{0.53, 2.5e9, 3.1e9, 2}},
              {"relu/activation", CodecId::kLz4, CodecEstimate{0.61, 9e8, 2e9, 2}}};
  return f;
}

TEST(ProfileCache, RoundTripsAndRefusesAnotherModelShapeMachineOrVersion) {
  TempDir dir;
  const Graph g = mini(4);
  const ProfileKey key = make_profile_key(g, 2, "auto", "host");
  const std::string path = profile_cache_path(dir.path.string(), key);
  Result<std::optional<MeasuredFigures>> none = read_figures(path, key, g.ops.size());
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value()) << "no file: a miss, not an error";
  const MeasuredFigures f = some_figures(g.ops.size());
  ASSERT_TRUE(write_figures(path, key, f).ok());
  Result<std::optional<MeasuredFigures>> back = read_figures(path, key, g.ops.size());
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_TRUE(back->has_value());
  EXPECT_EQ(**back, f);

  // Other shapes, models, options and machines are other keys, hence other files...
  const ProfileKey other_shape = make_profile_key(mini(8), 2, "auto", "host");
  EXPECT_NE(other_shape.graph_hash, key.graph_hash);
  EXPECT_NE(profile_cache_path(dir.path.string(), other_shape), path);
  EXPECT_NE(profile_cache_path(dir.path.string(), make_profile_key(g, 1, "auto", "host")), path);
  EXPECT_NE(profile_cache_path(dir.path.string(), make_profile_key(g, 2, "direct", "host")), path);
  const ProfileKey other_tier = make_profile_key(g, 2, "auto", "ssd");
  EXPECT_NE(profile_cache_path(dir.path.string(), other_tier), path);
  ProfileKey other_machine = key;
  other_machine.machine = "another CPU, 64 logical cores";
  EXPECT_NE(profile_cache_path(dir.path.string(), other_machine), path);
  // ...and a file read for another key (a copied or colliding file) is refused, naming why.
  for (const auto& [k, what] : std::vector<std::pair<ProfileKey, std::string>>{
           {other_machine, "machine"}, {other_shape, "graph"}, {make_profile_key(g, 1, "auto", "host"), "threads"},
           {other_tier, "swap tier"}}) {
    Result<std::optional<MeasuredFigures>> r = read_figures(path, k, g.ops.size());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().message();
  }
  // A file of another format version is refused.
  std::string text = to_figures_json(key, f);
  const std::string version = fmt::format("\"format_version\": {}", kProfileCacheFormatVersion);
  const size_t at = text.find(version);
  ASSERT_NE(at, std::string::npos) << text.substr(0, 200);
  text.replace(at, version.size(), "\"format_version\": 99");
  std::ofstream(path) << text;
  Result<std::optional<MeasuredFigures>> old = read_figures(path, key, g.ops.size());
  ASSERT_FALSE(old.ok());
  EXPECT_NE(old.status().message().find("format_version 99"), std::string::npos) << old.status().message();
}

TEST(ProfileCache, MalformedFilesNameTheProblem) {
  const size_t ops = 3;
  const ProfileKey key{
      .machine = "m", .threads = 1, .conv_algorithm = "auto", .tier = "host", .model = "x", .graph_hash = "0"};
  const std::string good = to_figures_json(key, some_figures(ops));
  ASSERT_TRUE(parse_figures_json(good, "f", ops).ok());
  auto with_codec = [&](const char* field, const nlohmann::json& value) {
    nlohmann::json j = nlohmann::json::parse(good);
    j["codecs"][0][field] = value;
    return j.dump();
  };
  auto without_codecs = [&] {
    nlohmann::json j = nlohmann::json::parse(good);
    j.erase("codecs");
    return j.dump();
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{", "not valid JSON"},
      {"[]", "not a JSON object"},
      {fmt::format(R"({{"format_version": {}}})", kProfileCacheFormatVersion), "key"},
      {good.substr(0, good.find("\"op_us\"")) + R"("op_us": [1, 2], "links": {}})", "op_us has 2 entries"},
      {good.substr(0, good.find("\"op_us\"")) + R"("op_us": [1, -2, 3], "links": {}})", "op_us[1]"},
      {good.substr(0, good.find("\"op_us\"")) + R"("op_us": [1, 2, 3], "links": {"warp": {}}})", "unknown link"},
      {good.substr(0, good.find("\"op_us\"")) +
           R"("op_us": [1, 2, 3], "links": {"ssd_read": {"bytes_per_s": 0, "latency_us": 0, "samples": 1, "bytes": 1}}})",
       "links.ssd_read.bytes_per_s"},
      {without_codecs(), "codecs: missing"},
      {with_codec("codec", "bf16"), "codecs[0].codec: 'bf16'"},
      {with_codec("ratio", 0), "codecs[0].ratio"},
      {with_codec("decode_bytes_per_s", "fast"), "codecs[0].decode_bytes_per_s"},
  };
  for (const auto& [text, says] : cases) {
    Result<CachedFigures> r = parse_figures_json(text, "f", ops);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(says), std::string::npos) << r.status().message();
  }
}

TEST(ProfileCache, DirectoryFollowsXdgCacheHome) {
  const char* old = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old ? old : "";
  ::setenv("XDG_CACHE_HOME", "/some/where", 1);
  EXPECT_EQ(profile_cache_dir(), std::optional<std::string>("/some/where/ferry/profiles"));
  if (old) ::setenv("XDG_CACHE_HOME", saved.c_str(), 1); else ::unsetenv("XDG_CACHE_HOME");
}

}  // namespace
}  // namespace ferry
