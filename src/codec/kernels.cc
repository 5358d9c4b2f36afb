// Zero-mask and bf16 kernels (layouts in kernels.h).
//
// Design
// - zero-mask, portable: blocks of 64 words share one 64-bit mask word. While the values written
//   so far plus a whole block still fit the output, a block is encoded without branches: every
//   word is stored at the cursor and the cursor advances only past non-zero ones (the next word
//   overwrites a zero). Near the end of the output the block is encoded word by word with a
//   bounds check, so the encoder never writes past `out` and reports "does not fit" exactly.
//   Decoding zeroes a block, then copies the packed words to the positions of the set bits.
// - zero-mask, AVX-512: 16 words per step; vpcompressd packs the non-zero words of a vector
//   (through a register, then one full-width store, when there is room for 64 bytes; straight to
//   memory otherwise), vpexpandd scatters them back on decode. The 16-bit compare mask is the
//   stored mask, so both paths write the same bytes (tested).
// - Decoding validates before it writes: the payload size must equal mask + 4 * popcount(mask) +
//   tail and the last mask byte must have no stray bits, so a malformed payload can never make it
//   read past its end.
// - bf16: a plain loop over bf16_round(), which the compiler vectorizes (the NaN case is a select).
#include "codec/kernels.h"

#include <algorithm>
#include <bit>
#include <cstring>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace ferry::codec_kernels {

namespace {

static_assert(std::endian::native == std::endian::little, "codec payloads are little-endian");

inline uint32_t load32(const std::byte* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline uint64_t load_bits(const std::byte* p, size_t bytes) {
  uint64_t v = 0;
  if (bytes > 0) std::memcpy(&v, p, bytes);
  return v;
}

// memcpy that accepts the null pointers of empty spans.
inline void copy_bytes(std::byte* dst, const std::byte* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

struct Geometry {
  size_t words, tail, mask_bytes;
};

inline Geometry geometry(size_t input_bytes) {
  const size_t words = input_bytes / 4;
  return {words, input_bytes % 4, (words + 7) / 8};
}

// Checks a zero-mask payload's size and last mask byte against an output of `g`.
bool zero_mask_valid(std::span<const std::byte> payload, const Geometry& g) {
  if (payload.size() < g.mask_bytes + g.tail) return false;
  const std::byte* mask = payload.data();
  if (g.words % 8 != 0 && (std::to_integer<unsigned>(mask[g.mask_bytes - 1]) >> (g.words % 8)) != 0) return false;
  size_t set = 0, b = 0;
  for (; b + 8 <= g.mask_bytes; b += 8) set += static_cast<size_t>(std::popcount(load_bits(mask + b, 8)));
  set += static_cast<size_t>(std::popcount(load_bits(mask + b, g.mask_bytes - b)));
  return payload.size() == g.mask_bytes + 4 * set + g.tail;
}

// Encodes words [first, last) word by word with a bounds check; their mask bits go to `bits`
// (bit 0 = word `first`). Returns false when the values would pass `value_cap`.
bool encode_words_checked(const std::byte* src, size_t first, size_t last, std::byte* values, size_t value_cap,
                          size_t& value_bytes, uint64_t& bits) {
  for (size_t w = first; w < last; ++w) {
    const uint32_t word = load32(src + 4 * w);
    if (word == 0) continue;
    if (value_bytes + 4 > value_cap) return false;
    std::memcpy(values + value_bytes, &word, 4);
    value_bytes += 4;
    bits |= uint64_t{1} << (w - first);
  }
  return true;
}

// Decodes `count` (at most 64) words from word `first` on, whose mask is `bits`.
void decode_words(uint64_t bits, size_t first, size_t count, const std::byte* values, size_t& value_bytes,
                  std::byte* dst) {
  std::memset(dst + 4 * first, 0, 4 * std::min<size_t>(count, 64));
  for (; bits != 0; bits &= bits - 1) {
    const size_t w = first + static_cast<size_t>(std::countr_zero(bits));
    std::memcpy(dst + 4 * w, values + value_bytes, 4);
    value_bytes += 4;
  }
}

}  // namespace

std::optional<size_t> zero_mask_encode_portable(std::span<const std::byte> in, std::span<std::byte> out) {
  const Geometry g = geometry(in.size());
  if (g.mask_bytes + g.tail > out.size()) return std::nullopt;
  const size_t value_cap = out.size() - g.mask_bytes - g.tail;
  std::byte* mask = out.data();
  std::byte* values = out.data() + g.mask_bytes;
  const std::byte* src = in.data();
  size_t value_bytes = 0;
  for (size_t first = 0; first < g.words; first += 64) {
    const size_t count = std::min<size_t>(64, g.words - first);
    uint64_t bits = 0;
    if (value_bytes + 4 * count <= value_cap) {
      size_t cursor = value_bytes;
      for (size_t j = 0; j < count; ++j) {
        const uint32_t word = load32(src + 4 * (first + j));
        std::memcpy(values + cursor, &word, 4);
        const uint64_t nonzero = word != 0;
        cursor += 4 * nonzero;
        bits |= nonzero << j;
      }
      value_bytes = cursor;
    } else if (!encode_words_checked(src, first, first + count, values, value_cap, value_bytes, bits)) {
      return std::nullopt;
    }
    std::memcpy(mask + first / 8, &bits, (count + 7) / 8);
  }
  copy_bytes(values + value_bytes, src + 4 * g.words, g.tail);
  return g.mask_bytes + value_bytes + g.tail;
}

bool zero_mask_decode_portable(std::span<const std::byte> payload, std::span<std::byte> out) {
  const Geometry g = geometry(out.size());
  if (!zero_mask_valid(payload, g)) return false;
  const std::byte* values = payload.data() + g.mask_bytes;
  size_t value_bytes = 0;
  for (size_t first = 0; first < g.words; first += 64) {
    const size_t count = std::min<size_t>(64, g.words - first);
    decode_words(load_bits(payload.data() + first / 8, (count + 7) / 8), first, count, values, value_bytes,
                 out.data());
  }
  copy_bytes(out.data() + 4 * g.words, values + value_bytes, g.tail);
  return true;
}

#if defined(__AVX512F__)

std::optional<size_t> zero_mask_encode(std::span<const std::byte> in, std::span<std::byte> out) {
  const Geometry g = geometry(in.size());
  if (g.mask_bytes + g.tail > out.size()) return std::nullopt;
  const size_t value_cap = out.size() - g.mask_bytes - g.tail;
  std::byte* mask = out.data();
  std::byte* values = out.data() + g.mask_bytes;
  const std::byte* src = in.data();
  size_t value_bytes = 0, w = 0;
  for (; w + 16 <= g.words; w += 16) {
    const __m512i v = _mm512_loadu_si512(src + 4 * w);
    const __mmask16 nonzero = _mm512_test_epi32_mask(v, v);
    const size_t packed_bytes = 4 * static_cast<size_t>(std::popcount(static_cast<unsigned>(nonzero)));
    if (value_bytes + 64 <= value_cap) {
      _mm512_storeu_si512(values + value_bytes, _mm512_maskz_compress_epi32(nonzero, v));
    } else {
      if (value_bytes + packed_bytes > value_cap) return std::nullopt;
      _mm512_mask_compressstoreu_epi32(values + value_bytes, nonzero, v);
    }
    value_bytes += packed_bytes;
    std::memcpy(mask + w / 8, &nonzero, 2);
  }
  if (w < g.words) {
    uint64_t bits = 0;
    if (!encode_words_checked(src, w, g.words, values, value_cap, value_bytes, bits)) return std::nullopt;
    std::memcpy(mask + w / 8, &bits, (g.words - w + 7) / 8);
  }
  copy_bytes(values + value_bytes, src + 4 * g.words, g.tail);
  return g.mask_bytes + value_bytes + g.tail;
}

bool zero_mask_decode(std::span<const std::byte> payload, std::span<std::byte> out) {
  const Geometry g = geometry(out.size());
  if (!zero_mask_valid(payload, g)) return false;
  const std::byte* mask = payload.data();
  const std::byte* values = payload.data() + g.mask_bytes;
  std::byte* dst = out.data();
  size_t value_bytes = 0, w = 0;
  for (; w + 16 <= g.words; w += 16) {
    uint16_t bits;
    std::memcpy(&bits, mask + w / 8, 2);
    _mm512_storeu_si512(dst + 4 * w, _mm512_maskz_expandloadu_epi32(bits, values + value_bytes));
    value_bytes += 4 * static_cast<size_t>(std::popcount(bits));
  }
  if (w < g.words) decode_words(load_bits(mask + w / 8, (g.words - w + 7) / 8), w, g.words - w, values, value_bytes, dst);
  copy_bytes(dst + 4 * g.words, values + value_bytes, g.tail);
  return true;
}

#else

std::optional<size_t> zero_mask_encode(std::span<const std::byte> in, std::span<std::byte> out) {
  return zero_mask_encode_portable(in, out);
}

bool zero_mask_decode(std::span<const std::byte> payload, std::span<std::byte> out) {
  return zero_mask_decode_portable(payload, out);
}

#endif

void bf16_encode(std::span<const std::byte> in, std::span<std::byte> out) {
  const size_t words = in.size() / 4;
  const std::byte* src = in.data();
  std::byte* dst = out.data();
  for (size_t w = 0; w < words; ++w) {
    const uint16_t half = bf16_round(load32(src + 4 * w));
    std::memcpy(dst + 2 * w, &half, 2);
  }
  copy_bytes(dst + 2 * words, src + 4 * words, in.size() % 4);
}

void bf16_decode(std::span<const std::byte> payload, std::span<std::byte> out) {
  const size_t words = out.size() / 4;
  const std::byte* src = payload.data();
  std::byte* dst = out.data();
  for (size_t w = 0; w < words; ++w) {
    uint16_t half;
    std::memcpy(&half, src + 2 * w, 2);
    const uint32_t word = uint32_t{half} << 16;
    std::memcpy(dst + 4 * w, &word, 4);
  }
  copy_bytes(dst + 4 * words, src + 2 * words, out.size() % 4);
}

}  // namespace ferry::codec_kernels
