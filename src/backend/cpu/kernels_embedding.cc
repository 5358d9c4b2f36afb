// Embedding lookup and its backward, hand-written.
//
// Forward {ids int32 [B, T], word [V, D][, position [P, D]][, token_type [TV, D]]} -> y [B, T, D]:
// y[b, t] = word[ids[b, t]] + position[t] + token_type[0] (every token has type 0). With three
// inputs the third is the position table (the builder's convention; see NOTES-backend.md).
// Backward {dy, ids} -> {dword[, dposition][, dtoken_type]}: a scatter-add, done without atomics
// so that it is deterministic: threads own disjoint column blocks of the tables and walk the
// tokens in order, so every element is summed in token order whatever the thread count.
#include <cstring>

#include <fmt/format.h>

#include "backend/cpu/kernel.h"

namespace ferry::cpu {
namespace {

constexpr int64_t kColumnBlock = 16;  // one cache line of floats per task

struct EmbeddingShape {
  int64_t batch = 0, seq = 0, dim = 0, vocab = 0;
  bool position = false, token_type = false;
  int64_t positions = 0;
  int64_t type_rows = 0;
};

EmbeddingShape embedding_shape(const OpSetup& s, const Tensor& ids, const Tensor& y,
                               const std::vector<const Tensor*>& tables) {
  s.require(ids.dtype == DType::kI32 && ids.shape.size() == 2, "ids must be int32 [B, T]");
  s.require(!tables.empty() && tables.size() <= 3, "embedding needs a word table and at most two more");
  EmbeddingShape e;
  e.batch = ids.shape[0];
  e.seq = ids.shape[1];
  const Tensor& word = *tables[0];
  s.require(word.shape.size() == 2, "word table must be [V, D]");
  e.vocab = word.shape[0];
  e.dim = word.shape[1];
  s.require(y.shape == std::vector<int64_t>{e.batch, e.seq, e.dim},
            fmt::format("output must be [{}, {}, {}]", e.batch, e.seq, e.dim));
  if (tables.size() == 2)
    s.require(!tables[1]->name.ends_with(".token_type"),
              "three inputs mean {ids, word, position}; a token_type table needs a position table before it");
  e.position = tables.size() >= 2;
  e.token_type = tables.size() == 3;
  for (size_t i = 1; i < tables.size(); ++i)
    s.require(tables[i]->shape.size() == 2 && tables[i]->shape[1] == e.dim,
              fmt::format("table '{}' must be [*, {}]", tables[i]->name, e.dim));
  if (e.position) {
    e.positions = tables[1]->shape[0];
    s.require(e.positions >= e.seq, fmt::format("{} positions for a sequence of {}", e.positions, e.seq));
  }
  if (e.token_type) e.type_rows = tables[2]->shape[0];
  return e;
}

Status check_ids(const std::string& op, const int32_t* ids, const EmbeddingShape& e) {
  for (int64_t i = 0; i < e.batch * e.seq; ++i)
    if (ids[i] < 0 || ids[i] >= e.vocab)
      return Status::InvalidArgument(
          fmt::format("op '{}': token id {} at position {} is outside [0, {})", op, ids[i], i, e.vocab));
  return Status::Ok();
}

std::unique_ptr<Kernel> embedding_forward(const OpSetup& s) {
  s.expect_arity(2, 4, 1, 1);
  std::vector<const Tensor*> tables;
  for (size_t i = 1; i < s.op.inputs.size(); ++i) tables.push_back(&s.in_tensor(i));
  const EmbeddingShape e = embedding_shape(s, s.in_tensor(0), s.out_tensor(0), tables);
  auto k = new_kernel(s);
  for (size_t i = 0; i < s.op.inputs.size(); ++i) read_plain(*k, s, i);
  write_plain(*k, s, 0);
  k->set_body([e, name = s.op.name](const ExecArgs& a) {
    const int32_t* ids = a.in_as<const int32_t>(0);
    FERRY_RETURN_IF_ERROR(check_ids(name, ids, e));
    const float* word = a.in_as<const float>(1);
    const float* pos = e.position ? a.in_as<const float>(2) : nullptr;
    const float* type = e.token_type ? a.in_as<const float>(3) : nullptr;
    float* y = a.out_as<float>(0);
    const int64_t d = e.dim;
#pragma omp parallel for schedule(static) if (parallel_worth(e.batch * e.seq * d))
    for (int64_t tok = 0; tok < e.batch * e.seq; ++tok) {
      const float* wr = word + static_cast<int64_t>(ids[tok]) * d;
      float* yr = y + tok * d;
      if (pos) {
        const float* pr = pos + (tok % e.seq) * d;
        if (type) {
#pragma omp simd
          for (int64_t j = 0; j < d; ++j) yr[j] = wr[j] + pr[j] + type[j];
        } else {
#pragma omp simd
          for (int64_t j = 0; j < d; ++j) yr[j] = wr[j] + pr[j];
        }
      } else {
        std::memcpy(yr, wr, static_cast<size_t>(d) * sizeof(float));
      }
    }
    return Status::Ok();
  });
  return k;
}

std::unique_ptr<Kernel> embedding_backward(const OpSetup& s) {
  s.expect_arity(2, 2, 1, 3);
  std::vector<const Tensor*> tables;
  for (size_t i = 0; i < s.op.outputs.size(); ++i) tables.push_back(&s.out_tensor(i));
  const EmbeddingShape e = embedding_shape(s, s.in_tensor(1), s.in_tensor(0), tables);
  auto k = new_kernel(s);
  read_plain(*k, s, 0);
  read_plain(*k, s, 1);
  for (size_t i = 0; i < s.op.outputs.size(); ++i) write_plain(*k, s, i);
  k->set_body([e, name = s.op.name](const ExecArgs& a) {
    const float* dy = a.in_as<const float>(0);
    const int32_t* ids = a.in_as<const int32_t>(1);
    FERRY_RETURN_IF_ERROR(check_ids(name, ids, e));
    const int64_t d = e.dim, tokens = e.batch * e.seq;
    const int64_t blocks = (d + kColumnBlock - 1) / kColumnBlock;
    float* dword = a.out_as<float>(0);
#pragma omp parallel for schedule(static) if (parallel_worth(e.vocab * d))
    for (int64_t row = 0; row < e.vocab; ++row) std::memset(dword + row * d, 0, static_cast<size_t>(d) * sizeof(float));
#pragma omp parallel for schedule(static) if (parallel_worth(tokens * d))
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t j0 = blk * kColumnBlock, j1 = std::min(d, j0 + kColumnBlock);
      for (int64_t tok = 0; tok < tokens; ++tok) {
        float* wr = dword + static_cast<int64_t>(ids[tok]) * d;
        const float* gr = dy + tok * d;
        for (int64_t j = j0; j < j1; ++j) wr[j] += gr[j];
      }
    }
    if (e.position) {
      float* dpos = a.out_as<float>(1);
#pragma omp parallel for schedule(static) if (parallel_worth(e.positions * d))
      for (int64_t t = 0; t < e.positions; ++t) {
        float* pr = dpos + t * d;
        std::memset(pr, 0, static_cast<size_t>(d) * sizeof(float));
        if (t >= e.seq) continue;
        for (int64_t b = 0; b < e.batch; ++b) {
          const float* gr = dy + (b * e.seq + t) * d;
#pragma omp simd
          for (int64_t j = 0; j < d; ++j) pr[j] += gr[j];
        }
      }
    }
    if (e.token_type) {  // every token has type 0: row 0 gets the sum over all tokens
      float* dtype = a.out_as<float>(2);
      std::memset(dtype, 0, static_cast<size_t>(e.type_rows * d) * sizeof(float));
#pragma omp parallel for schedule(static) if (parallel_worth(tokens * d))
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t j0 = blk * kColumnBlock, j1 = std::min(d, j0 + kColumnBlock);
        for (int64_t tok = 0; tok < tokens; ++tok)
          for (int64_t j = j0; j < j1; ++j) dtype[j] += dy[tok * d + j];
      }
    }
    return Status::Ok();
  });
  return k;
}

}  // namespace

std::unique_ptr<Kernel> make_embedding_kernel(const OpSetup& s) {
  return s.op.type == OpType::kEmbedding ? embedding_forward(s) : embedding_backward(s);
}

}  // namespace ferry::cpu
