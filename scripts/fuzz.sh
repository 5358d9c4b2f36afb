#!/usr/bin/env bash
# Builds one libFuzzer harness of tests/fuzz (clang, ASan + UBSan, in build-fuzz/) and runs it.
# Usage: scripts/fuzz.sh TARGET SECONDS [libFuzzer options...]
#   TARGET: trace (the trace reader), profile (the hardware-profile reader), units (the size and
#   budget parsers). The seeds in tests/fuzz/corpus/TARGET are read, never written; what the run
#   finds goes to build-fuzz/corpus/TARGET (kept between runs) and crashes to build-fuzz/crashes/.
#   Exit status: 0 when no input crashed the harness, libFuzzer's otherwise.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [[ $# -lt 2 ]]; then
  echo "usage: scripts/fuzz.sh trace|profile|units SECONDS [libFuzzer options...]" >&2
  exit 2
fi
target=$1 seconds=$2
shift 2
case $target in
  trace | profile | units) ;;
  *) echo "fuzz.sh: unknown target '$target' (trace, profile or units)" >&2; exit 2 ;;
esac
"$root/scripts/install-deps.sh"
if ! command -v clang++ >/dev/null; then
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  $sudo apt-get install -y -qq --no-install-recommends clang >/dev/null
fi
dir="$root/build-fuzz"
CC=clang CXX=clang++ cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFERRY_FUZZ=ON \
  -DFERRY_BUILD_TESTS=OFF >/dev/null
cmake --build "$dir" -j "$(nproc)" --target "fuzz_$target" >&2
mkdir -p "$dir/corpus/$target" "$dir/crashes/$target"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
exec "$dir/fuzz_$target" -max_total_time="$seconds" -dict="$root/tests/fuzz/$target.dict" \
  -artifact_prefix="$dir/crashes/$target/" -print_final_stats=1 "$@" "$dir/corpus/$target" "$root/tests/fuzz/corpus/$target"
