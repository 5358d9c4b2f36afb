// libFuzzer harness of the one size and budget parser (common/units.h). Whatever the text, the
// parsers return; an accepted size is exact (a plain integer parses to its value) and formats;
// an accepted budget is a byte count > 0 or a percentage in (0, 1000] that resolves without
// overflow. Run with scripts/fuzz.sh units SECONDS.
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/units.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  ferry::Result<uint64_t> bytes = ferry::parse_bytes(text);
  if (bytes.ok()) {
    if (ferry::format_bytes(*bytes).empty()) std::abort();
    if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos) {
      errno = 0;
      const unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
      if (errno != 0 || v != *bytes) std::abort();
    }
  } else if (bytes.status().code() != ferry::StatusCode::kInvalidArgument) {
    std::abort();
  }
  ferry::Result<ferry::BudgetSpec> budget = ferry::parse_budget(text);
  if (budget.ok()) {
    if (budget->percent) {
      if (!(*budget->percent > 0) || *budget->percent > ferry::kMaxBudgetPercent) std::abort();
    } else if (budget->bytes == 0 || !bytes.ok() || budget->bytes != *bytes) {
      std::abort();
    }
    for (uint64_t reference : {uint64_t{0}, uint64_t{1}, uint64_t{4693888}, UINT64_MAX}) {
      const uint64_t b = budget->resolve(reference);
      if (b == 0) std::abort();
      (void)budget->describe(reference);
    }
  } else if (budget.status().code() != ferry::StatusCode::kInvalidArgument) {
    std::abort();
  }
  return 0;
}
