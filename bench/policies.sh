#!/usr/bin/env bash
# Policy benchmark (issue 5): slowdown vs unlimited memory of every swap/recompute policy at
# budgets that are fractions of the no-swap peak, simulated on hardware profiles (`ferry plan`)
# and measured on this machine on the host and SSD tiers (`ferry train`).
#
# Per model:
#   simulated, per profile: `plan --policy none` (no budget) gives the unlimited iteration and the
#     no-swap peak; per policy `--find-min-budget`, then `plan --budget FRACTION*peak`. The profile
#     `local` is this machine measured now: `ferry profile` writes a trace with measured op times
#     and a hardware profile with measured memcpy and disk rates, and `plan --trace` uses both
#     (the shipped profiles/cpu-local.json is the development VM measured once, without op times);
#   measured: `train` without a policy gives the unlimited median iteration and the measured peak
#     (predicted_peak_bytes, the no-swap arena; its measured live peak is measured_peak_bytes); per policy, fraction and tier `train --policy P --budget FRACTION*peak`;
#     finally the unlimited run again, to show how much the machine's speed drifted meanwhile.
# Every run's command, stdout (JSON) and stderr are kept under --out; bench/policy_table.py turns
# them into OUT/table.md (printed) and OUT/table.json. Progress goes to stderr.
#
# Usage: bench/policies.sh [--quick] [options]      (bench/README.md lists the options)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
fmt=(/usr/bin/python3 "$root/bench/policy_table.py")

usage() {
  cat <<'EOF'
Usage: bench/policies.sh [options]
  --models "SPEC;SPEC"   ferry model arguments per model
                         (default: "resnet152 --batch 16 --optimizer sgd;gpt2-medium --batch 1 --seq 1024 --optimizer sgd")
  --fractions LIST       budgets as fractions or percents of the no-swap peak (default: 75,50,33,25)
  --policies LIST        (default: vdnn-all,vdnn-conv,lru,lms,capuchin,checkpoint-sqrt,checkmate)
  --profiles LIST        simulated profiles: names or files from ferry's --device, or `local` = this
                         machine profiled now with `ferry profile` (measured op times, memcpy and disk
                         rates) (default: local,v100-16gb-pcie3,a100-40gb-pcie4)
  --profile-iters N      ferry profile's measured iterations for `local` (default: 3; 1 warm-up)
  --tiers LIST           measured tiers (default: host,ssd)
  --iters N              ferry train iterations per run; the first is left out of the median (default: 3)
  --measure | --no-measure   run the measured part (default: --measure)
  --measure-policies LIST    policies to measure (default: --policies; --quick: all but checkmate)
  --checkmate-time-limit S   CBC limit per solve for simulated checkmate plans (default: Ferry's, 60;
                             --quick: 1). ferry train has no such option.
  --all-runs             also run recompute-only policies (checkpoint-sqrt, checkmate) on the SSD tier
                         (default: their SSD cell repeats the host run, which never touches a tier)
  --threads N            ferry train compute threads (default: ferry's, all cores)
  --ssd-dir DIR          SSD tier directory (default: ferry's, /tmp)
  --out DIR              keep raw JSON per run, table.md, table.json there (default: a new /tmp/ferry-policies.XXXX)
  --ferry PATH           ferry binary (default: build/ferry, built with scripts/build.sh when missing)
  --layout wide|narrow   wide: one simulated table per model with every profile side by side per
                         fraction; narrow: one table per profile (default: wide)
  --precision P          fp32 (default), tf32, amp-fp16 or amp-bf16 for the simulated runs (ferry plan
                         --precision). Other than fp32 it skips the measured part and the `local`
                         profile (ferry train and profile run fp32 only) and says so
  --quick                smoke test: resnet-mini batch 16 and gpt2-mini batch 4 seq 64, iters 2
EOF
}

models="resnet152 --batch 16 --optimizer sgd;gpt2-medium --batch 1 --seq 1024 --optimizer sgd"
fractions="75,50,33,25"
policies="vdnn-all,vdnn-conv,lru,lms,capuchin,checkpoint-sqrt,checkmate"
profiles="local,v100-16gb-pcie3,a100-40gb-pcie4"
profile_iters=3
layout=wide
tiers="host,ssd"
iters=3
measure=1
measure_policies=""
cm_limit=""
all_runs=0
ssd_dir=""
threads=""
out=""
ferry=""
quick=0
precision=fp32
declare -A given=()

need() { [[ $# -ge 2 && -n $2 ]] || { echo "policies.sh: $1 needs a value" >&2; exit 2; }; }
while (($#)); do
  case $1 in
    --models) need "$@"; models=$2; given[models]=1; shift 2 ;;
    --fractions) need "$@"; fractions=$2; shift 2 ;;
    --policies) need "$@"; policies=$2; shift 2 ;;
    --profiles) need "$@"; profiles=$2; shift 2 ;;
    --profile-iters) need "$@"; profile_iters=$2; shift 2 ;;
    --layout) need "$@"; layout=$2; shift 2 ;;
    --tiers) need "$@"; tiers=$2; shift 2 ;;
    --iters) need "$@"; iters=$2; given[iters]=1; shift 2 ;;
    --measure) measure=1; shift ;;
    --no-measure) measure=0; shift ;;
    --measure-policies) need "$@"; measure_policies=$2; given[measure_policies]=1; shift 2 ;;
    --checkmate-time-limit) need "$@"; cm_limit=$2; given[cm_limit]=1; shift 2 ;;
    --all-runs) all_runs=1; shift ;;
    --threads) need "$@"; threads=$2; shift 2 ;;
    --ssd-dir) need "$@"; ssd_dir=$2; shift 2 ;;
    --out) need "$@"; out=$2; shift 2 ;;
    --ferry) need "$@"; ferry=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --precision) need "$@"; precision=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "policies.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
if ((quick)); then
  [[ -n ${given[models]:-} ]] || models="resnet-mini --batch 16 --optimizer sgd;gpt2-mini --batch 4 --seq 64 --optimizer sgd"
  [[ -n ${given[iters]:-} ]] || iters=2
  [[ -n ${given[cm_limit]:-} ]] || cm_limit=1
  # ferry train cannot limit CBC: a measured checkmate run on a small graph takes 1-2 minutes
  # (an infeasible one bisects for its minimum); the quick run leaves those out.
  [[ -n ${given[measure_policies]:-} ]] || measure_policies=$(tr ',' '\n' <<<"$policies" | grep -vx checkmate | paste -sd, -)
fi
[[ -n $measure_policies ]] || measure_policies=$policies
[[ $iters =~ ^[1-9][0-9]*$ ]] || { echo "policies.sh: --iters must be a positive integer" >&2; exit 2; }
[[ $profile_iters =~ ^[1-9][0-9]*$ ]] || { echo "policies.sh: --profile-iters must be a positive integer" >&2; exit 2; }
[[ $layout == wide || $layout == narrow ]] || { echo "policies.sh: --layout is wide or narrow" >&2; exit 2; }
case $precision in
  fp32) ;;
  tf32|amp-fp16|amp-bf16)
    # The CPU backend trains fp32 only: nothing to measure, and no measured `local` profile.
    if ((measure)); then echo "policies.sh: --precision $precision: skipping the measured part (ferry train runs fp32 only)" >&2; fi
    measure=0
    if [[ ,$profiles, == *,local,* ]]; then
      echo "policies.sh: --precision $precision: leaving out the profile 'local' (ferry profile runs fp32 only)" >&2
      profiles=$(tr ',' '\n' <<<"$profiles" | grep -vx local | paste -sd, -)
    fi
    [[ -n $profiles ]] || { echo "policies.sh: --precision $precision needs a GPU profile in --profiles" >&2; exit 2; } ;;
  *) echo "policies.sh: --precision is fp32, tf32, amp-fp16 or amp-bf16" >&2; exit 2 ;;
esac

# Fractions, normalised (75 -> 0.75); the formatter rejects bad ones.
frac_list=$("${fmt[@]}" fractions "$fractions") || exit 2
fractions=$(paste -sd, - <<<"$frac_list")
IFS=',' read -r -a frac_arr <<<"$fractions"
IFS=',' read -r -a pol_arr <<<"$policies"
IFS=',' read -r -a prof_arr <<<"$profiles"
IFS=',' read -r -a tier_arr <<<"$tiers"
IFS=';' read -r -a model_arr <<<"$models"
if ((measure == 0)); then tier_arr=(); fi

if [[ -z $ferry ]]; then
  ferry="$root/build/ferry"
  if [[ ! -x $ferry ]]; then
    echo "policies.sh: $ferry missing; building with scripts/build.sh" >&2
    ferry="$("$root/scripts/build.sh")/ferry" || exit 1
  fi
fi
[[ -x $ferry ]] || { echo "policies.sh: no ferry binary at $ferry" >&2; exit 2; }
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

if [[ -z $out ]]; then out=$(mktemp -d /tmp/ferry-policies.XXXXXX); fi
mkdir -p "$out/runs" || exit 1
: >"$out/manifest.tsv"
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
{
  printf 'models\t%s\n' "$(IFS=';'; echo "${model_arr[*]}")"
  printf 'fractions\t%s\n' "$fractions"
  printf 'policies\t%s\n' "$policies"
  printf 'measure_policies\t%s\n' "$measure_policies"
  printf 'profiles\t%s\n' "$profiles"
  printf 'tiers\t%s\n' "$tiers"
  printf 'measure\t%s\n' "$measure"
  printf 'precision\t%s\n' "$precision"
  printf 'iters\t%s\n' "$iters"
  printf 'threads\t%s\n' "${threads:-all cores}"
  printf 'profile_iters\t%s\n' "$profile_iters"
  printf 'checkmate_time_limit\t%s\n' "$cm_limit"
  printf 'ferry\t%s\n' "$ferry"
  printf 'ferry_commit\t%s\n' "$commit"
  printf 'nproc\t%s\n' "$(nproc)"
  printf 'started\t%s\n' "$(date '+%Y-%m-%d %H:%M:%S')"
  printf 'load_start\t%s\n' "$(loadavg)"
} >"$out/meta.tsv"

is_measured() { [[ ,$measure_policies, == *,$1,* ]]; }
recompute_only() { [[ $1 == checkpoint-sqrt || $1 == checkmate ]]; }

# Number of runs, for the progress lines.
total=0
for spec in "${model_arr[@]}"; do
  total=$((total + ${#prof_arr[@]} * (1 + ${#pol_arr[@]} * (1 + ${#frac_arr[@]}))))
  [[ ,$profiles, == *,local,* ]] && total=$((total + 1))
  ((measure)) && total=$((total + 2 + ${#pol_arr[@]} * ${#frac_arr[@]} * ${#tier_arr[@]}))
done
step=0
t0=$(date +%s.%N)

progress() {  # progress "description" "outcome" seconds
  local now el
  now=$(date +%s.%N)
  el=$(awk -v a="$t0" -v b="$now" 'BEGIN { s = b - a; printf "%d:%02d", s / 60, s % 60 }')
  printf '[%d/%d %s] %s: %s (%.1f s)\n' "$step" "$total" "$el" "$1" "$2" "$3" >&2
}

# run_one IDX SPEC KIND WHERE POLICY FRACTION BUDGET NAME -- ferry args...
run_one() {
  local idx=$1 spec=$2 kind=$3 where=$4 policy=$5 frac=$6 budget=$7 name=$8
  shift 9
  [[ $kind == profile ]] && ext=txt
  local dir="runs/m$idx-$label" prefix rc s e secs ext=json
  mkdir -p "$out/$dir"
  prefix="$dir/$name"
  printf '%q ' "$ferry" "$@" >"$out/$prefix.cmd"; echo >>"$out/$prefix.cmd"
  step=$((step + 1))
  s=$(date +%s.%N)
  "$ferry" "$@" >"$out/$prefix.$ext" 2>"$out/$prefix.err" </dev/null
  rc=$?
  e=$(date +%s.%N)
  secs=$(awk -v a="$s" -v b="$e" 'BEGIN { printf "%.2f", b - a }')
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$idx" "$spec" "$kind" "$where" "$policy" \
    "$frac" "$budget" "$rc" "$secs" "$prefix" >>"$out/manifest.tsv"
  last_rc=$rc
  last_prefix="$out/$prefix"
  progress "$kind $label $where $policy${frac:+ $frac}${budget:+ (budget $budget B)}" \
    "$("${fmt[@]}" oneline "$out/$prefix" "$rc")" "$secs"
}

skip_one() {  # skip_one IDX SPEC WHERE POLICY FRACTION BUDGET REASON
  step=$((step + 1))
  printf '%s\t%s\tmeas-skip\t%s\t%s\t%s\t%s\t%s\t\t\n' "$1" "$2" "$3" "$4" "$5" "$6" "$7" >>"$out/manifest.tsv"
  progress "meas $label $3 $4 $5" "not run ($7)" 0
}

echo "policies.sh: ferry $ferry ($commit), output in $out" >&2
for idx in "${!model_arr[@]}"; do
  spec=${model_arr[$idx]}
  read -r -a margs <<<"$spec"
  label=${margs[0]}
  [[ ${margs[0]} == -* ]] && label=model || margs=(--model "${margs[@]}")  # "resnet152 --batch 16" or "--trace F ..."
  # ---- simulated
  for prof in "${prof_arr[@]}"; do
    plan=(plan "${margs[@]}" --device "$prof" --json --precision "$precision")
    if [[ $prof == local ]]; then
      p="$out/runs/m$idx-$label/local-profile"
      pargs=(profile "${margs[@]}" --out "$p.trace.json" --hardware-out "$p.hardware.json"
             --iters "$profile_iters" --warmup 1 --storage-dir "${ssd_dir:-$out}")
      [[ -n $threads ]] && pargs+=(--threads "$threads")
      run_one "$idx" "$spec" profile local none "" "" "local-profile" -- "${pargs[@]}"
      plan=(plan --trace "$p.trace.json" --device "$p.hardware.json" --json --precision "$precision")
    fi
    run_one "$idx" "$spec" sim-ref "$prof" none "" "" "sim-$prof-none" -- "${plan[@]}" --policy none
    peak=""
    ((last_rc == 0)) && peak=$("${fmt[@]}" field "$last_prefix.json" peak_bytes)
    for pol in "${pol_arr[@]}"; do
      # ferry refuses options without effect: the tier only with a policy, the CBC limit only for checkmate.
      pplan=("${plan[@]}" --policy "$pol")
      [[ $pol != none ]] && pplan+=(--tier host)
      [[ $pol == checkmate && -n $cm_limit ]] && pplan+=(--checkmate-time-limit "$cm_limit")
      run_one "$idx" "$spec" sim-min "$prof" "$pol" "" "" "sim-$prof-$pol-min" -- "${pplan[@]}" --find-min-budget
      for frac in "${frac_arr[@]}"; do
        if [[ -z $peak ]]; then step=$((step + 1)); continue; fi
        budget=$("${fmt[@]}" budget "$peak" "$frac")
        run_one "$idx" "$spec" sim "$prof" "$pol" "$frac" "$budget" "sim-$prof-$pol-$frac" -- \
          "${pplan[@]}" --budget "$budget"
      done
    done
  done
  ((measure)) || continue
  # ---- measured
  train=(train "${margs[@]}" --iters "$iters" --json --no-progress)
  [[ -n $threads ]] && train+=(--threads "$threads")
  run_one "$idx" "$spec" meas-ref none none "" "" "meas-none" -- "${train[@]}"
  peak=""
  ((last_rc == 0)) && peak=$("${fmt[@]}" field "$last_prefix.json" predicted_peak_bytes)
  for pol in "${pol_arr[@]}"; do
    for frac in "${frac_arr[@]}"; do
      budget=""
      [[ -n $peak ]] && budget=$("${fmt[@]}" budget "$peak" "$frac")
      host_prefix=""; host_rc=""
      for tier in "${tier_arr[@]}"; do
        if [[ -z $peak ]]; then skip_one "$idx" "$spec" "$tier" "$pol" "$frac" "" "no reference"; continue; fi
        if ! is_measured "$pol"; then skip_one "$idx" "$spec" "$tier" "$pol" "$frac" "$budget" "not measured"; continue; fi
        if ((!all_runs)) && [[ $tier == ssd ]] && recompute_only "$pol" && [[ $host_rc == 0 ]] &&
           [[ $("${fmt[@]}" field "$host_prefix.json" bytes_swapped_out) == 0 ]]; then
          skip_one "$idx" "$spec" "$tier" "$pol" "$frac" "$budget" "same-as-host"; continue
        fi
        targs=("${train[@]}" --policy "$pol" --budget "$budget" --tier "$tier")
        [[ $tier == ssd && -n $ssd_dir ]] && targs+=(--ssd-dir "$ssd_dir")
        run_one "$idx" "$spec" meas "$tier" "$pol" "$frac" "$budget" "meas-$tier-$pol-$frac" -- "${targs[@]}"
        if [[ $tier == host ]]; then host_prefix=$last_prefix; host_rc=$last_rc; fi
      done
    done
  done
  run_one "$idx" "$spec" meas-ref-end none none "" "" "meas-none-end" -- "${train[@]}"
done

{
  printf 'finished\t%s\n' "$(date '+%Y-%m-%d %H:%M:%S')"
  printf 'load_end\t%s\n' "$(loadavg)"
} >>"$out/meta.tsv"
"${fmt[@]}" render "$out" "$layout"
status=$?
echo "policies.sh: done in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }') s; table and raw runs in $out" >&2
((status == 0)) || echo "policies.sh: some runs failed with an error (cells 'failed: ...'); exit status 1" >&2
exit $status
