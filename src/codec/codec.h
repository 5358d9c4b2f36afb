// Codecs for swapped bytes: how a tensor's bytes are encoded on their way to a swap tier and
// decoded on their way back, in independent chunks so that coding runs beside the transfer.
//
// Design
// - Codecs (CodecId). Lossless: `none` (raw copy), `zero-mask` (a bitmask of the non-zero 32-bit
//   words plus the packed non-zero words: ReLU outputs), `lz4`, `zstd`, `zero-mask+lz4` (the
//   zero-mask output compressed again by lz4). Lossy, only on request: `bf16` (every 32-bit word
//   rounded to bfloat16, to nearest even; decoding widens it back). Lossless codecs compare and
//   store bit patterns, never float values, so -0.0, NaN payloads and denormals come back
//   bitwise. See docs/codecs.md for what each costs and gains, measured.
// - Framed, chunked format (Note [Frame format] in codec.cc). A frame is a 32-byte header
//   (magic, format version, codec, original size, chunk size, chunk count, header checksum)
//   followed by one record per chunk of `chunk_bytes` input bytes (the last may be shorter): a
//   16-byte chunk header (payload size, method, XXH64 of the payload) and the payload. Each chunk
//   is coded on its own, so a writer can send chunk i while it encodes chunk i+1, and a reader
//   can decode chunk i while chunk i+1 is still arriving.
// - Bounded size. A chunk the codec does not shrink is stored raw (method `none`), so a frame is
//   never larger than max_encoded_bytes(n) = 32 + 16 * chunks + n.
// - Corrupt or truncated frames are detected (header checksum, per-chunk payload checksums seeded
//   with the frame's identity and the chunk's index and method, and exact size checks of every
//   decoder) and reported as a Status (kIoError: the stored bytes are bad); decoding never reads or
//   writes outside the spans it is given.
// - A CodecContext holds one thread's reusable state (zstd contexts, scratch); the frame
//   functions are otherwise pure, so several threads may code different chunks of one frame at
//   once, each with its own context.
//
// Usage, whole buffers:
//   CodecContext ctx;
//   std::vector<std::byte> frame(max_encoded_bytes(src.size()));
//   Result<uint64_t> n = encode_frame(ctx, CodecId::kZeroMask, src, frame);   // frame.resize(*n)
//   Status s = decode_frame(ctx, std::span(frame).first(*n), dst);            // dst.size() == src.size()
// Usage, pipelined (a swap-out writes chunk i while chunk i+1 is encoded):
//   Result<FrameEncoder> enc = FrameEncoder::create(CodecId::kLz4, src.size());
//   enc->write_header(staging);                       // kFrameHeaderBytes
//   for (uint32_t i = 0; i < enc->info().chunk_count; ++i)
//     n_i = enc->encode_chunk(ctx, i, src.subspan(enc->info().chunk_offset(i), enc->info().chunk_input_bytes(i)), buf_i);
//     ... submit buf_i[0, n_i) to the tier; it follows the previous chunk in the frame
//   // swap-in: read the frame in pieces; after each piece arrives
//   Result<FrameDecoder> dec = FrameDecoder::open(received);   // once kFrameHeaderBytes arrived
//   Result<uint64_t> ready = dec->decode_available(ctx, received, dst);  // dst[0, *ready) is final
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ferry {

// The codec of a frame; the numbers are part of the stored format and never change.
enum class CodecId : uint8_t {
  kNone = 0,         // raw bytes
  kZeroMask = 1,     // bitmask of non-zero 32-bit words + packed non-zero words (lossless)
  kLz4 = 2,          // LZ4 block (lossless)
  kZstd = 3,         // Zstandard (lossless)
  kZeroMaskLz4 = 4,  // zero-mask, then LZ4 over its output (lossless)
  kBf16 = 5,         // 32-bit words rounded to bfloat16, round to nearest even (LOSSY)
};

// Every codec, in the order above.
inline constexpr CodecId kAllCodecs[] = {CodecId::kNone, CodecId::kZeroMask, CodecId::kLz4,
                                         CodecId::kZstd, CodecId::kZeroMaskLz4, CodecId::kBf16};
// The lossless codecs: what an automatic choice may use unless lossy coding was asked for.
inline constexpr CodecId kLosslessCodecs[] = {CodecId::kNone, CodecId::kZeroMask, CodecId::kLz4, CodecId::kZstd,
                                              CodecId::kZeroMaskLz4};

// "none", "zero-mask", "lz4", "zstd", "zero-mask+lz4", "bf16".
std::string_view to_string(CodecId c);
// The codec named `name`, or nullopt.
std::optional<CodecId> codec_from_string(std::string_view name);
// The codec named `name`; InvalidArgument lists the names otherwise.
Result<CodecId> parse_codec(std::string_view name);
// True when decoding does not give back the encoded bytes bitwise (bf16).
constexpr bool is_lossy(CodecId c) { return c == CodecId::kBf16; }

// Frame geometry.
inline constexpr uint32_t kFrameFormatVersion = 1;
inline constexpr size_t kFrameHeaderBytes = 32;
inline constexpr size_t kChunkHeaderBytes = 16;
// 1 MiB of input per chunk: large enough that lz4/zstd see enough context and per-chunk overhead
// (16 bytes, one call) vanishes, small enough that a 64 MiB tensor is 64 pipeline steps.
inline constexpr uint32_t kDefaultChunkBytes = 1u << 20;
// Chunk sizes a frame may use: multiples of 64 bytes in [64 B, 64 MiB].
inline constexpr uint32_t kMinChunkBytes = 64;
inline constexpr uint32_t kMaxChunkBytes = 64u << 20;

// Chunks of a frame of `original_bytes` input.
constexpr uint64_t chunk_count(uint64_t original_bytes, uint32_t chunk_bytes) {
  return (original_bytes + chunk_bytes - 1) / chunk_bytes;
}
// Upper bound of an encoded chunk: its header plus its input stored raw.
constexpr uint64_t max_chunk_encoded_bytes(uint32_t chunk_bytes) { return kChunkHeaderBytes + chunk_bytes; }
// Upper bound of a frame of `original_bytes`: header + one chunk header per chunk + the input.
constexpr uint64_t max_encoded_bytes(uint64_t original_bytes, uint32_t chunk_bytes = kDefaultChunkBytes) {
  return kFrameHeaderBytes + kChunkHeaderBytes * chunk_count(original_bytes, chunk_bytes) + original_bytes;
}

// What a frame header says.
struct FrameInfo {
  CodecId codec = CodecId::kNone;
  uint64_t original_bytes = 0;
  uint32_t chunk_bytes = kDefaultChunkBytes;
  uint32_t chunk_count = 0;
  uint64_t header_checksum = 0;  // XXH64 of the header's first 24 bytes; seeds the chunk checksums

  // Offset of chunk `i`'s input in the original bytes, and its length.
  uint64_t chunk_offset(uint32_t i) const { return uint64_t{i} * chunk_bytes; }
  uint64_t chunk_input_bytes(uint32_t i) const;
};

// Tuning of the lz4 and zstd codecs (encoder side only: the frame does not need them to decode).
struct CodecOptions {
  // zstd level 1: zstd's fastest regular level. On float tensors higher levels gain little ratio
  // for several times the time (docs/codecs.md has the measurement), and a swap codec is only
  // worth running when it outpaces the tier.
  int zstd_level = 1;
  // LZ4's default acceleration (1): the best ratio of the fast mode; higher values trade ratio
  // for speed.
  int lz4_acceleration = 1;
};

// One thread's reusable coding state: zstd's compression and decompression contexts and a
// scratch buffer for stacked codecs. Not thread-safe; make one per thread that codes.
class CodecContext {
 public:
  explicit CodecContext(const CodecOptions& options = {});
  ~CodecContext();
  CodecContext(const CodecContext&) = delete;
  CodecContext& operator=(const CodecContext&) = delete;

  const CodecOptions& options() const { return options_; }
  struct State;  // library handles (codec.cc)
  State& state() { return *state_; }

 private:
  CodecOptions options_;
  std::unique_ptr<State> state_;
};

// Writes a frame chunk by chunk. Chunks are independent: encode_chunk() may run on several
// threads at once (each with its own CodecContext); the caller lays the chunks out in index
// order after the header.
class FrameEncoder {
 public:
  // A frame of `original_bytes` coded with `codec` in chunks of `chunk_bytes`. Errors
  // (InvalidArgument): chunk size outside [kMinChunkBytes, kMaxChunkBytes] or not a multiple of 64,
  // more than 2^32-1 chunks.
  static Result<FrameEncoder> create(CodecId codec, uint64_t original_bytes, uint32_t chunk_bytes = kDefaultChunkBytes);

  const FrameInfo& info() const { return info_; }
  // Writes the frame header to out[0, kFrameHeaderBytes). `out` must hold kFrameHeaderBytes.
  void write_header(std::span<std::byte> out) const;
  // Encodes chunk `index`, whose input is `input` (info().chunk_input_bytes(index) bytes), into
  // the front of `out` (at least max_chunk_encoded_bytes(chunk_bytes) bytes); returns the bytes
  // written. Errors: InvalidArgument for a wrong index or span size, Internal for a library
  // failure.
  Result<uint64_t> encode_chunk(CodecContext& ctx, uint32_t index, std::span<const std::byte> input,
                                std::span<std::byte> out) const;

 private:
  explicit FrameEncoder(const FrameInfo& info) : info_(info) {}
  FrameInfo info_;
};

// Reads a frame chunk by chunk as its bytes arrive.
class FrameDecoder {
 public:
  // Checks the frame header at the front of `frame_prefix` (the frame's first bytes). Errors
  // (kIoError): fewer than kFrameHeaderBytes, wrong magic, unknown version or codec, bad header
  // checksum, inconsistent sizes.
  static Result<FrameDecoder> open(std::span<const std::byte> frame_prefix);

  const FrameInfo& info() const { return info_; }
  // Decodes every not yet decoded chunk that lies entirely inside `frame_prefix` (the frame's
  // bytes from its first one, as many as have arrived; each call passes a longer or equal
  // prefix of the same frame) into `out` (info().original_bytes long). Returns how many leading
  // bytes of `out` are now final. Errors (kIoError) name the chunk: bad chunk header, checksum
  // mismatch, a payload its codec rejects. After an error the decoder must not be used again.
  Result<uint64_t> decode_available(CodecContext& ctx, std::span<const std::byte> frame_prefix,
                                    std::span<std::byte> out);
  // True when every chunk has been decoded.
  bool finished() const { return next_chunk_ == info_.chunk_count; }
  // Chunks decoded so far.
  uint32_t chunks_decoded() const { return next_chunk_; }
  // Bytes of the frame consumed so far (header and decoded chunks); the frame's size once finished().
  uint64_t consumed_bytes() const { return offset_; }

 private:
  explicit FrameDecoder(const FrameInfo& info) : info_(info), offset_(kFrameHeaderBytes) {}
  FrameInfo info_;
  uint32_t next_chunk_ = 0;
  uint64_t offset_ = 0;
};

// Decodes chunk `index` of the frame described by `info` from `record`, exactly its chunk header
// followed by its payload, into `out` (info.chunk_input_bytes(index) bytes): for readers that keep
// a frame's chunks apart, e.g. the SSD tier, which stores each chunk's payload at a fixed place
// and the chunk headers in memory. `info` is the encoder's (FrameEncoder::create with the same
// codec, size and chunk size gives it back). Errors (kIoError) name the chunk, as
// FrameDecoder::decode_available's: bad chunk header, payload size or checksum, a payload its
// codec rejects.
Status decode_chunk(CodecContext& ctx, const FrameInfo& info, uint32_t index, std::span<const std::byte> record,
                    std::span<std::byte> out);
// The same with the chunk header and the payload apart (a reader that keeps headers in memory and
// payloads in place, e.g. the host tier, decodes without first joining them).
Status decode_chunk(CodecContext& ctx, const FrameInfo& info, uint32_t index, std::span<const std::byte> header,
                    std::span<const std::byte> payload, std::span<std::byte> out);

// Encodes all of `input` as one frame into the front of `out` (at least
// max_encoded_bytes(input.size(), chunk_bytes) bytes); returns the frame's size.
Result<uint64_t> encode_frame(CodecContext& ctx, CodecId codec, std::span<const std::byte> input,
                              std::span<std::byte> out, uint32_t chunk_bytes = kDefaultChunkBytes);
// Same, into a new vector of exactly the frame's size.
Result<std::vector<std::byte>> encode_frame(CodecContext& ctx, CodecId codec, std::span<const std::byte> input,
                                            uint32_t chunk_bytes = kDefaultChunkBytes);
// Reads the header of the frame `encoded` (kIoError when it is not a valid header).
Result<FrameInfo> read_frame_info(std::span<const std::byte> encoded);
// Decodes the whole frame `encoded` into `out`, which must be exactly the frame's original size.
// Errors (kIoError): everything FrameDecoder reports, a truncated frame, bytes after the last
// chunk; InvalidArgument: `out` of the wrong size.
Status decode_frame(CodecContext& ctx, std::span<const std::byte> encoded, std::span<std::byte> out);

}  // namespace ferry
