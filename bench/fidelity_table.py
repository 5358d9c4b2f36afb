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
- **the machine's own drift**: each model's no-swap run (`none`, no policy, same op times) is a
  case too: it moves nothing, so its meas/pred is how far this process's kernels ran from the
  profile's (a shared 2-core VM: other tenants, frequency, caches). `÷ none` divides a case's
  meas/pred by its model's `none` ratio: what is left is the part the schedule's model (transfers,
  overlap, stalls) gets wrong, assuming the drift is common to the runs of one model (it is not
  exactly: iterations of one run already spread by ~10%).
- columns: `iter pred/meas` ms and their ratio meas/pred; `live peak` predicted = measured (bytes);
  `extent <= arena`: highest byte written <= predicted arena; `xfer` the number of transfers and
  the 10th percentile / median / 90th percentile of measured/predicted per transfer, and the
  ratio of their sums.
"""


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))]


def row(j, drift):
    c = j["case"]
    p = j["predicted"]
    meas, pred = j["median_iter_ms"], p["iteration_ms"]
    norm = meas / pred / drift[c["model"]] if c["model"] in drift else None
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
    norm_within = norm is not None and abs(norm - 1) <= 0.10
    budget = f"{c['budget']} ({j['budget_bytes'] / 2**20:.1f} MiB)" if c["policy"] != "none" else "-"
    norm_text = "-" if norm is None else f"{norm:.2f}{'' if norm_within else ' *'}"
    return (f"| {c['model']} | {c['policy']} | {budget} | {c['tier']} | "
            f"{pred:.1f} | {meas:.1f} | {meas / pred:.2f}{'' if within else ' *'} | {norm_text} | {live_ok} | {ext_ok} | {xfer} |"), \
        within, meas / pred, norm_within, norm


def main():
    out = sys.argv[1]
    cases = []
    for f in sorted(glob.glob(os.path.join(out, "*.json"))):
        try:
            j = json.load(open(f))
        except (OSError, ValueError):
            continue
        if "case" in j and "predicted" in j:
            cases.append(j)
    drift = {j["case"]["model"]: j["median_iter_ms"] / j["predicted"]["iteration_ms"]
             for j in cases if j["case"]["policy"] == "none"}
    rows, misses, norm_misses, worst, worst_norm = [], 0, 0, (1.0, ""), (1.0, "")
    for j in cases:
        line, within, r, norm_within, norm = row(j, drift)
        rows.append(line)
        name = f"{j['case']['model']} {j['case']['policy']} {j['case']['budget']} {j['case']['tier']}"
        misses += not within
        if abs(r - 1) > abs(worst[0] - 1):
            worst = (r, name)
        if j["case"]["policy"] != "none" and norm is not None:
            norm_misses += not norm_within
            if abs(norm - 1) > abs(worst_norm[0] - 1):
                worst_norm = (norm, name)
    text = HEADER + "\n| model | policy | budget | tier | iter pred ms | iter meas ms | meas/pred | ÷ none | live peak exact | extent <= arena | xfers | xfer meas/pred p10/p50/p90 | sum ratio |\n"
    text += "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n"
    text += (f"\n{len(rows)} cases; {misses} outside 10% of the prediction (marked *); worst meas/pred {worst[0]:.2f} ({worst[1]}).\n"
             f"Divided by their model's no-swap drift: {norm_misses} of {len(rows) - len(drift)} outside 10%; "
             f"worst {worst_norm[0]:.2f} ({worst_norm[1]}).\n")
    open(os.path.join(out, "table.md"), "w").write(text)
    print(text)


if __name__ == "__main__":
    main()
