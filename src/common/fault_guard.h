// Fault guard: turns an access to a guard page (memory Ferry made inaccessible on purpose) into a
// one-line error that names what the process was doing, instead of an anonymous SIGSEGV.
//
// Design
// - Memory whose end is a hard limit (the device arena: bytes past the budget must not exist)
//   is mapped with PROT_NONE guard pages around it (HostRegion, guard_bytes). A kernel that writes
//   past its tensor and past the budget then faults at the first byte beyond it.
// - A process-wide SIGSEGV/SIGBUS handler (installed once, on an alternate stack so that a stack
//   overflow still reports) looks the faulting address up in a small fixed table of guarded
//   ranges. A hit prints "ferry: error: <activity> touched <region> at <n> bytes past its end ..."
//   with write(2) only (async-signal-safe) and exits with code 1. A miss restores the default
//   action and returns, so the fault repeats and the process dies as it would have without Ferry.
// - The activity is a label the runtime sets before each kernel ("op 'conv1' (step 3)"); kernels
//   run on OpenMP worker threads, so it is one process-wide atomic pointer, not thread-local. The
//   label's storage must outlive the activity (the executor keeps them for the graph's lifetime).
// - Fixed capacity (kMaxGuardedRanges): registration beyond it is refused, and that region simply
//   faults without a named message.
#pragma once

#include <cstdint>

namespace ferry {

inline constexpr int kMaxGuardedRanges = 64;

// Registers [begin, end) as a guard range belonging to the region named `region_name` whose
// usable bytes are [usable_begin, usable_end). `region_name` must stay valid until unregistered.
// Returns a handle (>= 0), or -1 when the table is full.
int register_guard_range(uintptr_t begin, uintptr_t end, uintptr_t usable_begin, uintptr_t usable_end,
                         const char* region_name);
// Removes a range registered with the handle; ignores -1.
void unregister_guard_range(int handle);

// Sets the label printed when a guard page is touched (nullptr: "the process"); returns the
// previous one. The string must stay valid while it is set.
const char* set_fault_activity(const char* label);

// RAII: sets the activity label for a scope and restores the previous one.
class ScopedFaultActivity {
 public:
  explicit ScopedFaultActivity(const char* label) : previous_(set_fault_activity(label)) {}
  ~ScopedFaultActivity() { set_fault_activity(previous_); }
  ScopedFaultActivity(const ScopedFaultActivity&) = delete;
  ScopedFaultActivity& operator=(const ScopedFaultActivity&) = delete;

 private:
  const char* previous_;
};

}  // namespace ferry
