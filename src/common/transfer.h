// The vocabulary of a transfer, one for every module that plans, simulates, runs or reports one
// (plan, sim, runtime, JSON): which way it goes and which tier holds the copy.
//
// - Direction: kSwapOut copies a tensor from device memory to a tier, kSwapIn copies it back.
//   Names: "swap_out", "swap_in" (the same words as the schedule's actions and the timeline's
//   events).
// - Tier: where a swapped tensor's bytes live while its device memory is released: host memory
//   ("host") or a file on a local disk ("ssd"), reached through host memory.
// The hardware channels a transfer occupies (host-to-device link, SSD reads, ...) are the cost
// model's `Link`s; a direction and a tier name a path over them.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace ferry {

enum class Direction : uint8_t { kSwapOut, kSwapIn };
enum class Tier : uint8_t { kHost, kSsd };

inline constexpr std::string_view to_string(Direction d) { return d == Direction::kSwapOut ? "swap_out" : "swap_in"; }
inline constexpr std::string_view to_string(Tier t) { return t == Tier::kHost ? "host" : "ssd"; }
inline std::optional<Tier> tier_from_string(std::string_view s) {
  if (s == "host") return Tier::kHost;
  if (s == "ssd") return Tier::kSsd;
  return std::nullopt;
}

}  // namespace ferry
