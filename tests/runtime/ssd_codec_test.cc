// The SSD tier with a codec (SsdTierOptions::codec): every lossless codec gives back every byte
// of random, sparse (ReLU-like) and adversarial data on both I/O mechanisms; a slot takes the
// space it takes raw; sparse data crosses the disk in fewer bytes (measured by the tier's own
// counters); corrupt or truncated data on disk is a kIoError naming the tensor and the chunk.
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "codec/kernels.h"
#include "runtime/ssd_tier.h"
#include "runtime/swap_test_util.h"

namespace ferry {
namespace {

using test::TempDir;

constexpr uint64_t kChunk = 8192;

SsdTierOptions coded_options(const TempDir& dir, SsdIo io, CodecId codec) {
  return SsdTierOptions{.directory = dir.path(),
                        .capacity_bytes = 16 << 20,
                        .checksum = true,
                        .chunk_bytes = kChunk,
                        .queue_depth = 3,
                        .io = io,
                        .codec = codec};
}

std::unique_ptr<SsdTier> make_tier(const SsdTierOptions& options) {
  Result<std::unique_ptr<SsdTier>> tier = SsdTier::create(options);
  EXPECT_TRUE(tier.ok()) << tier.status().message();
  return tier.ok() ? std::move(tier).value() : nullptr;
}

using test::relu_bytes;

std::vector<test::DataCase> data_cases() { return test::codec_data_cases(kChunk); }

class SsdCodecTest : public ::testing::TestWithParam<std::tuple<CodecId, SsdIo>> {};

TEST_P(SsdCodecTest, EveryByteComesBackInTheSpaceItTakesRaw) {
  const auto [codec, io] = GetParam();
  TempDir dir;
  auto tier = make_tier(coded_options(dir, io, codec));
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->io(), io);
  const std::vector<test::DataCase> cases = data_cases();
  std::vector<SwapSlot> slots;
  uint64_t raw_in_use = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    Result<SwapSlot> slot = tier->reserve(static_cast<TensorId>(i), cases[i].bytes.size());
    ASSERT_TRUE(slot.ok()) << slot.status().message();
    Status st = tier->write(*slot, std::span<const std::byte>(cases[i].bytes));
    ASSERT_TRUE(st.ok()) << cases[i].name << ": " << st.message();
    slots.push_back(*slot);
    raw_in_use += align_up(cases[i].bytes.size(), 4096);
  }
  EXPECT_EQ(tier->stats().in_use_bytes, raw_in_use);  // a coded slot takes the space of a raw one
  const uint64_t written = tier->io_stats().disk_bytes_written;
  EXPECT_LE(written, raw_in_use);                       // never more than raw
  // Twice, in reverse: a copy survives any number of reads.
  for (int round = 0; round < 2; ++round) {
    for (size_t i = cases.size(); i-- > 0;) {
      std::vector<std::byte> back(cases[i].bytes.size(), std::byte{0xee});
      Status st = tier->read(slots[i], std::span<std::byte>(back));
      ASSERT_TRUE(st.ok()) << cases[i].name << ": " << st.message();
      ASSERT_TRUE(back == cases[i].bytes) << cases[i].name << " of " << cases[i].bytes.size() << " bytes";
    }
  }
  EXPECT_EQ(tier->io_stats().disk_bytes_written, written);
  EXPECT_EQ(tier->io_stats().disk_bytes_read, 2 * written);  // reads move exactly what was written
  if (codec == CodecId::kNone) EXPECT_EQ(written, raw_in_use);
  else EXPECT_LT(written, raw_in_use);  // the zeros and the sparse cases shrink
}

INSTANTIATE_TEST_SUITE_P(Codecs, SsdCodecTest,
                         ::testing::Combine(::testing::ValuesIn(kLosslessCodecs),
                                            ::testing::Values(SsdIo::kUring, SsdIo::kThreads)),
                         [](const auto& info) {
                           std::string name(to_string(std::get<0>(info.param)));
                           for (char& c : name)
                             if (c == '-' || c == '+') c = '_';
                           return name + (std::get<1>(info.param) == SsdIo::kUring ? "_Uring" : "_Threads");
                         });

// Sparse activations in 64 KiB chunks: each codec that knows zeros writes measurably fewer bytes.
TEST(SsdCodecGainTest, SparseDataCrossesTheDiskInFewerBytes) {
  const std::vector<std::byte> data = relu_bytes(1 << 20, 0.7, 5);
  for (CodecId codec : kLosslessCodecs) {
    TempDir dir;
    SsdTierOptions options = coded_options(dir, SsdIo::kAuto, codec);
    options.chunk_bytes = 64 << 10;
    auto tier = make_tier(options);
    ASSERT_NE(tier, nullptr);
    SwapSlot slot = *tier->reserve(0, data.size());
    ASSERT_TRUE(tier->write(slot, std::span<const std::byte>(data)).ok());
    std::vector<std::byte> back(data.size());
    ASSERT_TRUE(tier->read(slot, std::span<std::byte>(back)).ok());
    EXPECT_TRUE(back == data) << to_string(codec);
    const double ratio = static_cast<double>(tier->io_stats().disk_bytes_written) / static_cast<double>(data.size());
    if (codec == CodecId::kNone) EXPECT_EQ(ratio, 1.0);
    else if (codec == CodecId::kZeroMask || codec == CodecId::kZeroMaskLz4) EXPECT_LT(ratio, 0.4) << to_string(codec);
    else EXPECT_LT(ratio, 0.9) << to_string(codec);
    EXPECT_EQ(tier->io_stats().disk_bytes_read, tier->io_stats().disk_bytes_written) << to_string(codec);
  }
}

// The bytes read back are corrupted (injected): the codec's checksum catches it, as a kIoError
// naming the tensor and the chunk.
TEST(SsdCodecFaultTest, CorruptReadIsAnIoErrorNamingTensorAndChunk) {
  for (SsdIo io : {SsdIo::kUring, SsdIo::kThreads}) {
    for (CodecId codec : {CodecId::kZeroMask, CodecId::kLz4, CodecId::kZstd, CodecId::kZeroMaskLz4}) {
      TempDir dir;
      SsdTierOptions options = coded_options(dir, io, codec);
      options.checksum = false;  // the codec alone must catch it
      // Tensor 0 reads back intact, tensor 1's second chunk (random data: stored raw, 8 KiB) is hit.
      options.fault = SsdFault{.kind = SsdFault::Kind::kCorrupt, .op = SsdFault::Op::kRead, .after_bytes = 3 * 8192};
      auto tier = make_tier(options);
      ASSERT_NE(tier, nullptr);
      std::vector<std::byte> a = test::pattern_bytes(0, 2 * kChunk, 1), b = test::pattern_bytes(1, 3 * kChunk, 1);
      SwapSlot sa = *tier->reserve(0, a.size()), sb = *tier->reserve(1, b.size());
      ASSERT_TRUE(tier->write(sa, std::span<const std::byte>(a)).ok());
      ASSERT_TRUE(tier->write(sb, std::span<const std::byte>(b)).ok());
      std::vector<std::byte> back(a.size());
      ASSERT_TRUE(tier->read(sa, std::span<std::byte>(back)).ok());
      back.resize(b.size());
      Status st = tier->read(sb, std::span<std::byte>(back));
      EXPECT_EQ(st.code(), StatusCode::kIoError) << to_string(codec) << ": " << st.message();
      EXPECT_NE(st.message().find("read of tensor 1, chunk 1 of 3"), std::string::npos) << st.message();
      EXPECT_NE(st.message().find("payload checksum mismatch"), std::string::npos) << st.message();
    }
  }
}

// Without a codec the same fault goes unseen by the medium; checksum mode catches it.
TEST(SsdCodecFaultTest, CorruptReadWithoutCodecIsCaughtByChecksumMode) {
  TempDir dir;
  SsdTierOptions options = coded_options(dir, SsdIo::kAuto, CodecId::kNone);
  options.fault = SsdFault{.kind = SsdFault::Kind::kCorrupt, .op = SsdFault::Op::kRead, .after_bytes = 0};
  auto tier = make_tier(options);
  ASSERT_NE(tier, nullptr);
  std::vector<std::byte> a = test::pattern_bytes(0, 2 * kChunk, 1), back(a.size());
  SwapSlot slot = *tier->reserve(0, a.size());
  ASSERT_TRUE(tier->write(slot, std::span<const std::byte>(a)).ok());
  Status st = tier->read(slot, std::span<std::byte>(back));
  EXPECT_EQ(st.code(), StatusCode::kInternal) << st.message();
  EXPECT_NE(st.message().find("checksum mismatch for tensor 0"), std::string::npos) << st.message();
}

// Sparse data (coded chunks) corrupted and cut in the file itself.
TEST(SsdCodecFaultTest, CorruptOrTruncatedFileIsAnIoError) {
  for (bool truncate : {false, true}) {
    TempDir dir;
    SsdTierOptions options = coded_options(dir, SsdIo::kAuto, CodecId::kZeroMaskLz4);
    options.keep_files_visible = true;
    auto tier = make_tier(options);
    ASSERT_NE(tier, nullptr);
    std::vector<std::byte> a = relu_bytes(4 * kChunk, 0.6, 3), back(a.size());
    ASSERT_TRUE(tier->reserve(9, 4096).ok());  // so tensor 2 is not at offset 0
    SwapSlot slot = *tier->reserve(2, a.size());
    ASSERT_TRUE(tier->write(slot, std::span<const std::byte>(a)).ok());
    int fd = ::open(tier->file_path().c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    if (truncate) {
      ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(slot.offset + 2 * kChunk)), 0);  // chunks 2 and 3 are gone
    } else {
      std::byte b{};
      ASSERT_EQ(::pread(fd, &b, 1, static_cast<off_t>(slot.offset + 2 * kChunk + 100)), 1);
      b ^= std::byte{0x10};
      ASSERT_EQ(::pwrite(fd, &b, 1, static_cast<off_t>(slot.offset + 2 * kChunk + 100)), 1);
    }
    ASSERT_EQ(::fsync(fd), 0);
    ::close(fd);
    Status st = tier->read(slot, std::span<std::byte>(back));
    EXPECT_EQ(st.code(), StatusCode::kIoError) << st.message();
    EXPECT_NE(st.message().find("tensor 2"), std::string::npos) << st.message();
    if (truncate) EXPECT_NE(st.message().find("short read"), std::string::npos) << st.message();
    else EXPECT_NE(st.message().find("chunk 2 of 4"), std::string::npos) << st.message();
  }
}

TEST(SsdCodecTest, LossyCodecAndHugeChunksAreRejected) {
  TempDir dir;
  Result<std::unique_ptr<SsdTier>> lossy = SsdTier::create(coded_options(dir, SsdIo::kAuto, CodecId::kBf16));
  ASSERT_FALSE(lossy.ok());
  EXPECT_EQ(lossy.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(lossy.status().message().find("lossy"), std::string::npos) << lossy.status().message();
  SsdTierOptions huge = coded_options(dir, SsdIo::kAuto, CodecId::kLz4);
  huge.chunk_bytes = 128ull << 20;
  huge.capacity_bytes = 256ull << 20;
  Result<std::unique_ptr<SsdTier>> big = SsdTier::create(huge);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("at most 64.00 MiB"), std::string::npos) << big.status().message();
  EXPECT_EQ(dir.entries(), std::vector<std::string>{});
}

// Per-tensor codecs (tensor_codecs, as a plan's Schedule::ssd_codecs gives them) and codec
// measurement (measure_codecs): each tensor is stored with its own codec and comes back bitwise;
// the disk bytes are each codec's; every lossless codec is measured once per class, whatever the
// class's tensors are stored with, and zeros measure as compressible, random bytes as not.
TEST(SsdCodecPerTensorTest, StoresEachTensorWithItsCodecAndMeasuresEveryClass) {
  for (SsdIo io : {SsdIo::kUring, SsdIo::kThreads}) {
    TempDir dir;
    SsdTierOptions options = coded_options(dir, io, CodecId::kNone);
    options.chunk_bytes = 64 << 10;
    options.tensor_codecs = {CodecId::kNone, CodecId::kZeroMask, CodecId::kLz4,
                             CodecId::kZstd, CodecId::kNone,     CodecId::kZeroMaskLz4};
    options.measure_codecs = true;
    options.tensor_classes = {"random", "zeros", "random", "zeros", "random", "zeros"};
    auto tier = make_tier(options);
    ASSERT_NE(tier, nullptr);
    EXPECT_TRUE(tier->codec_figures().empty());
    std::vector<std::vector<std::byte>> data;
    for (size_t i = 0; i < 6; ++i)
      data.push_back(i % 2 == 0 ? test::pattern_bytes(i, 1 << 20, 7) : std::vector<std::byte>((1 << 20) + 100));
    std::vector<SwapSlot> slots;
    for (size_t i = 0; i < 6; ++i) {
      slots.push_back(*tier->reserve(static_cast<TensorId>(i), data[i].size()));
      Status st = tier->write(slots[i], std::span<const std::byte>(data[i]));
      ASSERT_TRUE(st.ok()) << st.message();
    }
    const std::vector<CodecFigure> figures = tier->codec_figures();
    ASSERT_EQ(figures.size(), 8u) << "4 codecs x 2 classes";
    for (const CodecFigure& f : figures) {
      EXPECT_EQ(f.estimate.samples, 1u) << "each class is measured once";
      EXPECT_GT(f.estimate.encode_bytes_per_s, 0);
      if (f.tensor_class == "zeros") EXPECT_LT(f.estimate.ratio, 0.1) << to_string(f.codec);
      else EXPECT_GT(f.estimate.ratio, 0.99) << to_string(f.codec);
    }
    const uint64_t before = tier->io_stats().disk_bytes_read;
    for (size_t i = 0; i < 6; ++i) {
      std::vector<std::byte> back(data[i].size(), std::byte{1});
      Status st = tier->read(slots[i], std::span<std::byte>(back));
      ASSERT_TRUE(st.ok()) << st.message();
      EXPECT_TRUE(back == data[i]) << "tensor " << i;
    }
    // Random tensors cross whole (raw, or coded chunks that did not shrink, stored raw); zeros,
    // coded, in one 4 KiB block per chunk (17 chunks of 64 KiB each).
    EXPECT_EQ(tier->io_stats().disk_bytes_read - before, 3 * (uint64_t{1} << 20) + 3 * 17 * 4096);
  }
  // A lossy codec is not a plan's per-tensor codec.
  TempDir dir;
  SsdTierOptions options = coded_options(dir, SsdIo::kAuto, CodecId::kNone);
  options.tensor_codecs = {CodecId::kBf16};
  Result<std::unique_ptr<SsdTier>> lossy = SsdTier::create(options);
  ASSERT_FALSE(lossy.ok());
  EXPECT_NE(lossy.status().message().find("lossy"), std::string::npos) << lossy.status().message();
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

// Lossy stashing (SsdTierOptions::lossy_tensors, `--lossy bf16`): a marked tensor comes back with
// every 32-bit word rounded to bfloat16 (round to nearest even) in half the disk bytes, while an
// unmarked one comes back bitwise, with checksum mode on; corrupt lossy data is still an error.
TEST(SsdLossyTest, MarkedTensorsComeBackRoundedInHalfTheBytesOthersExact) {
  for (SsdIo io : {SsdIo::kUring, SsdIo::kThreads}) {
    for (bool measure : {false, true}) {
      TempDir dir;
      SsdTierOptions options = coded_options(dir, io, CodecId::kNone);
      options.measure_codecs = measure;
      options.lossy_tensors = {true, false};
      auto tier = make_tier(options);
      ASSERT_NE(tier, nullptr);
      const std::vector<std::byte> a = relu_bytes(5 * kChunk + 12, 0.0, 11), b = test::pattern_bytes(1, 3 * kChunk, 2);
      SwapSlot sa = *tier->reserve(0, a.size()), sb = *tier->reserve(1, b.size());
      ASSERT_TRUE(tier->write(sa, std::span<const std::byte>(a)).ok());
      const uint64_t lossy_disk = tier->io_stats().disk_bytes_written;
      ASSERT_TRUE(tier->write(sb, std::span<const std::byte>(b)).ok());
      std::vector<std::byte> back(a.size());
      Status ra = tier->read(sa, std::span<std::byte>(back));
      ASSERT_TRUE(ra.ok()) << ra.message();
      for (uint64_t i = 0; i + 4 <= a.size(); i += 4) {
        uint32_t in = 0, out = 0;
        std::memcpy(&in, a.data() + i, 4);
        std::memcpy(&out, back.data() + i, 4);
        ASSERT_EQ(out, static_cast<uint32_t>(codec_kernels::bf16_round(in)) << 16) << "word " << i / 4;
      }
      EXPECT_NE(back, a);  // it really was rounded
      EXPECT_LE(lossy_disk, a.size() / 2 + 6 * 4096) << "bf16 halves the bytes (4 KiB rounding per chunk aside)";
      back.resize(b.size());
      ASSERT_TRUE(tier->read(sb, std::span<std::byte>(back)).ok());
      EXPECT_EQ(back, b);
    }
  }
  // Corrupt lossy data read back: the frame's checksum catches it.
  TempDir dir;
  SsdTierOptions options = coded_options(dir, SsdIo::kAuto, CodecId::kNone);
  options.checksum = false;
  options.lossy_tensors = {true};
  options.fault = SsdFault{.kind = SsdFault::Kind::kCorrupt, .op = SsdFault::Op::kRead, .after_bytes = 0};
  auto tier = make_tier(options);
  ASSERT_NE(tier, nullptr);
  const std::vector<std::byte> a = relu_bytes(3 * kChunk, 0.0, 3);
  SwapSlot sa = *tier->reserve(0, a.size());
  ASSERT_TRUE(tier->write(sa, std::span<const std::byte>(a)).ok());
  std::vector<std::byte> back(a.size());
  Status st = tier->read(sa, std::span<std::byte>(back));
  EXPECT_EQ(st.code(), StatusCode::kIoError) << st.message();
}

}  // namespace
}  // namespace ferry
