#include "runtime/profiler.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "cost/cost_model.h"
#include "common/units.h"
#include "common/unlink_on_signal.h"
#include "runtime/executor.h"

namespace ferry {

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

Result<OpProfile> profile_ops(const Graph& g, Backend& backend, DataSource& data, int warmup, int iters,
                              uint64_t seed) {
  if (warmup < 0 || iters <= 0)
    return Status::InvalidArgument(fmt::format("profile needs iters > 0 and warmup >= 0, got {} and {}", iters, warmup));
  ExecutorOptions eo;
  eo.seed = seed;
  eo.record_op_times = true;
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Executor> ex, Executor::create(g, backend, eo));
  FERRY_RETURN_IF_ERROR(ex->initialize());
  std::vector<std::vector<double>> samples(g.ops.size());
  OpProfile out;
  for (int it = 0; it < warmup + iters; ++it) {
    FERRY_ASSIGN_OR_RETURN(IterationStats st, ex->run_iteration(it, data));
    if (it < warmup) continue;
    out.iteration_ms.push_back(st.time_ms);
    for (size_t i = 0; i < g.ops.size(); ++i) samples[i].push_back(ex->op_times_us()[i]);
  }
  out.median_us.resize(g.ops.size());
  for (size_t i = 0; i < g.ops.size(); ++i) out.median_us[i] = median(samples[i]);
  out.measured_peak_bytes = ex->measured_peak_bytes();
  return out;
}

Result<std::vector<TransferSample>> measure_host_link(Backend& backend) {
  constexpr uint64_t kMax = 64ull << 20;
  FERRY_ASSIGN_OR_RETURN(DevicePtr dev, backend.allocate(kMax));
  std::vector<std::byte> host(kMax, std::byte{1});
  std::vector<TransferSample> out;
  for (uint64_t bytes : {uint64_t{4096}, uint64_t{1} << 20, uint64_t{16} << 20, kMax}) {
    const int reps = static_cast<int>(std::clamp<uint64_t>((256ull << 20) / bytes, 3, 200));
    for (int dir = 0; dir < 2; ++dir) {
      std::vector<double> times;
      for (int r = 0; r < reps; ++r) {
        const auto t0 = Clock::now();
        Status s = dir == 0 ? backend.copy_to_host(std::span<std::byte>(host.data(), bytes), dev)
                            : backend.copy_to_device(dev, std::span<const std::byte>(host.data(), bytes));
        if (s.ok()) s = backend.synchronize();
        if (!s.ok()) {
          backend.free(dev);
          return s;
        }
        times.push_back(seconds_since(t0));
      }
      const double t = median(times);
      out.push_back({std::string(to_string(dir == 0 ? Link::kDeviceToHost : Link::kHostToDevice)), bytes, 1, static_cast<double>(bytes) / t, t * 1e6});
    }
  }
  backend.free(dev);
  return out;
}

namespace {

// The storage probe's file, created so that it is never found on disk afterwards nor opened
// through someone else's file: O_TMPFILE (a file without a name) where the file system has it;
// else a random name created with O_EXCL | O_NOFOLLOW (a planted file or symlink is refused, not
// followed) and unlinked at once, the moment in between covered by UnlinkOnSignal. Either way
// the data lives only as long as the descriptor, whatever ends the process.
Result<int> open_probe_file(const std::string& dir) {
  const int flags = O_RDWR | O_DIRECT | O_CLOEXEC;
  int fd = ::open(dir.c_str(), flags | O_TMPFILE, 0600);
  if (fd >= 0) return fd;
  if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
    return Status::IoError(fmt::format("cannot create a direct-I/O file in '{}': {}", dir, std::strerror(errno)));
  std::random_device entropy;
  for (int attempt = 0; attempt < 16; ++attempt) {
    const std::string path = fmt::format("{}/ferry-profile-{}-{:08x}.tmp", dir, static_cast<long>(::getpid()),
                                         static_cast<uint32_t>(entropy()));
    UnlinkOnSignal guard(path);
    fd = ::open(path.c_str(), flags | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
    if (fd >= 0) {
      ::unlink(path.c_str());
      return fd;
    }
    if (errno != EEXIST)
      return Status::IoError(fmt::format("cannot create '{}' with direct I/O: {}", path, std::strerror(errno)));
  }
  return Status::IoError(fmt::format("cannot create a direct-I/O file in '{}': no free name", dir));
}

// Closes a descriptor when it goes out of scope.
struct CloseOnExit {
  int fd;
  ~CloseOnExit() { ::close(fd); }
};

using AlignedBuffer = std::unique_ptr<void, decltype(&std::free)>;

// `bytes` aligned for direct I/O, filled with a pattern.
Result<AlignedBuffer> direct_io_buffer(uint64_t bytes) {
  constexpr uint64_t kAlign = 4096;
  void* raw = nullptr;
  if (posix_memalign(&raw, kAlign, bytes) != 0)
    return Status::OutOfMemory(fmt::format("cannot allocate {} of direct-I/O buffers for the profile", format_bytes(bytes)));
  std::memset(raw, 0x5a, bytes);
  return AlignedBuffer(raw, &std::free);
}

}  // namespace

Result<std::vector<TransferSample>> measure_storage(const std::string& dir, uint64_t total_bytes) {
  FERRY_ASSIGN_OR_RETURN(const int fd, open_probe_file(dir));
  const std::string path = fmt::format("a direct-I/O file in '{}'", dir);
  const CloseOnExit close_fd{fd};
  std::vector<TransferSample> out;
  // 64 KiB requests (mostly latency) pin the latency down; 1 and 8 MiB ones the bandwidth.
  for (uint64_t request : {uint64_t{64} << 10, uint64_t{1} << 20, uint64_t{8} << 20}) {
    for (int depth : {1, 4}) {
      const uint64_t count = std::max<uint64_t>(total_bytes / request, static_cast<uint64_t>(depth));
      FERRY_ASSIGN_OR_RETURN(AlignedBuffer buf, direct_io_buffer(request * static_cast<uint64_t>(depth)));
      void* raw = buf.get();
      for (int write = 1; write >= 0; --write) {
        std::atomic<uint64_t> next{0};
        std::atomic<int> error{0};
        const auto t0 = Clock::now();
        std::vector<std::thread> workers;
        for (int w = 0; w < depth; ++w)
          workers.emplace_back([&, w] {
            char* b = static_cast<char*>(raw) + static_cast<uint64_t>(w) * request;
            for (uint64_t i = next++; i < count && error == 0; i = next++) {
              const off_t off = static_cast<off_t>(i * request);
              ssize_t n = write ? ::pwrite(fd, b, request, off) : ::pread(fd, b, request, off);
              if (n != static_cast<ssize_t>(request)) error = n < 0 ? errno : EIO;
            }
          });
        for (auto& t : workers) t.join();
        if (write && error == 0 && ::fdatasync(fd) != 0) error = errno;
        const double t = seconds_since(t0);
        if (error != 0)
          return Status::IoError(fmt::format("direct I/O {} of {} failed: {}", write ? "write" : "read", path,
                                             std::strerror(error)));
        out.push_back({std::string(to_string(write ? Link::kSsdWrite : Link::kSsdRead)), request, depth,
                       static_cast<double>(count * request) / t, t * 1e6 / static_cast<double>(count) * depth});
      }
    }
  }
  return out;
}

double InterferenceSample::factor() const {
  if (!(alone_ms > 0) || !std::isfinite(with_ms)) return 0;
  return std::clamp(with_ms / alone_ms - 1, 0.0, 100.0);
}

namespace {

// A copy on one path repeated back to back on its own thread until stopped.
class CopyLoop {
 public:
  CopyLoop() = default;
  CopyLoop(const CopyLoop&) = delete;
  CopyLoop& operator=(const CopyLoop&) = delete;
  ~CopyLoop() { static_cast<void>(stop()); }  // on an early return: its error is not the one reported

  template <typename F>
  void start(F copy_once) {
    stop_ = false;
    error_ = Status::Ok();
    thread_ = std::thread([this, copy_once]() mutable {
      while (!stop_.load(std::memory_order_relaxed)) {
        if (Status s = copy_once(); !s.ok()) {
          error_ = s;
          return;
        }
        ++copies_;
      }
    });
  }
  // Stops the loop; its first error, if any.
  Status stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return error_;
  }
  uint64_t copies() const { return copies_; }

 private:
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> copies_{0};
  Status error_;
};

}  // namespace

Result<std::vector<InterferenceSample>> measure_interference(const Graph& g, Backend& backend, DataSource& data,
                                                             const std::string& dir, int warmup, int iters,
                                                             uint64_t seed) {
  if (warmup < 0 || iters <= 0)
    return Status::InvalidArgument(fmt::format("interference needs iters > 0 and warmup >= 0, got {} and {}", iters, warmup));
  constexpr uint64_t kCopy = uint64_t{16} << 20, kRequest = uint64_t{8} << 20, kFile = uint64_t{64} << 20;
  // The copies' buffers exist before the executor allocates its arena.
  FERRY_ASSIGN_OR_RETURN(DevicePtr dev, backend.allocate(kCopy));
  struct FreeDev {
    Backend& b;
    DevicePtr p;
    ~FreeDev() { b.free(p); }
  } free_dev{backend, dev};
  std::vector<std::byte> host(kCopy, std::byte{1});
  FERRY_ASSIGN_OR_RETURN(const int fd, open_probe_file(dir));
  const CloseOnExit close_fd{fd};
  FERRY_ASSIGN_OR_RETURN(AlignedBuffer buf, direct_io_buffer(kRequest));
  void* raw = buf.get();
  const std::string file = fmt::format("a direct-I/O file in '{}'", dir);
  auto io = [&, next = uint64_t{0}](bool write) mutable -> Status {
    const off_t off = static_cast<off_t>(next);
    next = (next + kRequest) % kFile;
    const ssize_t n = write ? ::pwrite(fd, raw, kRequest, off) : ::pread(fd, raw, kRequest, off);
    if (n == static_cast<ssize_t>(kRequest)) return Status::Ok();
    return Status::IoError(fmt::format("direct I/O {} of {} failed: {}", write ? "write" : "read", file,
                                       n < 0 ? std::strerror(errno) : "short transfer"));
  };
  for (uint64_t i = 0; i < kFile / kRequest; ++i) FERRY_RETURN_IF_ERROR(io(true));  // what the reads read

  ExecutorOptions eo;
  eo.seed = seed;
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Executor> ex, Executor::create(g, backend, eo));
  FERRY_RETURN_IF_ERROR(ex->initialize());
  int64_t iteration = 0;
  // The median of at least n iterations, and more while `more()` says so (at most kMaxSeconds).
  constexpr double kMaxSeconds = 30;
  auto median_ms = [&](int n, const std::function<bool()>& more = {}) -> Result<double> {
    std::vector<double> ms;
    const auto start = Clock::now();
    while (static_cast<int>(ms.size()) < n || (more && more() && seconds_since(start) < kMaxSeconds)) {
      FERRY_ASSIGN_OR_RETURN(IterationStats st, ex->run_iteration(iteration++, data));
      ms.push_back(st.time_ms);
    }
    return median(ms);
  };
  if (warmup > 0) FERRY_RETURN_IF_ERROR(median_ms(warmup).status());
  FERRY_ASSIGN_OR_RETURN(const double before, median_ms(iters));
  std::vector<InterferenceSample> out;
  for (Link l : {Link::kDeviceToHost, Link::kHostToDevice, Link::kSsdWrite, Link::kSsdRead}) {
    CopyLoop loop;
    switch (l) {
      case Link::kDeviceToHost:
        loop.start([&] {
          Status s = backend.copy_to_host(std::span<std::byte>(host.data(), kCopy), dev);
          return s.ok() ? backend.synchronize() : s;
        });
        break;
      case Link::kHostToDevice:
        loop.start([&] {
          Status s = backend.copy_to_device(dev, std::span<const std::byte>(host.data(), kCopy));
          return s.ok() ? backend.synchronize() : s;
        });
        break;
      case Link::kSsdWrite: loop.start([&] { return io(true); }); break;
      case Link::kSsdRead: loop.start([&] { return io(false); }); break;
    }
    // A small model's iterations can be shorter than one copy: iterate until two copies are done,
    // so that the copies ran beside the iterations from start to end.
    Result<double> with = median_ms(iters, [&] { return loop.copies() < 2; });
    FERRY_RETURN_IF_ERROR(loop.stop());
    FERRY_RETURN_IF_ERROR(with.status());
    if (loop.copies() == 0)
      return Status::IoError(fmt::format("no {} copy completed in {:g} s of the interference measurement (of {})",
                                         to_string(l), kMaxSeconds, l == Link::kSsdWrite || l == Link::kSsdRead
                                                                         ? file
                                                                         : std::string("the host link")));
    out.push_back({std::string(to_string(l)), 0, *with});
  }
  FERRY_ASSIGN_OR_RETURN(const double after, median_ms(iters));
  for (InterferenceSample& s : out) s.alone_ms = (before + after) / 2;
  return out;
}

HardwareProfile make_local_profile(const Graph& g, const OpProfile& ops, const std::vector<TransferSample>& link,
                                   const std::vector<TransferSample>& storage,
                                   const std::vector<InterferenceSample>& interference) {
  HardwareProfile p;
  p.name = "cpu-local";
  p.description = "This machine as `ferry profile` measured it: the CPU backend (oneDNN), its device arena and "
                  "host pool in RAM, and the disk under the profile's directory";
  p.notes = fmt::format("Measured on model {} (batch {}): op times are in the trace written alongside; "
                        "peak_flops is the best rate one op reached. Re-run `ferry profile` to refresh.",
                        g.info.model, g.info.batch);
  double best_flops = 0;
  for (const Op& op : g.ops)
    if (ops.median_us[op.id] > 0) best_flops = std::max(best_flops, static_cast<double>(op.flops) / (ops.median_us[op.id] * 1e-6));
  p.peak_flops[static_cast<size_t>(ComputeDType::kFp32)] = std::max(best_flops, 1e9);
  p.launch_overhead_us = 2.0;
  for (auto& e : p.efficiency) e = OpEfficiency{0.6, 0.6};
  p.memory_capacity_bytes = 8ull << 30;
  // Bandwidth: the best rate among the largest requests (small copies hit the caches and would
  // overstate it), or the line's rate below if higher. Latency: the intercept of the line through
  // the smallest request's best time and the largest request's time at the same queue depth
  // (time = latency + bytes / rate), clamped to [0, the smallest request's time]. Taking the smallest request's whole time as the latency
  // counted its data twice: a 1 MiB direct-I/O request (then the smallest) is mostly data, and
  // every small SSD transfer was predicted about 3x slower than it ran. A line through 1 and 8 MiB
  // alone extrapolated a noisy intercept (1 to 370 us on one disk), hence the 64 KiB requests.
  auto best = [](const std::vector<TransferSample>& v, std::string_view path) {
    uint64_t largest = 0, smallest = ~uint64_t{0};
    for (const TransferSample& s : v)
      if (s.path == path) largest = std::max(largest, s.request_bytes), smallest = std::min(smallest, s.request_bytes);
    TransferSample b;
    const TransferSample* small = nullptr;
    for (const TransferSample& s : v) {
      if (s.path != path) continue;
      if (s.request_bytes == largest && s.bytes_per_s > b.bytes_per_s) b = s;
      if (s.request_bytes == smallest && (!small || s.latency_us < small->latency_us)) small = &s;
    }
    if (!small) return b;
    b.latency_us = small->latency_us;
    for (const TransferSample& s : v)
      if (s.path == path && s.request_bytes == largest && s.queue_depth == small->queue_depth && largest > smallest &&
          s.latency_us > small->latency_us) {
        const double us_per_byte = (s.latency_us - small->latency_us) / static_cast<double>(largest - smallest);
        b.latency_us = std::clamp(small->latency_us - us_per_byte * static_cast<double>(smallest), 0.0, small->latency_us);
        // The line's rate is the data rate without the latency; a deeper queue may beat it.
        b.bytes_per_s = std::max(b.bytes_per_s, 1e6 / us_per_byte);
      }
    return b;
  };
  const TransferSample d2h = best(link, to_string(Link::kDeviceToHost)), h2d = best(link, to_string(Link::kHostToDevice));
  p.memory_bandwidth_bytes_per_s = std::max(2 * std::max(d2h.bytes_per_s, h2d.bytes_per_s), 1e9);
  p.host_link.name = "memcpy between the device arena and the host pool (RAM to RAM), measured";
  p.host_link.device_to_host = {std::max(d2h.bytes_per_s, 1.0), 1.0, d2h.latency_us};
  p.host_link.host_to_device = {std::max(h2d.bytes_per_s, 1.0), 1.0, h2d.latency_us};
  p.host_link.concurrent_directions = false;  // two memcpy threads share the memory bus and 2 cores
  const TransferSample rd = best(storage, to_string(Link::kSsdRead)), wr = best(storage, to_string(Link::kSsdWrite));
  p.storage.name = "local disk, direct I/O, measured";
  p.storage.read_bytes_per_s = std::max(rd.bytes_per_s, 1.0);
  p.storage.write_bytes_per_s = std::max(wr.bytes_per_s, 1.0);
  p.storage.read_latency_us = std::max(rd.latency_us, 1.0);
  p.storage.write_latency_us = std::max(wr.latency_us, 1.0);
  p.storage.queue_depth = std::max(rd.queue_depth, 1);
  // The SSD tier moves this backend's page-aligned blocks in place (its device memory is host
  // memory: runtime/ssd_tier.h, Note [In-place transfers]), with requests like the ones above.
  p.storage.device_direct = true;
  for (const InterferenceSample& s : interference) {
    const double f = s.factor();
    if (s.path == to_string(Link::kDeviceToHost)) p.host_link.device_to_host.compute_interference = f;
    if (s.path == to_string(Link::kHostToDevice)) p.host_link.host_to_device.compute_interference = f;
    if (s.path == to_string(Link::kSsdWrite)) p.storage.write_compute_interference = f;
    if (s.path == to_string(Link::kSsdRead)) p.storage.read_compute_interference = f;
  }
  const std::string how = "Measured by `ferry profile` on this machine";
  p.sources = {{"compute", how + " (best op rate of the profiled model)"},
               {"memory", how + " (capacity: an 8 GiB arena budget; bandwidth: 2x the memcpy rate)"},
               {"host_link", how + " (backend copies between the arena and host memory, 4 KiB to 64 MiB)"},
               {"storage", how + " (O_DIRECT pwrite/pread, 64 KiB, 1 and 8 MiB requests, queue depth 1 and 4)"}};
  if (!interference.empty()) {
    const std::string why = "; compute_interference: iterations of the profiled model with the path's copies looping "
                            "beside them over iterations alone, minus 1";
    p.sources["host_link"] += why;
    p.sources["storage"] += why;
  }
  return p;
}

}  // namespace ferry
