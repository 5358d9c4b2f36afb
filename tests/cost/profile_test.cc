#include "cost/profile.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cost/cost_model.h"
#include "cost/test_profile.h"

namespace ferry {
namespace {

using Json = nlohmann::json;

const std::vector<std::string> kShipped = {"a100-40gb-pcie4", "a100-80gb-sxm4", "cpu-local",      "h100-80gb-pcie5",
                                           "h100-80gb-sxm5",  "rtx4090-pcie4",  "v100-16gb-pcie3", "v100-16gb-sxm2",
                                           "v100-32gb-sxm2"};

::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

std::string shipped_path(const std::string& name) { return std::string(FERRY_SOURCE_DIR) + "/profiles/" + name + ".json"; }

Json shipped_json(const std::string& name) {
  std::ifstream in(shipped_path(name));
  std::stringstream ss;
  ss << in.rdbuf();
  return Json::parse(ss.str());
}

// Parses `doc` after `edit`, expecting InvalidArgument; returns the message.
std::string parse_error(Json doc, const std::function<void(Json&)>& edit) {
  edit(doc);
  Result<HardwareProfile> p = parse_profile(doc.dump(), "edited.json");
  EXPECT_FALSE(p.ok()) << "edit was accepted";
  if (p.ok()) return "";
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  return p.status().message();
}

// Dotted paths of every number and boolean in `j`, except under "sources".
void leaves(const Json& j, const std::string& path, std::vector<std::string>& out) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (path.empty() && it.key() == "sources") continue;
      leaves(it.value(), path.empty() ? it.key() : path + "." + it.key(), out);
    }
  } else if (j.is_number() || j.is_boolean()) {
    if (path != "version") out.push_back(path);
  }
}

class ProfilesDirGuard {
 public:
  explicit ProfilesDirGuard(const std::string& dir) { setenv("FERRY_PROFILES_DIR", dir.c_str(), 1); }
  ~ProfilesDirGuard() { unsetenv("FERRY_PROFILES_DIR"); }
};

TEST(ProfileTest, ShippedProfilesLoadByNameAndCiteASourceForEveryNumber) {
  const std::vector<std::string> names = list_profiles();
  for (const std::string& name : kShipped) {
    SCOPED_TRACE(name);
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end());
    Result<HardwareProfile> p = load_profile(name);
    ASSERT_TRUE(p.ok()) << p.status().message();
    EXPECT_EQ(p->name, name);
    EXPECT_TRUE(validate_profile(*p).ok());
    // Every number is covered by a source entry for itself or one of its enclosing sections.
    std::vector<std::string> paths;
    leaves(shipped_json(name), "", paths);
    ASSERT_FALSE(paths.empty());
    for (const std::string& path : paths) {
      bool cited = false;
      for (std::string prefix = path;; prefix = prefix.substr(0, prefix.rfind('.'))) {
        auto it = p->sources.find(prefix);
        if (it != p->sources.end() && !it->second.empty()) cited = true;
        if (cited || prefix.find('.') == std::string::npos) break;
      }
      EXPECT_TRUE(cited) << path << " has no source";
    }
  }
}

TEST(ProfileTest, ShippedGpuProfilesCarryTheDatasheetNumbers) {
  // Spot checks of the transcription (peaks are dense rates; see each file's sources).
  Result<HardwareProfile> v100 = load_profile("v100-16gb-pcie3");
  Result<HardwareProfile> a100 = load_profile("a100-40gb-pcie4");
  ASSERT_TRUE(v100.ok() && a100.ok());
  EXPECT_EQ(v100->peak_flops[static_cast<size_t>(ComputeDType::kFp32)], 14e12);
  EXPECT_FALSE(v100->peak_flops[static_cast<size_t>(ComputeDType::kBf16)].has_value());  // Volta has none
  EXPECT_EQ(a100->peak_flops[static_cast<size_t>(ComputeDType::kTf32)], 156e12);
  EXPECT_EQ(a100->memory_bandwidth_bytes_per_s, 1555e9);
  EXPECT_NEAR(v100->host_link.host_to_device.effective_bytes_per_s(), 12.6e9, 0.1e9);
  EXPECT_TRUE(contains(load_profile("cpu-local")->notes, "MEASURED"));
  // The SXM parts (datasheet SXM columns; H100's tensor rates are the dense halves of the quoted ones).
  Result<HardwareProfile> v100s = load_profile("v100-32gb-sxm2");
  Result<HardwareProfile> a100s = load_profile("a100-80gb-sxm4");
  Result<HardwareProfile> h100s = load_profile("h100-80gb-sxm5");
  ASSERT_TRUE(v100s.ok() && a100s.ok() && h100s.ok());
  EXPECT_EQ(v100s->peak_flops[static_cast<size_t>(ComputeDType::kFp16)], 125e12);
  EXPECT_EQ(v100s->memory_capacity_bytes, uint64_t{32} << 30);
  EXPECT_EQ(a100s->memory_bandwidth_bytes_per_s, 2039e9);
  EXPECT_EQ(h100s->peak_flops[static_cast<size_t>(ComputeDType::kBf16)], 989.4e12);
  EXPECT_EQ(h100s->memory_bandwidth_bytes_per_s, 3.35e12);
  // Calibrated profiles carry per-unit efficiencies for the matrix classes and the Winograd fraction.
  for (const HardwareProfile* p : {&*v100s, &*a100s, &*h100s}) {
    EXPECT_TRUE(p->efficiency[static_cast<size_t>(OpClass::kConv)].per_unit()) << p->name;
    EXPECT_LT(p->conv3x3_flop_fraction[static_cast<size_t>(ComputeDType::kFp32)], 1.0) << p->name;
    EXPECT_TRUE(contains(p->sources.at("compute.efficiency"), "bench/gpu_calibration.py")) << p->name;
  }
}

TEST(ProfileTest, JsonRoundTripAndSaveThenLoadByPath) {
  HardwareProfile p = cost_test::round_profile();
  p.peak_flops[static_cast<size_t>(ComputeDType::kBf16)] = 3e12;
  p.notes = "with \"quotes\" and unicode \u00b5s";
  Result<HardwareProfile> back = parse_profile(to_profile_json(p), "memory");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, p);

  const std::string path = ::testing::TempDir() + "/ferry_profile_roundtrip.json";
  ASSERT_TRUE(save_profile(p, path).ok());
  Result<HardwareProfile> loaded = load_profile(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(*loaded, p);
  std::filesystem::remove(path);
}

// Compute interference is optional (0: a copy engine that leaves the kernels alone) and written
// only where it is not 0, so the GPU profiles' files do not change.
TEST(ProfileTest, ComputeInterferenceIsOptionalRoundTripsAndIsBounded) {
  HardwareProfile p = cost_test::round_profile();
  EXPECT_EQ(to_profile_json(p).find("interference"), std::string::npos);
  p.host_link.device_to_host.compute_interference = 2.5;
  p.host_link.host_to_device.compute_interference = 3;
  p.storage.write_compute_interference = 0.25;
  p.storage.read_compute_interference = 0.125;
  Result<HardwareProfile> back = parse_profile(to_profile_json(p), "memory");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, p);
  const CostModel cost(p);
  EXPECT_EQ(cost.link(Link::kDeviceToHost).interference, 2.5);
  EXPECT_EQ(cost.link(Link::kSsdRead).interference, 0.125);
  EXPECT_TRUE(cost.has_interference());
  EXPECT_FALSE(CostModel(cost_test::round_profile()).has_interference());
  // A hidden host swap-out of t us adds t f / (1 + f) to the op beside it; an SSD one also that of
  // the disk's data phase.
  EXPECT_DOUBLE_EQ(cost.interference_us(Direction::kSwapOut, Tier::kHost, 100000), 110 * 2.5 / 3.5);
  EXPECT_DOUBLE_EQ(cost.interference_us(Direction::kSwapIn, Tier::kSsd, 100000), 110 * 0.75 + 200 * 0.125 / 1.125);
  for (Result<HardwareProfile> shipped : {load_profile("a100-40gb-pcie4"), load_profile("v100-16gb-pcie3")}) {
    ASSERT_TRUE(shipped.ok());
    EXPECT_FALSE(CostModel(*shipped).has_interference()) << shipped->name;
  }

  p.storage.read_compute_interference = -0.5;
  EXPECT_TRUE(contains(validate_profile(p).message(), "storage.read_compute_interference: -0.5 is outside [0, 100]"));
  p = cost_test::round_profile();
  p.host_link.host_to_device.compute_interference = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(contains(validate_profile(p).message(), "host_link.host_to_device.compute_interference: inf"));
  const Json good = shipped_json("a100-40gb-pcie4");
  EXPECT_TRUE(contains(parse_error(good, [](Json& j) { j["storage"]["write_compute_interference"] = "high"; }),
                       "storage.write_compute_interference"));
  EXPECT_TRUE(contains(parse_error(good, [](Json& j) { j["host_link"]["device_to_host"]["compute_interference"] = 101; }),
                       "host_link.device_to_host.compute_interference: 101 is outside [0, 100]"));
}

TEST(ProfileTest, PerUnitEfficienciesRoundTripAndAreAllOrNothing) {
  HardwareProfile p = cost_test::round_profile();  // fp32, tf32, fp16
  OpEfficiency& mm = p.efficiency[static_cast<size_t>(OpClass::kMatMul)];
  mm.compute = 0.7;
  mm.compute_by_unit[static_cast<size_t>(ComputeDType::kTf32)] = 0.45;
  mm.compute_by_unit[static_cast<size_t>(ComputeDType::kFp16)] = 0.4;
  p.conv3x3_flop_fraction[static_cast<size_t>(ComputeDType::kFp32)] = 0.5;
  const std::string text = to_profile_json(p);
  const Json doc = Json::parse(text);
  EXPECT_EQ(doc["compute"]["efficiency"]["matmul"]["compute"], Json({{"fp32", 0.7}, {"tf32", 0.45}, {"fp16", 0.4}}));
  EXPECT_EQ(doc["compute"]["efficiency"]["conv"]["compute"], Json(0.6));  // one number for all units
  EXPECT_EQ(doc["compute"]["conv3x3_flop_fraction"], Json({{"fp32", 0.5}}));
  Result<HardwareProfile> back = parse_profile(text, "memory");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, p);
  EXPECT_DOUBLE_EQ(back->efficiency[static_cast<size_t>(OpClass::kMatMul)].compute_for(ComputeDType::kTf32), 0.45);
  // A unit the device has must be listed; a unit it lacks must not be.
  EXPECT_TRUE(contains(parse_error(doc, [](Json& d) { d["compute"]["efficiency"]["matmul"]["compute"].erase("fp16"); }),
                       "compute.efficiency.matmul.compute.fp16: missing field"));
  EXPECT_TRUE(contains(parse_error(doc, [](Json& d) { d["compute"]["efficiency"]["matmul"]["compute"]["bf16"] = 0.5; }),
                       "compute.efficiency.matmul.compute.bf16: the profile has no bf16 rate"));
  EXPECT_TRUE(contains(parse_error(doc, [](Json& d) { d["compute"]["efficiency"]["matmul"]["compute"]["tf32"] = 1.5; }),
                       "compute.efficiency.matmul.compute.tf32: 1.5 is not in (0, 1]"));
  EXPECT_TRUE(contains(parse_error(doc, [](Json& d) { d["compute"]["conv3x3_flop_fraction"]["fp8"] = 0.5; }),
                       "compute.conv3x3_flop_fraction.fp8: unknown compute dtype"));
  EXPECT_TRUE(contains(parse_error(doc, [](Json& d) { d["compute"]["conv3x3_flop_fraction"]["fp32"] = 0; }),
                       "compute.conv3x3_flop_fraction.fp32: 0 is not in (0, 1]"));
  // Programmatic profiles: overrides for some units only are refused by validation.
  HardwareProfile partial = p;
  partial.efficiency[static_cast<size_t>(OpClass::kMatMul)].compute_by_unit[static_cast<size_t>(ComputeDType::kFp16)] =
      std::nullopt;
  EXPECT_TRUE(contains(validate_profile(partial).message(), "compute.efficiency.matmul.compute.fp16: missing"));
}

TEST(ProfileTest, APrecisionWithoutItsRateIsAnErrorNamingIt) {
  Result<HardwareProfile> v100 = load_profile("v100-16gb-pcie3");
  ASSERT_TRUE(v100.ok());
  EXPECT_TRUE(check_precision(*v100, Precision::kFp32).ok());
  EXPECT_TRUE(check_precision(*v100, Precision::kAmpFp16).ok());
  for (Precision p : {Precision::kTf32, Precision::kAmpBf16}) {
    const Status s = check_precision(*v100, p);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    const std::string unit = p == Precision::kTf32 ? "tf32" : "bf16";
    EXPECT_TRUE(contains(s.message(), "precision " + std::string(to_string(p))));
    EXPECT_TRUE(contains(s.message(), "compute.peak_flops." + unit));
    EXPECT_TRUE(contains(s.message(), "'v100-16gb-pcie3'"));
    EXPECT_TRUE(contains(s.message(), "supports fp32, amp-fp16"));
  }
  Result<HardwareProfile> a100 = load_profile("a100-40gb-pcie4");
  ASSERT_TRUE(a100.ok());
  for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kAmpFp16, Precision::kAmpBf16})
    EXPECT_TRUE(check_precision(*a100, p).ok()) << to_string(p);
}

TEST(ProfileTest, UnknownNameListsTheKnownProfiles) {
  Result<HardwareProfile> p = load_profile("tpu-v9");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(p.status().message(), "unknown hardware profile 'tpu-v9'"));
  EXPECT_TRUE(contains(p.status().message(), "a100-40gb-pcie4, a100-80gb-sxm4, cpu-local, h100-80gb-pcie5"));
  Result<HardwareProfile> missing = load_profile("/nonexistent/dir/x.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(contains(missing.status().message(), "'/nonexistent/dir/x.json': No such file or directory"));
}

TEST(ProfileTest, EnvironmentVariableOverridesTheProfilesDirectory) {
  const std::string dir = ::testing::TempDir() + "/ferry_profiles_env";
  std::filesystem::create_directories(dir);
  HardwareProfile mine = cost_test::round_profile();
  mine.name = "mine";
  ASSERT_TRUE(save_profile(mine, dir + "/mine.json").ok());
  {
    ProfilesDirGuard guard(dir);
    EXPECT_EQ(profiles_dir(), dir);
    EXPECT_EQ(list_profiles(), std::vector<std::string>{"mine"});
    Result<HardwareProfile> p = load_profile("mine");
    ASSERT_TRUE(p.ok()) << p.status().message();
    EXPECT_EQ(p->name, "mine");
    Result<HardwareProfile> gone = load_profile("a100-40gb-pcie4");
    ASSERT_FALSE(gone.ok());
    EXPECT_TRUE(contains(gone.status().message(), "known profiles (in " + dir + "): mine"));
  }
  EXPECT_TRUE(load_profile("a100-40gb-pcie4").ok());
  std::filesystem::remove_all(dir);
}

TEST(ProfileTest, MalformedProfilesNameTheFieldAtFault) {
  Result<HardwareProfile> bad = parse_profile("{\"format\": ", "bad.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(bad.status().message(), "bad.json: malformed JSON"));
  // A number literal past double's range is an error, not an escaping exception (fuzz_profile found it).
  Result<HardwareProfile> huge = parse_profile("{\"format\": 1e300090}", "huge.json");
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(huge.status().message(), "huge.json: malformed JSON"));

  const Json good = shipped_json("a100-40gb-pcie4");
  ASSERT_TRUE(parse_profile(good.dump(), "good.json").ok());
  EXPECT_TRUE(contains(parse_error(good, [](Json& j) { j["memory"].erase("bandwidth_bytes_per_s"); }),
                       "edited.json: memory.bandwidth_bytes_per_s: missing field"));
  EXPECT_TRUE(contains(parse_error(good, [](Json& j) { j["host_link"]["host_to_device"]["nominal_bytes_per_s"] = 0; }),
                       "host_link.host_to_device.nominal_bytes_per_s: 0 is outside [1, 1e+21] bytes/s"));
  EXPECT_TRUE(contains(parse_error(good, [](Json& j) { j["storage"]["write_bytes_per_s"] = -5e9; }),
                       "storage.write_bytes_per_s: -5"));
  EXPECT_TRUE(contains(parse_error(good, [](Json& j) { j["compute"]["peak_flops"]["fp16"] = -1; }),
                       "compute.peak_flops.fp16: -1 is outside [1, 1e+21] FLOP/s"));
  EXPECT_TRUE(contains(parse_error(good, [](Json& j) { j["compute"]["peak_flops"].erase("fp32"); }),
                       "compute.peak_flops.fp32: missing"));
  EXPECT_TRUE(contains(parse_error(good, [](Json& j) { j["compute"]["peak_flops"]["fp8"] = 1e15; }),
                       "compute.peak_flops.fp8: unknown compute dtype"));
  EXPECT_TRUE(contains(parse_error(good, [](Json& j) { j["compute"]["efficiency"]["conv"]["compute"] = 1.5; }),
                       "compute.efficiency.conv.compute: 1.5 is not in (0, 1]"));
  EXPECT_TRUE(contains(parse_error(good, [](Json& j) { j["compute"]["efficiency"].erase("softmax"); }),
                       "compute.efficiency.softmax: missing field"));
  EXPECT_TRUE(contains(parse_error(good, [](Json& j) { j["memory"]["bandwith_bytes_per_s"] = 1; }),
                       "memory.bandwith_bytes_per_s: unknown field"));
  EXPECT_TRUE(contains(parse_error(good, [](Json& j) { j["memory"]["capacity_bytes"] = -5; }),
                       "memory.capacity_bytes: must be a byte count"));
  EXPECT_TRUE(contains(parse_error(good, [](Json& j) { j["memory"]["capacity_bytes"] = "lots"; }),
                       "memory.capacity_bytes:"));
  EXPECT_TRUE(contains(parse_error(good, [](Json& j) { j["host_link"]["concurrent_directions"] = "yes"; }),
                       "host_link.concurrent_directions: must be true or false"));
  EXPECT_TRUE(contains(parse_error(good, [](Json& j) { j["storage"]["queue_depth"] = 0; }),
                       "storage.queue_depth: 0 is not in [1, 1024]"));
  EXPECT_TRUE(contains(parse_error(good, [](Json& j) { j["version"] = 2; }), "version: 2 is not supported"));
  EXPECT_TRUE(contains(parse_error(good, [](Json& j) { j["format"] = "ferry-trace"; }),
                       "format: 'ferry-trace' is not 'ferry-hardware-profile'"));
  EXPECT_TRUE(contains(parse_error(good, [](Json& j) { j["host_link"] = 3; }), "host_link: must be a JSON object"));

  Json with_string_capacity = good;
  with_string_capacity["memory"]["capacity_bytes"] = "40GiB";
  Result<HardwareProfile> p = parse_profile(with_string_capacity.dump(), "s.json");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->memory_capacity_bytes, uint64_t{40} << 30);
}

TEST(ProfileTest, ValidationRejectsNonFiniteAndNonPositiveNumbers) {
  HardwareProfile p = cost_test::round_profile();
  ASSERT_TRUE(validate_profile(p).ok());
  p.peak_flops[static_cast<size_t>(ComputeDType::kFp32)] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(contains(validate_profile(p).message(), "compute.peak_flops.fp32: nan is outside [1, 1e+21] FLOP/s"));
  p = cost_test::round_profile();
  p.host_link.device_to_host.latency_us = -1;
  EXPECT_TRUE(contains(validate_profile(p).message(), "host_link.device_to_host.latency_us: -1 is outside [0, 1e+09] us"));
  p = cost_test::round_profile();
  p.memory_bandwidth_bytes_per_s = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(contains(validate_profile(p).message(), "memory.bandwidth_bytes_per_s: inf"));
  p = cost_test::round_profile();
  p.memory_capacity_bytes = 0;
  EXPECT_TRUE(contains(validate_profile(p).message(), "memory.capacity_bytes"));

  const Status saved = save_profile(p, ::testing::TempDir() + "/never_written.json");
  EXPECT_EQ(saved.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(save_profile(cost_test::round_profile(), "/nonexistent/dir/p.json").code(), StatusCode::kIoError);
}

// Finite but absurd figures used to pass and make predictions infinite (a plan printed
// iteration_ms: null and exited 0): every rate and latency is bounded, and within the bounds a
// prediction of the largest graph stays finite.
TEST(ProfileTest, AbsurdRatesAreRefusedSoPredictionsStayFinite) {
  auto refused = [](auto edit, const std::string& field) {
    HardwareProfile p = cost_test::round_profile();
    edit(p);
    const Status s = validate_profile(p);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << field;
    EXPECT_TRUE(contains(s.message(), field)) << s.message();
  };
  refused([](HardwareProfile& p) { p.peak_flops[0] = 1e-300; }, "compute.peak_flops.fp32: 1e-300 is outside");
  refused([](HardwareProfile& p) { p.peak_flops[0] = 1e300; }, "compute.peak_flops.fp32: 1e+300 is outside");
  refused([](HardwareProfile& p) { p.memory_bandwidth_bytes_per_s = 0.5; }, "memory.bandwidth_bytes_per_s");
  refused([](HardwareProfile& p) { p.host_link.host_to_device.nominal_bytes_per_s = 1e-200; },
          "host_link.host_to_device.nominal_bytes_per_s");
  refused([](HardwareProfile& p) { p.host_link.device_to_host.efficiency = 1e-30; },
          "host_link.device_to_host.nominal_bytes_per_s x efficiency");
  refused([](HardwareProfile& p) { p.efficiency[0].compute = 1e-300; }, "x compute.efficiency.conv.compute");
  refused([](HardwareProfile& p) { p.storage.read_bytes_per_s = 1e-300; }, "storage.read_bytes_per_s");
  refused([](HardwareProfile& p) { p.storage.write_latency_us = 1e300; }, "storage.write_latency_us");
  refused([](HardwareProfile& p) { p.launch_overhead_us = 1e300; }, "compute.launch_overhead_us");

  // At the bounds, the costliest op and transfer Ferry can describe still take finite time.
  HardwareProfile slow = cost_test::round_profile();
  slow.peak_flops = {1.0, std::nullopt, std::nullopt, std::nullopt};
  for (OpEfficiency& e : slow.efficiency) e = {1.0, 1.0};
  slow.memory_bandwidth_bytes_per_s = 1;
  slow.launch_overhead_us = 1e9;
  slow.host_link.host_to_device = slow.host_link.device_to_host = {1, 1, 1e9};
  ASSERT_TRUE(validate_profile(slow).ok()) << validate_profile(slow).message();
  const CostModel cost(slow);
  Graph g;
  Tensor t;
  t.id = 0;
  t.bytes = UINT64_MAX / 2;
  g.tensors.push_back(t);
  Op op;
  op.id = 0;
  op.type = OpType::kConv2d;
  op.inputs = {0};
  op.flops = UINT64_MAX;
  op.bytes_read = op.bytes_written = UINT64_MAX / 2;
  g.ops.push_back(op);
  const double us = cost.op_time_us(g, g.ops[0]);
  EXPECT_TRUE(std::isfinite(us) && us > 0) << us;
  EXPECT_TRUE(std::isfinite(us * 2147483648.0));  // 2^31 such ops
  for (Tier tier : {Tier::kHost, Tier::kSsd})
    EXPECT_TRUE(std::isfinite(cost.transfer_us(Direction::kSwapOut, tier, UINT64_MAX)));
}

}  // namespace
}  // namespace ferry
