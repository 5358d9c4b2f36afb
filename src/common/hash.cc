// XXH64 in one call, from its specification (xxHash's doc/xxhash_spec.md): inputs of 32 bytes
// or more go through four accumulator lanes a 32-byte stripe at a time; the lanes are merged,
// the length added, the tail folded in 8, 4 and 1 bytes at a time, and an avalanche mixes the
// result. Words are read little-endian, as the specification defines them.
#include "common/hash.h"

#include <bit>
#include <cstring>

namespace ferry {

namespace {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kP3 = 0x165667B19E3779F9ull;
constexpr uint64_t kP4 = 0x85EBCA77C2B2AE63ull;
constexpr uint64_t kP5 = 0x27D4EB2F165667C5ull;

static_assert(std::endian::native == std::endian::little, "xxh64 reads words in little-endian order");

inline uint64_t load64(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

inline uint32_t load32(const std::byte* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline uint64_t lane_round(uint64_t acc, uint64_t word) { return std::rotl(acc + word * kP2, 31) * kP1; }

inline uint64_t merge_lane(uint64_t h, uint64_t lane) { return (h ^ lane_round(0, lane)) * kP1 + kP4; }

}  // namespace

uint64_t xxh64(std::span<const std::byte> bytes, uint64_t seed) {
  const std::byte* p = bytes.data();
  const size_t n = bytes.size();
  const std::byte* const end = p + n;
  uint64_t h;
  if (n >= 32) {
    uint64_t v1 = seed + kP1 + kP2, v2 = seed + kP2, v3 = seed, v4 = seed - kP1;
    for (const std::byte* last = end - 32; p <= last; p += 32) {
      v1 = lane_round(v1, load64(p));
      v2 = lane_round(v2, load64(p + 8));
      v3 = lane_round(v3, load64(p + 16));
      v4 = lane_round(v4, load64(p + 24));
    }
    h = std::rotl(v1, 1) + std::rotl(v2, 7) + std::rotl(v3, 12) + std::rotl(v4, 18);
    h = merge_lane(merge_lane(merge_lane(merge_lane(h, v1), v2), v3), v4);
  } else {
    h = seed + kP5;
  }
  h += n;
  for (; end - p >= 8; p += 8) h = std::rotl(h ^ lane_round(0, load64(p)), 27) * kP1 + kP4;
  if (end - p >= 4) {
    h = std::rotl(h ^ (load32(p) * kP1), 23) * kP2 + kP3;
    p += 4;
  }
  for (; p < end; ++p) h = std::rotl(h ^ (std::to_integer<uint64_t>(*p) * kP5), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  return h ^ (h >> 32);
}

}  // namespace ferry
