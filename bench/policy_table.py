#!/usr/bin/python3
"""Helpers and table formatter for bench/policies.sh (python3 standard library only).

bench/policies.sh runs `ferry plan` / `ferry train` and keeps every run's raw output under OUT:

    OUT/meta.tsv         key<TAB>value lines: models, fractions, policies, profiles, tiers, ...
    OUT/manifest.tsv     one line per run: model index, model spec, kind, where, policy,
                         fraction, budget bytes, exit code, seconds, file prefix (relative to OUT)
    OUT/runs/.../P.cmd   the command line; P.json its stdout; P.err its stderr

Kinds: profile (`ferry profile` for the profile `local`: P.trace.json, P.hardware.json), sim-ref (policy none, no budget, per profile), sim-min (--find-min-budget), sim (a policy
at a budget), meas-ref / meas-ref-end (ferry train without a policy, before and after the
policy runs), meas (ferry train with a policy at a budget on a tier), meas-skip (a run that was
not made; the exit code column says why).

`render OUT [wide|narrow]` reads those files, writes OUT/table.md and OUT/table.json and prints the markdown.
The other subcommands are small helpers for the driver (fractions, budget, field, oneline).
Nothing here computes a number that a run did not report, except ratios and percentages of them.
"""

import json
import math
import os
import re
import sys
from fractions import Fraction

PROFILE_SHORT = {
    "local": "local",
    "cpu-local": "cpu",
    "v100-16gb-pcie3": "v100",
    "v100-16gb-sxm2": "v100s",
    "v100-32gb-sxm2": "v100s32",
    "a100-40gb-pcie4": "a100",
    "a100-80gb-sxm4": "a100s",
    "h100-80gb-pcie5": "h100",
    "h100-80gb-sxm5": "h100s",
    "rtx4090-pcie4": "4090",
}


# ---------------------------------------------------------------- helpers for the driver


def parse_fraction(text):
    """'75', '75%', '0.75' -> Fraction(3, 4); values above 1 are percentages."""
    t = text.strip().rstrip("%")
    f = Fraction(t)
    if f > 1 or text.strip().endswith("%"):
        f = f / 100
    if f <= 0 or f > 1:
        raise ValueError(f"fraction {text!r} is not in (0, 1] (or (0, 100]%)")
    return f


def frac_label(f):
    """Fraction -> '75%', '33%', '12.5%'."""
    pct = Fraction(f) * 100
    if pct.denominator == 1:
        return f"{pct.numerator}%"
    return f"{float(pct):.3g}%"


def cmd_fractions(args):
    """Print the normalised fractions (decimal strings), one per line."""
    for part in args[0].split(","):
        if part.strip():
            f = parse_fraction(part)
            print(format_decimal(f))


def format_decimal(f):
    s = f"{float(f):.6f}".rstrip("0").rstrip(".")
    return s


def cmd_budget(args):
    """budget PEAK FRACTION -> floor(PEAK * FRACTION) bytes."""
    peak = int(args[0])
    print(math.floor(peak * Fraction(args[1])))


def load_json(path):
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def read_text(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def cmd_field(args):
    """field FILE KEY: print a top-level JSON field (empty when missing)."""
    d = load_json(args[0])
    if isinstance(d, dict) and args[1] in d:
        v = d[args[1]]
        print(json.dumps(v) if isinstance(v, (dict, list, bool)) else v)


MIN_RE = re.compile(r"smallest budget at which '[^']*' fits is [^(]*\((\d+) bytes")
NEEDS_RE = re.compile(r"needs [^(]*\((\d+) bytes\)")


def classify(rc, out, err):
    """One run's outcome: dict(status=ok|infeasible|too-large|error, ...) from its exit code,
    stdout JSON (may be None) and stderr text."""
    msg = ""
    if isinstance(out, dict) and out.get("feasible") is False:
        msg = out.get("reason", "")
    lines = [l for l in err.splitlines() if l.strip()]
    first_err = next((l for l in lines if "error" in l.lower()), lines[0] if lines else "")
    if not msg:
        msg = first_err
    msg = msg.replace("ferry: error: ", "").strip()
    if rc == 0 and (not isinstance(out, dict) or out.get("feasible", True)):
        return {"status": "ok"}
    r = {"message": msg}
    if "graph too large" in msg:
        r["status"] = "too-large"
        return r
    m = MIN_RE.search(msg)
    if m or "cannot fit" in msg or "out of memory" in msg.lower() or (
            isinstance(out, dict) and out.get("feasible") is False):
        r["status"] = "infeasible"
        if m:
            r["min_budget_bytes"] = int(m.group(1))
        n = NEEDS_RE.search(msg)
        if n:
            r["needs_bytes"] = int(n.group(1))
        return r
    r["status"] = "error"
    if not msg:
        r["message"] = f"exit code {rc}, no message"
    return r


def cmd_oneline(args):
    """oneline PREFIX RC: a short outcome for the progress line."""
    prefix, rc = args[0], int(args[1])
    out = load_json(prefix + ".json")
    c = classify(rc, out, read_text(prefix + ".err"))
    if c["status"] == "ok" and not isinstance(out, dict):
        print("ok")
    elif c["status"] == "ok":
        if "min_budget_bytes" in out:
            print(f"min {fmt_bytes(out['min_budget_bytes'])}")
        elif "median_iter_ms" in out:
            print(f"median {out['median_iter_ms']:.1f} ms, measured peak {fmt_bytes(out.get('measured_peak_bytes', 0))}")
        elif "iteration_ms" in out:
            print(f"{out['iteration_ms']:.1f} ms, peak {fmt_bytes(out.get('peak_bytes', 0))}")
        else:
            print("ok")
    elif c["status"] == "infeasible":
        mb = c.get("min_budget_bytes")
        print("does not fit" + (f" (min {fmt_bytes(mb)})" if mb else ""))
    elif c["status"] == "too-large":
        print("n/a (graph too large)")
    else:
        print("failed: " + c["message"][:160])


# ---------------------------------------------------------------- formatting


def fmt_bytes(n):
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"


def fmt_slowdown(x):
    if x >= 100:
        return f"{x:.0f}x"
    if x >= 10:
        return f"{x:.1f}x"
    return f"{x:.2f}x"


def fmt_ms(ms):
    if ms >= 10000:
        return f"{ms / 1000:.1f} s"
    if ms >= 100:
        return f"{ms:.0f} ms"
    return f"{ms:.1f} ms"


def min_pct_ceil(min_bytes, peak):
    """Smallest feasible budget as a whole percent of the peak, rounded up (so that a budget of
    that many percent is at least the minimum)."""
    return math.ceil(Fraction(min_bytes * 100, peak))


def short_message(msg, limit=48):
    msg = " ".join(msg.split())
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


def mark_without_time(c, outcome, min_bytes, peak, refused):
    """Fills cell `c` for a run that gave no iteration time: a budget below the policy's minimum
    (`refused`, with that minimum as % of `peak` when both are known), a graph checkmate refuses,
    or another error."""
    if outcome["status"] == "infeasible":
        c.update(status="infeasible", message=outcome.get("message"))
        if min_bytes and peak:
            c["min_budget_bytes"] = min_bytes
            c["text"] = f"{refused} (min {min_pct_ceil(min_bytes, peak)}%)"
        else:
            c["text"] = refused
    elif outcome["status"] == "too-large":
        c.update(status="too-large", message=outcome.get("message"), text="n/a (graph too large)")
    else:
        c.update(status="error", message=outcome.get("message"),
                 text="failed: " + short_message(outcome.get("message", "")))


def md_escape(text):
    return text.replace("|", "\\|")


def md_table(header, rows, align):
    """Markdown table padded to column widths so that it also reads as plain text."""
    cells = [header] + rows
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]

    def line(r):
        out = []
        for i, c in enumerate(r):
            out.append(c.rjust(widths[i]) if align[i] == "r" else c.ljust(widths[i]))
        return "| " + " | ".join(out) + " |"

    sep = "| " + " | ".join(("-" * (w - 1) + ":") if a == "r" else "-" * w
                            for w, a in zip(widths, align)) + " |"
    return "\n".join([line(header), sep] + [line(r) for r in rows])


# ---------------------------------------------------------------- render


def read_meta(outdir):
    meta = {}
    for line in read_text(os.path.join(outdir, "meta.tsv")).splitlines():
        if "\t" in line:
            k, v = line.split("\t", 1)
            meta[k] = v
    return meta


def read_manifest(outdir):
    runs = []
    for line in read_text(os.path.join(outdir, "manifest.tsv")).splitlines():
        parts = line.split("\t")
        if len(parts) != 10:
            continue
        idx, spec, kind, where, policy, frac, budget, rc, secs, prefix = parts
        run = {"model_index": int(idx), "model": spec, "kind": kind, "where": where,
               "policy": policy, "fraction": frac, "budget_bytes": int(budget) if budget else None,
               "rc": rc, "seconds": float(secs) if secs else None,
               "file": prefix + ".json" if prefix else None}
        if kind == "meas-skip" or not prefix:
            run["outcome"] = {"status": "skipped", "message": rc}
            run["out"] = None
        else:
            out = load_json(os.path.join(outdir, prefix + ".json"))
            err = read_text(os.path.join(outdir, prefix + ".err"))
            run["out"] = out
            run["outcome"] = classify(int(rc), out, err)
        runs.append(run)
    return runs


def split_list(text, sep=","):
    return [p.strip() for p in text.split(sep) if p.strip()]


def local_profile_line(outdir, run):
    """What `ferry profile` measured for the profile `local`, or why it failed."""
    if run is None:
        return None
    if run["outcome"]["status"] != "ok":
        return f"`local` profile failed: {short_message(run['outcome'].get('message', ''), 120)}"
    hw = load_json(os.path.join(outdir, run["file"][: -len(".json")] + ".hardware.json"))
    if not isinstance(hw, dict):
        return "`local` profile: no hardware profile written"
    try:
        link, st = hw["host_link"], hw["storage"]
        return ("`local` = this machine profiled by `ferry profile` for this model (measured op "
                f"times; memcpy arena->host {link['device_to_host']['nominal_bytes_per_s'] / 1e9:.1f} "
                f"GB/s, host->arena {link['host_to_device']['nominal_bytes_per_s'] / 1e9:.1f} GB/s; "
                f"disk write {st['write_bytes_per_s'] / 1e9:.2f} GB/s, read "
                f"{st['read_bytes_per_s'] / 1e9:.2f} GB/s; {run['seconds']:.0f} s to profile).")
    except (KeyError, TypeError):
        return "`local` profile: unexpected hardware profile format"


def render(outdir, layout="wide"):
    meta = read_meta(outdir)
    runs = read_manifest(outdir)
    models = split_list(meta.get("models", ""), ";")
    fractions = split_list(meta.get("fractions", ""))
    policies = split_list(meta.get("policies", ""))
    profiles = split_list(meta.get("profiles", ""))
    tiers = split_list(meta.get("tiers", ""))
    measure = meta.get("measure") == "1"

    def find(idx, kind, where=None, policy=None, frac=None):
        for r in runs:
            if (r["model_index"] == idx and r["kind"] == kind
                    and (where is None or r["where"] == where)
                    and (policy is None or r["policy"] == policy)
                    and (frac is None or r["fraction"] == frac)):
                return r
        return None

    md = ["# Policy slowdown vs unlimited memory", ""]
    md.append(
        f"Ferry `{meta.get('ferry', '?')}` ({meta.get('ferry_commit', '?')}); started "
        f"{meta.get('started', '?')}, finished {meta.get('finished', '?')}; load average "
        f"{meta.get('load_start', '?')} at the start, {meta.get('load_end', '?')} at the end; "
        f"{meta.get('nproc', '?')} cores. Simulated: `ferry plan --json --precision "
        f"{meta.get('precision', 'fp32')}`, host tier"
        + (f", checkmate CBC limit {meta['checkmate_time_limit']} s per solve"
           if meta.get("checkmate_time_limit") else ", checkmate CBC limit Ferry's default")
        + ". "
        + (f"Measured: `ferry train --iters {meta.get('iters')} --json`, threads: "
           f"{meta.get('threads', '?')} (median of the iterations after the first, as Ferry "
           "reports it)." if measure else "Not measured (--no-measure)." if meta.get("precision", "fp32") == "fp32"
           else f"Not measured (--precision {meta.get('precision')}: ferry train runs fp32 only).")
    )
    md.append("")
    if layout not in ("wide", "narrow"):
        raise ValueError(f"layout {layout!r} is not wide or narrow")
    result = {"meta": meta, "models": []}

    for idx, spec in enumerate(models):
        mres = {"model": spec, "fractions": fractions, "policies": policies,
                "simulated": {}, "measured": None}
        md.append(f"## {spec}")
        md.append("")

        # --- references
        sim_ref = {}
        for prof in profiles:
            r = find(idx, "sim-ref", prof)
            ref = {"file": r["file"] if r else None}
            if r and r["outcome"]["status"] == "ok" and isinstance(r["out"], dict):
                ref.update(iteration_ms=r["out"]["iteration_ms"], peak_bytes=r["out"]["peak_bytes"])
            elif r:
                ref["error"] = r["outcome"].get("message", "")
            sim_ref[prof] = ref
        meas_ref = meas_ref_end = None
        if measure:
            meas_ref, meas_ref_end = {}, {}
            for kind, ref in (("meas-ref", meas_ref), ("meas-ref-end", meas_ref_end)):
                r = find(idx, kind)
                if r is None:
                    continue
                ref["file"] = r["file"]
                if r["outcome"]["status"] == "ok" and isinstance(r["out"], dict):
                    ref.update(median_iter_ms=r["out"]["median_iter_ms"],
                               peak_bytes=r["out"]["predicted_peak_bytes"],
                               iterations_ms=[it["time_ms"] for it in r["out"].get("iterations", [])])
                else:
                    ref["error"] = r["outcome"].get("message", "")

        parts = []
        for prof in profiles:
            ref = sim_ref[prof]
            if "iteration_ms" in ref:
                parts.append(f"{prof} {fmt_ms(ref['iteration_ms'])}")
            else:
                parts.append(f"{prof} failed ({short_message(ref.get('error', 'no run'))})")
        if measure:
            if "median_iter_ms" in meas_ref:
                s = f"measured {fmt_ms(meas_ref['median_iter_ms'])}"
                if "median_iter_ms" in meas_ref_end:
                    s += f" (again after the policy runs: {fmt_ms(meas_ref_end['median_iter_ms'])})"
                parts.append(s)
            else:
                parts.append(f"measured failed ({short_message(meas_ref.get('error', 'no run'))})")
        md.append("Unlimited iteration (policy none, no budget): " + "; ".join(parts) + ".")
        peaks = []
        for prof in profiles:
            if "peak_bytes" in sim_ref[prof]:
                p = sim_ref[prof]["peak_bytes"]
                peaks.append(f"{prof} {fmt_bytes(p)} ({p:,} B)")
        if measure and meas_ref and "peak_bytes" in meas_ref:
            p = meas_ref["peak_bytes"]
            peaks.append(f"measured {fmt_bytes(p)} ({p:,} B)")
        md.append("No-swap peak (the 100% of the budgets): " + "; ".join(peaks) + ".")
        if "local" in profiles:
            line = local_profile_line(outdir, find(idx, "profile", "local"))
            if line:
                md.append(line)
        md.append("")

        # --- simulated
        sim_cells = {prof: {} for prof in profiles}
        sim_min = {prof: {} for prof in profiles}
        for prof in profiles:
            ref = sim_ref[prof]
            for pol in policies:
                r = find(idx, "sim-min", prof, pol)
                cell = {"file": r["file"] if r else None, "seconds": r["seconds"] if r else None}
                if r is None:
                    cell.update(status="missing", text="not run")
                elif r["outcome"]["status"] == "ok" and isinstance(r["out"], dict) \
                        and "min_budget_bytes" in r["out"] and "peak_bytes" in ref:
                    mb = r["out"]["min_budget_bytes"]
                    cell.update(status="ok", min_budget_bytes=mb,
                                min_fraction=mb / ref["peak_bytes"],
                                text=f"{100 * mb / ref['peak_bytes']:.1f}%")
                elif r["outcome"]["status"] == "too-large":
                    cell.update(status="too-large", text="n/a (graph too large)",
                                message=r["outcome"].get("message"))
                else:
                    msg = r["outcome"].get("message", "no reference peak")
                    cell.update(status="error", message=msg, text="failed: " + short_message(msg))
                sim_min[prof][pol] = cell
                sim_cells[prof][pol] = {}
                for frac in fractions:
                    r = find(idx, "sim", prof, pol, frac)
                    c = {"file": r["file"] if r else None, "seconds": r["seconds"] if r else None,
                         "budget_bytes": r["budget_bytes"] if r else None}
                    if r is None:
                        c.update(status="missing", text="not run")
                    else:
                        o = r["outcome"]
                        if o["status"] == "ok" and "iteration_ms" in ref:
                            it = r["out"]["iteration_ms"]
                            c.update(status="ok", iteration_ms=it, slowdown=it / ref["iteration_ms"],
                                     peak_bytes=r["out"].get("peak_bytes"),
                                     stall_ms=r["out"].get("stall_ms"),
                                     recompute_ms=r["out"].get("recompute_ms"),
                                     text=fmt_slowdown(it / ref["iteration_ms"]))
                        else:
                            mb = sim_min[prof][pol].get("min_budget_bytes", o.get("min_budget_bytes"))
                            mark_without_time(c, o, mb, ref.get("peak_bytes"), "—")
                    sim_cells[prof][pol][frac] = c
            mres["simulated"][prof] = {"reference": ref, "min_budget": sim_min[prof],
                                       "cells": sim_cells[prof]}

        def bold_best(columns):
            """Bold the smallest slowdown of each column among feasible cells."""
            for cells in columns:
                ok = [c for c in cells if c.get("status") == "ok"]
                if len(ok) > 1:
                    best = fmt_slowdown(min(c["slowdown"] for c in ok))
                    for c in ok:
                        if fmt_slowdown(c["slowdown"]) == best:  # ties as printed
                            c["display"] = f"**{c['text']}**"

        if profiles and layout == "narrow":
            for p in profiles:
                cols = [[sim_cells[p][pol][f] for pol in policies] for f in fractions]
                bold_best(cols)
                header = ["policy", "min budget"] + [frac_label(parse_fraction(f)) for f in fractions]
                rows = []
                for pol in policies:
                    row = [pol, md_escape(sim_min[p][pol]["text"])]
                    row += [md_escape(sim_cells[p][pol][f].get("display", sim_cells[p][pol][f]["text"]))
                            for f in fractions]
                    rows.append(row)
                md.append(f"Simulated on `{p}`: slowdown over its unlimited iteration; `min budget`: "
                          "the smallest feasible budget as % of its no-swap peak (`--find-min-budget`).")
                md.append("")
                md.append(md_table(header, rows, ["l"] + ["r"] * (len(header) - 1)))
                md.append("")
        elif profiles:
            cols = [[sim_cells[p][pol][f] for pol in policies] for f in fractions for p in profiles]
            bold_best(cols)
            header = ["policy"] + [f"min {PROFILE_SHORT.get(p, p)}" for p in profiles]
            header += [f"{frac_label(parse_fraction(f))} {PROFILE_SHORT.get(p, p)}"
                       for f in fractions for p in profiles]
            rows = []
            for pol in policies:
                row = [pol] + [md_escape(sim_min[p][pol]["text"]) for p in profiles]
                for f in fractions:
                    for p in profiles:
                        c = sim_cells[p][pol][f]
                        row.append(md_escape(c.get("display", c["text"])))
                rows.append(row)
            md.append("Simulated slowdown (iteration time over the profile's unlimited iteration); "
                      "`min`: the smallest feasible budget as % of the profile's no-swap peak "
                      "(`--find-min-budget`).")
            md.append("")
            md.append(md_table(header, rows, ["l"] + ["r"] * (len(header) - 1)))
            md.append("")

        # --- measured
        if measure:
            meas_cells = {}
            for pol in policies:
                meas_cells[pol] = {}
                for tier in tiers:
                    meas_cells[pol][tier] = {}
                    for frac in fractions:
                        r = find(idx, "meas", tier, pol, frac) or find(idx, "meas-skip", tier, pol, frac)
                        c = {"file": r["file"] if r else None, "seconds": r["seconds"] if r else None,
                             "budget_bytes": r["budget_bytes"] if r else None}
                        if r is None:
                            c.update(status="missing", text="not run")
                        elif r["kind"] == "meas-skip":
                            reason = r["rc"]
                            c.update(status="skipped", reason=reason)
                            if reason == "same-as-host":
                                h = meas_cells[pol].get("host", {}).get(frac)
                                if h and h.get("status") == "ok":
                                    c.update(slowdown=h["slowdown"], text=h["text"] + " ‡",
                                             same_as="host")
                                else:
                                    c["text"] = "not run"
                            else:
                                c["text"] = f"not run ({reason})"
                        else:
                            o = r["outcome"]
                            peak = meas_ref.get("peak_bytes")
                            if o["status"] == "ok" and "median_iter_ms" in meas_ref:
                                it = r["out"]["median_iter_ms"]
                                c.update(status="ok", median_iter_ms=it,
                                         slowdown=it / meas_ref["median_iter_ms"],
                                         measured_peak_bytes=r["out"].get("measured_peak_bytes"),
                                         measured_extent_bytes=r["out"].get("measured_extent_bytes"),
                                         bytes_swapped_out=r["out"].get("bytes_swapped_out"),
                                         iterations_ms=[i["time_ms"] for i in r["out"].get("iterations", [])],
                                         text=fmt_slowdown(it / meas_ref["median_iter_ms"]))
                                if c["measured_extent_bytes"] is not None and c["budget_bytes"] \
                                        and max(c["measured_peak_bytes"], c["measured_extent_bytes"]) > c["budget_bytes"]:
                                    c["text"] += " (over budget!)"
                            else:
                                mark_without_time(c, o, o.get("min_budget_bytes"), peak, "does not fit")
                        meas_cells[pol][tier][frac] = c
            mres["measured"] = {"reference": meas_ref, "reference_end": meas_ref_end,
                                "cells": meas_cells}
            cols = [[meas_cells[pol][t][f] for pol in policies] for f in fractions for t in tiers]
            # a copied SSD cell is the host run: do not let it compete twice
            bold_best([[c for c in col if c.get("same_as") is None] for col in cols])
            header = ["policy"] + [f"{frac_label(parse_fraction(f))} {t}" for f in fractions for t in tiers]
            rows = []
            for pol in policies:
                row = [pol]
                for f in fractions:
                    for t in tiers:
                        c = meas_cells[pol][t][f]
                        row.append(md_escape(c.get("display", c["text"])))
                rows.append(row)
            md.append("Measured slowdown on this machine (median iteration over the unlimited run's "
                      "median), budgets as % of the measured no-swap peak.")
            md.append("")
            md.append(md_table(header, rows, ["l"] + ["r"] * (len(header) - 1)))
            md.append("")
        result["models"].append(mres)

    md.append("Legend: `1.23x` = iteration time over the unlimited one (bold: the fastest policy "
              "of the column); `— (min 41%)` = the simulated plan does not fit this budget, the "
              "policy's smallest feasible budget is 41% of the peak (rounded up); `does not fit "
              "(min 41%)` = `ferry train` refused the budget up front, with the minimum it reported; "
              "`n/a (graph too large)` = checkmate refuses graphs above its size limit; "
              "`‡` = the policy only recomputes (never swaps), so the SSD tier is the same run as "
              "the host tier; `failed: ...` = the first line of another error. Raw output of every "
              "run: `runs/` next to this file; `table.json` has every number.")
    text = "\n".join(md) + "\n"
    errors = count_errors(result["models"])
    result["failed_runs"] = errors
    with open(os.path.join(outdir, "table.md"), "w") as f:
        f.write(text)
    with open(os.path.join(outdir, "table.json"), "w") as f:
        json.dump(result, f, indent=1, ensure_ascii=False)
        f.write("\n")
    sys.stdout.write(text)
    return errors


def count_errors(obj):
    """Cells and references that failed with an error (not an infeasible budget)."""
    if isinstance(obj, dict):
        own = 1 if obj.get("status") == "error" or "error" in obj else 0
        return own + sum(count_errors(v) for v in obj.values())
    if isinstance(obj, list):
        return sum(count_errors(v) for v in obj)
    return 0


def main(argv):
    cmds = {"fractions": (cmd_fractions, 1), "budget": (cmd_budget, 2), "field": (cmd_field, 2),
            "oneline": (cmd_oneline, 2), "render": (lambda a: 1 if render(*a) else 0, 1)}
    if len(argv) < 2 or argv[1] not in cmds or not (
            cmds[argv[1]][1] <= len(argv) - 2 <= cmds[argv[1]][1] + (argv[1] == "render")):
        sys.stderr.write("usage: policy_table.py render OUTDIR [wide|narrow] | fractions LIST | budget PEAK FRACTION"
                         " | field FILE KEY | oneline PREFIX RC\n")
        return 2
    try:
        return cmds[argv[1]][0](argv[2:]) or 0
    except (ValueError, ZeroDivisionError) as e:
        sys.stderr.write(f"policy_table.py: {e}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
