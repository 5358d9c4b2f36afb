#!/usr/bin/env bash
# Simulator fidelity: does the prediction of a planned training iteration match the run?
#
# Per model, in this order:
#   1. `ferry profile` (a separate, earlier process): every op's time, memcpy and direct-I/O
#      bandwidths of this machine -> MODEL.trace.json (op times) + MODEL.hw.json (profile).
#   2. `ferry train` without a policy (with --op-times/--device): the no-swap run; its predicted
#      arena is the no-swap peak the budgets are fractions of.
#   3. per seed policy and tier (host, ssd): `ferry plan --trace MODEL.trace.json --device
#      MODEL.hw.json --tier T --find-min-budget` (the policy's own minimum on that tier), then per
#      budget (that minimum, and 50% of the no-swap peak when it is feasible): `ferry train --policy P --budget B
#      --tier T --op-times MODEL.trace.json --device MODEL.hw.json --static-plan --json`. That run
#      plans, predicts the exact schedule it executes with the simulator (from step 1's figures
#      only: --static-plan keeps the dynamic loop from re-planning on figures measured in the run),
#      then runs and measures it; both land in one JSON.
# bench/fidelity_table.py turns the JSON files into a table: predicted vs measured iteration time,
# peaks, and the distribution of measured/predicted time over every transfer. Recompute-only
# policies (checkpoint-sqrt, checkmate) never touch a tier: they run once, on the host tier.
#
# Usage: bench/fidelity.sh [--quick] [--out DIR] [--iters N] [--models "SPEC;SPEC"] [--policies LIST]
#   (the machine is shared: run it when it is quiet; progress goes to stderr)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
models="resnet18 --batch 8 --image 96;densenet121 --batch 4 --image 64;gpt2 --batch 2 --seq 128"
policies="vdnn-all,vdnn-conv,lru,lms,capuchin,checkpoint-sqrt,checkmate"
iters=6
out=""
ferry=${FERRY:-}
while (($#)); do
  case $1 in
    --quick) models="resnet-mini --batch 8;densenet-mini --batch 8;gpt2-mini --batch 4 --seq 64"; iters=4; shift ;;
    --out) out=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --policies) policies=$2; shift 2 ;;
    --ferry) ferry=$2; shift 2 ;;
    -h|--help) sed -n 2,24p "$0"; exit 0 ;;
    *) echo "fidelity.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -n $ferry ]] || ferry="$("$root/scripts/build.sh")/ferry"
[[ -n $out ]] || out=$(mktemp -d /tmp/ferry-fidelity.XXXX)
mkdir -p "$out"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
echo "fidelity: results under $out" >&2

# tag_case FILE MODEL POLICY BUDGET TIER: records which case a JSON file is, for fidelity_table.py.
tag_case() {
  /usr/bin/python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); j["case"]=dict(zip(("model","policy","budget","tier"),sys.argv[2:])); json.dump(j,open(sys.argv[1],"w"))' "$@"
}

IFS=';' read -ra specs <<<"$models"
IFS=',' read -ra pols <<<"$policies"
for spec in "${specs[@]}"; do
  read -ra args <<<"$spec"
  name=$(echo "$spec" | tr -s ' ' '_' | tr -d -- '-')
  trace="$out/$name.trace.json" hw="$out/$name.hw.json"
  echo "[$name] profiling (an earlier, separate run)" >&2
  "$ferry" profile --model "${args[@]}" --iters "$iters" --warmup 2 --out "$trace" --hardware-out "$hw" \
    --storage-bytes 256MiB >"$out/$name.profile.txt" 2>&1 || { echo "  profile failed" >&2; continue; }
  common=(--model "${args[@]}" --iters "$iters" --op-times "$trace" --device "$hw" --json --no-progress)
  "$ferry" train "${common[@]}" >"$out/$name.none.json" 2>"$out/$name.none.err" || { echo "  no-swap run failed" >&2; continue; }
  tag_case "$out/$name.none.json" "$spec" none - -
  peak=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["predicted_peak_bytes"])' "$out/$name.none.json")
  for p in "${pols[@]}"; do
    tiers=(host ssd)
    [[ $p == checkpoint-sqrt || $p == checkmate ]] && tiers=(host)
    extra=()
    [[ $p == checkmate ]] && extra=(--checkmate-time-limit 60)
    for t in "${tiers[@]}"; do
      # The minimum is the policy's own on this tier: a policy that weighs transfer times (capuchin,
      # lms) plans differently for the slower SSD link.
      min=$("$ferry" plan --trace "$trace" --device "$hw" --policy "$p" --tier "$t" "${extra[@]}" --find-min-budget \
              --json 2>"$out/$name.$p.$t.min.err" |
            /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["min_budget_bytes"])' 2>/dev/null) || min=""
      if [[ -z $min ]]; then echo "  $p tier $t: no minimum ($(tail -c 200 "$out/$name.$p.$t.min.err"))" >&2; continue; fi
      half=$((peak / 2))
      budgets=("min:$min")
      ((half >= min)) && budgets+=("50%:$half")
      for b in "${budgets[@]}"; do
        label=${b%%:*}; bytes=${b#*:}
        f="$out/$name.$p.${label%\%}.$t.json"
        echo "  $p budget $label ($bytes bytes) tier $t" >&2
        "$ferry" train "${common[@]}" --policy "$p" --budget "$bytes" --tier "$t" --static-plan "${extra[@]}" \
          >"$f" 2>"${f%.json}.err" || echo "    failed: $(tail -c 300 "${f%.json}.err")" >&2
        tag_case "$f" "$spec" "$p" "$label" "$t" 2>/dev/null || true
      done
    done
  done
done
/usr/bin/python3 "$root/bench/fidelity_table.py" "$out"
