#include "runtime/device_arena.h"

#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "common/mapping_probe.h"
#include "common/units.h"
#include "runtime/allocator_invariants.h"

namespace ferry {
namespace {

using test::page_bytes;
using test::resident_pages;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

static_assert(!std::is_copy_constructible_v<DeviceArena> && std::is_move_constructible_v<DeviceArena>);
static_assert(!std::is_same_v<DeviceArena::Block, HostPool::Block>,
              "device and host blocks must not be interchangeable");
static_assert(std::is_same_v<decltype(HostPool::Block::ptr), std::byte*>);

// An arena whose pages fault on first use: for tests that do not need the memory resident.
const ArenaOptions kLazy = {.region = {.prefault = PrefaultMethod::kNone}};

// The byte a block with identity `id` holds at position `i`; differs between neighbours.
std::byte pattern(uint64_t id, uint64_t i) {
  return static_cast<std::byte>((id * 131 + i * 7 + (i >> 9)) & 0xff);
}

void fill(std::byte* data, uint64_t bytes, uint64_t id) {
  for (uint64_t i = 0; i < bytes; ++i) data[i] = pattern(id, i);
}

// Index of the first byte that differs from the pattern, or -1.
int64_t first_mismatch(const std::byte* data, uint64_t bytes, uint64_t id) {
  for (uint64_t i = 0; i < bytes; ++i)
    if (data[i] != pattern(id, i)) return static_cast<int64_t>(i);
  return -1;
}

TEST(DeviceArenaTest, RegionHasExactCapacityAndAlignedBase) {
  const uint64_t capacity = 3 * kMiB + 100;
  Result<DeviceArena> arena = DeviceArena::create(capacity);
  ASSERT_TRUE(arena.ok()) << arena.status().message();
  EXPECT_EQ(arena->capacity(), capacity);
  EXPECT_EQ(arena->name(), "device");
  EXPECT_EQ(arena->base().address % (2 * kMiB), 0u);  // large enough for huge pages
  EXPECT_EQ(arena->allocator().capacity(), capacity / 64 * 64);
  EXPECT_EQ(arena->host_address(arena->base()), arena->region().data());
  EXPECT_EQ(arena->pointer_at(capacity) - arena->base(), capacity);

  Result<HostPool> pool = HostPool::create(64 * kKiB);
  ASSERT_TRUE(pool.ok()) << pool.status().message();
  EXPECT_EQ(pool->name(), "host");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pool->base()) % page_bytes(), 0u);

  Result<HostPool> coarse = HostPool::create(64 * kKiB, {.alignment = 16 * kKiB});
  ASSERT_TRUE(coarse.ok()) << coarse.status().message();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(coarse->base()) % (16 * kKiB), 0u);  // so block addresses are aligned
}

// The region options reach the region: a lazy arena has no resident pages, a default one is
// fully resident (the pre-faulting itself is tested in tests/common/host_region_test.cc).
TEST(DeviceArenaTest, RegionOptionsReachTheRegion) {
  const uint64_t capacity = 4 * kMiB;
  const int64_t pages = static_cast<int64_t>(capacity / page_bytes());
  Result<DeviceArena> lazy = DeviceArena::create(capacity, kLazy);
  ASSERT_TRUE(lazy.ok()) << lazy.status().message();
  EXPECT_EQ(resident_pages(lazy->region().data(), capacity), 0);
  Result<HostPool> faulted = HostPool::create(capacity);
  ASSERT_TRUE(faulted.ok()) << faulted.status().message();
  EXPECT_EQ(resident_pages(faulted->region().data(), capacity), pages);
  Result<HostPool> plain =
      HostPool::create(capacity, {.region = {.prefault = PrefaultMethod::kNone, .huge_pages = false}});
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_EQ(plain->region().base_alignment(), page_bytes());
}

// Random allocate / place / free; every block holds its own pattern, checked when it is freed
// and at the end. Overlapping blocks, or pointers that disagree with offsets, corrupt a pattern.
TEST(DeviceArenaTest, RandomBlocksKeepTheirContents) {
  const uint64_t capacity = 4 * kMiB;
  Result<DeviceArena> created = DeviceArena::create(capacity, kLazy);
  ASSERT_TRUE(created.ok()) << created.status().message();
  DeviceArena& arena = *created;
  std::byte* host_base = arena.host_address(arena.base());
  test::AllocatorInvariantChecker checker(arena.allocator());
  test::LiveSet live;
  struct Held {
    DeviceArena::Block block;
    uint64_t id;
  };
  std::map<uint64_t, Held> held;  // offset -> block
  std::mt19937_64 rng(7);
  auto uniform = [&](uint64_t lo, uint64_t hi) {
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
  };
  auto random_size = [&]() -> uint64_t {
    uint64_t kind = uniform(0, 9);
    if (kind < 1) return uniform(0, 64);
    if (kind < 8) return uniform(64, 16 * kKiB);
    return uniform(16 * kKiB, 256 * kKiB);
  };
  auto take = [&](const DeviceArena::Block& block, uint64_t id) {
    ASSERT_EQ(block.ptr, arena.base() + block.offset);
    std::byte* data = arena.host_address(block.ptr);
    ASSERT_EQ(data, host_base + block.offset);
    ASSERT_EQ(reinterpret_cast<uintptr_t>(data) % 64, 0u);
    fill(data, block.bytes, id);
    held[block.offset] = {block, id};
    live[block.offset] = block.bytes;
  };
  auto release = [&](std::map<uint64_t, Held>::iterator it) {
    const Held& h = it->second;
    ASSERT_EQ(first_mismatch(arena.host_address(h.block.ptr), h.block.bytes, h.id), -1)
        << "block " << h.id << " at offset " << h.block.offset << " was overwritten";
    arena.free(h.block);
    live.erase(it->first);
    held.erase(it);
  };

  uint64_t next_id = 1;
  int failures = 0, placed = 0;
  for (int step = 0; step < 3000; ++step) {
    uint64_t op = uniform(0, 99);
    if (op < 50) {
      AllocResult<DeviceArena::Block> r = arena.allocate(random_size());
      if (r.ok()) {
        take(*r, next_id++);
      } else {
        ++failures;
        EXPECT_EQ(r.failure().arena, "device");
      }
    } else if (op < 90) {
      if (held.empty()) continue;
      release(std::next(held.begin(), static_cast<long>(uniform(0, held.size() - 1))));
    } else {
      uint64_t offset = uniform(0, capacity / 64) * 64;
      std::optional<DeviceArena::Block> b = arena.allocate_at(offset, random_size());
      if (b) {
        ASSERT_EQ(b->offset, offset);
        take(*b, next_id++);
        ++placed;
      }
    }
    if (::testing::Test::HasFatalFailure()) return;
    ASSERT_TRUE(checker.check(&live)) << "after step " << step;
  }
  EXPECT_GT(failures, 0);
  EXPECT_GT(placed, 0);
  while (!held.empty()) {
    release(held.begin());
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_EQ(arena.stats().in_use_bytes, 0u);
}

TEST(DeviceArenaTest, AllocateAtFollowsAStaticPlan) {
  Result<DeviceArena> arena = DeviceArena::create(1 * kMiB, kLazy);
  ASSERT_TRUE(arena.ok()) << arena.status().message();
  const std::map<uint64_t, uint64_t> plan = {{0, 1000}, {1024, 2048}, {4096, 100}};
  for (auto [offset, bytes] : plan) {
    std::optional<DeviceArena::Block> b = arena->allocate_at(offset, bytes);
    ASSERT_TRUE(b.has_value()) << offset;
    EXPECT_EQ(b->ptr, arena->pointer_at(offset));
    EXPECT_EQ(b->bytes, bytes);
  }
  EXPECT_FALSE(arena->allocate_at(512, 600).has_value());    // overlaps [0, 1024)
  EXPECT_FALSE(arena->allocate_at(3072, 2048).has_value());  // overlaps [4096, 4160)
  EXPECT_TRUE(arena->allocate_at(3072, 1024).has_value());   // fits exactly between
}

TEST(DeviceArenaTest, OutOfMemoryNamesTheArenaAndNumbers) {
  Result<DeviceArena> arena =
      DeviceArena::create(1 * kMiB, {.region = {.name = "gpu0", .prefault = PrefaultMethod::kNone}});
  ASSERT_TRUE(arena.ok()) << arena.status().message();
  AllocResult<DeviceArena::Block> r = arena->allocate(2 * kMiB);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.failure().capacity_bytes, 1 * kMiB);
  Status st = r.status();
  EXPECT_EQ(st.code(), StatusCode::kOutOfMemory);
  for (const std::string& s : {std::string("'gpu0'"), std::to_string(2 * kMiB), std::to_string(1 * kMiB)})
    EXPECT_NE(st.message().find(s), std::string::npos) << s << " missing from: " << st.message();
}

// The region's errors name the arena (region-level cases: tests/common/host_region_test.cc).
TEST(DeviceArenaTest, RegionThatCannotBeObtainedIsOutOfMemory) {
  const uint64_t too_much = 1ull << 50;  // 1 PiB: beyond this machine's memory and address space
  Result<DeviceArena> arena = DeviceArena::create(too_much);
  ASSERT_FALSE(arena.ok());
  EXPECT_EQ(arena.status().code(), StatusCode::kOutOfMemory);
  const std::string& msg = arena.status().message();
  EXPECT_NE(msg.find(std::to_string(too_much)), std::string::npos) << msg;
  EXPECT_NE(msg.find(format_bytes(too_much)), std::string::npos) << msg;
  EXPECT_NE(msg.find("'device'"), std::string::npos) << msg;
}

TEST(DeviceArenaTest, InvalidSizesAreRejected) {
  Result<DeviceArena> empty = DeviceArena::create(0);
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  Result<HostPool> odd = HostPool::create(1 * kMiB, {.alignment = 48});
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(odd.status().message().find("48"), std::string::npos);
}

TEST(DeviceArenaTest, MoveKeepsBlocksAndDestructionUnmaps) {
  Result<DeviceArena> created = DeviceArena::create(2 * kMiB);
  ASSERT_TRUE(created.ok()) << created.status().message();
  DeviceArena a = std::move(*created);
  EXPECT_EQ(created->capacity(), 0u);  // moved-from holds nothing
  AllocResult<DeviceArena::Block> block = a.allocate(4000);
  ASSERT_TRUE(block.ok());
  fill(a.host_address(block->ptr), block->bytes, 42);
  const std::byte* data = a.region().data();
  const uint64_t capacity = a.capacity();

  DeviceArena b = std::move(a);
  EXPECT_EQ(b.region().data(), data);
  EXPECT_EQ(b.stats().num_live_blocks, 1u);
  EXPECT_EQ(first_mismatch(b.host_address(block->ptr), block->bytes, 42), -1);
  b.free(*block);

  Result<DeviceArena> other = DeviceArena::create(1 * kMiB);
  ASSERT_TRUE(other.ok());
  const std::byte* other_data = other->region().data();
  ASSERT_GT(resident_pages(other_data, 1 * kMiB), 0);
  b = std::move(*other);  // b's old region is unmapped by the assignment
  EXPECT_EQ(resident_pages(data, capacity), -1);
  EXPECT_EQ(b.region().data(), other_data);
  { DeviceArena gone = std::move(b); }
  EXPECT_EQ(resident_pages(other_data, 1 * kMiB), -1);
}

TEST(DeviceArenaTest, HostPoolHandsOutHostPointers) {
  Result<HostPool> pool = HostPool::create(1 * kMiB, kLazy);
  ASSERT_TRUE(pool.ok()) << pool.status().message();
  AllocResult<HostPool::Block> a = pool->allocate(10000);
  AllocResult<HostPool::Block> b = pool->allocate(10000);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->ptr, pool->base() + a->offset);
  EXPECT_EQ(pool->host_address(a->ptr), a->ptr);
  std::memset(a->ptr, 0xab, a->bytes);
  fill(b->ptr, b->bytes, 9);
  EXPECT_EQ(first_mismatch(b->ptr, b->bytes, 9), -1);
  EXPECT_EQ(a->ptr[a->bytes - 1], std::byte{0xab});
  pool->reset();
  EXPECT_EQ(pool->stats().in_use_bytes, 0u);
  EXPECT_EQ(pool->allocate(1)->offset, 0u);
}

TEST(DeviceArenaDeathTest, HostAddressOutsideTheArenaAborts) {
  Result<DeviceArena> arena = DeviceArena::create(64 * kKiB, kLazy);
  ASSERT_TRUE(arena.ok());
  EXPECT_DEATH(arena->host_address(arena->base() + arena->capacity() + 1), "outside arena 'device'");
  EXPECT_DEATH(arena->host_address(DevicePtr{64}), "outside arena");
  EXPECT_DEATH(arena->pointer_at(arena->capacity() + 1), "outside arena");
}

TEST(DeviceArenaDeathTest, FreeingAnotherArenasBlockAborts) {
  Result<DeviceArena> a = DeviceArena::create(64 * kKiB, {.region = {.name = "a", .prefault = PrefaultMethod::kNone}});
  Result<DeviceArena> b = DeviceArena::create(64 * kKiB, {.region = {.name = "b", .prefault = PrefaultMethod::kNone}});
  ASSERT_TRUE(a.ok() && b.ok());
  AllocResult<DeviceArena::Block> in_a = a->allocate(100);
  AllocResult<DeviceArena::Block> in_b = b->allocate(100);  // same offset 0 in the other arena
  ASSERT_TRUE(in_a.ok() && in_b.ok());
  ASSERT_EQ(in_a->offset, in_b->offset);
  EXPECT_DEATH(b->free(*in_a), "does not belong to arena 'b'");
  b->free(*in_b);
  EXPECT_DEATH(b->free(*in_b), "not a live block");
}

}  // namespace
}  // namespace ferry
