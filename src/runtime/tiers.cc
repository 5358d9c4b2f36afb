// SwapTier's shared accounting and the host tier. See tiers.h for the design.
#include "runtime/tiers.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>
#include <cstring>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "common/units.h"

namespace ferry {

namespace {

std::string bytes_text(uint64_t bytes) { return fmt::format("{} ({} bytes)", format_bytes(bytes), bytes); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// SwapEndpoint

Status SwapEndpoint::copy_out(uint64_t offset, std::span<std::byte> dst) const {
  FERRY_CHECK(offset <= bytes_ && dst.size() <= bytes_ - offset, "copy_out of [{}, +{}) from an endpoint of {} bytes",
              offset, dst.size(), bytes_);
  if (dst.empty()) return Status::Ok();
  if (backend_ != nullptr) return backend_->copy_to_host(dst, device_ + offset);
  std::memcpy(dst.data(), host_ + offset, dst.size());
  return Status::Ok();
}

const std::byte* SwapEndpoint::direct_io_source() const {
  return backend_ != nullptr ? backend_->direct_io_address(device_) : host_;
}

std::byte* SwapEndpoint::direct_io_destination() const {
  return backend_ != nullptr ? backend_->direct_io_address(device_) : host_mutable_;
}

Status SwapEndpoint::copy_in(uint64_t offset, std::span<const std::byte> src) const {
  FERRY_CHECK(offset <= bytes_ && src.size() <= bytes_ - offset, "copy_in of [{}, +{}) into an endpoint of {} bytes",
              offset, src.size(), bytes_);
  if (src.empty()) return Status::Ok();
  if (backend_ != nullptr) return backend_->copy_to_device(device_ + offset, src);
  FERRY_CHECK(host_mutable_ != nullptr, "copy_in into a read-only host endpoint");
  std::memcpy(host_mutable_ + offset, src.data(), src.size());
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// SwapTier

SwapTier::SwapTier(std::string name, Tier kind, uint64_t capacity_bytes, uint64_t alignment, bool checksum)
    : name_(std::move(name)), kind_(kind), checksum_(checksum), allocator_(capacity_bytes, alignment, name_ + " tier") {}

uint64_t SwapTier::capacity_bytes() const {
  std::lock_guard lock(mu_);
  return allocator_.capacity();
}

Result<SwapSlot> SwapTier::reserve(TensorId tensor, uint64_t bytes) {
  std::lock_guard lock(mu_);
  if (auto it = slots_.find(tensor); it != slots_.end()) {
    ++counters_.num_failed_reservations;
    return Status::InvalidArgument(fmt::format(
        "{} tier: tensor {} already has a slot ({} at offset {}); a tensor has at most one copy per tier",
        name_, tensor, bytes_text(it->second.slot.bytes), it->second.slot.offset));
  }
  uint64_t at = 0, rounded = 0;
  if (auto f = fixed_.find(tensor); f != fixed_.end() && bytes <= f->second.second) {
    std::tie(at, rounded) = f->second;
    // Fixed slots may share bytes only when their copies never coexist.
    auto next = live_fixed_.lower_bound(at);
    std::optional<std::pair<uint64_t, std::pair<uint64_t, TensorId>>> clash;
    if (next != live_fixed_.end() && next->first < at + rounded) clash = *next;
    if (next != live_fixed_.begin() && std::prev(next)->second.first > at) clash = *std::prev(next);
    if (clash) {
      ++counters_.num_failed_reservations;
      return Status::Internal(fmt::format(
          "{} tier: the fixed slot of tensor {} [{}, {}) overlaps the live copy of tensor {} [{}, {}): the tier "
          "placement is corrupt",
          name_, tensor, at, at + rounded, clash->second.second, clash->first, clash->second.first));
    }
    live_fixed_.emplace(at, std::make_pair(at + rounded, tensor));
  } else {
    AllocResult<uint64_t> offset = allocator_.allocate(bytes);
    if (!offset.ok()) {
      ++counters_.num_failed_reservations;
      return offset.status().with_context(fmt::format("{} tier: no room for tensor {}", name_, tensor));
    }
    at = *offset;
    rounded = allocator_.rounded_size(bytes);
  }
  in_use_bytes_ += rounded;
  peak_in_use_bytes_ = std::max(peak_in_use_bytes_, in_use_bytes_);
  SwapSlot slot{.tensor = tensor, .bytes = bytes, .offset = at, .generation = next_generation_++};
  slots_.emplace(tensor, SlotState{.slot = slot});
  return slot;
}

Status SwapTier::fix_slots(const std::vector<FixedSlot>& slots) {
  std::lock_guard lock(mu_);
  FERRY_CHECK(slots_.empty() && fixed_.empty(), "{} tier: fix_slots after reservations", name_);
  uint64_t extent = 0;
  std::unordered_map<TensorId, std::pair<uint64_t, uint64_t>> fixed;
  for (const FixedSlot& f : slots) {
    if (f.bytes == 0) continue;
    if (f.offset % allocator_.alignment() != 0)
      return Status::InvalidArgument(fmt::format("{} tier: fixed slot of tensor {} at offset {}, not a multiple of {}",
                                                 name_, f.tensor, f.offset, allocator_.alignment()));
    const uint64_t rounded = allocator_.rounded_size(f.bytes);
    if (!fixed.emplace(f.tensor, std::make_pair(f.offset, rounded)).second)
      return Status::InvalidArgument(fmt::format("{} tier: tensor {} has two fixed slots", name_, f.tensor));
    extent = std::max(extent, f.offset + rounded);
  }
  if (extent == 0) return Status::Ok();
  if (extent > allocator_.capacity())
    return Status::OutOfMemory(fmt::format("{} tier: the fixed slots of {} tensors need {}, above its capacity of {}",
                                           name_, fixed.size(), bytes_text(extent),
                                           bytes_text(allocator_.capacity())));
  AllocResult<uint64_t> region = allocator_.allocate(extent);
  if (!region.ok())
    return region.status().with_context(fmt::format("{} tier: no room for the fixed slots of {} tensors", name_,
                                                    fixed.size()));
  FERRY_CHECK(*region == 0, "{} tier: fixed slots must start at offset 0", name_);
  fixed_ = std::move(fixed);
  return Status::Ok();
}

std::optional<SwapSlot> SwapTier::find(TensorId tensor) const {
  std::lock_guard lock(mu_);
  auto it = slots_.find(tensor);
  if (it == slots_.end()) return std::nullopt;
  return it->second.slot;
}

const SwapTier::SlotState* SwapTier::lookup(const SwapSlot& slot) const {
  auto it = slots_.find(slot.tensor);
  if (it == slots_.end() || it->second.slot != slot) return nullptr;
  return &it->second;
}

SwapTier::SlotState* SwapTier::lookup(const SwapSlot& slot) {
  return const_cast<SlotState*>(std::as_const(*this).lookup(slot));
}

void SwapTier::release(const SwapSlot& slot) {
  std::lock_guard lock(mu_);
  SlotState* state = lookup(slot);
  FERRY_CHECK(state != nullptr, "{} tier: release of a stale slot of tensor {} (generation {})", name_, slot.tensor,
              slot.generation);
  FERRY_CHECK(state->active == 0, "{} tier: release of tensor {}'s slot while {} transfer(s) of it run", name_,
              slot.tensor, state->active);
  if (auto f = fixed_.find(slot.tensor); f != fixed_.end() && f->second.first == slot.offset) {
    in_use_bytes_ -= f->second.second;
    live_fixed_.erase(slot.offset);
  } else {
    in_use_bytes_ -= allocator_.rounded_size(slot.bytes);
    allocator_.free(slot.offset);
  }
  slots_.erase(slot.tensor);
}

bool SwapTier::holds_copy(const SwapSlot& slot) const {
  std::lock_guard lock(mu_);
  const SlotState* state = lookup(slot);
  return state != nullptr && state->valid;
}

Status SwapTier::begin_transfer(const SwapSlot& slot, bool is_write, uint64_t endpoint_bytes, uint64_t* checksum) {
  std::lock_guard lock(mu_);
  const char* verb = is_write ? "write" : "read";
  SlotState* state = lookup(slot);
  if (state == nullptr)
    return Status::InvalidArgument(
        fmt::format("{} tier: {} of tensor {} through a stale slot (generation {})", name_, verb, slot.tensor,
                    slot.generation));
  if (endpoint_bytes != slot.bytes)
    return Status::InvalidArgument(fmt::format("{} tier: {} of tensor {}: its slot holds {}, the other side has {}",
                                               name_, verb, slot.tensor, bytes_text(slot.bytes),
                                               bytes_text(endpoint_bytes)));
  if (is_write && state->active > 0)
    return Status::Internal(fmt::format("{} tier: write of tensor {} while another transfer of its slot runs", name_,
                                        slot.tensor));
  if (!is_write && !state->valid)
    return Status::Internal(fmt::format(
        "{} tier: read of tensor {} whose slot holds no complete copy (never written, or its write failed)", name_,
        slot.tensor));
  if (is_write) state->valid = false;  // the old copy, if any, is being overwritten
  *checksum = state->checksum;
  ++state->active;
  return Status::Ok();
}

void SwapTier::end_transfer(const SwapSlot& slot, bool is_write, bool ok, uint64_t checksum) {
  std::lock_guard lock(mu_);
  SlotState* state = lookup(slot);
  FERRY_CHECK(state != nullptr && state->active > 0, "{} tier: tensor {}'s slot vanished during a transfer", name_,
              slot.tensor);
  --state->active;
  if (!ok) {
    ++counters_.num_failed_transfers;
    return;
  }
  if (is_write) {
    state->valid = true;
    state->checksum = checksum;
    counters_.bytes_written += slot.bytes;
    ++counters_.num_writes;
  } else {
    counters_.bytes_read += slot.bytes;
    ++counters_.num_reads;
  }
}

Status SwapTier::write(const SwapSlot& slot, const SwapEndpoint& src) {
  uint64_t unused = 0;
  FERRY_RETURN_IF_ERROR(begin_transfer(slot, /*is_write=*/true, src.bytes(), &unused));
  std::optional<Hash64> hash;
  if (checksum_) hash.emplace();
  const auto start = std::chrono::steady_clock::now();
  Status st = store(slot, src, hash ? &*hash : nullptr);
  slow_down(start);
  end_transfer(slot, /*is_write=*/true, st.ok(), hash ? hash->digest() : 0);
  return st;
}

Status SwapTier::read(const SwapSlot& slot, const SwapEndpoint& dst) {
  uint64_t expected = 0;
  FERRY_RETURN_IF_ERROR(begin_transfer(slot, /*is_write=*/false, dst.bytes(), &expected));
  std::optional<Hash64> hash;
  if (checksum_) hash.emplace();
  const auto start = std::chrono::steady_clock::now();
  Status st = load(slot, dst, hash ? &*hash : nullptr);
  slow_down(start);
  if (st.ok() && hash && hash->digest() != expected)
    st = Status::Internal(fmt::format(
        "{} tier: checksum mismatch for tensor {}: stored 0x{:016x}, read back 0x{:016x} ({} at offset {}); the "
        "copy was corrupted",
        name_, slot.tensor, expected, hash->digest(), bytes_text(slot.bytes), slot.offset));
  end_transfer(slot, /*is_write=*/false, st.ok(), 0);
  return st;
}

Status SwapTier::write(const SwapSlot& slot, Backend& backend, DevicePtr src) {
  return write(slot, SwapEndpoint::device(backend, src, slot.bytes));
}

Status SwapTier::read(const SwapSlot& slot, Backend& backend, DevicePtr dst) {
  return read(slot, SwapEndpoint::device(backend, dst, slot.bytes));
}

Status SwapTier::write(const SwapSlot& slot, std::span<const std::byte> src) {
  return write(slot, SwapEndpoint::host_source(src));
}

Status SwapTier::read(const SwapSlot& slot, std::span<std::byte> dst) {
  return read(slot, SwapEndpoint::host_destination(dst));
}

TierStats SwapTier::stats() const {
  std::lock_guard lock(mu_);
  TierStats s = counters_;
  AllocatorStats a = allocator_.stats();
  s.capacity_bytes = a.capacity_bytes;
  s.in_use_bytes = in_use_bytes_;
  s.peak_in_use_bytes = peak_in_use_bytes_;
  s.live_slots = slots_.size();
  return s;
}

void SwapTier::set_slowdown(double factor) {
  FERRY_CHECK(factor >= 1.0 && std::isfinite(factor), "{} tier: slowdown {} must be >= 1", name_, factor);
  slowdown_.store(factor);
}

void SwapTier::slow_down(std::chrono::steady_clock::time_point start) const {
  const double factor = slowdown_.load();
  if (factor <= 1.0) return;
  std::this_thread::sleep_for((std::chrono::steady_clock::now() - start) * (factor - 1.0));
}

void SwapTier::reset_peaks() {
  std::lock_guard lock(mu_);
  allocator_.reset_peaks();
  peak_in_use_bytes_ = in_use_bytes_;
}

// ---------------------------------------------------------------------------------------------
// HostTier

// Note [Coded host slots]
// With a codec, chunk k of a slot (input bytes [k * chunk_bytes, ...)) is copied from the source
// into a worker's plain buffer and encoded as chunk k of a frame (FrameEncoder over the tensor's
// bytes) into the worker's record buffer; its payload goes to slot.offset + k * chunk_bytes and its
// 16-byte header to memory (CodedCopy). A payload never exceeds its chunk's input (a chunk the
// codec does not shrink is stored raw), so the slot keeps its raw size and place: space
// accounting, fix_slots and the plan's tier placement are unchanged. Reading decodes chunk k from
// its header and its payload in place (decode_chunk's split form) into the plain buffer and copies
// that to the destination. The frame's identity (codec, size, chunk size) is rebuilt from the
// tier's options and the slot, so nothing else is kept. A flipped bit at rest fails the chunk's
// payload checksum: kIoError naming the tensor and the chunk. Workers (a CodecContext and two
// chunk buffers each) are pooled: the transfer engine's out- and in-threads code at once.

struct HostTier::Worker {
  explicit Worker(const HostTierOptions& o)
      : ctx(o.codec_options), plain(o.chunk_bytes), record(max_chunk_encoded_bytes(o.chunk_bytes)) {}
  CodecContext ctx;
  std::vector<std::byte> plain, record;
};

Result<std::unique_ptr<HostTier>> HostTier::create(const HostTierOptions& options) {
  if (options.capacity_bytes == 0)
    return Status::InvalidArgument(fmt::format("{} tier: capacity must be positive", options.name));
  if (is_lossy(options.codec))
    return Status::InvalidArgument(fmt::format("{} tier: codec '{}' is lossy; the host tier stores copies losslessly",
                                               options.name, to_string(options.codec)));
  if (options.codec != CodecId::kNone) {
    if (Result<FrameEncoder> e = FrameEncoder::create(options.codec, 1, options.chunk_bytes); !e.ok())
      return e.status().with_context(fmt::format("{} tier", options.name));
  }
  HostRegionOptions region_options = options.region;
  region_options.name = options.name + " tier";
  FERRY_ASSIGN_OR_RETURN(HostRegion region, HostRegion::map(options.capacity_bytes, region_options));
  return std::unique_ptr<HostTier>(new HostTier(options, std::move(region)));
}

HostTier::HostTier(const HostTierOptions& options, HostRegion region)
    : SwapTier(options.name, Tier::kHost, options.capacity_bytes, OffsetAllocator::kDefaultAlignment,
               options.checksum),
      options_(options),
      region_(std::move(region)) {}

HostTier::~HostTier() = default;

std::span<std::byte> HostTier::stored_bytes(const SwapSlot& slot) {
  FERRY_CHECK(find(slot.tensor) == slot, "{} tier: stored_bytes of a stale slot of tensor {}", name(), slot.tensor);
  return {region_.data() + slot.offset, slot.bytes};
}

HostIoStats HostTier::io_stats() const { return {medium_bytes_[0].load(), medium_bytes_[1].load()}; }

Status HostTier::store(const SwapSlot& slot, const SwapEndpoint& src, Hash64* hash) {
  if (options_.codec != CodecId::kNone) return store_coded(slot, src, hash);
  std::span<std::byte> block(region_.data() + slot.offset, slot.bytes);
  FERRY_RETURN_IF_ERROR(
      src.copy_out(0, block).with_context(fmt::format("{} tier: write of tensor {}", name(), slot.tensor)));
  if (hash) hash->update(block);
  medium_bytes_[0] += slot.bytes;
  return Status::Ok();
}

Status HostTier::load(const SwapSlot& slot, const SwapEndpoint& dst, Hash64* hash) {
  if (options_.codec != CodecId::kNone) return load_coded(slot, dst, hash);
  std::span<const std::byte> block(region_.data() + slot.offset, slot.bytes);
  if (hash) hash->update(block);
  FERRY_RETURN_IF_ERROR(
      dst.copy_in(0, block).with_context(fmt::format("{} tier: read of tensor {}", name(), slot.tensor)));
  medium_bytes_[1] += slot.bytes;
  return Status::Ok();
}

std::unique_ptr<HostTier::Worker> HostTier::acquire_worker() {
  {
    std::lock_guard lock(coded_mu_);
    if (!idle_workers_.empty()) {
      std::unique_ptr<Worker> w = std::move(idle_workers_.back());
      idle_workers_.pop_back();
      return w;
    }
  }
  return std::make_unique<Worker>(options_);
}

void HostTier::release_worker(std::unique_ptr<Worker> worker) {
  std::lock_guard lock(coded_mu_);
  idle_workers_.push_back(std::move(worker));
}

Status HostTier::store_coded(const SwapSlot& slot, const SwapEndpoint& src, Hash64* hash) {
  auto what = [&] { return fmt::format("{} tier: write of tensor {}", name(), slot.tensor); };  // errors only
  Result<FrameEncoder> enc = FrameEncoder::create(options_.codec, slot.bytes, options_.chunk_bytes);
  if (!enc.ok()) return enc.status().with_context(what());
  const FrameInfo& info = enc->info();
  CodedCopy copy{slot.generation, std::vector<std::array<std::byte, kChunkHeaderBytes>>(info.chunk_count)};
  {  // a failed write leaves no headers behind (the base class then refuses reads of the slot)
    std::lock_guard lock(coded_mu_);
    coded_.erase(slot.tensor);
  }
  std::unique_ptr<Worker> w = acquire_worker();
  uint64_t stored = 0;
  Status error;
  for (uint32_t k = 0; k < info.chunk_count; ++k) {
    std::span<std::byte> plain = std::span(w->plain).first(info.chunk_input_bytes(k));
    if (Status st = src.copy_out(info.chunk_offset(k), plain); !st.ok()) {
      error = st.with_context(what());
      break;
    }
    if (hash) hash->update(plain);
    Result<uint64_t> n = enc->encode_chunk(w->ctx, k, plain, w->record);
    if (!n.ok()) {
      error = n.status().with_context(fmt::format("{}: encoding chunk {} of {}", what(), k, info.chunk_count));
      break;
    }
    const uint64_t payload = *n - kChunkHeaderBytes;
    std::memcpy(copy.chunk_headers[k].data(), w->record.data(), kChunkHeaderBytes);
    std::memcpy(region_.data() + slot.offset + info.chunk_offset(k), w->record.data() + kChunkHeaderBytes, payload);
    stored += payload;
  }
  release_worker(std::move(w));
  if (!error.ok()) return error;
  medium_bytes_[0] += stored;
  std::lock_guard lock(coded_mu_);
  coded_[slot.tensor] = std::move(copy);
  return Status::Ok();
}

Status HostTier::load_coded(const SwapSlot& slot, const SwapEndpoint& dst, Hash64* hash) {
  auto what = [&] { return fmt::format("{} tier: read of tensor {}", name(), slot.tensor); };  // errors only
  Result<FrameEncoder> enc = FrameEncoder::create(options_.codec, slot.bytes, options_.chunk_bytes);
  if (!enc.ok()) return enc.status().with_context(what());
  const FrameInfo& info = enc->info();
  std::vector<std::array<std::byte, kChunkHeaderBytes>> headers;
  {
    std::lock_guard lock(coded_mu_);
    auto it = coded_.find(slot.tensor);
    FERRY_CHECK(it != coded_.end() && it->second.generation == slot.generation &&
                    it->second.chunk_headers.size() == info.chunk_count,
                "{} tier: tensor {} holds a copy but no chunk headers of it", name(), slot.tensor);
    headers = it->second.chunk_headers;
  }
  std::unique_ptr<Worker> w = acquire_worker();
  uint64_t loaded = 0;
  Status error;
  for (uint32_t k = 0; k < info.chunk_count; ++k) {
    uint32_t payload_bytes = 0;
    std::memcpy(&payload_bytes, headers[k].data(), sizeof payload_bytes);
    const uint64_t input = info.chunk_input_bytes(k);
    // decode_chunk checks the header against the chunk; clamp so that a bad header never reads
    // past the chunk's place in the slot.
    std::span<const std::byte> payload(region_.data() + slot.offset + info.chunk_offset(k),
                                       std::min<uint64_t>(payload_bytes, input));
    std::span<std::byte> plain = std::span(w->plain).first(input);
    if (Status st = decode_chunk(w->ctx, info, k, headers[k], payload, plain); !st.ok()) {
      error = st.with_context(fmt::format("{}, chunk {} of {} (region offset {})", what(), k, info.chunk_count,
                                          slot.offset + info.chunk_offset(k)));
      break;
    }
    if (hash) hash->update(plain);
    if (Status st = dst.copy_in(info.chunk_offset(k), plain); !st.ok()) {
      error = st.with_context(what());
      break;
    }
    loaded += payload.size();
  }
  release_worker(std::move(w));
  if (error.ok()) medium_bytes_[1] += loaded;
  return error;
}

}  // namespace ferry
