// SsdTier: swapped tensors in one file on a local disk, moved with direct I/O in place (straight
// between the tensor's memory and the file) or through aligned staging buffers, several requests
// in flight per transfer.
//
// Design
// - One file per tier (per run), not one per tensor. Slots are offsets in it, handed out by the
//   tier's OffsetAllocator with 4 KiB alignment (every request then meets O_DIRECT's rules), and
//   reused after release like device memory. A file per tensor would put open/fallocate/unlink
//   (tens of microseconds each, plus journal writes) on the swap path, grow the descriptor count
//   with the model, and leave fragmentation to the file system; one file costs one open, one
//   descriptor, and one unlink to clean up.
// - The file lives in a fresh directory made with mkdtemp under the user's directory
//   ("<dir>/ferry-swap-XXXXXX/swap.bin"). By default the file and the directory are unlinked right
//   after the open, so that nothing is left behind even when the process dies without running a
//   destructor (abort, SIGKILL, the OOM killer); the descriptor keeps the space until close.
//   keep_files_visible keeps them until destruction, for inspection. Every error path of create()
//   removes what it made.
// - Direct I/O (O_DIRECT): swapped bytes are read back once, so the page cache would only double
//   the host memory they take and evict what training needs. O_DIRECT needs 4 KiB-aligned buffers,
//   offsets and lengths. Where the tensor's memory is host memory at a 4 KiB-aligned address (the
//   CPU backend's arena, whose swapped tensors' blocks the placement aligns so; Backend::
//   direct_io_address), its whole 4 KiB blocks move in place, with no copy by the CPU (Note
//   [In-place transfers] in ssd_tier.cc). Everything else goes through staging buffers (the
//   bounded staging pool: channels x queue_depth x chunk_bytes, allocated and pre-faulted at
//   creation): a misaligned tensor, memory the host cannot address, coded copies, and the tail of
//   a tensor whose size is not a multiple of 4 KiB, which is written zero-padded.
// - Pipelining: a transfer is cut into chunks of chunk_bytes, and up to queue_depth of them are in
//   flight: a write copies chunk k+1 from the device while chunk k goes to disk; a read keeps
//   queue_depth reads outstanding and copies each finished chunk to the device in order. A
//   transfer holds one channel (a staging set and its I/O queue) for its duration; `channels`
//   transfers run at once (two: the transfer engine's out- and in-threads), more wait.
// - Asynchronous I/O through io_uring (liburing) by default, or a pool of threads doing
//   pread/pwrite (SsdIo::kThreads), picked automatically when io_uring is unavailable (kernels
//   without it, container seccomp profiles that block it). See Note [io_uring vs threads] in
//   ssd_tier.cc for the measurements behind the default.
// - Failures are kIoError naming the tensor, the file, the offset, the bytes and the errno text:
//   ENOSPC, EIO, and short transfers (fewer bytes than asked, which for direct I/O on a regular
//   file means the device filled up or the file was cut) alike. Nothing is retried: a failing swap
//   ends the run. SsdFault injects each of these for tests, and corrupted bytes.
// - Codecs (options.codec, codec/codec.h; Note [Coded slots] in ssd_tier.cc): with a lossless
//   codec other than `none`, each chunk of chunk_bytes is encoded on its own, as a frame's chunk
//   (FrameEncoder::encode_chunk), and only its payload, rounded up to 4 KiB, goes to disk, at the
//   chunk's usual place in the slot; the 16-byte chunk headers (payload size, method, checksum)
//   stay in memory, per slot. A slot therefore takes exactly the space it takes raw
//   (align_up(bytes, 4 KiB)): a payload is never larger than its chunk, since a chunk the codec
//   does not shrink is stored raw. Encoding runs beside the writes (chunk k+1 is encoded while
//   chunk k is on disk) and decoding beside the reads. Corrupt or truncated data read back fails
//   the payload checksum: kIoError naming the tensor and the chunk. Checksum mode hashes the
//   tensor's bytes before encoding and after decoding, so it guards the codec as well.
//   io_stats() counts the bytes that really crossed the disk. tensor_codecs gives each tensor its
//   own codec (a plan's Schedule::ssd_codecs); a slot records the codec its copy was written with.
//   measure_codecs samples every lossless codec on the first chunk of each class of tensor, the
//   figures the cost model plans codecs with (codec_figures()).
//
// Usage:
//   Result<std::unique_ptr<SsdTier>> ssd = SsdTier::create({.directory = "/scratch",
//                                                          .capacity_bytes = 64ull << 30});
//   if (!ssd.ok()) return ssd.status();   // bad options, O_DIRECT unsupported, not enough space
//   ... then as any SwapTier (tiers.h)
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "codec/codec.h"
#include "codec/stats.h"
#include "common/status.h"
#include "runtime/tiers.h"

namespace ferry {

enum class SsdIo : uint8_t {
  kAuto,     // io_uring when the kernel allows it, else kThreads
  kUring,    // io_uring; create() fails when unavailable
  kThreads,  // queue_depth threads per channel doing pread/pwrite
};
std::string_view to_string(SsdIo io);

// An injected failure, for tests. Once the bytes requested by I/O of kind `op` would pass
// `after_bytes` (counted over the tier's life), that request and every later one of that kind fail
// as `kind` says. kShortTransfer really transfers the bytes up to the threshold (rounded down to
// 4 KiB) and reports the short count, as a disk that fills up mid-request does. kCorrupt lets the
// requests succeed but flips the first byte of each (after a read, before a write), as a disk
// returning bad data does.
struct SsdFault {
  enum class Kind : uint8_t { kNone, kNoSpace, kIoError, kShortTransfer, kCorrupt };
  enum class Op : uint8_t { kWrite, kRead };
  Kind kind = Kind::kNone;
  Op op = Op::kWrite;
  uint64_t after_bytes = 0;
};

struct SsdTierOptions {
  // Where the tier makes its temporary directory; must exist, on a file system with O_DIRECT.
  std::string directory = "/tmp";
  uint64_t capacity_bytes = 0;  // file space the tier may use (rounded down to 4 KiB)
  std::string name = "ssd";
  bool checksum = false;
  uint64_t chunk_bytes = 1 << 20;  // one I/O request; a positive multiple of 4 KiB
  int queue_depth = 4;             // requests in flight per transfer, 1..64
  int channels = 2;                // transfers running at once, 1..16
  SsdIo io = SsdIo::kAuto;
  // Move the whole 4 KiB blocks of raw copies in place when the tensor's memory allows (see the
  // top of this file); false stages every byte (for comparisons: `ferry profile` measures both).
  bool in_place = true;
  bool keep_files_visible = false;  // see the top of this file
  // Allocate the whole capacity on disk at creation (fallocate), so that a disk too small fails
  // there rather than mid-run. Otherwise create() only checks the free space (statvfs).
  bool preallocate = false;
  SsdFault fault = {};
  // How swapped bytes are coded on disk (see the top of this file). Lossless codecs only; with one
  // other than kNone, chunk_bytes must be at most kMaxChunkBytes (64 MiB).
  CodecId codec = CodecId::kNone;
  CodecOptions codec_options = {};
  // Per tensor (indexed by TensorId), the lossless codec its copies are stored with (kNone: raw);
  // tensors past its end use `codec`. The plan decides it (Schedule::ssd_codecs).
  std::vector<CodecId> tensor_codecs = {};
  // Measure the codecs per class of tensor (tensor_classes[tensor]; "other" when missing or
  // empty): the first stored tensor of each class of at least 64 KiB has every lossless codec
  // measured on its first chunk (measure_codec, on a copy, before the store), whatever it is
  // stored with.
  bool measure_codecs = false;
  std::vector<std::string> tensor_classes = {};
  // Lossy stashing on request (`--lossy bf16`, Gist-style): tensors marked here (indexed by
  // TensorId) are stored with the bf16 codec, every 32-bit word rounded to bfloat16, and come back
  // rounded; the others as above. The content checksum (`checksum`) does not cover them (their
  // bytes change by design); the codec's per-chunk checksums still catch corrupt data on disk.
  std::vector<bool> lossy_tensors = {};
};

// Bytes that really crossed the disk, counted from completed requests: the gain of a codec,
// measured. Raw, each chunk is its bytes rounded up to 4 KiB.
// Of these, the bytes moved in place (no staging copy).
struct SsdIoStats {
  uint64_t disk_bytes_written = 0;
  uint64_t disk_bytes_read = 0;
  uint64_t in_place_bytes_written = 0;
  uint64_t in_place_bytes_read = 0;
  SsdIoStats& operator+=(const SsdIoStats& o) {
    disk_bytes_written += o.disk_bytes_written;
    disk_bytes_read += o.disk_bytes_read;
    in_place_bytes_written += o.in_place_bytes_written;
    in_place_bytes_read += o.in_place_bytes_read;
    return *this;
  }
};

namespace ssd_io {
class Queue;  // ssd_tier.cc: one channel's I/O mechanism
}

class SsdTier final : public SwapTier {
 public:
  // Makes the directory and the file, the staging pool and the I/O queues. Errors:
  // kInvalidArgument for bad options or a directory that does not exist; kIoError when the
  // directory or file cannot be made, the file system refuses O_DIRECT, or it has less free space
  // than capacity_bytes; kUnsupported for SsdIo::kUring where io_uring is unavailable.
  static Result<std::unique_ptr<SsdTier>> create(const SsdTierOptions& options);
  // Closes and removes the file. No write or read may be running.
  ~SsdTier() override;

  // The temporary directory and the file in it (already unlinked unless keep_files_visible).
  const std::string& directory() const { return dir_path_; }
  const std::string& file_path() const { return file_path_; }
  // The mechanism in use: kUring or kThreads.
  SsdIo io() const { return io_; }
  const SsdTierOptions& options() const { return options_; }
  // Disk bytes moved so far (thread-safe).
  SsdIoStats io_stats() const;
  // With measure_codecs: every codec's figure on every class measured so far, sorted by class,
  // then codec (thread-safe).
  std::vector<CodecFigure> codec_figures() const;

 protected:
  Status store(const SwapSlot& slot, const SwapEndpoint& src, Hash64* hash) override;
  Status load(const SwapSlot& slot, const SwapEndpoint& dst, Hash64* hash) override;

 private:
  struct Channel;
  struct Request;
  explicit SsdTier(const SsdTierOptions& options);

  Channel& acquire_channel();
  void release_channel(Channel& channel);
  // Starts the I/O of request `r` (buffer index r.buffer of `channel`), or completes it at once
  // with an injected fault or a failure to start (then r.done is set).
  void submit(Channel& channel, Request& r);
  // Waits until request `r` has completed; its result is then in r.result.
  void await(Channel& channel, Request& r, std::vector<Request>& requests);
  // kOk when `r` moved all its bytes, else the kIoError describing it.
  Status check(const Request& r, const SwapSlot& slot) const;
  // Removes the file and directory if they are still there (idempotent).
  void remove_files();
  // Staging buffer `b` of `channel`, and where its I/O starts (kBlock into it with a codec, so
  // that a chunk header fits in front of the payload).
  std::byte* buffer(Channel& channel, uint32_t b) const;
  std::byte* io_start(Channel& channel, uint32_t b) const;
  // The raw and the coded transfers.
  Status write_chunks(Channel& channel, const SwapSlot& slot, uint64_t chunks,
                      const std::function<Status(uint64_t, Request&)>& fill);
  Status read_chunks(Channel& channel, const SwapSlot& slot, uint64_t chunks,
                     const std::function<void(uint64_t, Request&)>& place,
                     const std::function<Status(uint64_t, Request&)>& consume);
  Status store_raw(Channel& channel, const SwapSlot& slot, const SwapEndpoint& src, Hash64* hash);
  Status load_raw(Channel& channel, const SwapSlot& slot, const SwapEndpoint& dst, Hash64* hash);
  Status store_coded(Channel& channel, const SwapSlot& slot, const SwapEndpoint& src, Hash64* hash, CodecId codec);
  Status load_coded(Channel& channel, const SwapSlot& slot, const SwapEndpoint& dst, Hash64* hash, CodecId codec);
  // measure_codecs: measures `slot`'s class on its first sight.
  void measure_class(const SwapSlot& slot, const SwapEndpoint& src);
  // The codec `slot` is stored with (lossy, tensor_codecs, codec).
  CodecId codec_for(TensorId t) const;
  // The codec `slot`'s stored copy was written with.
  CodecId stored_codec(const SwapSlot& slot);
  bool lossy(TensorId t) const;     // stored with bf16 (SsdTierOptions::lossy_tensors)
  bool per_slot_codecs() const;     // slots record their codec (tensor_codecs or lossy tensors)
  bool coded_staging() const { return options_.codec != CodecId::kNone || per_slot_codecs(); }

  SsdTierOptions options_;
  SsdIo io_ = SsdIo::kAuto;
  std::string dir_path_;
  std::string file_path_;
  bool file_linked_ = false;
  bool dir_linked_ = false;
  int fd_ = -1;
  std::byte* staging_ = nullptr;  // channels x queue_depth x chunk_bytes, 4 KiB-aligned
  uint64_t staging_bytes_ = 0;
  std::vector<std::unique_ptr<Channel>> channels_;
  std::mutex channel_mu_;
  std::condition_variable channel_cv_;
  std::atomic<uint64_t> requested_bytes_[2] = {0, 0};  // by SsdFault::Op: for fault injection
  std::atomic<uint64_t> disk_bytes_[2] = {0, 0};       // by SsdFault::Op: moved by completed requests
  std::atomic<uint64_t> in_place_bytes_[2] = {0, 0};   // of these, moved in place
  uint64_t buffer_stride_ = 0;                         // chunk_bytes, plus kBlock with a codec
  // Coded slots: the chunk headers of each tensor's stored copy (Note [Coded slots]).
  struct CodedSlot {
    uint64_t generation = 0;
    std::vector<std::array<std::byte, kChunkHeaderBytes>> chunk_headers;
    CodecId codec = CodecId::kNone;  // kNone: stored raw (per-slot codecs only)
  };
  struct Measurements;  // ssd_tier.cc: measure_codecs' samples
  std::unique_ptr<Measurements> measured_;
  std::mutex coded_mu_;
  std::unordered_map<TensorId, CodedSlot> coded_;
};

}  // namespace ferry
