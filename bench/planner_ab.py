#!/usr/bin/env python3
"""Two builds of ferry side by side on the planner benchmark's matrix (predicted).

For every cell (profile x model x budget fraction), `ferry plan ... --json` runs with the build
BEFORE, then with the build AFTER, one right after the other, and the table lists both predicted
iteration times, their ratio, both gaps to the lower bound and both planning times (measured wall
times of the two processes: compare them only row by row on a shared machine). Every time in the
table except the planning times is a prediction of Ferry's simulator, not a measurement.

Usage:
  bench/planner_ab.py --before /tmp/ferry-before --after build/ferry --out bench/results/X.md
  bench/planner_ab.py ... --quick     # resnet-mini and gpt2-mini on the A100 profile (a minute)
"""
import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time

DEFAULT_MODELS = ("resnet152 --batch 16;densenet264 --batch 16;bert-large --batch 8 --seq 512 --optimizer adam;"
                  "gpt2-medium --batch 1 --seq 1024 --optimizer adam;gpt2-xl --batch 1 --seq 1024 --optimizer adam")


def plan(binary, model, profile, fraction, timeout):
    cmd = [binary, "plan", "--model", *shlex.split(model), "--device", profile, "--budget", f"{fraction}%", "--json"]
    start = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           env={"OMP_WAIT_POLICY": "passive", "PATH": "/usr/bin:/bin"})
    except subprocess.TimeoutExpired:
        return {"error": "timeout"}
    secs = time.monotonic() - start
    try:
        j = json.loads(p.stdout)
    except json.JSONDecodeError:
        return {"error": (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1][:80]}
    if not j.get("feasible", True):
        return {"error": "does not fit"}
    return {"ms": j["iteration_ms"], "gap": j.get("gap"), "planning": j["seconds"]["planning"], "wall": secs}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="the ferry binary before the change")
    ap.add_argument("--after", required=True, help="the ferry binary after the change")
    ap.add_argument("--out", required=True, help="markdown table to write")
    ap.add_argument("--profiles", default="a100-40gb-pcie4,v100-16gb-pcie3,h100-80gb-pcie5")
    ap.add_argument("--models", default=DEFAULT_MODELS, help="';'-separated model arguments")
    ap.add_argument("--fractions", default="75,50,33,25,10")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.profiles = "a100-40gb-pcie4"
        a.models = "resnet-mini --batch 8;gpt2-mini --batch 4 --seq 64 --optimizer adam"
    rows, ratios, gaps_before, gaps_after = [], [], [], []
    faster = slower = same = 0
    cells = [(p, m, f) for p in a.profiles.split(",") for m in a.models.split(";") for f in a.fractions.split(",")]
    for i, (profile, model, fraction) in enumerate(cells):
        b = plan(a.before, model, profile, fraction, a.timeout)
        c = plan(a.after, model, profile, fraction, a.timeout)
        print(f"[{i + 1}/{len(cells)}] {profile} {model} {fraction}%: {b.get('ms', b.get('error'))} -> "
              f"{c.get('ms', c.get('error'))}", file=sys.stderr, flush=True)
        if "ms" in b and "ms" in c:
            r = c["ms"] / b["ms"]
            ratios.append(r)
            if b["gap"] and c["gap"]:
                gaps_before.append(b["gap"])
                gaps_after.append(c["gap"])
            if r < 1 - 1e-6:
                faster += 1
            elif r > 1 + 1e-6:
                slower += 1
            else:
                same += 1
            after_ms = f"**{c['ms']:.2f}**" if r < 1 - 1e-6 else f"{c['ms']:.2f}"
            rows.append(f"| {profile} | --model {model} | {fraction}% | {b['ms']:.2f} | {after_ms} | {r:.3f} | "
                        f"{b['gap']:.3f} | {c['gap']:.3f} | {b['planning']:.1f} | {c['planning']:.1f} |")
        else:
            rows.append(f"| {profile} | --model {model} | {fraction}% | {b.get('ms', b.get('error'))} | "
                        f"{c.get('ms', c.get('error'))} | n/a | | | | |")
    with open(a.out, "w") as out:
        out.write("| profile | model | budget | before ms | after ms | after / before | gap before | gap after | "
                  "planning before s | planning after s |\n|---|---|---|---|---|---|---|---|---|---|\n")
        out.write("\n".join(rows) + "\n\n")
        if ratios:
            out.write(f"Cells where both fit: {len(ratios)}; faster {faster}, the same {same}, slower {slower}; "
                      f"geometric mean after / before {statistics.geometric_mean(ratios):.3f}, best {min(ratios):.3f}, "
                      f"worst {max(ratios):.3f}.\n")
        if gaps_after:
            out.write(f"Gap to the lower bound: median {statistics.median(gaps_before):.3f} -> "
                      f"{statistics.median(gaps_after):.3f}, worst {max(gaps_before):.3f} -> {max(gaps_after):.3f}; "
                      f"within 1.05: {sum(g <= 1.05 for g in gaps_before)} -> {sum(g <= 1.05 for g in gaps_after)}, "
                      f"within 1.15: {sum(g <= 1.15 for g in gaps_before)} -> {sum(g <= 1.15 for g in gaps_after)}.\n")
    print(f"wrote {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
