// The codec side of the cost model on synthetic estimates: the pipeline formula, the per-direction
// prediction, the automatic choice (bandwidth, ratio, lossy opt-in, margin, weights), and the
// online statistics that feed it.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "codec/choice.h"
#include "codec/stats.h"
#include "test_data.h"

namespace ferry {
namespace {

constexpr double kGB = 1e9;

TEST(CodecPipeline, MaxPlusFillAndDrain) {
  EXPECT_DOUBLE_EQ(pipelined_seconds(2, 3, 1), 5);      // one chunk: nothing overlaps
  EXPECT_DOUBLE_EQ(pipelined_seconds(2, 3, 4), 3.5);    // 3 + 2/4
  EXPECT_DOUBLE_EQ(pipelined_seconds(3, 2, 4), 3.5);    // symmetric
  EXPECT_NEAR(pipelined_seconds(2, 3, 1000000), 3, 1e-5);
  EXPECT_DOUBLE_EQ(pipelined_seconds(0, 3, 8), 3);      // no codec stage
  EXPECT_DOUBLE_EQ(pipelined_seconds(2, 3, 0), 0);      // nothing to move
}

TEST(CodecPipeline, PredictTransferPerDirection) {
  const CodecEstimate e{0.25, 4 * kGB, 8 * kGB, 1};
  const uint64_t bytes = 64ull << 20;  // 64 chunks of 1 MiB
  const TransferPrediction out = predict_transfer(Direction::kSwapOut, bytes, CodecId::kZeroMask, e, 1 * kGB);
  EXPECT_DOUBLE_EQ(out.codec_seconds, bytes / (4 * kGB));
  EXPECT_EQ(out.wire_bytes, bytes / 4);
  EXPECT_DOUBLE_EQ(out.wire_seconds, (bytes / 4) / kGB);
  EXPECT_DOUBLE_EQ(out.total_seconds, out.wire_seconds + out.codec_seconds / 64);  // wire-bound
  const TransferPrediction in = predict_transfer(Direction::kSwapIn, bytes, CodecId::kZeroMask, e, 1 * kGB);
  EXPECT_DOUBLE_EQ(in.codec_seconds, bytes / (8 * kGB));
  const TransferPrediction raw = predict_transfer(Direction::kSwapOut, bytes, CodecId::kNone, CodecEstimate{}, 1 * kGB);
  EXPECT_EQ(raw.codec_seconds, 0);
  EXPECT_EQ(raw.wire_bytes, bytes);
  EXPECT_DOUBLE_EQ(raw.total_seconds, bytes / kGB);
  // A codec too fast to time costs nothing.
  const CodecEstimate instant{0.5, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity(), 1};
  EXPECT_EQ(predict_transfer(Direction::kSwapIn, bytes, CodecId::kLz4, instant, kGB).codec_seconds, 0);
}

// Measured-looking figures: zero-mask fast with a good ratio on ReLU outputs, lz4 slower with a
// better ratio, zstd slower still, bf16 halves at high speed.
std::vector<CodecCandidate> relu_like() {
  return {{CodecId::kZeroMask, {0.53, 6 * kGB, 8 * kGB, 4}},
          {CodecId::kLz4, {0.50, 0.8 * kGB, 3 * kGB, 4}},
          {CodecId::kZstd, {0.42, 0.4 * kGB, 1 * kGB, 4}},
          {CodecId::kBf16, {0.50, 8 * kGB, 10 * kGB, 4}}};
}

TEST(CodecChoiceTest, SlowWirePicksTheCodec) {
  const uint64_t bytes = 256ull << 20;
  const CodecChoice c = choose_codec(bytes, relu_like(), {1.0 * kGB, 1.0 * kGB});
  EXPECT_EQ(c.codec, CodecId::kZeroMask);
  EXPECT_LT(c.weighted_seconds, 0.6 * c.none_weighted_seconds);
  EXPECT_DOUBLE_EQ(c.none_weighted_seconds, 2.0 * bytes / kGB);
  // A very slow wire makes ratio matter more than speed: zstd's 0.42 wins.
  EXPECT_EQ(choose_codec(bytes, relu_like(), {0.1 * kGB, 0.1 * kGB}).codec, CodecId::kZstd);
}

TEST(CodecChoiceTest, FastWireSendsRawBytes) {
  // Host memory at 15 GB/s: no codec keeps up, raw bytes are fastest.
  const CodecChoice c = choose_codec(256ull << 20, relu_like(), {15 * kGB, 15 * kGB});
  EXPECT_EQ(c.codec, CodecId::kNone);
  EXPECT_EQ(c.weighted_seconds, c.none_weighted_seconds);
  EXPECT_EQ(c.swap_out.codec_seconds, 0);
}

TEST(CodecChoiceTest, LossyOnlyWhenAsked) {
  std::vector<CodecCandidate> cands = relu_like();
  cands[0].estimate.ratio = 0.9;  // dense tensor: zero-mask barely helps, bf16 would win
  const WireRates ssd{1.5 * kGB, 1.5 * kGB};
  EXPECT_NE(choose_codec(256ull << 20, cands, ssd).codec, CodecId::kBf16);
  ChoiceOptions lossy;
  lossy.allow_lossy = true;
  EXPECT_EQ(choose_codec(256ull << 20, cands, ssd, lossy).codec, CodecId::kBf16);
  // On a sparse tensor where zero-mask keeps 0.51 of the bytes and bf16 0.50, both wire-bound:
  // bf16 would be 2% faster, within the margin, so the lossless codec is kept.
  std::vector<CodecCandidate> sparse = relu_like();
  sparse[0].estimate.ratio = 0.51;
  EXPECT_EQ(choose_codec(256ull << 20, sparse, ssd, lossy).codec, CodecId::kZeroMask);
  sparse[0].estimate.ratio = 0.56;  // 11% more bytes: bf16
  EXPECT_EQ(choose_codec(256ull << 20, sparse, ssd, lossy).codec, CodecId::kBf16);
}

TEST(CodecChoiceTest, MarginKeepsNoneForSmallGains) {
  // A codec predicted 3% faster than raw bytes is not worth its CPU: none. At 10% it is.
  const double wire = 1 * kGB;
  std::vector<CodecCandidate> c3 = {{CodecId::kLz4, {0.97, std::numeric_limits<double>::infinity(),
                                                     std::numeric_limits<double>::infinity(), 1}}};
  EXPECT_EQ(choose_codec(64ull << 20, c3, {wire, wire}).codec, CodecId::kNone);
  c3[0].estimate.ratio = 0.90;
  EXPECT_EQ(choose_codec(64ull << 20, c3, {wire, wire}).codec, CodecId::kLz4);
  ChoiceOptions strict;
  strict.min_gain = 0.2;
  EXPECT_EQ(choose_codec(64ull << 20, c3, {wire, wire}, strict).codec, CodecId::kNone);
  EXPECT_EQ(choose_codec(0, c3, {wire, wire}).codec, CodecId::kNone);  // nothing to move
}

TEST(CodecChoiceTest, WeightsAndAsymmetricWire) {
  // Encode is slow, decode fast: worth it only when swap-out time does not count.
  const std::vector<CodecCandidate> c = {{CodecId::kZstd, {0.3, 0.2 * kGB, 5 * kGB, 1}}};
  const WireRates wire{1 * kGB, 1 * kGB};
  EXPECT_EQ(choose_codec(256ull << 20, c, wire).codec, CodecId::kNone);
  ChoiceOptions in_only;
  in_only.swap_out_weight = 0;
  EXPECT_EQ(choose_codec(256ull << 20, c, wire, in_only).codec, CodecId::kZstd);
  // A disk that writes fast but reads slowly (cpu-local: 4.1 vs 1.8 GB/s) favours shrinking reads.
  const std::vector<CodecCandidate> z = {{CodecId::kZeroMask, {0.5, 3 * kGB, 8 * kGB, 1}}};
  const CodecChoice pick = choose_codec(256ull << 20, z, {4.1 * kGB, 1.77 * kGB});
  EXPECT_EQ(pick.codec, CodecId::kZeroMask);
  EXPECT_GT(pick.swap_out.total_seconds, pick.swap_out.wire_seconds);  // encode-bound out
  EXPECT_LT(pick.swap_in.total_seconds, 256.0 * (1 << 20) / (1.77 * kGB));
}

TEST(CodecStatsTest, DecayedAverages) {
  CodecStats all(1.0);
  all.record("relu", CodecId::kLz4, {1000, 500, 1e-6, 2e-6});
  all.record("relu", CodecId::kLz4, {3000, 300, 3e-6, 1e-6});
  std::optional<CodecEstimate> e = all.estimate("relu", CodecId::kLz4);
  ASSERT_TRUE(e);
  EXPECT_DOUBLE_EQ(e->ratio, 800.0 / 4000.0);  // byte-weighted
  EXPECT_DOUBLE_EQ(e->encode_bytes_per_s, 4000 / 4e-6);
  EXPECT_DOUBLE_EQ(e->decode_bytes_per_s, 4000 / 3e-6);
  EXPECT_EQ(e->samples, 2u);
  CodecStats last(0.0);
  last.record("relu", CodecId::kLz4, {1000, 500, 1e-6, 2e-6});
  last.record("relu", CodecId::kLz4, {3000, 300, 3e-6, 1e-6});
  EXPECT_DOUBLE_EQ(last.estimate("relu", CodecId::kLz4)->ratio, 0.1);
  CodecStats half(0.5);
  half.record("x", CodecId::kZstd, {1000, 1000, 1, 1});
  half.record("x", CodecId::kZstd, {1000, 0, 1, 1});
  EXPECT_DOUBLE_EQ(half.estimate("x", CodecId::kZstd)->ratio, 500.0 / 1500.0);
  half.record("x", CodecId::kZstd, {0, 0, 0, 0});  // ignored
  EXPECT_EQ(half.estimate("x", CodecId::kZstd)->samples, 2u);
}

TEST(CodecStatsTest, ClassesAndUnmeasured) {
  CodecStats s;
  EXPECT_FALSE(s.estimate("conv", CodecId::kLz4));
  s.record("conv", CodecId::kLz4, {10, 5, 0, 0});
  s.record("relu", CodecId::kZeroMask, {10, 5, 1, 1});
  EXPECT_EQ(s.classes(), (std::vector<std::string>{"conv", "relu"}));
  EXPECT_EQ(s.unmeasured("conv", kLosslessCodecs),
            (std::vector<CodecId>{CodecId::kNone, CodecId::kZeroMask, CodecId::kZstd, CodecId::kZeroMaskLz4}));
  EXPECT_TRUE(std::isinf(s.estimate("conv", CodecId::kLz4)->encode_bytes_per_s));  // too fast to time
}

TEST(CodecStatsTest, MeasureFeedsTheChoice) {
  CodecContext ctx;
  CodecStats stats;
  const codec_test::Bytes relu = codec_test::sparse_floats(4 << 20, 0.5, 43);
  for (CodecId c : kAllCodecs) {
    Result<CodecSample> s = measure_codec(ctx, c, relu);
    ASSERT_TRUE(s.ok()) << s.status().message();
    EXPECT_EQ(s->input_bytes, relu.size());
    EXPECT_LE(s->encoded_bytes, max_encoded_bytes(relu.size()));
    EXPECT_GT(s->encode_seconds, 0);
    stats.record("relu", c, *s);
  }
  // Half the words are zero: zero-mask's measured ratio is its exact size, 1/32 + 1/2.
  EXPECT_NEAR(stats.estimate("relu", CodecId::kZeroMask)->ratio, 0.5 + 1.0 / 32, 0.01);
  EXPECT_NEAR(stats.estimate("relu", CodecId::kNone)->ratio, 1.0, 1e-4);
  // On a wire slow enough for any codec to pay, something other than none is picked; bf16 only
  // when allowed.
  const CodecChoice pick = choose_codec(relu.size(), stats, "relu", {0.05 * kGB, 0.05 * kGB});
  EXPECT_NE(pick.codec, CodecId::kNone);
  EXPECT_FALSE(is_lossy(pick.codec));
}

}  // namespace
}  // namespace ferry
