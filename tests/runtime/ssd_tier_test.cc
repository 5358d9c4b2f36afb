// The SSD tier: bytes survive the round trip through the file (and are really in the file, at the
// slot's offset), both I/O mechanisms agree, injected disk faults become clear errors, and nothing
// is left in the user's directory, whatever happened.
#include "runtime/ssd_tier.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/swap_test_util.h"

namespace ferry {
namespace {

using test::TempDir;
using test::TensorSet;

std::unique_ptr<Backend> cpu_backend() {
  Result<std::unique_ptr<Backend>> be = make_backend("cpu");
  EXPECT_TRUE(be.ok()) << be.status().message();
  return std::move(be).value();
}

// Small chunks and a shallow queue, so that even small tensors take several pipelined requests.
SsdTierOptions small_options(const TempDir& dir, SsdIo io) {
  return SsdTierOptions{.directory = dir.path(),
                        .capacity_bytes = 16 << 20,
                        .checksum = true,
                        .chunk_bytes = 8192,
                        .queue_depth = 3,
                        .io = io};
}

std::unique_ptr<SsdTier> make_tier(const SsdTierOptions& options) {
  Result<std::unique_ptr<SsdTier>> tier = SsdTier::create(options);
  EXPECT_TRUE(tier.ok()) << tier.status().message();
  return tier.ok() ? std::move(tier).value() : nullptr;
}

// The bytes of the tier's file at [offset, offset + bytes), read with ordinary buffered I/O.
std::vector<std::byte> file_bytes(const std::string& path, uint64_t offset, uint64_t bytes) {
  std::vector<std::byte> out(bytes);
  int fd = ::open(path.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0) << path;
  if (fd < 0) return {};
  EXPECT_EQ(::pread(fd, out.data(), bytes, static_cast<off_t>(offset)), static_cast<ssize_t>(bytes));
  ::close(fd);
  return out;
}

class SsdTierIoTest : public ::testing::TestWithParam<SsdIo> {};

TEST_P(SsdTierIoTest, EveryByteComesBackAndIsInTheFile) {
  TempDir dir;
  auto backend = cpu_backend();
  SsdTierOptions options = small_options(dir, GetParam());
  options.keep_files_visible = true;
  auto tier = make_tier(options);
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->io(), GetParam());
  EXPECT_EQ(tier->kind(), Tier::kSsd);
  TensorSet set(*backend, test::edge_and_random_sizes(20, 60000, 2), /*seed=*/2);
  set.upload();

  std::vector<SwapSlot> slots;
  uint64_t expected_in_use = 0;
  for (size_t i = 0; i < set.size(); ++i) {
    Result<SwapSlot> slot = tier->reserve(static_cast<TensorId>(i), set.bytes(i));
    ASSERT_TRUE(slot.ok()) << slot.status().message();
    EXPECT_EQ(slot->offset % 4096, 0u);  // every request meets O_DIRECT's alignment
    Status st = tier->write(*slot, *backend, set.ptr(i));
    ASSERT_TRUE(st.ok()) << st.message();
    slots.push_back(*slot);
    expected_in_use += align_up(set.bytes(i), 4096);  // an empty tensor reserves nothing
  }
  // The bytes are on disk where the slot says, and the padding of a partial block is zero.
  for (size_t i = 0; i < set.size(); ++i) {
    const uint64_t padded = align_up(set.bytes(i), 4096);
    std::vector<std::byte> on_disk = file_bytes(tier->file_path(), slots[i].offset, padded);
    ASSERT_TRUE(std::equal(set.expected(i).begin(), set.expected(i).end(), on_disk.begin())) << "tensor " << i;
    ASSERT_TRUE(std::all_of(on_disk.begin() + set.bytes(i), on_disk.end(), [](std::byte b) { return b == std::byte{0}; }))
        << "tensor " << i;
  }
  set.scribble();
  for (size_t i = 0; i < set.size(); ++i) {
    Status st = tier->read(slots[i], *backend, set.ptr(i));
    ASSERT_TRUE(st.ok()) << st.message();
  }
  EXPECT_EQ(set.first_mismatch(), "");

  TierStats s = tier->stats();
  EXPECT_EQ(s.in_use_bytes, expected_in_use);
  EXPECT_EQ(s.bytes_written, set.total_bytes());
  EXPECT_EQ(s.bytes_read, set.total_bytes());
  EXPECT_EQ(s.num_failed_transfers, 0u);
}

TEST_P(SsdTierIoTest, TransfersOnTwoThreadsShareTheChannels) {
  // Four threads, two channels: transfers wait for a channel and never mix staging buffers.
  TempDir dir;
  auto backend = cpu_backend();
  SsdTierOptions options = small_options(dir, GetParam());
  options.channels = 2;
  auto tier = make_tier(options);
  ASSERT_NE(tier, nullptr);
  TensorSet set(*backend, test::edge_and_random_sizes(29, 50000, 3), /*seed=*/3);
  set.upload();
  std::vector<SwapSlot> slots;
  for (size_t i = 0; i < set.size(); ++i) slots.push_back(*tier->reserve(static_cast<TensorId>(i), set.bytes(i)));

  auto each_of_mine = [&](int who, auto&& fn) {
    for (size_t i = static_cast<size_t>(who); i < set.size(); i += 4) fn(i);
  };
  std::vector<std::thread> threads;
  std::vector<Status> errors(4);
  for (int who = 0; who < 4; ++who)
    threads.emplace_back([&, who] {
      each_of_mine(who, [&](size_t i) {
        Status st = tier->write(slots[i], *backend, set.ptr(i));
        if (!st.ok() && errors[who].ok()) errors[who] = st;
      });
    });
  for (auto& t : threads) t.join();
  for (const Status& st : errors) ASSERT_TRUE(st.ok()) << st.message();
  set.scribble();
  threads.clear();
  for (int who = 0; who < 4; ++who)
    threads.emplace_back([&, who] {
      each_of_mine(who, [&](size_t i) {
        Status st = tier->read(slots[i], *backend, set.ptr(i));
        if (!st.ok() && errors[who].ok()) errors[who] = st;
      });
    });
  for (auto& t : threads) t.join();
  for (const Status& st : errors) ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(set.first_mismatch(), "");
}

// Note [In-place transfers]: a tensor at a 4 KiB-aligned address moves its whole blocks straight
// between its memory and the file, the rest of it (and every misaligned tensor) through staging;
// the file holds the same bytes either way, so a copy written one way reads back the other, and a
// read never touches the bytes after the tensor's end.
TEST_P(SsdTierIoTest, AlignedTensorsMoveInPlaceAndTheFileIsTheSameEitherWay) {
  TempDir dir;
  auto backend = cpu_backend();
  struct Case {
    uint64_t offset;  // in the region (page-aligned base)
    uint64_t bytes;
    uint64_t in_place;  // bytes that move in place: every whole 4 KiB block of each 8 KiB chunk
  };
  const std::vector<Case> cases = {
      {0, 5 * 4096, 5 * 4096},           // whole blocks only (three chunks, the last one block)
      {8 * 4096, 3 * 4096 + 100, 3 * 4096},  // a tail in the last chunk
      {16 * 4096, 2 * 8192 + 5, 2 * 8192},   // whole chunks, then a chunk that is all tail
      {24 * 4096, 100, 0},               // a tail only
      {28 * 4096 + 64, 20000, 0},        // misaligned: all staged
  };
  const uint64_t region_bytes = 57 * 4096;
  const std::vector<std::byte> junk(8 * 4096, std::byte{0xA5});
  Result<DevicePtr> region = backend->allocate(region_bytes);
  ASSERT_TRUE(region.ok()) << region.status().message();
  ASSERT_NE(backend->direct_io_address(*region), nullptr);
  ASSERT_EQ(reinterpret_cast<uintptr_t>(backend->direct_io_address(*region)) % 4096, 0u);
  std::vector<std::vector<std::byte>> expected;
  for (size_t i = 0; i < cases.size(); ++i) {
    expected.push_back(test::pattern_bytes(i, cases[i].bytes, 11));
    ASSERT_TRUE(backend->copy_to_device(*region + cases[i].offset, expected[i]).ok());
  }
  for (bool in_place : {true, false}) {
    SCOPED_TRACE(in_place ? "in place" : "staged");
    SsdTierOptions options = small_options(dir, GetParam());
    options.in_place = in_place;
    options.keep_files_visible = true;
    auto tier = make_tier(options);
    ASSERT_NE(tier, nullptr);
    uint64_t expected_in_place = 0;
    std::vector<SwapSlot> slots;
    for (size_t i = 0; i < cases.size(); ++i) {
      slots.push_back(*tier->reserve(static_cast<TensorId>(i), cases[i].bytes));
      Status st = tier->write(slots[i], *backend, *region + cases[i].offset);
      ASSERT_TRUE(st.ok()) << st.message();
      expected_in_place += in_place ? cases[i].in_place : 0;
      EXPECT_EQ(tier->io_stats().in_place_bytes_written, expected_in_place) << "tensor " << i;
      // On disk: the bytes, then zeros to the block's end, whichever way they went.
      const uint64_t padded = align_up(cases[i].bytes, 4096);
      std::vector<std::byte> on_disk = file_bytes(tier->file_path(), slots[i].offset, padded);
      EXPECT_TRUE(std::equal(expected[i].begin(), expected[i].end(), on_disk.begin())) << "tensor " << i;
      EXPECT_TRUE(std::all_of(on_disk.begin() + static_cast<std::ptrdiff_t>(cases[i].bytes), on_disk.end(),
                              [](std::byte b) { return b == std::byte{0}; }))
          << "tensor " << i;
    }
    // Into two other places, one aligned and one not (a copy written in place read back staged and
    // the other way round), with a sentinel after the end: the copy arrives whole and nothing
    // after it changes.
    for (uint64_t place : {40 * 4096ull, 48 * 4096ull + 64}) {
      for (size_t i = 0; i < cases.size(); ++i) {
        ASSERT_TRUE(backend->copy_to_device(*region + place, junk).ok());
        Status st = tier->read(slots[i], *backend, *region + place);
        ASSERT_TRUE(st.ok()) << st.message();
        std::vector<std::byte> got(cases[i].bytes + 64);
        ASSERT_TRUE(backend->copy_to_host(got, *region + place).ok());
        EXPECT_TRUE(std::equal(expected[i].begin(), expected[i].end(), got.begin())) << "tensor " << i;
        EXPECT_TRUE(std::all_of(got.begin() + static_cast<std::ptrdiff_t>(cases[i].bytes), got.end(),
                                [](std::byte b) { return b == std::byte{0xA5}; }))
            << "tensor " << i << " at " << place << ": bytes after its end were overwritten";
      }
    }
    // And back into their own places.
    uint64_t read_in_place = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      const uint64_t before = tier->io_stats().in_place_bytes_read;
      ASSERT_TRUE(tier->read(slots[i], *backend, *region + cases[i].offset).ok());
      read_in_place += tier->io_stats().in_place_bytes_read - before;
      std::vector<std::byte> got(cases[i].bytes);
      ASSERT_TRUE(backend->copy_to_host(got, *region + cases[i].offset).ok());
      EXPECT_EQ(got, expected[i]) << "tensor " << i;
    }
    EXPECT_EQ(read_in_place, expected_in_place);
  }
  backend->free(*region);
}

// An injected corrupt write in place corrupts what reaches the disk, never the tensor itself.
TEST(SsdTierTest, ACorruptWriteInPlaceLeavesTheTensorAlone) {
  TempDir dir;
  auto backend = cpu_backend();
  SsdTierOptions options = small_options(dir, SsdIo::kAuto);
  options.fault = SsdFault{.kind = SsdFault::Kind::kCorrupt, .op = SsdFault::Op::kWrite, .after_bytes = 0};
  auto tier = make_tier(options);
  ASSERT_NE(tier, nullptr);
  Result<DevicePtr> region = backend->allocate(4 * 4096);
  ASSERT_TRUE(region.ok());
  const std::vector<std::byte> src = test::pattern_bytes(1, 4 * 4096, 12);
  ASSERT_TRUE(backend->copy_to_device(*region, src).ok());
  SwapSlot slot = *tier->reserve(1, src.size());
  ASSERT_TRUE(tier->write(slot, *backend, *region).ok());
  EXPECT_EQ(tier->io_stats().in_place_bytes_written, 0u);  // each corrupted block went through staging
  std::vector<std::byte> now(src.size());
  ASSERT_TRUE(backend->copy_to_host(now, *region).ok());
  EXPECT_EQ(now, src);
  Status st = tier->read(slot, *backend, *region);
  EXPECT_EQ(st.code(), StatusCode::kInternal) << st.message();
  EXPECT_NE(st.message().find("checksum mismatch for tensor 1"), std::string::npos) << st.message();
  backend->free(*region);
}

INSTANTIATE_TEST_SUITE_P(Io, SsdTierIoTest, ::testing::Values(SsdIo::kUring, SsdIo::kThreads),
                         [](const auto& info) { return info.param == SsdIo::kUring ? "Uring" : "Threads"; });

TEST(SsdTierTest, FilesAreUnlinkedAtOnceByDefault) {
  TempDir dir;
  auto tier = make_tier(small_options(dir, SsdIo::kAuto));
  ASSERT_NE(tier, nullptr);
  EXPECT_NE(tier->io(), SsdIo::kAuto);  // resolved to a mechanism
  EXPECT_EQ(tier->directory().rfind(dir.path() + "/ferry-swap-", 0), 0u) << tier->directory();
  EXPECT_EQ(dir.entries(), std::vector<std::string>{});  // nothing visible even while it lives
  std::vector<std::byte> src = test::pattern_bytes(0, 10000, 1), dst(10000);
  SwapSlot slot = *tier->reserve(0, src.size());
  ASSERT_TRUE(tier->write(slot, std::span<const std::byte>(src)).ok());
  ASSERT_TRUE(tier->read(slot, std::span<std::byte>(dst)).ok());
  EXPECT_EQ(dst, src);
}

TEST(SsdTierTest, VisibleFilesAreRemovedOnDestruction) {
  TempDir dir;
  SsdTierOptions options = small_options(dir, SsdIo::kAuto);
  options.keep_files_visible = true;
  auto tier = make_tier(options);
  ASSERT_NE(tier, nullptr);
  EXPECT_TRUE(std::filesystem::exists(tier->file_path()));
  EXPECT_EQ(std::filesystem::path(tier->file_path()).parent_path(), std::filesystem::path(tier->directory()));
  tier.reset();
  EXPECT_EQ(dir.entries(), std::vector<std::string>{});
}

TEST(SsdTierTest, ChecksumCatchesACorruptedFile) {
  TempDir dir;
  SsdTierOptions options = small_options(dir, SsdIo::kAuto);
  options.keep_files_visible = true;
  auto tier = make_tier(options);
  ASSERT_NE(tier, nullptr);
  std::vector<std::byte> src = test::pattern_bytes(5, 20000, 6), dst(20000);
  ASSERT_TRUE(tier->reserve(4, 4096).ok());  // so tensor 5 is not at offset 0
  SwapSlot slot = *tier->reserve(5, src.size());
  ASSERT_TRUE(tier->write(slot, std::span<const std::byte>(src)).ok());

  int fd = ::open(tier->file_path().c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  const std::byte flipped = src[12345] ^ std::byte{0x01};
  ASSERT_EQ(::pwrite(fd, &flipped, 1, static_cast<off_t>(slot.offset + 12345)), 1);
  ASSERT_EQ(::fsync(fd), 0);
  ::close(fd);

  Status st = tier->read(slot, std::span<std::byte>(dst));
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_NE(st.message().find("checksum mismatch for tensor 5"), std::string::npos) << st.message();
}

// ---------------------------------------------------------------------------------------------
// Faults

struct FaultCase {
  const char* name;
  SsdFault::Kind kind;
  SsdFault::Op op;
  const char* expected_text;  // what the message must say about the cause
};

class SsdTierFaultTest : public ::testing::TestWithParam<std::tuple<FaultCase, SsdIo>> {};

TEST_P(SsdTierFaultTest, FaultIsAClearIoErrorAndNothingIsLeftBehind) {
  const auto& [fault, io] = GetParam();
  TempDir dir;
  auto backend = cpu_backend();
  SsdTierOptions options = small_options(dir, io);
  options.keep_files_visible = true;  // so that cleanup on destruction is what gets tested
  // Chunks are 8 KiB: tensors 0 and 1 (16 KiB each) fit; tensor 2's second chunk crosses the
  // threshold halfway, so a short transfer moves 4096 of its 8192 bytes.
  options.fault = SsdFault{.kind = fault.kind, .op = fault.op, .after_bytes = 2 * 16384 + 8192 + 4096};
  auto tier = make_tier(options);
  ASSERT_NE(tier, nullptr);
  const std::string file = tier->file_path();
  TensorSet set(*backend, {16384, 16384, 16384, 16384}, /*seed=*/4);
  set.upload();

  std::vector<SwapSlot> slots;
  Status failed;
  size_t failed_at = set.size();
  for (size_t i = 0; i < set.size(); ++i) {
    slots.push_back(*tier->reserve(static_cast<TensorId>(i), set.bytes(i)));
    Status st = tier->write(slots[i], *backend, set.ptr(i));
    if (!st.ok() && failed.ok()) failed = st, failed_at = i;
  }
  if (fault.op == SsdFault::Op::kRead) {
    ASSERT_TRUE(failed.ok()) << failed.message();
    for (size_t i = 0; i < set.size(); ++i) {
      Status st = tier->read(slots[i], *backend, set.ptr(i));
      if (!st.ok() && failed.ok()) failed = st, failed_at = i;
    }
  }
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed_at, 2u);
  EXPECT_EQ(failed.code(), StatusCode::kIoError);
  const std::string& msg = failed.message();
  EXPECT_NE(msg.find(fault.expected_text), std::string::npos) << msg;
  EXPECT_NE(msg.find("tensor 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find(file), std::string::npos) << msg;
  EXPECT_NE(msg.find(fmt::format("offset {}", slots[2].offset + 8192)), std::string::npos) << msg;
  EXPECT_NE(msg.find("8192"), std::string::npos) << msg;
  EXPECT_NE(msg.find("injected"), std::string::npos) << msg;
  if (fault.op == SsdFault::Op::kWrite) {
    EXPECT_TRUE(tier->holds_copy(slots[1]));
    EXPECT_FALSE(tier->holds_copy(slots[2]));  // a failed write leaves no copy to read back
    Status st = tier->read(slots[2], *backend, set.ptr(2));
    EXPECT_EQ(st.code(), StatusCode::kInternal) << st.message();
  }
  EXPECT_GE(tier->stats().num_failed_transfers, 1u);

  tier.reset();
  EXPECT_EQ(dir.entries(), std::vector<std::string>{});
}

INSTANTIATE_TEST_SUITE_P(
    Faults, SsdTierFaultTest,
    ::testing::Combine(
        ::testing::Values(
            FaultCase{"DiskFull", SsdFault::Kind::kNoSpace, SsdFault::Op::kWrite, "No space left on device (ENOSPC"},
            FaultCase{"WriteEio", SsdFault::Kind::kIoError, SsdFault::Op::kWrite, "Input/output error (EIO"},
            FaultCase{"ShortWrite", SsdFault::Kind::kShortTransfer, SsdFault::Op::kWrite,
                      "short write of tensor 2: 4096 of 8192 bytes"},
            FaultCase{"ReadEio", SsdFault::Kind::kIoError, SsdFault::Op::kRead, "Input/output error (EIO"},
            FaultCase{"ShortRead", SsdFault::Kind::kShortTransfer, SsdFault::Op::kRead,
                      "short read of tensor 2: 4096 of 8192 bytes"}),
        ::testing::Values(SsdIo::kUring, SsdIo::kThreads)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param).name) + (std::get<1>(info.param) == SsdIo::kUring ? "Uring" : "Threads");
    });

// ---------------------------------------------------------------------------------------------
// create()

TEST(SsdTierTest, BadOptionsAreRejectedAndLeaveNothing) {
  TempDir dir;
  auto expect_invalid = [&](SsdTierOptions options, const char* text) {
    Result<std::unique_ptr<SsdTier>> tier = SsdTier::create(options);
    ASSERT_FALSE(tier.ok()) << text;
    EXPECT_EQ(tier.status().code(), StatusCode::kInvalidArgument) << tier.status().message();
    EXPECT_NE(tier.status().message().find(text), std::string::npos) << tier.status().message();
  };
  SsdTierOptions good = small_options(dir, SsdIo::kAuto);
  SsdTierOptions o = good;
  o.chunk_bytes = 5000;
  expect_invalid(o, "chunk_bytes");
  o = good;
  o.queue_depth = 0;
  expect_invalid(o, "queue_depth");
  o = good;
  o.channels = 0;
  expect_invalid(o, "channels");
  o = good;
  o.capacity_bytes = 100;
  expect_invalid(o, "capacity");
  o = good;
  o.directory = dir.path() + "/missing";
  expect_invalid(o, "does not exist");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{});
}

TEST(SsdTierTest, CapacityBeyondTheDiskFailsAtCreationAndCleansUp) {
  TempDir dir;
  for (bool preallocate : {false, true}) {
    SsdTierOptions options = small_options(dir, SsdIo::kAuto);
    options.capacity_bytes = 1ull << 60;  // an exbibyte: no disk here has it
    options.preallocate = preallocate;
    options.keep_files_visible = true;
    Result<std::unique_ptr<SsdTier>> tier = SsdTier::create(options);
    ASSERT_FALSE(tier.ok());
    EXPECT_EQ(tier.status().code(), StatusCode::kIoError) << tier.status().message();
    EXPECT_NE(tier.status().message().find("1152921504606846976 bytes"), std::string::npos)
        << tier.status().message();
    EXPECT_EQ(dir.entries(), std::vector<std::string>{}) << "preallocate " << preallocate;
  }
}

}  // namespace
}  // namespace ferry
