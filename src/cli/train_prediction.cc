#include "cli/train_prediction.h"

#include <algorithm>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "graph/trace.h"

namespace ferry::cli {

Status apply_op_times(Graph& g, const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(Graph timed, load_trace(path));
  auto mismatch = [&](const std::string& what) {
    return Status::InvalidArgument(
        fmt::format("--op-times {}: not a profile of this model and shape ({}); record one with `ferry profile` "
                    "and the same --model/--batch/--image/--seq/--optimizer",
                    path, what));
  };
  if (timed.ops.size() != g.ops.size())
    return mismatch(fmt::format("{} ops, this graph has {}", timed.ops.size(), g.ops.size()));
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const Op& a = timed.ops[i];
    const Op& b = g.ops[i];
    if (a.name != b.name || a.type != b.type) return mismatch(fmt::format("op {} is '{}', expected '{}'", i, a.name, b.name));
    if (!a.time_us) return mismatch(fmt::format("op '{}' has no measured time_us", a.name));
  }
  for (size_t i = 0; i < g.ops.size(); ++i) g.ops[i].time_us = timed.ops[i].time_us;
  return Status::Ok();
}

Result<SimResult> predict_iteration(const Graph& sized, const Schedule& schedule, const CostModel& cost,
                                    uint64_t budget_bytes, const std::vector<uint64_t>& op_scratch_bytes) {
  SimOptions so;
  so.budget_bytes = budget_bytes;
  so.op_scratch_bytes = op_scratch_bytes;
  so.record_timeline = true;
  return simulate(sized, schedule, cost, so);
}

namespace {

// (direction, tensor, occurrence) identifies a transfer within an iteration.
using TransferKey = std::tuple<Direction, TensorId, int>;

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace

nlohmann::json transfer_comparison(const Graph& g, const SimResult& predicted,
                                   const std::vector<std::vector<TransferRecord>>& iterations) {
  // Predicted: every stream is FIFO in program order, so the n-th event of a kind for a tensor is
  // its n-th transfer of that direction. An SSD transfer has two legs (d2h + ssd_write, ssd_read +
  // h2d); the n-th leg of each kind belongs to the n-th transfer.
  std::map<std::tuple<EventKind, TensorId>, int> seen;
  std::map<TransferKey, double> predicted_us;
  std::map<TransferKey, uint64_t> bytes;
  std::map<TransferKey, std::string> tier;
  for (const SimEvent& e : predicted.events) {
    Direction d;
    if (e.kind == EventKind::kSwapOut || e.kind == EventKind::kSsdWrite) {
      d = Direction::kSwapOut;
    } else if (e.kind == EventKind::kSwapIn || e.kind == EventKind::kSsdRead) {
      d = Direction::kSwapIn;
    } else {
      continue;
    }
    const int n = seen[{e.kind, e.tensor}]++;
    const TransferKey key{d, e.tensor, n};
    predicted_us[key] += e.end_us - e.start_us;
    bytes[key] = e.bytes;
    if (e.kind == EventKind::kSsdWrite || e.kind == EventKind::kSsdRead) tier[key] = "ssd";
    else if (!tier.count(key)) tier[key] = "host";
  }
  // Measured: the engine's records, numbered per (direction, tensor) in issue order.
  std::map<TransferKey, std::vector<double>> measured_us;
  for (const std::vector<TransferRecord>& records : iterations) {
    std::vector<TransferRecord> by_issue = records;
    std::sort(by_issue.begin(), by_issue.end(),
              [](const TransferRecord& a, const TransferRecord& b) { return a.issue_us < b.issue_us; });
    std::map<std::pair<Direction, TensorId>, int> n;
    for (const TransferRecord& r : by_issue)
      if (r.ok) measured_us[{r.direction, r.tensor, n[{r.direction, r.tensor}]++}].push_back(r.end_us - r.start_us);
  }
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [key, us] : predicted_us) {
    const auto& [d, t, n] = key;
    nlohmann::json j = {{"tensor", g.tensor(t).name}, {"direction", std::string(to_string(d))},
                        {"occurrence", n},           {"tier", tier[key]},
                        {"bytes", bytes[key]},       {"predicted_us", us}};
    auto it = measured_us.find(key);
    if (it != measured_us.end() && !it->second.empty()) j["measured_us"] = median(it->second);
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace ferry::cli
