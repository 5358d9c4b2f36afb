#include <gtest/gtest.h>

#include "common/units.h"

namespace ferry {
namespace {

TEST(Units, ParseBytes) {
  EXPECT_EQ(*parse_bytes("123"), 123u);
  EXPECT_EQ(*parse_bytes("6GiB"), 6ull << 30);
  EXPECT_EQ(*parse_bytes("6G"), 6ull << 30);
  EXPECT_EQ(*parse_bytes("512MiB"), 512ull << 20);
  EXPECT_EQ(*parse_bytes("1.5GiB"), 3ull << 29);
  EXPECT_EQ(*parse_bytes("2KB"), 2000u);
  EXPECT_EQ(*parse_bytes("1GB"), 1000000000u);
  EXPECT_EQ(*parse_bytes("7kib"), 7168u);
  for (const char* bad : {"", "GiB", "-5", "12XB", "1e30", "99999999999999999999", "abc"}) {
    Result<uint64_t> r = parse_bytes(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    }
  }
}

TEST(Units, FormatAndCheckedArithmetic) {
  EXPECT_EQ(format_bytes(12), "12 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(3ull << 30), "3.00 GiB");
  EXPECT_FALSE(checked_mul(uint64_t{1} << 40, uint64_t{1} << 30).has_value());
  EXPECT_EQ(*checked_mul(3, 5), 15u);
  EXPECT_FALSE(checked_add(~uint64_t{0}, 1).has_value());
  EXPECT_EQ(align_up(65, 64), 128u);
  EXPECT_EQ(align_up(64, 64), 64u);
}

}  // namespace
}  // namespace ferry
