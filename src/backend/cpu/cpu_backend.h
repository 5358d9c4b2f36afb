// The CPU backend: "device" memory is host memory, kernels are oneDNN primitives plus
// hand-written OpenMP loops (src/backend/cpu/kernels_*.cc).
//
// Threads: oneDNN and the hand-written loops use the OpenMP thread count in effect
// (omp_set_num_threads / OMP_NUM_THREADS). Results are bitwise reproducible for a given thread
// count; the hand-written reductions are independent of it.
#pragma once

#include <cstddef>
#include <memory>

#include "backend/backend.h"

namespace ferry {

// A CPU backend compiling with `options`. Errors: Internal when oneDNN cannot create its CPU
// engine.
Result<std::unique_ptr<Backend>> make_cpu_backend(const BackendOptions& options = {});

namespace cpu {

// The host address behind a CPU-backend DevicePtr: the one place that assumes device memory is
// host memory. Only src/backend/cpu/ and CPU-specific tests may use it.
inline std::byte* host_address(DevicePtr p) { return reinterpret_cast<std::byte*>(p.address); }
inline DevicePtr device_address(const void* p) { return DevicePtr{reinterpret_cast<uint64_t>(p)}; }

}  // namespace cpu
}  // namespace ferry
