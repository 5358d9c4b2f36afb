"""Tests of python/ferry/_measure.py: the allocator's events give exact peaks of known allocations."""

import random
import subprocess
import sys
import textwrap
import threading

import pytest
import torch

from measure_module import MEASURE_PATH, load

measure = load()
torch.set_num_threads(2)


def u8(nbytes):
    return torch.empty(nbytes, dtype=torch.uint8)


def test_known_allocations_give_the_exact_peak():
    def fn():
        a, b, c = u8(1000), u8(2000), u8(4000)  # 7000 live
        del b                                   # 5000
        d = u8(1500)                            # 6500
        return a, c, d

    (a, c, d), peak_bytes = measure.allocator_peak(fn)
    assert peak_bytes == 7000
    assert a.numel() + c.numel() + d.numel() == 6500


def test_free_then_larger_allocation_sets_a_new_peak():
    def fn():
        a = u8(3000)
        b = u8(2000)   # 5000
        del a          # 2000
        c = u8(4000)   # 6000: the peak
        del b, c       # 0
        return u8(100)

    _, deltas = measure.allocator_deltas(fn)
    assert deltas == [3000, 2000, -3000, 4000, -2000, -4000, 100]
    assert measure.allocator_peak(fn)[1] == 6000


def test_arguments_and_result_pass_through():
    result, peak_bytes = measure.allocator_peak(lambda n, fill: torch.full((n,), fill, dtype=torch.int32), 250, fill=7)
    assert peak_bytes == 1000
    assert torch.equal(result, torch.full((250,), 7, dtype=torch.int32))


def test_temporaries_of_an_expression_are_seen():
    x, y, z = (torch.ones(1024) for _ in range(3))  # 4096 bytes each, allocated before the call
    # (x + y) * z: the sum's temporary (4096) and the product (4096) are alive together.
    _, deltas = measure.allocator_deltas(lambda: (x + y) * z)
    assert deltas == [4096, 4096, -4096]
    assert measure.peak_of_deltas(deltas) == 8192


def test_random_allocation_walk_matches_a_python_count_exactly():
    # Thousands of small allocations and frees, many in the same microsecond: the events must be
    # complete and ordered for the prefix maximum to equal the count kept alongside.
    rnd = random.Random(15)

    def fn():
        live, level_bytes, peak_bytes = [], 0, 0
        for _ in range(5000):
            if live and rnd.random() < 0.52:
                level_bytes -= live.pop(rnd.randrange(len(live))).numel()
            else:
                live.append(u8(rnd.randrange(1, 4096)))
                level_bytes += live[-1].numel()
            peak_bytes = max(peak_bytes, level_bytes)
        return peak_bytes, level_bytes, live

    (expected_peak, expected_level, live), deltas = measure.allocator_deltas(fn)
    assert measure.peak_of_deltas(deltas) == expected_peak
    assert sum(deltas) == expected_level
    assert len(deltas) == 5000  # one event per allocation or free, none missing


def test_free_of_a_block_from_an_earlier_profiled_call_makes_the_sum_negative():
    block, _ = measure.allocator_peak(lambda: u8(8000))  # the allocator now knows its size
    held = [block]
    del block

    def free_then_allocate(nbytes):
        held.clear()     # -8000
        return u8(nbytes)

    _, deltas = measure.allocator_deltas(free_then_allocate, 3000)
    assert deltas == [-8000, 3000]
    assert measure.peak_of_deltas(deltas) == 0  # the start level is the peak; the sum is not clamped

    held.append(measure.allocator_peak(lambda: u8(8000))[0])
    _, peak_bytes = measure.allocator_peak(free_then_allocate, 10000)
    assert peak_bytes == 2000  # 10000 - 8000: a clamped running sum would say 10000


def test_free_of_a_block_allocated_before_any_profiling_is_not_seen():
    # torch 1.13 knows a block's size only if it saw the allocation while profiling; a fresh
    # process has no size entries from earlier calls. The figure is then an upper bound.
    script = textwrap.dedent(f"""
        import importlib.util, torch
        spec = importlib.util.spec_from_file_location("m", {str(MEASURE_PATH)!r})
        m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
        held = [torch.empty(6000, dtype=torch.uint8)]
        def fn():
            held.clear()                                  # true level: -6000
            return torch.empty(4000, dtype=torch.uint8)   # true level: -2000
        _, deltas = m.allocator_deltas(fn)
        print(deltas)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[4000]"


def test_allocations_on_other_threads_are_not_seen():
    # The profiler's state is thread-local in torch 1.13: a helper thread's tensors are invisible.
    made = []

    def fn():
        worker = threading.Thread(target=lambda: made.append(u8(12345)))
        worker.start()
        worker.join()
        return u8(777)

    _, deltas = measure.allocator_deltas(fn)
    assert made[0].numel() == 12345
    assert deltas == [777]


def test_storage_bytes_counts_each_storage_once():
    base = torch.zeros(100)                      # 400 bytes
    views = [base, base[10:20], base.view(10, 10).t(), base[::2]]
    other = torch.zeros(25, dtype=torch.float64)  # 200 bytes
    assert measure.storage_bytes(views) == 400
    assert measure.storage_bytes(views + [other, None, torch.empty(0)]) == 600
    assert measure.storage_bytes([]) == 0


def test_storage_bytes_counts_a_tied_weight_once():
    embed = torch.nn.Embedding(50, 8)
    head = torch.nn.Linear(8, 50, bias=False)
    head.weight = embed.weight
    model = torch.nn.ModuleDict({"embed": embed, "head": head})
    assert measure.storage_bytes(model.parameters()) == 50 * 8 * 4
    assert measure.storage_bytes([embed.weight, head.weight]) == 50 * 8 * 4


def test_step_peak_adds_the_persistent_level_to_the_call_peak():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(10, 20), torch.nn.BatchNorm1d(20))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for p in model.parameters():  # one momentum buffer per parameter
        p.grad = torch.ones_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    params_bytes = (10 * 20 + 20 + 20 + 20) * 4
    buffers_bytes = (20 + 20) * 4 + 8  # running mean, running var, num_batches_tracked (int64)
    state_bytes = params_bytes          # momentum buffers

    def fn():
        for p in model.parameters():
            p.grad = torch.zeros_like(p)  # + params_bytes
        scratch = u8(5000)                # + 5000 at the peak
        del scratch
        return "done"

    result, peak_bytes = measure.step_peak_bytes(model, optimizer, fn)
    assert result == "done"
    assert peak_bytes == params_bytes + buffers_bytes + state_bytes + params_bytes + 5000

    # Gradients that exist at the start are counted by storage, extra tensors too.
    extra = torch.empty(300, dtype=torch.uint8)
    _, peak_bytes = measure.step_peak_bytes(model, optimizer, lambda: None, extra_tensors=[extra])
    assert peak_bytes == params_bytes + buffers_bytes + state_bytes + params_bytes + 300


def test_a_training_step_peak_is_above_its_persistent_level():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    optimizer = torch.optim.Adam(model.parameters())
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))

    def step():
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    step()
    optimizer.zero_grad(set_to_none=True)
    _, peak_bytes = measure.step_peak_bytes(model, optimizer, step)
    params_bytes = measure.storage_bytes(model.parameters())
    # params + Adam's two moments at the start; gradients and the 32 x 256 hidden layer during.
    assert peak_bytes >= 4 * params_bytes + 32 * 256 * 4
    assert peak_bytes < 4 * params_bytes + 10 * (32 * 256 * 4)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
