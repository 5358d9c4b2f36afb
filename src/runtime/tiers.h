// Swap tiers: where a tensor's bytes live while its device memory is released. One interface,
// SwapTier, with two media: HostTier (a pre-faulted host region; pinned memory under CUDA later)
// and SsdTier (a file on a local disk, runtime/ssd_tier.h).
//
// Design
// - A tier is space accounting plus a medium. The accounting is shared and lives in the base
//   class: an OffsetAllocator over the tier's capacity (the same best-fit allocator as the device
//   arena, so out-of-space reports have the same numbers), one slot per tensor, counters, and the
//   optional checksum. A medium only moves bytes: store() and load() (the virtual hooks below).
// - One copy per tensor per tier, as the Program's rules have it (schedule/program.h): a copy is made
//   by a swap-out, survives any number of swap-ins, and is dropped with release(). reserve()
//   refuses a second slot for a tensor that has one.
// - Device memory is opaque (backend/device_ptr.h), so a tier moves device bytes only through
//   Backend::copy_to_host / copy_to_device, into memory the tier owns: the host tier copies
//   straight into its region (one copy), the SSD tier with direct I/O in place where the backend
//   exposes the memory (Backend::direct_io_address) and through aligned staging buffers elsewhere.
//   A SwapEndpoint names the other side of a copy: device memory behind a backend, or host memory
//   (tests, checkpoints).
// - Checksum mode: store() hashes the bytes as the tier holds them (after the device-to-host copy,
//   before they reach the medium), load() hashes them as they come back from the medium, and a
//   difference is kInternal naming the tensor. It guards the medium and the tier's own offsets,
//   which is where swapping can silently go wrong.
// - Codecs: the host tier can store every copy coded with a lossless codec (HostTierOptions::codec,
//   Note [Coded host slots] in tiers.cc), chunk by chunk, each payload at its chunk's raw place so
//   that a slot keeps its raw size. The SSD tier codes per tensor as the plan says (ssd_tier.h).
// - Thread safety: every method may be called from any thread. reserve/find/release and the
//   counters are serialised by a mutex; write() and read() run their copies without it, so the
//   transfer engine's out- and in-threads move different slots at the same time. A slot must not
//   be released while a write or read of it runs (FERRY_CHECK).
//
// Usage:
//   Result<std::unique_ptr<HostTier>> host = HostTier::create({.capacity_bytes = 1 << 30});
//   Result<SwapSlot> slot = (*host)->reserve(t, bytes);        // kOutOfMemory with the numbers
//   Status st = (*host)->write(*slot, backend, device_ptr);    // device -> tier
//   st = (*host)->read(*slot, backend, device_ptr);            // tier -> device, any number of times
//   (*host)->release(*slot);                                    // the copy is dropped
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "codec/codec.h"
#include "backend/device_ptr.h"
#include "common/host_region.h"
#include "common/status.h"
#include "common/transfer.h"
#include "graph/graph.h"
#include "memory/offset_allocator.h"
#include "common/checksum.h"

namespace ferry {

// A tensor's space in a tier. A value handle: the tier keeps the state, and a handle of a released
// slot is recognised as stale.
struct SwapSlot {
  TensorId tensor = kNoTensor;
  uint64_t bytes = 0;        // the tensor's bytes
  uint64_t offset = 0;       // where they live in the medium (region offset, file offset)
  uint64_t generation = 0;   // unique per reservation within a tier; 0 is never used
  bool operator==(const SwapSlot&) const = default;
};

// A tensor's fixed place in a tier (SwapTier::fix_slots).
struct FixedSlot {
  TensorId tensor = kNoTensor;
  uint64_t bytes = 0;
  uint64_t offset = 0;
};

// Counters of one tier. Peaks run from creation or the last reset_peaks().
struct TierStats {
  uint64_t capacity_bytes = 0;     // managed bytes
  uint64_t in_use_bytes = 0;       // reserved by live slots, after the medium's rounding
  uint64_t peak_in_use_bytes = 0;
  uint64_t live_slots = 0;
  uint64_t bytes_written = 0;      // tensor bytes stored by completed writes
  uint64_t bytes_read = 0;         // tensor bytes loaded by completed reads
  uint64_t num_writes = 0;         // completed writes
  uint64_t num_reads = 0;          // completed reads
  uint64_t num_failed_reservations = 0;
  uint64_t num_failed_transfers = 0;  // writes and reads that returned an error
};

// The other side of a tier copy: `bytes` of device memory reached through a backend, or a span of
// host memory. Refers to, does not own, its memory.
class SwapEndpoint {
 public:
  static SwapEndpoint device(Backend& backend, DevicePtr ptr, uint64_t bytes) {
    return SwapEndpoint(&backend, ptr, nullptr, nullptr, bytes);
  }
  // Host memory that a write reads from.
  static SwapEndpoint host_source(std::span<const std::byte> src) {
    return SwapEndpoint(nullptr, {}, src.data(), nullptr, src.size());
  }
  // Host memory that a read fills.
  static SwapEndpoint host_destination(std::span<std::byte> dst) {
    return SwapEndpoint(nullptr, {}, dst.data(), dst.data(), dst.size());
  }

  uint64_t bytes() const { return bytes_; }
  bool is_device() const { return backend_ != nullptr; }
  // The endpoint's bytes in host memory, for I/O the kernel does in place (direct I/O): host
  // spans, and device memory whose backend has a direct_io_address; null otherwise. The writable
  // form is null for a host_source.
  const std::byte* direct_io_source() const;
  std::byte* direct_io_destination() const;
  // Copies this endpoint's bytes [offset, offset + dst.size()) into `dst` (tier-owned memory).
  Status copy_out(uint64_t offset, std::span<std::byte> dst) const;
  // Copies `src` (tier-owned memory) into this endpoint's bytes [offset, offset + src.size()).
  // FERRY_CHECKs that the endpoint is writable (device, or host_destination).
  Status copy_in(uint64_t offset, std::span<const std::byte> src) const;

 private:
  SwapEndpoint(Backend* backend, DevicePtr device, const std::byte* host, std::byte* host_mutable, uint64_t bytes)
      : backend_(backend), device_(device), host_(host), host_mutable_(host_mutable), bytes_(bytes) {}
  Backend* backend_;
  DevicePtr device_;
  const std::byte* host_;
  std::byte* host_mutable_;
  uint64_t bytes_;
};

class SwapTier {
 public:
  virtual ~SwapTier() = default;
  SwapTier(const SwapTier&) = delete;
  SwapTier& operator=(const SwapTier&) = delete;

  // Names the tier in errors and timelines ("host", "ssd").
  const std::string& name() const { return name_; }
  // Which of the Schedule's tiers this medium serves.
  Tier kind() const { return kind_; }
  uint64_t capacity_bytes() const;
  bool checksum_enabled() const { return checksum_; }

  // Reserves space for `tensor`'s `bytes` bytes. Errors: kOutOfMemory naming the tier, the tensor
  // and the numbers (requested, capacity, in use, largest free); kInvalidArgument when the tensor
  // already has a slot here.
  Result<SwapSlot> reserve(TensorId tensor, uint64_t bytes);
  // Gives each of `slots` a place of its own at a fixed offset (a multiple of the tier's
  // alignment): its reservations then always land there and never fail for fragmentation (a
  // best-fit allocator can fail with enough free bytes when copies come and go in a different
  // order each iteration). Fixed slots may share bytes when the caller knows their copies never
  // coexist (schedule/tier_placement.h places them so); reserve() refuses a fixed slot that
  // overlaps a live one (kInternal), so a wrong placement stops the run instead of clobbering a
  // copy. Other tensors are placed above the highest fixed slot. Call once, before any
  // reservation. Errors: kOutOfMemory when the slots end past the capacity; kInvalidArgument for
  // a misaligned offset or a tensor named twice.
  Status fix_slots(const std::vector<FixedSlot>& slots);
  // The tensor's slot, or nullopt when it has none in this tier.
  std::optional<SwapSlot> find(TensorId tensor) const;
  // Drops the slot and its copy. FERRY_CHECKs that the slot is live (not stale) and idle.
  void release(const SwapSlot& slot);
  // Whether the slot holds a complete copy (a write of it succeeded).
  bool holds_copy(const SwapSlot& slot) const;

  // Device -> tier: stores `slot.bytes` bytes from `src`. Errors: kIoError from the medium (the
  // slot then holds no copy); kInvalidArgument for a stale slot.
  Status write(const SwapSlot& slot, Backend& backend, DevicePtr src);
  // Tier -> device: loads the slot's copy into `dst`. Errors: kIoError from the medium, kInternal
  // on a checksum mismatch or when the slot holds no complete copy.
  Status read(const SwapSlot& slot, Backend& backend, DevicePtr dst);
  // As write/read, with host memory of exactly slot.bytes bytes on the other side.
  Status write(const SwapSlot& slot, std::span<const std::byte> src);
  Status read(const SwapSlot& slot, std::span<std::byte> dst);
  // The general forms the four above call.
  Status write(const SwapSlot& slot, const SwapEndpoint& src);
  Status read(const SwapSlot& slot, const SwapEndpoint& dst);

  TierStats stats() const;
  // Starts a new peak window (e.g. at an iteration boundary).
  void reset_peaks();
  // Tests and benchmarks: every later write and read takes `factor` (>= 1) times as long as the
  // medium did (it sleeps the difference after the medium finishes), as a disk that slowed down.
  void set_slowdown(double factor);

 protected:
  // `alignment`: of every slot's offset and size in the medium (64 for memory, 4096 for direct I/O).
  SwapTier(std::string name, Tier kind, uint64_t capacity_bytes, uint64_t alignment, bool checksum);

  // The medium. store() moves slot.bytes bytes from `src` to the medium at slot.offset; load()
  // moves them back into `dst`. Each feeds the bytes, as the medium holds them and in order, to
  // `hash` when it is not null. Called without the tier's mutex; concurrent calls touch
  // different slots. Errors: kIoError naming the medium, the offset, the bytes and the cause.
  virtual Status store(const SwapSlot& slot, const SwapEndpoint& src, Hash64* hash) = 0;
  virtual Status load(const SwapSlot& slot, const SwapEndpoint& dst, Hash64* hash) = 0;

 private:
  struct SlotState {
    SwapSlot slot;
    bool valid = false;       // a write completed
    int active = 0;           // writes and reads running now
    uint64_t checksum = 0;    // of the stored bytes, when valid and checksums are on
  };
  // The live state of `slot`, or null when the handle is stale. Requires mu_.
  SlotState* lookup(const SwapSlot& slot);
  const SlotState* lookup(const SwapSlot& slot) const;
  // Marks a transfer of `slot` as running, or explains why it may not start.
  Status begin_transfer(const SwapSlot& slot, bool is_write, uint64_t endpoint_bytes, uint64_t* checksum);
  void end_transfer(const SwapSlot& slot, bool is_write, bool ok, uint64_t checksum);
  // Sleeps (slowdown - 1) x the time since `start` (set_slowdown).
  void slow_down(std::chrono::steady_clock::time_point start) const;

  const std::string name_;
  const Tier kind_;
  const bool checksum_;
  mutable std::mutex mu_;
  OffsetAllocator allocator_;
  std::unordered_map<TensorId, SlotState> slots_;
  // fix_slots: tensor -> (offset, rounded bytes), carved from the allocator as one block.
  std::unordered_map<TensorId, std::pair<uint64_t, uint64_t>> fixed_;
  // The fixed slots reserved now: offset -> (end, tensor), to refuse overlapping reservations.
  std::map<uint64_t, std::pair<uint64_t, TensorId>> live_fixed_;
  uint64_t in_use_bytes_ = 0, peak_in_use_bytes_ = 0;  // live slots after rounding
  uint64_t next_generation_ = 1;
  std::atomic<double> slowdown_{1.0};
  TierStats counters_;  // the transfer and failure counters
};

struct HostTierOptions {
  uint64_t capacity_bytes = 0;
  std::string name = "host";
  bool checksum = false;
  // How the region is obtained and pre-faulted (its name is set to the tier's name).
  HostRegionOptions region = {};
  // How copies are stored (codec/codec.h; Note [Coded host slots] in tiers.cc): kNone keeps the raw
  // bytes; a lossless codec codes every copy in chunks of chunk_bytes, each chunk's payload at the
  // chunk's raw place in the slot and its 16-byte chunk header in memory, so a slot takes exactly
  // its raw space. Lossy codecs are refused (the host tier has no lossy stashing).
  CodecId codec = CodecId::kNone;
  CodecOptions codec_options = {};
  uint32_t chunk_bytes = kDefaultChunkBytes;  // a multiple of 64 in [kMinChunkBytes, kMaxChunkBytes]
};

// Bytes the host tier's medium really holds and gives back, counted from completed transfers: the
// coded payloads with a codec, the tensors' bytes without one. A codec's gain on the host tier,
// measured.
struct HostIoStats {
  uint64_t medium_bytes_written = 0;
  uint64_t medium_bytes_read = 0;
  HostIoStats& operator+=(const HostIoStats& o) {
    medium_bytes_written += o.medium_bytes_written;
    medium_bytes_read += o.medium_bytes_read;
    return *this;
  }
};

// Host memory: one pre-faulted HostRegion of exactly capacity_bytes, carved by the tier's
// allocator. A raw copy to or from the device is one Backend copy straight into the region; a coded
// one goes chunk by chunk through a staging buffer that the codec reads or fills.
class HostTier final : public SwapTier {
 public:
  // Errors: kInvalidArgument for a zero capacity, a lossy codec or a bad chunk size; kOutOfMemory
  // when the host cannot provide the region (HostRegion::map's message).
  static Result<std::unique_ptr<HostTier>> create(const HostTierOptions& options);
  ~HostTier() override;

  // The bytes of a live slot as the medium holds them (coded with options.codec), for checks.
  // FERRY_CHECKs that the slot is live.
  std::span<std::byte> stored_bytes(const SwapSlot& slot);
  const HostTierOptions& options() const { return options_; }
  // Medium bytes moved so far (thread-safe).
  HostIoStats io_stats() const;

 protected:
  Status store(const SwapSlot& slot, const SwapEndpoint& src, Hash64* hash) override;
  Status load(const SwapSlot& slot, const SwapEndpoint& dst, Hash64* hash) override;

 private:
  struct Worker;  // one coding thread's context and staging buffers (tiers.cc)
  HostTier(const HostTierOptions& options, HostRegion region);
  Status store_coded(const SwapSlot& slot, const SwapEndpoint& src, Hash64* hash);
  Status load_coded(const SwapSlot& slot, const SwapEndpoint& dst, Hash64* hash);
  std::unique_ptr<Worker> acquire_worker();
  void release_worker(std::unique_ptr<Worker> worker);

  HostTierOptions options_;
  HostRegion region_;
  std::atomic<uint64_t> medium_bytes_[2] = {0, 0};  // written, read
  // Coded copies: per tensor, the generation of the slot it was written to and its chunk headers.
  struct CodedCopy {
    uint64_t generation = 0;
    std::vector<std::array<std::byte, kChunkHeaderBytes>> chunk_headers;
  };
  std::mutex coded_mu_;
  std::unordered_map<TensorId, CodedCopy> coded_;
  std::vector<std::unique_ptr<Worker>> idle_workers_;  // under coded_mu_
};

}  // namespace ferry
