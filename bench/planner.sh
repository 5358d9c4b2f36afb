#!/usr/bin/env bash
# Planner benchmark (issue 13): every seed policy, ferry, the lower bound and the gap side by side,
# simulated on hardware profiles at fractions of the no-swap peak; see bench/planner.py --help.
# Usage: bench/planner.sh [--quick] [bench/planner.py options]; writes OUT/table.md (default
# OUT: a new /tmp/ferry-planner.XXXX) and prints it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ferry="$root/build/ferry"
[[ -x $ferry ]] || ferry="$("$root/scripts/build.sh")/ferry"
out=""
args=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
[[ -n $out ]] || out=$(mktemp -d /tmp/ferry-planner.XXXX)
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
exec /usr/bin/python3 "$root/bench/planner.py" --ferry "$ferry" --out "$out" "${args[@]}"
