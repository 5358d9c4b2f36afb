#!/usr/bin/env bash
# Codecs on the host tier, measured: `ferry train --tier host --codec NAME` for every lossless codec
# on one model and plan, side by side in interleaved rounds (none, each codec, and the run without a
# plan, in turn, `--rounds` times, so that drift of this shared machine hits all alike). Prints per
# codec the median over rounds of the run's median iteration time and its ratio to raw host copies
# (codec none) and to the run without a plan, the bytes the host tier's memory took per iteration
# (its own counters) and their ratio to raw, the measured peak against the budget, and whether the
# losses are bitwise those of the run without a plan. Every figure is measured.
# Usage: bench/host_codec.sh [--model-args "--model preact-resnet --depth 56 --batch 32"]
#                            [--policy vdnn-all] [--budget 50%] [--iters 8] [--rounds 3]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ferry=${FERRY:-$("$root/scripts/build.sh")/ferry}
model_args="--model preact-resnet --depth 56 --batch 32"
policy=vdnn-all
budget=50%
iters=8
rounds=3
while [ $# -gt 0 ]; do
  case $1 in
    --model-args) model_args=$2; shift 2 ;;
    --policy) policy=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) echo "usage: bench/host_codec.sh [--model-args ARGS] [--policy P] [--budget B] [--iters N] [--rounds R]" >&2
       exit 2 ;;
  esac
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
codecs="none zero-mask lz4 zstd zero-mask+lz4"
base="$ferry train $model_args --iters $iters --seed 1 --no-progress --json"
echo "$base --policy $policy --budget $budget --tier host --codec C"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); rounds: $rounds"
echo
for r in $(seq 1 "$rounds"); do
  $base > "$out/unplanned.$r.json"
  for c in $codecs; do
    $base --policy "$policy" --budget "$budget" --tier host --codec "$c" > "$out/$c.$r.json"
  done
done
/usr/bin/python3 - "$out" "$rounds" "$iters" $codecs <<'PY'
import json, statistics, sys
out, rounds, iters, codecs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
def load(name):
    return [json.load(open(f"{out}/{name}.{r}.json")) for r in range(1, rounds + 1)]
def median_ms(runs):
    return statistics.median(j["median_iter_ms"] for j in runs)
def losses(j):
    return [i["loss"] for i in j["iterations"]]
unplanned = load("unplanned")
ref_losses = losses(unplanned[0])
t_unplanned = median_ms(unplanned)
raw = load("none")
t_raw, b_raw = median_ms(raw), raw[0]["host_tier_bytes_stored"]
print(f"run without a plan: {t_unplanned:.1f} ms per iteration (median of medians)")
print()
print("| codec | ms / iteration | vs raw host copies | vs no plan | host bytes stored / iteration | vs raw | "
      "measured peak / budget | losses bitwise |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for c in codecs:
    runs = load(c)
    t = median_ms(runs)
    stored = runs[0]["host_tier_bytes_stored"]
    peak = max(j["measured_peak_bytes"] for j in runs)
    same = all(losses(j) == ref_losses for j in runs)
    print(f"| {c} | {t:.1f} | {t / t_raw:.3f} | {t / t_unplanned:.3f} | {stored / iters / 2**20:.1f} MiB | "
          f"{stored / b_raw:.3f} | {peak / 2**20:.1f} / {runs[0]['budget_bytes'] / 2**20:.1f} MiB | "
          f"{'yes' if same else 'NO'} |")
PY
