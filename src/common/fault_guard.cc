#include "common/fault_guard.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>

namespace ferry {

namespace {

struct GuardRange {
  std::atomic<bool> used{false};
  uintptr_t begin = 0, end = 0;
  uintptr_t usable_begin = 0, usable_end = 0;
  const char* name = nullptr;
};

GuardRange g_ranges[kMaxGuardedRanges];
std::atomic<const char*> g_activity{nullptr};
std::mutex g_install_mu;
bool g_installed = false;
struct sigaction g_previous_segv {}, g_previous_bus {};

// Async-signal-safe formatting: appends to a fixed buffer.
struct Line {
  char buf[512];
  size_t n = 0;
  void put(const char* s) {
    if (s == nullptr) s = "(null)";
    for (; *s != '\0' && n + 1 < sizeof buf; ++s) buf[n++] = *s;
  }
  void put_u64(uint64_t v) {
    char digits[24];
    int k = 0;
    do {
      digits[k++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0);
    while (k > 0 && n + 1 < sizeof buf) buf[n++] = digits[--k];
  }
};

void on_fault(int sig, siginfo_t* info, void* /*context*/) {
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (const GuardRange& r : g_ranges) {
    if (!r.used.load(std::memory_order_acquire) || addr < r.begin || addr >= r.end) continue;
    Line line;
    line.put("ferry: error: ");
    const char* activity = g_activity.load(std::memory_order_acquire);
    line.put(activity != nullptr ? activity : "the process");
    line.put(" touched a guard page of '");
    line.put(r.name);
    if (addr >= r.usable_end) {
      line.put("' ");
      line.put_u64(addr - r.usable_end);
      line.put(" bytes past its end (it holds ");
    } else {
      line.put("' ");
      line.put_u64(r.usable_begin - addr);
      line.put(" bytes before its start (it holds ");
    }
    line.put_u64(r.usable_end - r.usable_begin);
    line.put(" bytes): a kernel wrote outside the memory it was given\n");
    ssize_t ignored = write(STDERR_FILENO, line.buf, line.n);
    (void)ignored;
    _exit(1);
  }
  // Not ours: let the previous disposition handle it (the fault repeats on return).
  sigaction(sig, sig == SIGSEGV ? &g_previous_segv : &g_previous_bus, nullptr);
}

void install_once() {
  std::lock_guard<std::mutex> lock(g_install_mu);
  if (g_installed) return;
  g_installed = true;
  // An alternate stack, so that the handler runs even when the fault is a stack overflow.
  static char alt_stack[64 * 1024];
  stack_t ss{};
  ss.ss_sp = alt_stack;
  ss.ss_size = sizeof alt_stack;
  sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &g_previous_segv);
  sigaction(SIGBUS, &sa, &g_previous_bus);
}

}  // namespace

int register_guard_range(uintptr_t begin, uintptr_t end, uintptr_t usable_begin, uintptr_t usable_end,
                         const char* region_name) {
  install_once();
  std::lock_guard<std::mutex> lock(g_install_mu);  // registrations are rare; the handler never locks
  for (int i = 0; i < kMaxGuardedRanges; ++i) {
    GuardRange& r = g_ranges[i];
    if (r.used.load(std::memory_order_relaxed)) continue;
    r.begin = begin;
    r.end = end;
    r.usable_begin = usable_begin;
    r.usable_end = usable_end;
    r.name = region_name;
    r.used.store(true, std::memory_order_release);
    return i;
  }
  return -1;
}

void unregister_guard_range(int handle) {
  if (handle < 0 || handle >= kMaxGuardedRanges) return;
  std::lock_guard<std::mutex> lock(g_install_mu);
  g_ranges[handle].used.store(false, std::memory_order_release);
}

const char* set_fault_activity(const char* label) { return g_activity.exchange(label, std::memory_order_acq_rel); }

}  // namespace ferry
