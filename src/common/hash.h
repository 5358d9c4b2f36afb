// splitmix64: the stateless 64-bit mixer behind Ferry's deterministic pseudo-random numbers
// (synthetic data, weight initialisation). Same input, same output, on every platform. The
// checksum of byte spans (XXH64) is common/checksum.h.
#pragma once

#include <cstdint>

namespace ferry {

constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace ferry
