// Byte counts: overflow-checked arithmetic, parsing of user sizes ("6GiB", "512MiB", "1e9") and
// budgets ("6GiB", "33%"), and human formatting. The one parser of sizes and budgets.
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

// A memory budget as a user writes it: a byte count (parse_bytes) or a percentage of a
// reference the caller knows ("33%": of the no-swap peak of the model and shape at hand).
struct BudgetSpec {
  std::string text;               // as given, for reports ("33%", "6GiB")
  uint64_t bytes = 0;             // the byte count, when not a percentage
  std::optional<double> percent;  // "33%" -> 33

  // The budget in bytes: `bytes`, or floor(percent / 100 * reference_bytes), at least 1 and
  // saturating at 2^64 - 1.
  uint64_t resolve(uint64_t reference_bytes) const;
  // "1.48 MiB (33% of 4.48 MiB)", or "6.00 GiB".
  std::string describe(uint64_t reference_bytes) const;
};
inline constexpr double kMaxBudgetPercent = 1000;
// Parses a budget: parse_bytes() text, or a number followed by '%' in (0, kMaxBudgetPercent].
// Zero is refused. Errors (InvalidArgument) name the text and the accepted forms.
Result<BudgetSpec> parse_budget(std::string_view text);

// "1.50 GiB", "512.0 MiB", "12 B".
std::string format_bytes(uint64_t bytes);

// Rounds up to a multiple of `alignment` (a power of two).
constexpr uint64_t align_up(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) & ~(alignment - 1);
}

}  // namespace ferry
