#!/usr/bin/env python3
"""The dynamic loop's re-planning after an injected slowdown (issue 14), measured.

Runs, side by side and interleaved in rounds:
  A  `ferry train ... --test-slow-tier ssd:F@K`: a plan made for the normal disk, which becomes F
     times slower at iteration K; the loop must notice and re-plan;
  B  `ferry train ... --test-slow-tier ssd:F@0`: the disk is slow from the start, so the loop's
     first measurement already sees it (a plan made with the throttled figures from the start);
  S  `ferry train ... --test-slow-tier ssd:F@K --static-plan`: the same slowdown, never re-planned.
Every run uses --no-cache (each measures for itself). Reports, per round: the iteration at which A
re-planned, how many iterations after K it took until three iterations in a row of A were within
10% of B's steady median (or faster), and the ratios of the steady medians (last third of the run) A/B and S/B.
Every figure is measured. Usage: bench/dynamic.py --ferry build/ferry [--model M --batch N
--budget 33% --iters 36 --slow 4 --at 12 --rounds 2]
"""
import argparse
import json
import statistics
import subprocess
import sys


def run(ferry, args, extra):
    cmd = [ferry, "train", "--model"] + args.model.split() + ["--batch", str(args.batch), "--budget", args.budget,
           "--tier", "ssd", "--iters", str(args.iters), "--no-cache", "--no-progress", "--json"] + extra
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def times(j):
    return [it["time_ms"] for it in j["iterations"]]


def steady(ts):
    tail = ts[len(ts) * 2 // 3:]
    return statistics.median(tail)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ferry", required=True)
    p.add_argument("--model", default="preact-resnet164", help="a zoo name, with options: 'preact-resnet --depth 56'")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--budget", default="33%")
    p.add_argument("--iters", type=int, default=36)
    p.add_argument("--slow", type=float, default=4)
    p.add_argument("--at", type=int, default=12)
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    slow = f"ssd:{a.slow:g}@{a.at}"
    rows = []
    for r in range(a.rounds):
        A = run(a.ferry, a, ["--test-slow-tier", slow])
        B = run(a.ferry, a, ["--test-slow-tier", f"ssd:{a.slow:g}@0"])
        S = run(a.ferry, a, ["--test-slow-tier", slow, "--static-plan"])
        b_med = steady(times(B))
        replans = [v for v in A["plan_versions"] if v["from_iteration"] > a.at]
        replan_at = replans[0]["from_iteration"] if replans else None
        ta = times(A)
        recovered = None
        for i in range(a.at, len(ta) - 2):
            if all(t <= 1.10 * b_med for t in ta[i:i + 3]):
                recovered = i - a.at
                break
        rows.append({
            "round": r, "replan_from_iteration": replan_at, "iterations_to_recover": recovered,
            "A_steady_ms": steady(ta), "B_steady_ms": b_med, "S_steady_ms": steady(times(S)),
            "A_over_B": steady(ta) / b_med, "S_over_B": steady(times(S)) / b_med,
            "A_versions": [(v["version"], v["from_iteration"], v["reason"][:120]) for v in A["plan_versions"]],
            "A_events": [e["what"][:160] for e in A["loop_events"]],
            "A_times": [round(t, 1) for t in ta], "B_times": [round(t, 1) for t in times(B)],
            "S_times": [round(t, 1) for t in times(S)],
        })
        print(json.dumps(rows[-1], indent=1), flush=True)
    print(f"\n{a.model} b{a.batch} at {a.budget} on the SSD tier, disk {a.slow:g}x slower from iteration {a.at} "
          f"(measured, {a.rounds} rounds):")
    print("| round | A re-planned from iteration | iterations after the slowdown until within 10% of B (or faster) | A/B steady | "
          "S/B steady (never re-planned) |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['round']} | {row['replan_from_iteration']} | {row['iterations_to_recover']} | "
              f"{row['A_over_B']:.3f} | {row['S_over_B']:.3f} |")


if __name__ == "__main__":
    sys.exit(main())
