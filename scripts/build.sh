#!/usr/bin/env bash
# Configures and builds Ferry. Usage: scripts/build.sh [--sanitize] ; prints the build directory.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/build"
args=(-DCMAKE_BUILD_TYPE=Release)
if [[ ${1:-} == --sanitize ]]; then
  dir="$root/build-asan"
  args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DFERRY_SANITIZE=ON)
fi
"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$dir" "${args[@]}" >/dev/null
cmake --build "$dir" -j "$(nproc)" >&2
echo "$dir"
