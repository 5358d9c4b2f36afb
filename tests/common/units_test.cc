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

// Above 2^63 the old conversion (llround into a signed 64-bit integer) overflowed: --budget 1e19
// became 8 EiB.
TEST(Units, ParseBytesIsExactUpTo2To64) {
  EXPECT_EQ(*parse_bytes("1e19"), 10000000000000000000ull);
  EXPECT_EQ(*parse_bytes("1.5e19"), 15000000000000000000ull);
  EXPECT_EQ(*parse_bytes("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(*parse_bytes("9TB"), 9000000000000ull);
  for (const char* bad : {"18446744073709551616", "2e19", "1.9e19", "16777216TiB", "1e400"}) {
    Result<uint64_t> r = parse_bytes(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
  }
  EXPECT_NE(parse_bytes("2e19").status().message().find("2^64 - 1"), std::string::npos);
}

TEST(Units, ParseBudgetTakesBytesOrAPercentage) {
  Result<BudgetSpec> bytes = parse_budget("6GiB");
  ASSERT_TRUE(bytes.ok());
  EXPECT_FALSE(bytes->percent.has_value());
  EXPECT_EQ(bytes->resolve(12345), 6ull << 30);
  EXPECT_EQ(bytes->text, "6GiB");
  Result<BudgetSpec> pct = parse_budget("33%");
  ASSERT_TRUE(pct.ok());
  ASSERT_TRUE(pct->percent.has_value());
  EXPECT_EQ(*pct->percent, 33.0);
  EXPECT_EQ(pct->resolve(1000), 330u);
  EXPECT_EQ(pct->resolve(1001), 330u);  // rounded down: never above the share asked for
  EXPECT_EQ(parse_budget("12.5%")->resolve(800), 100u);
  EXPECT_EQ(parse_budget("0.001%")->resolve(10), 1u);  // at least one byte
  EXPECT_EQ(parse_budget("1000%")->resolve(UINT64_MAX / 2), UINT64_MAX);
  EXPECT_EQ(pct->describe(4000), "1.29 KiB (33% of 3.91 KiB)");
  for (const char* bad : {"0", "0%", "-5%", "%", "abc%", "nan%", "inf%", "1001%", "12XB", "", "5 %x"}) {
    Result<BudgetSpec> r = parse_budget(bad);
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
