#!/usr/bin/env python3
"""Turns bench/fidelity.sh's JSON files into a Markdown table (printed, and OUT/table.md).

Per case: the simulator's predicted iteration time (from the earlier profile) vs the measured
median; predicted vs measured live peak (exact?) and the predicted arena vs the highest byte the
run wrote; and over every transfer of the iteration the distribution of measured / predicted time.
"""
import glob
import json
import os
import statistics
import sys

HEADER = """What is compared with what
- **predicted**: `ferry train`'s own simulation of the exact schedule it then runs, made before the
  run from an *earlier, separate* `ferry profile` of the same model and shape on this machine: its
  measured op times (`--op-times`) and its measured memcpy and direct-I/O rates (`--device`).
  Nothing measured in the run itself enters the prediction. Because the op times come from a
  profile of the same configuration on the same machine, the compute part of the prediction is a
  replay of measurements: what the model contributes is the schedule's timing (overlap of
  transfers with compute, stalls, transfer times from bandwidth and latency) and the memory.
- **measured**: the median wall time of iterations 2..N; the live peak from the executor's own
  block table (every allocation and free it performed, sizes from the backend); the highest byte
  written, from a scan of the arena for its fill pattern; per transfer, the transfer engine's
  start-to-end time, median over iterations 2..N, matched to the predicted transfer by
  (direction, tensor, occurrence). A predicted SSD transfer is the sum of its two legs.
- columns: `iter pred/meas` ms and their ratio meas/pred; `live peak` predicted = measured (bytes);
  `extent <= arena`: highest byte written <= predicted arena; `xfer` the number of transfers and
  the 10th percentile / median / 90th percentile of measured/predicted per transfer, and the
  ratio of their sums.
"""


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))]


def row(j):
    c = j["case"]
    p = j["predicted"]
    meas, pred = j["median_iter_ms"], p["iteration_ms"]
    xs = [t for t in j.get("transfers", []) if "measured_us" in t and t["predicted_us"] > 0]
    ratios = [t["measured_us"] / t["predicted_us"] for t in xs]
    if ratios:
        sums = sum(t["measured_us"] for t in xs) / sum(t["predicted_us"] for t in xs)
        xfer = f"{len(ratios)} | {pct(ratios, .1):.2f} / {statistics.median(ratios):.2f} / {pct(ratios, .9):.2f} | {sums:.2f}"
    else:
        xfer = "0 | - | -"
    live_ok = "yes" if j["measured_peak_bytes"] == p["live_peak_bytes"] else f"NO ({j['measured_peak_bytes']} vs {p['live_peak_bytes']})"
    ext_ok = "yes" if j["measured_extent_bytes"] <= p["peak_bytes"] else "NO"
    within = abs(meas / pred - 1) <= 0.10
    return (f"| {c['model']} | {c['policy']} | {c['budget']} ({j['budget_bytes'] / 2**20:.1f} MiB) | {c['tier']} | "
            f"{pred:.1f} | {meas:.1f} | {meas / pred:.2f}{'' if within else ' *'} | {live_ok} | {ext_ok} | {xfer} |"), within, meas / pred


def main():
    out = sys.argv[1]
    rows, misses, worst = [], 0, (1.0, "")
    for f in sorted(glob.glob(os.path.join(out, "*.json"))):
        try:
            j = json.load(open(f))
        except (OSError, ValueError):
            continue
        if "case" not in j or "predicted" not in j:
            continue
        line, within, r = row(j)
        rows.append(line)
        misses += not within
        if abs(r - 1) > abs(worst[0] - 1):
            worst = (r, f"{j['case']['model']} {j['case']['policy']} {j['case']['budget']} {j['case']['tier']}")
    text = HEADER + "\n| model | policy | budget | tier | iter pred ms | iter meas ms | meas/pred | live peak exact | extent <= arena | xfers | xfer meas/pred p10/p50/p90 | sum ratio |\n"
    text += "|---|---|---|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n"
    text += f"\n{len(rows)} cases; {misses} outside 10% of the prediction (marked *); worst meas/pred {worst[0]:.2f} ({worst[1]}).\n"
    open(os.path.join(out, "table.md"), "w").write(text)
    print(text)


if __name__ == "__main__":
    main()
