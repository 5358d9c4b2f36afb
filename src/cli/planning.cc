#include "cli/planning.h"

#include <fmt/format.h>

#include "backend/backend.h"

namespace ferry::cli {

Result<std::vector<uint64_t>> apply_backend_sizes(Graph& g) {
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, make_backend("cpu"));
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<CompiledGraph> compiled, backend->compile(g));
  for (Tensor& t : g.tensors) t.bytes = compiled->tensor_bytes(t.id);
  return compiled->all_scratch_bytes();
}

Result<Tier> parse_tier(const std::string& s) {
  if (s == "host") return Tier::kHost;
  if (s == "ssd") return Tier::kSsd;
  return Status::InvalidArgument(fmt::format("unknown tier '{}' (use host or ssd)", s));
}

}  // namespace ferry::cli
