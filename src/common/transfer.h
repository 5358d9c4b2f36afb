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
// The SSD tier moves bytes with direct I/O (O_DIRECT; GPUDirect Storage on a GPU), whose buffers,
// file offsets and lengths are multiples of this. The device blocks of tensors that cross the SSD
// tier are placed at multiples of it (schedule/placement.h), so that the tier can read and write
// them in place, without a staging copy (runtime/ssd_tier.h).
inline constexpr uint64_t kDirectIoAlignment = 4096;
// Only tensors of at least this many bytes get page-aligned blocks and are modelled as moved in
// place: below it the padding would cost more device memory than the copy is worth (a tiny model
// could no longer trade bytes for swaps), and staging a small copy is cheap.
inline constexpr uint64_t kDirectIoMinBytes = 64 << 10;

inline std::optional<Tier> tier_from_string(std::string_view s) {
  if (s == "host") return Tier::kHost;
  if (s == "ssd") return Tier::kSsd;
  return std::nullopt;
}

}  // namespace ferry
