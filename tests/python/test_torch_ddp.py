"""ferry.torch inside DistributedDataParallel (gloo, two processes on this machine).

Each rank trains a plain DDP model and a DDP model through ft.Budget (its own recording, its own
plan for its own budget, which forces swaps) on the same per-rank batches; after the steps both
ranks' Ferry-trained weights and gradients must be bitwise equal to plain DDP's.
"""
import os
import sys
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(__file__))

STEPS = 5


def _train(rank, world, store_path, result_path):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=world)
    import ferry.torch as ft
    from models import CASES, bitwise_differences

    case = CASES["resnet18"]
    batches = [case.batch(step * world + rank) for step in range(STEPS)]

    plain = DDP(case.build(0))
    plain_opt = case.optimizer(plain)
    for inputs, targets in batches:
        plain_opt.zero_grad(set_to_none=True)
        case.loss_fn(plain(inputs), targets).backward()
        plain_opt.step()

    model = DDP(case.build(0))
    opt = case.optimizer(model)
    trainer = ft.Budget(model, opt, budget="1TiB", tier="host")
    for i, (inputs, targets) in enumerate(batches):
        opt.zero_grad(set_to_none=True)
        with trainer.step():
            case.loss_fn(model(inputs), targets).backward()
        opt.step()
        if trainer.report()["events"][-1]["event"] == "recorded":
            # DDP rebuilds its gradient buckets after the first iteration, so the second step
            # differs from the first: the adapter notices and records again (then plans again).
            lim = trainer.limits()
            trainer.set_budget(lim["min_budget_bytes"] + (lim["unlimited_bytes"] - lim["min_budget_bytes"]) // 3)
    report = trainer.report()
    diffs = bitwise_differences(model.module, plain.module)
    events = [(e["event"], e.get("why", "")) for e in report["events"]]
    with open(f"{result_path}.{rank}", "w") as f:
        f.write(repr({"diffs": diffs, "moved": report["plan"]["moved_tensors"], "events": events}))
    dist.destroy_process_group()


def test_ddp_two_ranks_match_plain_ddp():
    world = 2
    with tempfile.TemporaryDirectory() as tmp:
        store, result = os.path.join(tmp, "store"), os.path.join(tmp, "result")
        mp.start_processes(_train, args=(world, store, result), nprocs=world, join=True, start_method="spawn")
        for rank in range(world):
            with open(f"{result}.{rank}") as f:
                r = eval(f.read())
            assert r["moved"] > 0, r
            assert [e for e, _ in r["events"]].count("diverged") <= 1, r
            assert r["diffs"] == [], r
