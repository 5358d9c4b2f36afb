#!/usr/bin/env bash
# Installs dependencies, builds Ferry and runs its main job on the built-in default.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$("$root/scripts/build.sh")
# Threads that sleep instead of spinning keep a shared machine responsive (and fast).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
exec "$dir/ferry" train "$@"
