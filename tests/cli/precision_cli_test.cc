// End-to-end tests of `--precision` (analyze, plan, train) and `ferry profile --calibrate`.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace {

struct CommandRun {
  int code = -1;
  std::string out;  // stdout and stderr together
};

CommandRun ferry(const std::string& args) {
  const std::string cmd = std::string(FERRY_BINARY) + " " + args + " 2>&1";
  CommandRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string temp(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("ferry_precision_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// A failed command gives an empty object, read without const so that a missing key is null, never
// undefined behaviour.
nlohmann::json json_of(const std::string& args) {
  const CommandRun r = ferry(args);
  EXPECT_EQ(r.code, 0) << args << ": " << r.out;
  return r.code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
}

TEST(PrecisionCli, AnalyzeSizesFollowThePrecision) {
  auto fp32 = json_of("analyze --model bert-mini-squad --batch 4 --json");
  auto amp = json_of("analyze --model bert-mini-squad --batch 4 --json --precision amp-bf16");
  EXPECT_EQ(fp32["precision"], "fp32");
  EXPECT_EQ(amp["precision"], "amp-bf16");
  EXPECT_EQ(amp["params"], fp32["params"]);              // the master weights, counted once
  EXPECT_EQ(amp["weight_bytes"], fp32["weight_bytes"]);  // fp32 masters
  // + the 16-bit copies (half the masters); SGD momentum stays fp32.
  EXPECT_EQ(amp["persistent_bytes"].get<uint64_t>(),
            fp32["persistent_bytes"].get<uint64_t>() + fp32["weight_bytes"].get<uint64_t>() / 2);
  EXPECT_LT(amp["peak_bytes_shared"].get<uint64_t>(), fp32["peak_bytes_shared"].get<uint64_t>());
}

TEST(PrecisionCli, PlanUsesTheProfilesRateAndRefusesAMissingOne) {
  const std::string base = "plan --model resnet50 --batch 32 --device a100-40gb-pcie4 --json";
  auto fp32 = json_of(base);
  auto tf32 = json_of(base + " --precision tf32");
  auto amp = json_of(base + " --precision amp-fp16");
  EXPECT_EQ(tf32["precision"], "tf32");
  EXPECT_LT(tf32["compute_ms"].get<double>(), fp32["compute_ms"].get<double>());  // tensor cores
  EXPECT_LT(amp["compute_ms"].get<double>(), tf32["compute_ms"].get<double>());   // and half the bytes
  EXPECT_LT(amp["peak_bytes"].get<uint64_t>(), fp32["peak_bytes"].get<uint64_t>());
  // A V100 has no TF32 and no BF16 units: an error naming the precision, the rate and the profile.
  for (const char* p : {"tf32", "amp-bf16"}) {
    const CommandRun r = ferry(std::string("plan --model resnet-mini --batch 4 --device v100-16gb-pcie3 --precision ") + p);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_TRUE(has(r.out, std::string("ferry: error: precision ") + p)) << r.out;
    EXPECT_TRUE(has(r.out, "compute.peak_flops.")) << r.out;
    EXPECT_TRUE(has(r.out, "'v100-16gb-pcie3'")) << r.out;
  }
  const CommandRun bad = ferry("plan --model resnet-mini --precision fp8");
  EXPECT_EQ(bad.code, 2);
  EXPECT_TRUE(has(bad.out, "unknown precision 'fp8'")) << bad.out;
  // NCHW: AMP convolutions pay their transposes, fp32 ones nothing; a bad layout is a usage error.
  auto amp_nchw = json_of(base + " --precision amp-fp16 --layout nchw");
  EXPECT_GT(amp_nchw["compute_ms"].get<double>(), amp["compute_ms"].get<double>());
  EXPECT_EQ(json_of(base + " --layout nchw")["compute_ms"].get<double>(), fp32["compute_ms"].get<double>());
  const CommandRun bad_layout = ferry("plan --model resnet-mini --layout chwn");
  EXPECT_EQ(bad_layout.code, 2);
  EXPECT_TRUE(has(bad_layout.out, "unknown layout 'chwn' (use nhwc or nchw)")) << bad_layout.out;
}

TEST(PrecisionCli, TrainRunsFp32OnlyAndSaysWhy) {
  for (const char* p : {"tf32", "amp-fp16", "amp-bf16"}) {
    const CommandRun r = ferry(std::string("train --model resnet-mini --batch 2 --iters 1 --precision ") + p);
    EXPECT_EQ(r.code, 2) << p << ": " << r.out;
    EXPECT_TRUE(has(r.out, "ferry: error: the CPU backend")) << r.out;
  }
  EXPECT_EQ(ferry("train --model resnet-mini --batch 2 --iters 1 --precision fp32").code, 0);
}

TEST(PrecisionCli, TracesKeepTheirPrecision) {
  const std::string trace = temp("amp.json");
  ASSERT_EQ(ferry("analyze --model bert-mini-squad --batch 2 --precision amp-fp16 --export-trace " + trace).code, 0);
  EXPECT_EQ(json_of("analyze --trace " + trace + " --json")["precision"], "amp-fp16");
  const CommandRun r = ferry("analyze --trace " + trace + " --precision fp32");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.out, "recorded in amp-fp16")) << r.out;
  // fp32 and tf32 share their tensors, so an fp32 trace can be planned as tf32.
  const std::string fp32 = temp("fp32.json");
  ASSERT_EQ(ferry("analyze --model resnet-mini --batch 2 --export-trace " + fp32).code, 0);
  EXPECT_EQ(json_of("plan --trace " + fp32 + " --device a100-40gb-pcie4 --json --precision tf32")["precision"], "tf32");
  std::filesystem::remove(trace);
  std::filesystem::remove(fp32);
}

TEST(PrecisionCli, ProfileCalibrateFitsAMeasuredTrace) {
  const std::string trace = temp("measured.json"), fitted = temp("fitted.json");
  const CommandRun measured =
      ferry("profile --model resnet-mini --batch 4 --iters 2 --warmup 1 --storage-bytes 4MiB --out " + trace);
  ASSERT_EQ(measured.code, 0) << measured.out;
  const CommandRun r = ferry("profile --calibrate " + trace + " --device cpu-local --hardware-out " + fitted);
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* s : {"conv", "norm", "summed time error", "wrote the calibrated profile"}) EXPECT_TRUE(has(r.out, s)) << s;
  // The fitted profile loads and plans.
  auto plan = json_of("plan --model resnet-mini --batch 4 --json --logical-sizes --device " + fitted);
  EXPECT_EQ(plan["device"], "cpu-local-calibrated");
  // Bad usage: no device, a trace without times.
  const CommandRun no_device = ferry("profile --calibrate " + trace);
  EXPECT_EQ(no_device.code, 2);
  EXPECT_TRUE(has(no_device.out, "--device")) << no_device.out;
  const std::string untimed = temp("untimed.json");
  ASSERT_EQ(ferry("analyze --model resnet-mini --batch 2 --export-trace " + untimed).code, 0);
  const CommandRun nothing = ferry("profile --calibrate " + untimed + " --device cpu-local");
  EXPECT_EQ(nothing.code, 2);
  EXPECT_TRUE(has(nothing.out, "nothing to fit")) << nothing.out;
  for (const std::string& f : {trace, trace + ".hardware.json", fitted, untimed}) std::filesystem::remove(f);
}

}  // namespace
