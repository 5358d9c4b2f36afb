#!/usr/bin/env bash
# Planning speed (issue 13's target: a 10,000-op graph planned and simulated in under 1 s, 100,000
# ops in under 10 s). For pre-activation ResNets of growing depth (default 164, 1001, 2504: about
# 1.7k, 10.7k and 27k ops), runs `ferry plan --json` (policy ferry, the default with a budget) and
# prints the wall time of each stage as the process measured it (`"seconds"`: planning = the
# ferry planner with its seed portfolio, simulation = the reported plan's simulation, bound = the
# LP lower bound), the process's own wall time, and the plan's predicted ratio to its bound.
# Every time is measured on this machine (shared; run it when quiet); the ratios are predicted.
# Usage: bench/planning_speed.sh [--depths "164 1001"] [--device PROFILE] [--budget 33%] [--batch 64]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ferry=${FERRY:-$("$root/scripts/build.sh")/ferry}
depths="164 1001 2504"
device=v100-16gb-pcie3
budget=33%
batch=64
while [ $# -gt 0 ]; do
  case $1 in
    --depths) depths=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    *) echo "usage: bench/planning_speed.sh [--depths \"164 1001\"] [--device PROFILE] [--budget B] [--batch N]" >&2
       exit 2 ;;
  esac
done
echo "ferry plan --model preact-resnet --depth D --batch $batch --device $device --budget $budget --json"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| depth | ops | planning s | simulation s | bound s | process s | predicted iteration ms | gap (plan / bound) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for d in $depths; do
  ops=$("$ferry" analyze --model preact-resnet --depth "$d" --batch "$batch" --json | /usr/bin/python3 -c \
        'import json, sys; print(json.load(sys.stdin)["ops"])')
  start=$(date +%s.%N)
  out=$("$ferry" plan --model preact-resnet --depth "$d" --batch "$batch" --device "$device" --budget "$budget" --json)
  end=$(date +%s.%N)
  /usr/bin/python3 - "$d" "$ops" "$start" "$end" "$out" <<'PY'
import json, sys
d, ops, start, end, j = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), json.loads(sys.argv[5])
s = j["seconds"]
print(f"| {d} | {ops} | {s['planning']:.2f} | {s['simulation']:.2f} | {s['bound']:.2f} | {end - start:.2f} | "
      f"{j['iteration_ms']:.2f} | {j['gap']:.3f} |")
PY
done
