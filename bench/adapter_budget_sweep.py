#!/usr/bin/python3
"""ferry's plans for one PyTorch-adapter recording, swept over the budget (predicted).

Records one step of a model from tests/python/models.py through ferry.torch.Budget (measured op
times), saves the planner's inputs, then calls the planner (`_ferry.plan`, policy `ferry`, the
adapter's restrictions: only saved tensors move, only replayable ops recompute) at budgets from
the smallest plan to the unplanned need, and prints per budget the swaps, recomputes, device bytes
and predicted iteration time. Every time is a prediction of Ferry's simulator. The op times come
from this machine's recording, so two builds compare on the same recording only: pass --save in
one run and --load in the other (docs/planner.md, "Where it loses", was made that way).

Usage (PYTHONPATH=build/python, FERRY_SOURCE_DIR=the checkout):
  bench/adapter_budget_sweep.py [--model transformer] [--steps 40] [--save inputs.pkl | --load inputs.pkl]
The profile is the replay test's (tests/python/test_torch_adapter.py, slow_link_profile): cpu-local
with its link and disk a million times slower.
"""
import argparse
import json
import os
import pathlib
import pickle
import sys
import tempfile


def record(model_name):
    import torch  # noqa: F401  (ferry.torch needs it loaded)
    import ferry.torch as ft
    from ferry import _ferry
    sys.path.insert(0, str(pathlib.Path(os.environ["FERRY_SOURCE_DIR"]) / "tests" / "python"))
    from models import CASES
    from test_torch_adapter import slow_link_profile
    path = slow_link_profile(pathlib.Path(tempfile.mkdtemp()))
    profile = json.loads(pathlib.Path(path).read_text())
    calls = []
    original = _ferry.plan

    def spy(*args):
        calls.append(args)
        return original(*args)

    ft._ferry.plan = spy
    case = CASES[model_name]
    model = case.build(0)
    optimizer = case.optimizer(model)
    trainer = ft.Budget(model, optimizer, budget="1TiB", device=path, measure=True)
    inputs, targets = case.batches(1)[0]
    optimizer.zero_grad(set_to_none=True)
    with trainer.step():
        case.loss_fn(model(inputs), targets).backward()
    optimizer.step()
    trainer.limits()  # plans once: the call whose arguments are kept
    ft._ferry.plan = original
    args = list(calls[-1])
    args[3] = profile  # the profile itself, so that a saved file replays anywhere
    return args


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="transformer")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--save")
    ap.add_argument("--load")
    a = ap.parse_args()
    from ferry import _ferry
    if a.load:
        args = pickle.load(open(a.load, "rb"))
    else:
        args = record(a.model)
        if a.save:
            pickle.dump(args, open(a.save, "wb"))
    profile_path = pathlib.Path(tempfile.mkdtemp()) / "profile.json"
    profile_path.write_text(json.dumps(args[3]))
    args = list(args)
    args[3] = str(profile_path)
    lo = _ferry.plan(*args[:1], 1, *args[2:])["min_budget_bytes"]
    full = _ferry.plan(*args[:1], 1 << 40, *args[2:])["unlimited"]["device_bytes"]
    print(f"smallest plan {lo} bytes, unplanned need {full} bytes (predicted times)")
    print("| of the way | budget | swaps | recomputes | device bytes | iteration ms | variant |")
    print("|---|---|---|---|---|---|---|")
    for k in range(a.steps + 1):
        args[1] = lo + (full - lo) * k // a.steps
        r = _ferry.plan(*args)
        if not r["fits"]:
            print(f"| {100 * k / a.steps:.1f}% | {args[1]} | - | - | - | does not fit | |")
            continue
        notes = r.get("notes") or ""  # "<variant>: N gaps swapped, ..."
        variant = notes[:notes.find(" gaps swapped")].rsplit(": ", 1)[0] if " gaps swapped" in notes else notes
        print(f"| {100 * k / a.steps:.1f}% | {args[1]} | {r['swapped_tensors']} | {r['recomputed_tensors']} | "
              f"{r['device_bytes']} | {r['predicted']['iteration_ms']:.1f} | {variant} |")


if __name__ == "__main__":
    main()
