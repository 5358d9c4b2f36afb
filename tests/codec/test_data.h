// Inputs for the codec tests, all from fixed seeds: random bytes, float tensors with a chosen
// fraction of zeros, special bit patterns (-0.0, NaNs, denormals, infinities), adversarial
// patterns; and the shared round-trip checker every lossless codec must pass.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codec/codec.h"

namespace ferry::codec_test {

using Bytes = std::vector<std::byte>;

inline Bytes from_words(const std::vector<uint32_t>& words, size_t bytes) {
  Bytes b(bytes);
  if (bytes > 0) std::memcpy(b.data(), words.data(), std::min(bytes, words.size() * 4));
  return b;
}

inline Bytes random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Bytes b(n);
  for (auto& x : b) x = std::byte(static_cast<uint8_t>(rng()));
  return b;
}

// Float tensor of `bytes` bytes: Gaussian values, each word zeroed with probability `zero_fraction`.
inline Bytes sparse_floats(size_t bytes, double zero_fraction, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::bernoulli_distribution zero(zero_fraction);
  std::vector<uint32_t> w(bytes / 4 + 1);
  for (auto& x : w) x = zero(rng) ? 0u : std::bit_cast<uint32_t>(normal(rng));
  return from_words(w, bytes);
}

// Every special pattern lossless codecs must keep: +-0, NaNs (quiet, signalling, negative, payloads),
// infinities, denormals, extremes; mixed with plain zeros so that zero-mask has work to do.
inline Bytes special_floats(size_t bytes, uint64_t seed) {
  const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fbfffffu,
                               0xff800001u, 0x7fffffffu, 0x7f800000u, 0xff800000u, 0x00000001u, 0x807fffffu,
                               0x00400000u, 0x7f7fffffu, 0xff7fffffu, 0x00800000u};
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> w(bytes / 4 + 1);
  for (auto& x : w) x = specials[rng() % std::size(specials)];
  return from_words(w, bytes);
}

struct NamedInput {
  std::string name;
  Bytes bytes;
};

// The inputs of the round-trip property tests, sized around `chunk` (chunk boundaries +-1).
inline std::vector<NamedInput> round_trip_inputs(uint32_t chunk) {
  std::vector<NamedInput> in;
  const size_t sizes[] = {0, 1, 2, 3, 4, 5, 7, 63, 64, 65, 255, chunk - 1, chunk, chunk + 1, 2 * chunk + 3, 5 * chunk - 1};
  uint64_t seed = 1;
  for (size_t n : sizes) {
    in.push_back({"random/" + std::to_string(n), random_bytes(n, seed++)});
    in.push_back({"zeros/" + std::to_string(n), Bytes(n)});
    in.push_back({"special/" + std::to_string(n), special_floats(n, seed++)});
    for (double f : {0.0, 0.1, 0.5, 0.9, 0.99})
      in.push_back({"sparse" + std::to_string(f) + "/" + std::to_string(n), sparse_floats(n, f, seed++)});
  }
  const size_t n = 3 * chunk + 5;
  in.push_back({"all-nan", from_words(std::vector<uint32_t>(n / 4 + 1, 0x7fc00000u), n)});
  in.push_back({"all-neg-zero", from_words(std::vector<uint32_t>(n / 4 + 1, 0x80000000u), n)});
  in.push_back({"all-ones", Bytes(n, std::byte{0xff})});
  std::vector<uint32_t> alt(n / 4 + 1), stripes(n / 4 + 1), lone(n / 4 + 1), bytes01(n / 4 + 1);
  for (size_t i = 0; i < alt.size(); ++i) {
    alt[i] = i % 2 ? 0x3f800000u : 0;                       // word alternation
    stripes[i] = (i / 17) % 2 ? static_cast<uint32_t>(i * 2654435761u) : 0;  // runs across mask words
    lone[i] = i % 64 == 63 ? 1u : 0;                        // one set bit per 64-word block
    bytes01[i] = 0x00ff00ffu;                               // byte alternation inside words
  }
  in.push_back({"alternating-words", from_words(alt, n)});
  in.push_back({"stripes", from_words(stripes, n)});
  in.push_back({"lone-words", from_words(lone, n)});
  in.push_back({"alternating-bytes", from_words(bytes01, n)});
  // Zeros then incompressible: chunk by chunk the codec and stored chunks alternate.
  Bytes mixed = random_bytes(n, 99);
  std::memset(mixed.data(), 0, chunk);
  std::memset(mixed.data() + 2 * chunk, 0, chunk / 2);
  in.push_back({"zero-chunk-then-random", mixed});
  return in;
}

// Encodes `input` with `codec`, checks the frame's bound and header, decodes it whole and in
// pieces, and checks every byte came back.
inline void expect_round_trip(CodecContext& ctx, CodecId codec, const Bytes& input, uint32_t chunk,
                              const std::string& what) {
  SCOPED_TRACE(std::string(to_string(codec)) + " on " + what + ", chunk " + std::to_string(chunk));
  Result<Bytes> frame = encode_frame(ctx, codec, input, chunk);
  ASSERT_TRUE(frame.ok()) << frame.status().message();
  EXPECT_LE(frame->size(), max_encoded_bytes(input.size(), chunk));
  Result<FrameInfo> info = read_frame_info(*frame);
  ASSERT_TRUE(info.ok()) << info.status().message();
  EXPECT_EQ(info->codec, codec);
  EXPECT_EQ(info->original_bytes, input.size());
  Bytes out(input.size(), std::byte{0xcd});
  Status s = decode_frame(ctx, *frame, out);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(out == input) << "decoded bytes differ";
}

}  // namespace ferry::codec_test
