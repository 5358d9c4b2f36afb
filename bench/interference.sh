#!/usr/bin/env bash
# Compute interference on the CPU backend (docs/cost-model.md, "Compute interference"): does a
# plan made knowing that copies slow the kernels run faster, and is it predicted better, than one
# made as if hidden copies were free? Per tier and budget: one calibration process measures op and
# link figures (`ferry train --policy ferry --codec none`, a fresh profile cache); then ROUNDS
# rounds, each running, in this order, the model without a plan, the plan from those figures on
# `cpu-local` (with its measured compute interference, "aware") and the same on a copy of
# `cpu-local` without interference ("blind"), all with --static-plan. Prints per case the median
# iteration time (first iteration dropped) and ratios, per round and their medians, and each
# plan's predicted time beside its measured one.
# Usage: bench/interference.sh [--rounds N] [--tiers "ssd host"] [--budgets "33% 25%"] [--out DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ferry="$root/build/ferry"
[[ -x $ferry ]] || ferry="$("$root/scripts/build.sh")/ferry"
rounds=5 tiers="ssd host" budgets="33% 25%" out=""
while (($#)); do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --tiers) tiers=$2; shift 2 ;;
    --budgets) budgets=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "interference.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "interference.sh: --rounds must be a positive integer" >&2; exit 2; }
out=${out:-$(mktemp -d /tmp/ferry-interference.XXXXXX)}
mkdir -p "$out"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
model=(--model preact-resnet --depth 56 --batch 32)
# cpu-local without its compute interference: the same figures, copies scored and simulated free.
/usr/bin/python3 - "$root/profiles/cpu-local.json" "$out/blind.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for k in ('host_to_device', 'device_to_host'): d['host_link'][k].pop('compute_interference', None)
for k in ('read_compute_interference', 'write_compute_interference'): d['storage'].pop(k, None)
d['name'] = 'cpu-local-blind'
json.dump(d, open(sys.argv[2], 'w'), indent=1)
PY
for tier in $tiers; do
  for b in $budgets; do
    tag="$tier-${b%\%}"
    cache="$out/cache-$tag"
    rm -rf "$cache"
    echo "calibrating $tag..." >&2
    XDG_CACHE_HOME=$cache "$ferry" train "${model[@]}" --budget "$b" --tier "$tier" --codec none --iters 4 \
      --json --no-progress > "$out/cal-$tag.json"
    fig=$(find "$cache" -name '*.json' | head -1)
    for r in $(seq 1 "$rounds"); do
      echo "  $tag round $r/$rounds" >&2
      "$ferry" train "${model[@]}" --iters 7 --json --no-progress > "$out/$tag-none-$r.json"
      for v in aware blind; do
        dev=cpu-local
        [[ $v == blind ]] && dev="$out/blind.json"
        "$ferry" train "${model[@]}" --budget "$b" --tier "$tier" --codec none --profile "$fig" --static-plan \
          --no-cache --device "$dev" --iters 7 --json --no-progress > "$out/$tag-$v-$r.json"
      done
    done
  done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
exec /usr/bin/python3 "$root/bench/interference_table.py" "$out"
