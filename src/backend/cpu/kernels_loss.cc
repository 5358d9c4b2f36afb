// Cross-entropy: mean over rows of -log softmax(logits)[label], hand-written (oneDNN has no loss).
//
// - The classes lie along attrs.class_axis (-1: the last); a "row" is one position of the other
//   axes, so logits [outer, C, inner] hold outer * inner rows whose classes are `inner` apart, and
//   the labels [outer, inner] are in row order. Span prediction uses logits [B,T,2] with axis 1.
// - Forward {logits, labels int32} -> {loss [], log_probs (the logits' shape)}: per row,
//   log_probs = x - max - log(sum exp(x - max)) with the sum in double, which is stable for any
//   logit range (every exponential is in (0, 1]). Rows run in parallel; each row's loss goes to
//   a scratch slot and the slots are summed serially in row order, so the loss is bitwise
//   independent of the thread count.
// - Backward {log_probs, labels} -> {dlogits}: the graph's loss is the last op's output, so
//   d(loss) = 1 and dlogits = (exp(log_probs) - onehot(label)) / rows.
// Labels are checked before any work; one outside [0, C) fails the run with InvalidArgument.
#include <cmath>

#include <fmt/format.h>

#include "backend/cpu/kernel.h"

namespace ferry::cpu {
namespace {

struct LossShape {
  int64_t rows = 0, classes = 0;
  int64_t inner = 1;  // distance between a row's classes; rows r = o * inner + i start at o * C * inner + i
  int64_t start(int64_t r) const { return (r / inner) * classes * inner + r % inner; }
};

LossShape loss_shape(const OpSetup& s, const Tensor& logits, const Tensor& labels) {
  s.require(!logits.shape.empty() && logits.dtype == DType::kF32, "logits must be f32");
  s.require(labels.dtype == DType::kI32, fmt::format("labels '{}' must be int32", labels.name));
  const int rank = static_cast<int>(logits.shape.size());
  const int axis = s.op.attrs.class_axis < 0 ? rank - 1 : s.op.attrs.class_axis;
  s.require(axis < rank, fmt::format("class axis {} of logits [{}]", axis, fmt::join(logits.shape, ",")));
  std::vector<int64_t> rows_shape = logits.shape;
  if (axis < rank) rows_shape.erase(rows_shape.begin() + axis);
  s.require(labels.shape == rows_shape, fmt::format("labels [{}] do not match logits [{}] without class axis {}",
                                                     fmt::join(labels.shape, ","), fmt::join(logits.shape, ","), axis));
  LossShape ls;
  if (axis >= rank) return ls;
  ls.classes = logits.shape[static_cast<size_t>(axis)];
  for (int d = axis + 1; d < rank; ++d) ls.inner *= logits.shape[static_cast<size_t>(d)];
  ls.rows = labels.numel();
  s.require(ls.classes > 0 && ls.rows > 0, "cross_entropy of an empty tensor");
  return ls;
}

Status check_labels(const std::string& op, const int32_t* labels, const LossShape& ls) {
  for (int64_t r = 0; r < ls.rows; ++r)
    if (labels[r] < 0 || labels[r] >= ls.classes)
      return Status::InvalidArgument(
          fmt::format("op '{}': label {} of row {} is outside [0, {})", op, labels[r], r, ls.classes));
  return Status::Ok();
}

std::unique_ptr<Kernel> cross_entropy_forward(const OpSetup& s) {
  s.expect_arity(2, 2, 2, 2);
  const LossShape ls = loss_shape(s, s.in_tensor(0), s.in_tensor(1));
  s.require(s.out_tensor(0).numel() == 1, "loss must be a scalar");
  s.require(s.out_tensor(1).shape == s.in_tensor(0).shape, "log_probs must have the shape of the logits");
  auto k = new_kernel(s);
  read_plain(*k, s, 0);
  read_plain(*k, s, 1);
  write_plain(*k, s, 0);
  write_plain(*k, s, 1);
  const int row_losses = k->add_buffer(static_cast<uint64_t>(ls.rows) * sizeof(double));
  k->set_body([ls, row_losses, name = s.op.name](const ExecArgs& a) {
    const float* x = a.in_as<const float>(0);
    const int32_t* labels = a.in_as<const int32_t>(1);
    FERRY_RETURN_IF_ERROR(check_labels(name, labels, ls));
    float* logp = a.out_as<float>(1);
    double* losses = static_cast<double*>(a.buffer(row_losses));
    const int64_t c = ls.classes, step = ls.inner;
#pragma omp parallel for schedule(static) if (parallel_worth(ls.rows * c))
    for (int64_t r = 0; r < ls.rows; ++r) {
      const float* xr = x + ls.start(r);
      float* lr = logp + ls.start(r);
      float mx = xr[0];
      for (int64_t j = 1; j < c; ++j) mx = std::max(mx, xr[j * step]);
      double sum = 0;  // float exponentials (each in (0, 1]), summed in double
      for (int64_t j = 0; j < c; ++j) sum += std::exp(xr[j * step] - mx);
      const float lse = mx + static_cast<float>(std::log(sum));
      for (int64_t j = 0; j < c; ++j) lr[j * step] = xr[j * step] - lse;
      losses[r] = -static_cast<double>(lr[labels[r] * step]);
    }
    double total = 0;
    for (int64_t r = 0; r < ls.rows; ++r) total += losses[r];
    *a.out_as<float>(0) = static_cast<float>(total / static_cast<double>(ls.rows));
    return Status::Ok();
  });
  return k;
}

std::unique_ptr<Kernel> cross_entropy_backward(const OpSetup& s) {
  s.expect_arity(2, 2, 1, 1);
  const LossShape ls = loss_shape(s, s.in_tensor(0), s.in_tensor(1));
  s.require(s.out_tensor(0).shape == s.in_tensor(0).shape, "dlogits must have the shape of the logits");
  auto k = new_kernel(s);
  read_plain(*k, s, 0);
  read_plain(*k, s, 1);
  write_plain(*k, s, 0);
  k->set_body([ls, name = s.op.name](const ExecArgs& a) {
    const float* logp = a.in_as<const float>(0);
    const int32_t* labels = a.in_as<const int32_t>(1);
    FERRY_RETURN_IF_ERROR(check_labels(name, labels, ls));
    float* dx = a.out_as<float>(0);
    const int64_t c = ls.classes, step = ls.inner;
    const float inv_rows = 1.0f / static_cast<float>(ls.rows);
#pragma omp parallel for schedule(static) if (parallel_worth(ls.rows * c))
    for (int64_t r = 0; r < ls.rows; ++r) {
      const float* lr = logp + ls.start(r);
      float* dr = dx + ls.start(r);
      for (int64_t j = 0; j < c; ++j) dr[j * step] = std::exp(lr[j * step]) * inv_rows;
      dr[labels[r] * step] -= inv_rows;
    }
    return Status::Ok();
  });
  return k;
}

}  // namespace

std::unique_ptr<Kernel> make_loss_kernel(const OpSetup& s) {
  return s.op.type == OpType::kCrossEntropy ? cross_entropy_forward(s) : cross_entropy_backward(s);
}

}  // namespace ferry::cpu
