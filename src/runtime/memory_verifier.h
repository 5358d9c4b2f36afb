// MemoryVerifier: the checks of `ferry train --verify-memory`, which prove from the memory itself
// (not from the plan) that every kernel and transfer stayed inside its tensors and that every op
// read what was written for it.
//
// Design
// - Guard bytes: every block the executor places is widened by kGuardBytes on each side (the
//   executor places the program with the widened sizes), and the bytes before the payload and
//   from the payload's end to the block's end hold kGuardByte. A write past a tensor's end (or
//   before its start) changes them.
// - Poison: the arena starts as kUntouchedByte (the executor's extent measurement uses it too);
//   a freed block is filled with kFreedByte. Every byte outside live blocks must hold the pattern
//   of its range, so a write into freed or never-used memory shows.
// - Contents: the hash (common/checksum.h) of every tensor is recorded when it is written (by its
//   producer, an initialisation, a data load, an update) and checked when it is read (before every
//   op that reads it) and when it is rematerialised (a swap-in lands, a recompute rewrites it): a
//   tensor clobbered by an overlapping block, never filled, or recomputed to other bits shows.
// - check() runs after every op: guards of all live blocks and patterns of all free ranges, so
//   its cost is O(arena bytes) per op. It is a debugging mode for small models and few iterations.
// - Backend-neutral: device bytes are read with Backend::copy_to_host and written with fill().
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "common/status.h"
#include "graph/graph.h"

namespace ferry {

class MemoryVerifier {
 public:
  static constexpr uint64_t kGuardBytes = 64;
  static constexpr uint8_t kGuardByte = 0xFE;
  static constexpr uint8_t kUntouchedByte = 0x5A;  // the whole arena before anything ran
  static constexpr uint8_t kFreedByte = 0xDB;      // a freed block

  // `arena` holds `arena_bytes` bytes, all kUntouchedByte (the executor fills it at creation).
  MemoryVerifier(Backend& backend, DevicePtr arena, uint64_t arena_bytes, size_t num_tensors);

  // A block [offset, offset + block_bytes) now holds `name` at [offset + kGuardBytes, + payload):
  // writes its guards.
  Status on_acquire(uint64_t offset, uint64_t block_bytes, uint64_t payload_bytes, std::string name);
  // Checks the block's guards (an error names the block and `activity`), then poisons it.
  Status on_release(uint64_t offset, std::string_view activity);
  // Guards of every live block and the pattern of every free byte; errors name `activity` (what
  // ran last) and the block or range at fault.
  Status check(std::string_view activity);

  // Records the hash of tensor `t`'s `bytes` at `ptr` (it was just written).
  Status record(TensorId t, DevicePtr ptr, uint64_t bytes);
  // Checks tensor `t`'s bytes against the recorded hash; `reader` names who reads it ("op 'fc'
  // (step 7)"), `how` what put the bytes there ("swap-in", "recompute", "its producer").
  Status verify(TensorId t, std::string_view tensor_name, DevicePtr ptr, uint64_t bytes, std::string_view reader);
  // Sets tensor `t`'s hash to `hash` (bytes written outside device memory, e.g. to a tier).
  void set_record(TensorId t, uint64_t hash) { content_[static_cast<size_t>(t)] = hash; }
  // Forgets tensor `t`'s hash (it died).
  void forget(TensorId t) { content_[static_cast<size_t>(t)].reset(); }
  bool has_record(TensorId t) const { return content_[static_cast<size_t>(t)].has_value(); }

 private:
  struct Block {
    uint64_t block_bytes = 0;
    uint64_t payload_bytes = 0;
    std::string name;
  };
  struct Range {  // a free range and the byte it must hold
    uint64_t end = 0;
    uint8_t pattern = 0;
  };
  Result<uint64_t> hash_of(DevicePtr ptr, uint64_t bytes);
  // Offset of the first byte in [offset, offset + bytes) that differs from `value`, if any.
  Result<std::optional<uint64_t>> find_mismatch(uint64_t offset, uint64_t bytes, uint8_t value);
  Status check_guards(uint64_t offset, const Block& b, std::string_view activity);
  void carve(uint64_t begin, uint64_t end);  // removes [begin, end) from the free ranges

  Backend& backend_;
  DevicePtr arena_;
  uint64_t arena_bytes_ = 0;
  std::map<uint64_t, Block> live_;   // by block offset
  std::map<uint64_t, Range> free_;   // by begin; disjoint
  std::vector<std::optional<uint64_t>> content_;  // per tensor
  std::vector<std::byte> host_;      // staging for reads
};

}  // namespace ferry
