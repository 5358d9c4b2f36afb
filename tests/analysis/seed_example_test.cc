// The seed design's worked example (seeds-digest.md §1): a 5-step forward / 5-step backward chain
//   Step1 in {t0}, Step2 in {t1}, Step3 in {t0}, Step4 in {t2,t3}, Step5 in {t4},
//   Step6 in {t5}, Step7 in {t2,t3,t6}, Step8 in {t1,t7}, Step9 in {t0,t8}, Step10 in {t0,t7},
// built by hand, plus two optimizer steps so that weight gradients die somewhere and persistent
// bytes are counted. Every expected number below is worked out by hand in the comments.
//
// Steps are 0-based here (the seed's Step k is step k-1). The graph:
//   step 0  fwd  op0  {t0}          -> t1
//   step 1  fwd  op1  {t1}          -> t2
//   step 2  fwd  op2  {t0}          -> t3
//   step 3  fwd  op3  {t2,t3}       -> t4            (a concat: 1024 + 128 = 1152 bytes)
//   step 4  fwd  op4  {t4}          -> t5 (the loss, 4 bytes)
//   step 5  bwd  op5  {t5}          -> t6
//   step 6  bwd  op6  {t2,t3,t6}    -> t7            (300 bytes of scratch)
//   step 7  bwd  op7  {t1,t7}       -> t8            (in place: t1 dies here, same size)
//   step 8  bwd  op8  {t0,t8}       -> t9  (weight gradient of w0)
//   step 9  bwd  op9  {t0,t7}       -> t10 (weight gradient of w2)
//   step 10 upd  op10 {w0,t9,m0}    -> {w0,m0}
//   step 11 upd  op11 {w2,t10}      -> {w2}
// Bytes: t0 256 (data input), t1 512, t2 1024, t3 128, t4 1152, t5 4, t6 1152, t7 1024, t8 512,
// t9 192, t10 64; persistent w0 192, m0 192, w2 64.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "analysis/analysis.h"
#include "analysis/analysis_test_util.h"
#include "memory/sharing_plan.h"

namespace ferry {
namespace {

using analysis_test::HandGraph;
using R = TensorRole;
using P = Phase;

struct SeedExample {
  Graph g;
  TensorId t[11];
  TensorId w0, m0, w2;
  std::vector<uint64_t> scratch;
};

SeedExample seed_example() {
  SeedExample s;
  HandGraph h("seed-example");
  const uint64_t bytes[11] = {256, 512, 1024, 128, 1152, 4, 1152, 1024, 512, 192, 64};
  const R roles[11] = {R::kInput,    R::kActivation, R::kActivation, R::kActivation,
                       R::kActivation, R::kActivation, R::kGradient,   R::kGradient,
                       R::kGradient,   R::kWeightGradient, R::kWeightGradient};
  for (int i = 0; i < 11; ++i) s.t[i] = h.tensor(fmt::format("t{}", i), bytes[i], roles[i]);
  s.w0 = h.tensor("w0", 192, R::kWeight);
  s.m0 = h.tensor("m0", 192, R::kOptimizerState);
  s.w2 = h.tensor("w2", 64, R::kWeight);
  const TensorId* t = s.t;
  h.op("op0", P::kForward, {t[0]}, {t[1]});
  h.op("op1", P::kForward, {t[1]}, {t[2]});
  h.op("op2", P::kForward, {t[0]}, {t[3]});
  h.op("op3", P::kForward, {t[2], t[3]}, {t[4]});
  h.op("op4", P::kForward, {t[4]}, {t[5]});
  h.op("op5", P::kBackward, {t[5]}, {t[6]});
  h.op("op6", P::kBackward, {t[2], t[3], t[6]}, {t[7]});
  h.op("op7", P::kBackward, {t[1], t[7]}, {t[8]}, /*inplace=*/true);
  h.op("op8", P::kBackward, {t[0], t[8]}, {t[9]});
  h.op("op9", P::kBackward, {t[0], t[7]}, {t[10]});
  h.op("op10", P::kUpdate, {s.w0, t[9], s.m0}, {s.w0, s.m0});
  h.op("op11", P::kUpdate, {s.w2, t[10]}, {s.w2});
  h.set_loss(t[5]);
  s.g = h.graph();
  s.scratch.assign(12, 0);
  s.scratch[6] = 300;
  return s;
}

Analysis run(const SeedExample& s, bool allow_inplace = true) {
  AnalysisOptions opt;
  opt.op_scratch_bytes = s.scratch;
  opt.allow_inplace = allow_inplace;
  opt.alignment = 64;
  Result<Analysis> a = analyze(s.g, opt);
  EXPECT_TRUE(a.ok()) << a.status().message();
  return std::move(a).value();
}

TEST(SeedExample, StepInputsAreTheSeedsSets) {
  const SeedExample s = seed_example();
  const Analysis a = run(s);
  const TensorId* t = s.t;
  const std::vector<std::vector<TensorId>> expected = {
      {t[0]}, {t[1]}, {t[0]}, {t[2], t[3]}, {t[4]},  // Step1..Step5
      {t[5]}, {t[2], t[3], t[6]}, {t[1], t[7]}, {t[0], t[8]}, {t[0], t[7]},  // Step6..Step10
      {s.w0, t[9], s.m0}, {s.w2, t[10]}};  // the two optimizer steps
  EXPECT_EQ(a.step_inputs, expected);
}

TEST(SeedExample, ReadingATensorTwiceListsItOnce) {
  SeedExample s = seed_example();
  s.g.ops[3].inputs = {s.t[2], s.t[3], s.t[2]};
  const Analysis a = run(s);
  EXPECT_EQ(a.step_inputs[3], (std::vector<TensorId>{s.t[2], s.t[3]}));
  EXPECT_EQ(a.tensors[static_cast<size_t>(s.t[2])].consumers, (std::vector<OpId>{3, 6}));
}

TEST(SeedExample, ProducersConsumersAndLifetimes) {
  const SeedExample s = seed_example();
  const Analysis a = run(s);
  struct Expect {
    OpId producer;
    std::vector<OpId> consumers;
    OpId first, last;
  };
  // t0 is a data input: live from step 0 through its last reader, step 9. t5 is the loss: read
  // last at step 5 but kept through the final step 11. Everything else: producer .. last reader.
  const Expect expected[11] = {
      {kNoOp, {0, 2, 8, 9}, 0, 9}, {0, {1, 7}, 0, 7}, {1, {3, 6}, 1, 6}, {2, {3, 6}, 2, 6},
      {3, {4}, 3, 4},              {4, {5}, 4, 11},   {5, {6}, 5, 6},    {6, {7, 9}, 6, 9},
      {7, {8}, 7, 8},              {8, {10}, 8, 10},  {9, {11}, 9, 11}};
  for (int i = 0; i < 11; ++i) {
    const TensorInfo& ti = a.tensors[static_cast<size_t>(s.t[i])];
    SCOPED_TRACE(fmt::format("t{}", i));
    EXPECT_EQ(ti.producer, expected[i].producer);
    EXPECT_EQ(ti.consumers, expected[i].consumers);
    EXPECT_EQ(ti.first_use, expected[i].first);
    EXPECT_EQ(ti.last_use, expected[i].last);
  }
  // Persistent tensors: resident for the whole iteration, no producer (update ops do not count).
  const TensorInfo& w0 = a.tensors[static_cast<size_t>(s.w0)];
  EXPECT_EQ(w0.producer, kNoOp);
  EXPECT_EQ(w0.consumers, (std::vector<OpId>{10}));
  EXPECT_EQ(w0.first_use, 0);
  EXPECT_EQ(w0.last_use, 11);
  EXPECT_EQ(w0.buffer, -1);
}

TEST(SeedExample, IdleIntervalsOfSavedActivations) {
  const SeedExample s = seed_example();
  const Analysis a = run(s);
  // (last forward use, first backward use, idle steps). Forward steps are 0..4.
  //   t0: read at 0 and 2 in forward, first backward read at 8          -> (2, 8, 6)
  //   t1: read at 1, backward at 7                                      -> (1, 7, 6)
  //   t2: read at 3, backward at 6                                      -> (3, 6, 3)
  //   t3: read at 3, backward at 6                                      -> (3, 6, 3)
  //   t4: read at 4 only, never in backward: not saved                  -> (4, -, 0)
  //   t5: produced at 4 (coming alive counts as a use), read at 5       -> (4, 5, 1)
  //   t6..t10: born in backward, no forward use                          -> (-, first bwd read, 0)
  struct Expect {
    OpId last_fwd, first_bwd;
    int32_t idle;
  };
  const Expect expected[11] = {{2, 8, 6},     {1, 7, 6},     {3, 6, 3},     {3, 6, 3},
                               {4, kNoOp, 0}, {4, 5, 1},     {kNoOp, 6, 0}, {kNoOp, 7, 0},
                               {kNoOp, 8, 0}, {kNoOp, kNoOp, 0}, {kNoOp, kNoOp, 0}};
  for (int i = 0; i < 11; ++i) {
    const TensorInfo& ti = a.tensors[static_cast<size_t>(s.t[i])];
    SCOPED_TRACE(fmt::format("t{}", i));
    EXPECT_EQ(ti.last_forward_use, expected[i].last_fwd);
    EXPECT_EQ(ti.first_backward_use, expected[i].first_bwd);
    EXPECT_EQ(ti.idle_steps, expected[i].idle);
  }
}

TEST(SeedExample, BuffersAfterInPlaceMerging) {
  const SeedExample s = seed_example();
  const Analysis a = run(s);
  // op7 is in-place capable, its first input t1 dies at step 7 and t8 has t1's 512 bytes, so t8
  // takes t1's buffer, which then lives [0, 8]. Buffers in the order they come alive; the scratch
  // of op6 follows op6's output.
  struct Expect {
    uint64_t bytes;
    OpId first, last;
    std::vector<TensorId> tensors;
    OpId scratch_of;
  };
  const TensorId* t = s.t;
  const std::vector<Expect> expected = {
      {256, 0, 9, {t[0]}, kNoOp},   {512, 0, 8, {t[1], t[8]}, kNoOp}, {1024, 1, 6, {t[2]}, kNoOp},
      {128, 2, 6, {t[3]}, kNoOp},   {1152, 3, 4, {t[4]}, kNoOp},      {4, 4, 11, {t[5]}, kNoOp},
      {1152, 5, 6, {t[6]}, kNoOp},  {1024, 6, 9, {t[7]}, kNoOp},      {300, 6, 6, {}, 6},
      {192, 8, 10, {t[9]}, kNoOp},  {64, 9, 11, {t[10]}, kNoOp}};
  ASSERT_EQ(a.buffers.size(), expected.size());
  for (size_t b = 0; b < expected.size(); ++b) {
    SCOPED_TRACE(fmt::format("buffer {}", b));
    EXPECT_EQ(a.buffers[b].id, static_cast<int32_t>(b));
    EXPECT_EQ(a.buffers[b].bytes, expected[b].bytes);
    EXPECT_EQ(a.buffers[b].first_step, expected[b].first);
    EXPECT_EQ(a.buffers[b].last_step, expected[b].last);
    EXPECT_EQ(a.buffers[b].tensors, expected[b].tensors);
    EXPECT_EQ(a.buffers[b].scratch_of, expected[b].scratch_of);
  }
  EXPECT_EQ(a.tensors[static_cast<size_t>(t[1])].buffer, 1);
  EXPECT_EQ(a.tensors[static_cast<size_t>(t[8])].buffer, 1);
  EXPECT_EQ(a.tensors[static_cast<size_t>(t[10])].buffer, 10);
}

TEST(SeedExample, LiveBytesPerStep) {
  const SeedExample s = seed_example();
  const Analysis a = run(s);
  // Free at last use, tensor by tensor (lifetimes from ProducersConsumersAndLifetimes):
  //   s0  t0 256 + t1 512                                               =  768
  //   s1  + t2 1024                                                     = 1792
  //   s2  + t3 128                                                      = 1920
  //   s3  + t4 1152                                                     = 3072
  //   s4  + t5 4                                                        = 3076
  //   s5  - t4 1152 + t6 1152                                           = 3076
  //   s6  t0 256 + t1 512 + t2 1024 + t3 128 + t5 4 + t6 1152 + t7 1024 + scratch 300 = 4400
  //   s7  t0 256 + t1 512 + t5 4 + t7 1024 + t8 512                     = 2308
  //   s8  t0 256 + t5 4 + t7 1024 + t8 512 + t9 192                     = 1988
  //   s9  t0 256 + t5 4 + t7 1024 + t9 192 + t10 64                     = 1540
  //   s10 t5 4 + t9 192 + t10 64                                        =  260
  //   s11 t5 4 + t10 64                                                 =   68
  EXPECT_EQ(a.live_bytes_free_at_last_use,
            (std::vector<uint64_t>{768, 1792, 1920, 3072, 3076, 3076, 4400, 2308, 1988, 1540, 260, 68}));
  // With in-place sharing only step 7 changes: t1 and t8 share 512 bytes, 2308 - 512 = 1796.
  EXPECT_EQ(a.live_bytes_shared,
            (std::vector<uint64_t>{768, 1792, 1920, 3072, 3076, 3076, 4400, 1796, 1988, 1540, 260, 68}));
  // Without in-place, the shared series equals free-at-last-use.
  const Analysis no_inplace = run(s, /*allow_inplace=*/false);
  EXPECT_EQ(no_inplace.live_bytes_shared, a.live_bytes_free_at_last_use);
  EXPECT_EQ(no_inplace.buffers.size(), a.buffers.size() + 1);
}

TEST(SeedExample, Peaks) {
  const SeedExample s = seed_example();
  const Analysis a = run(s);
  // Persistent: w0 192 + m0 192 + w2 64 = 448; weights alone 256.
  EXPECT_EQ(a.persistent_bytes, 448u);
  EXPECT_EQ(a.weight_bytes, 256u);
  // Activations: t1..t5 = 512 + 1024 + 128 + 1152 + 4.
  EXPECT_EQ(a.activation_bytes, 2820u);
  // Keep-all: every transient tensor allocated by step 9 (6020 bytes) stays; scratch (300 at
  // step 6, on top of 5252 allocated) is lower.
  EXPECT_EQ(a.peak_bytes_keep_all, 448u + 6020u);
  EXPECT_EQ(a.peak_bytes_free_at_last_use, 448u + 4400u);
  EXPECT_EQ(a.lower_bound_bytes, 448u + 4400u);
  // The arena, with sizes rounded to 64: step 6 holds t0 256, t1 512, t2 1024, t3 128, t5 64,
  // t6 1152, t7 1024, scratch 320 = 4480, a bound no aligned plan beats; and 4480 is reachable:
  // t0, t1, t2, t3, t5 stacked at [0, 1984), then t6 | t7 | scratch on top, t4 (steps 3..4) where
  // t6 goes later, t9 and t10 in t2's old bytes.
  EXPECT_EQ(aligned_live_lower_bound(a.buffers, 64), 4480u);
  EXPECT_EQ(a.plan.arena_bytes, 4480u);
  // Persistent region with every tensor at a 64-aligned offset: 192 + 192 + 64 = 448 (already aligned).
  EXPECT_EQ(a.persistent_region_bytes, 448u);
  EXPECT_EQ(a.peak_bytes_shared, 448u + 4480u);
  EXPECT_TRUE(check_memory_plan(s.g, a.buffers, a.plan).ok());
  for (uint64_t off : a.plan.offsets) EXPECT_EQ(off % 64, 0u);
}

TEST(SeedExample, AnalysisTimeIsRecorded) {
  const Analysis a = run(seed_example());
  EXPECT_GT(a.analysis_seconds, 0.0);
}

}  // namespace
}  // namespace ferry
