// Benchmarks of the runtime's memory allocators (Google Benchmark).
//
// - BM_Churn: steady-state free + best-fit allocate with N live blocks of mixed sizes, the
//   pattern a training iteration produces (tensors born and dying in execution order).
// - BM_FailedAllocate: the cost of a refused allocation without / with formatting its Status;
//   callers that evict and retry should only format when they give up.
// - BM_RegionPrefault: obtaining a pre-faulted region (Note [Prefaulting] in common/host_region.cc),
//   per method, reported as GiB/s. The first run on a fresh VM also pays the hypervisor's
//   faults and is several times slower than later runs; run it more than once.
//
// Build (no CMake target; the library must be built first):
//   g++ -std=c++20 -O2 -march=native -Isrc bench/allocator_bench.cc build-alloc/libferry_runtime.a
//       build-alloc/libferry_common.a -lbenchmark -lfmt -pthread -o allocator_bench
//   ./allocator_bench --benchmark_filter=Prefault
#include <cstdint>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "memory/offset_allocator.h"
#include "common/host_region.h"

namespace ferry {
namespace {

void BM_Churn(benchmark::State& state) {
  const size_t live_blocks = static_cast<size_t>(state.range(0));
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<uint64_t> size_dist(64, 64 << 10);
  // Capacity about twice the expected live bytes: fragmentation matters, but nothing fails.
  OffsetAllocator alloc(live_blocks * (64 << 10), 64, "bench");
  std::vector<uint64_t> live;
  for (size_t i = 0; i < live_blocks; ++i) live.push_back(*alloc.allocate(size_dist(rng)));
  std::vector<uint64_t> sizes(4096), victims(4096);
  for (auto& s : sizes) s = size_dist(rng);
  for (auto& v : victims) v = std::uniform_int_distribution<uint64_t>(0, live_blocks - 1)(rng);
  size_t i = 0;
  for (auto _ : state) {
    uint64_t& slot = live[victims[i % victims.size()]];
    alloc.free(slot);
    AllocResult<uint64_t> r = alloc.allocate(sizes[i % sizes.size()]);
    if (!r.ok()) {
      state.SkipWithError("unexpected out of memory");
      break;
    }
    slot = *r;
    ++i;
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * 2);  // one free + one allocate
  state.counters["free_blocks"] = static_cast<double>(alloc.stats().num_free_blocks);
  state.counters["fragmentation"] = alloc.stats().fragmentation;
}
BENCHMARK(BM_Churn)->Arg(64)->Arg(1024)->Arg(16384);

void BM_FailedAllocate(benchmark::State& state) {
  const bool format = state.range(0) != 0;
  OffsetAllocator alloc(1 << 20, 64, "bench");
  (void)alloc.allocate(1 << 19);
  for (auto _ : state) {
    AllocResult<uint64_t> r = alloc.allocate(1 << 20);
    if (format) {
      Status st = r.status();
      benchmark::DoNotOptimize(st);
    } else {
      benchmark::DoNotOptimize(r);
    }
  }
}
BENCHMARK(BM_FailedAllocate)->ArgName("format")->Arg(0)->Arg(1);

// Args: method (1 touch, 2 populate), threads (touch only), huge pages (0/1), MiB.
void BM_RegionPrefault(benchmark::State& state) {
  HostRegionOptions options;
  options.prefault = state.range(0) == 1 ? PrefaultMethod::kTouch : PrefaultMethod::kPopulate;
  options.prefault_threads = static_cast<int>(state.range(1));
  options.huge_pages = state.range(2) != 0;
  const uint64_t bytes = static_cast<uint64_t>(state.range(3)) << 20;
  double seconds = 0;
  for (auto _ : state) {
    Result<HostRegion> region = HostRegion::map(bytes, options);
    if (!region.ok()) {
      state.SkipWithError(region.status().message().c_str());
      break;
    }
    state.SetIterationTime(region->prefault_seconds());
    seconds += region->prefault_seconds();
  }
  if (seconds > 0)
    state.counters["GiB/s"] = static_cast<double>(bytes) * static_cast<double>(state.iterations()) /
                              (seconds * static_cast<double>(1ull << 30));
}
BENCHMARK(BM_RegionPrefault)
    ->ArgNames({"method", "threads", "huge", "MiB"})
    ->Args({2, 1, 0, 1024})  // MAP_POPULATE
    ->Args({1, 1, 0, 1024})  // touch, 4 KiB pages, 1 thread
    ->Args({1, 2, 0, 1024})  // touch, 4 KiB pages, 2 threads
    ->Args({1, 1, 1, 1024})  // touch, huge pages, 1 thread
    ->Args({1, 2, 1, 1024})  // touch, huge pages, 2 threads (the default)
    ->Iterations(5)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ferry

BENCHMARK_MAIN();
