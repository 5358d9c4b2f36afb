// Byte counts: overflow-checked arithmetic, parsing of user sizes ("6GiB", "512MiB", "1e9"),
// and human formatting.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace ferry {

// a*b, or nullopt when it overflows uint64.
std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b);
// a+b, or nullopt when it overflows uint64.
std::optional<uint64_t> checked_add(uint64_t a, uint64_t b);

// Parses a byte count: plain integer bytes, or a number with suffix B, K/KB/KiB, M/MB/MiB, G/GB/GiB,
// T/TB/TiB (K, M, G, T and the *iB forms are powers of 1024; KB, MB, GB, TB powers of 1000).
// Fractions are allowed with a suffix ("1.5GiB"). Errors name the text at fault.
Result<uint64_t> parse_bytes(std::string_view text);

// "1.50 GiB", "512.0 MiB", "12 B".
std::string format_bytes(uint64_t bytes);

// Rounds up to a multiple of `alignment` (a power of two).
constexpr uint64_t align_up(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) & ~(alignment - 1);
}

}  // namespace ferry
