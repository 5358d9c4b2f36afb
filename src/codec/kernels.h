// The byte kernels behind the zero-mask and bf16 codecs, on one chunk (internal to src/codec;
// tests call them directly). Both see the input as little-endian 32-bit words followed by a
// tail of 0-3 bytes that is copied as is.
//
// zero-mask payload of n input bytes (w = n / 4 words, t = n % 4 tail bytes):
//   [ceil(w / 8) mask bytes: bit j of byte b set <=> word 8b+j is not all-zero bits]
//   [4 bytes per set bit: the non-zero words, in order] [t tail bytes]
// Unused bits of the last mask byte are zero. A word is zero when its bit pattern is, so -0.0
// (0x80000000) is kept like any other value.
//
// bf16 payload: [2 bytes per word: the word rounded to bfloat16] [t tail bytes].
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace ferry::codec_kernels {

// Size of the zero-mask payload of `input_bytes` bytes when every word is non-zero (its largest).
constexpr size_t zero_mask_max_bytes(size_t input_bytes) {
  const size_t words = input_bytes / 4;
  return (words + 7) / 8 + 4 * words + input_bytes % 4;
}

// Encodes `in` into the front of `out`; returns the payload size, or nullopt when it would not
// fit in out.size() (then `out` holds garbage). Uses AVX-512 where the build has it.
std::optional<size_t> zero_mask_encode(std::span<const std::byte> in, std::span<std::byte> out);
// Decodes `payload` into `out` (the chunk's input size). False when the payload is malformed:
// wrong size for its mask, stray bits in the last mask byte. Uses AVX-512 where the build has it.
bool zero_mask_decode(std::span<const std::byte> payload, std::span<std::byte> out);
// The same, in plain C++ (the reference the tests compare the vector paths with).
std::optional<size_t> zero_mask_encode_portable(std::span<const std::byte> in, std::span<std::byte> out);
bool zero_mask_decode_portable(std::span<const std::byte> payload, std::span<std::byte> out);

// Size of the bf16 payload of `input_bytes` bytes.
constexpr size_t bf16_bytes(size_t input_bytes) { return input_bytes / 4 * 2 + input_bytes % 4; }
// The bfloat16 nearest to the float with bits `f32_bits`, ties to even. NaNs stay NaN (quiet,
// sign and top payload bits kept); finite values beyond bfloat16's range round to infinity.
constexpr uint16_t bf16_round(uint32_t f32_bits) {
  const uint32_t upper = f32_bits >> 16;
  if ((f32_bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>(upper | 0x0040u);
  return static_cast<uint16_t>((f32_bits + 0x7fffu + (upper & 1u)) >> 16);
}
// Encodes `in` into `out` (bf16_bytes(in.size()) bytes).
void bf16_encode(std::span<const std::byte> in, std::span<std::byte> out);
// Decodes `payload` (bf16_bytes(out.size()) bytes) into `out`: each bfloat16 widened to float.
void bf16_decode(std::span<const std::byte> payload, std::span<std::byte> out);

}  // namespace ferry::codec_kernels
