// XXH64, from the specification (github.com/Cyan4973/xxHash, doc/xxhash_spec.md): four lanes
// accumulate 32-byte stripes; the tail is folded in 8, 4 and 1 bytes at a time; an avalanche
// step mixes the result. Little-endian reads, as the specification defines the hash on them.
#include "common/checksum.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace ferry {

namespace {

constexpr uint64_t kPrime1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kPrime2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kPrime3 = 0x165667B19E3779F9ull;
constexpr uint64_t kPrime4 = 0x85EBCA77C2B2AE63ull;
constexpr uint64_t kPrime5 = 0x27D4EB2F165667C5ull;

static_assert(std::endian::native == std::endian::little, "Hash64 reads words in little-endian order");

uint64_t read64(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

uint32_t read32(const std::byte* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

uint64_t round(uint64_t acc, uint64_t input) {
  acc += input * kPrime2;
  acc = std::rotl(acc, 31);
  return acc * kPrime1;
}

uint64_t merge_round(uint64_t acc, uint64_t lane) {
  acc ^= round(0, lane);
  return acc * kPrime1 + kPrime4;
}

}  // namespace

Hash64::Hash64(uint64_t seed) : seed_(seed) {
  lanes_[0] = seed + kPrime1 + kPrime2;
  lanes_[1] = seed + kPrime2;
  lanes_[2] = seed;
  lanes_[3] = seed - kPrime1;
}

void Hash64::consume_stripes(const std::byte* data, size_t stripes) {
  // Local copies let the compiler keep the four lanes in registers across the loop.
  uint64_t v0 = lanes_[0], v1 = lanes_[1], v2 = lanes_[2], v3 = lanes_[3];
  for (size_t s = 0; s < stripes; ++s, data += kStripe) {
    v0 = round(v0, read64(data));
    v1 = round(v1, read64(data + 8));
    v2 = round(v2, read64(data + 16));
    v3 = round(v3, read64(data + 24));
  }
  lanes_[0] = v0, lanes_[1] = v1, lanes_[2] = v2, lanes_[3] = v3;
}

void Hash64::update(std::span<const std::byte> bytes) {
  const std::byte* data = bytes.data();
  size_t size = bytes.size();
  length_ += size;
  if (pending_bytes_ > 0) {
    size_t take = std::min(size, kStripe - pending_bytes_);
    std::memcpy(pending_ + pending_bytes_, data, take);
    pending_bytes_ += take;
    data += take;
    size -= take;
    if (pending_bytes_ < kStripe) return;
    consume_stripes(pending_, 1);
    pending_bytes_ = 0;
  }
  size_t stripes = size / kStripe;
  consume_stripes(data, stripes);
  data += stripes * kStripe;
  size -= stripes * kStripe;
  if (size > 0) std::memcpy(pending_, data, size);
  pending_bytes_ = size;
}

uint64_t Hash64::digest() const {
  uint64_t h;
  if (length_ >= kStripe) {
    h = std::rotl(lanes_[0], 1) + std::rotl(lanes_[1], 7) + std::rotl(lanes_[2], 12) + std::rotl(lanes_[3], 18);
    for (uint64_t lane : lanes_) h = merge_round(h, lane);
  } else {
    h = seed_ + kPrime5;
  }
  h += length_;
  const std::byte* p = pending_;
  size_t left = pending_bytes_;
  for (; left >= 8; left -= 8, p += 8) {
    h ^= round(0, read64(p));
    h = std::rotl(h, 27) * kPrime1 + kPrime4;
  }
  if (left >= 4) {
    h ^= static_cast<uint64_t>(read32(p)) * kPrime1;
    h = std::rotl(h, 23) * kPrime2 + kPrime3;
    left -= 4;
    p += 4;
  }
  for (; left > 0; --left, ++p) {
    h ^= static_cast<uint64_t>(std::to_integer<uint8_t>(*p)) * kPrime5;
    h = std::rotl(h, 11) * kPrime1;
  }
  h ^= h >> 33;
  h *= kPrime2;
  h ^= h >> 29;
  h *= kPrime3;
  h ^= h >> 32;
  return h;
}

uint64_t hash64(std::span<const std::byte> bytes, uint64_t seed) {
  Hash64 h(seed);
  h.update(bytes);
  return h.digest();
}

}  // namespace ferry
