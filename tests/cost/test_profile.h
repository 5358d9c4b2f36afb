// A hardware profile with round numbers, so that tests can compute expected times by hand.
//   copies: 1000 bytes/us + 10 us in each direction (nominal 2 GB/s at efficiency 0.5)
//   SSD:    read 500 bytes/us + 100 us, write 250 bytes/us + 50 us, 2 requests in flight
//   compute: fp32 1 TFLOP/s, tf32 2, fp16 4 (no bf16); memory 100 GB/s; launch 5 us
#pragma once

#include "cost/profile.h"

namespace ferry::cost_test {

inline HardwareProfile round_profile() {
  HardwareProfile p;
  p.name = "round";
  p.description = "round numbers for hand-computed tests";
  p.peak_flops[static_cast<size_t>(ComputeDType::kFp32)] = 1e12;
  p.peak_flops[static_cast<size_t>(ComputeDType::kTf32)] = 2e12;
  p.peak_flops[static_cast<size_t>(ComputeDType::kFp16)] = 4e12;
  p.launch_overhead_us = 5;
  for (OpEfficiency& e : p.efficiency) e = {0.5, 0.8};
  p.efficiency[static_cast<size_t>(OpClass::kConv)] = {0.6, 0.7};
  p.memory_capacity_bytes = uint64_t{1} << 30;
  p.memory_bandwidth_bytes_per_s = 1e11;
  p.host_link.name = "test link";
  p.host_link.host_to_device = {2e9, 0.5, 10};
  p.host_link.device_to_host = {2e9, 0.5, 10};
  p.host_link.concurrent_directions = true;
  p.storage = {"test ssd", 5e8, 2.5e8, 100, 50, 2};
  p.sources["compute"] = "made up for tests";
  return p;
}

}  // namespace ferry::cost_test
