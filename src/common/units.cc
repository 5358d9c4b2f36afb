#include "common/units.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <algorithm>

#include <fmt/format.h>

namespace ferry {

std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

std::optional<uint64_t> checked_add(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

namespace {
constexpr const char* kTooLarge = "too large (the limit is 2^64 - 1 bytes, 16 EiB)";
}  // namespace

Result<uint64_t> parse_bytes(std::string_view text) {
  std::string s(text);
  auto bad = [&](const char* why) {
    return Status::InvalidArgument(fmt::format("invalid byte size '{}': {}", s, why));
  };
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.' || s[i] == 'e' ||
                          s[i] == 'E' || s[i] == '+'))
    ++i;
  std::string number = s.substr(0, i);
  std::string suffix = s.substr(i);
  while (!suffix.empty() && suffix.front() == ' ') suffix.erase(suffix.begin());
  if (number.empty()) return bad("expected a number such as 6GiB, 512MiB or 1000000");
  if (!s.empty() && s[0] == '-') return bad("must not be negative");
  double multiplier = 1;
  std::string u;
  for (char c : suffix) u += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (u.empty() || u == "B") multiplier = 1;
  else if (u == "K" || u == "KIB") multiplier = 1024.0;
  else if (u == "M" || u == "MIB") multiplier = 1024.0 * 1024;
  else if (u == "G" || u == "GIB") multiplier = 1024.0 * 1024 * 1024;
  else if (u == "T" || u == "TIB") multiplier = 1024.0 * 1024 * 1024 * 1024;
  else if (u == "KB") multiplier = 1e3;
  else if (u == "MB") multiplier = 1e6;
  else if (u == "GB") multiplier = 1e9;
  else if (u == "TB") multiplier = 1e12;
  else return bad("unknown unit (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)");
  bool plain_integer = number.find_first_of(".eE") == std::string::npos;
  if (plain_integer && multiplier == 1) {
    errno = 0;
    char* end = nullptr;
    unsigned long long v = std::strtoull(number.c_str(), &end, 10);
    if (end != number.c_str() + number.size()) return bad("not a number");
    if (errno != 0) return bad(kTooLarge);
    return static_cast<uint64_t>(v);
  }
  char* end = nullptr;
  double v = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !std::isfinite(v)) return bad("not a number");
  // Rounded in double, then range-checked against 2^64 before the conversion (exact in double).
  const double bytes = std::round(v * multiplier);
  if (!(bytes >= 0) || bytes >= 18446744073709551616.0) return bad(kTooLarge);
  return static_cast<uint64_t>(bytes);
}

uint64_t BudgetSpec::resolve(uint64_t reference_bytes) const {
  if (!percent) return bytes;
  const double b = std::floor(*percent / 100.0 * static_cast<double>(reference_bytes));
  if (b >= 18446744073709551616.0) return UINT64_MAX;
  return std::max<uint64_t>(static_cast<uint64_t>(b), 1);
}

std::string BudgetSpec::describe(uint64_t reference_bytes) const {
  if (!percent) return format_bytes(bytes);
  return fmt::format("{} ({} of {})", format_bytes(resolve(reference_bytes)), text, format_bytes(reference_bytes));
}

Result<BudgetSpec> parse_budget(std::string_view text) {
  BudgetSpec spec;
  spec.text = std::string(text);
  if (!text.empty() && text.back() == '%') {
    const std::string number(text.substr(0, text.size() - 1));
    char* end = nullptr;
    errno = 0;
    const double p = std::strtod(number.c_str(), &end);
    if (number.empty() || end != number.c_str() + number.size() || !std::isfinite(p) ||
        number.find_first_not_of("0123456789.eE+-") != std::string::npos)
      return Status::InvalidArgument(fmt::format("invalid budget '{}': expected a percentage such as 33%", text));
    if (!(p > 0) || p > kMaxBudgetPercent)
      return Status::InvalidArgument(fmt::format(
          "invalid budget '{}': a percentage of the no-swap peak must be in (0%, {}%]", text, kMaxBudgetPercent));
    spec.percent = p;
    return spec;
  }
  Result<uint64_t> b = parse_bytes(text);
  if (!b.ok()) return Status::InvalidArgument(b.status().message() + " (or a percentage of the no-swap peak: 33%)");
  if (*b == 0) return Status::InvalidArgument(fmt::format("invalid budget '{}': must be positive", text));
  spec.bytes = *b;
  return spec;
}

std::string format_bytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024 && unit < 6) {
    v /= 1024;
    ++unit;
  }
  return fmt::format("{:.2f} {}", v, kUnits[unit]);
}

}  // namespace ferry
