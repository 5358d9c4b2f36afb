// The zero-mask and bf16 kernels: the vector and portable zero-mask paths write the same bytes;
// malformed payloads are refused; bf16 rounds to nearest even within half a bf16 ulp.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "codec/kernels.h"
#include "test_data.h"

namespace ferry {
namespace {

namespace ck = codec_kernels;
using codec_test::Bytes;
using Encode = std::optional<size_t> (*)(std::span<const std::byte>, std::span<std::byte>);
using Decode = bool (*)(std::span<const std::byte>, std::span<std::byte>);

TEST(ZeroMaskKernel, VectorAndPortablePathsAgree) {
  for (size_t n : {0ul, 1ul, 3ul, 4ul, 60ul, 64ul, 68ul, 255ul, 256ul, 257ul, 1000ul, 4099ul, 65536ul}) {
    for (double zeros : {0.0, 0.3, 0.5, 0.97, 1.0}) {
      const Bytes in = codec_test::sparse_floats(n, zeros, n * 31 + static_cast<uint64_t>(zeros * 100));
      Bytes a(ck::zero_mask_max_bytes(n)), b(ck::zero_mask_max_bytes(n));
      const std::optional<size_t> na = ck::zero_mask_encode(in, a), nb = ck::zero_mask_encode_portable(in, b);
      ASSERT_TRUE(na && nb);
      ASSERT_EQ(*na, *nb) << n << " " << zeros;
      ASSERT_TRUE(std::equal(a.begin(), a.begin() + static_cast<ptrdiff_t>(*na), b.begin())) << n << " " << zeros;
      Bytes da(n), db(n, std::byte{0x77});
      ASSERT_TRUE(ck::zero_mask_decode(std::span(a).first(*na), da));
      ASSERT_TRUE(ck::zero_mask_decode_portable(std::span(b).first(*nb), db));
      EXPECT_TRUE(da == in && db == in) << n << " " << zeros;
    }
  }
}

// The frame tests run the build's kernels (AVX-512 here); this runs the portable ones, which
// builds without AVX-512 use, on the same property-test inputs.
TEST(ZeroMaskKernel, PortablePathRestoresEveryInput) {
  for (const auto& in : codec_test::round_trip_inputs(256)) {
    const size_t n = in.bytes.size();
    for (auto [encode, decode] : {std::pair<Encode, Decode>{ck::zero_mask_encode_portable, ck::zero_mask_decode_portable},
                                  std::pair<Encode, Decode>{ck::zero_mask_encode, ck::zero_mask_decode}}) {
      Bytes payload(ck::zero_mask_max_bytes(n)), out(n, std::byte{0x55});
      const std::optional<size_t> m = encode(in.bytes, payload);
      ASSERT_TRUE(m) << in.name;
      Bytes b(ck::zero_mask_max_bytes(n));
      ASSERT_EQ(ck::zero_mask_encode_portable(in.bytes, b), m) << in.name;  // both paths: same size
      ASSERT_TRUE(std::equal(b.begin(), b.begin() + static_cast<ptrdiff_t>(*m), payload.begin())) << in.name;
      ASSERT_TRUE(decode(std::span(payload).first(*m), out)) << in.name;
      ASSERT_TRUE(out == in.bytes) << in.name;
    }
  }
}

// The encoder reports "does not fit" exactly: with one byte less than the payload needs it
// refuses, with exactly enough it succeeds, and it never writes past the span it was given.
TEST(ZeroMaskKernel, OutputLimitIsExact) {
  for (size_t n : {5ul, 64ul, 1000ul, 4096ul + 12}) {
    const Bytes in = codec_test::sparse_floats(n, 0.5, n);
    Bytes full(ck::zero_mask_max_bytes(n));
    const size_t need = *ck::zero_mask_encode_portable(in, full);
    for (Encode encode : {ck::zero_mask_encode, ck::zero_mask_encode_portable}) {
      Bytes out(need + 64, std::byte{0xee});
      EXPECT_FALSE(encode(in, std::span(out).first(need - 1))) << n;
      EXPECT_TRUE(std::all_of(out.begin() + static_cast<ptrdiff_t>(need - 1), out.end(),
                              [](std::byte x) { return x == std::byte{0xee}; }))
          << "wrote past the limit, n=" << n;
      std::fill(out.begin(), out.end(), std::byte{0xee});
      EXPECT_EQ(encode(in, std::span(out).first(need)), need) << n;
      EXPECT_TRUE(std::all_of(out.begin() + static_cast<ptrdiff_t>(need), out.end(),
                              [](std::byte x) { return x == std::byte{0xee}; }));
    }
  }
}

TEST(ZeroMaskKernel, NegativeZeroAndNansAreNotZero) {
  const std::vector<uint32_t> words = {0x80000000u, 0, 0x7fc00000u, 0, 0x00000001u, 0, 0, 0, 0xffffffffu};
  const Bytes in = codec_test::from_words(words, words.size() * 4);
  Bytes out(ck::zero_mask_max_bytes(in.size()));
  const size_t n = *ck::zero_mask_encode(in, out);
  EXPECT_EQ(n, 2 + 4 * 4);  // 9 words: 2 mask bytes, 4 non-zero words
  EXPECT_EQ(out[0], std::byte{0b00010101});
  EXPECT_EQ(out[1], std::byte{0b1});
}

TEST(ZeroMaskKernel, MalformedPayloadsAreRefused) {
  const Bytes in = codec_test::sparse_floats(4 * 20 + 2, 0.5, 3);  // 20 words: 3 mask bytes, 4 stray bits
  Bytes payload(ck::zero_mask_max_bytes(in.size()));
  payload.resize(*ck::zero_mask_encode(in, payload));
  Bytes out(in.size());
  for (Decode decode : {ck::zero_mask_decode, ck::zero_mask_decode_portable}) {
    ASSERT_TRUE(decode(payload, out));
    Bytes shorter(payload.begin(), payload.end() - 1), longer = payload;
    longer.push_back(std::byte{0});
    EXPECT_FALSE(decode(shorter, out));
    EXPECT_FALSE(decode(longer, out));
    Bytes stray = payload;
    stray[2] |= std::byte{0x80};  // bit of word 23, which does not exist
    EXPECT_FALSE(decode(stray, out));
    Bytes more_bits = payload;
    more_bits[0] = std::byte{0xff};  // more set bits than packed words
    if (payload[0] != std::byte{0xff}) {
      EXPECT_FALSE(decode(more_bits, out));
    }
    EXPECT_FALSE(decode({}, out));
    // A stray bit with a packed word to match it: the sizes agree, only the stray-bit check can
    // refuse it (the decoder would otherwise write word 23 of a 20-word output).
    Bytes consistent = payload;
    consistent[2] |= std::byte{0x80};
    consistent.insert(consistent.end() - 2, 4, std::byte{0x11});
    EXPECT_FALSE(decode(consistent, out));
  }
}

// Reference: the nearest bfloat16 by exhaustive comparison of the two neighbours in double.
uint16_t bf16_reference(uint32_t bits) {
  const float x = std::bit_cast<float>(bits);
  if (std::isnan(x)) return 0;  // checked separately
  const uint16_t down = static_cast<uint16_t>(bits >> 16);
  const uint16_t up = static_cast<uint16_t>(down + 1);  // next magnitude (may become infinity)
  // Past the largest finite bfloat16 the next step up is 2^128, which IEEE rounding treats as
  // the neighbour that becomes infinity.
  const bool up_overflows = (up & 0x7fffu) == 0x7f80u;
  const double dx = x, dd = std::bit_cast<float>(uint32_t{down} << 16),
               du = up_overflows ? std::copysign(0x1p128, dx) : std::bit_cast<float>(uint32_t{up} << 16);
  if ((bits & 0xffffu) == 0) return down;
  const double ed = std::abs(dx - dd), eu = std::abs(du - dx);
  if (ed < eu) return down;
  if (eu < ed) return up;
  return (down & 1) ? up : down;  // tie: even mantissa
}

TEST(Bf16Kernel, RoundsToNearestEven) {
  // Every upper half with the lower halves that matter: exact, just above, below, at and just
  // past the tie, and the largest.
  for (uint32_t upper = 0; upper < 0x10000u; ++upper) {
    for (uint32_t lower : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu, 0x1234u, 0xabcdu}) {
      const uint32_t bits = upper << 16 | lower;
      const uint16_t got = ck::bf16_round(bits);
      const float x = std::bit_cast<float>(bits);
      if (std::isnan(x)) {
        EXPECT_TRUE(std::isnan(std::bit_cast<float>(uint32_t{got} << 16))) << std::hex << bits;
        EXPECT_EQ(got & 0x8000u, (bits >> 16) & 0x8000u) << std::hex << bits;
        continue;
      }
      ASSERT_EQ(got, bf16_reference(bits)) << std::hex << bits;
    }
  }
}

TEST(Bf16Kernel, ErrorIsWithinHalfAnUlp) {
  const Bytes in = codec_test::sparse_floats(4 * 100000, 0.0, 5);
  Bytes payload(ck::bf16_bytes(in.size())), out(in.size());
  ck::bf16_encode(in, payload);
  ck::bf16_decode(payload, out);
  for (size_t i = 0; i < in.size(); i += 4) {
    float x, y;
    std::memcpy(&x, in.data() + i, 4);
    std::memcpy(&y, out.data() + i, 4);
    // bfloat16 keeps 8 significant bits: rounding to nearest errs by at most 2^-8 relative,
    // i.e. half a unit in the last place 2^(e-7).
    ASSERT_LE(std::abs(x - y), std::ldexp(1.0f, std::ilogb(x) - 8)) << x << " -> " << y;
  }
  // Special values: signs of zero and infinity kept, NaN stays NaN, denormals err by at most
  // half of bf16's smallest step 2^-133, values past bf16's largest finite round to infinity.
  const std::vector<uint32_t> specials = {0x80000000u, 0x00000000u, 0x7f800000u, 0xff800000u, 0x7fa00001u,
                                          0x00000001u, 0x807fffffu, 0x7f7fffffu};
  Bytes s = codec_test::from_words(specials, specials.size() * 4), sp(ck::bf16_bytes(s.size())), so(s.size());
  ck::bf16_encode(s, sp);
  ck::bf16_decode(sp, so);
  std::vector<uint32_t> w(specials.size());
  std::memcpy(w.data(), so.data(), so.size());
  EXPECT_EQ(w[0], 0x80000000u);
  EXPECT_EQ(w[1], 0u);
  EXPECT_EQ(w[2], 0x7f800000u);
  EXPECT_EQ(w[3], 0xff800000u);
  EXPECT_TRUE(std::isnan(std::bit_cast<float>(w[4])));
  EXPECT_LE(std::abs(std::bit_cast<float>(w[5]) - std::bit_cast<float>(specials[5])), 0x1p-134f);
  EXPECT_LE(std::abs(std::bit_cast<float>(w[6]) - std::bit_cast<float>(specials[6])), 0x1p-134f);
  EXPECT_EQ(w[7], 0x7f800000u);  // FLT_MAX is above bf16's largest finite value: infinity
}

}  // namespace
}  // namespace ferry
