// ferry._ferry: the C++ half of the PyTorch adapter (python/ferry). Two things cross the boundary:
//
// - plan(): a recorded iteration (a Ferry trace, JSON text) and a budget in, a Schedule out (as a
//   list of actions), made by Ferry's planner restricted to what the adapter can do (free only the
//   tensors autograd saved, between forward and backward; recomputation only of ops it can replay:
//   PlanContext::framework_saved, allow_recompute, replayable_ops), with the simulator's predicted times and the tiers' needs. An infeasible
//   budget is a result, not an exception, carrying the smallest budget that fits.
// - Engine: a swap tier (host region or SSD files) and Ferry's TransferEngine, moving bytes
//   between PyTorch's CPU tensors (raw addresses) and the tier on the engine's two threads. On the
//   CPU "device memory" is PyTorch's own CPU allocations; TorchMemory below is the Backend whose
//   copies are memcpy at those addresses (it owns no memory and compiles nothing). The Python side
//   keeps every tensor alive while a transfer of it is in flight (it holds a reference until the
//   ticket is done). Waits release the GIL, so Python threads (and PyTorch's) run meanwhile.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "common/units.h"
#include "cost/cost_model.h"
#include "cost/profile.h"
#include "graph/trace.h"
#include "plan/policies.h"
#include "runtime/ssd_tier.h"
#include "runtime/tiers.h"
#include "runtime/transfer_engine.h"
#include "sim/simulator.h"

namespace py = pybind11;

namespace ferry {
namespace {

// Raises the Python exception that matches a failed Status: ValueError for bad input,
// MemoryError for a budget, OSError for I/O, RuntimeError otherwise.
[[noreturn]] void raise(const Status& s) {
  const std::string msg = std::string(s.message());
  switch (s.code()) {
    case StatusCode::kInvalidArgument: throw py::value_error(msg);
    case StatusCode::kOutOfMemory: PyErr_SetString(PyExc_MemoryError, msg.c_str()); throw py::error_already_set();
    case StatusCode::kIoError: PyErr_SetString(PyExc_OSError, msg.c_str()); throw py::error_already_set();
    default: throw std::runtime_error(msg);
  }
}

template <typename T>
T value_or_raise(Result<T> r) {
  if (!r.ok()) raise(r.status());
  return std::move(r).value();
}

void ok_or_raise(const Status& s) {
  if (!s.ok()) raise(s);
}

// PyTorch's CPU memory seen as a device: addresses of live tensors, copied with memcpy.
class TorchMemory final : public Backend {
 public:
  std::string_view name() const override { return "torch-cpu"; }
  Result<std::unique_ptr<CompiledGraph>> compile(const Graph&) override {
    return Status::Unsupported("torch-cpu memory runs no kernels (PyTorch does)");
  }
  Result<DevicePtr> allocate(uint64_t) override {
    return Status::Unsupported("torch-cpu memory is allocated by PyTorch, not by Ferry");
  }
  void free(DevicePtr) override {}
  Status copy_to_device(DevicePtr dst, std::span<const std::byte> src) override {
    std::memcpy(reinterpret_cast<void*>(dst.address), src.data(), src.size());
    return Status::Ok();
  }
  Status copy_to_host(std::span<std::byte> dst, DevicePtr src) override {
    std::memcpy(dst.data(), reinterpret_cast<const void*>(src.address), dst.size());
    return Status::Ok();
  }
  Status copy_on_device(DevicePtr dst, DevicePtr src, uint64_t bytes) override {
    std::memmove(reinterpret_cast<void*>(dst.address), reinterpret_cast<const void*>(src.address), bytes);
    return Status::Ok();
  }
  Status fill(DevicePtr dst, uint64_t bytes, uint8_t value) override {
    std::memset(reinterpret_cast<void*>(dst.address), value, bytes);
    return Status::Ok();
  }
  Status synchronize() override { return Status::Ok(); }
};

py::list actions_of(const Schedule& s) {
  py::list out;
  auto add = [&](size_t step, const char* when, const Action& a) {
    out.append(py::make_tuple(step, when, std::string(to_string(a.kind)), a.tensor, std::string(to_string(a.tier))));
  };
  for (size_t i = 0; i < s.before.size(); ++i) {
    for (const Action& a : s.before[i]) add(i, "before", a);
    for (const Action& a : s.after[i]) add(i, "after", a);
  }
  return out;
}

py::dict sim_summary(const SimResult& r) {
  py::dict d;
  d["feasible"] = r.feasible;
  d["iteration_ms"] = r.iteration_us / 1e3;
  d["stall_ms"] = r.stall_us / 1e3;
  d["peak_device_bytes"] = r.peak_device_bytes;
  d["persistent_bytes"] = r.persistent_bytes;
  d["peak_host_bytes"] = r.peak_host_bytes;
  d["peak_ssd_bytes"] = r.peak_ssd_bytes;
  return d;
}

// plan(trace_json, budget_bytes, tier, device, framework_saved, allow_recompute, policy,
// op_scratch_bytes, replayable_ops) -> dict.
py::dict plan(const std::string& trace_json, uint64_t budget_bytes, const std::string& tier_name,
              const std::string& device, std::vector<bool> framework_saved, bool allow_recompute,
              const std::string& policy, std::vector<uint64_t> op_scratch_bytes, std::vector<bool> replayable_ops) {
  Graph g = value_or_raise(parse_trace(trace_json, "recorded iteration"));
  Tier tier = Tier::kHost;
  if (tier_name == "ssd") tier = Tier::kSsd;
  else if (tier_name != "host") throw py::value_error("tier must be 'host' or 'ssd', got '" + tier_name + "'");
  const CostModel cost(value_or_raise(load_profile(device)));
  py::dict out;
  if (!op_scratch_bytes.empty() && op_scratch_bytes.size() != g.ops.size())
    throw py::value_error("op_scratch_bytes has " + std::to_string(op_scratch_bytes.size()) + " entries for " +
                          std::to_string(g.ops.size()) + " ops");
  PlanContext unlimited{.graph = g, .cost = cost, .tier = tier, .op_scratch_bytes = op_scratch_bytes};
  const PlanReport keep = value_or_raise(plan_policy("none", unlimited));
  SimOptions quiet;
  quiet.record_timeline = false;
  quiet.op_scratch_bytes = op_scratch_bytes;
  const SimResult keep_sim = value_or_raise(simulate(g, keep.schedule, cost, quiet));
  out["unlimited"] = sim_summary(keep_sim);
  out["unlimited"]["device_bytes"] = keep.device_bytes;  // the planners' measure of the keep plan
  out["unlimited"]["live_peak_bytes"] = keep.live_peak_bytes;  // its live bytes, before placement
  PlanContext ctx{.graph = g, .cost = cost, .budget_bytes = budget_bytes, .tier = tier};
  ctx.framework_saved = std::move(framework_saved);
  ctx.allow_recompute = allow_recompute;
  ctx.op_scratch_bytes = op_scratch_bytes;
  ctx.replayable_ops = std::move(replayable_ops);
  ctx.name_smallest_budget = false;
  Result<PlanReport> r = plan_policy(policy, ctx);
  if (!r.ok() && r.status().code() == StatusCode::kOutOfMemory) {
    out["fits"] = false;
    out["message"] = std::string(r.status().message());
    out["min_budget_bytes"] = value_or_raise(find_min_budget(policy, ctx));
    return out;
  }
  if (!r.ok()) raise(r.status());
  SimOptions so;
  so.budget_bytes = budget_bytes;
  so.record_timeline = false;
  so.op_scratch_bytes = op_scratch_bytes;
  const SimResult sim = value_or_raise(simulate(g, r->schedule, cost, so));
  out["fits"] = true;
  out["policy"] = r->schedule.policy;
  out["device_bytes"] = r->device_bytes;
  out["live_peak_bytes"] = r->live_peak_bytes;
  out["swapped_tensors"] = r->swapped_tensors;
  out["recomputed_tensors"] = r->recomputed_tensors;
  out["notes"] = r->notes;
  out["predicted"] = sim_summary(sim);
  out["actions"] = actions_of(r->schedule);
  return out;
}

// A swap tier and the transfer engine that fills and drains it.
class Engine {
 public:
  Engine(const std::string& tier, uint64_t capacity_bytes, const std::string& directory) {
    if (tier == "host") {
      HostTierOptions o;
      o.capacity_bytes = capacity_bytes;
      tier_ = value_or_raise(HostTier::create(o));
    } else if (tier == "ssd") {
      SsdTierOptions o;
      o.capacity_bytes = capacity_bytes;
      if (!directory.empty()) o.directory = directory;
      tier_ = value_or_raise(SsdTier::create(o));
    } else {
      throw py::value_error("tier must be 'host' or 'ssd', got '" + tier + "'");
    }
    engine_ = value_or_raise(TransferEngine::create(memory_, {.keep_records = false}));
  }
  ~Engine() {
    py::gil_scoped_release release;
    engine_.reset();  // joins the threads before the tier goes
  }
  uint64_t swap_out(TensorId t, uint64_t address, uint64_t bytes) {
    return engine_->swap_out(t, DevicePtr{address}, bytes, *tier_).id;
  }
  uint64_t swap_in(TensorId t, uint64_t address, uint64_t bytes) {
    return engine_->swap_in(t, DevicePtr{address}, bytes, *tier_).id;
  }
  void wait(uint64_t ticket) {
    Status s;
    {
      py::gil_scoped_release release;
      s = engine_->wait(TransferTicket{ticket});
    }
    ok_or_raise(s);
  }
  bool done(uint64_t ticket) const { return engine_->done(TransferTicket{ticket}); }
  void discard(TensorId t) {
    Status s;
    {
      py::gil_scoped_release release;
      s = engine_->discard(t, *tier_);
    }
    ok_or_raise(s);
  }
  void drain() {
    Status s;
    {
      py::gil_scoped_release release;
      s = engine_->drain();
    }
    ok_or_raise(s);
  }
  py::dict stats() const {
    const TransferEngineStats e = engine_->stats();
    const TierStats t = tier_->stats();
    py::dict d;
    d["swap_outs"] = e.swap_outs;
    d["swap_ins"] = e.swap_ins;
    d["bytes_out"] = e.bytes_out;
    d["bytes_in"] = e.bytes_in;
    d["out_busy_ms"] = e.out_busy_us / 1e3;
    d["in_busy_ms"] = e.in_busy_us / 1e3;
    d["tier_capacity_bytes"] = t.capacity_bytes;
    d["tier_peak_bytes"] = t.peak_in_use_bytes;
    return d;
  }

 private:
  TorchMemory memory_;
  std::unique_ptr<SwapTier> tier_;
  std::unique_ptr<TransferEngine> engine_;
};

}  // namespace
}  // namespace ferry

PYBIND11_MODULE(_ferry, m) {
  using namespace ferry;
  m.doc() = "Ferry's planner, simulator and transfer engine for the PyTorch adapter (ferry.torch)";
  m.def("plan", &plan, py::arg("trace_json"), py::arg("budget_bytes"), py::arg("tier") = "host",
        py::arg("device") = "cpu-local", py::arg("framework_saved") = std::vector<bool>{},
        py::arg("allow_recompute") = false, py::arg("policy") = "ferry",
        py::arg("op_scratch_bytes") = std::vector<uint64_t>{}, py::arg("replayable_ops") = std::vector<bool>{},
        "Plans a recorded iteration (Ferry trace JSON) for a device budget; returns a dict");
  m.def("parse_bytes", [](const std::string& text) {
    const BudgetSpec b = value_or_raise(parse_budget(text));
    if (b.percent) throw py::value_error("'" + text + "' is a percentage; give bytes (e.g. 2GiB)");
    return b.bytes;
  }, "Bytes of a size such as '2GiB', '512MiB' or '1e9' (Ferry's --budget syntax)");
  m.def("format_bytes", &format_bytes);
  py::class_<Engine>(m, "Engine")
      .def(py::init<const std::string&, uint64_t, const std::string&>(), py::arg("tier"), py::arg("capacity_bytes"),
           py::arg("directory") = "")
      .def("swap_out", &Engine::swap_out)
      .def("swap_in", &Engine::swap_in)
      .def("wait", &Engine::wait)
      .def("done", &Engine::done)
      .def("discard", &Engine::discard)
      .def("drain", &Engine::drain)
      .def("stats", &Engine::stats);
}
