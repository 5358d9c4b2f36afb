// libFuzzer harness of the hardware-profile reader. Whatever the bytes, parse_profile returns; a
// profile it accepts validates, survives serialisation unchanged, and every prediction made with
// it is finite (op and transfer times of the largest sizes Ferry describes). Run with
// scripts/fuzz.sh profile SECONDS.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "cost/cost_model.h"
#include "cost/profile.h"

namespace {

bool finite_predictions(const ferry::HardwareProfile& p) {
  const ferry::CostModel cost(p);
  ferry::Graph g;
  ferry::Tensor t;
  t.id = 0;
  t.bytes = UINT64_MAX / 4;
  g.tensors.push_back(t);
  for (ferry::OpType type : {ferry::OpType::kConv2d, ferry::OpType::kMatMul, ferry::OpType::kRelu,
                             ferry::OpType::kAdamUpdate, ferry::OpType::kOpaque}) {
    ferry::Op op;
    op.id = 0;
    op.type = type;
    op.inputs = {0};
    op.flops = UINT64_MAX;
    op.macs = UINT64_MAX / 2;
    op.bytes_read = op.bytes_written = UINT64_MAX / 4;
    g.ops = {op};
    const double us = cost.op_time_us(g, g.ops[0]);
    if (!std::isfinite(us) || us < 0 || !std::isfinite(us * 2147483648.0)) return false;
  }
  for (ferry::Direction d : {ferry::Direction::kSwapOut, ferry::Direction::kSwapIn})
    for (ferry::Tier tier : {ferry::Tier::kHost, ferry::Tier::kSsd})
      for (uint64_t bytes : {uint64_t{0}, uint64_t{1}, UINT64_MAX}) {
        const double us = cost.transfer_us(d, tier, bytes);
        if (!std::isfinite(us) || us < 0) return false;
      }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  ferry::Result<ferry::HardwareProfile> p = ferry::parse_profile(text, "fuzz.json");
  if (!p.ok()) {
    if (p.status().code() != ferry::StatusCode::kInvalidArgument) std::abort();
    if (p.status().message().rfind("fuzz.json", 0) != 0) std::abort();
    return 0;
  }
  if (!ferry::validate_profile(*p).ok()) std::abort();
  ferry::Result<ferry::HardwareProfile> again = ferry::parse_profile(ferry::to_profile_json(*p), "again.json");
  if (!again.ok() || !(*again == *p)) std::abort();
  if (!finite_predictions(*p)) std::abort();
  return 0;
}
