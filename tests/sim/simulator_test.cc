#include "sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "analysis/analysis.h"
#include "cost/test_profile.h"
#include "graph/zoo/zoo.h"
#include "schedule/hand_schedule.h"
#include "schedule/placement.h"
#include "memory/offset_allocator.h"

namespace ferry {
namespace {

using cost_test::round_profile;
using plan_test::contains;
using plan_test::HandGraph;
using plan_test::recompute;
using plan_test::release;
using plan_test::swap_in;
using plan_test::swap_out;

// Every copy in these tests moves 100000 bytes: 10 + 100000 / 1000 = 110 us on the host link.
constexpr uint64_t kBig = 100000;
constexpr double kCopyUs = 110;

CostModel round_cost(bool concurrent = true) {
  HardwareProfile p = round_profile();
  p.host_link.concurrent_directions = concurrent;
  return CostModel(p);
}

SimResult must_simulate(const Graph& g, const Schedule& s, const CostModel& cost, const SimOptions& o = {}) {
  Result<SimResult> r = simulate(g, s, cost, o);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? std::move(r).value() : SimResult{};
}

// The events of one stream and kind, in order.
std::vector<SimEvent> events_of(const SimResult& r, SimStream stream, EventKind kind) {
  std::vector<SimEvent> out;
  for (const SimEvent& e : r.events)
    if (e.stream == stream && e.kind == kind) out.push_back(e);
  return out;
}

// Checks what holds for every simulation: the compute stream is never idle except in stalls,
// single-request streams never overlap, every op runs exactly once, memory samples agree with
// the peaks.
void check_invariants(const Graph& g, const SimResult& r) {
  EXPECT_NEAR(r.compute_end_us, r.compute_busy_us + r.stall_us, 1e-6 * std::max(1.0, r.compute_end_us));
  EXPECT_GE(r.iteration_us, r.compute_end_us);
  EXPECT_LE(r.peak_in_use_bytes, r.peak_device_bytes);
  std::vector<int> runs(g.ops.size(), 0);
  for (SimStream s : {SimStream::kCompute, SimStream::kDeviceToHost, SimStream::kHostToDevice}) {
    double last_end = 0;
    for (const SimEvent& e : r.events) {
      if (e.stream != s) continue;
      EXPECT_LE(e.start_us, e.end_us);
      EXPECT_GE(e.start_us, last_end - 1e-9) << to_string(s) << " events overlap at " << e.name;
      last_end = e.end_us;
      if (e.kind == EventKind::kOp) ++runs[static_cast<size_t>(e.op)];
    }
  }
  for (size_t i = 0; i < runs.size(); ++i) EXPECT_EQ(runs[i], 1) << g.ops[i].name;
  uint64_t max_in_use = 0;
  for (const MemorySample& m : r.memory) max_in_use = std::max(max_in_use, m.in_use_bytes);
  EXPECT_EQ(max_in_use, r.peak_in_use_bytes);
}

TEST(SimulatorTest, SerialComputeTakesTheSumOfOpTimes) {
  HandGraph h("serial");
  const TensorId x = h.input("x", 1000);
  const TensorId a = h.tensor("a", 1000);
  const TensorId b = h.tensor("b", 1000);
  const TensorId loss = h.tensor("loss", 4);
  h.op("f", {x}, {a}, 100);
  h.op("g", {a}, {b}, 200);
  h.op("l", {b}, {loss}, 300);
  h.set_loss(loss);
  const SimResult r = must_simulate(h.graph(), Schedule::keep_all(3), round_cost());
  EXPECT_TRUE(r.feasible);
  EXPECT_DOUBLE_EQ(r.iteration_us, 600);
  EXPECT_DOUBLE_EQ(r.compute_busy_us, 600);
  EXPECT_DOUBLE_EQ(r.stall_us, 0);
  const std::vector<SimEvent> ops = events_of(r, SimStream::kCompute, EventKind::kOp);
  ASSERT_EQ(ops.size(), 3u);
  EXPECT_EQ(ops[1].name, "g");
  EXPECT_DOUBLE_EQ(ops[1].start_us, 100);
  EXPECT_DOUBLE_EQ(ops[1].end_us, 300);
  EXPECT_EQ(r.bytes_d2h + r.bytes_h2d, 0u);
  check_invariants(h.graph(), r);
}

// x -> f (100 us) -> a (100000 B) -> g (1000 us) -> b -> l (200 us) -> loss; k (100 us, backward)
// reads b and the saved a.
struct Saved {
  HandGraph h{"saved"};
  TensorId x, a, b, loss, da;
  Saved() {
    x = h.input("x", 1000);
    a = h.tensor("a", kBig);
    b = h.tensor("b", 1000);
    loss = h.tensor("loss", 4);
    da = h.tensor("da", kBig, TensorRole::kGradient);
    h.op("f", {x}, {a}, 100);
    h.op("g", {a}, {b}, 1000);
    h.op("l", {b}, {loss}, 200);
    h.op("k", {b, a}, {da}, 100, Phase::kBackward);
    h.set_loss(loss);
  }
  const Graph& g() const { return h.graph(); }
  Schedule plan() const { return Schedule::keep_all(4); }
  // a swapped out to the SSD tier after step 0, released after step 1, swapped in before step 3.
  Schedule ssd_round_trip() const {
    Schedule p = plan();
    p.after[0] = {swap_out(a, Tier::kSsd)};
    p.after[1] = {release(a)};
    p.before[3] = {swap_in(a, Tier::kSsd)};
    return p;
  }
};

TEST(SimulatorTest, TransferThatFitsUnderComputeIsHidden) {
  Saved s;
  Schedule p = s.plan();
  p.after[0] = {swap_out(s.a)};   // d2h [100, 210]
  p.after[1] = {release(s.a)};    // at 1100: the swap-out is long done
  p.before[2] = {swap_in(s.a)};   // h2d [1100, 1210], under l [1100, 1300]
  const SimResult r = must_simulate(s.g(), p, round_cost());
  EXPECT_DOUBLE_EQ(r.stall_us, 0);
  EXPECT_DOUBLE_EQ(r.iteration_us, 1400);
  EXPECT_EQ(r.bytes_d2h, kBig);
  EXPECT_EQ(r.bytes_h2d, kBig);
  const std::vector<SimEvent> out = events_of(r, SimStream::kDeviceToHost, EventKind::kSwapOut);
  const std::vector<SimEvent> in = events_of(r, SimStream::kHostToDevice, EventKind::kSwapIn);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(in.size(), 1u);
  EXPECT_DOUBLE_EQ(out[0].start_us, 100);
  EXPECT_DOUBLE_EQ(out[0].end_us, 100 + kCopyUs);
  EXPECT_DOUBLE_EQ(in[0].start_us, 1100);
  EXPECT_DOUBLE_EQ(in[0].end_us, 1100 + kCopyUs);
  EXPECT_EQ(r.peak_host_bytes, kBig);
  check_invariants(s.g(), r);
}

TEST(SimulatorTest, LateSwapInStallsTheOpThatReadsIt) {
  Saved s;
  Schedule p = s.plan();
  p.after[0] = {swap_out(s.a)};
  p.after[1] = {release(s.a)};
  p.before[3] = {swap_in(s.a)};  // issued at 1300, lands at 1410: k waits 110 us
  const SimResult r = must_simulate(s.g(), p, round_cost());
  EXPECT_DOUBLE_EQ(r.stall_us, kCopyUs);
  EXPECT_DOUBLE_EQ(r.iteration_us, 1400 + kCopyUs);
  ASSERT_EQ(r.num_stalls, 1u);
  ASSERT_EQ(r.top_stalls.size(), 1u);
  const Stall& st = r.top_stalls[0];
  EXPECT_EQ(st.reason, StallReason::kWaitSwapIn);
  EXPECT_EQ(st.op_name, "k");
  EXPECT_EQ(st.tensor_name, "a");
  EXPECT_EQ(st.step, 3);
  EXPECT_DOUBLE_EQ(st.start_us, 1300);
  EXPECT_DOUBLE_EQ(st.wait_us, kCopyUs);
  check_invariants(s.g(), r);
}

TEST(SimulatorTest, ReleaseWaitsForTheSwapOutInFlight) {
  Saved s;
  Schedule p = s.plan();
  p.after[1] = {swap_out(s.a), release(s.a)};  // at 1100 the copy runs until 1210
  p.before[2] = {swap_in(s.a)};                // at 1210: lands at 1320, under l [1210, 1410]
  const SimResult r = must_simulate(s.g(), p, round_cost());
  EXPECT_DOUBLE_EQ(r.stall_us, kCopyUs);
  EXPECT_DOUBLE_EQ(r.iteration_us, 1400 + kCopyUs);
  ASSERT_EQ(r.top_stalls.size(), 1u);
  EXPECT_EQ(r.top_stalls[0].reason, StallReason::kWaitSwapOut);
  EXPECT_EQ(r.top_stalls[0].op, kNoOp);
  EXPECT_EQ(r.top_stalls[0].tensor_name, "a");
  const std::vector<SimEvent> ops = events_of(r, SimStream::kCompute, EventKind::kOp);
  EXPECT_DOUBLE_EQ(ops[2].start_us, 1100 + kCopyUs);
  check_invariants(s.g(), r);
}

// Swap-out of b and swap-in of a issued together at 1100; the op reading a starts at 1120.
struct TwoWay {
  HandGraph h{"two-way"};
  TensorId x, a, b, c, loss, d;
  TwoWay() {
    x = h.input("x", 1000);
    a = h.tensor("a", kBig);
    b = h.tensor("b", kBig);
    c = h.tensor("c", 1000);
    loss = h.tensor("loss", 4);
    d = h.tensor("d", 1000, TensorRole::kGradient);
    h.op("f", {x}, {a}, 100);
    h.op("g", {a}, {b}, 1000);
    h.op("h", {b}, {c}, 10);
    h.op("l", {c}, {loss}, 10);
    h.op("k", {a, b, c}, {d}, 100, Phase::kBackward);
    h.set_loss(loss);
  }
  Schedule plan() const {
    Schedule p = Schedule::keep_all(5);
    p.after[0] = {swap_out(a)};
    p.after[1] = {release(a), swap_out(b), swap_in(a)};
    return p;
  }
};

TEST(SimulatorTest, BothCopyDirectionsRunConcurrently) {
  TwoWay t;
  const SimResult r = must_simulate(t.h.graph(), t.plan(), round_cost(/*concurrent=*/true));
  const std::vector<SimEvent> out = events_of(r, SimStream::kDeviceToHost, EventKind::kSwapOut);
  const std::vector<SimEvent> in = events_of(r, SimStream::kHostToDevice, EventKind::kSwapIn);
  ASSERT_EQ(out.size(), 2u);
  ASSERT_EQ(in.size(), 1u);
  EXPECT_DOUBLE_EQ(out[1].start_us, 1100);
  EXPECT_DOUBLE_EQ(in[0].start_us, 1100);  // alongside the swap-out of b
  EXPECT_DOUBLE_EQ(r.stall_us, 1100 + kCopyUs - 1120);
  EXPECT_DOUBLE_EQ(r.iteration_us, 1100 + kCopyUs + 100);
  check_invariants(t.h.graph(), r);
}

// A link's compute interference f: an op runs (1 + f) times slower while that link's copies move
// data beside it (profile.h). The copies keep their own times.
CostModel interfering_cost(double d2h, double h2d, double ssd_write = 0, double ssd_read = 0) {
  HardwareProfile p = round_profile();
  p.host_link.device_to_host.compute_interference = d2h;
  p.host_link.host_to_device.compute_interference = h2d;
  p.storage.write_compute_interference = ssd_write;
  p.storage.read_compute_interference = ssd_read;
  return CostModel(p);
}

TEST(SimulatorTest, CopiesBesideAnOpStretchItByTheirLinksInterference) {
  Saved s;
  Schedule p = s.plan();
  p.after[0] = {swap_out(s.a)};  // d2h [100, 210] beside g
  p.after[1] = {release(s.a)};
  p.before[2] = {swap_in(s.a)};  // h2d beside l
  const SimResult r = must_simulate(s.g(), p, interfering_cost(/*d2h=*/1.0, /*h2d=*/0.5));
  // g: 110 us at half speed (55 us of work), the other 945 at full speed: [100, 1155].
  // h2d [1155, 1265]; l: 110 us at 1/1.5 (73.33 us of work), 126.67 after: ends at 1391.67.
  const std::vector<SimEvent> ops = events_of(r, SimStream::kCompute, EventKind::kOp);
  ASSERT_EQ(ops.size(), 4u);
  EXPECT_DOUBLE_EQ(ops[1].end_us, 1155);
  EXPECT_NEAR(ops[2].end_us, 1265 + (200 - 110 / 1.5), 1e-9);
  EXPECT_NEAR(r.iteration_us, ops[2].end_us + 100, 1e-9);
  EXPECT_NEAR(r.interference_us, 55 + (110 - 110 / 1.5), 1e-9);
  ASSERT_EQ(r.op_stretch.size(), 4u);
  EXPECT_DOUBLE_EQ(r.op_stretch[0], 1);
  EXPECT_DOUBLE_EQ(r.op_stretch[1], 1055.0 / 1000);
  EXPECT_NEAR(r.op_stretch[2], (ops[2].end_us - 1155) / 200, 1e-12);
  EXPECT_DOUBLE_EQ(r.op_stretch[3], 1);
  // The copies themselves take their own time.
  const std::vector<SimEvent> in = events_of(r, SimStream::kHostToDevice, EventKind::kSwapIn);
  ASSERT_EQ(in.size(), 1u);
  EXPECT_DOUBLE_EQ(in[0].end_us - in[0].start_us, kCopyUs);
  check_invariants(s.g(), r);

  // Without interference nothing is stretched and op_stretch stays empty.
  const SimResult plain = must_simulate(s.g(), p, round_cost());
  EXPECT_DOUBLE_EQ(plain.iteration_us, 1400);
  EXPECT_DOUBLE_EQ(plain.interference_us, 0);
  EXPECT_TRUE(plain.op_stretch.empty());
}

TEST(SimulatorTest, InterferenceOfLinksBusyAtOnceAddsUp) {
  TwoWay t;
  // At 1100 the swap-out of b and the swap-in of a run together until 1210: h (10 us of work) and
  // l run at 1/(1 + 1 + 1) of their speed, 30 us each; k waits for a until 1210.
  const SimResult r = must_simulate(t.h.graph(), t.plan(), interfering_cost(1.0, 1.0));
  const std::vector<SimEvent> ops = events_of(r, SimStream::kCompute, EventKind::kOp);
  ASSERT_EQ(ops.size(), 5u);
  // g [100, 1100] overlapped the swap-out of a [100, 210] at half speed: it ends 110 / 2 later.
  EXPECT_DOUBLE_EQ(ops[1].end_us, 1155);
  EXPECT_DOUBLE_EQ(ops[2].start_us, 1155);
  // The copies issued after g start at 1155; h and l run beside both.
  EXPECT_DOUBLE_EQ(ops[2].end_us, 1155 + 30);
  EXPECT_DOUBLE_EQ(ops[3].end_us, 1155 + 60);
  EXPECT_DOUBLE_EQ(ops[4].start_us, 1155 + kCopyUs);
  EXPECT_DOUBLE_EQ(r.interference_us, 55 + 20 + 20);
  check_invariants(t.h.graph(), r);
}

TEST(SimulatorTest, OnlyTheSsdLegsDataPhaseInterferes) {
  Saved s;
  const Schedule p = s.ssd_round_trip();
  // d2h [100, 210] (f 1), then the SSD write: latency [210, 260] (no interference), data
  // [260, 660] (f 0.5). g: 55 us of work by 210, 50 more by 260, 400 / 1.5 by 660, the rest after.
  const SimResult r = must_simulate(s.g(), p, interfering_cost(1.0, 0, /*ssd_write=*/0.5));
  const std::vector<SimEvent> ops = events_of(r, SimStream::kCompute, EventKind::kOp);
  ASSERT_EQ(ops.size(), 4u);
  const double work_by_660 = 55 + 50 + 400 / 1.5;
  EXPECT_NEAR(ops[1].end_us, 660 + (1000 - work_by_660), 1e-9);
  EXPECT_NEAR(r.interference_us, ops[1].end_us - 100 - 1000, 1e-9);
  check_invariants(s.g(), r);
}

TEST(SimulatorTest, CopyDirectionsSerializeWhenTheLinkCannotDoBoth) {
  TwoWay t;
  const SimResult r = must_simulate(t.h.graph(), t.plan(), round_cost(/*concurrent=*/false));
  const std::vector<SimEvent> in = events_of(r, SimStream::kHostToDevice, EventKind::kSwapIn);
  ASSERT_EQ(in.size(), 1u);
  EXPECT_DOUBLE_EQ(in[0].start_us, 1100 + kCopyUs);  // after the swap-out of b
  EXPECT_DOUBLE_EQ(r.stall_us, 1100 + 2 * kCopyUs - 1120);
  EXPECT_DOUBLE_EQ(r.iteration_us, 1100 + 2 * kCopyUs + 100);
  check_invariants(t.h.graph(), r);
}

TEST(SimulatorTest, SsdTierGoesThroughHostAndTheSsdQueues) {
  Saved s;
  const Schedule p = s.ssd_round_trip();
  const SimResult r = must_simulate(s.g(), p, round_cost());
  // Out: d2h [100, 210]; SSD write from 210, latency 50, 100000 B at 250 B/us -> [210, 660].
  // In at 1300: SSD read latency 100 + 200 us -> [1300, 1600]; h2d [1600, 1710]; k waits 410.
  const std::vector<SimEvent> w = events_of(r, SimStream::kSsdWrite, EventKind::kSsdWrite);
  const std::vector<SimEvent> rd = events_of(r, SimStream::kSsdRead, EventKind::kSsdRead);
  const std::vector<SimEvent> in = events_of(r, SimStream::kHostToDevice, EventKind::kSwapIn);
  ASSERT_EQ(w.size(), 1u);
  ASSERT_EQ(rd.size(), 1u);
  ASSERT_EQ(in.size(), 1u);
  EXPECT_DOUBLE_EQ(w[0].start_us, 210);
  EXPECT_DOUBLE_EQ(w[0].end_us, 660);
  EXPECT_DOUBLE_EQ(rd[0].start_us, 1300);
  EXPECT_DOUBLE_EQ(rd[0].end_us, 1600);
  EXPECT_DOUBLE_EQ(in[0].start_us, 1600);
  EXPECT_DOUBLE_EQ(r.stall_us, 410);
  EXPECT_DOUBLE_EQ(r.iteration_us, 1810);
  EXPECT_EQ(r.bytes_ssd_write, kBig);
  EXPECT_EQ(r.bytes_ssd_read, kBig);
  EXPECT_EQ(r.bytes_d2h, kBig);
  EXPECT_EQ(r.bytes_h2d, kBig);
  EXPECT_EQ(r.peak_ssd_bytes, kBig);
  EXPECT_EQ(r.peak_host_bytes, 0u);
  check_invariants(s.g(), r);
}

// On a device_direct profile a raw SSD copy is the disk's alone: written straight from the
// tensor's block (held until the write completes) and read straight into its new block.
TEST(SimulatorTest, InPlaceSsdCopiesSkipTheHostLegAndHoldTheBlockUntilWritten) {
  Saved s;
  HardwareProfile direct = cost_test::round_profile();
  direct.storage.device_direct = true;
  const SimResult r = must_simulate(s.g(), s.ssd_round_trip(), CostModel(direct));
  // Out: the SSD write from 100, latency 50 + 400 -> [100, 550]. In at 1300: read [1300, 1600];
  // k waits 300.
  const std::vector<SimEvent> w = events_of(r, SimStream::kSsdWrite, EventKind::kSsdWrite);
  const std::vector<SimEvent> rd = events_of(r, SimStream::kSsdRead, EventKind::kSsdRead);
  ASSERT_EQ(w.size(), 1u);
  ASSERT_EQ(rd.size(), 1u);
  EXPECT_DOUBLE_EQ(w[0].start_us, 100);
  EXPECT_DOUBLE_EQ(w[0].end_us, 550);
  EXPECT_DOUBLE_EQ(rd[0].start_us, 1300);
  EXPECT_DOUBLE_EQ(rd[0].end_us, 1600);
  EXPECT_TRUE(events_of(r, SimStream::kDeviceToHost, EventKind::kSwapOut).empty());
  EXPECT_TRUE(events_of(r, SimStream::kHostToDevice, EventKind::kSwapIn).empty());
  EXPECT_DOUBLE_EQ(r.stall_us, 300);
  EXPECT_DOUBLE_EQ(r.iteration_us, 1700);
  EXPECT_EQ(r.bytes_d2h + r.bytes_h2d, 0u);
  EXPECT_EQ(r.bytes_ssd_write, kBig);
  EXPECT_EQ(r.bytes_ssd_read, kBig);
  EXPECT_EQ(r.num_swap_outs, 1u);
  EXPECT_EQ(r.num_swap_ins, 1u);
  check_invariants(s.g(), r);
  // With a disk writing 100 B/us the write in place runs [100, 1150]: the release after step 1
  // (1100) waits 50 us for it, where through host memory it waits only for the host copy [100, 210].
  direct.storage.write_bytes_per_s = 1e8;
  HardwareProfile slow = cost_test::round_profile();
  slow.storage.write_bytes_per_s = 1e8;
  const SimResult in_place = must_simulate(s.g(), s.ssd_round_trip(), CostModel(direct));
  const SimResult staged = must_simulate(s.g(), s.ssd_round_trip(), CostModel(slow));
  // In place: k's read [1350, 1650]; staged: write [210, 1260], read [1300, 1600], h2d [1600, 1710].
  EXPECT_DOUBLE_EQ(in_place.stall_us, 50 + 300);
  EXPECT_DOUBLE_EQ(in_place.iteration_us, 1750);
  EXPECT_DOUBLE_EQ(staged.stall_us, 410);
  EXPECT_DOUBLE_EQ(staged.iteration_us, 1810);
  check_invariants(s.g(), in_place);
}

// A tensor the schedule codes (Schedule::ssd_codecs) holds the SSD queues for the codec
// pipeline's time (CostModel::ssd_data_us), not bytes / bandwidth; the device<->host legs and the
// byte counts are the raw tensor's.
TEST(SimulatorTest, CodedSsdCopiesTakeTheCodecPipelinesTime) {
  Saved s;
  Schedule p = s.ssd_round_trip();
  p.ssd_codecs = {{s.a, CodecId::kZeroMask}};
  const std::string cls = tensor_classes(s.g())[static_cast<size_t>(s.a)];
  // Half the bytes; encoding at 1000 B/us, decoding at 2000 B/us; 100000 bytes is one chunk, so
  // the stages add: out 100 + 0.5 * 100000 / 250 = 300 us, in 50 + 50000 / 500 = 150 us.
  const CostModel cost(round_profile(), CostOptions{.codecs = {{cls, CodecId::kZeroMask, CodecEstimate{0.5, 1e9, 2e9, 1}}}});
  const SimResult r = must_simulate(s.g(), p, cost);
  const std::vector<SimEvent> w = events_of(r, SimStream::kSsdWrite, EventKind::kSsdWrite);
  const std::vector<SimEvent> rd = events_of(r, SimStream::kSsdRead, EventKind::kSsdRead);
  ASSERT_EQ(w.size(), 1u);
  ASSERT_EQ(rd.size(), 1u);
  EXPECT_DOUBLE_EQ(w[0].start_us, 210);
  EXPECT_DOUBLE_EQ(w[0].end_us, 210 + 50 + 300);
  EXPECT_DOUBLE_EQ(rd[0].end_us, 1300 + 100 + 150);
  EXPECT_DOUBLE_EQ(r.stall_us, 410 - 50);  // raw: 410 (SsdTierGoesThroughHostAndTheSsdQueues)
  EXPECT_EQ(r.bytes_ssd_write, kBig);
  EXPECT_EQ(r.bytes_d2h, kBig);
  check_invariants(s.g(), r);
  // Without a figure for the class the codec is predicted as raw.
  const SimResult unknown = must_simulate(s.g(), p, round_cost());
  EXPECT_DOUBLE_EQ(unknown.stall_us, 410);
  // A codec the plan may not carry is refused by lowering.
  Schedule lossy = p;
  lossy.ssd_codecs = {{s.a, CodecId::kBf16}};
  Result<SimResult> bad = simulate(s.g(), lossy, cost);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(contains(bad.status().message(), "lossless codec other than none")) << bad.status().message();
  lossy.ssd_codecs = {{s.a, CodecId::kLz4}, {s.a, CodecId::kZstd}};
  bad = simulate(s.g(), lossy, cost);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(contains(bad.status().message(), "two codecs")) << bad.status().message();
  lossy.ssd_codecs = {{static_cast<TensorId>(s.g().tensors.size()), CodecId::kLz4}};
  bad = simulate(s.g(), lossy, cost);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(contains(bad.status().message(), "not in [0,")) << bad.status().message();
}

TEST(SimulatorTest, SsdQueueDepthOverlapsLatencyButNotBandwidth) {
  HandGraph h("ssd-queue");
  const TensorId x = h.input("x", 1000);
  const TensorId a = h.tensor("a", kBig);
  const TensorId b = h.tensor("b", kBig);
  const TensorId c = h.tensor("c", 1000);
  const TensorId loss = h.tensor("loss", 4);
  const TensorId d = h.tensor("d", 1000, TensorRole::kGradient);
  h.op("f", {x}, {a, b}, 100);
  h.op("g", {a, b}, {c}, 1000);
  h.op("l", {c}, {loss}, 10);
  h.op("k", {a, b, c}, {d}, 10, Phase::kBackward);
  h.set_loss(loss);
  Schedule p = Schedule::keep_all(4);
  p.after[0] = {swap_out(a, Tier::kSsd), swap_out(b, Tier::kSsd)};
  // d2h: a [100, 210], b [210, 320]. SSD write of a: [210, 660] (data from 260).
  // Depth 2: b's request starts at 320, its latency overlaps a's data: data [660, 1060].
  // Depth 1: b's request waits for a's slot: starts 660, data [710, 1110].
  SimOptions depth2;  // the profile's depth, 2
  SimOptions depth1;
  depth1.ssd_queue_depth = 1;
  for (auto [opts, start, end] : {std::tuple{depth2, 320.0, 1060.0}, std::tuple{depth1, 660.0, 1110.0}}) {
    const SimResult r = must_simulate(h.graph(), p, round_cost(), opts);
    const std::vector<SimEvent> w = events_of(r, SimStream::kSsdWrite, EventKind::kSsdWrite);
    ASSERT_EQ(w.size(), 2u);
    EXPECT_DOUBLE_EQ(w[0].start_us, 210);
    EXPECT_DOUBLE_EQ(w[0].end_us, 660);
    EXPECT_DOUBLE_EQ(w[1].start_us, start);
    EXPECT_DOUBLE_EQ(w[1].end_us, end);
  }
}

TEST(SimulatorTest, RecomputeRunsTheProducerAgainOnTheComputeStream) {
  Saved s;
  Schedule p = s.plan();
  p.after[1] = {release(s.a)};
  p.before[3] = {recompute(s.a)};
  const SimResult r = must_simulate(s.g(), p, round_cost());
  EXPECT_DOUBLE_EQ(r.compute_busy_us, 1500);
  EXPECT_DOUBLE_EQ(r.recompute_us, 100);
  EXPECT_EQ(r.num_recomputes, 1u);
  EXPECT_DOUBLE_EQ(r.iteration_us, 1500);
  const std::vector<SimEvent> rc = events_of(r, SimStream::kCompute, EventKind::kRecompute);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].name, "recompute f");
  EXPECT_DOUBLE_EQ(rc[0].start_us, 1300);
  EXPECT_DOUBLE_EQ(rc[0].end_us, 1400);
  check_invariants(s.g(), r);
}

TEST(SimulatorTest, InfeasibleBudgetNamesTheStepTensorAndTheNeededBytes) {
  Saved s;
  // Hand placement with 64-byte alignment: x [0, 1024), a [1024, 101056); x freed; b takes
  // x's hole; loss [101056, 101120); da [101120, 201152). The high-water mark is 201152.
  const SimResult unlimited = must_simulate(s.g(), s.plan(), round_cost());
  EXPECT_TRUE(unlimited.feasible);
  EXPECT_EQ(unlimited.peak_device_bytes, 201152u);

  SimOptions fits;
  fits.budget_bytes = 201152;
  EXPECT_TRUE(must_simulate(s.g(), s.plan(), round_cost(), fits).feasible);

  SimOptions tight;
  tight.budget_bytes = 201151;
  const SimResult r = must_simulate(s.g(), s.plan(), round_cost(), tight);
  EXPECT_FALSE(r.feasible);
  ASSERT_TRUE(r.failure.has_value());
  // Blocks sit at their static offsets (schedule/placement.h): the first allocation whose block
  // reaches past the budget fails, and the reason names it.
  ASSERT_NE(r.failure->tensor, kNoTensor);
  EXPECT_EQ(r.failure->allocation.requested_bytes, s.g().tensor(r.failure->tensor).bytes);
  EXPECT_EQ(r.failure->required_bytes, 201152u);
  EXPECT_EQ(r.budget_bytes, 201151u);
  EXPECT_TRUE(contains(r.reason, fmt::format("at step {} ('{}') allocating tensor '{}'", r.failure->step,
                                             s.g().op(r.failure->step).name,
                                             s.g().tensor(r.failure->tensor).name)))
      << r.reason;
  EXPECT_TRUE(contains(r.reason, "201152 bytes"));
  // The rest of the result describes the run without a limit.
  EXPECT_DOUBLE_EQ(r.iteration_us, unlimited.iteration_us);
  EXPECT_EQ(r.peak_device_bytes, 201152u);
}

TEST(SimulatorTest, BudgetThatCannotHoldTheWeightsFailsInThePrologue) {
  HandGraph h("heavy");
  const TensorId w = h.weight("w", 1 << 20);
  const TensorId x = h.input("x", 100);
  const TensorId loss = h.tensor("loss", 4);
  h.op("f", {x, w}, {loss}, 10);
  h.set_loss(loss);
  Schedule p = Schedule::keep_all(1);
  p.budget_bytes = 4096;  // the schedule's budget applies when SimOptions leaves it at 0
  const SimResult r = must_simulate(h.graph(), p, round_cost());
  EXPECT_FALSE(r.feasible);
  ASSERT_TRUE(r.failure.has_value());
  EXPECT_EQ(r.failure->step, 0);
  EXPECT_EQ(r.failure->instruction, 0u);
  EXPECT_EQ(r.failure->tensor, w);
  EXPECT_EQ(r.failure->required_bytes, (1u << 20) + 128u + 64u);  // w, x (100 -> 128), loss (4 -> 64)
}

// A test-only swap plan: every saved activation goes to `tier` after its last forward use and
// comes back before its first backward use.
Schedule swap_saved(const Graph& g, Tier tier) {
  Result<Analysis> a = analyze(g);
  EXPECT_TRUE(a.ok()) << a.status().message();
  Schedule s = Schedule::keep_all(g.ops.size());
  s.policy = "test-swap-all";
  if (!a.ok()) return s;
  for (const Tensor& t : g.tensors) {
    const TensorInfo& ti = a->tensors[static_cast<size_t>(t.id)];
    if (t.persistent() || ti.idle_steps < 2) continue;
    s.after[static_cast<size_t>(ti.last_forward_use)].push_back({ActionKind::kSwapOut, t.id, tier});
    s.after[static_cast<size_t>(ti.last_forward_use)].push_back({ActionKind::kRelease, t.id, tier});
    s.before[static_cast<size_t>(ti.first_backward_use)].push_back({ActionKind::kSwapIn, t.id, tier});
  }
  return s;
}

Graph zoo_graph(const char* name, int64_t batch) {
  ModelConfig cfg;
  cfg.batch = batch;
  Result<Graph> g = build_model(name, cfg);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? std::move(g).value() : Graph{};
}

// Replays the program's allocations in an allocator of our own and compares every sample.
TEST(SimulatorTest, MemoryCounterEqualsTheAllocatorsOnEveryAllocationAndFree) {
  const Graph g = zoo_graph("resnet-mini", 4);
  std::vector<uint64_t> scratch(g.ops.size());
  for (size_t i = 0; i < scratch.size(); ++i) scratch[i] = i % 3 == 0 ? 1000 + 10 * i : 0;
  const Schedule plan = swap_saved(g, Tier::kHost);
  ASSERT_GT(plan.num_actions(), 0u);
  SimOptions o;
  o.op_scratch_bytes = scratch;
  Result<HardwareProfile> hw = load_profile("v100-16gb-pcie3");
  ASSERT_TRUE(hw.ok()) << hw.status().message();
  const CostModel cost(*hw);
  const SimResult r = must_simulate(g, plan, cost, o);
  ASSERT_TRUE(r.feasible) << r.reason;
  check_invariants(g, r);

  ProgramOptions po;
  po.op_scratch_bytes = scratch;
  Result<Program> p = lower_schedule(g, plan, po);
  ASSERT_TRUE(p.ok());
  Result<ProgramPlacement> placed = place_program(g, *p, o.alignment);
  ASSERT_TRUE(placed.ok());
  OffsetAllocator replay(uint64_t{1} << 40);
  size_t k = 0;
  std::map<TensorId, uint64_t> offset;
  uint64_t scratch_offset = 0;
  size_t sample = 0;
  auto expect_sample = [&]() {
    ASSERT_LT(sample, r.memory.size());
    const AllocatorStats s = replay.stats();
    EXPECT_EQ(r.memory[sample].in_use_bytes, s.in_use_bytes) << "sample " << sample;
    EXPECT_EQ(r.memory[sample].high_water_bytes, s.high_water_bytes) << "sample " << sample;
    ++sample;
  };
  for (; k < p->instructions.size(); ++k) {
    const Instruction& in = p->instructions[k];
    switch (in.kind) {
      case InstrKind::kAlloc:
        if (in.inherit != kNoTensor) {
          offset[in.tensor] = offset.at(in.inherit);
          break;
        }
        offset[in.tensor] = placed->offset[k];
        ASSERT_TRUE(replay.allocate_at(placed->offset[k], in.bytes));
        expect_sample();
        break;
      case InstrKind::kFree:
      case InstrKind::kRelease:
        replay.free(offset.at(in.tensor));
        expect_sample();
        break;
      case InstrKind::kAllocScratch:
        scratch_offset = placed->offset[k];
        ASSERT_TRUE(replay.allocate_at(placed->offset[k], in.bytes));
        expect_sample();
        break;
      case InstrKind::kFreeScratch:
        replay.free(scratch_offset);
        expect_sample();
        break;
      default: break;
    }
  }
  EXPECT_EQ(sample, r.memory.size());
  EXPECT_EQ(r.peak_device_bytes, replay.stats().peak_high_water_bytes);
  EXPECT_EQ(r.peak_in_use_bytes, replay.stats().peak_in_use_bytes);

  // Swapping saved activations out must lower the peak below the keep plan's.
  const SimResult keep = must_simulate(g, Schedule::keep_all(g.ops.size()), cost, o);
  EXPECT_LT(r.peak_in_use_bytes, keep.peak_in_use_bytes);
  EXPECT_EQ(r.bytes_d2h, r.bytes_h2d);
  EXPECT_EQ(r.num_swap_outs, r.num_swap_ins);
}

// With alignment 1 the allocator counts exact bytes, so the keep plan's peak in use must equal
// the analysis' lower bound (persistent + max live bytes with in-place sharing).
TEST(SimulatorTest, KeepPlanPeakEqualsTheAnalysisOnZooModels) {
  const CostModel cost(round_profile());
  for (const char* name : {"resnet-mini", "densenet-mini", "gpt2-mini"}) {
    SCOPED_TRACE(name);
    const Graph g = zoo_graph(name, 2);
    Result<Analysis> a = analyze(g);
    ASSERT_TRUE(a.ok());
    SimOptions o;
    o.alignment = 1;
    const SimResult r = must_simulate(g, Schedule::keep_all(g.ops.size()), cost, o);
    EXPECT_EQ(r.peak_in_use_bytes, a->lower_bound_bytes);
    EXPECT_EQ(r.persistent_bytes, a->persistent_bytes);
    check_invariants(g, r);
  }
}

TEST(SimulatorTest, SsdSwapPlanOnAZooModelKeepsTheInvariants) {
  const Graph g = zoo_graph("gpt2-mini", 2);
  const Schedule plan = swap_saved(g, Tier::kSsd);
  Result<HardwareProfile> hw = load_profile("a100-40gb-pcie4");
  ASSERT_TRUE(hw.ok());
  const SimResult r = must_simulate(g, plan, CostModel(*hw));
  ASSERT_TRUE(r.feasible);
  check_invariants(g, r);
  EXPECT_EQ(r.bytes_ssd_write, r.bytes_d2h);
  EXPECT_EQ(r.bytes_ssd_read, r.bytes_h2d);
  EXPECT_GT(r.bytes_ssd_read, 0u);
  EXPECT_EQ(r.peak_host_bytes, 0u);
  EXPECT_GT(r.stall_us, 0);  // SSD latency on a tiny model cannot hide under microsecond ops
  ASSERT_FALSE(r.top_stalls.empty());
  for (size_t i = 1; i < r.top_stalls.size(); ++i) EXPECT_GE(r.top_stalls[i - 1].wait_us, r.top_stalls[i].wait_us);
}

TEST(SimulatorTest, BadOptionsAndSchedulesAreErrors) {
  Saved s;
  SimOptions bad_alignment;
  bad_alignment.alignment = 48;
  Result<SimResult> r = simulate(s.g(), s.plan(), round_cost(), bad_alignment);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.status().message(), "alignment 48 is not a power of two"));

  SimOptions bad_depth;
  bad_depth.ssd_queue_depth = -1;
  r = simulate(s.g(), s.plan(), round_cost(), bad_depth);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.status().message(), "ssd_queue_depth -1"));

  Schedule bad = s.plan();
  bad.after[1] = {release(s.a)};  // k reads a later, never brought back
  r = simulate(s.g(), bad, round_cost());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(r.status().message(), "op 'k' (step 3) reads 'a'"));

  HandGraph neg("negative");
  const TensorId x = neg.input("x", 10);
  const TensorId loss = neg.tensor("loss", 4);
  neg.op("f", {x}, {loss}, -1.0);
  neg.set_loss(loss);
  r = simulate(neg.graph(), Schedule::keep_all(1), round_cost());
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.status().message(), "op 'f' (step 0) has time -1 us"));
}

}  // namespace
}  // namespace ferry
