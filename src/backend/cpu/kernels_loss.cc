// Cross-entropy: mean over rows of -log softmax(logits)[label], hand-written (oneDNN has no loss).
//
// - Forward {logits [..., C], labels int32 [...]} -> {loss [], log_probs [..., C]}: per row,
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
};

LossShape loss_shape(const OpSetup& s, const Tensor& logits, const Tensor& labels) {
  s.require(!logits.shape.empty() && logits.dtype == DType::kF32, "logits must be f32 [..., C]");
  s.require(labels.dtype == DType::kI32, fmt::format("labels '{}' must be int32", labels.name));
  s.require(
      labels.shape.size() + 1 == logits.shape.size() &&
          std::equal(labels.shape.begin(), labels.shape.end(), logits.shape.begin()),
      fmt::format("labels [{}] do not match logits [{}]", fmt::join(labels.shape, ","), fmt::join(logits.shape, ",")));
  LossShape ls;
  ls.classes = logits.shape.back();
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
    const int64_t c = ls.classes;
#pragma omp parallel for schedule(static) if (parallel_worth(ls.rows * c))
    for (int64_t r = 0; r < ls.rows; ++r) {
      const float* xr = x + r * c;
      float* lr = logp + r * c;
      float mx = xr[0];
      for (int64_t j = 1; j < c; ++j) mx = std::max(mx, xr[j]);
      double sum = 0;  // float exponentials (each in (0, 1]), summed in double
      for (int64_t j = 0; j < c; ++j) sum += std::exp(xr[j] - mx);
      const float lse = mx + static_cast<float>(std::log(sum));
      for (int64_t j = 0; j < c; ++j) lr[j] = xr[j] - lse;
      losses[r] = -static_cast<double>(lr[labels[r]]);
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
    const int64_t c = ls.classes;
    const float inv_rows = 1.0f / static_cast<float>(ls.rows);
#pragma omp parallel for schedule(static) if (parallel_worth(ls.rows * c))
    for (int64_t r = 0; r < ls.rows; ++r) {
      const float* lr = logp + r * c;
      float* dr = dx + r * c;
      for (int64_t j = 0; j < c; ++j) dr[j] = std::exp(lr[j]) * inv_rows;
      dr[labels[r]] -= inv_rows;
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
