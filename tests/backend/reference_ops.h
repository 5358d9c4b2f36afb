// Double-precision reference implementations of every forward op, as naive loops over plain
// row-major data. They define what the kernels must compute; backward kernels are checked
// against finite differences of these.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace ferry::reference {

using Vec = std::vector<double>;

struct ConvShape {
  int64_t n, c, h, w;  // input
  int64_t o, kh, kw;   // output channels, kernel
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, groups = 1;
  int64_t oh() const { return (h + 2 * ph - kh) / sh + 1; }
  int64_t ow() const { return (w + 2 * pw - kw) / sw + 1; }
};

// y[n, o, i, j] = b[o] + sum_{c in group(o), p, q} x[n, c, i*sh - ph + p, j*sw - pw + q] * w[o, c', p, q]
inline Vec conv2d(const ConvShape& s, const Vec& x, const Vec& w, const Vec* b) {
  const int64_t oh = s.oh(), ow = s.ow(), cg = s.c / s.groups, og = s.o / s.groups;
  Vec y(static_cast<size_t>(s.n * s.o * oh * ow));
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t o = 0; o < s.o; ++o) {
      const int64_t g = o / og;
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double acc = b ? (*b)[static_cast<size_t>(o)] : 0.0;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t p = 0; p < s.kh; ++p)
              for (int64_t q = 0; q < s.kw; ++q) {
                const int64_t r = i * s.sh - s.ph + p, c = j * s.sw - s.pw + q;
                if (r < 0 || r >= s.h || c < 0 || c >= s.w) continue;
                acc += x[static_cast<size_t>(((n * s.c + g * cg + ci) * s.h + r) * s.w + c)] *
                       w[static_cast<size_t>(((o * cg + ci) * s.kh + p) * s.kw + q)];
              }
          y[static_cast<size_t>(((n * s.o + o) * oh + i) * ow + j)] = acc;
        }
    }
  return y;
}

// Training batch norm over [N, C, HW]: per channel batch mean and biased variance.
struct BatchNormOut {
  Vec y, mean, var;
};
inline BatchNormOut batch_norm(const Vec& x, int64_t n, int64_t c, int64_t hw, const Vec& gamma, const Vec& beta,
                               double eps) {
  BatchNormOut r{Vec(x.size()), Vec(static_cast<size_t>(c)), Vec(static_cast<size_t>(c))};
  const double count = static_cast<double>(n * hw);
  for (int64_t ch = 0; ch < c; ++ch) {
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < hw; ++k) sum += x[static_cast<size_t>((i * c + ch) * hw + k)];
    const double mean = sum / count;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < hw; ++k) {
        const double d = x[static_cast<size_t>((i * c + ch) * hw + k)] - mean;
        sq += d * d;
      }
    const double var = sq / count, inv = 1.0 / std::sqrt(var + eps);
    r.mean[static_cast<size_t>(ch)] = mean;
    r.var[static_cast<size_t>(ch)] = var;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < hw; ++k) {
        const size_t at = static_cast<size_t>((i * c + ch) * hw + k);
        r.y[at] = gamma[static_cast<size_t>(ch)] * (x[at] - mean) * inv + beta[static_cast<size_t>(ch)];
      }
  }
  return r;
}

// Layer norm over the last dim d of `rows` rows.
inline BatchNormOut layer_norm(const Vec& x, int64_t rows, int64_t d, const Vec& gamma, const Vec& beta, double eps) {
  BatchNormOut r{Vec(x.size()), Vec(static_cast<size_t>(rows)), Vec(static_cast<size_t>(rows))};
  for (int64_t i = 0; i < rows; ++i) {
    double sum = 0, sq = 0;
    for (int64_t k = 0; k < d; ++k) sum += x[static_cast<size_t>(i * d + k)];
    const double mean = sum / static_cast<double>(d);
    for (int64_t k = 0; k < d; ++k) sq += std::pow(x[static_cast<size_t>(i * d + k)] - mean, 2);
    const double var = sq / static_cast<double>(d), inv = 1.0 / std::sqrt(var + eps);
    r.mean[static_cast<size_t>(i)] = mean;
    r.var[static_cast<size_t>(i)] = var;
    for (int64_t k = 0; k < d; ++k) {
      const size_t at = static_cast<size_t>(i * d + k);
      r.y[at] = gamma[static_cast<size_t>(k)] * (x[at] - mean) * inv + beta[static_cast<size_t>(k)];
    }
  }
  return r;
}

inline Vec relu(const Vec& x) {
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = std::max(0.0, x[i]);
  return y;
}

inline Vec gelu(const Vec& x, bool tanh_approx) {
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    if (tanh_approx)
      y[i] = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    else
      y[i] = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
  }
  return y;
}

struct PoolShape {
  int64_t n, c, h, w, kh, kw, sh, sw, ph, pw;
  int64_t oh() const { return (h + 2 * ph - kh) / sh + 1; }
  int64_t ow() const { return (w + 2 * pw - kw) / sw + 1; }
};

// Max or average pooling; average divides by the full window when count_include_pad, else by the
// number of window positions inside the input.
inline Vec pool(const PoolShape& s, const Vec& x, bool max, bool count_include_pad) {
  const int64_t oh = s.oh(), ow = s.ow();
  Vec y(static_cast<size_t>(s.n * s.c * oh * ow));
  for (int64_t nc = 0; nc < s.n * s.c; ++nc)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        double acc = max ? -std::numeric_limits<double>::infinity() : 0.0;
        int64_t inside = 0;
        for (int64_t p = 0; p < s.kh; ++p)
          for (int64_t q = 0; q < s.kw; ++q) {
            const int64_t r = i * s.sh - s.ph + p, c = j * s.sw - s.pw + q;
            if (r < 0 || r >= s.h || c < 0 || c >= s.w) continue;
            const double v = x[static_cast<size_t>((nc * s.h + r) * s.w + c)];
            acc = max ? std::max(acc, v) : acc + v;
            ++inside;
          }
        if (!max) acc /= static_cast<double>(count_include_pad ? s.kh * s.kw : inside);
        y[static_cast<size_t>((nc * oh + i) * ow + j)] = acc;
      }
  return y;
}

// y [M, N] = x [M, K] w[N, K]^T + b
inline Vec linear(const Vec& x, const Vec& w, const Vec* b, int64_t m, int64_t k, int64_t n) {
  Vec y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = b ? (*b)[static_cast<size_t>(j)] : 0.0;
      for (int64_t p = 0; p < k; ++p) acc += x[static_cast<size_t>(i * k + p)] * w[static_cast<size_t>(j * k + p)];
      y[static_cast<size_t>(i * n + j)] = acc;
    }
  return y;
}

// C[b] = scale * op(A[b]) op(B[b]); A stored [batch, ta ? K : M, ta ? M : K], B likewise.
inline Vec matmul(const Vec& a, const Vec& b, int64_t batch, int64_t m, int64_t k, int64_t n, bool ta, bool tb,
                  double scale) {
  Vec c(static_cast<size_t>(batch * m * n));
  for (int64_t z = 0; z < batch; ++z)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double av = a[static_cast<size_t>(z * m * k + (ta ? p * m + i : i * k + p))];
          const double bv = b[static_cast<size_t>(z * k * n + (tb ? j * k + p : p * n + j))];
          acc += av * bv;
        }
        c[static_cast<size_t>(z * m * n + i * n + j)] = scale * acc;
      }
  return c;
}

// Softmax of each row of `cols`; with causal, row r sees columns j <= r % rows_per_matrix only
// (the rest are 0).
inline Vec softmax(const Vec& x, int64_t cols, bool causal, int64_t rows_per_matrix) {
  Vec y(x.size(), 0.0);
  const int64_t rows = static_cast<int64_t>(x.size()) / cols;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t visible = causal ? std::min(cols, r % rows_per_matrix + 1) : cols;
    double mx = -std::numeric_limits<double>::infinity(), sum = 0;
    for (int64_t j = 0; j < visible; ++j) mx = std::max(mx, x[static_cast<size_t>(r * cols + j)]);
    for (int64_t j = 0; j < visible; ++j) sum += std::exp(x[static_cast<size_t>(r * cols + j)] - mx);
    for (int64_t j = 0; j < visible; ++j)
      y[static_cast<size_t>(r * cols + j)] = std::exp(x[static_cast<size_t>(r * cols + j)] - mx) / sum;
  }
  return y;
}

// Mean cross-entropy over rows and the log-probabilities.
struct CrossEntropyOut {
  double loss;
  Vec log_probs;
};
inline CrossEntropyOut cross_entropy(const Vec& logits, const std::vector<int32_t>& labels, int64_t classes) {
  CrossEntropyOut r{0.0, Vec(logits.size())};
  const int64_t rows = static_cast<int64_t>(labels.size());
  for (int64_t i = 0; i < rows; ++i) {
    double mx = -std::numeric_limits<double>::infinity(), sum = 0;
    for (int64_t j = 0; j < classes; ++j) mx = std::max(mx, logits[static_cast<size_t>(i * classes + j)]);
    for (int64_t j = 0; j < classes; ++j) sum += std::exp(logits[static_cast<size_t>(i * classes + j)] - mx);
    const double lse = mx + std::log(sum);
    for (int64_t j = 0; j < classes; ++j)
      r.log_probs[static_cast<size_t>(i * classes + j)] = logits[static_cast<size_t>(i * classes + j)] - lse;
    r.loss -= r.log_probs[static_cast<size_t>(i * classes + labels[static_cast<size_t>(i)])];
  }
  r.loss /= static_cast<double>(rows);
  return r;
}

// Concatenation along `axis` of tensors with shapes `shapes` (plain row-major).
inline Vec concat(const std::vector<Vec>& xs, const std::vector<std::vector<int64_t>>& shapes, size_t axis) {
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < axis; ++d) outer *= shapes[0][d];
  for (size_t d = axis + 1; d < shapes[0].size(); ++d) inner *= shapes[0][d];
  Vec y;
  for (int64_t o = 0; o < outer; ++o)
    for (size_t t = 0; t < xs.size(); ++t) {
      const int64_t len = shapes[t][axis] * inner;
      for (int64_t k = 0; k < len; ++k) y.push_back(xs[t][static_cast<size_t>(o * len + k)]);
    }
  return y;
}

// y[b, t] = word[ids[b, t]] + position[t] (if any) + token_type[0] (if any).
inline Vec embedding(const std::vector<int32_t>& ids, int64_t seq, int64_t d, const Vec& word, const Vec* position,
                     const Vec* token_type) {
  Vec y(ids.size() * static_cast<size_t>(d));
  for (size_t tok = 0; tok < ids.size(); ++tok)
    for (int64_t j = 0; j < d; ++j) {
      double v = word[static_cast<size_t>(ids[tok] * d + j)];
      if (position) v += (*position)[static_cast<size_t>((static_cast<int64_t>(tok) % seq) * d + j)];
      if (token_type) v += (*token_type)[static_cast<size_t>(j)];
      y[tok * static_cast<size_t>(d) + static_cast<size_t>(j)] = v;
    }
  return y;
}

// split_heads: part p of [B, T, parts*H*dh] as [B, H, T, dh].
inline Vec split_head_part(const Vec& x, int64_t b, int64_t t, int64_t parts, int64_t heads, int64_t dh, int64_t p) {
  Vec y(static_cast<size_t>(b * heads * t * dh));
  for (int64_t i = 0; i < b; ++i)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t s = 0; s < t; ++s)
        for (int64_t k = 0; k < dh; ++k)
          y[static_cast<size_t>(((i * heads + h) * t + s) * dh + k)] =
              x[static_cast<size_t>((i * t + s) * parts * heads * dh + (p * heads + h) * dh + k)];
  return y;
}

}  // namespace ferry::reference
