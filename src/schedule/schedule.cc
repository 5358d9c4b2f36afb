#include "schedule/schedule.h"

namespace ferry {

std::string_view to_string(ActionKind k) {
  switch (k) {
    case ActionKind::kSwapOut: return "swap_out";
    case ActionKind::kRelease: return "release";
    case ActionKind::kSwapIn: return "swap_in";
    case ActionKind::kRecompute: return "recompute";
  }
  return "?";
}


}  // namespace ferry
