#!/usr/bin/env bash
# Planning speed (issue 13's target: a 10,000-op graph planned and simulated in under 1 s, 100,000
# ops in under 10 s). For pre-activation ResNets of growing depth (default 164, 1001, 2504: about
# 1.7k, 10.7k and 27k ops), runs `ferry plan --json` (policy ferry, the default with a budget) and
# prints the wall time of each stage as the process measured it (`"seconds"`: planning = the
# ferry planner with its seed portfolio, simulation = the reported plan's simulation, bound = the
# LP lower bound), the process's own wall time, and the plan's predicted ratio to its bound.
# With --against BINARY, each depth is also planned by that binary (an earlier build), the two
# alternating --rounds times, and the table gives both binaries' medians side by side, their ratio,
# and whether the two plans predict the same iteration time.
# Every time is measured on this machine (shared; run it when quiet); the ratios are predicted.
# Usage: bench/planning_speed.sh [--depths "164 1001"] [--device PROFILE] [--budget 33%] [--batch 64]
#                                [--against BINARY] [--rounds N]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ferry=${FERRY:-$("$root/scripts/build.sh")/ferry}
depths="164 1001 2504"
device=v100-16gb-pcie3
budget=33%
batch=64
against=""
rounds=1
while [ $# -gt 0 ]; do
  case $1 in
    --depths) depths=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --against) against=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) echo "usage: bench/planning_speed.sh [--depths \"164 1001\"] [--device PROFILE] [--budget B] [--batch N]" \
            "[--against BINARY] [--rounds N]" >&2
       exit 2 ;;
  esac
done
echo "ferry plan --model preact-resnet --depth D --batch $batch --device $device --budget $budget --json"
echo "binary: $ferry${against:+; against: $against}; rounds: $rounds"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# One run: the JSON with the process's wall time added as "process_s".
run() {  # binary depth out
  local start end
  start=$(date +%s.%N)
  "$1" plan --model preact-resnet --depth "$2" --batch "$batch" --device "$device" --budget "$budget" --json > "$3.raw"
  end=$(date +%s.%N)
  /usr/bin/python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); j["process_s"] = float(sys.argv[3]) - float(sys.argv[2]); json.dump(j, open(sys.argv[4], "w"))' \
    "$3.raw" "$start" "$end" "$3"
}
for d in $depths; do
  "$ferry" analyze --model preact-resnet --depth "$d" --batch "$batch" --json > "$tmp/ops-$d.json"
  for r in $(seq 1 "$rounds"); do
    if [ -n "$against" ]; then run "$against" "$d" "$tmp/base-$d-$r.json"; fi
    run "$ferry" "$d" "$tmp/new-$d-$r.json"
  done
done
/usr/bin/python3 - "$tmp" "$rounds" "$against" $depths <<'PY'
import json, statistics, sys
tmp, rounds, against, depths = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
def load(kind, d):
    return [json.load(open(f"{tmp}/{kind}-{d}-{r}.json")) for r in range(1, rounds + 1)]
med = lambda runs, f: statistics.median(f(j) for j in runs)
if not against:
    print("| depth | ops | planning s | simulation s | bound s | process s | predicted iteration ms | gap (plan / bound) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for d in depths:
        ops = json.load(open(f"{tmp}/ops-{d}.json"))["ops"]
        n = load("new", d)
        print(f"| {d} | {ops} | {med(n, lambda j: j['seconds']['planning']):.2f} | "
              f"{med(n, lambda j: j['seconds']['simulation']):.2f} | {med(n, lambda j: j['seconds']['bound']):.2f} | "
              f"{med(n, lambda j: j['process_s']):.2f} | {n[0]['iteration_ms']:.2f} | {n[0]['gap']:.3f} |")
    sys.exit(0)
print("Medians over the rounds, seconds (measured); base = --against, new = this build.")
print()
print("| depth | ops | planning base | planning new | base / new | bound base | bound new | base / new "
      "| process base | process new | base / new | same predicted plan time | gap new |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for d in depths:
    ops = json.load(open(f"{tmp}/ops-{d}.json"))["ops"]
    b, n = load("base", d), load("new", d)
    cells = []
    for f in (lambda j: j["seconds"]["planning"], lambda j: j["seconds"]["bound"], lambda j: j["process_s"]):
        x, y = med(b, f), med(n, f)
        cells += [f"{x:.2f}", f"{y:.2f}", f"{x / y:.2f}"]
    same = all(abs(x["iteration_ms"] - n[0]["iteration_ms"]) <= 1e-9 * n[0]["iteration_ms"] for x in b + n)
    print(f"| {d} | {ops} | " + " | ".join(cells) + f" | {'yes' if same else 'NO'} | {n[0]['gap']:.3f} |")
PY
echo
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
