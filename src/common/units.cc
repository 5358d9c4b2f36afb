#include "common/units.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

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
    if (errno != 0 || end != number.c_str() + number.size()) return bad("too large");
    return static_cast<uint64_t>(v);
  }
  char* end = nullptr;
  double v = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !std::isfinite(v)) return bad("not a number");
  double bytes = v * multiplier;
  if (bytes < 0 || bytes >= 1.8446744073709552e19) return bad("too large");
  return static_cast<uint64_t>(std::llround(bytes));
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
