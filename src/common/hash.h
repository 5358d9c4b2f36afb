// Hashing: splitmix64, the stateless 64-bit mixer behind Ferry's deterministic pseudo-random
// numbers (synthetic data, weight initialisation), and xxh64, a fast checksum of a byte span
// (the codec frames' integrity check, src/codec). Same input, same output, on every platform.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace ferry {

constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The XXH64 hash of `bytes` (the published algorithm, one call; runtime/checksum.h has the same
// hash fed in pieces). Not cryptographic: it detects accidents, not adversaries.
uint64_t xxh64(std::span<const std::byte> bytes, uint64_t seed = 0);

}  // namespace ferry
