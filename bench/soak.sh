#!/usr/bin/env bash
# Memory soak: trains under a swapping policy for many iterations and prints the slope of the
# process's resident set (bytes per iteration, least squares over the iterations after the first
# 10%), measured by the OS (/proc/self/statm after every iteration, `ferry train --json`). A
# leak (e.g. transfer records kept forever) shows as a positive slope; flat is 0 +- noise.
# Usage: bench/soak.sh [ITERS] [extra ferry train args]    (default 300 iterations)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ferry=${FERRY:-$("$root/scripts/build.sh")/ferry}
iters=${1:-300}
shift || true
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
for tier in host ssd; do
  out=$("$ferry" train --model resnet-mini --batch 8 --iters "$iters" --policy vdnn-all --budget 9MiB --tier "$tier" \
        --no-progress --json "$@")
  /usr/bin/python3 - "$tier" "$out" <<'PY'
import json, sys
tier, j = sys.argv[1], json.loads(sys.argv[2])
rss = [it["rss_bytes"] for it in j["iterations"]]
n0 = max(1, len(rss) // 10)
xs, ys = list(range(n0, len(rss))), rss[n0:]
mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
print(f"tier {tier}: {len(rss)} iterations, {j['bytes_swapped_out']} bytes swapped out in all; "
      f"RSS {rss[n0] / 2**20:.1f} -> {rss[-1] / 2**20:.1f} MiB, slope {slope:+.1f} bytes/iteration (measured)")
PY
done
