// make_local_profile: how the measured transfer samples become the profile's link figures.
#include "runtime/profiler.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace ferry
