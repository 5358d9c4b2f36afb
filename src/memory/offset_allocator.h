// OffsetAllocator: best-fit allocation of offsets inside an abstract address range [0, capacity).
//
// Design
// - It owns no memory and hands out offsets only. The runtime adds them to its arena's base (the
//   device region, the host tier's region); the simulator runs this very code to predict
//   fragmentation, so what the simulator predicts is what the runtime does. It lives in
//   src/memory, below both, and depends on neither.
// - Free blocks are indexed twice, as in PyTorch's caching allocator: by (size, offset) in a
//   std::set, so best fit is one lower_bound, and by offset in a std::map, so a freed block finds
//   its neighbours and merges with them. Free blocks are therefore always maximal: no two touch.
// - Best fit takes the smallest free block that holds the request; among equal sizes the lowest
//   offset, which keeps placement deterministic (the simulator must reproduce it exactly) and
//   packs live data towards address 0. The allocation takes the front of that block.
// - Every block starts at a multiple of `alignment` and its size is rounded up to one, so the
//   managed range is [0, capacity rounded down to the alignment).
// - A zero-byte block holds no memory (an undefined bias, an empty loss weight: real traces are
//   full of them), so it reserves nothing and never changes a peak or a placement: a program
//   with empty tensors needs exactly the bytes of one without them. It still has an offset and
//   is matched by exactly one free(), so callers need no special case. allocate(0) puts it at
//   the end of the range, where no block holding bytes can start; allocate_at(offset, 0) puts
//   it where the caller says (the static placement uses the end of its arena), and refuses an
//   offset where a block holding bytes starts, so free(offset) always knows which block it
//   releases. Empty blocks are counted per offset (they are interchangeable).
// - allocate_at() places a block at a fixed offset, for executing a static memory-sharing plan
//   (analysis.h, MemoryPlan); it mixes freely with best-fit allocations.
// - Out of memory is a value: AllocResult carries an AllocationFailure with the numbers, and the
//   message is formatted only when someone asks for a Status, so a caller that probes, evicts and
//   retries (executor, simulator) pays nothing for the failures it handles.
// - Not thread-safe: one owner (the executor's issuing thread, or the simulator) calls it.
//
// Cost: allocate, allocate_at and free are O(log F) for F free blocks, plus an O(1) expected
// hash lookup of the live block.
//
// Usage:
//   OffsetAllocator alloc(8 << 20, 64, "device");
//   AllocResult<uint64_t> r = alloc.allocate(1000);   // r.ok(), *r == 0; 1024 bytes reserved
//   if (!r.ok()) return r.status();                    // kOutOfMemory naming "device", with numbers
//   alloc.free(*r);
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "common/status.h"

namespace ferry {

// Why an allocation was refused, with the numbers a user needs to act on it.
struct AllocationFailure {
  std::string arena;             // name of the allocator that refused
  uint64_t requested_bytes = 0;  // as the caller asked
  uint64_t rounded_bytes = 0;    // after rounding up to the alignment (saturates at UINT64_MAX)
  uint64_t capacity_bytes = 0;
  uint64_t in_use_bytes = 0;
  uint64_t free_bytes = 0;
  uint64_t largest_free_bytes = 0;

  // True when enough bytes are free in total but no single free block holds the request.
  bool fragmented() const { return free_bytes >= rounded_bytes; }
  // A kOutOfMemory Status naming the arena, with every number human-formatted and exact.
  Status to_status() const;
};

// The outcome of an allocation: a T (an offset, an arena block) or an AllocationFailure.
// Converts implicitly to Result<T>, so FERRY_ASSIGN_OR_RETURN and Result-based callers work.
template <typename T>
class [[nodiscard]] AllocResult {
 public:
  AllocResult(T value) : v_(std::move(value)) {}                      // NOLINT(implicit)
  AllocResult(AllocationFailure failure) : v_(std::move(failure)) {}  // NOLINT(implicit)

  bool ok() const { return v_.index() == 0; }
  // The allocation; must be ok().
  const T& value() const& {
    FERRY_CHECK(ok(), "value() of a failed allocation: {}", failure().to_status().message());
    return *std::get_if<T>(&v_);
  }
  T&& value() && {
    FERRY_CHECK(ok(), "value() of a failed allocation: {}", failure().to_status().message());
    return std::move(*std::get_if<T>(&v_));
  }
  const T& operator*() const& { return value(); }
  const T* operator->() const { return &value(); }
  // Why it failed; must not be ok().
  const AllocationFailure& failure() const {
    FERRY_CHECK(!ok(), "failure() of a successful allocation");
    return *std::get_if<AllocationFailure>(&v_);
  }
  // Ok, or the kOutOfMemory status of failure() (formatted now, not at the failure).
  Status status() const { return ok() ? Status::Ok() : failure().to_status(); }

  operator Result<T>() const& {  // NOLINT(implicit)
    return ok() ? Result<T>(*std::get_if<T>(&v_)) : Result<T>(status());
  }
  operator Result<T>() && {  // NOLINT(implicit)
    return ok() ? Result<T>(std::move(*std::get_if<T>(&v_))) : Result<T>(status());
  }

 private:
  std::variant<T, AllocationFailure> v_;
};

// Counters of one allocator. Peaks and counts run from construction or the last reset().
struct AllocatorStats {
  uint64_t capacity_bytes = 0;         // managed bytes (capacity rounded down to the alignment)
  uint64_t in_use_bytes = 0;           // bytes of live blocks, after rounding
  uint64_t peak_in_use_bytes = 0;      // max of in_use_bytes (since reset() or reset_peaks())
  uint64_t requested_bytes = 0;        // bytes the callers asked for, over live blocks
  uint64_t high_water_bytes = 0;       // end of the highest live block (0 when none)
  uint64_t peak_high_water_bytes = 0;  // max of high_water_bytes (since reset() or reset_peaks())
  uint64_t free_bytes = 0;             // capacity_bytes - in_use_bytes
  uint64_t largest_free_bytes = 0;
  uint64_t num_live_blocks = 0;   // live blocks holding bytes
  uint64_t num_empty_blocks = 0;  // live zero-byte blocks (they hold no bytes)
  uint64_t num_free_blocks = 0;
  uint64_t num_allocations = 0;  // successful allocate() and allocate_at() calls
  uint64_t num_frees = 0;
  uint64_t num_failed_allocations = 0;  // allocate() calls refused for lack of memory
  double fragmentation = 0;             // 1 - largest_free/free_bytes; 0 when nothing is free
};

// A block as seen by introspection (tests, reports): where it is, its reserved size, and for a
// live block the bytes the caller asked for (0 for free blocks).
struct AllocatorBlock {
  uint64_t offset = 0;
  uint64_t bytes = 0;
  uint64_t requested_bytes = 0;
  bool operator==(const AllocatorBlock&) const = default;
};

class OffsetAllocator {
 public:
  static constexpr uint64_t kDefaultAlignment = 64;

  // Manages [0, capacity rounded down to `alignment`). `alignment` must be a power of two;
  // `name` identifies the allocator in error messages ("device", "host").
  explicit OffsetAllocator(uint64_t capacity, uint64_t alignment = kDefaultAlignment,
                           std::string name = "arena");

  // Reserves align_up(bytes, alignment) bytes at the best-fitting free block and returns their
  // offset, or an AllocationFailure when no free block is large enough. allocate(0) reserves
  // nothing, always succeeds and returns capacity() (see the design note).
  AllocResult<uint64_t> allocate(uint64_t bytes);

  // Reserves align_up(bytes, alignment) bytes at exactly `offset`. Returns false, and changes
  // nothing, when the offset is not aligned or any byte of the range is live or outside the
  // capacity, or (bytes > 0) an empty block is live at `offset`. For bytes == 0: true for any
  // offset <= capacity() at which no block holding bytes starts; nothing is reserved.
  [[nodiscard]] bool allocate_at(uint64_t offset, uint64_t bytes);

  // Releases the live block at `offset` (a block holding bytes merges with free neighbours; else
  // one empty block there). A double free or an offset this allocator did not return is a bug
  // in the caller: FERRY_CHECK aborts.
  void free(uint64_t offset);

  // Frees everything and zeroes every counter, as if newly constructed.
  void reset();
  // Starts new peak windows: peaks become the current values (e.g. at an iteration boundary).
  void reset_peaks();

  uint64_t capacity() const { return capacity_; }
  uint64_t alignment() const { return alignment_; }
  const std::string& name() const { return name_; }
  // Bytes reserved for `bytes` requested: what allocate(bytes) takes from the free space (0 for 0).
  uint64_t rounded_size(uint64_t bytes) const;
  uint64_t in_use_bytes() const { return in_use_bytes_; }
  // Reserved size of the live block at `offset`, or nullopt when no live block starts there.
  std::optional<uint64_t> block_bytes(uint64_t offset) const;

  // All counters, in O(1).
  AllocatorStats stats() const;

  // Live blocks holding bytes and free blocks, sorted by offset. O(n log n): for tests, invariant
  // checks and reports. Empty blocks are counted in stats().num_empty_blocks.
  std::vector<AllocatorBlock> live_blocks() const;
  std::vector<AllocatorBlock> free_blocks() const;

  // Checks that the internal indices agree with each other and with the counters; returns
  // kInternal naming the first disagreement. For tests: a healthy allocator always passes.
  Status validate() const;

 private:
  struct LiveBlock {
    uint64_t bytes = 0;
    uint64_t requested_bytes = 0;
  };
  using FreeBySize = std::set<std::pair<uint64_t, uint64_t>>;  // (size, offset)

  void insert_free(uint64_t offset, uint64_t bytes);
  void erase_free(std::map<uint64_t, uint64_t>::iterator it);
  void mark_live(uint64_t offset, uint64_t bytes, uint64_t requested);
  void mark_empty_live(uint64_t offset);
  uint64_t high_water_bytes() const;
  AllocationFailure make_failure(uint64_t requested, uint64_t rounded) const;

  uint64_t capacity_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  std::string name_;

  FreeBySize free_by_size_;
  std::map<uint64_t, uint64_t> free_by_offset_;   // offset -> size
  std::unordered_map<uint64_t, LiveBlock> live_;  // offset -> block holding bytes
  std::map<uint64_t, uint64_t> empty_live_;       // offset -> live zero-byte blocks there
  uint64_t num_empty_live_ = 0;

  uint64_t in_use_bytes_ = 0;
  uint64_t requested_bytes_ = 0;
  uint64_t peak_in_use_bytes_ = 0;
  uint64_t peak_high_water_bytes_ = 0;
  uint64_t num_allocations_ = 0;
  uint64_t num_frees_ = 0;
  uint64_t num_failed_allocations_ = 0;
};

}  // namespace ferry
