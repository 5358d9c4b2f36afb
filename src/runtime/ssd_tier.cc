// SsdTier: the file, the staging pool, the two I/O mechanisms and the pipelined transfers. See
// ssd_tier.h for the design.
//
// Note [io_uring vs threads]
// Measured on the development VM (2 vCPUs shared with other work, ext4 on a virtio disk), 64 MiB
// transfers from CPU-backend device memory, best of 5 (medians within 10%):
//
//   chunk x depth    io_uring write/read GB/s    threads write/read GB/s
//   256 KiB x 1          1.47 / 1.03                 1.73 / 1.06
//   256 KiB x 4          2.44 / 1.81                 2.42 / 1.70
//   1 MiB x 2            2.38 / 1.66                 2.27 / 1.76
//   1 MiB x 4            2.47 / 1.92                 2.78 / 1.83
//   4 MiB x 4            2.47 / 1.58                 1.98 / 1.39
//
// Bandwidth is the disk's either way: one request in flight loses a third of it, two to four
// recover it, more buys nothing. The mechanisms differ in CPU: per GB moved (write + read, staging
// copies included) io_uring took 0.153 s of CPU and the threads 0.197 s, 25% more, and the threads
// are queue_depth x channels extra runnable threads competing with compute for 2 cores. So
// io_uring by default, with registered staging buffers (pinned once, not per request); threads
// where io_uring is unavailable. 1 MiB x 4 is the default: at the plateau, with 8 MiB of staging
// for the two channels.
//
// Note [Coded slots]
// With a codec, chunk k of a slot (input bytes [k * chunk_bytes, ...)) is encoded as chunk k of a
// frame (FrameEncoder over the tensor's bytes, in chunks of chunk_bytes) into a staging buffer laid
// out as [4 KiB - 16: chunk header][4 KiB: payload, zero-padded to 4 KiB]; the payload is written at
// slot.offset + k * chunk_bytes, the header is kept in memory (CodedSlot). Reading chunk k reads
// align_up(payload, 4 KiB) bytes to the same place in a staging buffer, puts the header back in
// front and decodes the record (decode_chunk) into the channel's plain buffer, which is then
// copied to the destination. The frame's identity (codec, size, chunk size) is rebuilt from the
// slot and the tier's options, so nothing else is stored. Why not one contiguous frame per slot:
// fixed chunk places keep the slot's size and offsets exactly as raw (space accounting and
// fix_slots unchanged), and let every chunk be read with one request whose size is known up
// front, so reads stay queue_depth deep without first reading headers from disk.
//
// Note [In-place transfers]
// The staging copy is not free where the "device" is the host's own memory: on the development VM
// (2 vCPUs), iterations of ResNet-152 b16 ran 3.3x as long beside back-to-back device-to-host
// memcpys, but only 1.3x beside direct-I/O writes and 1.1x beside reads (`ferry profile
// --interference-iters`, 2026-11-26; profiles/cpu-local.json): the copy competes with the kernels
// for the cores, the disk's DMA hardly does. So where a tensor's memory is host-addressable
// (SwapEndpoint::direct_io_source/destination) at a 4 KiB-aligned address, a raw transfer moves
// each chunk's whole 4 KiB blocks straight between that memory and the file: the request's buffer
// is the tensor itself, not registered with io_uring (the kernel pins its pages per request). Only
// the last partial block goes through a staging buffer, because a read of a whole block into the
// tensor's memory would overwrite the bytes after it, which belong to another tensor. The file's
// layout is the same either way (byte i of the tensor at slot.offset + i), so a copy written in
// place reads back staged and the other way round. A copy is in place or not per request, decided
// from the address alone: placement (schedule/placement.h) page-aligns the device blocks of
// swapped tensors of at least 64 KiB and the executor's arena is then whole pages
// (Backend::allocate); anything else (smaller tensors, memory-check guards, host endpoints of
// tests) is correct, only staged. An injected corrupt write copies its block to staging before
// flipping a byte, so that the fault never touches the tensor.
#include "runtime/ssd_tier.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <system_error>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "codec/stats.h"
#include "common/units.h"

namespace ferry {

namespace {

constexpr uint64_t kBlock = 4096;  // O_DIRECT's alignment of buffers, offsets and lengths

std::string errno_text(int err) {
  char buf[128];
  const char* text = strerror_r(err, buf, sizeof buf);  // the GNU variant: returns the text
  const char* name = strerrorname_np(err);
  return name ? fmt::format("{} ({}, errno {})", text, name, err) : fmt::format("{} (errno {})", text, err);
}

std::string bytes_text(uint64_t bytes) { return fmt::format("{} ({} bytes)", format_bytes(bytes), bytes); }

}  // namespace

std::string_view to_string(SsdIo io) {
  switch (io) {
    case SsdIo::kAuto: return "auto";
    case SsdIo::kUring: return "io_uring";
    case SsdIo::kThreads: return "threads";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------
// I/O queues: start requests, report their completions in any order. One queue per channel, used
// by one transfer at a time, so a queue needs no locking against its own callers.

namespace ssd_io {

enum class Op : uint8_t { kWrite, kRead };

class Queue {
 public:
  virtual ~Queue() = default;
  // Starts `op` of `len` bytes between `buf` and the file at `offset`; `tag` names the request.
  // `staged`: buf is in staging buffer number `tag` (registered with the kernel where it can be);
  // else buf is the tensor's own memory (an in-place transfer). Returns 0, or -errno when the
  // request could not be started (it then never completes).
  virtual int submit(Op op, std::byte* buf, uint64_t len, uint64_t offset, uint32_t tag, bool staged) = 0;
  // Waits for one started request to complete: its tag, and the bytes moved or -errno.
  virtual void wait(uint32_t* tag, int64_t* result) = 0;
};

namespace {

class UringQueue final : public Queue {
 public:
  // A ring of `depth` entries; `buffers` are the staging buffers requests will use, registered
  // with the kernel when it allows (then the pages are pinned once, not on every request).
  static Result<std::unique_ptr<Queue>> create(int fd, unsigned depth, std::span<const iovec> buffers) {
    std::unique_ptr<UringQueue> q(new UringQueue(fd));
    int rc = io_uring_queue_init(depth, &q->ring_, 0);
    if (rc < 0) return Status::Unsupported(fmt::format("io_uring is unavailable: io_uring_queue_init: {}", errno_text(-rc)));
    q->initialized_ = true;
    q->fixed_buffers_ = io_uring_register_buffers(&q->ring_, buffers.data(), static_cast<unsigned>(buffers.size())) == 0;
    return std::unique_ptr<Queue>(std::move(q));
  }
  ~UringQueue() override {
    if (initialized_) io_uring_queue_exit(&ring_);
  }

  int submit(Op op, std::byte* buf, uint64_t len, uint64_t offset, uint32_t tag, bool staged) override {
    if (broken_ != 0) return broken_;
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    FERRY_CHECK(sqe != nullptr, "io_uring submission queue full: more requests than the ring's depth");
    const auto n = static_cast<unsigned>(len);
    const bool fixed = fixed_buffers_ && staged;  // in-place memory is not registered: pinned per request
    if (op == Op::kWrite) {
      if (fixed) io_uring_prep_write_fixed(sqe, fd_, buf, n, offset, static_cast<int>(tag));
      else io_uring_prep_write(sqe, fd_, buf, n, offset);
    } else {
      if (fixed) io_uring_prep_read_fixed(sqe, fd_, buf, n, offset, static_cast<int>(tag));
      else io_uring_prep_read(sqe, fd_, buf, n, offset);
    }
    io_uring_sqe_set_data(sqe, reinterpret_cast<void*>(static_cast<uintptr_t>(tag)));
    int rc;
    do rc = io_uring_submit(&ring_);
    while (rc == -EINTR || rc == -EAGAIN);
    // The entry may still sit in the ring after a failure; mark the queue unusable rather than let
    // a later submit send it and complete a request nobody waits for.
    if (rc < 0) broken_ = rc;
    return rc < 0 ? rc : 0;
  }

  void wait(uint32_t* tag, int64_t* result) override {
    io_uring_cqe* cqe = nullptr;
    int rc;
    do rc = io_uring_wait_cqe(&ring_, &cqe);
    while (rc == -EINTR);
    FERRY_CHECK(rc == 0, "io_uring_wait_cqe: {}", errno_text(-rc));
    *tag = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(io_uring_cqe_get_data(cqe)));
    *result = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
  }

 private:
  explicit UringQueue(int fd) : fd_(fd) {}
  int fd_;
  io_uring ring_{};
  bool initialized_ = false;
  bool fixed_buffers_ = false;
  int broken_ = 0;
};

// pread/pwrite on `threads` threads: the fallback where io_uring is unavailable.
class ThreadQueue final : public Queue {
 public:
  static Result<std::unique_ptr<Queue>> create(int fd, int threads) {
    std::unique_ptr<ThreadQueue> q(new ThreadQueue(fd));
    try {
      for (int i = 0; i < threads; ++i) q->workers_.emplace_back([p = q.get()] { p->run(); });
    } catch (const std::system_error& e) {
      return Status::Internal(fmt::format("cannot start I/O threads: {}", e.what()));  // ~ThreadQueue joins
    }
    return std::unique_ptr<Queue>(std::move(q));
  }
  ~ThreadQueue() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  int submit(Op op, std::byte* buf, uint64_t len, uint64_t offset, uint32_t tag, bool /*staged*/) override {
    {
      std::lock_guard lock(mu_);
      jobs_.push_back(Job{op, buf, len, offset, tag});
    }
    work_cv_.notify_one();
    return 0;
  }

  void wait(uint32_t* tag, int64_t* result) override {
    std::unique_lock lock(mu_);
    done_cv_.wait(lock, [&] { return !done_.empty(); });
    *tag = done_.front().first;
    *result = done_.front().second;
    done_.pop_front();
  }

 private:
  struct Job {
    Op op;
    std::byte* buf;
    uint64_t len;
    uint64_t offset;
    uint32_t tag;
  };
  explicit ThreadQueue(int fd) : fd_(fd) {}

  void run() {
    std::unique_lock lock(mu_);
    for (;;) {
      work_cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, and nothing left to do
      Job job = jobs_.front();
      jobs_.pop_front();
      lock.unlock();
      ssize_t n;
      do {
        n = job.op == Op::kWrite ? ::pwrite(fd_, job.buf, job.len, static_cast<off_t>(job.offset))
                                   : ::pread(fd_, job.buf, job.len, static_cast<off_t>(job.offset));
      } while (n < 0 && errno == EINTR);
      int64_t result = n < 0 ? -errno : n;
      lock.lock();
      done_.emplace_back(job.tag, result);
      done_cv_.notify_one();
    }
  }

  int fd_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<Job> jobs_;
  std::deque<std::pair<uint32_t, int64_t>> done_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace
}  // namespace ssd_io

// ---------------------------------------------------------------------------------------------
// SsdTier

struct SsdTier::Channel {
  std::unique_ptr<ssd_io::Queue> queue;
  std::byte* staging = nullptr;  // queue_depth buffers of buffer_stride_ bytes
  bool busy = false;
  // With a codec: the coding state, and one chunk of plain (decoded) bytes.
  std::unique_ptr<CodecContext> codec;
  std::vector<std::byte> plain;
};

// One chunk of a transfer, in staging buffer `buffer` of the channel.
struct SsdTier::Request {
  uint32_t buffer = 0;
  std::byte* io_buf = nullptr;  // where the request's bytes are in the staging buffer
  ssd_io::Op op = ssd_io::Op::kWrite;
  uint64_t data_offset = 0;  // in the tensor
  uint64_t data_bytes = 0;   // tensor bytes in this chunk
  uint64_t io_bytes = 0;     // data_bytes rounded up to 4 KiB: what goes to the file
  uint64_t file_offset = 0;
  bool in_flight = false;    // started, completion not yet seen
  bool done = false;         // result is valid
  bool injected = false;     // result comes from SsdFault
  bool submit_failed = false;
  bool corrupt = false;      // SsdFault::kCorrupt: flip the first byte once the read completes
  bool in_place = false;     // io_buf is the tensor's own memory, not the staging buffer
  int64_t result = 0;        // bytes moved, or -errno
};

SsdTier::SsdTier(const SsdTierOptions& options)
    : SwapTier(options.name, Tier::kSsd, options.capacity_bytes, kBlock, options.checksum), options_(options) {}

Result<std::unique_ptr<SsdTier>> SsdTier::create(const SsdTierOptions& options) {
  const std::string& name = options.name;
  if (options.capacity_bytes < kBlock)
    return Status::InvalidArgument(
        fmt::format("{} tier: capacity must be at least 4 KiB, got {}", name, bytes_text(options.capacity_bytes)));
  if (options.chunk_bytes == 0 || options.chunk_bytes % kBlock != 0 || options.chunk_bytes > (1ull << 30))
    return Status::InvalidArgument(fmt::format(
        "{} tier: chunk_bytes must be a positive multiple of 4 KiB up to 1 GiB, got {}", name, options.chunk_bytes));
  if (options.queue_depth < 1 || options.queue_depth > 64)
    return Status::InvalidArgument(fmt::format("{} tier: queue_depth must be in 1..64, got {}", name, options.queue_depth));
  if (options.channels < 1 || options.channels > 16)
    return Status::InvalidArgument(fmt::format("{} tier: channels must be in 1..16, got {}", name, options.channels));
  if (is_lossy(options.codec))
    return Status::InvalidArgument(fmt::format("{} tier: codec {} is lossy; the tier stores bytes losslessly", name,
                                               to_string(options.codec)));
  for (CodecId c : options.tensor_codecs)
    if (is_lossy(c))
      return Status::InvalidArgument(fmt::format("{} tier: tensor_codecs names codec {}, which is lossy (lossy "
                                                 "stashing is lossy_tensors)", name, to_string(c)));
  const bool any_lossy =
      std::find(options.lossy_tensors.begin(), options.lossy_tensors.end(), true) != options.lossy_tensors.end();
  const bool any_coded = std::any_of(options.tensor_codecs.begin(), options.tensor_codecs.end(),
                                     [](CodecId c) { return c != CodecId::kNone; });
  if ((options.codec != CodecId::kNone || any_coded || any_lossy) && options.chunk_bytes > kMaxChunkBytes)
    return Status::InvalidArgument(fmt::format("{} tier: with codec {}, chunk_bytes must be at most {}, got {}", name,
                                               to_string(options.codec), bytes_text(kMaxChunkBytes),
                                               bytes_text(options.chunk_bytes)));
  struct stat st {};
  if (options.directory.empty() || ::stat(options.directory.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return Status::InvalidArgument(
        fmt::format("{} tier: directory '{}' does not exist or is not a directory", name, options.directory));

  std::unique_ptr<SsdTier> tier(new SsdTier(options));  // from here on, its destructor cleans up

  std::string pattern = options.directory + "/ferry-swap-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr)
    return Status::IoError(fmt::format("{} tier: cannot create a temporary directory under '{}': {}", name,
                                       options.directory, errno_text(errno)));
  tier->dir_path_ = pattern;
  tier->dir_linked_ = true;
  tier->file_path_ = tier->dir_path_ + "/swap.bin";
  tier->fd_ = ::open(tier->file_path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0600);
  if (tier->fd_ < 0) {
    int err = errno;
    if (err == EINVAL)
      return Status::IoError(fmt::format(
          "{} tier: the file system of '{}' does not support direct I/O (O_DIRECT); use a directory on a local disk",
          name, options.directory));
    return Status::IoError(fmt::format("{} tier: cannot create '{}': {}", name, tier->file_path_, errno_text(err)));
  }
  tier->file_linked_ = true;

  const uint64_t capacity = tier->capacity_bytes();
  if (options.preallocate) {
    int rc = ::posix_fallocate(tier->fd_, 0, static_cast<off_t>(capacity));
    if (rc != 0)
      return Status::IoError(fmt::format("{} tier: cannot allocate {} in '{}': {}", name, bytes_text(capacity),
                                         tier->file_path_, errno_text(rc)));
  } else {
    struct statvfs vfs {};
    if (::fstatvfs(tier->fd_, &vfs) == 0) {
      uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
      if (free_bytes < capacity)
        return Status::IoError(fmt::format("{} tier: '{}' has {} free, less than the tier's capacity {}", name,
                                           options.directory, bytes_text(free_bytes), bytes_text(capacity)));
    }
  }
  if (!options.keep_files_visible) tier->remove_files();

  // The staging pool, pre-faulted so that the first transfers do not pay page faults.
  const bool coded = tier->coded_staging();
  tier->buffer_stride_ = options.chunk_bytes + (coded ? kBlock : 0);
  const uint64_t per_channel = static_cast<uint64_t>(options.queue_depth) * tier->buffer_stride_;
  tier->staging_bytes_ = per_channel * static_cast<uint64_t>(options.channels);
  tier->staging_ = static_cast<std::byte*>(std::aligned_alloc(kBlock, tier->staging_bytes_));
  if (tier->staging_ == nullptr)
    return Status::OutOfMemory(
        fmt::format("{} tier: cannot allocate its staging buffers of {}", name, bytes_text(tier->staging_bytes_)));
  std::memset(tier->staging_, 0, tier->staging_bytes_);

  SsdIo io = options.io;
  for (int c = 0; c < options.channels; ++c) {
    auto channel = std::make_unique<Channel>();
    channel->staging = tier->staging_ + static_cast<uint64_t>(c) * per_channel;
    std::vector<iovec> buffers(static_cast<size_t>(options.queue_depth));
    for (size_t b = 0; b < buffers.size(); ++b)
      buffers[b] = iovec{channel->staging + b * tier->buffer_stride_, tier->buffer_stride_};
    if (coded) {
      channel->codec = std::make_unique<CodecContext>(options.codec_options);
      channel->plain.assign(options.chunk_bytes, std::byte{0});
    }
    Result<std::unique_ptr<ssd_io::Queue>> queue = Status::Internal("no I/O mechanism chosen");
    if (io == SsdIo::kAuto || io == SsdIo::kUring) {
      queue = ssd_io::UringQueue::create(tier->fd_, static_cast<unsigned>(options.queue_depth), buffers);
      if (queue.ok()) io = SsdIo::kUring;
      else if (io == SsdIo::kUring) return queue.status().with_context(fmt::format("{} tier", name));
      else io = SsdIo::kThreads;  // kAuto: fall back
    }
    if (io == SsdIo::kThreads) queue = ssd_io::ThreadQueue::create(tier->fd_, options.queue_depth);
    if (!queue.ok()) return queue.status().with_context(fmt::format("{} tier", name));
    channel->queue = std::move(queue).value();
    tier->channels_.push_back(std::move(channel));
  }
  tier->io_ = io;
  if (options.measure_codecs) tier->measured_ = std::make_unique<Measurements>();
  return tier;
}

SsdTier::~SsdTier() {
  channels_.clear();  // stops the queues (joins I/O threads, tears down rings) before the fd closes
  if (fd_ >= 0) ::close(fd_);
  remove_files();
  std::free(staging_);
}

void SsdTier::remove_files() {
  if (file_linked_) {
    ::unlink(file_path_.c_str());
    file_linked_ = false;
  }
  if (dir_linked_) {
    ::rmdir(dir_path_.c_str());
    dir_linked_ = false;
  }
}

SsdIoStats SsdTier::io_stats() const {
  return {.disk_bytes_written = disk_bytes_[0].load(),
          .disk_bytes_read = disk_bytes_[1].load(),
          .in_place_bytes_written = in_place_bytes_[0].load(),
          .in_place_bytes_read = in_place_bytes_[1].load()};
}

std::byte* SsdTier::buffer(Channel& channel, uint32_t b) const { return channel.staging + uint64_t{b} * buffer_stride_; }

std::byte* SsdTier::io_start(Channel& channel, uint32_t b) const {
  return buffer(channel, b) + (coded_staging() ? kBlock : 0);
}

SsdTier::Channel& SsdTier::acquire_channel() {
  std::unique_lock lock(channel_mu_);
  for (;;) {
    for (auto& c : channels_) {
      if (!c->busy) {
        c->busy = true;
        return *c;
      }
    }
    channel_cv_.wait(lock);
  }
}

void SsdTier::release_channel(Channel& channel) {
  {
    std::lock_guard lock(channel_mu_);
    channel.busy = false;
  }
  channel_cv_.notify_one();
}

void SsdTier::submit(Channel& channel, Request& r) {
  r.done = false;
  r.injected = false;
  r.submit_failed = false;
  r.corrupt = false;
  r.result = 0;
  uint64_t len = r.io_bytes;
  std::byte* buf = r.io_buf;
  const SsdFault& fault = options_.fault;
  const auto op = r.op == ssd_io::Op::kWrite ? SsdFault::Op::kWrite : SsdFault::Op::kRead;
  if (fault.kind != SsdFault::Kind::kNone && fault.op == op) {
    const uint64_t before = requested_bytes_[static_cast<int>(op)].fetch_add(len);
    if (before + len > fault.after_bytes && fault.kind == SsdFault::Kind::kCorrupt) {
      if (op == SsdFault::Op::kWrite && len > 0 && r.in_place) {  // corrupt what goes to disk, not the tensor
        std::memcpy(buffer(channel, r.buffer), buf, len);
        buf = buffer(channel, r.buffer);
        r.in_place = false;
      }
      if (op == SsdFault::Op::kWrite && len > 0) buf[0] ^= std::byte{0x5a};
      else r.corrupt = true;  // flipped by the reader once the bytes arrived
    } else if (before + len > fault.after_bytes) {
      r.injected = true;
      if (fault.kind == SsdFault::Kind::kShortTransfer) {
        len = fault.after_bytes > before ? (fault.after_bytes - before) / kBlock * kBlock : 0;
      } else {
        r.result = fault.kind == SsdFault::Kind::kNoSpace ? -ENOSPC : -EIO;
        len = 0;
      }
      if (len == 0) {
        r.done = true;
        return;
      }
    }
  }
  if (len == 0) {  // nothing to move (never happens with 4 KiB rounding, but cheap to honour)
    r.done = true;
    return;
  }
  const bool staged = buf >= staging_ && buf < staging_ + staging_bytes_;
  int rc = channel.queue->submit(r.op, buf, len, r.file_offset, r.buffer, staged);
  if (rc < 0) {
    r.done = true;
    r.submit_failed = true;
    r.result = rc;
    return;
  }
  r.in_flight = true;
}

void SsdTier::await(Channel& channel, Request& r, std::vector<Request>& requests) {
  while (!r.done) {
    uint32_t tag = 0;
    int64_t result = 0;
    channel.queue->wait(&tag, &result);
    FERRY_CHECK(tag < requests.size() && requests[tag].in_flight, "{} tier: completion of unknown request {}", name(),
                tag);
    requests[tag].in_flight = false;
    requests[tag].done = true;
    requests[tag].result = result;
    const int op = requests[tag].op == ssd_io::Op::kWrite ? 0 : 1;
    if (result > 0) disk_bytes_[op].fetch_add(static_cast<uint64_t>(result));
    if (result > 0 && requests[tag].in_place) in_place_bytes_[op].fetch_add(static_cast<uint64_t>(result));
  }
}

Status SsdTier::check(const Request& r, const SwapSlot& slot) const {
  const char* verb = r.op == ssd_io::Op::kWrite ? "write" : "read";
  const char* injected = r.injected ? "; injected fault" : "";
  const char* linked = options_.keep_files_visible ? "" : " (unlinked)";
  if (r.result < 0)
    return Status::IoError(fmt::format(
        "{} tier: {} of tensor {} failed{}: {}; file '{}'{}, offset {}, {} bytes{}", name(), verb, slot.tensor,
        r.submit_failed ? " to start" : "", errno_text(static_cast<int>(-r.result)), file_path_, linked, r.file_offset,
        r.io_bytes, injected));
  if (static_cast<uint64_t>(r.result) < r.io_bytes)
    return Status::IoError(fmt::format("{} tier: short {} of tensor {}: {} of {} bytes; file '{}'{}, offset {}{}",
                                       name(), verb, slot.tensor, r.result, r.io_bytes, file_path_, linked,
                                       r.file_offset, injected));
  return Status::Ok();
}

// measure_codecs' state: samples per class.
struct SsdTier::Measurements {
  mutable std::mutex mu;
  CodecStats stats;
  CodecContext ctx;
};

bool SsdTier::lossy(TensorId t) const {
  return t >= 0 && static_cast<size_t>(t) < options_.lossy_tensors.size() && options_.lossy_tensors[static_cast<size_t>(t)];
}

bool SsdTier::per_slot_codecs() const {
  return !options_.tensor_codecs.empty() ||
         std::find(options_.lossy_tensors.begin(), options_.lossy_tensors.end(), true) != options_.lossy_tensors.end();
}

CodecId SsdTier::codec_for(TensorId t) const {
  if (lossy(t)) return CodecId::kBf16;
  if (t >= 0 && static_cast<size_t>(t) < options_.tensor_codecs.size()) return options_.tensor_codecs[static_cast<size_t>(t)];
  return options_.codec;
}

Status SsdTier::store(const SwapSlot& slot, const SwapEndpoint& src, Hash64* hash) {
  const CodecId codec = codec_for(slot.tensor);
  if (measured_) measure_class(slot, src);
  if (is_lossy(codec)) hash = nullptr;  // its bytes come back rounded: the frame's checksums guard it
  Channel& channel = acquire_channel();
  Status s = codec == CodecId::kNone ? store_raw(channel, slot, src, hash)
                                     : store_coded(channel, slot, src, hash, codec);
  release_channel(channel);
  if (per_slot_codecs() && codec == CodecId::kNone && s.ok()) {
    std::lock_guard lock(coded_mu_);
    coded_[slot.tensor] = CodedSlot{slot.generation, {}, CodecId::kNone};
  }
  return s;
}

Status SsdTier::load(const SwapSlot& slot, const SwapEndpoint& dst, Hash64* hash) {
  const CodecId codec = per_slot_codecs() ? stored_codec(slot) : options_.codec;
  if (is_lossy(codec)) hash = nullptr;  // as in store()
  Channel& channel = acquire_channel();
  Status s = codec == CodecId::kNone ? load_raw(channel, slot, dst, hash)
                                     : load_coded(channel, slot, dst, hash, codec);
  release_channel(channel);
  return s;
}

CodecId SsdTier::stored_codec(const SwapSlot& slot) {
  std::lock_guard lock(coded_mu_);
  auto it = coded_.find(slot.tensor);
  FERRY_CHECK(it != coded_.end() && it->second.generation == slot.generation,
              "{} tier: tensor {} holds a copy but the tier has no record of how it was stored", name(), slot.tensor);
  return it->second.codec;
}

void SsdTier::measure_class(const SwapSlot& slot, const SwapEndpoint& src) {
  static const std::string kOther = "other";
  const auto t = static_cast<size_t>(slot.tensor);
  const std::string& cls =
      t < options_.tensor_classes.size() && !options_.tensor_classes[t].empty() ? options_.tensor_classes[t] : kOther;
  // A small tensor says little of its class (a frame's headers dominate it) and is not worth coding.
  constexpr uint64_t kMinSampleBytes = 64 << 10;
  if (slot.bytes < kMinSampleBytes) return;
  std::lock_guard lock(measured_->mu);  // serialises the (one-time) measurements
  if (measured_->stats.estimate(cls, CodecId::kZeroMask)) return;  // every codec is measured at once
  // The class's first chunk, as the tier would code it.
  std::vector<std::byte> sample(std::min<uint64_t>(slot.bytes, options_.chunk_bytes));
  if (!src.copy_out(0, sample).ok()) return;  // the store itself will report it
  for (CodecId c : kLosslessCodecs) {
    if (c == CodecId::kNone) continue;
    Result<CodecSample> m = measure_codec(measured_->ctx, c, sample, static_cast<uint32_t>(options_.chunk_bytes));
    FERRY_CHECK(m.ok(), "{} tier: measuring codec {} on tensor {}: {}", name(), to_string(c), slot.tensor,
                m.status().message());
    measured_->stats.record(cls, c, *m);
  }
}

std::vector<CodecFigure> SsdTier::codec_figures() const {
  if (!measured_) return {};
  std::lock_guard lock(measured_->mu);
  return measured_->stats.figures();
}

// Writes `chunks` chunks of `slot` queue_depth deep: `fill(k, r)` sets r's data_offset,
// data_bytes, io_bytes and io_buf for chunk k (its bytes staged); a buffer is reused only once its
// previous chunk is on disk, and every request is drained before returning (the kernel may still
// read staging buffers, which the next transfer reuses).
Status SsdTier::write_chunks(Channel& channel, const SwapSlot& slot, uint64_t chunks,
                             const std::function<Status(uint64_t, Request&)>& fill) {
  const uint64_t depth = static_cast<uint64_t>(options_.queue_depth);
  std::vector<Request> requests(depth);
  for (uint64_t b = 0; b < depth; ++b) requests[b].buffer = static_cast<uint32_t>(b);
  Status error;
  for (uint64_t k = 0; k < chunks && error.ok(); ++k) {
    Request& r = requests[k % depth];
    if (r.in_flight || r.done) {  // the buffer's previous chunk must be on disk before reuse
      await(channel, r, requests);
      error = check(r, slot);
      r.done = false;
      if (!error.ok()) break;
    }
    r.op = ssd_io::Op::kWrite;
    error = fill(k, r);
    if (!error.ok()) break;
    r.file_offset = slot.offset + r.data_offset;
    submit(channel, r);
  }
  for (Request& r : requests) {
    if (!r.in_flight && !r.done) continue;
    await(channel, r, requests);
    if (error.ok()) error = check(r, slot);
    r.done = false;
  }
  return error;
}

// Reads `chunks` chunks of `slot` queue_depth deep: `place(k, r)` sets r's data_offset,
// data_bytes, io_bytes and io_buf for chunk k; `consume(k, r)` takes the chunk once it has
// arrived, in order; then the drain (after an error the later chunks no longer matter).
Status SsdTier::read_chunks(Channel& channel, const SwapSlot& slot, uint64_t chunks,
                            const std::function<void(uint64_t, Request&)>& place,
                            const std::function<Status(uint64_t, Request&)>& consume) {
  const uint64_t depth = static_cast<uint64_t>(options_.queue_depth);
  std::vector<Request> requests(depth);
  for (uint64_t b = 0; b < depth; ++b) requests[b].buffer = static_cast<uint32_t>(b);
  auto start = [&](uint64_t k) {
    Request& r = requests[k % depth];
    r.op = ssd_io::Op::kRead;
    place(k, r);
    r.file_offset = slot.offset + r.data_offset;
    submit(channel, r);
  };
  Status error;
  for (uint64_t k = 0; k < std::min(depth, chunks); ++k) start(k);
  for (uint64_t k = 0; k < chunks && error.ok(); ++k) {
    Request& r = requests[k % depth];
    await(channel, r, requests);
    error = check(r, slot);
    r.done = false;
    if (!error.ok()) break;
    error = consume(k, r);
    if (!error.ok()) break;
    if (k + depth < chunks) start(k + depth);
  }
  for (Request& r : requests)
    if (r.in_flight) await(channel, r, requests);
  return error;
}

namespace {

// One request of a raw transfer: `bytes` bytes of the tensor from `offset`.
struct RawPiece {
  uint64_t offset = 0;
  uint64_t bytes = 0;
  bool in_place = false;  // straight between the tensor's memory and the file
};

// A raw transfer's requests (Note [In-place transfers]): chunks of `chunk` bytes; with
// `in_place`, the whole 4 KiB blocks of a chunk move in place and its tail (the last chunk's last
// partial block) through staging.
std::vector<RawPiece> raw_pieces(uint64_t bytes, uint64_t chunk, bool in_place) {
  std::vector<RawPiece> pieces;
  pieces.reserve((bytes + chunk - 1) / chunk + 1);
  for (uint64_t off = 0; off < bytes; off += chunk) {
    const uint64_t n = std::min(chunk, bytes - off);
    const uint64_t whole = in_place ? n / kBlock * kBlock : 0;
    if (whole > 0) pieces.push_back({off, whole, true});
    if (n > whole) pieces.push_back({off + whole, n - whole, false});
  }
  return pieces;
}

bool block_aligned(const std::byte* p) { return p != nullptr && reinterpret_cast<uintptr_t>(p) % kBlock == 0; }

}  // namespace

Status SsdTier::store_raw(Channel& channel, const SwapSlot& slot, const SwapEndpoint& src, Hash64* hash) {
  const std::byte* base = options_.in_place ? src.direct_io_source() : nullptr;
  const std::vector<RawPiece> pieces = raw_pieces(slot.bytes, options_.chunk_bytes, block_aligned(base));
  return write_chunks(channel, slot, pieces.size(), [&](uint64_t k, Request& r) {
    const RawPiece& p = pieces[k];
    r.data_offset = p.offset;
    r.data_bytes = p.bytes;
    r.io_bytes = align_up(r.data_bytes, kBlock);
    r.in_place = p.in_place;
    if (p.in_place) {
      // A write only reads its buffer; the queue's interface is shared with reads.
      r.io_buf = const_cast<std::byte*>(base + p.offset);
      if (hash) hash->update({base + p.offset, p.bytes});
      return Status::Ok();
    }
    std::byte* buf = buffer(channel, r.buffer);
    r.io_buf = buf;
    if (Status st = src.copy_out(r.data_offset, {buf, r.data_bytes}); !st.ok())
      return st.with_context(fmt::format("{} tier: write of tensor {}", name(), slot.tensor));
    std::memset(buf + r.data_bytes, 0, r.io_bytes - r.data_bytes);  // no stale bytes on disk
    if (hash) hash->update({buf, r.data_bytes});
    return Status::Ok();
  });
}

Status SsdTier::load_raw(Channel& channel, const SwapSlot& slot, const SwapEndpoint& dst, Hash64* hash) {
  std::byte* base = options_.in_place ? dst.direct_io_destination() : nullptr;
  const std::vector<RawPiece> pieces = raw_pieces(slot.bytes, options_.chunk_bytes, block_aligned(base));
  auto place = [&](uint64_t k, Request& r) {
    const RawPiece& p = pieces[k];
    r.data_offset = p.offset;
    r.data_bytes = p.bytes;
    r.io_bytes = align_up(r.data_bytes, kBlock);
    r.in_place = p.in_place;
    r.io_buf = p.in_place ? base + p.offset : buffer(channel, r.buffer);
  };
  return read_chunks(channel, slot, pieces.size(), place, [&](uint64_t, Request& r) {
    std::byte* buf = r.in_place ? base + r.data_offset : buffer(channel, r.buffer);
    if (r.corrupt) buf[0] ^= std::byte{0x5a};
    if (hash) hash->update({buf, r.data_bytes});
    if (r.in_place) return Status::Ok();  // already where it belongs
    if (Status st = dst.copy_in(r.data_offset, {buf, r.data_bytes}); !st.ok())
      return st.with_context(fmt::format("{} tier: read of tensor {}", name(), slot.tensor));
    return Status::Ok();
  });
}

// Note [Coded slots]. Encoding chunk k+1 runs while chunk k's write is on disk.
Status SsdTier::store_coded(Channel& channel, const SwapSlot& slot, const SwapEndpoint& src, Hash64* hash,
                            CodecId codec) {
  const uint64_t chunk = options_.chunk_bytes;
  Result<FrameEncoder> enc = FrameEncoder::create(codec, slot.bytes, static_cast<uint32_t>(chunk));
  if (!enc.ok()) return enc.status().with_context(fmt::format("{} tier: write of tensor {}", name(), slot.tensor));
  const uint32_t chunks = enc->info().chunk_count;
  CodedSlot coded{slot.generation, std::vector<std::array<std::byte, kChunkHeaderBytes>>(chunks), codec};
  {  // a failed write leaves no headers behind (the base class then refuses reads of the slot)
    std::lock_guard lock(coded_mu_);
    coded_.erase(slot.tensor);
  }
  Status error = write_chunks(channel, slot, chunks, [&](uint64_t k, Request& r) {
    r.data_offset = enc->info().chunk_offset(static_cast<uint32_t>(k));
    r.data_bytes = enc->info().chunk_input_bytes(static_cast<uint32_t>(k));
    r.in_place = false;
    std::span<std::byte> plain = std::span(channel.plain).first(r.data_bytes);
    if (Status st = src.copy_out(r.data_offset, plain); !st.ok())
      return st.with_context(fmt::format("{} tier: write of tensor {}", name(), slot.tensor));
    if (hash) hash->update(plain);
    std::byte* record = io_start(channel, r.buffer) - kChunkHeaderBytes;
    Result<uint64_t> n = enc->encode_chunk(*channel.codec, static_cast<uint32_t>(k), plain, {record, kChunkHeaderBytes + chunk});
    if (!n.ok())
      return n.status().with_context(
          fmt::format("{} tier: write of tensor {}: encoding chunk {} of {}", name(), slot.tensor, k, chunks));
    const uint64_t payload_bytes = *n - kChunkHeaderBytes;
    std::memcpy(coded.chunk_headers[k].data(), record, kChunkHeaderBytes);
    r.io_bytes = align_up(payload_bytes, kBlock);
    r.io_buf = io_start(channel, r.buffer);
    std::memset(record + *n, 0, r.io_bytes - payload_bytes);  // no stale bytes on disk
    return Status::Ok();
  });
  if (error.ok()) {
    std::lock_guard lock(coded_mu_);
    coded_[slot.tensor] = std::move(coded);
  }
  return error;
}

// Reads queue_depth chunks ahead and decodes each finished one, in order, beside the others' reads.
Status SsdTier::load_coded(Channel& channel, const SwapSlot& slot, const SwapEndpoint& dst, Hash64* hash,
                           CodecId codec) {
  const uint64_t chunk = options_.chunk_bytes;
  Result<FrameEncoder> enc = FrameEncoder::create(codec, slot.bytes, static_cast<uint32_t>(chunk));
  if (!enc.ok()) return enc.status().with_context(fmt::format("{} tier: read of tensor {}", name(), slot.tensor));
  const FrameInfo& info = enc->info();
  const uint32_t chunks = info.chunk_count;
  std::vector<std::array<std::byte, kChunkHeaderBytes>> headers;
  {
    std::lock_guard lock(coded_mu_);
    auto it = coded_.find(slot.tensor);
    FERRY_CHECK(it != coded_.end() && it->second.generation == slot.generation && it->second.chunk_headers.size() == chunks,
                "{} tier: tensor {} holds a copy but no chunk headers of it", name(), slot.tensor);
    headers = it->second.chunk_headers;
  }
  auto payload_of = [&](uint64_t k) {
    uint32_t bytes;
    std::memcpy(&bytes, headers[k].data(), sizeof bytes);
    return uint64_t{bytes};
  };
  auto place = [&](uint64_t k, Request& r) {
    r.data_offset = info.chunk_offset(static_cast<uint32_t>(k));
    r.data_bytes = info.chunk_input_bytes(static_cast<uint32_t>(k));
    // The header bounds the payload by the chunk's input (checked when it was made), so the read
    // fits the staging buffer.
    r.io_bytes = align_up(std::min(payload_of(k), r.data_bytes), kBlock);
    r.io_buf = io_start(channel, r.buffer);
    r.in_place = false;
  };
  return read_chunks(channel, slot, chunks, place, [&](uint64_t k, Request& r) {
    std::byte* payload = io_start(channel, r.buffer);
    if (r.corrupt) payload[0] ^= std::byte{0x5a};
    std::byte* record = payload - kChunkHeaderBytes;
    std::memcpy(record, headers[k].data(), kChunkHeaderBytes);
    std::span<std::byte> plain = std::span(channel.plain).first(r.data_bytes);
    if (Status st = decode_chunk(*channel.codec, info, static_cast<uint32_t>(k), {record, kChunkHeaderBytes + payload_of(k)}, plain);
        !st.ok())
      return st.with_context(fmt::format("{} tier: read of tensor {}, chunk {} of {} (file '{}', offset {}, {} bytes)",
                                         name(), slot.tensor, k, chunks, file_path_, r.file_offset, r.io_bytes));
    if (hash) hash->update(plain);
    if (Status st = dst.copy_in(r.data_offset, plain); !st.ok())
      return st.with_context(fmt::format("{} tier: read of tensor {}", name(), slot.tensor));
    return Status::Ok();
  });
}

}  // namespace ferry
