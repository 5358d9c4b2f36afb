// analyze(): the conventions analysis.h documents for edge cases (tensors never read, never
// produced, op scratch, the loss), and the errors a user can cause.

#include <gtest/gtest.h>

#include "analysis/analysis.h"
#include "analysis/analysis_test_util.h"

namespace ferry {
namespace {

using analysis_test::contains;
using analysis_test::HandGraph;
using R = TensorRole;
using P = Phase;

TEST(Analyze, TensorNeverReadLivesDuringItsProducerOnly) {
  // op0 {x} -> {y, unused}; op1 {y} -> z; op2 {z} -> out. `unused` (128 bytes) is live at step 0
  // only; `out` (never read, not the loss) at step 2 only; x (data input) from step 0 to 0.
  HandGraph h;
  const TensorId x = h.tensor("x", 64, R::kInput);
  const TensorId y = h.tensor("y", 64);
  const TensorId unused = h.tensor("unused", 128, R::kWorkspace);
  const TensorId z = h.tensor("z", 64);
  const TensorId out = h.tensor("out", 256);
  h.op("op0", P::kForward, {x}, {y, unused});
  h.op("op1", P::kForward, {y}, {z});
  h.op("op2", P::kForward, {z}, {out});
  Result<Analysis> a = analyze(h.graph());
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->tensors[static_cast<size_t>(unused)].first_use, 0);
  EXPECT_EQ(a->tensors[static_cast<size_t>(unused)].last_use, 0);
  EXPECT_EQ(a->tensors[static_cast<size_t>(out)].first_use, 2);
  EXPECT_EQ(a->tensors[static_cast<size_t>(out)].last_use, 2);
  // s0: x 64 + y 64 + unused 128; s1: y 64 + z 64; s2: z 64 + out 256.
  EXPECT_EQ(a->live_bytes_free_at_last_use, (std::vector<uint64_t>{256, 128, 320}));
  // Activations and workspace, summed: y, unused, z, out.
  EXPECT_EQ(a->activation_bytes, 64u + 128u + 64u + 256u);
}

TEST(Analyze, DataInputNeverReadLivesDuringStepZero) {
  HandGraph h;
  const TensorId x = h.tensor("x", 64, R::kInput);
  const TensorId labels = h.tensor("labels", 32, R::kInput);  // no op reads it
  const TensorId y = h.tensor("y", 64);
  const TensorId z = h.tensor("z", 64);
  h.op("op0", P::kForward, {x}, {y});
  h.op("op1", P::kForward, {y}, {z});
  Result<Analysis> a = analyze(h.graph());
  ASSERT_TRUE(a.ok()) << a.status().message();
  const TensorInfo& ti = a->tensors[static_cast<size_t>(labels)];
  EXPECT_EQ(ti.first_use, 0);
  EXPECT_EQ(ti.last_use, 0);
  EXPECT_EQ(a->live_bytes_free_at_last_use, (std::vector<uint64_t>{64 + 32 + 64, 64 + 64}));
}

TEST(Analyze, TransientTensorNobodyProducesNeverExists) {
  // A gradient declared in the tensor list that no op produces or reads (autodiff skipped it).
  HandGraph h;
  const TensorId x = h.tensor("x", 64, R::kInput);
  const TensorId y = h.tensor("y", 64);
  const TensorId ghost = h.tensor("ghost", 4096, R::kGradient);
  h.op("op0", P::kForward, {x}, {y});
  Result<Analysis> a = analyze(h.graph());
  ASSERT_TRUE(a.ok()) << a.status().message();
  const TensorInfo& ti = a->tensors[static_cast<size_t>(ghost)];
  EXPECT_EQ(ti.first_use, kNoOp);
  EXPECT_EQ(ti.last_use, kNoOp);
  EXPECT_EQ(ti.buffer, -1);
  EXPECT_EQ(a->buffers.size(), 2u);
  EXPECT_EQ(a->peak_bytes_keep_all, 128u);
}

TEST(Analyze, ScratchIsABufferLiveDuringItsOpOnly) {
  HandGraph h;
  const TensorId x = h.tensor("x", 64, R::kInput);
  const TensorId y = h.tensor("y", 64);
  const TensorId z = h.tensor("z", 64);
  h.op("op0", P::kForward, {x}, {y});
  h.op("op1", P::kForward, {y}, {z});
  AnalysisOptions opt;
  opt.op_scratch_bytes = {0, 1000};
  Result<Analysis> a = analyze(h.graph(), opt);
  ASSERT_TRUE(a.ok()) << a.status().message();
  // Buffers: x, y (step 0), z (step 1), then op1's scratch.
  ASSERT_EQ(a->buffers.size(), 4u);
  const Buffer& scratch = a->buffers[3];
  EXPECT_EQ(scratch.scratch_of, 1);
  EXPECT_EQ(scratch.first_step, 1);
  EXPECT_EQ(scratch.last_step, 1);
  EXPECT_EQ(scratch.bytes, 1000u);
  EXPECT_TRUE(scratch.tensors.empty());
  // s0: x + y = 128; s1: y + z + 1000.
  EXPECT_EQ(a->live_bytes_free_at_last_use, (std::vector<uint64_t>{128, 1128}));
  EXPECT_EQ(a->live_bytes_shared, (std::vector<uint64_t>{128, 1128}));
  // Keep-all frees nothing but scratch: s1 holds x, y, z and the scratch.
  EXPECT_EQ(a->peak_bytes_keep_all, 192u + 1000u);
}

TEST(Analyze, RejectsBadOptions) {
  HandGraph h("tiny");
  const TensorId x = h.tensor("x", 64, R::kInput);
  const TensorId y = h.tensor("y", 64);
  h.op("op0", P::kForward, {x}, {y});
  AnalysisOptions align;
  align.alignment = 96;
  Result<Analysis> a = analyze(h.graph(), align);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(a.status().message(), "alignment 96 is not a power of two"));
  align.alignment = 0;
  EXPECT_FALSE(analyze(h.graph(), align).ok());

  AnalysisOptions scratch;
  scratch.op_scratch_bytes = {1, 2, 3};
  Result<Analysis> b = analyze(h.graph(), scratch);
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(contains(b.status().message(), "op_scratch_bytes has 3 entries but graph 'tiny' has 1 ops"));
}

TEST(Analyze, RejectsInvalidAndEmptyGraphs) {
  HandGraph bad("bad");
  const TensorId y = bad.tensor("y", 64);
  const TensorId z = bad.tensor("z", 64);
  bad.op("op0", P::kForward, {y}, {z});  // y is read but nothing produces it
  Result<Analysis> a = analyze(bad.graph());
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(a.status().message(), "analyze graph 'bad'"));
  EXPECT_TRUE(contains(a.status().message(), "'y'"));

  HandGraph empty("empty");
  empty.tensor("w", 64, R::kWeight);
  Result<Analysis> b = analyze(empty.graph());
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(contains(b.status().message(), "graph 'empty' has no ops"));
}

TEST(Analyze, RejectsByteCountsThatOverflow) {
  // Tensors too large for 64-bit sums: rejected (Graph::validate bounds the tensor total).
  HandGraph h("huge");
  const TensorId x = h.tensor("x", uint64_t{1} << 63, R::kInput);
  const TensorId y = h.tensor("y", uint64_t{1} << 63);
  h.op("op0", P::kForward, {x}, {y});
  Result<Analysis> a = analyze(h.graph());
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(a.status().message(), "graph 'huge'"));

  // Scratch is not part of the graph: its sum (with alignment padding) is checked by analyze().
  HandGraph small("small");
  const TensorId p = small.tensor("p", 64, R::kInput);
  const TensorId q = small.tensor("q", 64);
  const TensorId r = small.tensor("r", 64);
  small.op("op0", P::kForward, {p}, {q});
  small.op("op1", P::kForward, {q}, {r});
  AnalysisOptions opt;
  opt.op_scratch_bytes = {uint64_t{1} << 63, uint64_t{1} << 63};
  Result<Analysis> b = analyze(small.graph(), opt);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(b.status().message(), "graph 'small'"));
  EXPECT_TRUE(contains(b.status().message(), "2^64"));
  // One scratch just below 2^64 fits in the sum, but not with the alignment padding.
  opt.op_scratch_bytes = {~uint64_t{0} - 300, 0};
  EXPECT_FALSE(analyze(small.graph(), opt).ok());
  // An absurd alignment: the padding of three buffers alone passes 2^64.
  AnalysisOptions huge_alignment;
  huge_alignment.alignment = uint64_t{1} << 63;
  Result<Analysis> c = analyze(small.graph(), huge_alignment);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(contains(c.status().message(), "aligned to 9223372036854775808"));
}

}  // namespace
}  // namespace ferry
