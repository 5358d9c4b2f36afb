#include "backend/backend.h"

#include <fmt/format.h>

#include "backend/cpu/cpu_backend.h"

namespace ferry {

std::vector<uint64_t> CompiledGraph::all_tensor_bytes() const {
  std::vector<uint64_t> bytes(num_tensors());
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = tensor_bytes(static_cast<TensorId>(i));
  return bytes;
}

std::vector<uint64_t> CompiledGraph::all_scratch_bytes() const {
  std::vector<uint64_t> bytes(num_ops());
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = scratch_bytes(static_cast<OpId>(i));
  return bytes;
}

std::string_view to_string(ConvAlgorithm a) {
  switch (a) {
    case ConvAlgorithm::kAuto:
      return "auto";
    case ConvAlgorithm::kDirect:
      return "direct";
    case ConvAlgorithm::kWinograd:
      return "winograd";
  }
  return "?";
}

Result<ConvAlgorithm> parse_conv_algorithm(std::string_view s) {
  for (ConvAlgorithm a : {ConvAlgorithm::kAuto, ConvAlgorithm::kDirect, ConvAlgorithm::kWinograd})
    if (s == to_string(a)) return a;
  return Status::InvalidArgument(fmt::format("unknown convolution algorithm '{}' (use auto, direct or winograd)", s));
}

Graph with_backend_sizes(const Graph& g, const CompiledGraph& compiled) {
  Graph sized = g;
  for (Tensor& t : sized.tensors) t.bytes = compiled.tensor_bytes(t.id);
  return sized;
}

Result<std::unique_ptr<Backend>> make_backend(std::string_view name, const BackendOptions& options) {
  if (name == "cpu") return make_cpu_backend(options);
  return Status::InvalidArgument(fmt::format("unknown backend '{}' (known: cpu)", name));
}

}  // namespace ferry
