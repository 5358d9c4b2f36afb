#!/usr/bin/env bash
# Installs dependencies, builds Ferry and runs its main job on the built-in default.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$("$root/scripts/build.sh")
exec "$dir/ferry" train "$@"
