// Shared test support for the backend: hand-built graphs, a guarded runner, data generators,
// closeness checks and central finite differences.
//
// Runner gives every tensor and every op's scratch its own allocation followed by a guard zone
// of known bytes, pre-fills outputs with NaN bytes and scratch with garbage, and checks after
// every op that no guard byte changed: a kernel that writes outside its tensors or outside its
// counted scratch, or reads an output it did not write, fails the test.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "graph/graph.h"

namespace ferry::testing {

// Builds a Graph tensor by tensor and op by op (the builder is tested elsewhere; these tests need
// exact control over roles, layouts and op conventions).
class GraphMaker {
 public:
  TensorId tensor(const std::string& name, std::vector<int64_t> shape, TensorRole role = TensorRole::kActivation,
                  DType dtype = DType::kF32, TensorId grad_of = kNoTensor) {
    Tensor t;
    t.id = static_cast<TensorId>(g.tensors.size());
    t.name = name;
    t.shape = std::move(shape);
    t.dtype = dtype;
    t.role = role;
    t.bytes = static_cast<uint64_t>(t.numel()) * dtype_size(dtype);
    t.grad_of = grad_of;
    g.tensors.push_back(t);
    return t.id;
  }
  TensorId input(const std::string& name, std::vector<int64_t> shape, DType dtype = DType::kF32) {
    return tensor(name, std::move(shape), TensorRole::kInput, dtype);
  }
  TensorId weight(const std::string& name, std::vector<int64_t> shape) {
    return tensor(name, std::move(shape), TensorRole::kWeight);
  }
  TensorId grad(const std::string& name, TensorId of) {
    const Tensor& t = g.tensor(of);
    TensorRole role = t.role == TensorRole::kWeight ? TensorRole::kWeightGradient : TensorRole::kGradient;
    return tensor(name, t.shape, role, DType::kF32, of);
  }
  OpId op(const std::string& name, OpType type, std::vector<TensorId> ins, std::vector<TensorId> outs,
          OpAttrs attrs = {}, Phase phase = Phase::kForward) {
    Op o;
    o.id = static_cast<OpId>(g.ops.size());
    o.name = name;
    o.type = type;
    o.phase = phase;
    o.inputs = std::move(ins);
    o.outputs = std::move(outs);
    o.attrs = attrs;
    g.ops.push_back(o);
    return o.id;
  }
  // A gradient tensor of `of` in of's layout holding `values` (set on the returned input later):
  // the input `name.src` is plain, grad_accumulate with a zero input moves it into of's layout,
  // exactly as a real backward pass would hand it over.
  struct GradIn {
    TensorId src, zero, grad;
  };
  GradIn grad_input(const std::string& name, TensorId of) {
    GradIn gi;
    gi.src = input(name + ".src", g.tensor(of).shape);
    gi.zero = input(name + ".zero", g.tensor(of).shape);
    gi.grad = grad(name, of);
    op(name + ".acc", OpType::kGradAccumulate, {gi.src, gi.zero}, {gi.grad}, {}, Phase::kBackward);
    return gi;
  }
  // y = identity 1x1 convolution of x: the same values, in the convolution's (blocked) layout.
  struct Blocked {
    TensorId y, w;
  };
  Blocked blocked_copy(const std::string& name, TensorId x) {
    const std::vector<int64_t> s = g.tensor(x).shape;  // a copy: adding tensors reallocates
    Blocked b;
    b.w = weight(name + ".w", {s[1], s[1], 1, 1});
    b.y = tensor(name, s);
    OpAttrs a;
    a.kernel_h = a.kernel_w = 1;
    op(name, OpType::kConv2d, {x, b.w}, {b.y}, a);
    return b;
  }

  Graph g;
};

inline std::vector<float> identity_1x1(int64_t c) {
  std::vector<float> w(static_cast<size_t>(c * c), 0.0f);
  for (int64_t i = 0; i < c; ++i) w[static_cast<size_t>(i * c + i)] = 1.0f;
  return w;
}

// Compiles a graph on the CPU backend and runs its ops with guarded memory.
class Runner {
 public:
  static constexpr uint64_t kGuard = 256;
  static constexpr uint8_t kGuardByte = 0xA5;

  explicit Runner(Graph g, const BackendOptions& options = {}) : graph_(std::move(g)) {
    auto be = make_backend("cpu", options);
    EXPECT_TRUE(be.ok()) << be.status().message();
    backend_ = std::move(be).value();
    auto cg = backend_->compile(graph_);
    if (!cg.ok()) {
      ADD_FAILURE() << "compile failed: " << cg.status().message();
      return;
    }
    cg_ = std::move(cg).value();
    for (size_t t = 0; t < graph_.tensors.size(); ++t)
      tensors_.push_back(alloc(cg_->tensor_bytes(static_cast<TensorId>(t)), 0xFF));  // NaN bytes
    for (size_t o = 0; o < graph_.ops.size(); ++o)
      scratch_.push_back(alloc(cg_->scratch_bytes(static_cast<OpId>(o)), 0xCD));
  }
  ~Runner() {
    if (!backend_) return;
    for (const Region& r : tensors_) backend_->free(r.ptr);
    for (const Region& r : scratch_) backend_->free(r.ptr);
  }
  bool ok() const { return cg_ != nullptr; }
  CompiledGraph& cg() { return *cg_; }
  Backend& backend() { return *backend_; }
  const Graph& graph() const { return graph_; }
  DevicePtr ptr(TensorId t) const { return tensors_[static_cast<size_t>(t)].ptr; }

  template <typename T>
  void set(TensorId t, const std::vector<T>& values) {
    Status st = cg_->from_plain(t, std::as_bytes(std::span(values)), ptr(t));
    ASSERT_TRUE(st.ok()) << st.message();
  }
  template <typename T = float>
  std::vector<T> get(TensorId t) {
    std::vector<T> v(static_cast<size_t>(graph_.tensor(t).numel()));
    Status st = cg_->to_plain(t, ptr(t), std::as_writable_bytes(std::span(v)));
    EXPECT_TRUE(st.ok()) << st.message();
    return v;
  }
  // The raw device bytes of tensor t (its full storage).
  std::vector<std::byte> raw(TensorId t) {
    std::vector<std::byte> v(cg_->tensor_bytes(t));
    EXPECT_TRUE(backend_->copy_to_host(v, ptr(t)).ok());
    return v;
  }

  // Runs op `op`; with `inplace`, outputs[0] is inputs[0]'s buffer.
  Status run(OpId op, const RunContext& ctx = {}, bool inplace = false) {
    const Op& o = graph_.op(op);
    std::vector<DevicePtr> in, out;
    for (TensorId t : o.inputs) in.push_back(ptr(t));
    for (TensorId t : o.outputs) out.push_back(ptr(t));
    if (inplace) out[0] = in[0];
    Region& s = scratch_[static_cast<size_t>(op)];
    std::vector<std::byte> garbage(s.bytes, std::byte{0xCD});
    if (s.bytes) {
      EXPECT_TRUE(backend_->copy_to_device(s.ptr, garbage).ok());
    }
    Status st = cg_->run(op, in, out, s.bytes ? s.ptr : DevicePtr{}, ctx);
    for (TensorId t : o.inputs) check_guard(tensors_[static_cast<size_t>(t)], graph_.tensor(t).name, o.name);
    for (TensorId t : o.outputs) check_guard(tensors_[static_cast<size_t>(t)], graph_.tensor(t).name, o.name);
    check_guard(s, "scratch", o.name);
    return st;
  }
  void run_all(const RunContext& ctx = {}) {
    for (const Op& o : graph_.ops) {
      Status st = run(o.id, ctx);
      ASSERT_TRUE(st.ok()) << "op " << o.name << ": " << st.message();
    }
  }
  // The storage of tensor t is canonical: padding bytes of its layout are zero, i.e. writing its
  // plain values back with from_plain reproduces the stored bytes exactly.
  void expect_canonical(TensorId t) {
    std::vector<std::byte> before = raw(t);
    std::vector<float> plain = get<float>(t);
    Region tmp = alloc(cg_->tensor_bytes(t), 0x5A);
    ASSERT_TRUE(cg_->from_plain(t, std::as_bytes(std::span(plain)), tmp.ptr).ok());
    std::vector<std::byte> after(before.size());
    ASSERT_TRUE(backend_->copy_to_host(after, tmp.ptr).ok());
    backend_->free(tmp.ptr);
    EXPECT_TRUE(before == after) << "tensor '" << graph_.tensor(t).name << "' (layout " << cg_->layout(t)
                                 << ") has non-zero padding";
  }

 private:
  struct Region {
    DevicePtr ptr;
    uint64_t bytes = 0;
  };
  Region alloc(uint64_t bytes, uint8_t fill) {
    Region r;
    r.bytes = bytes;
    auto p = backend_->allocate(bytes + kGuard);
    EXPECT_TRUE(p.ok());
    r.ptr = *p;
    std::vector<std::byte> init(bytes + kGuard, std::byte{fill});
    std::fill(init.begin() + static_cast<std::ptrdiff_t>(bytes), init.end(), std::byte{kGuardByte});
    EXPECT_TRUE(backend_->copy_to_device(r.ptr, init).ok());
    return r;
  }
  void check_guard(const Region& r, const std::string& what, const std::string& op) {
    std::vector<std::byte> g(kGuard);
    EXPECT_TRUE(backend_->copy_to_host(g, r.ptr + r.bytes).ok());
    for (std::byte b : g)
      if (b != std::byte{kGuardByte}) {
        ADD_FAILURE() << "op '" << op << "' wrote past the end of " << what << " (" << r.bytes << " bytes)";
        return;
      }
  }

  Graph graph_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<CompiledGraph> cg_;
  std::vector<Region> tensors_, scratch_;
};

// Uniform values in [lo, hi) from a fixed seed.
inline std::vector<float> random_vector(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Values at least `gap` away from 0 (for functions with a kink at 0, so finite differences with a
// step below `gap` never straddle it).
inline std::vector<float> random_away_from_zero(size_t n, uint32_t seed, float gap = 0.05f) {
  std::vector<float> v = random_vector(n, seed);
  for (float& x : v) x = x >= 0 ? x + gap : x - gap;
  return v;
}

// A random permutation of evenly spaced values (distinct by `step`), for max pooling.
inline std::vector<float> random_distinct(size_t n, uint32_t seed, float step = 0.01f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = (static_cast<float>(i) - static_cast<float>(n) / 2) * step;
  std::shuffle(v.begin(), v.end(), std::mt19937(seed));
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Every element within atol + rtol * |want|, where atol = abs_scale * max |want| (so a tensor
// of large values is not held to an absolute bound meant for small ones). Reports the worst one.
inline void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rtol, double abs_scale,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double max_abs = 0;
  for (double w : want) max_abs = std::max(max_abs, std::abs(w));
  const double atol = abs_scale * std::max(max_abs, 1e-6);
  size_t bad = 0, worst = 0;
  double worst_excess = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double err = std::abs(static_cast<double>(got[i]) - want[i]);
    double allowed = atol + rtol * std::abs(want[i]);
    if (!(err <= allowed)) {
      ++bad;
      double excess = std::isnan(err) ? 1e300 : err / allowed;
      if (excess > worst_excess) worst_excess = excess, worst = i;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements off; worst at " << worst << ": got "
                     << got[worst] << " want " << want[worst] << " (max |want| " << max_abs << ")";
}

// Forward tolerance (float kernel against a double reference).
inline void expect_forward(const std::vector<float>& got, const std::vector<double>& want, const std::string& what) {
  expect_close(got, want, 1e-4, 1e-5, what);
}

// Indices to check by finite differences: all when n <= limit, else a fixed-seed sample that
// includes the first and the last element.
inline std::vector<size_t> sample_indices(size_t n, size_t limit = 48, uint32_t seed = 7) {
  std::vector<size_t> idx;
  if (n <= limit) {
    for (size_t i = 0; i < n; ++i) idx.push_back(i);
    return idx;
  }
  std::mt19937 rng(seed);
  std::uniform_int_distribution<size_t> dist(0, n - 1);
  idx.push_back(0);
  idx.push_back(n - 1);
  while (idx.size() < limit) idx.push_back(dist(rng));
  return idx;
}

// Checks `grad` (from a backward kernel) against central differences of the scalar
// L(v) = sum_k weights[k] * f(v)[k] with respect to v at `at`, on a sample of elements.
inline void expect_gradient(const std::vector<float>& grad, const std::vector<double>& at,
                            const std::function<std::vector<double>(const std::vector<double>&)>& f,
                            const std::vector<double>& weights, const std::string& what, double h = 1e-3,
                            double rtol = 2e-3, double abs_scale = 2e-4) {
  ASSERT_EQ(grad.size(), at.size()) << what;
  auto loss = [&](const std::vector<double>& v) {
    std::vector<double> y = f(v);
    EXPECT_EQ(y.size(), weights.size()) << what;
    double l = 0;
    for (size_t k = 0; k < y.size(); ++k) l += weights[k] * y[k];
    return l;
  };
  std::vector<size_t> idx = sample_indices(at.size());
  std::vector<float> got;
  std::vector<double> want;
  std::vector<double> v = at;
  for (size_t i : idx) {
    v[i] = at[i] + h;
    double lp = loss(v);
    v[i] = at[i] - h;
    double lm = loss(v);
    v[i] = at[i];
    want.push_back((lp - lm) / (2 * h));
    got.push_back(grad[i]);
  }
  expect_close(got, want, rtol, abs_scale, what + " (finite differences)");
}

}  // namespace ferry::testing
