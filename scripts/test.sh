#!/usr/bin/env bash
# Installs dependencies, builds Ferry and runs every test with CTest.
# Usage: scripts/test.sh [--sanitize | --tsan] [ctest options, or gtest options with --tsan...]
#   --sanitize: an ASan+UBSan build in build-asan/, every test
#   --tsan:     a ThreadSanitizer build in build-tsan/ of the runtime's tests (transfer engine,
#               tiers, executor), run with one OpenMP thread: libgomp is not instrumented, so
#               TSan cannot see its synchronisation and would report oneDNN's parallel regions;
#               the runtime's own threads (transfer engine, SSD tier) are what this build checks.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=()
if [[ ${1:-} == --sanitize || ${1:-} == --tsan ]]; then
  mode=("$1")
  shift
fi
dir=$("$root/scripts/build.sh" "${mode[@]}")
# The machine may be shared: threads that sleep instead of spinning keep parallel tests fast.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
cd "$dir"
if [[ ${mode[0]:-} == --tsan ]]; then
  export OMP_NUM_THREADS=1
  export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$root/scripts/tsan.supp}
  exec "$dir/runtime_tests" "$@"
fi
ctest --output-on-failure -j "$(nproc)" --timeout 1200 "$@"
