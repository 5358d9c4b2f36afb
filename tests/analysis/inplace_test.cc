// In-place merging (analysis.h: an in-place capable op writes its first output into its first
// input's buffer when that input is transient, not a data input, has the same byte size and dies
// at the op): when it happens, chains of it, and every reason to refuse it.

#include <gtest/gtest.h>

#include "analysis/analysis.h"
#include "analysis/analysis_test_util.h"

namespace ferry {
namespace {

using analysis_test::HandGraph;
using R = TensorRole;
using P = Phase;

Analysis analyze_ok(const Graph& g, const AnalysisOptions& options = {}) {
  Result<Analysis> a = analyze(g, options);
  EXPECT_TRUE(a.ok()) << a.status().message();
  return std::move(a).value();
}

int32_t buffer_of(const Analysis& a, TensorId t) { return a.tensors[static_cast<size_t>(t)].buffer; }

// conv -> bn -> relu -> dropout -> head, all 256 bytes but the 4-byte loss:
//   step 0 conv {x, w} -> c;  1 bn {c} -> b;  2 relu {b} -> r (in place);  3 dropout {r} -> d (in
//   place);  4 head {d} -> loss.
struct Chain {
  Graph g;
  TensorId x, w, c, b, r, d, loss;
};

Chain chain(bool relu_inplace = true, bool dropout_inplace = true) {
  Chain s;
  HandGraph h("chain");
  s.x = h.tensor("x", 256, R::kInput);
  s.w = h.tensor("w", 64, R::kWeight);
  s.c = h.tensor("c", 256);
  s.b = h.tensor("b", 256);
  s.r = h.tensor("r", 256);
  s.d = h.tensor("d", 256);
  s.loss = h.tensor("loss", 4);
  h.op("conv", P::kForward, {s.x, s.w}, {s.c});
  h.op("bn", P::kForward, {s.c}, {s.b});
  h.op("relu", P::kForward, {s.b}, {s.r}, relu_inplace);
  h.op("dropout", P::kForward, {s.r}, {s.d}, dropout_inplace);
  h.op("head", P::kForward, {s.d}, {s.loss});
  h.set_loss(s.loss);
  s.g = h.graph();
  return s;
}

TEST(InPlace, ChainOfInPlaceOpsSharesOneBuffer) {
  const Chain s = chain();
  const Analysis a = analyze_ok(s.g);
  // Buffers: x, c, {b, r, d}, loss.
  ASSERT_EQ(a.buffers.size(), 4u);
  EXPECT_EQ(buffer_of(a, s.b), buffer_of(a, s.r));
  EXPECT_EQ(buffer_of(a, s.r), buffer_of(a, s.d));
  const Buffer& shared = a.buffers[static_cast<size_t>(buffer_of(a, s.b))];
  EXPECT_EQ(shared.tensors, (std::vector<TensorId>{s.b, s.r, s.d}));
  EXPECT_EQ(shared.bytes, 256u);
  EXPECT_EQ(shared.first_step, 1);  // b is born at step 1
  EXPECT_EQ(shared.last_step, 4);   // d is read last at step 4
  // Lifetimes: x [0,0], c [0,1], b [1,2], r [2,3], d [3,4], loss [4,4].
  //   free at last use: s0 x+c, s1 c+b, s2 b+r, s3 r+d = 512 each; s4 d + loss = 260.
  //   shared:           s0 x+c = 512, s1 c+B = 512, s2 B = 256, s3 B = 256, s4 B + loss = 260.
  EXPECT_EQ(a.live_bytes_free_at_last_use, (std::vector<uint64_t>{512, 512, 512, 512, 260}));
  EXPECT_EQ(a.live_bytes_shared, (std::vector<uint64_t>{512, 512, 256, 256, 260}));
  EXPECT_EQ(a.lower_bound_bytes, 64u + 512u);
}

TEST(InPlace, NotCapableOrDisabledMeansNoMerging) {
  const Chain off = chain(/*relu_inplace=*/false, /*dropout_inplace=*/false);
  const Analysis a = analyze_ok(off.g);
  EXPECT_EQ(a.buffers.size(), 6u);
  EXPECT_EQ(a.live_bytes_shared, a.live_bytes_free_at_last_use);

  const Chain on = chain();
  AnalysisOptions no_inplace;
  no_inplace.allow_inplace = false;
  const Analysis b = analyze_ok(on.g, no_inplace);
  EXPECT_EQ(b.buffers.size(), 6u);
  EXPECT_NE(buffer_of(b, on.b), buffer_of(b, on.r));
}

TEST(InPlace, OnlyTheCapableLinkOfAChainMerges) {
  const Chain s = chain(/*relu_inplace=*/false, /*dropout_inplace=*/true);
  const Analysis a = analyze_ok(s.g);
  EXPECT_NE(buffer_of(a, s.b), buffer_of(a, s.r));
  EXPECT_EQ(buffer_of(a, s.r), buffer_of(a, s.d));
}

TEST(InPlace, RefusedWhenTheInputIsReadLater) {
  // As the chain, plus a backward op that reads b after the relu: b does not die at the relu.
  HandGraph h("read-later");
  const TensorId x = h.tensor("x", 256, R::kInput);
  const TensorId b = h.tensor("b", 256);
  const TensorId r = h.tensor("r", 256);
  const TensorId g = h.tensor("g", 256, R::kGradient);
  h.op("bn", P::kForward, {x}, {b});
  h.op("relu", P::kForward, {b}, {r}, /*inplace=*/true);
  h.op("bn_bwd", P::kBackward, {b, r}, {g});
  const Analysis a = analyze_ok(h.graph());
  EXPECT_NE(buffer_of(a, b), buffer_of(a, r));
  EXPECT_EQ(a.buffers.size(), 4u);
}

TEST(InPlace, RefusedWhenSizesDiffer) {
  HandGraph h("sizes");
  const TensorId x = h.tensor("x", 256, R::kInput);
  const TensorId b = h.tensor("b", 256);
  const TensorId r = h.tensor("r", 128);
  h.op("bn", P::kForward, {x}, {b});
  h.op("pool", P::kForward, {b}, {r}, /*inplace=*/true);
  const Analysis a = analyze_ok(h.graph());
  EXPECT_NE(buffer_of(a, b), buffer_of(a, r));
}

TEST(InPlace, RefusedOverADataInput) {
  // x dies at the relu and has the same size, but data inputs are never overwritten.
  HandGraph h("data-input");
  const TensorId x = h.tensor("x", 256, R::kInput);
  const TensorId r = h.tensor("r", 256);
  h.op("relu", P::kForward, {x}, {r}, /*inplace=*/true);
  const Analysis a = analyze_ok(h.graph());
  EXPECT_NE(buffer_of(a, x), buffer_of(a, r));
  EXPECT_EQ(a.buffers.size(), 2u);
}

TEST(InPlace, RefusedOverAPersistentTensor) {
  HandGraph h("persistent");
  const TensorId w = h.tensor("w", 256, R::kWeight);
  const TensorId r = h.tensor("r", 256);
  h.op("relu", P::kForward, {w}, {r}, /*inplace=*/true);
  const Analysis a = analyze_ok(h.graph());
  EXPECT_EQ(buffer_of(a, w), -1);
  EXPECT_EQ(a.buffers.size(), 1u);
  EXPECT_EQ(a.buffers[0].tensors, (std::vector<TensorId>{r}));
}

TEST(InPlace, OnlyTheFirstInputCounts) {
  // add(a, b): b dies here with the right size, but only the first input may be overwritten, and
  // a is still read afterwards.
  HandGraph h("first-input");
  const TensorId x = h.tensor("x", 256, R::kInput);
  const TensorId a_t = h.tensor("a", 256);
  const TensorId b_t = h.tensor("b", 256);
  const TensorId s_t = h.tensor("s", 256);
  const TensorId y = h.tensor("y", 256);
  h.op("fa", P::kForward, {x}, {a_t});
  h.op("fb", P::kForward, {x}, {b_t});
  h.op("add", P::kForward, {a_t, b_t}, {s_t}, /*inplace=*/true);
  h.op("use_a", P::kForward, {a_t, s_t}, {y});
  const Analysis a = analyze_ok(h.graph());
  EXPECT_NE(buffer_of(a, s_t), buffer_of(a, a_t));
  EXPECT_NE(buffer_of(a, s_t), buffer_of(a, b_t));
}

TEST(InPlace, FirstInputReadTwiceStillMerges) {
  // add(b, b) with b dying here: an element-wise op may overwrite an operand it reads twice.
  HandGraph h("twice");
  const TensorId x = h.tensor("x", 256, R::kInput);
  const TensorId b = h.tensor("b", 256);
  const TensorId s = h.tensor("s", 256);
  h.op("fb", P::kForward, {x}, {b});
  h.op("add", P::kForward, {b, b}, {s}, /*inplace=*/true);
  const Analysis a = analyze_ok(h.graph());
  EXPECT_EQ(buffer_of(a, s), buffer_of(a, b));
}

TEST(InPlace, OnlyTheFirstOutputMerges) {
  HandGraph h("outputs");
  const TensorId x = h.tensor("x", 256, R::kInput);
  const TensorId b = h.tensor("b", 256);
  const TensorId o1 = h.tensor("o1", 256);
  const TensorId o2 = h.tensor("o2", 256);
  h.op("fb", P::kForward, {x}, {b});
  h.op("split", P::kForward, {b}, {o1, o2}, /*inplace=*/true);
  const Analysis a = analyze_ok(h.graph());
  EXPECT_EQ(buffer_of(a, o1), buffer_of(a, b));
  EXPECT_NE(buffer_of(a, o2), buffer_of(a, b));
}

TEST(InPlace, GradientAccumulationChainsInBackward) {
  // Backward: g1 and g2 are gradients of one tensor, summed in place into g1's buffer; the sum is
  // then passed through an in-place relu backward. One buffer holds g1, sum and dx.
  HandGraph h("grad-acc");
  const TensorId x = h.tensor("x", 256, R::kInput);
  const TensorId y = h.tensor("y", 256);
  const TensorId g1 = h.tensor("g1", 256, R::kGradient);
  const TensorId g2 = h.tensor("g2", 256, R::kGradient);
  const TensorId sum = h.tensor("sum", 256, R::kGradient);
  const TensorId dx = h.tensor("dx", 256, R::kGradient);
  h.op("f", P::kForward, {x}, {y});
  h.op("b1", P::kBackward, {y}, {g1});
  h.op("b2", P::kBackward, {y}, {g2});
  h.op("acc", P::kBackward, {g1, g2}, {sum}, /*inplace=*/true);
  h.op("relu_bwd", P::kBackward, {sum, y}, {dx}, /*inplace=*/true);
  const Analysis a = analyze_ok(h.graph());
  EXPECT_EQ(buffer_of(a, g1), buffer_of(a, sum));
  EXPECT_EQ(buffer_of(a, sum), buffer_of(a, dx));
  const Buffer& b = a.buffers[static_cast<size_t>(buffer_of(a, g1))];
  EXPECT_EQ(b.first_step, 1);
  EXPECT_EQ(b.last_step, 4);  // dx is never read: it lives during its producer's step only
}

}  // namespace
}  // namespace ferry
