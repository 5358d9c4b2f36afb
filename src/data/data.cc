#include "data/data.h"

#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "common/file_io.h"
#include "common/hash.h"

namespace ferry {

namespace {

// A CIFAR-10 binary batch is 10000 records of 3073 bytes (30,730,000 bytes); allow twice that.
constexpr uint64_t kMaxCifarBatchBytes = uint64_t{64} << 20;

uint64_t hash(uint64_t a, uint64_t b, uint64_t c = 0, uint64_t d = 0) {
  return splitmix64(splitmix64(splitmix64(splitmix64(a) ^ b) ^ c) ^ d);
}
float uniform(uint64_t h) { return static_cast<float>(h >> 40) * (1.0f / 16777216.0f); }  // [0,1)

class SyntheticData final : public DataSource {
 public:
  explicit SyntheticData(uint64_t seed) : seed_(seed) {}
  std::string name() const override { return "synthetic"; }

  Status fill(const Graph& g, int64_t iteration, std::vector<std::vector<std::byte>>& host) override {
    std::vector<TensorId> ins = data_inputs(g);
    host.resize(ins.size());
    // Class or token sequence of every sample, shared by the image/ids and label inputs.
    int64_t batch = 0, seq = 0, classes = std::max<int64_t>(g.info.num_classes, 2);
    for (TensorId t : ins) {
      const Tensor& tt = g.tensor(t);
      batch = tt.shape.empty() ? 1 : tt.shape[0];
      if (input_kind(g, t) == InputKind::kTokenIds) seq = tt.shape[1];
    }
    for (size_t i = 0; i < ins.size(); ++i) {
      const Tensor& t = g.tensor(ins[i]);
      host[i].assign(static_cast<size_t>(t.numel()) * dtype_size(t.dtype), std::byte{0});
      switch (input_kind(g, ins[i])) {
        case InputKind::kImages: images(t, iteration, classes, reinterpret_cast<float*>(host[i].data())); break;
        case InputKind::kTokenIds: tokens(t, iteration, classes, reinterpret_cast<int32_t*>(host[i].data()), false); break;
        case InputKind::kLabels:
          if (const int64_t positions = span_positions(g, ins[i]); positions > 0)
            labels(t, iteration, positions, reinterpret_cast<int32_t*>(host[i].data()));
          else if (seq > 0)
            tokens(t, iteration, classes, reinterpret_cast<int32_t*>(host[i].data()), g.info.seq > 0 && causal(g));
          else labels(t, iteration, classes, reinterpret_cast<int32_t*>(host[i].data()));
          break;
        case InputKind::kUnknown:
          return Status::Unsupported(fmt::format("synthetic data cannot fill input '{}'", t.name));
      }
    }
    (void)batch;
    return Status::Ok();
  }

 private:
  // Span labels (SQuAD: start and end positions) are read by a cross-entropy whose classes are
  // along a non-last axis; they are random positions in [0, that axis' length), not learnable.
  // 0 for other labels.
  static int64_t span_positions(const Graph& g, TensorId labels) {
    for (const Op& op : g.ops)
      if (op.type == OpType::kCrossEntropy && op.inputs.size() == 2 && op.inputs[1] == labels &&
          op.attrs.class_axis >= 0)
        return g.tensor(op.inputs[0]).shape.at(static_cast<size_t>(op.attrs.class_axis));
    return 0;
  }
  static bool causal(const Graph& g) {
    for (const Op& op : g.ops)
      if (op.type == OpType::kSoftmax && op.attrs.causal) return true;
    return false;
  }
  int32_t label_of(int64_t iteration, int64_t sample, int64_t classes) const {
    return static_cast<int32_t>(hash(seed_, 1, static_cast<uint64_t>(iteration), static_cast<uint64_t>(sample)) %
                                static_cast<uint64_t>(classes));
  }
  void labels(const Tensor& t, int64_t iteration, int64_t classes, int32_t* out) const {
    for (int64_t n = 0; n < t.numel(); ++n) out[n] = label_of(iteration, n, classes);
  }
  void images(const Tensor& t, int64_t iteration, int64_t classes, float* out) const {
    const int64_t n = t.shape[0], c = t.shape[1], h = t.shape[2], w = t.shape[3];
    for (int64_t s = 0; s < n; ++s) {
      int32_t k = label_of(iteration, s, classes);
      // Template of class k: a sum of two oriented waves with class-specific frequency and phase.
      float fx = 1.0f + static_cast<float>(hash(seed_, 2, static_cast<uint64_t>(k)) % 5);
      float fy = 1.0f + static_cast<float>(hash(seed_, 3, static_cast<uint64_t>(k)) % 5);
      float ph = 6.2831853f * uniform(hash(seed_, 4, static_cast<uint64_t>(k)));
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t y = 0; y < h; ++y)
          for (int64_t x = 0; x < w; ++x) {
            float u = static_cast<float>(x) / static_cast<float>(w), v = static_cast<float>(y) / static_cast<float>(h);
            float tmpl = std::sin(6.2831853f * (fx * u + 0.3f * static_cast<float>(ch)) + ph) *
                         std::cos(6.2831853f * fy * v - ph);
            uint64_t idx = static_cast<uint64_t>(((s * c + ch) * h + y) * w + x);
            float noise = uniform(hash(seed_, 5, static_cast<uint64_t>(iteration), idx)) - 0.5f;
            out[idx] = tmpl + noise;
          }
    }
  }
  // Sequences following a fixed successor table; `shift` gives the next-token labels.
  void tokens(const Tensor& t, int64_t iteration, int64_t vocab, int32_t* out, bool shift) const {
    const int64_t b = t.shape[0], len = t.shape[1];
    auto next = [&](int32_t tok) {
      return static_cast<int32_t>(hash(seed_, 6, static_cast<uint64_t>(tok)) % static_cast<uint64_t>(vocab));
    };
    for (int64_t s = 0; s < b; ++s) {
      int32_t tok = static_cast<int32_t>(hash(seed_, 7, static_cast<uint64_t>(iteration), static_cast<uint64_t>(s)) %
                                         static_cast<uint64_t>(vocab));
      for (int64_t i = 0; i <= len; ++i) {
        if (i > 0) {
          uint64_t r = hash(seed_, 8, static_cast<uint64_t>(iteration), static_cast<uint64_t>(s * (len + 1) + i));
          tok = uniform(r) < 0.9f ? next(tok) : static_cast<int32_t>((r >> 8) % static_cast<uint64_t>(vocab));
        }
        int64_t pos = shift ? i - 1 : i;
        if (pos >= 0 && pos < len) out[s * len + pos] = tok;
      }
    }
  }
  uint64_t seed_;
};

class Cifar10 final : public DataSource {
 public:
  explicit Cifar10(std::vector<uint8_t> records) : records_(std::move(records)) {}
  std::string name() const override { return "cifar10"; }
  Status fill(const Graph& g, int64_t iteration, std::vector<std::vector<std::byte>>& host) override {
    static constexpr float kMean[3] = {0.4914f, 0.4822f, 0.4465f}, kStd[3] = {0.2470f, 0.2435f, 0.2616f};
    constexpr size_t kRecord = 3073;
    const size_t count = records_.size() / kRecord;
    std::vector<TensorId> ins = data_inputs(g);
    host.resize(ins.size());
    for (size_t i = 0; i < ins.size(); ++i) {
      const Tensor& t = g.tensor(ins[i]);
      host[i].assign(static_cast<size_t>(t.numel()) * dtype_size(t.dtype), std::byte{0});
      const int64_t n = t.shape[0];
      for (int64_t s = 0; s < n; ++s) {
        size_t r = (static_cast<size_t>(iteration) * static_cast<size_t>(n) + static_cast<size_t>(s)) % count;
        const uint8_t* rec = records_.data() + r * kRecord;
        if (input_kind(g, ins[i]) == InputKind::kLabels) {
          reinterpret_cast<int32_t*>(host[i].data())[s] = rec[0];
        } else {
          float* img = reinterpret_cast<float*>(host[i].data()) + s * 3072;
          for (int c = 0; c < 3; ++c)
            for (int p = 0; p < 1024; ++p) img[c * 1024 + p] = (static_cast<float>(rec[1 + c * 1024 + p]) / 255.0f - kMean[c]) / kStd[c];
        }
      }
    }
    return Status::Ok();
  }

 private:
  std::vector<uint8_t> records_;
};

}  // namespace

std::vector<TensorId> data_inputs(const Graph& g) {
  std::vector<TensorId> v;
  for (const Tensor& t : g.tensors)
    if (t.role == TensorRole::kInput) v.push_back(t.id);
  return v;
}

InputKind input_kind(const Graph& g, TensorId t) {
  const Tensor& tt = g.tensor(t);
  if (tt.dtype == DType::kF32 && tt.shape.size() == 4) return InputKind::kImages;
  if (tt.dtype != DType::kI32) return InputKind::kUnknown;
  for (const Op& op : g.ops) {
    if (op.phase != Phase::kForward) continue;
    for (TensorId in : op.inputs) {
      if (in != t) continue;
      if (op.type == OpType::kEmbedding) return InputKind::kTokenIds;
      if (op.type == OpType::kCrossEntropy) return InputKind::kLabels;
    }
  }
  return InputKind::kUnknown;
}

std::unique_ptr<DataSource> make_synthetic_data(uint64_t seed) { return std::make_unique<SyntheticData>(seed); }

Result<std::unique_ptr<DataSource>> open_cifar10(const std::string& dir, const Graph& g) {
  for (TensorId t : data_inputs(g)) {
    InputKind k = input_kind(g, t);
    const Tensor& tt = g.tensor(t);
    if (k == InputKind::kImages && (tt.shape[1] != 3 || tt.shape[2] != 32 || tt.shape[3] != 32))
      return Status::InvalidArgument("CIFAR-10 data needs a CNN with 3x32x32 inputs (use --image 32)");
    if (k == InputKind::kTokenIds || k == InputKind::kUnknown)
      return Status::InvalidArgument(fmt::format("CIFAR-10 data cannot feed input '{}'", tt.name));
  }
  if (g.info.num_classes != 10)
    return Status::InvalidArgument(fmt::format("CIFAR-10 has 10 classes; the model has {}", g.info.num_classes));
  std::vector<uint8_t> records;
  for (int b = 1; b <= 5; ++b) {
    std::string path = fmt::format("{}/data_batch_{}.bin", dir, b);
    // A directory or a device under that name is refused, not read (a directory used to abort).
    FERRY_ASSIGN_OR_RETURN(std::string buf, read_regular_file(path, kMaxCifarBatchBytes, "CIFAR-10 batch"));
    if (buf.empty() || buf.size() % 3073 != 0)
      return Status::InvalidArgument(
          fmt::format("'{}' is not a CIFAR-10 binary batch: {} bytes is not a multiple of 3073", path, buf.size()));
    for (size_t r = 0; r < buf.size(); r += 3073) {
      const uint8_t label = static_cast<uint8_t>(buf[r]);
      if (label > 9) return Status::InvalidArgument(fmt::format("'{}': record {} has label {}", path, r / 3073, label));
    }
    records.insert(records.end(), buf.begin(), buf.end());
  }
  return std::unique_ptr<DataSource>(std::make_unique<Cifar10>(std::move(records)));
}

Result<std::unique_ptr<DataSource>> open_data(const std::string& spec, const Graph& g, uint64_t seed) {
  if (spec.empty() || spec == "synthetic") return make_synthetic_data(seed);
  if (spec.rfind("cifar10:", 0) == 0) return open_cifar10(spec.substr(8), g);
  return Status::InvalidArgument(fmt::format("unknown data source '{}' (use synthetic or cifar10:DIR)", spec));
}

}  // namespace ferry
