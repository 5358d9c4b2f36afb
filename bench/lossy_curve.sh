#!/usr/bin/env bash
# Lossy stashing (`ferry train --lossy bf16`, issue 14): the loss curve of a run whose swapped
# activations cross the SSD tier rounded to bfloat16, against the lossless curve, over 300
# iterations (default), in one process: `ferry train --compare` trains the same model, data and
# seed without a plan (every lossless plan gives bitwise these losses: the identity tests) and
# with ferry's plan at the budget on the SSD tier with --lossy bf16, the two taking turns.
# Usage: bench/lossy_curve.sh [--iters N] [--budget F%] [--out DIR] [-- extra ferry train options]
# Writes DIR/run.json (the whole --json report), DIR/curve.csv (iteration, lossless, lossy) and
# DIR/curve.svg, and prints a summary. Every figure is measured.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ferry="$root/build/ferry"
[[ -x $ferry ]] || ferry="$("$root/scripts/build.sh")/ferry"
iters=300
budget=33%
out=""
model=(--model preact-resnet --depth 56 --batch 32)
extra=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --iters) iters=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -n $out ]] || out=$(mktemp -d /tmp/ferry-lossy.XXXX)
mkdir -p "$out"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
cmd=("$ferry" train "${model[@]}" --iters "$iters" --budget "$budget" --tier ssd --lossy bf16 --compare --json
     --no-progress "${extra[@]}")
echo "${cmd[*]}" >&2
"${cmd[@]}" > "$out/run.json"
exec /usr/bin/python3 - "$out" "${cmd[*]}" <<'PY'
import json, sys, os
out, cmd = sys.argv[1], sys.argv[2]
d = json.load(open(os.path.join(out, "run.json")))
lossy = [it["loss"] for it in d["iterations"]]
lossless = d["baseline"]["losses"]
n = min(len(lossy), len(lossless))
with open(os.path.join(out, "curve.csv"), "w") as f:
    f.write("iteration,lossless,lossy_bf16\n")
    for i in range(n):
        f.write(f"{i},{lossless[i]!r},{lossy[i]!r}\n")
def mean(v): return sum(v) / len(v) if v else float("nan")
tail = max(1, n // 6)
diff = [abs(a - b) for a, b in zip(lossless[:n], lossy[:n])]
rel = [abs(a - b) / abs(a) for a, b in zip(lossless[:n], lossy[:n]) if a != 0]
# SVG: both curves.
W, H, L, T, PW, PH = 720, 360, 60, 20, 640, 300
lo, hi = min(lossless[:n] + lossy[:n]), max(lossless[:n] + lossy[:n])
hi = hi if hi > lo else lo + 1
def pts(v): return " ".join(f"{L + PW * i / max(1, n - 1):.1f},{T + PH * (1 - (x - lo) / (hi - lo)):.1f}" for i, x in enumerate(v[:n]))
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H + 30}" font-family="sans-serif" font-size="12">',
       f'<rect x="{L}" y="{T}" width="{PW}" height="{PH}" fill="none" stroke="#999"/>',
       f'<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="{pts(lossless)}"/>',
       f'<polyline fill="none" stroke="#d62728" stroke-width="1" stroke-dasharray="4,3" points="{pts(lossy)}"/>',
       f'<text x="{L}" y="{T + PH + 18}">iteration 0 .. {n - 1}; loss {lo:.3f} .. {hi:.3f} (measured)</text>',
       f'<text x="{L + 10}" y="{T + 15}" fill="#1f77b4">lossless (no plan; every lossless plan is bitwise the same)</text>',
       f'<text x="{L + 10}" y="{T + 30}" fill="#d62728">--lossy bf16 (activations rounded on the SSD tier)</text>',
       '</svg>']
open(os.path.join(out, "curve.svg"), "w").write("\n".join(svg) + "\n")
print(f"# Lossy stashing: loss curve, {n} iterations (measured)\n")
print(f"Command: `{cmd}`\n")
print(f"- model {d.get('model', '?')}, budget {d.get('budget_bytes', '?')} bytes, SSD tier, codec {d.get('codec')}, lossy {d.get('lossy')}")
print(f"- largest |loss difference| over the run: {max(diff):.4g}; mean {mean(diff):.4g}; mean relative {mean(rel):.3%}")
print(f"- mean loss over the last {tail} iterations: lossless {mean(lossless[n - tail:n]):.4f}, lossy {mean(lossy[n - tail:n]):.4f}")
print(f"- first / last loss: lossless {lossless[0]:.4f} / {lossless[n - 1]:.4f}, lossy {lossy[0]:.4f} / {lossy[n - 1]:.4f}")
print(f"- median iteration: lossy {d.get('median_iter_ms', float('nan')):.1f} ms, lossless without a plan {d['baseline']['median_iter_ms']:.1f} ms")
for k in ("ssd_disk_bytes_written", "ssd_disk_bytes_read"):
    if k in d: print(f"- {k}: {d[k]}")
print(f"\nFiles: {out}/curve.csv, {out}/curve.svg, {out}/run.json")
PY
