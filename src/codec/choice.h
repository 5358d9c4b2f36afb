// The codec side of the cost model: the predicted time of a swap with a codec, and the automatic
// choice of a codec per tensor. Pure functions of measured estimates (codec/stats.h) and the
// tier's bandwidth; the cost model and the planner call them.
//
// Note [Pipelined codec time]
//   A transfer of `bytes` in k = ceil(bytes / chunk_bytes) chunks runs two stages chunk by chunk:
//   swap-out encodes chunk i+1 while the tier writes chunk i; swap-in decodes chunk i while the
//   tier reads chunk i+1. With the stage totals
//       C = bytes / codec_rate          (encode rate out, decode rate in; 0 for `none`)
//       W = ratio * bytes / wire_rate   (ratio = frame bytes / input bytes, measured; 1 for `none`)
//   and equal chunks, the pipeline takes
//       T = max(C, W) + min(C, W) / k
//   (the slower stage runs throughout; the faster one adds its share of one chunk to fill and
//   drain the pipeline). k = 1 gives the sum C + W, many chunks give max(C, W). The model assumes
//   the codec and the wire use different resources (a CPU thread and a DMA engine or disk) and that
//   compressibility is even across chunks. It ignores what the codec's thread takes from compute
//   on a CPU backend; the choice's `min_gain` margin covers that and measurement noise.
//
// Choice: for each candidate, the weighted time swap_out_weight * T_out + swap_in_weight * T_in.
// The fastest lossless codec is picked if it beats `none` by more than `min_gain` (relative),
// else `none`; then, only with `allow_lossy`, the fastest lossy codec replaces that pick if it
// beats it by more than `min_gain` too (precision is only given up for a clear gain).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "codec/codec.h"
#include "codec/stats.h"
#include "common/transfer.h"

namespace ferry {

// Predicted time of one transfer through the two-stage pipeline (Note [Pipelined codec time]).
struct TransferPrediction {
  double codec_seconds = 0;  // C: encoding (swap-out) or decoding (swap-in) every chunk
  double wire_seconds = 0;   // W: the tier moving the encoded bytes
  double total_seconds = 0;  // T: both overlapped chunk by chunk
  uint64_t wire_bytes = 0;   // bytes the tier moves (predicted)
};

// T = max(C, W) + min(C, W) / chunks; C + W for a single chunk, 0 for no chunks.
double pipelined_seconds(double codec_seconds, double wire_seconds, uint64_t chunks);

// Predicted time to move `bytes` in `direction` with `codec`, whose measured figures are
// `estimate` (ignored for kNone: raw bytes, no codec stage), over a tier moving
// `wire_bytes_per_s` in that direction.
TransferPrediction predict_transfer(Direction direction, uint64_t bytes, CodecId codec, const CodecEstimate& estimate,
                                    double wire_bytes_per_s, uint32_t chunk_bytes = kDefaultChunkBytes);

// The tier's bandwidth in each direction (swap-out writes, swap-in reads).
struct WireRates {
  double swap_out_bytes_per_s = 0;
  double swap_in_bytes_per_s = 0;
};

struct CodecCandidate {
  CodecId codec = CodecId::kNone;
  CodecEstimate estimate;
};

struct ChoiceOptions {
  bool allow_lossy = false;     // consider bf16 (the user asked for lossy coding)
  double min_gain = 0.05;       // a codec must predict more than this fraction less time than `none`
  double swap_out_weight = 1;   // how much each direction's time counts (a planner may weigh the
  double swap_in_weight = 1;    // swap-in on the critical path more)
  uint32_t chunk_bytes = kDefaultChunkBytes;
};

struct CodecChoice {
  CodecId codec = CodecId::kNone;
  TransferPrediction swap_out, swap_in;  // of the chosen codec
  double weighted_seconds = 0;           // of the chosen codec
  double none_weighted_seconds = 0;      // of raw bytes, for comparison
};

// Picks the codec for a tensor of `bytes` among `candidates` (kNone is always considered, with or
// without a candidate entry). Deterministic: ties go to the earlier candidate.
CodecChoice choose_codec(uint64_t bytes, std::span<const CodecCandidate> candidates, const WireRates& wire,
                         const ChoiceOptions& options = {});
// The same, with the candidates the measured `stats` hold for `tensor_class` (codecs without a
// sample are not considered).
CodecChoice choose_codec(uint64_t bytes, const CodecStats& stats, std::string_view tensor_class, const WireRates& wire,
                         const ChoiceOptions& options = {});

}  // namespace ferry
