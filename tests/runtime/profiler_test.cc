// make_local_profile: how the measured transfer samples become the profile's link figures; the
// compute-interference measurement.
#include "runtime/profiler.h"

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "data/data.h"
#include "graph/zoo/zoo.h"

namespace ferry {
namespace {

// Samples of a path whose every request takes exactly latency + bytes / bandwidth (time per
// request, as measure_storage and measure_host_link report it).
std::vector<TransferSample> exact_samples(std::string_view path, double latency_us, double bytes_per_s,
                                          std::vector<uint64_t> sizes) {
  std::vector<TransferSample> v;
  for (uint64_t b : sizes) {
    const double t_us = latency_us + static_cast<double>(b) / bytes_per_s * 1e6;
    v.push_back({std::string(path), b, 1, static_cast<double>(b) / (t_us * 1e-6), t_us});
  }
  return v;
}

TEST(LocalProfile, LatencyIsTheInterceptNotTheSmallestRequestsWholeTime) {
  // A disk with 60 us of latency at 1.5 GB/s reads (a 1 MiB request: ~760 us, mostly data) and
  // 150 us at 3.5 GB/s writes; a memcpy link with 0.5 us at 12 GB/s.
  std::vector<TransferSample> storage = exact_samples("ssd_read", 60, 1.5e9, {1 << 20, 8 << 20});
  for (const TransferSample& s : exact_samples("ssd_write", 150, 3.5e9, {1 << 20, 8 << 20})) storage.push_back(s);
  std::vector<TransferSample> link = exact_samples("d2h", 0.5, 12e9, {4096, 1 << 20, 64 << 20});
  for (const TransferSample& s : exact_samples("h2d", 0.5, 12e9, {4096, 1 << 20, 64 << 20})) link.push_back(s);
  Graph g;
  const HardwareProfile p = make_local_profile(g, OpProfile{}, link, storage);
  // Latency and rate come back from the line through the smallest and largest requests, not as the
  // 1 MiB request's whole time (which the old rule took: 760 us for reads).
  EXPECT_NEAR(p.storage.read_latency_us, 60, 6);
  EXPECT_NEAR(p.storage.write_latency_us, 150, 6);
  EXPECT_NEAR(p.host_link.device_to_host.latency_us, 0.5, 0.05);
  EXPECT_NEAR(p.host_link.host_to_device.latency_us, 0.5, 0.05);
  EXPECT_NEAR(p.storage.read_bytes_per_s, 1.5e9, 0.02 * 1.5e9);
  EXPECT_NEAR(p.storage.write_bytes_per_s, 3.5e9, 0.02 * 3.5e9);
  // The model gives back the smallest request's measured time.
  const double read_1mib_us = 60 + (1 << 20) / 1.5e9 * 1e6;
  EXPECT_NEAR(p.storage.read_latency_us + (1 << 20) / p.storage.read_bytes_per_s * 1e6, read_1mib_us, 1);
}

TEST(LocalProfile, AnInterceptBelowZeroIsClampedNotNegative) {
  // The smallest request ran faster per byte than the largest (caches): no negative latency.
  std::vector<TransferSample> link = {{"d2h", 4096, 1, 40e9, 4096 / 40e9 * 1e6},
                                      {"d2h", 64 << 20, 1, 10e9, (64 << 20) / 10e9 * 1e6},
                                      {"h2d", 4096, 1, 40e9, 4096 / 40e9 * 1e6},
                                      {"h2d", 64 << 20, 1, 10e9, (64 << 20) / 10e9 * 1e6}};
  std::vector<TransferSample> storage = exact_samples("ssd_read", 60, 1.5e9, {1 << 20, 8 << 20});
  for (const TransferSample& s : exact_samples("ssd_write", 60, 1.5e9, {1 << 20, 8 << 20})) storage.push_back(s);
  Graph g;
  const HardwareProfile p = make_local_profile(g, OpProfile{}, link, storage);
  EXPECT_GE(p.host_link.device_to_host.latency_us, 0.0);
  EXPECT_LT(p.host_link.device_to_host.latency_us, 0.01);
}

TEST(LocalProfile, EachPathsInterferenceGoesToItsOwnField) {
  std::vector<TransferSample> link = exact_samples("d2h", 0.5, 12e9, {4096, 64 << 20});
  for (const TransferSample& s : exact_samples("h2d", 0.5, 12e9, {4096, 64 << 20})) link.push_back(s);
  std::vector<TransferSample> storage = exact_samples("ssd_read", 60, 1.5e9, {1 << 20, 8 << 20});
  for (const TransferSample& s : exact_samples("ssd_write", 60, 1.5e9, {1 << 20, 8 << 20})) storage.push_back(s);
  const std::vector<InterferenceSample> interference = {
      {"d2h", 100, 350}, {"h2d", 100, 300}, {"ssd_write", 100, 125}, {"ssd_read", 100, 110}};
  Graph g;
  const HardwareProfile p = make_local_profile(g, OpProfile{}, link, storage, interference);
  EXPECT_DOUBLE_EQ(p.host_link.device_to_host.compute_interference, 2.5);
  EXPECT_DOUBLE_EQ(p.host_link.host_to_device.compute_interference, 2.0);
  EXPECT_DOUBLE_EQ(p.storage.write_compute_interference, 0.25);
  EXPECT_NEAR(p.storage.read_compute_interference, 0.1, 1e-12);
  EXPECT_TRUE(validate_profile(p).ok());
  // Without the measurement every path says 0; faster with copies (noise) is 0, not negative.
  const HardwareProfile none = make_local_profile(g, OpProfile{}, link, storage);
  EXPECT_EQ(none.host_link.device_to_host.compute_interference, 0);
  EXPECT_EQ((InterferenceSample{"d2h", 100, 90}.factor()), 0);
  EXPECT_EQ((InterferenceSample{"d2h", 0, 90}.factor()), 0);
  EXPECT_EQ((InterferenceSample{"d2h", 1, 1e9}.factor()), 100);
}

TEST(Interference, MeasuresEveryPathOnARealIteration) {
  ModelConfig c;
  c.batch = 2;
  c.image = 32;
  Result<Graph> g = build_model("resnet-mini", c);
  ASSERT_TRUE(g.ok()) << g.status().message();
  std::unique_ptr<Backend> backend = std::move(make_backend("cpu")).value();
  auto data = make_synthetic_data(1);
  Result<std::vector<InterferenceSample>> m =
      measure_interference(*g, *backend, *data, ::testing::TempDir(), /*warmup=*/1, /*iters=*/2, 1);
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->size(), 4u);
  const char* paths[] = {"d2h", "h2d", "ssd_write", "ssd_read"};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ((*m)[i].path, paths[i]);
    EXPECT_GT((*m)[i].alone_ms, 0);
    EXPECT_GT((*m)[i].with_ms, 0);
    EXPECT_GE((*m)[i].factor(), 0);
    EXPECT_LE((*m)[i].factor(), 100);
  }
  Result<std::vector<InterferenceSample>> bad = measure_interference(*g, *backend, *data, "/nonexistent/dir", 0, 1, 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kIoError);
  EXPECT_NE(bad.status().message().find("/nonexistent/dir"), std::string::npos) << bad.status().message();
  EXPECT_EQ(measure_interference(*g, *backend, *data, ::testing::TempDir(), 0, 0, 1).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ferry
