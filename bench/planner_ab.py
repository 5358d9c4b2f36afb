#!/usr/bin/env python3
"""Two builds of ferry side by side on the planner benchmark's matrix (predicted).

For every cell (profile x model x budget fraction), `ferry plan ... --json` runs with the build
BEFORE, then with the build AFTER, one right after the other, and the table lists both predicted
iteration times, their ratio, both gaps to the lower bound and both planning times (measured wall
times of the two processes: compare them only row by row on a shared machine). Every time in the
table except the planning times is a prediction of Ferry's simulator, not a measurement.

Usage:
  bench/planner_ab.py --before /tmp/ferry-before --after build/ferry --out bench/results/X.md
  bench/planner_ab.py --before build/ferry --after build/ferry --after-args '--update-order interleaved' ...
      # the same build with one more argument on the AFTER side, at the same budget bytes
  bench/planner_ab.py ... --quick     # resnet-mini and gpt2-mini on the A100 profile (a minute)
  bench/planner_ab.py --before-table bench/results/OLD.md --after build/ferry --out X.md
      # the "after" columns of an earlier table stand for BEFORE (half the time). Predicted times
      # and gaps are deterministic, so they compare as if run side by side when the build that
      # made OLD still gives them (check a few cells); the planning times then do not: they were
      # measured on another day.
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


def budget_bytes(binary, model, profile, fraction):
    """The bytes BINARY gives `--budget FRACTION%` for the model without extra arguments; None
    where it refuses that budget (over the device's capacity)."""
    p = subprocess.run([binary, "plan", "--model", *shlex.split(model), "--device", profile, "--policy", "none",
                        "--budget", f"{fraction}%", "--json"], capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin"})
    try:
        return json.loads(p.stdout)["budget_bytes"]
    except json.JSONDecodeError:
        return None


def plan(binary, model, profile, fraction, timeout, extra=(), budget=None):
    # With budget (bytes): that budget instead of the fraction (the same bytes for both sides when
    # the extra arguments change the graph and so its own no-swap peak).
    budget = f"{fraction}%" if budget is None else str(budget)
    cmd = [binary, "plan", "--model", *shlex.split(model), *extra, "--device", profile, "--budget", budget, "--json"]
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
    ap.add_argument("--before", help="the ferry binary before the change")
    ap.add_argument("--before-table", help="instead of --before: an earlier table of this script, whose 'after' "
                    "columns stand for the build before")
    ap.add_argument("--after", required=True, help="the ferry binary after the change")
    ap.add_argument("--out", required=True, help="markdown table to write")
    ap.add_argument("--profiles", default="a100-40gb-pcie4,v100-16gb-pcie3,h100-80gb-pcie5")
    ap.add_argument("--models", default=DEFAULT_MODELS, help="';'-separated model arguments")
    ap.add_argument("--fractions", default="75,50,33,25,10")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--after-args", default="", help="more arguments for the AFTER side only (e.g. "
                    "'--update-order interleaved'); both sides then plan the same bytes, the fraction of the "
                    "no-swap peak of the model without them")
    a = ap.parse_args()
    if (a.before is None) == (a.before_table is None):
        ap.error("give one of --before and --before-table")
    earlier = {}
    if a.before_table:
        for line in open(a.before_table):
            c = [x.strip() for x in line.split("|")]
            if len(c) < 12 or not c[3].endswith("%") or not c[2].startswith("--model "):
                continue
            try:
                earlier[(c[1], c[2][len("--model "):], c[3][:-1])] = {
                    "ms": float(c[5].strip("*")), "gap": float(c[8]), "planning": float(c[10])}
            except ValueError:
                earlier[(c[1], c[2][len("--model "):], c[3][:-1])] = {"error": c[5]}
    if a.quick:
        a.profiles = "a100-40gb-pcie4"
        a.models = "resnet-mini --batch 8;gpt2-mini --batch 4 --seq 64 --optimizer adam"
    rows, ratios, gaps_before, gaps_after = [], [], [], []
    faster = slower = same = 0
    cells = [(p, m, f) for p in a.profiles.split(",") for m in a.models.split(";") for f in a.fractions.split(",")]
    extra = shlex.split(a.after_args)
    for i, (profile, model, fraction) in enumerate(cells):
        b = (earlier.get((profile, model, fraction), {"error": "not in the table"}) if a.before_table
             else plan(a.before, model, profile, fraction, a.timeout))
        same_bytes = budget_bytes(a.after, model, profile, fraction) if extra else None
        c = (plan(a.after, model, profile, fraction, a.timeout, extra, same_bytes)
             if not extra or same_bytes is not None else {"error": "budget refused"})
        print(f"[{i + 1}/{len(cells)}] {profile} {model} {fraction}%: {b.get('ms', b.get('error'))} -> "
              f"{c.get('ms', c.get('error'))}", file=sys.stderr, flush=True)
        if "ms" in b and "ms" in c:
            if a.before_table:  # the table holds two decimals: compare at that precision
                c["ms"] = round(c["ms"], 2)
                c["gap"] = round(c["gap"], 3) if c.get("gap") is not None else None
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
        if a.after_args:
            out.write(f"'after' runs with `{a.after_args}`, at the bytes of the fraction of the no-swap peak without "
                      "them; its gaps are to its own lower bound (of its graph).\n\n")
        if a.before_table:
            out.write(f"'before' columns: the 'after' columns of {a.before_table} (not run here); its planning times "
                      "were measured on another day.\n\n")
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
