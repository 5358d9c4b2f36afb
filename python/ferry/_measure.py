"""Measured memory of PyTorch work on the CPU: the peak of PyTorch's CPU allocator during a call.

Design
- `allocator_peak(fn)` runs fn under `torch.profiler.profile(profile_memory=True)` and reads the
  allocator's own events ("[memory]" events of `prof.profiler.kineto_results.events()`, `nbytes()`
  > 0 for an allocation, < 0 for a free). Sorted by start time (a stable sort: events of the same
  microsecond keep the collector's order, which is its nanosecond order), their running sum is the
  allocator's level relative to the start of the call; the peak is its maximum over the call,
  start included. So the figure is the peak *increase* over the level at the start, >= 0.
- `storage_bytes(tensors)` adds the bytes of distinct storages, so a caller can add the level that
  already exists at the start (parameters, gradients, optimizer state).
- `step_peak_bytes(model, optimizer, fn)` = bytes of the model's parameters and buffers, of the
  gradients that exist at the start, of the optimizer's state tensors, (of `extra_tensors`), plus
  `allocator_peak(fn)`: the measured peak of one training step.

What torch 1.13's allocator events show, and what they do not (checked by tests/python/test_measure.py)
- Every allocation and free through PyTorch's CPU allocator (c10's DefaultCPUAllocator: tensors,
  storages, oneDNN/ideep buffers PyTorch hands it) made on the *calling thread* while profiling:
  sizes are the requested bytes. The autograd engine runs CPU backward on the calling thread, so
  forward, backward and optimizer steps are covered.
- Not seen: allocations on other threads (the profiler's state is thread-local: a Python thread
  or a C++ helper thread that allocates tensors is invisible), memory that does not come from the
  allocator (malloc/mmap of other libraries: OpenBLAS buffers, oneDNN scratchpads and primitive
  caches, Python objects, a C++ engine's own buffers), and the allocator's size rounding
  (glibc's chunk overhead).
- The allocator knows a block's size only if it saw the block allocated while a profiler was on
  (in this process). A block allocated before any profiling that fn frees gives no event (torch
  logs "Memory block of unknown size was allocated before the profiling started"): the running
  sum does not drop, so the figure is then an upper bound of the true increase. A block allocated
  during an earlier profiled call and freed in this one does give its negative event, and the sum
  can go below zero; nothing is clamped (the peak is the maximum with the start level, 0).
- The allocator keeps a block's size entry when the block is freed while no profiler is on; a
  later block at the same address allocated outside profiling and freed during a profiled call is
  then reported with the stale size. So in a process that profiles several times, a free of a
  block older than the call can carry a wrong size; measure a step whose frees are of blocks it
  allocated itself (zero_grad(set_to_none=True) before it) or measure in a fresh process.
"""

import torch
from torch.profiler import ProfilerActivity, profile


def profiling():
    """A context manager that records the allocator's events of the code it runs (deltas_of reads them)."""
    return profile(activities=[ProfilerActivity.CPU], profile_memory=True)


def deltas_of(prof):
    """[signed bytes of each allocator event, in time order] of a finished profiling()."""
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_us())  # stable: ties keep the collector's (nanosecond) order
    return [e.nbytes() for e in events]


def allocator_deltas(fn, *args, **kwargs):
    """Runs fn(*args, **kwargs) under the profiler; returns (result, [signed bytes of each allocator event, in time order])."""
    with profiling() as prof:
        result = fn(*args, **kwargs)
    return result, deltas_of(prof)


def peak_of_deltas(deltas):
    """Maximum prefix sum of signed byte deltas, counting the empty prefix (the start level, 0)."""
    level_bytes = 0
    peak_bytes = 0
    for delta in deltas:
        level_bytes += delta
        peak_bytes = max(peak_bytes, level_bytes)
    return peak_bytes


def allocator_peak(fn, *args, **kwargs):
    """Runs fn(*args, **kwargs); returns (result, peak increase in bytes of PyTorch's CPU allocator over its level at the call's start)."""
    result, deltas = allocator_deltas(fn, *args, **kwargs)
    return result, peak_of_deltas(deltas)


def storage_bytes(tensors):
    """Bytes of the distinct storages (by data pointer) behind an iterable of tensors; None entries are skipped."""
    seen = set()
    total_bytes = 0
    for tensor in tensors:
        if tensor is None:
            continue
        storage = tensor.storage()
        if storage.data_ptr() == 0 or storage.data_ptr() in seen:  # empty, or shared (tied weights, views)
            continue
        seen.add(storage.data_ptr())
        total_bytes += storage.nbytes()
    return total_bytes


def optimizer_state_tensors(optimizer):
    """The tensors in an optimizer's per-parameter state (momentum buffers, Adam moments, step counters); [] for None."""
    if optimizer is None:
        return []
    return [value for state in optimizer.state.values() for value in state.values() if torch.is_tensor(value)]


def persistent_tensors(model, optimizer, extra_tensors=()):
    """Tensors that exist between steps: parameters, buffers, existing gradients, optimizer state, extras."""
    params = list(model.parameters())
    return (params + list(model.buffers()) + [p.grad for p in params] + optimizer_state_tensors(optimizer)
            + list(extra_tensors))


def step_peak_bytes(model, optimizer, fn, extra_tensors=()):
    """Runs fn(); returns (result, start bytes of persistent_tensors + allocator_peak(fn)): one step's measured peak."""
    start_bytes = storage_bytes(persistent_tensors(model, optimizer, extra_tensors))
    result, increase_bytes = allocator_peak(fn)
    return result, start_bytes + increase_bytes
