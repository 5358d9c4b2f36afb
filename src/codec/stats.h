// Online measurement of codecs: what each codec achieves (ratio, encode and decode throughput)
// on each class of tensors, from samples the runtime takes of the tensors it really swaps.
//
// Design
// - A tensor class is the caller's key (for example "relu/activation" or "conv2d/activation":
//   the producing op and the role); tensors of one class compress alike.
// - Estimates are decayed sums: each new sample is added to the sums after they are multiplied
//   by `history_weight`, so estimates follow drift (weights that change, sparsity that grows)
//   while one odd sample moves them only partly. Ratio = sum(encoded) / sum(input) and
//   throughput = sum(input) / sum(seconds): large samples weigh more, as they should when the
//   estimate predicts bytes.
// - measure_codec() takes one sample: it encodes and decodes real bytes with the frame format
//   (so the ratio includes the frame's overhead) and checks that a lossless codec gave every byte
//   back; it is the measuring hook the runtime calls.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "codec/codec.h"
#include "common/status.h"

namespace ferry {

// One measurement of a codec on some bytes.
struct CodecSample {
  uint64_t input_bytes = 0;
  uint64_t encoded_bytes = 0;  // the whole frame
  double encode_seconds = 0;
  double decode_seconds = 0;
};

// What is known of a codec on a class of tensors (measured).
struct CodecEstimate {
  double ratio = 1;                // encoded bytes / input bytes (below 1: it shrinks)
  double encode_bytes_per_s = 0;   // input bytes encoded per second (infinite when too fast to time)
  double decode_bytes_per_s = 0;   // input bytes restored per second
  uint64_t samples = 0;
  bool operator==(const CodecEstimate&) const = default;
};

// A measured estimate of one codec on one class of tensors: what the cost model predicts coded
// transfers with (CostOptions::codecs) and what the profile cache keeps.
struct CodecFigure {
  std::string tensor_class;
  CodecId codec = CodecId::kNone;
  CodecEstimate estimate;
  bool operator==(const CodecFigure&) const = default;
};

class CodecStats {
 public:
  // `history_weight` in [0, 1]: how much the past counts against each new sample (0: the last
  // sample only; 1: all samples alike).
  explicit CodecStats(double history_weight = 0.8);

  // Adds a sample of `codec` on tensors of `tensor_class`. Samples of 0 bytes are ignored.
  void record(std::string_view tensor_class, CodecId codec, const CodecSample& sample);
  // The estimate of `codec` on `tensor_class`, or nullopt before its first sample.
  std::optional<CodecEstimate> estimate(std::string_view tensor_class, CodecId codec) const;
  // The codecs of `candidates` without a sample on `tensor_class` (what to measure next).
  std::vector<CodecId> unmeasured(std::string_view tensor_class, std::span<const CodecId> candidates) const;
  // The classes with at least one sample, sorted.
  std::vector<std::string> classes() const;
  // Every estimate, sorted by class, then codec.
  std::vector<CodecFigure> figures() const;

 private:
  struct Sums {
    double input_bytes = 0, encoded_bytes = 0, encode_seconds = 0, decode_seconds = 0;
    uint64_t samples = 0;
  };
  double history_weight_;
  std::map<std::string, std::map<CodecId, Sums>, std::less<>> sums_;  // class -> codec -> sums
};

// Encodes `bytes` with `codec` in chunks of `chunk_bytes`, decodes the frame, and returns the
// sizes and the two wall times. Errors: Internal when a lossless codec did not give back every
// byte (a bug), and what encode_frame/decode_frame report. Allocates two buffers of about
// bytes.size() and touches them before timing.
Result<CodecSample> measure_codec(CodecContext& ctx, CodecId codec, std::span<const std::byte> bytes,
                                  uint32_t chunk_bytes = kDefaultChunkBytes);

}  // namespace ferry
