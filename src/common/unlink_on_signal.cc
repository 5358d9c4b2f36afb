#include "common/unlink_on_signal.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>

namespace ferry {

namespace {

struct Slot {
  std::atomic<bool> claimed{false};
  std::atomic<bool> armed{false};  // the path is complete and may be unlinked
  char path[UnlinkOnSignal::kMaxPathBytes];
};

Slot g_slots[UnlinkOnSignal::kMaxPaths];

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction g_previous[sizeof(kSignals) / sizeof(kSignals[0])];

void on_signal(int sig) {
  for (Slot& s : g_slots)
    if (s.armed.load(std::memory_order_acquire)) ::unlink(s.path);
  for (size_t i = 0; i < sizeof(kSignals) / sizeof(kSignals[0]); ++i)
    if (kSignals[i] == sig) ::sigaction(sig, &g_previous[i], nullptr);
  ::raise(sig);
}

void install_handlers_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (size_t i = 0; i < sizeof(kSignals) / sizeof(kSignals[0]); ++i) {
      struct sigaction sa {};
      sa.sa_handler = on_signal;
      sigemptyset(&sa.sa_mask);
      sa.sa_flags = SA_RESETHAND;
      ::sigaction(kSignals[i], &sa, &g_previous[i]);
      // A signal the process ignored stays ignored (e.g. SIGHUP under nohup).
      if (g_previous[i].sa_handler == SIG_IGN) ::sigaction(kSignals[i], &g_previous[i], nullptr);
    }
  });
}

}  // namespace

UnlinkOnSignal::UnlinkOnSignal(const std::string& path) {
  if (path.size() + 1 > static_cast<size_t>(kMaxPathBytes)) return;
  install_handlers_once();
  for (int i = 0; i < kMaxPaths; ++i) {
    bool expected = false;
    if (!g_slots[i].claimed.compare_exchange_strong(expected, true)) continue;
    std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
    g_slots[i].armed.store(true, std::memory_order_release);
    slot_ = i;
    return;
  }
}

UnlinkOnSignal::~UnlinkOnSignal() {
  if (slot_ < 0) return;
  g_slots[slot_].armed.store(false, std::memory_order_release);
  g_slots[slot_].claimed.store(false, std::memory_order_release);
}

}  // namespace ferry
