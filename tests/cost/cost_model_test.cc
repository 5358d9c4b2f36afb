#include "cost/cost_model.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cost/test_profile.h"
#include "graph/builder.h"

namespace ferry {
namespace {

using cost_test::round_profile;

// A graph holding one conv: x [8, 64, 56, 56] * w [128, 64, 3, 3], stride 1, pad 1 -> y [8, 128, 56, 56].
struct OneConv {
  Graph g;
  OneConv(DType dtype = DType::kF32) {
    auto add = [&](const std::string& name, std::vector<int64_t> shape, TensorRole role) {
      Tensor t;
      t.id = static_cast<TensorId>(g.tensors.size());
      t.name = name;
      t.shape = std::move(shape);
      t.dtype = dtype;
      t.role = role;
      t.bytes = static_cast<uint64_t>(t.numel()) * dtype_size(dtype);
      g.tensors.push_back(t);
      return t.id;
    };
    const TensorId x = add("x", {8, 64, 56, 56}, TensorRole::kInput);
    const TensorId w = add("w", {128, 64, 3, 3}, TensorRole::kWeight);
    const TensorId y = add("y", {8, 128, 56, 56}, TensorRole::kActivation);
    Op op;
    op.id = 0;
    op.name = "conv";
    op.type = OpType::kConv2d;
    op.inputs = {x, w};
    op.outputs = {y};
    op.attrs.kernel_h = op.attrs.kernel_w = 3;
    op.attrs.pad_h = op.attrs.pad_w = 1;
    compute_op_costs(g, op);
    g.ops.push_back(op);
  }
  const Op& op() const { return g.ops[0]; }
};

TEST(CostModelTest, ConvRooflineMatchesAHandComputation) {
  OneConv c;
  // By hand: each of the 8*128*56*56 outputs takes 64*3*3 multiply-adds, 2 FLOPs each.
  const double flops = 2.0 * (8.0 * 128 * 56 * 56) * (64.0 * 3 * 3);
  const double bytes = 4.0 * (8.0 * 64 * 56 * 56 + 128.0 * 64 * 3 * 3 + 8.0 * 128 * 56 * 56);
  EXPECT_EQ(static_cast<double>(c.op().flops), flops);
  EXPECT_EQ(static_cast<double>(c.op().bytes_read + c.op().bytes_written), bytes);
  // round_profile: fp32 1e12 FLOP/s at conv efficiency 0.6; 1e11 B/s at 0.7; launch 5 us.
  const double compute_us = flops / (1e12 * 0.6) * 1e6;  // 6165.6 us
  const double memory_us = bytes / (1e11 * 0.7) * 1e6;   // 279.5 us
  const CostModel cost(round_profile());
  const OpCost oc = cost.op_cost(c.g, c.op());
  EXPECT_FALSE(oc.measured);
  EXPECT_EQ(oc.op_class, OpClass::kConv);
  EXPECT_EQ(oc.unit, ComputeDType::kFp32);
  EXPECT_DOUBLE_EQ(oc.compute_us, compute_us);
  EXPECT_DOUBLE_EQ(oc.memory_us, memory_us);
  EXPECT_TRUE(oc.compute_bound());
  EXPECT_DOUBLE_EQ(oc.total_us, 5 + compute_us);

  // TF32 tensor cores (2e12) when allowed.
  const CostModel tf32(round_profile(), CostOptions{.allow_tf32 = true});
  const OpCost ot = tf32.op_cost(c.g, c.op());
  EXPECT_EQ(ot.unit, ComputeDType::kTf32);
  EXPECT_DOUBLE_EQ(ot.total_us, 5 + flops / (2e12 * 0.6) * 1e6);
}

TEST(CostModelTest, HalfPrecisionUsesTheTensorCoreRateOrFallsBackToFp32) {
  const CostModel cost(round_profile());
  OneConv f16(DType::kF16);
  const OpCost o16 = cost.op_cost(f16.g, f16.op());
  EXPECT_EQ(o16.unit, ComputeDType::kFp16);
  EXPECT_DOUBLE_EQ(o16.compute_us, static_cast<double>(f16.op().flops) / (4e12 * 0.6) * 1e6);
  // round_profile has no bf16 unit (like a V100): the fp32 rate applies.
  OneConv bf16(DType::kBF16);
  const OpCost ob = cost.op_cost(bf16.g, bf16.op());
  EXPECT_EQ(ob.unit, ComputeDType::kFp32);
  EXPECT_DOUBLE_EQ(ob.compute_us, static_cast<double>(bf16.op().flops) / (1e12 * 0.6) * 1e6);
}

TEST(CostModelTest, Tf32GraphsRunMatrixOpsOnTf32) {
  // A graph whose precision is tf32 needs no CostOptions: the graph says how it computes.
  OneConv c;
  c.g.info.precision = Precision::kTf32;
  const OpCost o = CostModel(round_profile()).op_cost(c.g, c.op());
  EXPECT_EQ(o.unit, ComputeDType::kTf32);
  EXPECT_DOUBLE_EQ(o.compute_us, static_cast<double>(c.op().flops) / (2e12 * 0.6) * 1e6);
}

// NCHW graphs: every 16-bit convolution pays the transposes of its operands in and its result
// out, each tensor read and written once at the data-movement efficiency, plus two launches;
// fp32 and tf32 convolutions and every other op run NCHW natively.
TEST(CostModelTest, NchwHalfPrecisionConvolutionsPayTheirTransposes) {
  const CostModel cost(round_profile());
  OneConv f16(DType::kF16);
  const OpCost nhwc = cost.op_cost(f16.g, f16.op());
  EXPECT_EQ(nhwc.layout_us, 0);
  f16.g.info.layout = Layout::kNchw;
  const OpCost nchw = cost.op_cost(f16.g, f16.op());
  const double bytes = static_cast<double>(f16.op().bytes_read + f16.op().bytes_written);
  // round_profile: 1e11 B/s, data_movement memory efficiency 0.8, launch 5 us.
  EXPECT_DOUBLE_EQ(nchw.layout_us, 2 * bytes / (1e11 * 0.8) * 1e6 + 2 * 5);
  EXPECT_DOUBLE_EQ(nchw.total_us, nhwc.total_us + nchw.layout_us);
  OneConv f32;
  f32.g.info.layout = Layout::kNchw;
  EXPECT_EQ(cost.op_cost(f32.g, f32.op()).layout_us, 0);
  f32.g.info.precision = Precision::kTf32;
  EXPECT_EQ(cost.op_cost(f32.g, f32.op()).layout_us, 0);
  EXPECT_EQ(layout_from_string(to_string(Layout::kNchw)), Layout::kNchw);
  EXPECT_EQ(layout_from_string("NCHW"), std::nullopt);
}

TEST(CostModelTest, PerUnitEfficienciesAndTheWinogradFraction) {
  HardwareProfile p = round_profile();
  OpEfficiency& conv = p.efficiency[static_cast<size_t>(OpClass::kConv)];
  conv.compute = 0.6;  // fp32
  conv.compute_by_unit[static_cast<size_t>(ComputeDType::kTf32)] = 0.3;
  conv.compute_by_unit[static_cast<size_t>(ComputeDType::kFp16)] = 0.25;
  p.conv3x3_flop_fraction[static_cast<size_t>(ComputeDType::kFp32)] = 4.0 / 9.0;  // Winograd F(2x2,3x3)
  ASSERT_TRUE(validate_profile(p).ok()) << validate_profile(p).message();
  const CostModel cost(p);
  OneConv c32;  // 3x3, stride 1: Winograd in fp32
  const double flops = static_cast<double>(c32.op().flops);
  const OpCost o32 = cost.op_cost(c32.g, c32.op());
  EXPECT_DOUBLE_EQ(o32.flop_fraction, 4.0 / 9.0);
  EXPECT_DOUBLE_EQ(o32.compute_us, 4.0 / 9.0 * flops / (1e12 * 0.6) * 1e6);
  c32.g.info.precision = Precision::kTf32;  // tf32 has no Winograd entry: direct FLOPs at 0.3
  const OpCost otf = cost.op_cost(c32.g, c32.op());
  EXPECT_DOUBLE_EQ(otf.flop_fraction, 1.0);
  EXPECT_DOUBLE_EQ(otf.compute_us, flops / (2e12 * 0.3) * 1e6);
  OneConv c16(DType::kF16);
  EXPECT_DOUBLE_EQ(cost.op_cost(c16.g, c16.op()).compute_us, flops / (4e12 * 0.25) * 1e6);
  // A strided 3x3 convolution is not Winograd's.
  OneConv strided;
  strided.g.ops[0].attrs.stride_h = strided.g.ops[0].attrs.stride_w = 2;
  EXPECT_DOUBLE_EQ(cost.op_cost(strided.g, strided.op()).flop_fraction, 1.0);
}

TEST(CostModelTest, ElementwiseOpsAreBandwidthBound) {
  Graph g;
  Tensor t;
  t.id = 0;
  t.name = "x";
  t.shape = {1000000};
  t.bytes = 4000000;
  t.role = TensorRole::kInput;
  g.tensors.push_back(t);
  t.id = 1;
  t.name = "y";
  t.role = TensorRole::kActivation;
  g.tensors.push_back(t);
  Op op;
  op.id = 0;
  op.name = "relu";
  op.type = OpType::kRelu;
  op.inputs = {0};
  op.outputs = {1};
  compute_op_costs(g, op);
  g.ops.push_back(op);
  const OpCost oc = CostModel(round_profile()).op_cost(g, g.ops[0]);
  // 8 MB over 1e11 B/s at 0.8 = 100 us; 1e6 FLOPs at 1e12 * 0.5 = 2 us; plus 5 us launch.
  EXPECT_EQ(oc.op_class, OpClass::kElementwise);
  EXPECT_DOUBLE_EQ(oc.memory_us, 100);
  EXPECT_DOUBLE_EQ(oc.compute_us, 2);
  EXPECT_FALSE(oc.compute_bound());
  EXPECT_DOUBLE_EQ(oc.total_us, 105);
}

TEST(CostModelTest, MeasuredTimeWinsUnlessDisabled) {
  OneConv c;
  c.g.ops[0].time_us = 42.5;
  const OpCost measured = CostModel(round_profile()).op_cost(c.g, c.op());
  EXPECT_TRUE(measured.measured);
  EXPECT_DOUBLE_EQ(measured.total_us, 42.5);
  const CostModel roofline(round_profile(), CostOptions{.use_measured_times = false});
  EXPECT_FALSE(roofline.op_cost(c.g, c.op()).measured);
  EXPECT_GT(roofline.op_time_us(c.g, c.op()), 6000);
  EXPECT_EQ(roofline.op_times_us(c.g), std::vector<double>{roofline.op_time_us(c.g, c.op())});
}

TEST(CostModelTest, TransferTimeIsLatencyPlusBytesOverEffectiveBandwidth) {
  const CostModel cost(round_profile());
  // Host link: nominal 2e9 B/s at efficiency 0.5 = 1000 B/us, 10 us latency.
  EXPECT_DOUBLE_EQ(cost.transfer_us(Direction::kSwapIn, Tier::kHost, 1000000), 10 + 1000);
  EXPECT_DOUBLE_EQ(cost.transfer_us(Direction::kSwapOut, Tier::kHost, 0), 10);
  // Through the host to the SSD: d2h, then write at 250 B/us + 50 us.
  EXPECT_DOUBLE_EQ(cost.transfer_us(Direction::kSwapOut, Tier::kSsd, 1000000), (10 + 1000) + (50 + 4000));
  // Back: read at 500 B/us + 100 us, then h2d.
  EXPECT_DOUBLE_EQ(cost.transfer_us(Direction::kSwapIn, Tier::kSsd, 1000000), (100 + 2000) + (10 + 1000));
  EXPECT_DOUBLE_EQ(cost.link(Link::kSsdRead).bytes_per_us, 500);
  EXPECT_TRUE(cost.copy_directions_concurrent());
}

// Codec figures: a coded SSD leg is the pipeline of the codec and the disk moving ratio x bytes
// (Note [Pipelined codec time]); the host leg moves raw bytes; best_ssd_codec picks a codec only
// where it beats raw by more than 5%; without a figure a codec predicts as raw.
TEST(CostModelTest, CodedSsdLegsArePipelinedThroughTheCodec) {
  // Write 250 B/us + 50 us; read 500 B/us + 100 us (round_profile). Zero-mask on ReLU outputs:
  // half the bytes, encoding at 1000 B/us and decoding at 2000 B/us.
  const std::vector<CodecFigure> figures = {
      {"relu/activation", CodecId::kZeroMask, CodecEstimate{0.5, 1e9, 2e9, 1}},
      {"conv2d/activation", CodecId::kZeroMask, CodecEstimate{1.0, 1e9, 2e9, 1}},
  };
  const CostModel cost(round_profile(), CostOptions{.codecs = figures});
  const uint64_t bytes = 4 << 20;  // 4 chunks of 1 MiB
  const double b = static_cast<double>(bytes);
  // Out: C = b / 1000, W = 0.5 b / 250 = b / 500: max(C, W) + min(C, W) / 4.
  EXPECT_NEAR(cost.ssd_data_us(Direction::kSwapOut, bytes, CodecId::kZeroMask, "relu/activation"),
              b / 500 + b / 1000 / 4, 1e-6 * b);
  // In: C = b / 2000, W = 0.5 b / 500 = b / 1000.
  EXPECT_NEAR(cost.ssd_data_us(Direction::kSwapIn, bytes, CodecId::kZeroMask, "relu/activation"),
              b / 1000 + b / 2000 / 4, 1e-6 * b);
  EXPECT_NEAR(cost.transfer_us(Direction::kSwapOut, Tier::kSsd, bytes, CodecId::kZeroMask, "relu/activation"),
              (10 + b / 1000) + 50 + b / 500 + b / 1000 / 4, 1e-6 * b);
  // Raw, and a codec without a figure for the class, are the plain link.
  EXPECT_DOUBLE_EQ(cost.ssd_data_us(Direction::kSwapOut, bytes, CodecId::kNone, "relu/activation"), b / 250);
  EXPECT_DOUBLE_EQ(cost.ssd_data_us(Direction::kSwapOut, bytes, CodecId::kLz4, "relu/activation"), b / 250);
  EXPECT_DOUBLE_EQ(cost.transfer_us(Direction::kSwapOut, Tier::kSsd, bytes),
                   cost.transfer_us(Direction::kSwapOut, Tier::kSsd, bytes, CodecId::kNone, "relu/activation"));
  EXPECT_EQ(cost.best_ssd_codec(bytes, "relu/activation"), CodecId::kZeroMask);
  EXPECT_EQ(cost.best_ssd_codec(bytes, "conv2d/activation"), CodecId::kNone) << "nothing to gain on dense data";
  EXPECT_EQ(cost.best_ssd_codec(bytes, "add/activation"), CodecId::kNone) << "no figure";
  EXPECT_DOUBLE_EQ(cost.min_codec_ratio(), 0.5);
  // A disk faster than the codec: coding would cost more than it saves.
  HardwareProfile fast = round_profile();
  fast.storage.write_bytes_per_s = fast.storage.read_bytes_per_s = 1e11;
  EXPECT_EQ(CostModel(fast, CostOptions{.codecs = figures}).best_ssd_codec(bytes, "relu/activation"), CodecId::kNone);
  // Without figures nothing is coded.
  EXPECT_EQ(CostModel(round_profile()).best_ssd_codec(bytes, "relu/activation"), CodecId::kNone);
  EXPECT_DOUBLE_EQ(CostModel(round_profile()).min_codec_ratio(), 1.0);
}

// storage.device_direct: a raw SSD copy is the SSD leg alone (no host leg, no host interference);
// a coded one still crosses host memory; a codec must then beat raw over the whole round trip.
TEST(CostModelTest, DeviceDirectStorageHasNoHostLegForRawCopies) {
  HardwareProfile p = round_profile();
  p.host_link.device_to_host.compute_interference = 2;
  p.host_link.host_to_device.compute_interference = 2;
  p.storage.write_compute_interference = 0.5;
  p.storage.device_direct = true;
  const std::vector<CodecFigure> figures = {{"relu/activation", CodecId::kZeroMask, CodecEstimate{0.5, 1e9, 2e9, 1}}};
  const CostModel cost(p, CostOptions{.codecs = figures});
  EXPECT_TRUE(cost.ssd_direct());
  EXPECT_FALSE(CostModel(round_profile()).ssd_direct());
  EXPECT_DOUBLE_EQ(cost.transfer_us(Direction::kSwapOut, Tier::kSsd, 1000000), 50 + 4000);
  EXPECT_DOUBLE_EQ(cost.transfer_us(Direction::kSwapIn, Tier::kSsd, 1000000), 100 + 2000);
  EXPECT_DOUBLE_EQ(cost.transfer_us(Direction::kSwapOut, Tier::kHost, 1000000), 10 + 1000);  // the host tier as ever
  // Interference: the disk's alone, t f / (1 + f) = 4000 x 0.5 / 1.5; the host tier's copy keeps 1010 x 2 / 3.
  EXPECT_NEAR(cost.interference_us(Direction::kSwapOut, Tier::kSsd, 1000000), 4000 * 0.5 / 1.5, 1e-9);
  EXPECT_NEAR(cost.interference_us(Direction::kSwapOut, Tier::kHost, 1000000), 1010 * 2.0 / 3, 1e-9);
  // A coded copy keeps its host leg and its interference.
  const uint64_t bytes = 4 << 20;
  const double b = static_cast<double>(bytes);
  EXPECT_NEAR(cost.transfer_us(Direction::kSwapOut, Tier::kSsd, bytes, CodecId::kZeroMask, "relu/activation"),
              (10 + b / 1000) + 50 + b / 500 + b / 1000 / 4, 1e-6 * b);
  EXPECT_GT(cost.interference_us(Direction::kSwapOut, Tier::kSsd, bytes, CodecId::kZeroMask, "relu/activation"),
            cost.interference_us(Direction::kSwapOut, Tier::kSsd, bytes));
  // Through host memory zero-mask wins (its disk legs are shorter); in place its host legs and the
  // memcpy's interference cost more than it saves: a round trip of 4 MiB is about 31.4 ms coded
  // against 30.9 ms raw.
  EXPECT_EQ(CostModel(round_profile(), CostOptions{.codecs = figures}).best_ssd_codec(bytes, "relu/activation"),
            CodecId::kZeroMask);
  EXPECT_EQ(cost.best_ssd_codec(bytes, "relu/activation"), CodecId::kNone);
}

TEST(CostModelTest, EveryOpTypeHasAClassAndClassesHaveNames) {
  EXPECT_EQ(op_class_of(OpType::kConvBwdWeights), OpClass::kConv);
  EXPECT_EQ(op_class_of(OpType::kLinearBwdData), OpClass::kMatMul);
  EXPECT_EQ(op_class_of(OpType::kMatMul), OpClass::kMatMul);
  EXPECT_EQ(op_class_of(OpType::kGradAccumulate), OpClass::kElementwise);
  EXPECT_EQ(op_class_of(OpType::kLayerNormBwd), OpClass::kNorm);
  EXPECT_EQ(op_class_of(OpType::kGlobalAvgPoolBwd), OpClass::kPooling);
  EXPECT_EQ(op_class_of(OpType::kCrossEntropyBwd), OpClass::kSoftmax);
  EXPECT_EQ(op_class_of(OpType::kEmbeddingBwd), OpClass::kEmbedding);
  EXPECT_EQ(op_class_of(OpType::kMergeHeads), OpClass::kDataMovement);
  EXPECT_EQ(op_class_of(OpType::kAdamUpdate), OpClass::kOptimizer);
  EXPECT_EQ(op_class_of(OpType::kOpaque), OpClass::kOther);
  for (size_t i = 0; i < kNumOpClasses; ++i) {
    const auto c = static_cast<OpClass>(i);
    EXPECT_EQ(op_class_from_string(to_string(c)), c);
  }
  // Only opaque ops land in "other": every known type has a real class.
  for (int i = 0; i <= static_cast<int>(OpType::kOpaque); ++i) {
    const auto t = static_cast<OpType>(i);
    if (t != OpType::kOpaque) {
      EXPECT_NE(op_class_of(t), OpClass::kOther) << to_string(t);
    }
  }
}

}  // namespace
}  // namespace ferry
