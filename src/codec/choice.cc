// Predicted codec time and the automatic choice (Note [Pipelined codec time] in choice.h).
#include "codec/choice.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

namespace ferry {

double pipelined_seconds(double codec_seconds, double wire_seconds, uint64_t chunks) {
  if (chunks == 0) return 0;
  const double slow = std::max(codec_seconds, wire_seconds), fast = std::min(codec_seconds, wire_seconds);
  return slow + fast / static_cast<double>(chunks);
}

TransferPrediction predict_transfer(Direction direction, uint64_t bytes, CodecId codec, const CodecEstimate& estimate,
                                    double wire_bytes_per_s, uint32_t chunk_bytes) {
  FERRY_CHECK(wire_bytes_per_s > 0, "wire rate {} bytes/s", wire_bytes_per_s);
  TransferPrediction p;
  const double in_bytes = static_cast<double>(bytes);
  if (codec == CodecId::kNone) {
    p.wire_bytes = bytes;
  } else {
    const double rate = direction == Direction::kSwapOut ? estimate.encode_bytes_per_s : estimate.decode_bytes_per_s;
    FERRY_CHECK(rate > 0 && estimate.ratio > 0, "codec {} estimate: rate {}, ratio {}", to_string(codec), rate,
                estimate.ratio);
    p.codec_seconds = std::isinf(rate) ? 0 : in_bytes / rate;
    p.wire_bytes = static_cast<uint64_t>(std::ceil(estimate.ratio * in_bytes));
  }
  p.wire_seconds = static_cast<double>(p.wire_bytes) / wire_bytes_per_s;
  // `none` is one stage (nothing to overlap): pipelined_seconds(0, W, k) = W.
  p.total_seconds = pipelined_seconds(p.codec_seconds, p.wire_seconds, chunk_count(bytes, chunk_bytes));
  return p;
}

CodecChoice choose_codec(uint64_t bytes, std::span<const CodecCandidate> candidates, const WireRates& wire,
                         const ChoiceOptions& options) {
  const auto evaluate = [&](CodecId codec, const CodecEstimate& estimate) {
    CodecChoice c;
    c.codec = codec;
    c.swap_out = predict_transfer(Direction::kSwapOut, bytes, codec, estimate, wire.swap_out_bytes_per_s,
                                  options.chunk_bytes);
    c.swap_in = predict_transfer(Direction::kSwapIn, bytes, codec, estimate, wire.swap_in_bytes_per_s,
                                 options.chunk_bytes);
    c.weighted_seconds =
        options.swap_out_weight * c.swap_out.total_seconds + options.swap_in_weight * c.swap_in.total_seconds;
    return c;
  };
  const CodecChoice none = evaluate(CodecId::kNone, CodecEstimate{});
  // The fastest lossless and the fastest lossy candidate.
  std::optional<CodecChoice> lossless, lossy;
  for (const CodecCandidate& cand : candidates) {
    if (cand.codec == CodecId::kNone || (is_lossy(cand.codec) && !options.allow_lossy)) continue;
    CodecChoice c = evaluate(cand.codec, cand.estimate);
    std::optional<CodecChoice>& best = is_lossy(c.codec) ? lossy : lossless;
    if (!best || c.weighted_seconds < best->weighted_seconds) best = c;
  }
  const auto beats = [&](const std::optional<CodecChoice>& c, const CodecChoice& than) {
    return c && c->weighted_seconds < (1 - options.min_gain) * than.weighted_seconds;
  };
  CodecChoice pick = beats(lossless, none) ? *lossless : none;
  if (beats(lossy, pick)) pick = *lossy;  // precision is only given up for a clear gain
  pick.none_weighted_seconds = none.weighted_seconds;
  return pick;
}

CodecChoice choose_codec(uint64_t bytes, const CodecStats& stats, std::string_view tensor_class, const WireRates& wire,
                         const ChoiceOptions& options) {
  std::vector<CodecCandidate> candidates;
  for (CodecId c : kAllCodecs)
    if (std::optional<CodecEstimate> e = stats.estimate(tensor_class, c)) candidates.push_back({c, *e});
  return choose_codec(bytes, candidates, wire, options);
}

}  // namespace ferry
