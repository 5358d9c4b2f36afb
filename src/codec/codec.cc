// Frames and chunk coding (the API is described in codec.h).
//
// Note [Frame format]
//   All integers little-endian. Version 1:
//     frame header, 32 bytes:
//       0  4  magic "FRYC"
//       4  1  format version (1)
//       5  1  codec (CodecId)
//       6  2  reserved, zero
//       8  8  original bytes
//       16 4  chunk bytes (input bytes per chunk; the last chunk holds the rest)
//       20 4  chunk count = ceil(original / chunk bytes)
//       24 8  XXH64 of bytes 0..23, seed 0 ("header checksum")
//     then per chunk, in order:
//       0  4  payload bytes
//       4  1  method: kNone (payload = the input, stored raw), the frame's codec, or for
//             zero-mask+lz4 also kZeroMask (lz4 did not shrink the zero-mask payload further)
//       5  3  reserved, zero
//       8  8  XXH64 of the payload, seed = header checksum ^ (chunk index << 8 | method)
//       16 .. payload
//   A stored chunk's payload is exactly its input size; any other method's payload is strictly
//   smaller (the encoder stores a chunk raw unless the codec shrinks it), so a frame never
//   exceeds max_encoded_bytes(). Seeding the chunk checksum with the header checksum, the index
//   and the method detects chunks of another frame, chunks out of order and a flipped method as
//   well as flipped payload bits.
//
// lz4 and zstd chunks are plain LZ4 blocks and zstd frames: the chunk header already carries the
// sizes and checksum, and their decoders are asked to produce exactly the chunk's input size.
#include "codec/codec.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

#include <fmt/format.h>
#include <lz4.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "codec/kernels.h"
#include "common/checksum.h"

namespace ferry {

namespace ck = codec_kernels;

struct CodecContext::State {
  ZSTD_CCtx* zstd_compress = nullptr;
  ZSTD_DCtx* zstd_decompress = nullptr;
  std::vector<std::byte> scratch;  // the zero-mask stage of zero-mask+lz4

  ~State() {
    ZSTD_freeCCtx(zstd_compress);
    ZSTD_freeDCtx(zstd_decompress);
  }
  std::span<std::byte> scratch_of(size_t bytes) {
    if (scratch.size() < bytes) scratch.resize(bytes);
    return std::span(scratch).first(bytes);
  }
};

CodecContext::CodecContext(const CodecOptions& options) : options_(options), state_(std::make_unique<State>()) {}
CodecContext::~CodecContext() = default;

namespace {

static_assert(std::endian::native == std::endian::little, "codec frames are little-endian");
constexpr std::byte kMagic[4] = {std::byte{'F'}, std::byte{'R'}, std::byte{'Y'}, std::byte{'C'}};

template <typename T>
T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <typename T>
void store(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

uint64_t chunk_seed(const FrameInfo& info, uint32_t index, CodecId method) {
  return info.header_checksum ^ (uint64_t{index} << 8 | static_cast<uint8_t>(method));
}

Status frame_error(const std::string& what) { return Status::IoError("corrupt codec frame: " + what); }

Status chunk_error(const FrameInfo& info, uint32_t index, const std::string& what) {
  return frame_error(fmt::format("chunk {} of {} ({} frame of {} bytes): {}", index, info.chunk_count,
                                 to_string(info.codec), info.original_bytes, what));
}

bool valid_chunk_bytes(uint32_t chunk_bytes) {
  return chunk_bytes >= kMinChunkBytes && chunk_bytes <= kMaxChunkBytes && chunk_bytes % 64 == 0;
}

bool known_codec(uint8_t id) { return id <= static_cast<uint8_t>(CodecId::kBf16); }

// Methods a chunk of a `frame_codec` frame may use.
bool allowed_method(CodecId frame_codec, CodecId method) {
  return method == CodecId::kNone || method == frame_codec ||
         (frame_codec == CodecId::kZeroMaskLz4 && method == CodecId::kZeroMask);
}

// --- per-codec chunk encoders: each writes a payload strictly smaller than the input into
// `out` (capacity input.size() - 1) and returns its size, or nullopt when it cannot shrink it.

std::optional<size_t> encode_lz4(CodecContext& ctx, std::span<const std::byte> in, std::span<std::byte> out) {
  if (in.size() > static_cast<size_t>(LZ4_MAX_INPUT_SIZE) || out.empty()) return std::nullopt;
  const int n = LZ4_compress_fast(reinterpret_cast<const char*>(in.data()), reinterpret_cast<char*>(out.data()),
                                  static_cast<int>(in.size()), static_cast<int>(out.size()),
                                  ctx.options().lz4_acceleration);
  if (n <= 0) return std::nullopt;  // does not fit: the chunk is stored
  return static_cast<size_t>(n);
}

Result<std::optional<size_t>> encode_zstd(CodecContext& ctx, std::span<const std::byte> in, std::span<std::byte> out) {
  CodecContext::State& st = ctx.state();
  if (st.zstd_compress == nullptr && (st.zstd_compress = ZSTD_createCCtx()) == nullptr)
    return Status::Internal("zstd: cannot create a compression context");
  const size_t n = ZSTD_compressCCtx(st.zstd_compress, out.data(), out.size(), in.data(), in.size(),
                                     ctx.options().zstd_level);
  if (ZSTD_isError(n)) {
    if (ZSTD_getErrorCode(n) == ZSTD_error_dstSize_tooSmall) return std::optional<size_t>();
    return Status::Internal(fmt::format("zstd compression failed: {}", ZSTD_getErrorName(n)));
  }
  return std::optional<size_t>(n);
}

// Encodes one chunk's payload with `codec`; returns (method, payload bytes).
Result<std::pair<CodecId, size_t>> encode_payload(CodecContext& ctx, CodecId codec, std::span<const std::byte> in,
                                                  std::span<std::byte> out) {
  const std::pair<CodecId, size_t> stored{CodecId::kNone, in.size()};
  if (in.empty()) return stored;
  std::span<std::byte> smaller = out.first(in.size() - 1);
  std::optional<size_t> n;
  switch (codec) {
    case CodecId::kNone: break;
    case CodecId::kZeroMask: n = ck::zero_mask_encode(in, smaller); break;
    case CodecId::kLz4: n = encode_lz4(ctx, in, smaller); break;
    case CodecId::kZstd: {
      FERRY_ASSIGN_OR_RETURN(n, encode_zstd(ctx, in, smaller));
      break;
    }
    case CodecId::kZeroMaskLz4: {
      std::span<std::byte> masked = ctx.state().scratch_of(ck::zero_mask_max_bytes(in.size()));
      const std::optional<size_t> m = ck::zero_mask_encode(in, masked);
      FERRY_CHECK(m.has_value(), "zero-mask scratch sized to its maximum");
      // lz4 must beat both the raw bytes and the zero-mask payload it compresses.
      n = encode_lz4(ctx, masked.first(*m), smaller.first(std::min(smaller.size(), *m - 1)));
      if (n) return std::pair{codec, *n};
      if (*m < in.size()) {
        std::memcpy(out.data(), masked.data(), *m);
        return std::pair{CodecId::kZeroMask, *m};
      }
      break;
    }
    case CodecId::kBf16:
      if (ck::bf16_bytes(in.size()) < in.size()) {
        ck::bf16_encode(in, out);
        n = ck::bf16_bytes(in.size());
      }
      break;
  }
  if (n) return std::pair{codec, *n};
  std::memcpy(out.data(), in.data(), in.size());
  return stored;
}

// --- per-method chunk decoders: `out` is the chunk's input size; false/error on a bad payload.

Status decode_lz4(std::span<const std::byte> payload, std::span<std::byte> out, const char* what) {
  const int n = LZ4_decompress_safe(reinterpret_cast<const char*>(payload.data()), reinterpret_cast<char*>(out.data()),
                                    static_cast<int>(payload.size()), static_cast<int>(out.size()));
  if (n < 0 || static_cast<size_t>(n) != out.size())
    return Status::IoError(fmt::format("{} payload does not decode to {} bytes (lz4 says {})", what, out.size(), n));
  return Status::Ok();
}

Status decode_payload(CodecContext& ctx, CodecId method, std::span<const std::byte> payload, std::span<std::byte> out) {
  CodecContext::State& st = ctx.state();
  switch (method) {
    case CodecId::kNone:
      if (!out.empty()) std::memcpy(out.data(), payload.data(), out.size());
      return Status::Ok();
    case CodecId::kZeroMask:
      if (!ck::zero_mask_decode(payload, out))
        return Status::IoError("zero-mask payload is malformed (its size does not match its mask)");
      return Status::Ok();
    case CodecId::kLz4: return decode_lz4(payload, out, "lz4");
    case CodecId::kZstd: {
      if (st.zstd_decompress == nullptr && (st.zstd_decompress = ZSTD_createDCtx()) == nullptr)
        return Status::Internal("zstd: cannot create a decompression context");
      const size_t n = ZSTD_decompressDCtx(st.zstd_decompress, out.data(), out.size(), payload.data(), payload.size());
      if (ZSTD_isError(n))
        return Status::IoError(fmt::format("zstd payload does not decode: {}", ZSTD_getErrorName(n)));
      if (n != out.size()) return Status::IoError(fmt::format("zstd payload decodes to {} bytes, not {}", n, out.size()));
      return Status::Ok();
    }
    case CodecId::kZeroMaskLz4: {
      std::span<std::byte> masked = st.scratch_of(ck::zero_mask_max_bytes(out.size()));
      const int n = LZ4_decompress_safe(reinterpret_cast<const char*>(payload.data()),
                                        reinterpret_cast<char*>(masked.data()), static_cast<int>(payload.size()),
                                        static_cast<int>(masked.size()));
      if (n < 0) return Status::IoError("zero-mask+lz4 payload: lz4 stage does not decode");
      if (!ck::zero_mask_decode(masked.first(static_cast<size_t>(n)), out))
        return Status::IoError("zero-mask+lz4 payload: zero-mask stage is malformed");
      return Status::Ok();
    }
    case CodecId::kBf16:
      if (payload.size() != ck::bf16_bytes(out.size()))
        return Status::IoError(fmt::format("bf16 payload has {} bytes, not {}", payload.size(), ck::bf16_bytes(out.size())));
      ck::bf16_decode(payload, out);
      return Status::Ok();
  }
  return Status::Internal("unknown codec method");
}

// Writes the header's first 24 bytes (everything but its checksum).
void write_header_fields(const FrameInfo& info, std::byte* out) {
  std::memcpy(out, kMagic, 4);
  out[4] = std::byte{kFrameFormatVersion};
  out[5] = std::byte{static_cast<uint8_t>(info.codec)};
  store<uint16_t>(out + 6, 0);
  store<uint64_t>(out + 8, info.original_bytes);
  store<uint32_t>(out + 16, info.chunk_bytes);
  store<uint32_t>(out + 20, info.chunk_count);
}

// Checks chunk `i`'s header `h` (kChunkHeaderBytes) against the frame; returns its payload size.
Result<uint32_t> check_chunk_header(const FrameInfo& info, uint32_t i, const std::byte* h) {
  const uint32_t payload_bytes = load<uint32_t>(h);
  const uint8_t method_id = std::to_integer<uint8_t>(h[4]);
  const uint64_t input_bytes = info.chunk_input_bytes(i);
  if (!known_codec(method_id) || !allowed_method(info.codec, static_cast<CodecId>(method_id)) || h[5] != std::byte{0} ||
      h[6] != std::byte{0} || h[7] != std::byte{0})
    return chunk_error(info, i, fmt::format("bad chunk header (method {})", method_id));
  const CodecId method = static_cast<CodecId>(method_id);
  if (method == CodecId::kNone ? payload_bytes != input_bytes : payload_bytes >= input_bytes)
    return chunk_error(info, i, fmt::format("{} payload of {} bytes for {} input bytes", to_string(method),
                                            payload_bytes, input_bytes));
  return payload_bytes;
}

Result<FrameInfo> make_info(CodecId codec, uint64_t original_bytes, uint32_t chunk_bytes) {
  if (!valid_chunk_bytes(chunk_bytes))
    return Status::InvalidArgument(fmt::format("codec chunk size {} bytes: must be a multiple of 64 in [{}, {}]",
                                               chunk_bytes, kMinChunkBytes, kMaxChunkBytes));
  const uint64_t chunks = chunk_count(original_bytes, chunk_bytes);
  if (chunks > UINT32_MAX)
    return Status::InvalidArgument(fmt::format("{} bytes in chunks of {} bytes make {} chunks, more than a frame holds ({})",
                                               original_bytes, chunk_bytes, chunks, UINT32_MAX));
  FrameInfo info;
  info.codec = codec;
  info.original_bytes = original_bytes;
  info.chunk_bytes = chunk_bytes;
  info.chunk_count = static_cast<uint32_t>(chunks);
  std::byte header[kFrameHeaderBytes];
  write_header_fields(info, header);
  info.header_checksum = hash64(std::span<const std::byte>(header, 24));
  return info;
}

}  // namespace

std::string_view to_string(CodecId c) {
  switch (c) {
    case CodecId::kNone: return "none";
    case CodecId::kZeroMask: return "zero-mask";
    case CodecId::kLz4: return "lz4";
    case CodecId::kZstd: return "zstd";
    case CodecId::kZeroMaskLz4: return "zero-mask+lz4";
    case CodecId::kBf16: return "bf16";
  }
  return "unknown";
}

std::optional<CodecId> codec_from_string(std::string_view name) {
  for (CodecId c : kAllCodecs)
    if (to_string(c) == name) return c;
  return std::nullopt;
}

Result<CodecId> parse_codec(std::string_view name) {
  if (std::optional<CodecId> c = codec_from_string(name)) return *c;
  std::string names;
  for (CodecId c : kAllCodecs) names += fmt::format("{}{}", names.empty() ? "" : ", ", to_string(c));
  return Status::InvalidArgument(fmt::format("unknown codec '{}' (known: {})", name, names));
}

uint64_t FrameInfo::chunk_input_bytes(uint32_t i) const {
  const uint64_t offset = chunk_offset(i);
  return offset >= original_bytes ? 0 : std::min<uint64_t>(chunk_bytes, original_bytes - offset);
}

Result<FrameEncoder> FrameEncoder::create(CodecId codec, uint64_t original_bytes, uint32_t chunk_bytes) {
  FERRY_ASSIGN_OR_RETURN(FrameInfo info, make_info(codec, original_bytes, chunk_bytes));
  return FrameEncoder(info);
}

void FrameEncoder::write_header(std::span<std::byte> out) const {
  FERRY_CHECK(out.size() >= kFrameHeaderBytes, "frame header needs {} bytes, got {}", kFrameHeaderBytes, out.size());
  write_header_fields(info_, out.data());
  store<uint64_t>(out.data() + 24, info_.header_checksum);
}

Result<uint64_t> FrameEncoder::encode_chunk(CodecContext& ctx, uint32_t index, std::span<const std::byte> input,
                                            std::span<std::byte> out) const {
  if (index >= info_.chunk_count)
    return Status::InvalidArgument(fmt::format("chunk {} of a frame of {} chunks", index, info_.chunk_count));
  if (input.size() != info_.chunk_input_bytes(index))
    return Status::InvalidArgument(fmt::format("chunk {} has {} input bytes, the frame says {}", index, input.size(),
                                               info_.chunk_input_bytes(index)));
  if (out.size() < kChunkHeaderBytes + input.size())
    return Status::InvalidArgument(fmt::format("chunk {} needs up to {} output bytes, got {}", index,
                                               kChunkHeaderBytes + input.size(), out.size()));
  std::span<std::byte> payload = out.subspan(kChunkHeaderBytes, input.size());
  FERRY_ASSIGN_OR_RETURN(auto coded, encode_payload(ctx, info_.codec, input, payload));
  const auto [method, payload_bytes] = coded;
  store<uint32_t>(out.data(), static_cast<uint32_t>(payload_bytes));
  out[4] = std::byte{static_cast<uint8_t>(method)};
  out[5] = out[6] = out[7] = std::byte{0};
  store<uint64_t>(out.data() + 8, hash64(payload.first(payload_bytes), chunk_seed(info_, index, method)));
  return kChunkHeaderBytes + payload_bytes;
}

Result<FrameDecoder> FrameDecoder::open(std::span<const std::byte> frame_prefix) {
  if (frame_prefix.size() < kFrameHeaderBytes)
    return frame_error(fmt::format("{} bytes, shorter than a frame header ({} bytes)", frame_prefix.size(),
                                   kFrameHeaderBytes));
  const std::byte* h = frame_prefix.data();
  if (std::memcmp(h, kMagic, 4) != 0) return frame_error("bad magic (not a Ferry codec frame)");
  const uint8_t version = std::to_integer<uint8_t>(h[4]), codec = std::to_integer<uint8_t>(h[5]);
  if (version != kFrameFormatVersion)
    return frame_error(fmt::format("format version {}, this build reads version {}", version, kFrameFormatVersion));
  const uint64_t checksum = hash64(frame_prefix.first(24));
  if (checksum != load<uint64_t>(h + 24)) return frame_error("header checksum mismatch");
  if (!known_codec(codec) || load<uint16_t>(h + 6) != 0)
    return frame_error(fmt::format("unknown codec id {} or reserved bits set", codec));
  Result<FrameInfo> info = make_info(static_cast<CodecId>(codec), load<uint64_t>(h + 8), load<uint32_t>(h + 16));
  if (!info.ok()) return frame_error(info.status().message());
  if (info->chunk_count != load<uint32_t>(h + 20))
    return frame_error(fmt::format("{} chunks for {} bytes in chunks of {}", load<uint32_t>(h + 20),
                                   info->original_bytes, info->chunk_bytes));
  FERRY_CHECK(info->header_checksum == checksum, "header checksum recomputed from the same bytes");
  return FrameDecoder(*info);
}

Result<uint64_t> FrameDecoder::decode_available(CodecContext& ctx, std::span<const std::byte> frame_prefix,
                                                std::span<std::byte> out) {
  if (out.size() != info_.original_bytes)
    return Status::InvalidArgument(
        fmt::format("decode output has {} bytes, the frame holds {}", out.size(), info_.original_bytes));
  while (next_chunk_ < info_.chunk_count && frame_prefix.size() >= offset_ + kChunkHeaderBytes) {
    const uint32_t i = next_chunk_;
    FERRY_ASSIGN_OR_RETURN(const uint32_t payload_bytes, check_chunk_header(info_, i, frame_prefix.data() + offset_));
    if (frame_prefix.size() < offset_ + kChunkHeaderBytes + payload_bytes) break;
    FERRY_RETURN_IF_ERROR(decode_chunk(ctx, info_, i, frame_prefix.subspan(offset_, kChunkHeaderBytes + payload_bytes),
                                       out.subspan(info_.chunk_offset(i), info_.chunk_input_bytes(i))));
    offset_ += kChunkHeaderBytes + payload_bytes;
    ++next_chunk_;
  }
  return std::min<uint64_t>(info_.chunk_offset(next_chunk_), info_.original_bytes);
}

Status decode_chunk(CodecContext& ctx, const FrameInfo& info, uint32_t i, std::span<const std::byte> record,
                    std::span<std::byte> out) {
  if (record.size() < kChunkHeaderBytes)
    return chunk_error(info, i, fmt::format("record of {} bytes, shorter than a chunk header", record.size()));
  return decode_chunk(ctx, info, i, record.first(kChunkHeaderBytes), record.subspan(kChunkHeaderBytes), out);
}

Status decode_chunk(CodecContext& ctx, const FrameInfo& info, uint32_t i, std::span<const std::byte> header,
                    std::span<const std::byte> payload, std::span<std::byte> out) {
  if (i >= info.chunk_count) return chunk_error(info, i, "no such chunk");
  const uint64_t input_bytes = info.chunk_input_bytes(i);
  if (out.size() != input_bytes)
    return Status::InvalidArgument(fmt::format("chunk {} decodes to {} bytes, its output has {}", i, input_bytes,
                                               out.size()));
  if (header.size() != kChunkHeaderBytes)
    return chunk_error(info, i, fmt::format("chunk header of {} bytes, not {}", header.size(), kChunkHeaderBytes));
  FERRY_ASSIGN_OR_RETURN(const uint32_t payload_bytes, check_chunk_header(info, i, header.data()));
  const CodecId method = static_cast<CodecId>(std::to_integer<uint8_t>(header[4]));
  if (payload.size() != payload_bytes)
    return chunk_error(info, i, fmt::format("record of {} bytes, its header says {}", kChunkHeaderBytes + payload.size(),
                                            kChunkHeaderBytes + payload_bytes));
  if (hash64(payload, chunk_seed(info, i, method)) != load<uint64_t>(header.data() + 8))
    return chunk_error(info, i, "payload checksum mismatch");
  Status s = decode_payload(ctx, method, payload, out);
  if (!s.ok()) return s.code() == StatusCode::kIoError ? chunk_error(info, i, s.message()) : s;
  return Status::Ok();
}

Result<uint64_t> encode_frame(CodecContext& ctx, CodecId codec, std::span<const std::byte> input,
                              std::span<std::byte> out, uint32_t chunk_bytes) {
  FERRY_ASSIGN_OR_RETURN(FrameEncoder enc, FrameEncoder::create(codec, input.size(), chunk_bytes));
  if (out.size() < max_encoded_bytes(input.size(), chunk_bytes))
    return Status::InvalidArgument(fmt::format("frame output of {} bytes, below the bound of {} bytes", out.size(),
                                               max_encoded_bytes(input.size(), chunk_bytes)));
  enc.write_header(out);
  uint64_t offset = kFrameHeaderBytes;
  for (uint32_t i = 0; i < enc.info().chunk_count; ++i) {
    std::span<const std::byte> chunk = input.subspan(enc.info().chunk_offset(i), enc.info().chunk_input_bytes(i));
    FERRY_ASSIGN_OR_RETURN(uint64_t n, enc.encode_chunk(ctx, i, chunk, out.subspan(offset)));
    offset += n;
  }
  return offset;
}

Result<std::vector<std::byte>> encode_frame(CodecContext& ctx, CodecId codec, std::span<const std::byte> input,
                                            uint32_t chunk_bytes) {
  if (!valid_chunk_bytes(chunk_bytes)) return make_info(codec, input.size(), chunk_bytes).status();
  std::vector<std::byte> out(max_encoded_bytes(input.size(), chunk_bytes));
  FERRY_ASSIGN_OR_RETURN(uint64_t n, encode_frame(ctx, codec, input, out, chunk_bytes));
  out.resize(n);
  return out;
}

Result<FrameInfo> read_frame_info(std::span<const std::byte> encoded) {
  FERRY_ASSIGN_OR_RETURN(FrameDecoder dec, FrameDecoder::open(encoded));
  return dec.info();
}

Status decode_frame(CodecContext& ctx, std::span<const std::byte> encoded, std::span<std::byte> out) {
  FERRY_ASSIGN_OR_RETURN(FrameDecoder dec, FrameDecoder::open(encoded));
  FERRY_RETURN_IF_ERROR(dec.decode_available(ctx, encoded, out).status());
  if (!dec.finished())
    return frame_error(fmt::format("truncated: {} bytes hold {} of its {} chunks", encoded.size(),
                                   dec.chunks_decoded(), dec.info().chunk_count));
  if (dec.consumed_bytes() != encoded.size())
    return frame_error(fmt::format("{} bytes after the last chunk (frame of {} bytes)",
                                   encoded.size() - dec.consumed_bytes(), dec.consumed_bytes()));
  return Status::Ok();
}

}  // namespace ferry
