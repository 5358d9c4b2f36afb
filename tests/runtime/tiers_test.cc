// Hash64 and the host tier: every stored byte comes back, the accounting matches an independent
// count, and misuse and corruption are reported.
#include "runtime/tiers.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/checksum.h"
#include "runtime/swap_test_util.h"

namespace ferry {
namespace {

using test::TensorSet;

std::span<const std::byte> as_bytes(const char* text) { return std::as_bytes(std::span(text, std::strlen(text))); }

std::unique_ptr<Backend> cpu_backend() {
  Result<std::unique_ptr<Backend>> be = make_backend("cpu");
  EXPECT_TRUE(be.ok()) << be.status().message();
  return std::move(be).value();
}

std::unique_ptr<HostTier> host_tier(uint64_t capacity, bool checksum) {
  Result<std::unique_ptr<HostTier>> tier = HostTier::create({.capacity_bytes = capacity, .checksum = checksum});
  EXPECT_TRUE(tier.ok()) << tier.status().message();
  return std::move(tier).value();
}

// ---------------------------------------------------------------------------------------------
// Hash64

TEST(Hash64Test, MatchesPublishedXxh64Values) {
  // From xxHash users' documentation: Fastly's digest.hash_xxh64("abc") and python-xxhash's README.
  EXPECT_EQ(hash64({}), 0xEF46DB3751D8E999ull);
  EXPECT_EQ(hash64(as_bytes("abc")), 0x44BC2CF5AD770999ull);
  EXPECT_EQ(hash64(as_bytes("Nobody inspects the spammish repetition")), 0xFBCEA83C8A378BF1ull);  // > 32 bytes
}

TEST(Hash64Test, StreamingEqualsOneShotForAnySplit) {
  std::vector<std::byte> data = test::pattern_bytes(1, 5000, 3);
  const uint64_t whole = hash64(data);
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    Hash64 h;
    size_t pos = 0;
    while (pos < data.size()) {
      size_t n = std::min<size_t>(data.size() - pos, rng() % 100);  // includes empty updates
      h.update(std::span(data).subspan(pos, n));
      pos += n;
    }
    ASSERT_EQ(h.length(), data.size());
    ASSERT_EQ(h.digest(), whole) << "trial " << trial;
  }
}

TEST(Hash64Test, EveryBitFlipChangesTheDigest) {
  std::vector<std::byte> data = test::pattern_bytes(2, 4096 + 17, 5);
  const uint64_t clean = hash64(data);
  for (size_t bit = 0; bit < data.size() * 8; bit += 7) {
    data[bit / 8] ^= std::byte(1u << (bit % 8));
    ASSERT_NE(hash64(data), clean) << "bit " << bit;
    data[bit / 8] ^= std::byte(1u << (bit % 8));
  }
  EXPECT_EQ(hash64(data), clean);
}

// ---------------------------------------------------------------------------------------------
// HostTier

class HostTierTest : public ::testing::TestWithParam<bool> {};  // checksum on or off

TEST_P(HostTierTest, EveryByteComesBackAndStatsAddUp) {
  auto backend = cpu_backend();
  auto tier = host_tier(4 << 20, /*checksum=*/GetParam());
  EXPECT_EQ(tier->kind(), Tier::kHost);
  EXPECT_EQ(tier->checksum_enabled(), GetParam());
  TensorSet set(*backend, test::edge_and_random_sizes(30, 100000, 1), /*seed=*/1);
  set.upload();

  std::vector<SwapSlot> slots;
  uint64_t expected_in_use = 0;
  for (size_t i = 0; i < set.size(); ++i) {
    Result<SwapSlot> slot = tier->reserve(static_cast<TensorId>(i), set.bytes(i));
    ASSERT_TRUE(slot.ok()) << slot.status().message();
    EXPECT_FALSE(tier->holds_copy(*slot));
    ASSERT_TRUE(tier->write(*slot, *backend, set.ptr(i)).ok());
    EXPECT_TRUE(tier->holds_copy(*slot));
    slots.push_back(*slot);
    expected_in_use += align_up(set.bytes(i), 64);  // an empty tensor reserves nothing
  }
  set.scribble();
  for (size_t i = 0; i < set.size(); ++i) ASSERT_TRUE(tier->read(slots[i], *backend, set.ptr(i)).ok());
  EXPECT_EQ(set.first_mismatch(), "");

  // A copy survives a swap-in: read everything a second time.
  set.scribble();
  for (size_t i = 0; i < set.size(); ++i) ASSERT_TRUE(tier->read(slots[i], *backend, set.ptr(i)).ok());
  EXPECT_EQ(set.first_mismatch(), "");

  TierStats s = tier->stats();
  EXPECT_EQ(s.capacity_bytes, 4u << 20);
  EXPECT_EQ(s.in_use_bytes, expected_in_use);
  EXPECT_EQ(s.peak_in_use_bytes, expected_in_use);
  EXPECT_EQ(s.live_slots, set.size());
  EXPECT_EQ(s.bytes_written, set.total_bytes());
  EXPECT_EQ(s.bytes_read, 2 * set.total_bytes());
  EXPECT_EQ(s.num_writes, set.size());
  EXPECT_EQ(s.num_reads, 2 * set.size());

  for (const SwapSlot& slot : slots) tier->release(slot);
  s = tier->stats();
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(s.live_slots, 0u);
  EXPECT_EQ(s.peak_in_use_bytes, expected_in_use);
  EXPECT_FALSE(tier->find(0).has_value());
}

TEST_P(HostTierTest, HostMemoryOnTheOtherSide) {
  auto tier = host_tier(1 << 20, GetParam());
  std::vector<std::byte> src = test::pattern_bytes(9, 12345, 2);
  Result<SwapSlot> slot = tier->reserve(9, src.size());
  ASSERT_TRUE(slot.ok());
  ASSERT_TRUE(tier->write(*slot, std::span<const std::byte>(src)).ok());
  EXPECT_TRUE(std::equal(src.begin(), src.end(), tier->stored_bytes(*slot).begin()));
  std::vector<std::byte> dst(src.size());
  ASSERT_TRUE(tier->read(*slot, std::span<std::byte>(dst)).ok());
  EXPECT_EQ(dst, src);
}

INSTANTIATE_TEST_SUITE_P(Checksum, HostTierTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "On" : "Off"; });

TEST(HostTierTest, FullTierIsOutOfMemoryWithTheNumbers) {
  auto tier = host_tier(1 << 20, false);
  ASSERT_TRUE(tier->reserve(0, 600 << 10).ok());
  Result<SwapSlot> second = tier->reserve(1, 600 << 10);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kOutOfMemory);
  const std::string& msg = second.status().message();
  EXPECT_NE(msg.find("host tier"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tensor 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("614400 bytes"), std::string::npos) << msg;   // requested
  EXPECT_NE(msg.find("1048576 bytes"), std::string::npos) << msg;  // capacity
  EXPECT_NE(msg.find("in use"), std::string::npos) << msg;
  EXPECT_EQ(tier->stats().num_failed_reservations, 1u);
  EXPECT_EQ(tier->stats().live_slots, 1u);

  tier->release(*tier->find(0));
  EXPECT_TRUE(tier->reserve(1, 600 << 10).ok());  // the space came back
}

TEST(HostTierTest, OneCopyPerTensor) {
  auto tier = host_tier(1 << 20, false);
  ASSERT_TRUE(tier->reserve(4, 100).ok());
  Result<SwapSlot> again = tier->reserve(4, 100);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(again.status().message().find("tensor 4 already has a slot"), std::string::npos)
      << again.status().message();
}

TEST(HostTierTest, MisuseIsReported) {
  auto tier = host_tier(1 << 20, false);
  std::vector<std::byte> buf(100);
  SwapSlot slot = *tier->reserve(3, 100);

  Status st = tier->read(slot, std::span<std::byte>(buf));  // nothing written yet
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_NE(st.message().find("no complete copy"), std::string::npos) << st.message();

  std::vector<std::byte> wrong(99);
  st = tier->write(slot, std::span<const std::byte>(wrong));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("99 bytes"), std::string::npos) << st.message();

  tier->release(slot);
  SwapSlot reborn = *tier->reserve(3, 100);  // same tensor, same offset, new generation
  EXPECT_EQ(reborn.offset, slot.offset);
  EXPECT_NE(reborn.generation, slot.generation);
  st = tier->write(slot, std::span<const std::byte>(buf));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("stale"), std::string::npos) << st.message();
  EXPECT_FALSE(tier->holds_copy(reborn));
}

TEST(HostTierTest, ChecksumCatchesACorruptedCopy) {
  for (bool checksum : {true, false}) {
    auto tier = host_tier(1 << 20, checksum);
    std::vector<std::byte> src = test::pattern_bytes(7, 5000, 4);
    SwapSlot slot = *tier->reserve(7, src.size());
    ASSERT_TRUE(tier->write(slot, std::span<const std::byte>(src)).ok());
    tier->stored_bytes(slot)[4321] ^= std::byte{0x10};  // a bit flips at rest

    std::vector<std::byte> dst(src.size());
    Status st = tier->read(slot, std::span<std::byte>(dst));
    if (checksum) {
      EXPECT_EQ(st.code(), StatusCode::kInternal);
      EXPECT_NE(st.message().find("checksum mismatch for tensor 7"), std::string::npos) << st.message();
      EXPECT_EQ(tier->stats().num_failed_transfers, 1u);
    } else {
      EXPECT_TRUE(st.ok());  // without the checksum nothing notices: this is what the mode is for
      EXPECT_NE(dst, src);
    }
  }
}

TEST(HostTierTest, ZeroCapacityIsRejected) {
  Result<std::unique_ptr<HostTier>> tier = HostTier::create({.capacity_bytes = 0});
  ASSERT_FALSE(tier.ok());
  EXPECT_EQ(tier.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

// The executor sizes a tier to hold every tensor it sends there at once. Best fit alone can then
// fail with enough free bytes (a copy freed and re-made while others came and went in its hole);
// fixed slots cannot, in any order of reservations and releases.
TEST(SwapTierFixedSlots, NoOrderOfCopiesFragmentsATierSizedForAllOfThem) {
  const std::vector<uint64_t> sizes = {36864, 32768, 4096, 8192, 65536, 4096, 12288};
  uint64_t capacity = 0;
  std::vector<FixedSlot> slots;
  for (size_t i = 0; i < sizes.size(); ++i) {
    slots.push_back({.tensor = static_cast<TensorId>(i), .bytes = sizes[i], .offset = capacity});
    capacity += sizes[i];
  }
  // Without fixed slots, this order fails: 0 is freed, 1 lands in its hole, 0 comes back.
  auto run = [&](bool fixed) -> Status {
    Result<std::unique_ptr<HostTier>> tier = HostTier::create({.capacity_bytes = capacity});
    if (!tier.ok()) return tier.status();
    HostTier& t = **tier;
    if (fixed) FERRY_RETURN_IF_ERROR(t.fix_slots(slots));
    std::mt19937 rng(7);
    std::vector<std::optional<SwapSlot>> live(sizes.size());
    for (TensorId id : {0, 2, 3, 4, 5, 6}) {
      FERRY_ASSIGN_OR_RETURN(SwapSlot s, t.reserve(id, sizes[id]));
      live[id] = s;
    }
    t.release(*live[0]);
    live[0].reset();
    FERRY_ASSIGN_OR_RETURN(SwapSlot one, t.reserve(1, sizes[1]));
    live[1] = one;
    FERRY_ASSIGN_OR_RETURN(SwapSlot zero, t.reserve(0, sizes[0]));
    live[0] = zero;
    // Then random churn: everything always fits.
    for (int round = 0; round < 2000; ++round) {
      const TensorId id = static_cast<TensorId>(rng() % sizes.size());
      if (live[id]) {
        t.release(*live[id]);
        live[id].reset();
      } else {
        FERRY_ASSIGN_OR_RETURN(SwapSlot s, t.reserve(id, sizes[id]));
        live[id] = s;
      }
      EXPECT_LE(t.stats().in_use_bytes, capacity);
    }
    return Status::Ok();
  };
  EXPECT_EQ(run(false).code(), StatusCode::kOutOfMemory) << "the scenario must fragment best fit";
  EXPECT_TRUE(run(true).ok()) << run(true).message();
}

// Fixed slots may share bytes (a tier placement gives copies that never coexist the same place);
// a reservation that would overlap a live copy is refused, naming both tensors, and the bytes of
// the live copy are untouched.
TEST(SwapTierFixedSlots, SharedSlotsMayNotBeLiveAtOnce) {
  Result<std::unique_ptr<HostTier>> tier = HostTier::create({.capacity_bytes = 16384});
  ASSERT_TRUE(tier.ok()) << tier.status().message();
  HostTier& t = **tier;
  // 1 and 2 share [0, 8192); 3 lies after them; 4 straddles 2 and 3.
  ASSERT_TRUE(t.fix_slots({{.tensor = 1, .bytes = 8192, .offset = 0},
                           {.tensor = 2, .bytes = 4096, .offset = 4096},
                           {.tensor = 3, .bytes = 4096, .offset = 8192},
                           {.tensor = 4, .bytes = 8192, .offset = 4096}})
                  .ok());
  Result<SwapSlot> one = t.reserve(1, 8192);
  ASSERT_TRUE(one.ok());
  std::vector<std::byte> bytes(8192, std::byte{0x5a});
  ASSERT_TRUE(t.write(*one, bytes).ok());
  Result<SwapSlot> two = t.reserve(2, 4096);
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(two.status().code(), StatusCode::kInternal);
  EXPECT_NE(two.status().message().find("tensor 2"), std::string::npos) << two.status().message();
  EXPECT_NE(two.status().message().find("tensor 1"), std::string::npos) << two.status().message();
  Result<SwapSlot> three = t.reserve(3, 4096);  // disjoint from 1: fine
  ASSERT_TRUE(three.ok()) << three.status().message();
  EXPECT_FALSE(t.reserve(4, 8192).ok()) << "4 overlaps both 1 and 3";
  std::vector<std::byte> back(8192);
  ASSERT_TRUE(t.read(*one, back).ok());
  EXPECT_EQ(back, bytes);
  t.release(*one);
  Result<SwapSlot> again = t.reserve(2, 4096);  // 1 is gone: 2 may take the shared bytes
  EXPECT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->offset, 4096u);
}

TEST(SwapTierFixedSlots, SlotsPastTheCapacityOrMisalignedAreRefused) {
  Result<std::unique_ptr<HostTier>> tier = HostTier::create({.capacity_bytes = 8192});
  ASSERT_TRUE(tier.ok());
  EXPECT_EQ((*tier)->fix_slots({{.tensor = 1, .bytes = 4096, .offset = 8192}}).code(), StatusCode::kOutOfMemory);
  EXPECT_EQ((*tier)->fix_slots({{.tensor = 1, .bytes = 64, .offset = 3}}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*tier)->fix_slots({{.tensor = 1, .bytes = 64, .offset = 0}, {.tensor = 1, .bytes = 64, .offset = 64}})
                .code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ferry
