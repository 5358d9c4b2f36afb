#!/usr/bin/env bash
# Installs dependencies, builds Ferry and runs every test with CTest.
# Usage: scripts/test.sh [--sanitize]   (--sanitize: an ASan+UBSan build in build-asan/)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$("$root/scripts/build.sh" "$@")
# The machine may be shared: threads that sleep instead of spinning keep parallel tests fast.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
cd "$dir"
ctest --output-on-failure -j "$(nproc)" --timeout 1200
