#include "codec/stats.h"

#include <chrono>
#include <cstring>
#include <limits>

#include <fmt/format.h>

namespace ferry {

CodecStats::CodecStats(double history_weight) : history_weight_(history_weight) {
  FERRY_CHECK(history_weight >= 0 && history_weight <= 1, "history weight {} outside [0, 1]", history_weight);
}

void CodecStats::record(std::string_view tensor_class, CodecId codec, const CodecSample& sample) {
  if (sample.input_bytes == 0) return;
  auto it = sums_.find(tensor_class);
  if (it == sums_.end()) it = sums_.emplace(std::string(tensor_class), std::map<CodecId, Sums>{}).first;
  Sums& s = it->second[codec];
  const double h = history_weight_;
  s.input_bytes = h * s.input_bytes + static_cast<double>(sample.input_bytes);
  s.encoded_bytes = h * s.encoded_bytes + static_cast<double>(sample.encoded_bytes);
  s.encode_seconds = h * s.encode_seconds + sample.encode_seconds;
  s.decode_seconds = h * s.decode_seconds + sample.decode_seconds;
  ++s.samples;
}

std::optional<CodecEstimate> CodecStats::estimate(std::string_view tensor_class, CodecId codec) const {
  auto it = sums_.find(tensor_class);
  if (it == sums_.end()) return std::nullopt;
  auto codec_it = it->second.find(codec);
  if (codec_it == it->second.end()) return std::nullopt;
  const Sums& s = codec_it->second;
  const auto rate = [&](double seconds) {
    return seconds > 0 ? s.input_bytes / seconds : std::numeric_limits<double>::infinity();
  };
  return CodecEstimate{s.encoded_bytes / s.input_bytes, rate(s.encode_seconds), rate(s.decode_seconds), s.samples};
}

std::vector<CodecId> CodecStats::unmeasured(std::string_view tensor_class, std::span<const CodecId> candidates) const {
  std::vector<CodecId> missing;
  for (CodecId c : candidates)
    if (!estimate(tensor_class, c)) missing.push_back(c);
  return missing;
}

std::vector<std::string> CodecStats::classes() const {
  std::vector<std::string> names;
  for (const auto& [name, per_codec] : sums_) names.push_back(name);
  return names;
}

std::vector<CodecFigure> CodecStats::figures() const {
  std::vector<CodecFigure> out;
  for (const auto& [name, per_codec] : sums_)
    for (const auto& [codec, sums] : per_codec)
      if (std::optional<CodecEstimate> e = estimate(name, codec)) out.push_back({name, codec, *e});
  return out;
}

Result<CodecSample> measure_codec(CodecContext& ctx, CodecId codec, std::span<const std::byte> bytes,
                                  uint32_t chunk_bytes) {
  using Clock = std::chrono::steady_clock;
  std::vector<std::byte> frame(max_encoded_bytes(bytes.size(), chunk_bytes));  // zeroed: touched
  std::vector<std::byte> decoded(bytes.size());
  const auto t0 = Clock::now();
  FERRY_ASSIGN_OR_RETURN(uint64_t frame_bytes, encode_frame(ctx, codec, bytes, frame, chunk_bytes));
  const auto t1 = Clock::now();
  FERRY_RETURN_IF_ERROR(decode_frame(ctx, std::span(frame).first(frame_bytes), decoded));
  const auto t2 = Clock::now();
  if (!is_lossy(codec) && !bytes.empty() && std::memcmp(decoded.data(), bytes.data(), bytes.size()) != 0)
    return Status::Internal(fmt::format("codec {} did not restore {} bytes bitwise", to_string(codec), bytes.size()));
  return CodecSample{bytes.size(), frame_bytes, std::chrono::duration<double>(t1 - t0).count(),
                     std::chrono::duration<double>(t2 - t1).count()};
}

}  // namespace ferry
