#!/usr/bin/env python3
"""Codecs on the SSD tier, measured side by side (issue 14, part 5).

For each budget (a share of the model's no-swap peak) and each round, runs
`ferry train MODEL --policy ferry --tier ssd --budget B --codec C --json` once per codec, in an
order that rotates every round (so no codec always runs first or last on a machine shared with
other work). Each process drops its first iteration (one-time costs); a codec's figure is the
median of all its remaining iterations over all rounds. Printed per budget: median iteration time
(measured), its ratio to `none` (measured, same invocation), the per-round paired ratios (each
codec's median over `none`'s median in the same round) and their median, which is the steadier
figure on a machine whose load changes between rounds, the
bytes the SSD tier wrote and read per iteration (measured by the tier's own request counters) and
their ratio to `none`, and whether every codec's losses are bitwise those of `none` (they must be:
the codecs are lossless). Each round also runs the model without a plan (no budget, nothing
swapped): the `x unconstrained` column is each codec's paired ratio to that run (issue 14's target
is stated against it). Every process plans from the same figures: one calibration process per
budget (`--codec auto`, a fresh profile cache) measures the machine, its op, link and codec
figures (docs/codecs.md), and every timed process plans once from that file (`--profile FILE
--static-plan`), so the codecs are compared on one set of figures rather than on whatever each
process measured. Nothing here is a test: it asserts no time.
"""
import argparse
import json
import statistics
import subprocess
import sys
import time


def run(ferry, model, budget, codec, iters, ssd_dir, figures=None):
    plan = ["--policy", "ferry", "--tier", "ssd", "--budget", budget, "--codec", codec, "--ssd-dir", ssd_dir]
    if figures:
        plan += ["--profile", figures, "--static-plan"]
    cmd = [ferry, "train", *model.split(), *(plan if codec != "unconstrained" else []),
           "--iters", str(iters), "--no-progress", "--json"]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr}")
    j = json.loads(p.stdout)
    j["_wall_s"] = time.time() - t0
    return j


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ferry", required=True)
    ap.add_argument("--model", default="--model preact-resnet --depth 56 --batch 32",
                    help="ferry train's model options")
    ap.add_argument("--budgets", default="33%,25%")
    ap.add_argument("--codecs", default="none,zero-mask,lz4,auto")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=6, help="per process; the first is dropped")
    ap.add_argument("--ssd-dir", default="/tmp")
    ap.add_argument("--quick", action="store_true", help="1 round of 3 iterations")
    a = ap.parse_args()
    import glob
    import os
    import tempfile
    if a.quick:
        a.rounds, a.iters = 1, 3
    codecs = a.codecs.split(",")
    if codecs[0] != "none":
        sys.exit("--codecs must start with none (the reference)")
    print(f"# Codecs on the SSD tier: `ferry train {a.model} --policy ferry --tier ssd`")
    print(f"\n{a.rounds} rounds x {a.iters} iterations per process (first dropped), codec order rotating; "
          f"OMP_WAIT_POLICY={__import__('os').environ.get('OMP_WAIT_POLICY', '')}; "
          f"load average at start {open('/proc/loadavg').read().split()[0]}\n")
    for budget in a.budgets.split(","):
        times = {c: [] for c in codecs + ["unconstrained"]}
        round_medians = {c: [] for c in codecs + ["unconstrained"]}
        written, read, losses, swapped, choices = {}, {}, {}, {}, {}
        # Calibration: measures op, link and codec figures into a fresh cache; the file is the
        # figures every timed process plans from.
        os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="ferry-codec-bench-")
        cal = run(a.ferry, a.model, budget, "auto", 4, a.ssd_dir)
        files = glob.glob(os.path.join(os.environ["XDG_CACHE_HOME"], "ferry", "profiles", "*.json"))
        if len(files) != 1:
            sys.exit(f"calibration left {len(files)} profile files in {os.environ['XDG_CACHE_HOME']}")
        figures = files[0]
        measured_codecs = [c for c in cal.get("codec_figures", []) if c["ratio"] < 0.9]
        for r in range(a.rounds):
            everyone = codecs + ["unconstrained"]
            order = everyone[r % len(everyone):] + everyone[:r % len(everyone)]
            for c in order:
                j = run(a.ferry, a.model, budget, c, a.iters, a.ssd_dir, None if c == "unconstrained" else figures)
                it = [x["time_ms"] for x in j["iterations"][1:]]
                times[c] += it
                round_medians[c].append(statistics.median(it))
                if c == "unconstrained":
                    continue
                written[c] = j["ssd_disk_bytes_written"] / a.iters
                read[c] = j["ssd_disk_bytes_read"] / a.iters
                swapped[c] = j["bytes_swapped_out"] / a.iters
                l = [x["loss"] for x in j["iterations"]]
                if c in losses and losses[c] != l:
                    sys.exit(f"codec {c}: losses differ between rounds (a run is not deterministic)")
                losses[c] = l
                if "codec_choices" in j:
                    choices[c] = j["codec_choices"]
                budget_bytes = j["budget_bytes"]
        print(f"## budget {budget} ({budget_bytes / 2**20:.1f} MiB), tensors swapped out per iteration "
              f"{swapped['none'] / 2**20:.1f} MiB\n")
        print("Figures: measured by one calibration process (`--codec auto`, 4 iterations); codecs measured to "
              "shrink a class below 0.9: " + (", ".join(f"{c['class']} {c['codec']} {c['ratio']:.2f}" for c in measured_codecs)
                                             or "none") + ".\n")
        mu = statistics.median(times["unconstrained"])
        print(f"Unconstrained (no plan, nothing swapped): median {mu:.0f} ms per iteration.\n")
        print("| codec | median iter ms | x none | paired x none per round | median paired | x unconstrained (median "
              "paired) | disk MiB written/iter | x none | disk MiB read/iter | losses bitwise = none |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        m0 = statistics.median(times["none"])
        for c in codecs:
            m = statistics.median(times[c])
            ratios = [x / y for x, y in zip(round_medians[c], round_medians["none"])]
            paired = ", ".join(f"{x:.2f}" for x in ratios)
            vs_free = statistics.median([x / y for x, y in zip(round_medians[c], round_medians["unconstrained"])])
            print(f"| {c} | {m:.0f} | {m / m0:.3f} | {paired} | {statistics.median(ratios):.3f} | {vs_free:.3f} | "
                  f"{written[c] / 2**20:.1f} | "
                  f"{written[c] / written['none']:.3f} | {read[c] / 2**20:.1f} | "
                  f"{'yes' if losses[c] == losses['none'] else 'NO'} |")
        for c, ch in choices.items():
            if c != "auto":
                continue
            picks = ", ".join(f"{x['class']} -> {x['codec']} ({x['tensors']} tensors, {x['bytes'] / 2**20:.1f} MiB, "
                              f"measured ratio {x['measured_ratio']:.2f})" for x in ch) or "nothing coded"
            print(f"\n`auto`'s last plan (last round) coded: {picks}")
        print()
        sys.stdout.flush()


if __name__ == "__main__":
    main()
