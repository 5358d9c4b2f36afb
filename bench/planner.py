#!/usr/bin/python3
"""Planner benchmark (bench/planner.sh): every seed policy, ferry, the lower bound and the gap, side by
side, simulated with `ferry plan` on hardware profiles at budgets that are fractions of the no-swap
peak. Every figure is a prediction of Ferry's simulator; nothing here is measured on a GPU.

Per (profile, model): `plan --policy none` without a budget gives the unlimited iteration; then per
fraction and policy `plan --policy P --budget F%` gives the iteration time (or infeasible), and for
ferry also `lower_bound_ms` and `gap`; with --min-budget, `plan --find-min-budget` per policy.
The wall time of each ferry plan is measured (planning + simulation + the bound, one process).

Usage: bench/planner.py --ferry build/ferry --out DIR [--quick] [--profiles a,b] [--models "spec;spec"]
                        [--fractions 75,50,33,25,10] [--policies ...] [--min-budget] [--timeout S]
Writes DIR/runs.jsonl (one line per run: command, exit code, seconds, JSON output) and DIR/table.md.
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import time

SEEDS = ["vdnn-all", "vdnn-conv", "lru", "lms", "capuchin", "checkpoint-sqrt", "checkmate"]


def run(ferry, args, timeout, log):
    cmd = [ferry, "plan"] + args + ["--json"]
    start = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        code, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        code, out, err = 124, "", f"timed out after {timeout} s"
    secs = time.monotonic() - start
    try:
        j = json.loads(out) if out.strip() else None
    except json.JSONDecodeError:
        j = None
    rec = {"cmd": " ".join(shlex.quote(c) for c in cmd), "code": code, "seconds": secs, "json": j,
           "stderr": err.strip()[-400:]}
    log.write(json.dumps(rec) + "\n")
    log.flush()
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ferry", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--profiles", default="v100-16gb-pcie3,a100-40gb-pcie4,h100-80gb-pcie5")
    ap.add_argument("--models", default="resnet152 --batch 16;densenet264 --batch 16;bert-large --batch 8 --seq 512 "
                    "--optimizer adam;gpt2-medium --batch 1 --seq 1024 --optimizer adam;gpt2-xl --batch 1 --seq 1024 "
                    "--optimizer adam")
    ap.add_argument("--fractions", default="75,50,33,25,10")
    ap.add_argument("--policies", default=",".join(SEEDS))
    ap.add_argument("--min-budget", action="store_true", help="also --find-min-budget per policy (slow)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--measure", action="store_true",
                    help="also train on this machine with ferry at --measure-fractions on the host and SSD tiers, "
                         "each beside a run without a plan in the same process (ferry train --compare)")
    ap.add_argument("--measure-models", default="preact-resnet --depth 164 --batch 32;gpt2 --batch 4 --seq 256")
    ap.add_argument("--measure-fractions", default="50,33,25")
    ap.add_argument("--measure-iters", type=int, default=10)
    ap.add_argument("--merge", help="a previous --out DIR whose rows come first in this table")
    ap.add_argument("--quick", action="store_true", help="resnet-mini and gpt2-mini on one profile")
    a = ap.parse_args()
    if a.quick:
        a.profiles = "a100-40gb-pcie4"
        a.models = "resnet-mini --batch 8;gpt2-mini --batch 4 --seq 64 --optimizer adam"
        a.fractions = "50,33"
    os.makedirs(a.out, exist_ok=True)
    profiles = [p for p in a.profiles.split(",") if p]
    models = [m.strip() for m in a.models.split(";") if m.strip()]
    fractions = [f for f in a.fractions.split(",") if f]
    policies = [p for p in a.policies.split(",") if p]
    rows = []
    if a.merge:
        with open(os.path.join(a.merge, "table.json")) as mj:
            rows = json.load(mj)
    with open(os.path.join(a.out, "runs.jsonl"), "w") as log:
        for prof in profiles:
            for spec in models:
                margs = ["--model"] + shlex.split(spec) + ["--device", prof]
                ref = run(a.ferry, margs + ["--policy", "none", "--budget", "100%"], a.timeout, log)
                if ref["json"] is None and "exceeds the memory capacity" in ref["stderr"]:
                    # The model does not fit this device without a plan (the real use): the unlimited
                    # reference is the same profile with its capacity raised, and the table says so.
                    prof_file = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "profiles",
                                             prof + ".json")
                    with open(prof_file) as pf:
                        big = json.load(pf)
                    big["memory"]["capacity_bytes"] = 1 << 40
                    big_file = os.path.join(a.out, prof + "-unlimited-capacity.json")
                    with open(big_file, "w") as bf:
                        json.dump(big, bf)
                    ref_args = ["--model"] + shlex.split(spec) + ["--device", big_file]
                    ref = run(a.ferry, ref_args + ["--policy", "none", "--budget", "100%"], a.timeout, log)
                    if ref["json"] is not None:
                        ref["json"]["reference_note"] = "capacity raised"
                if ref["json"] is None:
                    print(f"{prof} {spec}: reference failed: {ref['stderr']}", file=sys.stderr)
                    continue
                base_ms = ref["json"]["iteration_ms"]
                peak = ref["json"].get("no_swap_peak_bytes", ref["json"].get("peak_bytes"))
                row = {"profile": prof, "model": spec, "unlimited_ms": base_ms, "peak_bytes": peak, "cells": {},
                       "min": {}, "reference_over_capacity": "reference_note" in ref["json"]}
                for f in fractions:
                    cell = {}
                    for pol in ["ferry"] + policies:
                        r = run(a.ferry, margs + ["--policy", pol, "--budget", f + "%"], a.timeout, log)
                        j = r["json"] or {}
                        c = {"feasible": bool(j.get("feasible")), "code": r["code"], "seconds": r["seconds"]}
                        if c["feasible"]:
                            c["ms"] = j["iteration_ms"]
                        if pol == "ferry":
                            c["bound_ms"] = j.get("lower_bound_ms")
                            c["gap"] = j.get("gap")
                        cell[pol] = c
                        print(f"{prof} | {spec} | {f}% | {pol}: "
                              f"{'%.1f ms' % c['ms'] if 'ms' in c else 'infeasible' if r['code'] == 1 else 'exit %d' % r['code']}"
                              f" ({r['seconds']:.1f} s)", file=sys.stderr)
                    row["cells"][f] = cell
                if a.min_budget:
                    for pol in ["ferry"] + policies:
                        r = run(a.ferry, margs + ["--policy", pol, "--find-min-budget"], a.timeout, log)
                        j = r["json"] or {}
                        b = j.get("min_budget_bytes")
                        row["min"][pol] = (100.0 * b / peak) if (b and peak) else None
                rows.append(row)
                with open(os.path.join(a.out, "table.json"), "w") as tj:
                    json.dump(rows, tj, indent=1)
                with open(os.path.join(a.out, "table.md"), "w") as t:  # so far
                    t.write(render(rows, fractions, policies, a.min_budget))
    measured = measure(a) if a.measure else []
    md = render(rows, fractions, policies, a.min_budget) + render_measured(measured)
    with open(os.path.join(a.out, "table.md"), "w") as t:
        t.write(md)
    print(md)


def measure(a):
    """ferry train --compare: measured on this machine, planned run and the run without a plan in one process."""
    out = []
    with open(os.path.join(a.out, "measured.jsonl"), "w") as log:
        for spec in [m.strip() for m in a.measure_models.split(";") if m.strip()]:
            for tier in ["host", "ssd"]:
                for f in [x for x in a.measure_fractions.split(",") if x]:
                    cmd = [a.ferry, "train", "--model"] + shlex.split(spec) + [
                        "--iters", str(a.measure_iters), "--budget", f + "%", "--tier", tier, "--compare", "--json",
                        "--no-progress"]
                    start = time.monotonic()
                    p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
                    try:
                        j = json.loads(p.stdout)
                    except json.JSONDecodeError:
                        j = None
                    rec = {"cmd": " ".join(shlex.quote(c) for c in cmd), "code": p.returncode,
                           "seconds": time.monotonic() - start, "json": j, "stderr": p.stderr.strip()[-400:]}
                    log.write(json.dumps(rec) + "\n")
                    log.flush()
                    out.append({"model": spec, "tier": tier, "fraction": f, **rec})
                    print(f"measured | {spec} | {tier} | {f}%: exit {p.returncode}"
                          + (f", {j['measured_slowdown']:.2f}x" if j and "measured_slowdown" in j else ""),
                          file=sys.stderr)
    return out


def last_plan(j):
    versions = j.get("plan_versions") or []
    if not versions:
        return "-"
    v = versions[-1]
    return f"{v['swapped_tensors']}, {v['recomputed_tensors']} ({len(versions)})"


def render_measured(runs):
    if not runs:
        return ""
    out = ["", "Measured on this machine (`ferry train --compare`, CPU backend): the planned run and the run "
           "without a plan in the same process, same data and seed, taking turns iteration by iteration; slowdown "
           "= median iteration of the planned run / median of the run without a plan (the first iteration of each "
           "left out). `last plan`: the tensors the run's last plan swaps and recomputes, and how many plans the "
           "run made (the first from the cache or the device profile, then from what it measured, then on drift).",
           "",
           "| model | tier | budget | budget bytes | measured peak | peak without a plan | ms without a plan | "
           "ms with ferry | slowdown | last plan: swapped, recomputed (plans) | losses bitwise identical |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        j = r["json"]
        if not j:
            out.append(f"| {r['model']} | {r['tier']} | {r['fraction']}% | exit {r['code']}: {r['stderr'][:120]} | | | | | | |")
            continue
        b = j["baseline"]
        out.append(f"| {r['model']} | {r['tier']} | {r['fraction']}% | {j['budget_bytes'] / 2**20:.1f} MiB | "
                   f"{j['measured_peak_bytes'] / 2**20:.1f} MiB | {b['measured_peak_bytes'] / 2**20:.1f} MiB | "
                   f"{b['median_iter_ms']:.1f} | {j['median_iter_ms']:.1f} | {j['measured_slowdown']:.2f}x | "
                   f"{last_plan(j)} | {'yes' if b['losses_bitwise_identical'] else 'NO'} |")
    return "\n".join(out) + "\n"


def render(rows, fractions, policies, with_min):
    out = ["All figures are predictions of Ferry's simulator (`ferry plan`); slowdown = iteration time / "
           "the unlimited iteration (policy none, no budget) on the same profile. `bound` is ferry's "
           "`lower_bound_ms` as a slowdown, `gap` = ferry / bound. `-`: the policy does not fit; n/a: the budget exceeds the device's memory (the CLI refuses it). "
           "**bold**: the fastest feasible policy of the row.", ""]
    head = "| profile | model | budget | ferry | bound | gap | " + " | ".join(policies) + " |"
    out += [head, "|" + "---|" * (6 + len(policies))]
    gaps, losses = [], []
    for row in rows:
        base = row["unlimited_ms"]
        for f in fractions:
            cell = row["cells"].get(f, {})
            times = {p: c["ms"] for p, c in cell.items() if "ms" in c}
            best = min(times.values()) if times else None

            def fmt(p):
                if p not in cell:
                    return "?"
                c = cell[p]
                if "ms" not in c:
                    return "-" if c["code"] == 1 else ("n/a" if c["code"] == 2 else f"err {c['code']}")
                s = f"{c['ms'] / base:.2f}x"
                return f"**{s}**" if best is not None and c["ms"] <= best * (1 + 1e-9) else s

            fe = cell.get("ferry", {})
            bound = fe.get("bound_ms")
            gap = fe.get("gap")
            if gap:
                gaps.append((gap, row["profile"], row["model"], f))
            seed_best = min((times[p] for p in policies if p in times), default=None)
            if seed_best is not None and ("ms" not in fe or fe["ms"] > seed_best * (1 + 1e-9)):
                losses.append((row["profile"], row["model"], f))
            out.append(f"| {row['profile']} | {row['model']} | {f}% | {fmt('ferry')} | "
                       f"{('%.2fx' % (bound / base)) if bound else '-'} | {'-' if gap is None else '%.3f' % gap} | "
                       + " | ".join(fmt(p) for p in policies) + " |")
    out.append("")
    out.append("Unlimited iteration (predicted) and ferry's planning wall time (measured, one `ferry plan` "
               "process including the graph build and the bound), per profile and model:")
    out.append("")
    out.append("| profile | model | unlimited ms | no-swap peak | ferry plan s (max over budgets) |")
    out.append("|---|---|---|---|---|")
    for row in rows:
        secs = max((c["ferry"]["seconds"] for c in row["cells"].values() if "ferry" in c), default=float("nan"))
        over = " (over the device's capacity: timed with it raised)" if row.get("reference_over_capacity") else ""
        out.append(f"| {row['profile']} | {row['model']} | {row['unlimited_ms']:.1f}{over} | "
                   f"{row['peak_bytes'] / 2**30:.2f} GiB | {secs:.1f} |")
    if with_min:
        out += ["", "Smallest feasible budget, % of the no-swap peak (`--find-min-budget`):", "",
                "| profile | model | ferry | " + " | ".join(policies) + " |", "|" + "---|" * (3 + len(policies))]
        for row in rows:
            m = row["min"]
            out.append(f"| {row['profile']} | {row['model']} | " + " | ".join(
                "-" if m.get(p) is None else f"{m[p]:.1f}%" for p in ["ferry"] + policies) + " |")
    gaps.sort(reverse=True)
    out.append("")
    if gaps:
        vals = sorted(g[0] for g in gaps)
        med = vals[len(vals) // 2]
        out.append(f"Gap over {len(vals)} cells: median {med:.3f}, worst {gaps[0][0]:.3f} "
                   f"({gaps[0][1]}, {gaps[0][2]}, {gaps[0][3]}%).")
    out.append("Cells where a seed policy is faster than ferry or ferry is infeasible where a seed fits: "
               + (", ".join(f"{p} {m} {f}%" for p, m, f in losses) if losses else "none") + ".")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
