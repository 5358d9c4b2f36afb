// The host tier with a codec (HostTierOptions::codec): every lossless codec gives back every byte
// of random, sparse (ReLU-like) and adversarial data, from device memory and from host memory; a
// slot takes the space it takes raw; sparse data takes fewer bytes of the tier's memory (its own
// counters); a bit flipped at rest is a kIoError naming the tensor and the chunk, even without
// checksum mode; lossy codecs and bad chunk sizes are refused.
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/swap_test_util.h"
#include "runtime/tiers.h"

namespace ferry {
namespace {

constexpr uint32_t kChunk = 8192;

std::unique_ptr<HostTier> coded_tier(CodecId codec, bool checksum, uint64_t capacity = 16 << 20) {
  Result<std::unique_ptr<HostTier>> tier =
      HostTier::create({.capacity_bytes = capacity, .checksum = checksum, .codec = codec, .chunk_bytes = kChunk});
  EXPECT_TRUE(tier.ok()) << tier.status().message();
  return tier.ok() ? std::move(tier).value() : nullptr;
}

std::string test_name(CodecId c) {
  std::string name(to_string(c));
  for (char& ch : name)
    if (ch == '-' || ch == '+') ch = '_';
  return name;
}

class HostCodecTest : public ::testing::TestWithParam<CodecId> {};

TEST_P(HostCodecTest, EveryByteComesBackInTheSpaceItTakesRaw) {
  const CodecId codec = GetParam();
  for (bool checksum : {true, false}) {
    SCOPED_TRACE(checksum ? "checksum on" : "checksum off");
    auto tier = coded_tier(codec, checksum);
    ASSERT_NE(tier, nullptr);
    const std::vector<test::DataCase> cases = test::codec_data_cases(kChunk);
    std::vector<SwapSlot> slots;
    uint64_t raw_in_use = 0, raw_bytes = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      Result<SwapSlot> slot = tier->reserve(static_cast<TensorId>(i), cases[i].bytes.size());
      ASSERT_TRUE(slot.ok()) << slot.status().message();
      Status st = tier->write(*slot, std::span<const std::byte>(cases[i].bytes));
      ASSERT_TRUE(st.ok()) << cases[i].name << ": " << st.message();
      slots.push_back(*slot);
      raw_in_use += align_up(cases[i].bytes.size(), 64);
      raw_bytes += cases[i].bytes.size();
    }
    EXPECT_EQ(tier->stats().in_use_bytes, raw_in_use);  // a coded slot takes the space of a raw one
    const uint64_t stored = tier->io_stats().medium_bytes_written;
    if (codec == CodecId::kNone) EXPECT_EQ(stored, raw_bytes);
    else EXPECT_LT(stored, raw_bytes);  // the zeros and the sparse cases shrink, nothing grows
    // Twice, in reverse: a copy survives any number of reads.
    for (int round = 0; round < 2; ++round) {
      for (size_t i = cases.size(); i-- > 0;) {
        std::vector<std::byte> back(cases[i].bytes.size(), std::byte{0xee});
        Status st = tier->read(slots[i], std::span<std::byte>(back));
        ASSERT_TRUE(st.ok()) << cases[i].name << ": " << st.message();
        ASSERT_TRUE(back == cases[i].bytes) << cases[i].name << " of " << cases[i].bytes.size() << " bytes";
      }
    }
    EXPECT_EQ(tier->io_stats().medium_bytes_read, 2 * stored);  // reads take back exactly what was stored
  }
}

TEST_P(HostCodecTest, DeviceMemoryOnTheOtherSideAndCopiesOverwritten) {
  Result<std::unique_ptr<Backend>> backend = make_backend("cpu");
  ASSERT_TRUE(backend.ok()) << backend.status().message();
  auto tier = coded_tier(GetParam(), /*checksum=*/true);
  ASSERT_NE(tier, nullptr);
  test::TensorSet set(**backend, test::edge_and_random_sizes(20, 5 * kChunk, 3), /*seed=*/3);
  set.upload();
  std::vector<SwapSlot> slots;
  for (size_t i = 0; i < set.size(); ++i) {
    Result<SwapSlot> slot = tier->reserve(static_cast<TensorId>(i), set.bytes(i));
    ASSERT_TRUE(slot.ok()) << slot.status().message();
    ASSERT_TRUE(tier->write(*slot, **backend, set.ptr(i)).ok());
    slots.push_back(*slot);
  }
  set.scribble();
  for (size_t i = 0; i < set.size(); ++i) ASSERT_TRUE(tier->read(slots[i], **backend, set.ptr(i)).ok());
  EXPECT_EQ(set.first_mismatch(), "");
  // A second write of a slot replaces its copy (the chunk headers with it); a released slot's
  // tensor reserved again gets a fresh copy.
  for (size_t i = 0; i < set.size(); i += 2) ASSERT_TRUE(tier->write(slots[i], **backend, set.ptr(i)).ok());
  tier->release(slots[1]);
  Result<SwapSlot> again = tier->reserve(1, set.bytes(1));
  ASSERT_TRUE(again.ok());
  slots[1] = *again;
  ASSERT_TRUE(tier->write(slots[1], **backend, set.ptr(1)).ok());
  set.scribble();
  for (size_t i = 0; i < set.size(); ++i) ASSERT_TRUE(tier->read(slots[i], **backend, set.ptr(i)).ok());
  EXPECT_EQ(set.first_mismatch(), "");
}

INSTANTIATE_TEST_SUITE_P(Codecs, HostCodecTest, ::testing::ValuesIn(kLosslessCodecs),
                         [](const auto& info) { return test_name(info.param); });

TEST(HostCodecFaultTest, ABitFlippedAtRestIsAnIoErrorNamingTensorAndChunk) {
  for (CodecId codec : {CodecId::kZeroMask, CodecId::kLz4, CodecId::kZstd, CodecId::kZeroMaskLz4}) {
    SCOPED_TRACE(to_string(codec));
    auto tier = coded_tier(codec, /*checksum=*/false);  // the codec alone must catch it
    ASSERT_NE(tier, nullptr);
    const std::vector<std::byte> a = test::relu_bytes(3 * kChunk, 0.6, 4);
    SwapSlot slot = *tier->reserve(5, a.size());
    ASSERT_TRUE(tier->write(slot, std::span<const std::byte>(a)).ok());
    tier->stored_bytes(slot)[kChunk + 3] ^= std::byte{0x04};  // in chunk 1's payload
    std::vector<std::byte> back(a.size());
    Status st = tier->read(slot, std::span<std::byte>(back));
    EXPECT_EQ(st.code(), StatusCode::kIoError) << st.message();
    EXPECT_NE(st.message().find("read of tensor 5, chunk 1 of 3"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("payload checksum mismatch"), std::string::npos) << st.message();
    EXPECT_EQ(tier->stats().num_failed_transfers, 1u);
  }
}

TEST(HostCodecTest, LossyCodecsAndBadChunksAreRefused) {
  Result<std::unique_ptr<HostTier>> lossy = HostTier::create({.capacity_bytes = 1 << 20, .codec = CodecId::kBf16});
  ASSERT_FALSE(lossy.ok());
  EXPECT_EQ(lossy.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(lossy.status().message().find("lossy"), std::string::npos) << lossy.status().message();
  for (uint32_t chunk : {0u, 100u, kMaxChunkBytes + 64}) {
    Result<std::unique_ptr<HostTier>> bad =
        HostTier::create({.capacity_bytes = 1 << 20, .codec = CodecId::kLz4, .chunk_bytes = chunk});
    ASSERT_FALSE(bad.ok()) << chunk;
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << bad.status().message();
  }
}

}  // namespace
}  // namespace ferry
