#!/usr/bin/env bash
# Simulator fidelity: profile a configuration, predict it with `ferry plan` from the profile, then
# measure a real `ferry train` of the same configuration; print predicted/measured iteration time
# and peak device bytes side by side.
# Usage: bench/fidelity.sh [ITERS]     (the machine is shared: run it when it is quiet)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$("$root/scripts/build.sh")
ferry="$dir/ferry"
iters=${1:-6}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
printf '%-28s %12s %12s %7s %14s %14s %6s\n' config pred_ms meas_ms ratio pred_peak meas_peak exact
for cfg in "resnet50 --batch 4" "resnet50 --batch 8" "gpt2 --batch 2 --seq 256" "gpt2 --batch 4 --seq 256"; do
  set -- $cfg
  model=$1; shift
  "$ferry" profile --model "$model" "$@" --threads 2 --iters "$iters" --warmup 2 --out "$work/t.json" \
    --hardware-out "$work/hw.json" --storage-bytes 64MiB >/dev/null 2>&1
  plan=$("$ferry" plan --trace "$work/t.json" --device "$work/hw.json" --json)
  train=$("$ferry" train --model "$model" "$@" --threads 2 --iters $((iters + 1)) --json --no-progress)
  python3 - "$cfg" "$plan" "$train" <<'PY'
import json, sys
cfg, plan, train = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
p, m = plan["iteration_ms"], train["median_iter_ms"]
pp, mp = plan["peak_bytes"], train["peak_device_bytes"]
print(f"{cfg:28s} {p:12.1f} {m:12.1f} {p/m:7.3f} {pp:14d} {mp:14d} {'yes' if pp == mp else 'NO':>6s}")
PY
done
