#include <gtest/gtest.h>

#include <string_view>
#include <vector>

#include "common/checksum.h"

namespace ferry {
namespace {

std::span<const std::byte> bytes_of(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

TEST(Hash64OneShot, PublishedValues) {
  // XXH64 of "" and "abc" with seed 0, as xxHash's reference implementation gives them.
  EXPECT_EQ(hash64({}), 0xEF46DB3751D8E999ull);
  EXPECT_EQ(hash64(bytes_of("abc")), 0x44BC2CF5AD770999ull);
}

TEST(Hash64OneShot, KnownValuesOneShotAndStreamed) {
  // Values computed once on bytes i*7+3; every length class (stripes, 8-, 4-, 1-byte tails) and a
  // non-zero seed, through the one-call and the streaming interface.
  std::vector<std::byte> b(1000);
  for (size_t i = 0; i < b.size(); ++i) b[i] = std::byte(static_cast<uint8_t>(i * 7 + 3));
  EXPECT_EQ(hash64(b), 0x5f235fa033f1a3fbull);
  EXPECT_EQ(hash64(std::span(b).first(100), 1), 0x8d8957e68f02c7ceull);
  Hash64 streamed(1);
  streamed.update(std::span(b).first(37));
  streamed.update(std::span(b).subspan(37, 63));
  EXPECT_EQ(streamed.digest(), 0x8d8957e68f02c7ceull);
}

TEST(Hash64OneShot, EveryByteAndTheSeedMatter) {
  std::vector<std::byte> b(77, std::byte{0x5a});
  const uint64_t h = hash64(b);
  EXPECT_NE(hash64(b, 1), h);
  for (size_t i = 0; i < b.size(); ++i) {
    b[i] ^= std::byte{1};
    EXPECT_NE(hash64(b), h) << i;
    b[i] ^= std::byte{1};
  }
  EXPECT_NE(hash64(std::span(b).first(76)), h);
}

}  // namespace
}  // namespace ferry
