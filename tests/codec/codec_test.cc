// Frames: every lossless codec gives back every byte (property tests on random, sparse, special
// and adversarial inputs, sizes around chunk boundaries), the size bound holds, streaming and
// out-of-order chunk coding agree with whole-buffer coding, and corrupt or truncated frames are
// rejected with a clear error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "codec/codec.h"
#include "common/checksum.h"
#include "common/hash.h"
#include "test_data.h"

namespace ferry {
namespace {

using codec_test::Bytes;

TEST(CodecNames, RoundTripAndErrors) {
  for (CodecId c : kAllCodecs) EXPECT_EQ(codec_from_string(to_string(c)), c);
  EXPECT_FALSE(codec_from_string("gzip"));
  Result<CodecId> bad = parse_codec("gzip");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("zero-mask+lz4"), std::string::npos) << bad.status().message();
  EXPECT_TRUE(is_lossy(CodecId::kBf16));
  for (CodecId c : kLosslessCodecs) EXPECT_FALSE(is_lossy(c));
}

// The property test: every lossless codec, every input, three chunk sizes.
TEST(CodecFrame, LosslessCodecsRestoreEveryByte) {
  CodecContext ctx;
  for (uint32_t chunk : {64u, 4096u, kDefaultChunkBytes}) {
    const auto inputs = codec_test::round_trip_inputs(chunk == kDefaultChunkBytes ? 4096 * 3 : chunk);
    for (const auto& in : inputs)
      for (CodecId c : kLosslessCodecs) codec_test::expect_round_trip(ctx, c, in.bytes, chunk, in.name);
  }
}

TEST(CodecFrame, LargeRandomInputsAcrossManyChunks) {
  CodecContext ctx;
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 12; ++trial) {
    const size_t n = rng() % (3 << 20);
    const double zeros = static_cast<double>(rng() % 101) / 100.0;
    const Bytes in = trial % 3 == 0 ? codec_test::random_bytes(n, rng()) : codec_test::sparse_floats(n, zeros, rng());
    for (CodecId c : kLosslessCodecs)
      codec_test::expect_round_trip(ctx, c, in, 1u << 18, "trial " + std::to_string(trial));
  }
}

TEST(CodecFrame, IncompressibleDataIsStoredWithinTheBound) {
  CodecContext ctx;
  const uint32_t chunk = 4096;
  const Bytes in = codec_test::random_bytes(10 * chunk + 7, 3);
  for (CodecId c : kAllCodecs) {
    if (c == CodecId::kBf16) continue;  // bf16 always halves the words
    Result<Bytes> frame = encode_frame(ctx, c, in, chunk);
    ASSERT_TRUE(frame.ok());
    // Random bytes do not compress: every chunk is stored, and the frame is exactly the bound.
    EXPECT_EQ(frame->size(), max_encoded_bytes(in.size(), chunk)) << to_string(c);
  }
  EXPECT_EQ(max_encoded_bytes(0, chunk), kFrameHeaderBytes);
  EXPECT_EQ(max_encoded_bytes(10 * chunk + 7, chunk), kFrameHeaderBytes + 11 * kChunkHeaderBytes + 10 * chunk + 7);
}

TEST(CodecFrame, SparseDataShrinks) {
  CodecContext ctx;
  const Bytes in = codec_test::sparse_floats(1 << 20, 0.9, 5);
  for (CodecId c : {CodecId::kZeroMask, CodecId::kLz4, CodecId::kZstd, CodecId::kZeroMaskLz4}) {
    Result<Bytes> frame = encode_frame(ctx, c, in, 1 << 18);
    ASSERT_TRUE(frame.ok());
    EXPECT_LT(frame->size(), in.size() / 4) << to_string(c);  // 10% non-zero words
  }
  // zero-mask+lz4 is never worse than zero-mask: when lz4 cannot shrink the zero-mask payload
  // (random mantissas), the chunk keeps the zero-mask payload rather than the raw bytes.
  for (double zeros : {0.1, 0.5, 0.9}) {
    const Bytes floats = codec_test::sparse_floats(1 << 18, zeros, 6);
    const size_t zm = encode_frame(ctx, CodecId::kZeroMask, floats, 1 << 16)->size();
    EXPECT_LE(encode_frame(ctx, CodecId::kZeroMaskLz4, floats, 1 << 16)->size(), zm) << zeros;
  }
  // zero-mask's size is exact: 1/32 of the words for the mask plus 4 bytes per non-zero word.
  size_t nonzero = 0;
  for (size_t i = 0; i < in.size(); i += 4) nonzero += std::memcmp(in.data() + i, "\0\0\0\0", 4) != 0;
  Result<Bytes> frame = encode_frame(ctx, CodecId::kZeroMask, in, 1 << 18);
  EXPECT_EQ(frame->size(), kFrameHeaderBytes + 4 * kChunkHeaderBytes + in.size() / 32 + 4 * nonzero);
}

TEST(CodecFrame, Bf16HalvesFloatsAndIsCloseOnDecode) {
  CodecContext ctx;
  const Bytes in = codec_test::sparse_floats(4 * 1000 + 3, 0.3, 11);
  Result<Bytes> frame = encode_frame(ctx, CodecId::kBf16, in, 1024);
  ASSERT_TRUE(frame.ok());
  const size_t chunks = chunk_count(in.size(), 1024);
  EXPECT_EQ(frame->size(), kFrameHeaderBytes + chunks * kChunkHeaderBytes + 2 * 1000 + 3);
  Bytes out(in.size());
  ASSERT_TRUE(decode_frame(ctx, *frame, out).ok());
  for (size_t i = 0; i + 4 <= in.size(); i += 4) {
    float x, y;
    std::memcpy(&x, in.data() + i, 4);
    std::memcpy(&y, out.data() + i, 4);
    EXPECT_LE(std::abs(x - y), std::abs(x) * 0x1p-8f) << i;
  }
  EXPECT_TRUE(std::equal(in.end() - 3, in.end(), out.end() - 3));  // the tail is kept
}

// A pipelined writer encodes chunks in any order (or on several threads), then lays them out in
// index order; the frame is the same as encode_frame's.
TEST(CodecFrame, ChunksEncodedOutOfOrderGiveTheSameFrame) {
  CodecContext ctx_a, ctx_b;
  const uint32_t chunk = 4096;
  const Bytes in = codec_test::sparse_floats(7 * chunk + 100, 0.6, 13);
  for (CodecId c : kAllCodecs) {
    Result<Bytes> whole = encode_frame(ctx_a, c, in, chunk);
    ASSERT_TRUE(whole.ok());
    Result<FrameEncoder> enc = FrameEncoder::create(c, in.size(), chunk);
    ASSERT_TRUE(enc.ok());
    std::vector<Bytes> pieces(enc->info().chunk_count);
    for (uint32_t k = 0; k < enc->info().chunk_count; ++k) {
      const uint32_t i = enc->info().chunk_count - 1 - k;  // backwards, alternating contexts
      Bytes buf(max_chunk_encoded_bytes(chunk));
      Result<uint64_t> n = enc->encode_chunk(k % 2 ? ctx_a : ctx_b, i,
                                             std::span(in).subspan(enc->info().chunk_offset(i), enc->info().chunk_input_bytes(i)), buf);
      ASSERT_TRUE(n.ok()) << n.status().message();
      buf.resize(*n);
      pieces[i] = buf;
    }
    Bytes frame(kFrameHeaderBytes);
    enc->write_header(frame);
    for (const Bytes& p : pieces) frame.insert(frame.end(), p.begin(), p.end());
    EXPECT_TRUE(frame == *whole) << to_string(c);
  }
}

// A reader decodes chunk by chunk as the frame arrives in arbitrary pieces.
TEST(CodecFrame, StreamingDecodeOfGrowingPrefixes) {
  CodecContext ctx;
  const uint32_t chunk = 1024;
  const Bytes in = codec_test::sparse_floats(9 * chunk + 17, 0.5, 17);
  std::mt19937_64 rng(19);
  for (CodecId c : kLosslessCodecs) {
    Result<Bytes> frame = encode_frame(ctx, c, in, chunk);
    ASSERT_TRUE(frame.ok());
    Result<FrameDecoder> dec = FrameDecoder::open(std::span(*frame).first(kFrameHeaderBytes));
    ASSERT_TRUE(dec.ok());
    Bytes out(in.size());
    size_t arrived = kFrameHeaderBytes;
    uint64_t ready = 0;
    while (!dec->finished()) {
      arrived = std::min(frame->size(), arrived + 1 + rng() % 900);
      Result<uint64_t> r = dec->decode_available(ctx, std::span(*frame).first(arrived), out);
      ASSERT_TRUE(r.ok()) << r.status().message();
      EXPECT_GE(*r, ready);
      ready = *r;
      // What is reported ready is final; the decoder never runs ahead of the bytes it has.
      EXPECT_TRUE(std::equal(out.begin(), out.begin() + static_cast<ptrdiff_t>(ready), in.begin()));
      EXPECT_LE(dec->consumed_bytes(), arrived);
    }
    EXPECT_EQ(ready, in.size());
    EXPECT_EQ(dec->consumed_bytes(), frame->size());
    EXPECT_TRUE(out == in) << to_string(c);
  }
}

TEST(CodecFrame, BadArguments) {
  CodecContext ctx;
  for (uint32_t chunk : {0u, 32u, 100u, kMaxChunkBytes + 64}) {
    Result<Bytes> r = encode_frame(ctx, CodecId::kLz4, Bytes(10), chunk);
    ASSERT_FALSE(r.ok()) << chunk;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  }
  Result<Bytes> frame = encode_frame(ctx, CodecId::kZeroMask, Bytes(100), 64);
  ASSERT_TRUE(frame.ok());
  Bytes small(99);
  Status s = decode_frame(ctx, *frame, small);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
  Bytes too_small_out(50);
  EXPECT_FALSE(encode_frame(ctx, CodecId::kNone, Bytes(100), too_small_out, 64).ok());
  Result<FrameEncoder> enc = FrameEncoder::create(CodecId::kLz4, 100, 64);
  Bytes buf(max_chunk_encoded_bytes(64));
  EXPECT_FALSE(enc->encode_chunk(ctx, 2, Bytes(36), buf).ok());  // index past the end
  EXPECT_FALSE(enc->encode_chunk(ctx, 1, Bytes(64), buf).ok());  // the last chunk holds 36 bytes
  EXPECT_TRUE(enc->encode_chunk(ctx, 1, Bytes(36), buf).ok());
}

// --- corrupt and truncated frames ---

Status decode(CodecContext& ctx, const Bytes& frame, size_t original_bytes) {
  Bytes out(original_bytes);
  return decode_frame(ctx, frame, out);
}

// Every single-bit flip anywhere in the frame (header, chunk headers, payloads) is an error.
TEST(CodecCorruption, EveryBitFlipIsDetected) {
  CodecContext ctx;
  const uint32_t chunk = 256;
  Bytes in = codec_test::sparse_floats(5 * chunk + 9, 0.7, 23);
  std::memcpy(in.data() + 3 * chunk, codec_test::random_bytes(chunk, 1).data(), chunk);  // a stored chunk
  for (CodecId c : kAllCodecs) {
    Result<Bytes> frame = encode_frame(ctx, c, in, chunk);
    ASSERT_TRUE(frame.ok());
    ASSERT_TRUE(decode(ctx, *frame, in.size()).ok());
    for (size_t i = 0; i < frame->size(); ++i)
      for (int bit : {0, 5}) {
        Bytes bad = *frame;
        bad[i] ^= std::byte(static_cast<uint8_t>(1u << ((i + bit) % 8)));
        Status s = decode(ctx, bad, in.size());
        ASSERT_FALSE(s.ok()) << to_string(c) << ": flip at byte " << i << " went unnoticed";
        ASSERT_EQ(s.code(), StatusCode::kIoError) << s.message();
        ASSERT_NE(s.message().find("corrupt codec frame"), std::string::npos) << s.message();
      }
  }
}

TEST(CodecCorruption, TruncatedAndExtendedFramesAreRejected) {
  CodecContext ctx;
  const uint32_t chunk = 512;
  const Bytes in = codec_test::sparse_floats(4 * chunk + 1, 0.5, 29);
  for (CodecId c : kAllCodecs) {
    Result<Bytes> frame = encode_frame(ctx, c, in, chunk);
    ASSERT_TRUE(frame.ok());
    for (size_t n = 0; n < frame->size(); ++n) {
      Status s = decode(ctx, Bytes(frame->begin(), frame->begin() + static_cast<ptrdiff_t>(n)), in.size());
      ASSERT_FALSE(s.ok()) << to_string(c) << ": prefix of " << n << " bytes accepted";
      ASSERT_EQ(s.code(), StatusCode::kIoError) << s.message();
    }
    Bytes longer = *frame;
    longer.push_back(std::byte{0});
    Status s = decode(ctx, longer, in.size());
    EXPECT_EQ(s.code(), StatusCode::kIoError);
    EXPECT_NE(s.message().find("after the last chunk"), std::string::npos) << s.message();
  }
  Status s = decode(ctx, Bytes(10), 0);
  EXPECT_NE(s.message().find("shorter than a frame header"), std::string::npos) << s.message();
}

// Bytes of the chunk record (header + payload) at `offset` of `frame`.
size_t record_bytes(const Bytes& frame, size_t offset) {
  uint32_t payload;
  std::memcpy(&payload, frame.data() + offset, 4);
  return kChunkHeaderBytes + payload;
}

TEST(CodecCorruption, MessagesNameWhatIsWrong) {
  CodecContext ctx;
  const uint32_t chunk = 256;
  const Bytes in = codec_test::sparse_floats(3 * chunk, 0.5, 31);
  const Bytes frame = *encode_frame(ctx, CodecId::kZeroMask, in, chunk);
  const auto message_of = [&](const Bytes& f) { return decode(ctx, f, in.size()).message(); };
  Bytes bad = frame;
  bad[0] = std::byte{'X'};
  EXPECT_NE(message_of(bad).find("bad magic"), std::string::npos) << message_of(bad);
  bad = frame;
  bad[4] = std::byte{2};
  EXPECT_NE(message_of(bad).find("format version 2"), std::string::npos) << message_of(bad);
  bad = frame;
  bad[9] ^= std::byte{1};
  EXPECT_NE(message_of(bad).find("header checksum"), std::string::npos) << message_of(bad);
  // A flipped payload bit of the second chunk: the chunk is named.
  const size_t second = kFrameHeaderBytes + record_bytes(frame, kFrameHeaderBytes);
  bad = frame;
  bad[second + kChunkHeaderBytes + 3] ^= std::byte{0x10};
  EXPECT_NE(message_of(bad).find("chunk 1 of 3"), std::string::npos) << message_of(bad);
  EXPECT_NE(message_of(bad).find("payload checksum mismatch"), std::string::npos) << message_of(bad);
  // The first chunk of another frame (same codec and geometry, so the same header) put in place
  // of the second chunk: its checksum was seeded with index 0, so it does not verify as chunk 1.
  const Bytes other = *encode_frame(ctx, CodecId::kZeroMask, codec_test::sparse_floats(3 * chunk, 0.5, 37), chunk);
  ASSERT_EQ(std::memcmp(other.data(), frame.data(), kFrameHeaderBytes), 0);
  Bytes spliced(frame.begin(), frame.begin() + static_cast<ptrdiff_t>(second));
  const auto other_first = other.begin() + static_cast<ptrdiff_t>(kFrameHeaderBytes);
  spliced.insert(spliced.end(), other_first, other_first + static_cast<ptrdiff_t>(record_bytes(other, kFrameHeaderBytes)));
  spliced.insert(spliced.end(), frame.begin() + static_cast<ptrdiff_t>(second + record_bytes(frame, second)), frame.end());
  EXPECT_NE(message_of(spliced).find("chunk 1 of 3"), std::string::npos) << message_of(spliced);
  EXPECT_NE(message_of(spliced).find("payload checksum mismatch"), std::string::npos) << message_of(spliced);
}

// Chunk records whose checksum verifies but whose payload size contradicts the method (what a
// buggy writer could produce): refused before the payload is decoded.
TEST(CodecCorruption, PayloadSizeMustFitTheMethod) {
  CodecContext ctx;
  const Bytes in = codec_test::random_bytes(100, 47);
  Result<FrameEncoder> enc = FrameEncoder::create(CodecId::kNone, in.size(), 128);
  ASSERT_TRUE(enc.ok());
  const auto frame_with = [&](CodecId method, uint32_t payload_bytes) {
    Bytes frame(kFrameHeaderBytes + kChunkHeaderBytes + payload_bytes);
    enc->write_header(frame);
    std::byte* h = frame.data() + kFrameHeaderBytes;
    std::memcpy(h, &payload_bytes, 4);
    h[4] = std::byte{static_cast<uint8_t>(method)};
    std::memcpy(h + kChunkHeaderBytes, in.data(), payload_bytes);
    const uint64_t sum = hash64(std::span(in).first(payload_bytes),
                               enc->info().header_checksum ^ static_cast<uint8_t>(method));  // chunk 0
    std::memcpy(h + 8, &sum, 8);
    return frame;
  };
  ASSERT_TRUE(decode(ctx, frame_with(CodecId::kNone, 100), in.size()).ok());  // the well-formed one
  Status s = decode(ctx, frame_with(CodecId::kNone, 50), in.size());
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("none payload of 50 bytes for 100 input bytes"), std::string::npos) << s.message();
}

TEST(CodecCorruption, GarbageNeverCrashes) {
  CodecContext ctx;
  std::mt19937_64 rng(41);
  for (int trial = 0; trial < 2000; ++trial) {
    Bytes junk = codec_test::random_bytes(rng() % 300, rng());
    if (trial % 2 == 0 && junk.size() >= kFrameHeaderBytes) {
      // A valid header over random chunk records: exercises the chunk checks, not just the header's.
      Result<FrameEncoder> enc = FrameEncoder::create(kAllCodecs[trial % 6], 1000, 64);
      enc->write_header(junk);
    }
    Result<FrameInfo> info = read_frame_info(junk);
    Bytes out(info.ok() ? info->original_bytes : 0);
    Status s = decode_frame(ctx, junk, out);
    EXPECT_FALSE(s.ok());
  }
}

}  // namespace
}  // namespace ferry
