"""ferry.torch: training under a budget gives plain PyTorch's numbers, within the budget it measures.

Each case trains a fresh model twice from the same seed on the same batches: plainly, and through
ft.Budget with a budget between the smallest one a plan fits and what the step needs unplanned
(both from Ferry's model of the recorded step). After the steps, weights, gradients and buffers
must be bitwise equal, the plan must really have moved tensors (or the comparison proves
nothing), and every planned step's peak, measured from PyTorch's allocator events, must be within
the budget.
"""
import contextlib
import json
import os
import pathlib
import subprocess

import pytest
import torch

import ferry.torch as ft
from models import CASES, assert_bitwise_equal, bitwise_differences, train_steps

STEPS = 4


def ferry_steps(model, optimizer, batches, loss_fn, trainer, budget_of=None):
    """train_steps through `trainer`; after the first (recorded) step, budget_of(limits) sets the budget."""
    losses = []
    for i, (inputs, targets) in enumerate(batches):
        optimizer.zero_grad(set_to_none=True)
        with trainer.step():
            loss = loss_fn(model(inputs), targets)
            loss.backward()
        optimizer.step()
        losses.append(loss.detach())
        if i == 0 and budget_of is not None:
            trainer.set_budget(budget_of(trainer.limits()))
    optimizer.zero_grad(set_to_none=True)
    return losses


def plain_run(case, batches):
    model = case.build(0)
    optimizer = case.optimizer(model)
    losses = train_steps(model, optimizer, batches, case.loss_fn)
    optimizer.zero_grad(set_to_none=True)
    return model, losses


@pytest.mark.parametrize("tier", ["host", "ssd"])
@pytest.mark.parametrize("name", ["resnet18", "transformer", "quirky"])
def test_bitwise_identical_and_within_budget(name, tier, tmp_path):
    case = CASES[name]
    batches = case.batches(STEPS)
    reference, ref_losses = plain_run(case, batches)

    model = case.build(0)
    optimizer = case.optimizer(model)
    trainer = ft.Budget(model, optimizer, budget="1TiB", tier=tier, ssd_dir=str(tmp_path), measure=True)
    seen = {}

    def budget_of(limits):
        seen.update(limits)
        assert limits["min_budget_bytes"] < limits["unlimited_bytes"], limits
        return limits["min_budget_bytes"] + (limits["unlimited_bytes"] - limits["min_budget_bytes"]) // 3

    losses = ferry_steps(model, optimizer, batches, case.loss_fn, trainer, budget_of)
    report = trainer.report()
    assert [e["event"] for e in report["events"] if e["event"] in ("diverged", "recorded", "held_past_plan")] \
        == ["recorded"], report
    assert report["plan"]["moved_tensors"] > 0, report
    assert report["transfers"]["swap_outs"] >= report["plan"]["swapped_tensors"], report
    assert report["transfers"]["bytes_in"] == report["transfers"]["bytes_out"], report
    measured = [e["measured_peak_bytes"] for e in report["events"] if e["event"] == "measured"][1:]
    assert len(measured) == STEPS - 1
    for peak in measured:
        assert peak <= trainer.budget_bytes, (
            f"measured peak {peak} exceeds the budget {trainer.budget_bytes} (limits {seen}, plan {report['plan']})")
    assert all(torch.equal(a, b) for a, b in zip(losses, ref_losses))
    assert_bitwise_equal(model, reference)


def slow_link_profile(tmp_path):
    """cpu-local with a host link and a disk a million times slower: swapping costs more than
    recomputing, whatever the recorded op times."""
    profile = json.loads((pathlib.Path(os.environ["FERRY_SOURCE_DIR"]) / "profiles" / "cpu-local.json").read_text())
    profile["name"] = "cpu-local-slow-link"
    for direction in ("host_to_device", "device_to_host"):
        profile["host_link"][direction]["nominal_bytes_per_s"] /= 1e6
    profile["storage"]["read_bytes_per_s"] /= 1e6
    profile["storage"]["write_bytes_per_s"] /= 1e6
    path = tmp_path / "slow-link.json"
    path.write_text(json.dumps(profile))
    return str(path)


@pytest.mark.parametrize("name", ["resnet18", "transformer", "quirky"])
def test_recompute_replays_ops_bitwise(name, tmp_path):
    """With swaps priced out, the plan recomputes dropped tensors by replaying their ops."""
    case = CASES[name]
    batches = case.batches(STEPS)
    reference, ref_losses = plain_run(case, batches)
    model = case.build(0)
    optimizer = case.optimizer(model)
    trainer = ft.Budget(model, optimizer, budget="1TiB", device=slow_link_profile(tmp_path), measure=True)
    # Three quarters of the way from the smallest budget to the unplanned need, not half: on the
    # transformer, below a little under halfway the plan must swap too (some heads can only be
    # recomputed from their unsaved QKV projection kept on the device, which costs more than it
    # frees: docs/planner.md "Where it loses"). Where that edge falls moves with the recorded op
    # times. Halfway, a recording on a loaded machine once got a plan that swapped 19 tensors and
    # recomputed none (before the planner counted the sources a recompute keeps), and this test,
    # which is about replays, had nothing to check.
    losses = ferry_steps(model, optimizer, batches, case.loss_fn, trainer,
                         lambda lim: lim["min_budget_bytes"] + (lim["unlimited_bytes"] - lim["min_budget_bytes"]) * 3 // 4)
    report = trainer.report()
    events = [e["event"] for e in report["events"]]
    assert "diverged" not in events and "held_past_plan" not in events, report
    assert report["plan"]["recomputed_tensors"] > 0, report
    assert report["replayed_ops"] >= STEPS - 1, report
    for e in report["events"]:
        if e["event"] == "measured" and e["step"] > 1:
            # Not only the budget: the plan's own prediction. The adapter once kept a multi-output
            # producer's captured arguments (and its later targets) past the plan, up to 33 KB over.
            assert e["measured_peak_bytes"] <= report["plan"]["device_bytes"] <= trainer.budget_bytes, report
    assert all(torch.equal(a, b) for a, b in zip(losses, ref_losses))
    assert_bitwise_equal(model, reference)


def test_held_past_plan_is_reported(tmp_path, monkeypatch):
    """The check behind 'held_past_plan' can fail: an executor that never lets a saved tensor's
    bytes go after its last read is reported, naming what it held."""
    case = CASES["quirky"]
    batches = case.batches(3)
    model = case.build(0)
    optimizer = case.optimizer(model)
    trainer = ft.Budget(model, optimizer, budget="1TiB", device=slow_link_profile(tmp_path))
    monkeypatch.setattr(ft._Executor, "_consumed", lambda self, slot: None)
    ferry_steps(model, optimizer, batches, case.loss_fn, trainer,
                lambda lim: lim["min_budget_bytes"] + (lim["unlimited_bytes"] - lim["min_budget_bytes"]) // 2)
    report = trainer.report()
    assert report["plan"]["moved_tensors"] > 0, report
    held = [e for e in report["events"] if e["event"] == "held_past_plan"]
    assert len(held) == 2 and all(e["what"] for e in held), report  # both planned steps
    assert all(w.startswith(("tensor ", "the arguments of op ")) for e in held for w in e["what"]), held


def test_comparison_can_fail():
    """The bitwise check notices a one-ulp change in one weight."""
    case = CASES["quirky"]
    a, b = case.build(0), case.build(0)
    assert bitwise_differences(a, b) == []
    with torch.no_grad():
        p = next(b.parameters())
        p.view(-1)[0] = torch.nextafter(p.view(-1)[0], torch.tensor(float("inf")))
    assert bitwise_differences(a, b) != []


def test_budget_below_the_smallest_names_it():
    case = CASES["quirky"]
    batches = case.batches(2)
    model = case.build(0)
    optimizer = case.optimizer(model)
    trainer = ft.Budget(model, optimizer, budget="1TiB")
    ferry_steps(model, optimizer, batches[:1], case.loss_fn, trainer)
    smallest = trainer.limits()["min_budget_bytes"]
    trainer.set_budget(smallest - 64)
    with pytest.raises(ft.BudgetError) as err:
        with trainer.step():
            pass
    assert err.value.min_budget_bytes == smallest
    assert f"({smallest} bytes)" in str(err.value)
    trainer.set_budget(smallest)  # the smallest fits
    ferry_steps(model, optimizer, batches[1:], case.loss_fn, trainer)


def test_shape_change_rerecords_and_keeps_the_numbers():
    case = CASES["resnet18"]
    small = [case.batch(s) for s in range(3)]
    big = [tuple(t.repeat(2, *([1] * (t.dim() - 1))) for t in case.batch(s)) for s in range(3, 6)]
    batches = small + big
    reference, _ = plain_run(case, batches)
    model = case.build(0)
    optimizer = case.optimizer(model)
    trainer = ft.Budget(model, optimizer, budget="1TiB")
    limits = {}

    def budget_of(lim):
        limits.update(lim)
        return lim["min_budget_bytes"] + (lim["unlimited_bytes"] - lim["min_budget_bytes"]) // 2

    ferry_steps(model, optimizer, small, case.loss_fn, trainer, budget_of)
    trainer.set_budget(limits["unlimited_bytes"] * 4)  # room for the doubled batch
    ferry_steps(model, optimizer, big, case.loss_fn, trainer)
    events = [e["event"] for e in trainer.report()["events"]]
    assert events.count("recorded") == 2, events
    assert_bitwise_equal(model, reference)


def accumulated_steps(model, optimizer, batches, loss_fn, micro, trainer=None, after_first=None):
    """Gradient accumulation: `micro` forward/backward passes per optimizer step, each through
    trainer.step() when there is a trainer; after_first() after the first optimizer step."""
    optimizer.zero_grad(set_to_none=True)
    for i, (inputs, targets) in enumerate(batches):
        with trainer.step() if trainer is not None else contextlib.nullcontext():
            (loss_fn(model(inputs), targets) / micro).backward()
        if (i + 1) % micro == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if i + 1 == micro and after_first is not None:
                after_first()


@pytest.mark.parametrize("name", ["quirky", "resnet18"])
def test_gradient_accumulation_across_steps(name):
    """Steps that start with gradients add into them: a variant of the step with its own recording
    and plan. Bitwise plain PyTorch's accumulation, measured peak within the budget, tensors moved."""
    case = CASES[name]
    micro = 2
    batches = case.batches(3 * micro)
    reference = case.build(0)
    accumulated_steps(reference, case.optimizer(reference), batches, case.loss_fn, micro)

    model = case.build(0)
    optimizer = case.optimizer(model)
    trainer = ft.Budget(model, optimizer, budget="1TiB", measure=True)

    def tighten():  # the accumulating variant (gradients alive from the start) needs the most
        limits = trainer.limits()
        trainer.set_budget(limits["min_budget_bytes"] + (limits["unlimited_bytes"] - limits["min_budget_bytes"]) // 3)

    accumulated_steps(model, optimizer, batches, case.loss_fn, micro, trainer, tighten)
    report = trainer.report()
    recorded = [e for e in report["events"] if e["event"] in ("recorded", "diverged")]
    assert [e["event"] for e in recorded] == ["recorded", "recorded"], report["events"]
    assert sorted(e["gradients_at_start"] for e in recorded) == [0, len(list(model.parameters()))]
    assert report["plan"]["moved_tensors"] > 0, report
    measured = [e["measured_peak_bytes"] for e in report["events"] if e["event"] == "measured"][micro:]
    assert all(peak <= trainer.budget_bytes for peak in measured), (measured, trainer.budget_bytes)
    assert_bitwise_equal(model, reference)


@pytest.mark.parametrize("bad", [0, -5, "lots", 1.5, True])
def test_bad_budgets(bad):
    model = CASES["quirky"].build(0)
    with pytest.raises((ValueError, TypeError)):
        ft.Budget(model, torch.optim.SGD(model.parameters(), lr=0.1), budget=bad)


def test_no_pressure_installs_nothing():
    case = CASES["quirky"]
    batches = case.batches(3)
    reference, _ = plain_run(case, batches)
    model = case.build(0)
    optimizer = case.optimizer(model)
    trainer = ft.Budget(model, optimizer, budget="1TiB")
    ferry_steps(model, optimizer, batches, case.loss_fn, trainer)
    report = trainer.report()
    assert report["plan"]["moved_tensors"] == 0 and "transfers" not in report, report
    assert_bitwise_equal(model, reference)


def test_recorded_trace_round_trips_through_ferry_analyze(tmp_path):
    """ft.record writes a trace `ferry analyze` reads. The step's peak measured from PyTorch's
    allocator (which the trace does not use) is within 2% of the peak `ferry analyze` predicts from
    the trace. Each op's scratch, measured by the recorder, is in the trace as a `workspace` output
    that no op reads; without it the prediction would miss: on an AMD EPYC host the CPU
    convolutions of PyTorch 1.13 hold up to 38 MB of scratch here (24 MB at the peak), and the
    peak without scratch was 20% under the measured one. The adapter's planner, which gets the same
    scratch beside its graph, predicts the same peak."""
    case = CASES["resnet18"]
    model = case.build(0)
    inputs, targets = case.batch(0)
    path = tmp_path / "resnet18.trace.json"
    trace = ft.record(model, inputs, str(path), loss_fn=lambda out: case.loss_fn(out, targets))
    assert all(p.grad is None for p in model.parameters())
    measured = trace["x_measured_peak_bytes"]
    out = subprocess.run([os.environ["FERRY_BINARY"], "analyze", "--trace", str(path), "--json"],
                         capture_output=True, text=True, check=True)
    analysis = json.loads(out.stdout)
    predicted = analysis["peak_bytes_free_at_last_use"]
    assert len(trace["ops"]) == analysis["ops"]
    assert abs(predicted - measured) <= 0.02 * measured, (predicted, measured)
    # The scratch outputs: one per op at most, each produced by its op and read by none.
    role = {t["id"]: t.get("role") for t in trace["tensors"]}
    read = {tid for op in trace["ops"] for tid in op["inputs"]}
    scratch_ids = [tid for op in trace["ops"] for tid in op["outputs"] if role[tid] == "workspace"
                   and trace["tensors"][tid]["name"].endswith(".scratch")]
    assert scratch_ids and not read.intersection(scratch_ids)
    # The adapter's route: the trace without its scratch outputs (the others renumbered), the
    # scratch given per op.
    dropped = set(scratch_ids)
    bare = json.loads(json.dumps(trace))
    renumber = {}
    for t in bare["tensors"]:
        if t["id"] not in dropped:
            renumber[t["id"]] = len(renumber)
    bare["tensors"] = [t for t in bare["tensors"] if t["id"] not in dropped]
    for t in bare["tensors"]:
        for key in ("id", "view_of", "overwrites"):
            if key in t:
                t[key] = renumber[t[key]]
    scratch = []
    for op in bare["ops"]:
        scratch.append(sum(trace["tensors"][t]["bytes"] for t in op["outputs"] if t in dropped))
        op["outputs"] = [renumber[t] for t in op["outputs"] if t not in dropped]
        op["inputs"] = [renumber[t] for t in op["inputs"]]
    plan = ft._ferry.plan(json.dumps(bare), 0, "host", "cpu-local", [], False, "ferry", scratch, [])
    # The same live peak, but for the memory-sharing plan's alignment (under 64 bytes per tensor).
    unlimited = plan["unlimited"]
    padding = unlimited["live_peak_bytes"] - predicted
    assert 0 <= padding < 64 * len(bare["tensors"]), (unlimited["live_peak_bytes"], predicted)
    # Placed, the arena holds at least the live peak, and its fragmentation stays small. (It is a
    # heuristic placement: with the per-op scratch of this VM's PyTorch 1.13 CPU kernels, 2026-12-01,
    # it placed ResNet-18's keep plan 0.55% above its live peak; the check was equality before, which
    # held on the machines it was written on.)
    assert unlimited["live_peak_bytes"] <= unlimited["device_bytes"] <= 1.02 * unlimited["live_peak_bytes"], unlimited
    # One update op per parameter (as PyTorch steps them), so a plan may stream the weights through
    # the host: `ferry plan` fits within 5% of the irreducible minimum `ferry analyze` reports (the
    # largest op's working set, here a convolution's backward with its scratch), on this machine's
    # profile (the trace's own sizes: its opaque ops have no CPU kernel to size them).
    assert sum(op["phase"] == "update" for op in trace["ops"]) == len(list(model.parameters()))
    budget = int(analysis["irreducible_min_bytes"] * 1.05)
    assert budget < predicted
    plan = subprocess.run([os.environ["FERRY_BINARY"], "plan", "--trace", str(path), "--budget", str(budget), "--json"],
                          capture_output=True, text=True)
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["feasible"]


def test_recorded_trace_is_v2_with_storage_versions_and_byte_ranges(tmp_path):
    """The quirky model's trace says what v1 could not: in-place writes as versions of a storage
    (`overwrites`) and partial reads as views with byte ranges; Ferry reads it back."""
    case = CASES["quirky"]
    model = case.build(0)
    inputs, targets = case.batch(0)
    path = tmp_path / "quirky.trace.json"
    trace = ft.record(model, inputs, str(path), loss_fn=lambda out: case.loss_fn(out, targets))
    assert trace["version"] == 2
    by_id = {t["id"]: t for t in trace["tensors"]}
    versions = [t for t in trace["tensors"] if "overwrites" in t]
    views = [t for t in trace["tensors"] if "view_of" in t]
    assert len(versions) >= 2 and views  # relu_, mul_, add_ through a view; slices
    for t in versions:
        old = by_id[t["overwrites"]]
        assert old["bytes"] == t["bytes"] and "view_of" not in old
        producer = next(op for op in trace["ops"] if t["id"] in op["outputs"])
        # The op reads the old version, maybe through a view (add_ through a view of u).
        assert t["overwrites"] in [by_id[i].get("view_of", i) for i in producer["inputs"]]
    assert any(v["offset"] > 0 and v["bytes"] < by_id[v["view_of"]]["bytes"] for v in views)
    graph_tensors = [t for t in trace["tensors"] if "view_of" not in t]
    assert max(t["id"] for t in graph_tensors) < min(v["id"] for v in views), "views come after graph tensors"
    out = subprocess.run([os.environ["FERRY_BINARY"], "analyze", "--trace", str(path), "--json"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["ops"] == len(trace["ops"])


def test_unsupported_tensors_are_named():
    model = torch.nn.Linear(4, 4)
    model.weight = torch.nn.Parameter(torch.randn(4, 4).to_sparse())
    with pytest.raises(ft.Unsupported, match="dense tensors only"):
        ft.Budget(model, torch.optim.SGD(model.parameters(), lr=0.1), budget="1GiB")


def test_graph_kept_past_its_step_is_refused():
    case = CASES["resnet18"]
    model = case.build(0)
    optimizer = case.optimizer(model)
    trainer = ft.Budget(model, optimizer, budget="1TiB")
    batches = case.batches(3)
    ferry_steps(model, optimizer, batches[:1], case.loss_fn, trainer,
                lambda lim: lim["min_budget_bytes"] + (lim["unlimited_bytes"] - lim["min_budget_bytes"]) // 3)
    inputs, targets = batches[1]
    with trainer.step():
        loss = case.loss_fn(model(inputs), targets)
        loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="retain_graph=True and run again in a later step is not supported"):
        loss.backward()
