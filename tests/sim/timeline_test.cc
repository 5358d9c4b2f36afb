#include "sim/timeline.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cost/test_profile.h"
#include "schedule/hand_schedule.h"

namespace ferry {
namespace {

using plan_test::contains;
using plan_test::HandGraph;
using plan_test::release;
using plan_test::swap_in;
using plan_test::swap_out;

// A small iteration with a swap-out, a swap-in through the SSD and a stall.
SimResult small_result(uint64_t budget = 0) {
  HandGraph h("tiny");
  const TensorId x = h.input("x", 1000);
  const TensorId a = h.tensor("a", 100000);
  const TensorId b = h.tensor("b", 1000);
  const TensorId loss = h.tensor("loss", 4);
  const TensorId da = h.tensor("da", 100000, TensorRole::kGradient);
  h.op("f", {x}, {a}, 100);
  h.op("g", {a}, {b}, 1000);
  h.op("l", {b}, {loss}, 200);
  h.op("k", {b, a}, {da}, 100, Phase::kBackward);
  h.set_loss(loss);
  Schedule s = Schedule::keep_all(4);
  s.policy = "hand";
  s.after[0] = {swap_out(a, Tier::kSsd)};
  s.after[1] = {release(a)};
  s.before[3] = {swap_in(a, Tier::kSsd)};
  SimOptions o;
  o.budget_bytes = budget;
  Result<SimResult> r = simulate(h.graph(), s, CostModel(cost_test::round_profile()), o);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? std::move(r).value() : SimResult{};
}

TEST(TimelineTest, ChromeTraceHasAThreadPerStreamEveryEventAndTheMemoryCounter) {
  const SimResult r = small_result();
  ASSERT_FALSE(r.events.empty());
  const nlohmann::json doc = nlohmann::json::parse(to_chrome_trace_json(r));
  ASSERT_TRUE(doc.contains("traceEvents"));
  std::set<std::string> threads;
  size_t complete = 0, counters = 0, stalls = 0;
  for (const auto& e : doc["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "M" && e["name"] == "thread_name") threads.insert(e["args"]["name"].get<std::string>());
    if (ph == "X") {
      ++complete;
      EXPECT_GE(e["dur"].get<double>(), 0);
      if (e["cat"] == "stall") ++stalls;
    }
    if (ph == "C") {
      ++counters;
      EXPECT_EQ(e["name"], "device memory");
      EXPECT_TRUE(e["args"].contains("in_use_bytes"));
    }
  }
  EXPECT_EQ(threads, (std::set<std::string>{"compute", "d2h", "h2d", "ssd_write", "ssd_read", "host"}));
  EXPECT_EQ(complete, r.events.size());
  EXPECT_EQ(counters, r.memory.size());
  EXPECT_EQ(stalls, r.num_stalls);
  EXPECT_EQ(doc["otherData"]["peak_device_bytes"].get<uint64_t>(), r.peak_device_bytes);
}

TEST(TimelineTest, MemorySvgShowsBudgetPeakAxesAndFeasibility) {
  const SimResult r = small_result();
  const std::string svg = memory_svg(r, 300000);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_TRUE(contains(svg, "</svg>"));
  EXPECT_TRUE(contains(svg, "budget 292.97 KiB"));
  EXPECT_TRUE(contains(svg, "time (ms)"));
  EXPECT_TRUE(contains(svg, "device memory (KiB)"));
  EXPECT_TRUE(contains(svg, "peak "));
  EXPECT_TRUE(contains(svg, "tiny on round (policy hand)"));
  EXPECT_FALSE(contains(svg, "INFEASIBLE"));
  EXPECT_FALSE(contains(memory_svg(r, 0), "stroke=\"#d62728\""));  // no budget line without a budget
  // The lanes under the plot: recomputation, stalls, both copy directions and the SSD legs, with
  // busy intervals drawn where the streams have events.
  for (const char* lane : {">recompute<", ">stall<", ">to host<", ">to device<", ">SSD write<", ">SSD read<"})
    EXPECT_TRUE(contains(svg, lane)) << lane;
  bool copies = false;
  for (const SimEvent& e : r.events) copies |= e.stream == SimStream::kDeviceToHost;
  ASSERT_TRUE(copies) << "the example must swap";
  EXPECT_TRUE(contains(svg, "fill=\"#2ca02c\"/>")) << "a busy interval on the to-host lane";

  const SimResult tight = small_result(150000);
  ASSERT_FALSE(tight.feasible);
  EXPECT_TRUE(contains(memory_svg(tight, 150000), "INFEASIBLE"));
  EXPECT_TRUE(contains(memory_svg(tight, 150000), fmt::format("out of memory at step {}", tight.failure->step)));
}

TEST(TimelineTest, WritersReportUnwritablePaths) {
  const SimResult r = small_result();
  EXPECT_EQ(write_chrome_trace(r, "/nonexistent/dir/t.json").code(), StatusCode::kIoError);
  EXPECT_EQ(write_memory_svg(r, 0, "/nonexistent/dir/m.svg").code(), StatusCode::kIoError);
  const std::string path = ::testing::TempDir() + "/ferry_timeline_test.json";
  ASSERT_TRUE(write_chrome_trace(r, path).ok());
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), to_chrome_trace_json(r));
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace ferry
