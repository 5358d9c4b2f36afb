#include "runtime/memory_verifier.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/units.h"
#include "common/checksum.h"

namespace ferry {

namespace {
constexpr uint64_t kChunkBytes = 1ull << 20;
}

MemoryVerifier::MemoryVerifier(Backend& backend, DevicePtr arena, uint64_t arena_bytes, size_t num_tensors)
    : backend_(backend), arena_(arena), arena_bytes_(arena_bytes), content_(num_tensors) {
  if (arena_bytes_ > 0) free_[0] = Range{arena_bytes_, kUntouchedByte};
}

Result<std::optional<uint64_t>> MemoryVerifier::find_mismatch(uint64_t offset, uint64_t bytes, uint8_t value) {
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min(kChunkBytes, bytes - done);
    host_.resize(n);
    FERRY_RETURN_IF_ERROR(backend_.copy_to_host(std::span<std::byte>(host_.data(), n), arena_ + (offset + done)));
    for (uint64_t i = 0; i < n; ++i)
      if (host_[i] != std::byte{value}) return std::optional<uint64_t>(offset + done + i);
    done += n;
  }
  return std::optional<uint64_t>();
}

void MemoryVerifier::carve(uint64_t begin, uint64_t end) {
  auto it = free_.upper_bound(begin);
  if (it != free_.begin()) --it;
  while (it != free_.end() && it->first < end) {
    const uint64_t r_begin = it->first;
    const Range r = it->second;
    if (r.end <= begin) {
      ++it;
      continue;
    }
    it = free_.erase(it);
    if (r_begin < begin) free_[r_begin] = Range{begin, r.pattern};
    if (r.end > end) it = free_.emplace(end, Range{r.end, r.pattern}).first;
  }
}

Status MemoryVerifier::on_acquire(uint64_t offset, uint64_t block_bytes, uint64_t payload_bytes, std::string name) {
  FERRY_CHECK(payload_bytes + 2 * kGuardBytes <= block_bytes, "block of '{}' too small for its guards", name);
  carve(offset, offset + block_bytes);
  FERRY_RETURN_IF_ERROR(backend_.fill(arena_ + offset, kGuardBytes, kGuardByte));
  const uint64_t tail = offset + kGuardBytes + payload_bytes;
  FERRY_RETURN_IF_ERROR(backend_.fill(arena_ + tail, offset + block_bytes - tail, kGuardByte));
  live_[offset] = Block{block_bytes, payload_bytes, std::move(name)};
  return Status::Ok();
}

Status MemoryVerifier::check_guards(uint64_t offset, const Block& b, std::string_view activity) {
  FERRY_ASSIGN_OR_RETURN(std::optional<uint64_t> before, find_mismatch(offset, kGuardBytes, kGuardByte));
  if (before)
    return Status::Internal(fmt::format(
        "memory check: {} wrote {} bytes before the start of {} (guard byte at arena offset {} changed)", activity,
        offset + kGuardBytes - *before, b.name, *before));
  const uint64_t tail = offset + kGuardBytes + b.payload_bytes;
  FERRY_ASSIGN_OR_RETURN(std::optional<uint64_t> after, find_mismatch(tail, offset + b.block_bytes - tail, kGuardByte));
  if (after)
    return Status::Internal(fmt::format(
        "memory check: {} wrote past the end of {} ({} bytes long; guard byte {} bytes past its end changed)",
        activity, b.name, b.payload_bytes, *after - tail));
  return Status::Ok();
}

Status MemoryVerifier::on_release(uint64_t offset, std::string_view activity) {
  auto it = live_.find(offset);
  FERRY_CHECK(it != live_.end(), "memory check: release of a block the verifier does not hold (offset {})", offset);
  FERRY_RETURN_IF_ERROR(check_guards(offset, it->second, activity));
  const uint64_t end = offset + it->second.block_bytes;
  FERRY_RETURN_IF_ERROR(backend_.fill(arena_ + offset, it->second.block_bytes, kFreedByte));
  live_.erase(it);
  // Merge with free neighbours of the same pattern.
  uint64_t begin = offset, stop = end;
  auto next = free_.find(end);
  if (next != free_.end() && next->second.pattern == kFreedByte) {
    stop = next->second.end;
    free_.erase(next);
  }
  auto prev = free_.lower_bound(offset);
  if (prev != free_.begin()) {
    --prev;
    if (prev->second.end == offset && prev->second.pattern == kFreedByte) {
      begin = prev->first;
      free_.erase(prev);
    }
  }
  free_[begin] = Range{stop, kFreedByte};
  return Status::Ok();
}

Status MemoryVerifier::check(std::string_view activity) {
  for (const auto& [offset, b] : live_) FERRY_RETURN_IF_ERROR(check_guards(offset, b, activity));
  for (const auto& [begin, r] : free_) {
    FERRY_ASSIGN_OR_RETURN(std::optional<uint64_t> bad, find_mismatch(begin, r.end - begin, r.pattern));
    if (!bad) continue;
    // Name the nearest live block below the write: the likeliest culprit is a neighbour overrun.
    std::string near = "no live block below it";
    auto below = live_.upper_bound(*bad);
    if (below != live_.begin()) near = fmt::format("nearest live block below: {}", std::prev(below)->second.name);
    return Status::Internal(fmt::format(
        "memory check: {} wrote into {} memory at arena offset {} (free range [{}, {}); {})", activity,
        r.pattern == kFreedByte ? "freed" : "never allocated", *bad, begin, r.end, near));
  }
  return Status::Ok();
}

Result<uint64_t> MemoryVerifier::hash_of(DevicePtr ptr, uint64_t bytes) {
  Hash64 h;
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min(kChunkBytes, bytes - done);
    host_.resize(n);
    FERRY_RETURN_IF_ERROR(backend_.copy_to_host(std::span<std::byte>(host_.data(), n), ptr + done));
    h.update(std::span<const std::byte>(host_.data(), n));
    done += n;
  }
  return h.digest();
}

Status MemoryVerifier::record(TensorId t, DevicePtr ptr, uint64_t bytes) {
  FERRY_ASSIGN_OR_RETURN(uint64_t h, hash_of(ptr, bytes));
  content_[static_cast<size_t>(t)] = h;
  return Status::Ok();
}

Status MemoryVerifier::verify(TensorId t, std::string_view tensor_name, DevicePtr ptr, uint64_t bytes,
                              std::string_view reader) {
  const std::optional<uint64_t>& want = content_[static_cast<size_t>(t)];
  if (!want) return Status::Ok();  // written outside the verifier's view (nothing to compare)
  FERRY_ASSIGN_OR_RETURN(uint64_t h, hash_of(ptr, bytes));
  if (h != *want)
    return Status::Internal(fmt::format(
        "memory check: {} read tensor '{}' ({}), whose bytes differ from what was written for it: its memory was "
        "overwritten, never filled, or rematerialised to other values",
        reader, tensor_name, format_bytes(bytes)));
  return Status::Ok();
}

}  // namespace ferry
