#!/usr/bin/env python3
"""The table of bench/interference.sh from its output directory (measured iteration times; the
predicted ones are the simulator's, from the figures of the calibration process)."""
import collections
import glob
import json
import os
import statistics
import sys


def main(out):
    runs = collections.defaultdict(dict)  # (tier, budget) -> variant -> round -> (measured, predicted, interference)
    for path in glob.glob(os.path.join(out, '*-*-*-*.json')):
        name = os.path.basename(path)[:-5]
        tier, budget, variant, rnd = name.split('-')
        d = json.load(open(path))
        ms = statistics.median([it['time_ms'] for it in d['iterations']][1:])
        p = d.get('predicted', {})
        runs[(tier, budget)].setdefault(variant, {})[int(rnd)] = (ms, p.get('iteration_ms'), p.get('interference_ms'))
    for (tier, budget) in sorted(runs, key=lambda k: (k[0], -int(k[1]))):
        case = runs[(tier, budget)]
        none = {r: v[0] for r, v in case['none'].items()}
        print(f"\n## {tier} tier, {budget}% of the no-swap peak\n")
        print(f"Unconstrained (no plan): median {statistics.median(none.values()):.1f} ms per iteration.\n")
        print("| plan | median iter ms (measured) | x none per round | median x none | predicted ms | "
              "of which copies slow the ops | measured / predicted |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for v in ('aware', 'blind'):
            rows = case.get(v, {})
            rs = sorted(r for r in rows if r in none)
            ratios = [rows[r][0] / none[r] for r in rs]
            med = statistics.median(rows[r][0] for r in rows)
            pred = rows[rs[0]][1]
            intf = rows[rs[0]][2] or 0
            print(f"| {v} | {med:.1f} | {', '.join(f'{x:.2f}' for x in ratios)} | {statistics.median(ratios):.3f} | "
                  f"{pred:.1f} | {intf:.1f} | {med / pred:.2f} |")
        rs = sorted(r for r in case.get('aware', {}) if r in case.get('blind', {}))
        pair = [case['aware'][r][0] / case['blind'][r][0] for r in rs]
        print(f"\naware / blind per round: {', '.join(f'{x:.3f}' for x in pair)}; median {statistics.median(pair):.3f}")


if __name__ == '__main__':
    if len(sys.argv) != 2:
        sys.exit('usage: interference_table.py OUT_DIR')
    main(sys.argv[1])
