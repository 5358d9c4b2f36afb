#include "common/host_region.h"

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include <gtest/gtest.h>

#include "common/mapping_probe.h"
#include "common/units.h"

namespace ferry {
namespace {

using test::page_bytes;
using test::resident_pages;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

static_assert(!std::is_copy_constructible_v<HostRegion> && std::is_nothrow_move_constructible_v<HostRegion>);

uintptr_t address(const HostRegion& r) { return reinterpret_cast<uintptr_t>(r.data()); }

// Every page of the region must be writable: a mapping shorter than size() would crash here.
void write_every_page(const HostRegion& r) {
  for (uint64_t i = 0; i < r.size(); i += page_bytes()) r.data()[i] = std::byte{1};
  r.data()[r.size() - 1] = std::byte{1};
}

TEST(HostRegionTest, HasExactSizeAndAlignedBase) {
  const uint64_t big = 3 * kMiB + 100;
  Result<HostRegion> huge = HostRegion::map(big);
  ASSERT_TRUE(huge.ok()) << huge.status().message();
  EXPECT_EQ(huge->size(), big);
  EXPECT_EQ(huge->base_alignment(), 2 * kMiB);  // large enough for huge pages
  EXPECT_EQ(address(*huge) % (2 * kMiB), 0u);
  write_every_page(*huge);

  Result<HostRegion> small = HostRegion::map(64 * kKiB);  // below one huge page
  ASSERT_TRUE(small.ok()) << small.status().message();
  EXPECT_EQ(small->base_alignment(), page_bytes());
  EXPECT_EQ(address(*small) % page_bytes(), 0u);

  Result<HostRegion> plain = HostRegion::map(4 * kMiB, {.huge_pages = false});
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_EQ(plain->base_alignment(), page_bytes());
  write_every_page(*plain);

  Result<HostRegion> coarse = HostRegion::map(64 * kKiB + 1, {.min_alignment = 1 * kMiB});
  ASSERT_TRUE(coarse.ok()) << coarse.status().message();
  EXPECT_EQ(coarse->base_alignment(), 1 * kMiB);
  EXPECT_EQ(address(*coarse) % (1 * kMiB), 0u);
  write_every_page(*coarse);
}

class PrefaultTest : public ::testing::TestWithParam<PrefaultMethod> {};

TEST_P(PrefaultTest, PrefaultedRegionIsResidentAndLazyOneIsNot) {
  const uint64_t bytes = 8 * kMiB + 4 * kKiB;
  Result<HostRegion> region = HostRegion::map(bytes, {.prefault = GetParam()});
  ASSERT_TRUE(region.ok()) << region.status().message();
  const int64_t pages = static_cast<int64_t>((bytes + page_bytes() - 1) / page_bytes());
  const int64_t resident = resident_pages(region->data(), bytes);
  if (GetParam() == PrefaultMethod::kNone) {
    EXPECT_EQ(resident, 0);
    EXPECT_EQ(region->prefault_seconds(), 0.0);
  } else {
    EXPECT_EQ(resident, pages);
    EXPECT_GT(region->prefault_seconds(), 0.0);
  }
  // Pre-faulting must not have changed the contents: a fresh region reads as zeros.
  const std::byte* data = region->data();
  for (uint64_t i = 0; i < bytes; i += 511) ASSERT_EQ(data[i], std::byte{0}) << i;
}

INSTANTIATE_TEST_SUITE_P(Methods, PrefaultTest,
                         ::testing::Values(PrefaultMethod::kNone, PrefaultMethod::kTouch,
                                           PrefaultMethod::kPopulate),
                         [](const ::testing::TestParamInfo<PrefaultMethod>& info) {
                           switch (info.param) {
                             case PrefaultMethod::kNone:
                               return std::string("None");
                             case PrefaultMethod::kTouch:
                               return std::string("Touch");
                             case PrefaultMethod::kPopulate:
                               return std::string("Populate");
                           }
                           return std::string("Unknown");
                         });

// Two touch threads (4 asked for, capped to one per 64 MiB), and a size that is not a multiple
// of the per-thread chunk, so the second thread's chunk is short; every page must be faulted.
TEST(HostRegionTest, ParallelTouchFaultsEveryPage) {
  const uint64_t bytes = 130 * kMiB + 12 * kKiB;
  for (bool huge_pages : {true, false}) {
    Result<HostRegion> region =
        HostRegion::map(bytes, {.prefault = PrefaultMethod::kTouch, .prefault_threads = 4, .huge_pages = huge_pages});
    ASSERT_TRUE(region.ok()) << region.status().message();
    EXPECT_EQ(resident_pages(region->data(), bytes), static_cast<int64_t>((bytes + page_bytes() - 1) / page_bytes()))
        << "huge_pages " << huge_pages;
  }
}

// 1 PiB is beyond this machine's memory and beyond the 47-bit address space the kernel hands out
// by default, so even with the memory check broken the mmap fails and nothing is faulted.
TEST(HostRegionTest, RegionThatCannotBeObtainedIsOutOfMemoryWithTheNumbers) {
  const uint64_t too_much = 1ull << 50;
  // `reason` says which check must refuse the region.
  auto expect_refused = [&](const HostRegionOptions& options, const std::string& name, const std::string& reason) {
    Result<HostRegion> region = HostRegion::map(too_much, options);
    ASSERT_FALSE(region.ok());
    EXPECT_EQ(region.status().code(), StatusCode::kOutOfMemory);
    const std::string& msg = region.status().message();
    for (const std::string& s : {std::to_string(too_much), format_bytes(too_much), name, reason})
      EXPECT_NE(msg.find(s), std::string::npos) << s << " missing from: " << msg;
  };
  expect_refused({.prefault = PrefaultMethod::kTouch}, "'region'", "MemAvailable");
  expect_refused({.name = "activations", .prefault = PrefaultMethod::kPopulate}, "'activations'", "MemAvailable");
  expect_refused({.prefault = PrefaultMethod::kTouch, .check_available_memory = false}, "'region'", "mmap");
  expect_refused({.prefault = PrefaultMethod::kNone}, "'region'", "mmap");  // a lazy region is not checked
}

TEST(HostRegionTest, InvalidArgumentsAreRejected) {
  Result<HostRegion> empty = HostRegion::map(0, {.name = "scratch"});
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(empty.status().message().find("'scratch'"), std::string::npos) << empty.status().message();

  Result<HostRegion> odd = HostRegion::map(1 * kMiB, {.min_alignment = 48});
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(odd.status().message().find("48"), std::string::npos) << odd.status().message();
}

TEST(HostRegionTest, MoveTransfersOwnershipAndDestructionUnmaps) {
  Result<HostRegion> created = HostRegion::map(2 * kMiB);
  ASSERT_TRUE(created.ok()) << created.status().message();
  std::byte* data = created->data();
  data[123] = std::byte{42};

  HostRegion a = std::move(*created);
  EXPECT_EQ(created->data(), nullptr);  // moved-from holds nothing and unmaps nothing
  EXPECT_EQ(created->size(), 0u);
  EXPECT_EQ(a.data(), data);
  EXPECT_EQ(a.size(), 2 * kMiB);
  EXPECT_EQ(a.data()[123], std::byte{42});

  Result<HostRegion> other = HostRegion::map(1 * kMiB);
  ASSERT_TRUE(other.ok()) << other.status().message();
  std::byte* other_data = other->data();
  a = std::move(*other);  // a's old region is unmapped by the assignment
  EXPECT_EQ(resident_pages(data, 2 * kMiB), -1);
  EXPECT_EQ(a.data(), other_data);
  EXPECT_GT(resident_pages(other_data, 1 * kMiB), 0);
  { HostRegion gone = std::move(a); }
  EXPECT_EQ(resident_pages(other_data, 1 * kMiB), -1);
  EXPECT_EQ(a.data(), nullptr);
}

}  // namespace
}  // namespace ferry
