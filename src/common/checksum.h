// Hash64: a streaming 64-bit checksum of bytes (swapped tensors, codec frames, memory checks) (the XXH64 algorithm, written from its
// published specification).
//
// Design
// - Used by the swap tiers' checksum mode (runtime/tiers.h): a swap-out hashes the bytes as the
//   tier stores them, a swap-in hashes them as they come back, and a mismatch is an error. It
//   sits on the transfer path, so it must run near memcpy speed: four independent 64-bit lanes
//   of multiply-rotate over 32-byte stripes keep the multiplier busy (about 4 bytes per cycle),
//   where a table-driven CRC manages about 1, and 64 bits make an undetected corruption of a
//   training run's swaps a non-event (2^-64 per swap).
// - Streaming: the SSD tier sees a tensor as a sequence of staging chunks, so update() accepts
//   any split of the input and buffers a partial stripe; the result does not depend on the split.
//   hash64(all bytes) == Hash64 fed the same bytes in any pieces.
// - Not cryptographic: it detects accidents (a bad disk, a wrong offset), not adversaries.
//
// Usage:
//   Hash64 h;                      // seed 0
//   h.update(chunk0); h.update(chunk1);
//   uint64_t digest = h.digest();  // == hash64(chunk0 ++ chunk1)
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace ferry {

class Hash64 {
 public:
  explicit Hash64(uint64_t seed = 0);

  // Appends `bytes` to the hashed input.
  void update(std::span<const std::byte> bytes);
  // The hash of everything appended so far. Does not change the state: more updates may follow.
  uint64_t digest() const;
  // Bytes appended so far.
  uint64_t length() const { return length_; }

 private:
  static constexpr size_t kStripe = 32;
  void consume_stripes(const std::byte* data, size_t stripes);

  uint64_t seed_ = 0;
  uint64_t lanes_[4] = {};
  uint64_t length_ = 0;
  std::byte pending_[kStripe] = {};  // a partial stripe awaiting more input
  size_t pending_bytes_ = 0;
};

// The hash of `bytes` in one call.
uint64_t hash64(std::span<const std::byte> bytes, uint64_t seed = 0);

}  // namespace ferry
