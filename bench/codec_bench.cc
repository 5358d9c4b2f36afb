// codec_bench: what each codec of src/codec does to realistic tensors on this machine: the
// ratio (frame bytes / tensor bytes) and single-thread encode and decode throughput, then which
// codec the automatic choice picks for each tier's measured bandwidth and what it predicts.
//
// Tensors, per class (role/producing op):
// - captured: a model from the zoo trains `--iters` iterations with the Executor (synthetic data,
//   default seed); its weights are read back, and one more forward + backward pass runs on a
//   separately compiled copy of the graph in which every tensor has its own memory, so every
//   activation, workspace and gradient of that pass can be read afterwards exactly as the device
//   holds it (the backend's layout, padding included): the bytes a swap tier would receive.
// - synthetic: Gaussian then ReLU, ReLU then 2x2 max-pool, tanh-GELU, ReLU-masked gradients
//   (fixed seeds), for comparison with the captured ones.
// A class keeps at most `--class-mib` MiB: every k-th tensor of the class, in execution order.
//
// Timing: each codec encodes and decodes a class's bytes as one frame (1 MiB chunks, one
// thread) `--reps` times; the table gives the median of the thread's CPU time (this 2-core
// machine is shared: wall time would also count the time other processes held the core; the
// ratio of the two is printed). Lossless round trips are checked bytewise.
//
// Usage:
//   build/codec_bench                                   # resnet-mini, resnet18 @112 b8, gpt2-mini + synthetic
//   build/codec_bench --models "resnet50:4:112" --reps 7 --class-mib 32
//   build/codec_bench --wire "ssd=4.113/1.773" --wire "slow-ssd=0.5/0.5"
// --models takes NAME[:BATCH[:SIZE]] separated by commas ("none" for synthetic only); --wire
// NAME=OUT/IN in GB/s (swap-out write rate / swap-in read rate); the defaults are the shipped
// cpu-local profile's measured rates (host memcpy 13.51/15.08, SSD 4.113/1.773 GB/s) and an
// assumed slow disk (0.5/0.5 GB/s, not measured) to show where the slower codecs start to pay.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <unistd.h>

#include "backend/backend.h"
#include "codec/choice.h"
#include "codec/codec.h"
#include "codec/stats.h"
#include "data/data.h"
#include "graph/zoo/zoo.h"
#include "runtime/executor.h"

namespace ferry {
namespace {

using Bytes = std::vector<std::byte>;

struct TensorClass {
  std::string name;  // "model role/op"
  Bytes bytes;       // a sample of the class's tensors, concatenated
  size_t tensors = 0;
  uint64_t class_bytes = 0;  // all tensors of the class in one iteration
};

struct ModelSpec {
  std::string name;
  int64_t batch = 0, size = 0;
};

struct Wire {
  std::string name;
  WireRates rates;
};

struct Options {
  std::vector<ModelSpec> models = {{"resnet-mini", 16, 0}, {"resnet18", 8, 112}, {"gpt2-mini", 8, 0}};
  int iters = 3;
  int reps = 5;
  uint64_t class_bytes = 64ull << 20;
  std::vector<Wire> wires = {{"host (cpu-local memcpy)", {13.51e9, 15.08e9}},
                             {"ssd (cpu-local)", {4.113e9, 1.773e9}},
                             {"slow disk (assumed)", {0.5e9, 0.5e9}}};
};

// First line of `path` that starts with `key`, after the key (for the machine description).
std::string read_field(const char* path, const std::string& key) {
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return "?";
  char line[512];
  std::string found = "?";
  while (std::fgets(line, sizeof line, f) != nullptr) {
    const std::string l(line);
    if (l.rfind(key, 0) == 0) {
      found = l.substr(key.size());
      while (!found.empty() && (found.back() == '\n' || found.back() == ' ')) found.pop_back();
      break;
    }
  }
  std::fclose(f);
  return found;
}

std::string producer_name(const Graph& g, TensorId t, const std::vector<OpId>& producer) {
  const OpId op = producer[static_cast<size_t>(t)];
  return op == kNoOp ? "input" : std::string(to_string(g.op(op).type));
}

// Device memory holding every tensor of a compiled graph at its own offset (no sharing), then
// one op's scratch; freed on destruction.
class KeepAllArena {
 public:
  static Result<std::unique_ptr<KeepAllArena>> create(Backend& backend, const Graph& graph, const CompiledGraph& cg) {
    auto arena = std::unique_ptr<KeepAllArena>(new KeepAllArena(backend));
    uint64_t scratch = 0;
    for (const Tensor& t : graph.tensors) {
      arena->offset_.push_back(arena->scratch_offset_);
      arena->scratch_offset_ += (cg.tensor_bytes(t.id) + 63) / 64 * 64;
    }
    for (const Op& op : graph.ops) scratch = std::max(scratch, cg.scratch_bytes(op.id));
    FERRY_ASSIGN_OR_RETURN(arena->base_, backend.allocate(arena->scratch_offset_ + scratch + 64));
    return arena;
  }
  ~KeepAllArena() { backend_.free(base_); }
  DevicePtr at(TensorId t) const { return base_ + offset_[static_cast<size_t>(t)]; }
  DevicePtr scratch() const { return base_ + scratch_offset_; }

 private:
  explicit KeepAllArena(Backend& backend) : backend_(backend) {}
  Backend& backend_;
  DevicePtr base_{};
  std::vector<uint64_t> offset_;
  uint64_t scratch_offset_ = 0;
};

// Loads the trained weights and iteration `iteration`'s batch into `arena`, runs the forward
// and backward ops (not the update: weights need not change) and returns each tensor's producer.
Result<std::vector<OpId>> run_pass(const Graph& graph, Executor& trained, CompiledGraph& cg, const KeepAllArena& arena,
                                   DataSource& data, int64_t iteration, uint64_t seed) {
  for (const Tensor& t : graph.tensors)
    if (t.persistent()) {
      FERRY_ASSIGN_OR_RETURN(Bytes plain, trained.read_persistent(t.id));
      FERRY_RETURN_IF_ERROR(cg.from_plain(t.id, plain, arena.at(t.id)));
    }
  std::vector<Bytes> host;
  FERRY_RETURN_IF_ERROR(data.fill(graph, iteration, host));
  const std::vector<TensorId> inputs = data_inputs(graph);
  for (size_t i = 0; i < inputs.size(); ++i) FERRY_RETURN_IF_ERROR(cg.from_plain(inputs[i], host[i], arena.at(inputs[i])));
  RunContext ctx;
  ctx.iteration = iteration;
  ctx.optimizer_step = iteration + 1;
  ctx.dropout_seed = seed;
  std::vector<OpId> producer(graph.tensors.size(), kNoOp);
  std::vector<DevicePtr> ins, outs;
  for (const Op& op : graph.ops) {
    if (op.phase == Phase::kUpdate) continue;
    ins.clear();
    outs.clear();
    for (TensorId t : op.inputs) ins.push_back(arena.at(t));
    for (TensorId t : op.outputs) {
      outs.push_back(arena.at(t));
      producer[static_cast<size_t>(t)] = op.id;
    }
    FERRY_RETURN_IF_ERROR(cg.run(op.id, ins, outs, arena.scratch(), ctx));
  }
  return producer;
}

// Groups the pass's f32 activations, workspaces and gradients by class ("model role/op") and
// copies up to `o.class_bytes` of each class (every k-th tensor) to the host. Classes under 1 MiB
// in all are left out: too small to matter when swapping.
Result<std::vector<TensorClass>> sample_classes(const std::string& model, const Graph& graph, const CompiledGraph& cg,
                                                const KeepAllArena& arena, const std::vector<OpId>& producer,
                                                Backend& backend, const Options& o) {
  std::map<std::string, std::vector<TensorId>> members;  // in execution order
  for (const Tensor& t : graph.tensors) {
    if (t.role != TensorRole::kActivation && t.role != TensorRole::kWorkspace && t.role != TensorRole::kGradient) continue;
    if (t.dtype != DType::kF32) continue;  // labels, token ids, masks of other types
    members[fmt::format("{} {}/{}", model, to_string(t.role), producer_name(graph, t.id, producer))].push_back(t.id);
  }
  std::vector<TensorClass> classes;
  for (const auto& [name, ids] : members) {
    TensorClass c;
    c.name = name;
    for (TensorId t : ids) c.class_bytes += cg.tensor_bytes(t);
    if (c.class_bytes < (1u << 20)) continue;
    const uint64_t stride = std::max<uint64_t>(1, (c.class_bytes + o.class_bytes - 1) / o.class_bytes);
    for (size_t i = 0; i < ids.size(); i += stride) {
      const uint64_t n = cg.tensor_bytes(ids[i]);
      if (c.bytes.size() + n > o.class_bytes && !c.bytes.empty()) break;
      const size_t old = c.bytes.size();
      c.bytes.resize(old + n);
      FERRY_RETURN_IF_ERROR(backend.copy_to_host(std::span(c.bytes).subspan(old, n), arena.at(ids[i])));
      ++c.tensors;
    }
    FERRY_RETURN_IF_ERROR(backend.synchronize());
    classes.push_back(std::move(c));
  }
  return classes;
}

// Trains `spec` a few iterations, then runs one forward + backward pass with every tensor in its
// own memory and returns the device bytes of its activations, workspaces and gradients by class.
Result<std::vector<TensorClass>> capture(const ModelSpec& spec, const Options& o) {
  ModelConfig config;
  config.batch = spec.batch;
  const ModelEntry* entry = find_model(spec.name);
  if (entry != nullptr && entry->family == ModelFamily::kTransformer) config.seq = spec.size;
  else config.image = spec.size;  // 0: the model's default
  FERRY_ASSIGN_OR_RETURN(Graph graph, build_model(spec.name, config));
  FERRY_ASSIGN_OR_RETURN(auto backend, make_backend("cpu"));
  std::unique_ptr<DataSource> data = make_synthetic_data(1);
  ExecutorOptions eo;
  FERRY_ASSIGN_OR_RETURN(auto exec, Executor::create(graph, *backend, eo));
  FERRY_RETURN_IF_ERROR(exec->initialize());
  for (int i = 0; i < o.iters; ++i) FERRY_RETURN_IF_ERROR(exec->run_iteration(i, *data).status());
  FERRY_ASSIGN_OR_RETURN(auto cg, backend->compile(graph));
  FERRY_ASSIGN_OR_RETURN(auto arena, KeepAllArena::create(*backend, graph, *cg));
  FERRY_ASSIGN_OR_RETURN(std::vector<OpId> producer, run_pass(graph, *exec, *cg, *arena, *data, o.iters, eo.seed));
  return sample_classes(spec.name, graph, *cg, *arena, producer, *backend, o);
}

Bytes floats_to_bytes(const std::vector<float>& v) {
  Bytes b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<TensorClass> synthetic(uint64_t bytes) {
  const size_t n = bytes / 4;
  std::mt19937_64 rng(2024);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> relu(n), pooled(n), gelu(n), grad(n);
  for (auto& x : relu) x = std::max(0.0f, normal(rng));
  for (size_t i = 0; i < n; ++i) {  // max over 4 ReLU outputs
    float m = 0;
    for (int k = 0; k < 4; ++k) m = std::max(m, std::max(0.0f, normal(rng)));
    pooled[i] = m;
  }
  for (auto& x : gelu) {
    const float z = normal(rng);
    x = 0.5f * z * (1.0f + std::tanh(0.7978845608f * (z + 0.044715f * z * z * z)));
  }
  for (auto& x : grad) x = normal(rng) > 0 ? 1e-3f * normal(rng) : 0.0f;  // ReLU backward masks half
  return {{"synthetic relu(gaussian)", floats_to_bytes(relu), 1, bytes},
          {"synthetic maxpool2x2(relu)", floats_to_bytes(pooled), 1, bytes},
          {"synthetic gelu(gaussian)", floats_to_bytes(gelu), 1, bytes},
          {"synthetic relu-masked gradient", floats_to_bytes(grad), 1, bytes}};
}

struct Measured {
  double ratio = 1, encode_bytes_per_s = 0, decode_bytes_per_s = 0;  // from thread CPU time
  double wall_seconds = 0, cpu_seconds = 0;                          // medians, encode + decode
};

// CPU time of the calling thread: on a machine shared with other people's compilers it measures
// what the codec costs, where wall time also counts the time the scheduler gave to others.
double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Result<Measured> measure(CodecContext& ctx, CodecId codec, const Bytes& in, int reps) {
  using Clock = std::chrono::steady_clock;
  Bytes frame(max_encoded_bytes(in.size())), out(in.size());  // zeroed, so page faults happen here
  std::vector<double> enc, dec, wall;
  uint64_t frame_bytes = 0;
  for (int r = 0; r < reps; ++r) {
    const auto w0 = Clock::now();
    const double t0 = thread_cpu_seconds();
    FERRY_ASSIGN_OR_RETURN(frame_bytes, encode_frame(ctx, codec, in, frame));
    const double t1 = thread_cpu_seconds();
    FERRY_RETURN_IF_ERROR(decode_frame(ctx, std::span(frame).first(frame_bytes), out));
    const double t2 = thread_cpu_seconds();
    enc.push_back(t1 - t0);
    dec.push_back(t2 - t1);
    wall.push_back(std::chrono::duration<double>(Clock::now() - w0).count());
  }
  if (!is_lossy(codec) && out != in) return Status::Internal(fmt::format("{} did not round-trip", to_string(codec)));
  const double n = static_cast<double>(in.size());
  return Measured{static_cast<double>(frame_bytes) / n, n / median(enc), n / median(dec), median(wall),
                  median(enc) + median(dec)};
}

double zero_fraction(const Bytes& b) {
  size_t zeros = 0;
  for (size_t i = 0; i + 4 <= b.size(); i += 4) zeros += std::memcmp(b.data() + i, "\0\0\0\0", 4) == 0;
  return static_cast<double>(zeros) / static_cast<double>(b.size() / 4);
}

Result<Options> parse(int argc, char** argv) {
  Options o;
  bool wires_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> Result<std::string> {
      if (i + 1 >= argc) return Status::InvalidArgument(a + " needs a value");
      return std::string(argv[++i]);
    };
    if (a == "--models") {
      FERRY_ASSIGN_OR_RETURN(std::string v, value());
      o.models.clear();
      if (v == "none") continue;
      size_t pos = 0;
      while (pos <= v.size()) {
        const size_t end = std::min(v.find(',', pos), v.size());
        const std::string item = v.substr(pos, end - pos);
        ModelSpec m;
        const size_t c1 = item.find(':'), c2 = c1 == std::string::npos ? c1 : item.find(':', c1 + 1);
        m.name = item.substr(0, c1);
        m.batch = c1 == std::string::npos ? 8 : std::stoll(item.substr(c1 + 1, c2 - c1 - 1));
        m.size = c2 == std::string::npos ? 0 : std::stoll(item.substr(c2 + 1));
        o.models.push_back(m);
        pos = end + 1;
      }
    } else if (a == "--iters" || a == "--reps" || a == "--class-mib") {
      FERRY_ASSIGN_OR_RETURN(std::string v, value());
      const long long x = std::stoll(v);
      if (x < (a == "--iters" ? 0 : 1) || x > 4096) return Status::InvalidArgument(a + " out of range [1, 4096]");
      if (a == "--iters") o.iters = static_cast<int>(x);
      if (a == "--reps") o.reps = static_cast<int>(x);
      if (a == "--class-mib") o.class_bytes = static_cast<uint64_t>(x) << 20;
    } else if (a == "--wire") {
      FERRY_ASSIGN_OR_RETURN(std::string v, value());
      const size_t eq = v.find('='), slash = v.find('/');
      if (eq == std::string::npos || slash == std::string::npos || slash < eq)
        return Status::InvalidArgument("--wire takes NAME=OUT_GBPS/IN_GBPS");
      if (!wires_given) o.wires.clear();
      wires_given = true;
      o.wires.push_back({v.substr(0, eq), {std::stod(v.substr(eq + 1, slash - eq - 1)) * 1e9, std::stod(v.substr(slash + 1)) * 1e9}});
    } else {
      return Status::InvalidArgument("unknown option " + a + " (see the top of bench/codec_bench.cc)");
    }
  }
  return o;
}

int run(int argc, char** argv) {
  Result<Options> opt = parse(argc, argv);
  if (!opt.ok()) {
    std::fprintf(stderr, "codec_bench: error: %s\n", opt.status().message().c_str());
    return 2;
  }
  const Options& o = *opt;
  std::printf("Machine: %s, %ld CPUs; load average at start: %s\n\n", read_field("/proc/cpuinfo", "model name\t: ").c_str(),
              sysconf(_SC_NPROCESSORS_ONLN), read_field("/proc/loadavg", "").c_str());
  std::vector<TensorClass> classes;
  for (const ModelSpec& m : o.models) {
    std::fprintf(stderr, "capturing %s batch %lld size %lld ...\n", m.name.c_str(), static_cast<long long>(m.batch),
                 static_cast<long long>(m.size));
    Result<std::vector<TensorClass>> c = capture(m, o);
    if (!c.ok()) {
      std::fprintf(stderr, "codec_bench: error: %s: %s\n", m.name.c_str(), c.status().message().c_str());
      return 1;
    }
    for (auto& x : *c) classes.push_back(std::move(x));
  }
  for (auto& x : synthetic(std::min<uint64_t>(o.class_bytes, 32ull << 20))) classes.push_back(std::move(x));

  CodecContext ctx;
  CodecStats stats(1.0);
  double total_wall = 0, total_cpu = 0;
  std::printf("Measured on this machine, one thread, 1 MiB chunks, median of %d runs; ratio = frame bytes / tensor bytes;\n"
              "enc/dec = tensor bytes per second of the coding thread's CPU time, in GB/s. zeros = fraction of\n"
              "all-zero 32-bit words.\n\n",
              o.reps);
  std::printf("| class | tensors (sampled / MiB in class) | zeros |");
  for (CodecId c : kAllCodecs) std::printf(" %s ratio, enc/dec |", std::string(to_string(c)).c_str());
  std::printf("\n| --- | --- | --- |");
  for (size_t i = 0; i < std::size(kAllCodecs); ++i) std::printf(" --- |");
  std::printf("\n");
  for (const TensorClass& tc : classes) {
    std::printf("| %s | %zu / %.1f | %.2f |", tc.name.c_str(), tc.tensors, static_cast<double>(tc.class_bytes) / (1 << 20),
                zero_fraction(tc.bytes));
    for (CodecId c : kAllCodecs) {
      Result<Measured> m = measure(ctx, c, tc.bytes, o.reps);
      if (!m.ok()) {
        std::fprintf(stderr, "codec_bench: error: %s on %s: %s\n", std::string(to_string(c)).c_str(), tc.name.c_str(),
                     m.status().message().c_str());
        return 1;
      }
      std::printf(" %.3f, %.2f/%.2f |", m->ratio, m->encode_bytes_per_s / 1e9, m->decode_bytes_per_s / 1e9);
      total_wall += m->wall_seconds;
      total_cpu += m->cpu_seconds;
      const double n = static_cast<double>(tc.bytes.size());
      stats.record(tc.name, c, {tc.bytes.size(), static_cast<uint64_t>(m->ratio * n), n / m->encode_bytes_per_s,
                                n / m->decode_bytes_per_s});
    }
    std::printf("\n");
    std::fflush(stdout);
  }

  std::printf("\nWall time / thread CPU time over these measurements: %.2f (1.00: the core was ours alone); "
              "load average now: %s\n", total_wall / total_cpu, read_field("/proc/loadavg", "").c_str());
  std::printf("\nAutomatic choice for a 64 MiB tensor of each class (predicted from the figures above,\n"
              "Note [Pipelined codec time]: swap-out + swap-in time, vs raw bytes; lossless unless marked):\n\n");
  std::printf("| class |");
  for (const Wire& w : o.wires)
    std::printf(" %s %.2f/%.2f GB/s | lossy allowed |", w.name.c_str(), w.rates.swap_out_bytes_per_s / 1e9,
                w.rates.swap_in_bytes_per_s / 1e9);
  std::printf("\n| --- |");
  for (size_t i = 0; i < o.wires.size(); ++i) std::printf(" --- | --- |");
  std::printf("\n");
  for (const TensorClass& tc : classes) {
    std::printf("| %s |", tc.name.c_str());
    for (const Wire& w : o.wires)
      for (bool lossy : {false, true}) {
        ChoiceOptions co;
        co.allow_lossy = lossy;
        const CodecChoice pick = choose_codec(64ull << 20, stats, tc.name, w.rates, co);
        std::printf(" %s %.2fx |", std::string(to_string(pick.codec)).c_str(),
                    pick.none_weighted_seconds / pick.weighted_seconds);
      }
    std::printf("\n");
  }

  // zstd levels and lz4 acceleration on two classes: why the defaults are what they are.
  std::printf("\nzstd level and lz4 acceleration (ratio, enc/dec GB/s):\n\n| class | setting | ratio | enc | dec |\n"
              "| --- | --- | --- | --- | --- |\n");
  std::vector<const TensorClass*> probes;
  for (const TensorClass& tc : classes)
    if (tc.name.find("relu") != std::string::npos || tc.name.find("gelu") != std::string::npos) probes.push_back(&tc);
  if (probes.size() > 3) probes.erase(probes.begin() + 1, probes.end() - 2);
  for (const TensorClass* tc : probes) {
    for (int level : {-5, -1, 1, 3, 6}) {
      CodecOptions co;
      co.zstd_level = level;
      CodecContext c2(co);
      Result<Measured> m = measure(c2, CodecId::kZstd, tc->bytes, o.reps);
      if (m.ok())
        std::printf("| %s | zstd %d | %.3f | %.2f | %.2f |\n", tc->name.c_str(), level, m->ratio,
                    m->encode_bytes_per_s / 1e9, m->decode_bytes_per_s / 1e9);
    }
    for (int accel : {1, 4, 16}) {
      CodecOptions co;
      co.lz4_acceleration = accel;
      CodecContext c2(co);
      Result<Measured> m = measure(c2, CodecId::kLz4, tc->bytes, o.reps);
      if (m.ok())
        std::printf("| %s | lz4 accel %d | %.3f | %.2f | %.2f |\n", tc->name.c_str(), accel, m->ratio,
                    m->encode_bytes_per_s / 1e9, m->decode_bytes_per_s / 1e9);
    }
  }
  return 0;
}

}  // namespace
}  // namespace ferry

int main(int argc, char** argv) { return ferry::run(argc, argv); }
