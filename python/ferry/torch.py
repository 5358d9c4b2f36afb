"""ferry.torch: train a PyTorch model under a memory budget with a plan made by Ferry.

    import ferry.torch as ft
    trainer = ft.Budget(model, optimizer, budget="2GiB", tier="ssd")   # or tier="host"
    for x, y in loader:
        with trainer.step():
            loss = loss_fn(model(x), y)
            loss.backward()
        optimizer.step(); optimizer.zero_grad(set_to_none=True)

Design (docs/pytorch.md has the whole story)
- The first step runs as plain PyTorch while ferry._record watches it: every aten op (time,
  storages read and written) and every tensor autograd saves. At the next step the recording
  becomes a Ferry graph (with the optimizer state, which exists by then) and Ferry's planner
  (`ferry`, through the C++ module ferry._ferry) plans it for the budget, restricted to what this
  adapter can do: free only tensors autograd saved, only between forward and backward, by swapping
  them to the host or SSD tier and back, or by recomputing them from replayable ops. A budget below
  what any such plan needs raises BudgetError naming the smallest one.
- Later steps follow the plan. A TorchDispatchMode counts ops; before op i it runs the plan's
  actions for step i (and those after step i - 1: autograd saves an op's outputs only after the op
  returns). A swapped tensor's pack hook hands autograd a small handle instead of
  the tensor, so autograd no longer holds its storage; the adapter holds it until the planned
  release (after the swap-out, which Ferry's transfer engine runs on its own thread, has
  finished). A planned swap-in allocates a fresh buffer and copies the bytes back on the engine's
  other thread; unpack waits for it and returns a tensor with the saved tensor's dtype, size,
  strides and offset over the restored bytes. A recomputed tensor's producer op has its arguments
  captured in forward and is run again at the planned step. Bytes come back bit for bit, so gradients are those
  of plain PyTorch.
- When a step differs from the recording (another op, another size, more or fewer saves: a new
  shape or branch), the adapter stops acting for the rest of that step (tensors it holds stay
  valid; a handle not yet swapped in is loaded on demand) and records the next step afresh.
- With a budget the plan meets without moving anything, only a pack hook runs, checking that the
  step still saves what the recording did (a new shape is recorded and planned afresh).
"""
import contextlib
import json
import os

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_unflatten

from ferry import _ferry, _measure
from ferry._record import Recorder, Unsupported, call_op, storage_key, update_groups

__all__ = ["Budget", "BudgetError", "Unsupported", "record"]


class BudgetError(MemoryError):
    """The budget is below the smallest one a plan fits; `min_budget_bytes` says that one."""

    def __init__(self, message, min_budget_bytes):
        super().__init__(message)
        self.min_budget_bytes = min_budget_bytes


def _budget_bytes(budget):
    if isinstance(budget, bool) or not isinstance(budget, (int, str)):
        raise TypeError(f"budget must be bytes (int) or a size such as '2GiB', got {budget!r}")
    if isinstance(budget, int):
        if budget <= 0:
            raise ValueError(f"budget must be positive, got {budget}")
        return budget
    return _ferry.parse_bytes(budget)


def _check_no_grads(parameters):
    for name, p in parameters:
        if p.grad is not None:
            raise ValueError(
                f"parameter '{name}' has a gradient; ft.record records one step from no gradients: call "
                "optimizer.zero_grad(set_to_none=True) first")


class _Divergence(Exception):
    pass


class _Slot:
    """One graph tensor the plan moves: its storage while held, its copy's tickets, its buffer."""

    __slots__ = ("tid", "nbytes", "held", "out_ticket", "out_pending", "buffer", "in_ticket", "unpacks_left",
                 "released", "loads", "recomputed")

    def __init__(self, tid, nbytes, unpacks):
        self.tid, self.nbytes, self.unpacks_left = tid, nbytes, unpacks
        self.held = None        # a tensor on the original storage, until the planned release
        self.out_ticket = 0
        self.out_pending = False  # the plan's swap-out came before autograd saved the tensor
        self.buffer = None      # uint8 tensor the swap-in fills
        self.in_ticket = 0
        self.released = False
        self.loads = 0          # swap-ins issued this step
        self.recomputed = None  # the recomputed tensor whose storage holds the bytes again


class _Packed:
    """What autograd holds for a moved saved tensor: its slot and how to rebuild the view."""

    __slots__ = ("slot", "dtype", "size", "stride", "offset")

    def __init__(self, slot, t):
        self.slot, self.dtype = slot, t.dtype
        self.size, self.stride, self.offset = t.size(), t.stride(), t.storage_offset()


class _Executor(TorchDispatchMode):
    """Runs one step following a plan (module doc)."""

    def __init__(self, recording, plan, engine):
        super().__init__()
        self.rec, self.engine = recording, engine
        self.before = {}
        self.after = {}
        for step, when, kind, tid, _tier in plan["actions"]:
            (self.before if when == "before" else self.after).setdefault(step, []).append((kind, tid))
        unpacks = {}
        for tid in recording.unpacks:
            unpacks[tid] = unpacks.get(tid, 0) + 1
        moved = {tid for _, _, _, tid, _ in plan["actions"]}
        self.slots = {tid: _Slot(tid, recording.tensors[tid]["bytes"], unpacks.get(tid, 0)) for tid in moved}
        # Recomputation: the producer of each tensor the plan recomputes, whose arguments are
        # captured when it runs in forward (moved tensors as placeholders, the rest held), and the
        # storage -> graph id map of this step that tells which arguments are which.
        producers = {}
        for i, outs in enumerate(recording.op_new_outputs):
            for _, tid in outs:
                producers[tid] = i
        self.producer = {tid: producers[tid] for _, _, kind, tid, _ in plan["actions"] if kind == "recompute"}
        self.capture_at = set(self.producer.values())
        self.captured = {}
        # producer -> the tensors it still has to recompute this step: its captured arguments are
        # released when none is left (a replay fills only the targets due at that moment: Ferry's
        # program allocates a target from its recompute on, so filling a later one early would
        # hold bytes the plan counts free)
        self.pending = {}
        self.replays = 0        # ops run again this step
        for tid, p in self.producer.items():
            self.pending.setdefault(p, set()).add(tid)
        self.current = {}
        self.op_index = 0
        self.pack_index = 0
        self.diverged = None  # why the step left the recording, or None
        self._quiet = 0       # > 0 while the adapter runs its own ops (not the model's)
        self.finished = False
        self.leftovers = []   # after finish(): what the step still held for the plan (see finish)
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def __enter__(self):
        self._hooks.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        out = super().__exit__(*exc)
        self._hooks.__exit__(*exc)
        return out

    def _diverge(self, why):
        if self.diverged is None:
            self.diverged = why

    # -- plan actions ---------------------------------------------------------------------------
    def _run(self, actions):
        due = {tid for kind, tid in actions if kind == "recompute"}
        for kind, tid in actions:
            slot = self.slots[tid]
            if kind == "swap_out":
                if slot.held is None:
                    if slot.released:
                        raise _Divergence(f"the plan swaps out tensor {tid} after releasing it")
                    slot.out_pending = True  # issued when autograd saves it (_pack)
                    continue
                slot.out_ticket = self.engine.swap_out(tid, storage_key(slot.held)[0], slot.nbytes)
            elif kind == "release":
                if slot.held is None:
                    raise _Divergence(f"the plan releases tensor {tid}, which this step has not saved")
                if slot.out_ticket:
                    self.engine.wait(slot.out_ticket)
                slot.held, slot.released = None, True
            elif kind == "swap_in":
                # Autograd unpacks an op's saved tensors just before the op: a swap-in planned
                # before op i may already have been done by an unpack for op i.
                if slot.loads == 0 and slot.held is None:
                    self._swap_in(slot)
            elif kind == "recompute":
                # As with swap-ins, the unpack for op i may have recomputed it already, or the
                # replay for another tensor of the same moment and producer.
                if slot.loads == 0 and slot.held is None:
                    self._recompute(slot, due)
            else:
                raise _Divergence(f"the adapter cannot run a '{kind}' action")

    def _swap_in(self, slot):
        slot.loads += 1
        slot.buffer = torch.empty(slot.nbytes, dtype=torch.uint8)
        slot.in_ticket = self.engine.swap_in(slot.tid, slot.buffer.data_ptr(), slot.nbytes)

    def _recompute(self, slot, due=()):
        """Runs the producer of slot's tensor again on the arguments captured in forward; keeps its
        outputs that are slot's tensor or in `due` (recomputes planned at the same moment), still
        pending and not held; the producer's other outputs are dropped when the replay returns."""
        p = self.producer.get(slot.tid)
        entry = self.captured.get(p) if p is not None else None
        if entry is None:
            raise _Divergence(f"the plan recomputes tensor {slot.tid}, whose producer did not run as recorded")
        pending = self.pending[p]
        # (a target still held is not due: it stays pending, and its own recompute replays again)
        keep = {tid for tid in pending if (tid == slot.tid or tid in due) and self.slots[tid].held is None}
        pending -= keep
        last = not pending
        if last:
            del self.captured[p]  # the arguments it held may go
        func, spec, leaves = entry
        values = []
        for leaf in leaves:
            if isinstance(leaf, _Packed):  # an argument the plan moved: read it back from its slot
                values.append(self._data(leaf))
                if last:
                    self._consumed(leaf.slot)
            else:
                values.append(leaf)
        args, kwargs = tree_unflatten(values, spec)
        outs = tree_flatten(call_op(func, args, kwargs))[0]
        self.replays += 1
        for k, tid in self.rec.op_new_outputs[p]:
            if tid in keep:
                target = self.slots[tid]
                if storage_key(outs[k])[1] != target.nbytes:
                    raise _Divergence(f"recomputed tensor {tid} has another size than recorded")
                target.recomputed = outs[k].detach()
                target.loads += 1

    def _capture(self, i, func, args, kwargs):
        """Keeps what op i needs to run again: its function and arguments (moved ones as placeholders)."""
        leaves, spec = tree_flatten((args, kwargs))
        kept = []
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor):
                tid = self.current.get(storage_key(leaf)[0])
                slot = self.slots.get(tid) if tid is not None else None
                if slot is not None:
                    slot.unpacks_left += 1  # the recompute reads it like an unpack
                    leaf = _Packed(slot, leaf)
                else:
                    leaf = leaf.detach()
            kept.append(leaf)
        self.captured[i] = (func, spec, kept)

    def _track(self, i, out):
        """Maps the storages of op i's new outputs to their graph ids (for later captures)."""
        outs = tree_flatten(out)[0]
        for k, tid in self.rec.op_new_outputs[i]:
            if k < len(outs) and isinstance(outs[k], torch.Tensor):
                self.current[storage_key(outs[k])[0]] = tid

    def _data(self, packed):
        """The saved view `packed` describes, over wherever its slot's bytes are now."""
        slot = packed.slot
        if slot.held is not None:
            data = slot.held
        elif slot.recomputed is not None:
            data = slot.recomputed
        else:
            if slot.buffer is None:
                if slot.tid in self.producer:  # recomputed, but not yet (the plan was not followed)
                    self._recompute(slot)
                    return self._data(packed)
                if slot.out_ticket:
                    self.engine.wait(slot.out_ticket)
                self._swap_in(slot)  # not swapped in by the plan (a diverged step): load now
            if slot.in_ticket:
                self.engine.wait(slot.in_ticket)
                slot.in_ticket = 0
            data = slot.buffer
        if data.dtype != packed.dtype:  # a view of the storage as another dtype: all of its bytes
            data = torch.tensor([], dtype=torch.uint8).set_(data.storage().untyped()).view(packed.dtype)
        return data.as_strided(packed.size, packed.stride, packed.offset)

    def _consumed(self, slot):
        slot.unpacks_left -= 1
        if slot.unpacks_left <= 0:  # the last read: the reader keeps the bytes alive as long as needed
            slot.buffer = None
            slot.recomputed = None

    @contextlib.contextmanager
    def _own_ops(self):
        self._quiet += 1
        try:
            yield
        finally:
            self._quiet -= 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self._quiet:
            return call_op(func, args, kwargs or {})
        i = self.op_index
        self.op_index += 1
        if self.diverged is None:
            # after[i - 1] runs now rather than when op i - 1 returned: autograd saves an op's
            # outputs after the op returns, and the plan's actions after it may concern them.
            self._act(self.after.get(i - 1, ()))
        if self.diverged is None:
            if i >= len(self.rec.op_signatures) or self.rec.op_signatures[i][0] != str(func):
                self._diverge(f"op {i} is {func}, the recording has "
                              f"{self.rec.op_signatures[i][0] if i < len(self.rec.op_signatures) else 'no more ops'}")
            else:
                self._act(self.before.get(i, ()))
        if self.diverged is None and i in self.capture_at:
            with self._own_ops():
                self._capture(i, func, args, kwargs or {})
        out = call_op(func, args, kwargs or {})
        if self.capture_at and self.diverged is None and i < len(self.rec.op_new_outputs):
            with self._own_ops():
                self._track(i, out)
        return out

    def _act(self, actions):
        try:
            with self._own_ops():
                self._run(actions)
        except _Divergence as d:
            self._diverge(str(d))

    # -- saved tensors --------------------------------------------------------------------------
    def _pack(self, t):
        with self._own_ops():
            return self._pack_quiet(t)

    def _pack_quiet(self, t):
        k = self.pack_index
        self.pack_index += 1
        if self.diverged is not None:
            return t
        if k >= len(self.rec.saves):
            self._diverge(f"save {k} is beyond the recording's {len(self.rec.saves)}")
            return t
        tid, _ = self.rec.saves[k]
        slot = self.slots.get(tid)
        if slot is None:
            return t
        ptr, nbytes = storage_key(t)
        if nbytes != slot.nbytes:
            self._diverge(f"save {k} has {nbytes} bytes, the recording {slot.nbytes}")
            return t
        if slot.held is None and not slot.released:
            slot.held = t.detach()
            if slot.out_pending:
                slot.out_pending = False
                slot.out_ticket = self.engine.swap_out(slot.tid, ptr, slot.nbytes)
        elif slot.held is not None and storage_key(slot.held)[0] != ptr:
            self._diverge(f"save {k} is another storage than the recording's tensor {tid}")
            return t
        return _Packed(slot, t)

    def _unpack(self, packed):
        if not isinstance(packed, _Packed):
            return packed
        with self._own_ops():
            return self._unpack_quiet(packed)

    def _unpack_quiet(self, packed):
        if self.finished:
            raise Unsupported("ferry.torch: a saved tensor was read after its step ended (a graph kept with "
                              "retain_graph=True and run again in a later step is not supported)")
        try:
            data = self._data(packed)
        except _Divergence as d:
            raise Unsupported(f"ferry.torch: cannot bring back a saved tensor: {d}") from None
        self._consumed(packed.slot)
        return data

    def finish(self):
        """Waits for every transfer and drops every copy; returns why the step diverged, or None."""
        if self.diverged is None:
            self._act(self.after.get(self.op_index - 1, ()))
        self.finished = True
        # What the step still holds for the plan: a followed plan leaves nothing (a tensor held here
        # past its planned release or last read is memory the plan counted free).
        self.leftovers = [f"tensor {slot.tid}" for slot in self.slots.values()
                          if slot.held is not None or slot.buffer is not None or slot.recomputed is not None]
        self.leftovers += [f"the arguments of op {p}" for p in self.captured]
        self.engine.drain()
        for slot in self.slots.values():
            self.engine.discard(slot.tid)
        if self.diverged is None and self.op_index != len(self.rec.op_signatures):
            self.diverged = f"the step ran {self.op_index} ops, the recording {len(self.rec.op_signatures)}"
        if self.diverged is None and self.pack_index != len(self.rec.saves):
            self.diverged = f"the step saved {self.pack_index} tensors, the recording {len(self.rec.saves)}"
        return self.diverged


class Budget:
    """Trains `model` with `optimizer` in at most `budget` bytes of memory, by Ferry's plan.

    budget: bytes (int) or a size ('2GiB', '512MiB'): the memory of parameters, gradients,
        optimizer state and everything forward and backward hold, as Ferry's memory model counts it.
    tier: 'host' (a host-memory region) or 'ssd' (files in `ssd_dir`, default /tmp) for swapped
        tensors. device: the hardware profile whose transfer model the planner uses ('cpu-local').
    recompute: let the plan drop saved tensors and recompute them in backward by running their
        producing op again (only ops that are pure functions of their arguments); False: swaps only.
    measure: measure every step's peak with PyTorch's allocator events (ferry._measure; slow:
        the profiler records every allocation): report()["events"] and last_measured_peak_bytes.
    """

    def __init__(self, model, optimizer, budget, tier="host", ssd_dir=None, device="cpu-local", measure=False,
                 recompute=True):
        if tier not in ("host", "ssd"):
            raise ValueError(f"tier must be 'host' or 'ssd', got {tier!r}")
        if ssd_dir is not None and not os.path.isdir(ssd_dir):
            raise ValueError(f"ssd_dir '{ssd_dir}' is not a directory")
        for name, p in model.named_parameters():
            storage_key(p)  # Unsupported names a parameter that is not a dense CPU tensor
        self.model, self.optimizer = model, optimizer
        self.budget_bytes = _budget_bytes(budget)
        self.tier, self.ssd_dir, self.device = tier, ssd_dir or "", device
        self._recording = None
        self._grads = {}
        self._plan = None
        # Gradient accumulation: a step that starts with gradients adds into them (other ops than
        # one that starts without), so each variant, keyed by which parameters have a gradient at
        # the step's start, keeps its own recording, gradients and plan.
        self._variant = None
        self._variants = {}
        self._engine = None
        self._steps = 0
        self._events = []  # what happened, for report()
        self.measure = measure
        self.recompute = recompute
        self._replays = 0  # ops the executors ran again to recompute tensors
        self.last_measured_peak_bytes = None

    def _parameters(self):
        return list(self.model.named_parameters())

    def _select_variant(self, key):
        if key == self._variant:
            return
        if self._variant is not None:
            self._variants[self._variant] = (self._recording, self._grads, self._plan)
        self._recording, self._grads, self._plan = self._variants.pop(key, (None, {}, None))
        self._variant = key

    @contextlib.contextmanager
    def step(self):
        """One training step's forward and backward (see the module doc)."""
        params = self._parameters()
        self._select_variant(tuple(p.grad is not None for _, p in params))
        if self._recording is not None and self._plan is None:
            self._make_plan()
        self._steps += 1
        with self._measured():
            if self._plan is None:
                yield from self._record_step(params)
            elif not self._plan["actions"]:
                yield from self._watched_step()
            else:
                yield from self._planned_step()

    @contextlib.contextmanager
    def _measured(self):
        """With measure: the step's peak, persistent bytes at the start + the allocator's peak increase.

        A recording step measures itself (the recorder runs the profiler): its figure is taken from there.
        """
        if not self.measure:
            yield
            return
        start_bytes = _measure.storage_bytes(_measure.persistent_tensors(self.model, self.optimizer))
        if self._plan is None:
            yield
            increase = self._recording.peak_increase_bytes
        else:
            with _measure.profiling() as prof:
                yield
            increase = _measure.peak_of_deltas(_measure.deltas_of(prof))
        self.last_measured_peak_bytes = start_bytes + increase
        self._events.append({"step": self._steps, "event": "measured",
                             "measured_peak_bytes": self.last_measured_peak_bytes})

    def _record_step(self, params):
        recorder = Recorder(params)
        with recorder:
            yield
        self._grads = recorder.finish(params)
        self._recording = recorder.rec
        self._events.append({"step": self._steps, "event": "recorded", "ops": len(recorder.rec.ops),
                             "saved": len(recorder.rec.saves), "gradients_at_start": sum(self._variant)})

    def _watched_step(self):
        """A plan that moves nothing: plain PyTorch, with a pack hook that checks the saves still
        match the recording (a new shape may not fit the budget, so it is recorded and planned)."""
        saves = self._recording.saves
        tensors = self._recording.tensors
        state = {"index": 0, "why": None}

        def pack(t):
            k = state["index"]
            state["index"] += 1
            if state["why"] is None:
                nbytes = storage_key(t)[1]
                if k >= len(saves) or (nbytes and nbytes != tensors[saves[k][0]]["bytes"]):
                    state["why"] = f"save {k} ({nbytes} bytes) differs from the recording"
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            yield
        if state["why"] is None and state["index"] != len(saves):
            state["why"] = f"the step saved {state['index']} tensors, the recording {len(saves)}"
        self._end_step(state["why"])

    def _end_step(self, why):
        if why is not None:
            self._events.append({"step": self._steps, "event": "diverged", "why": why})
            self._recording, self._plan = None, None  # record the next step afresh

    def _planned_step(self):
        executor = _Executor(self._recording, self._plan, self._engine)
        try:
            with executor:
                yield
        finally:
            why = executor.finish()
            self._replays += executor.replays
        if why is None and executor.leftovers:
            # An adapter defect, not the user's: the step followed the plan and still held these.
            self._events.append({"step": self._steps, "event": "held_past_plan", "what": executor.leftovers})
        self._end_step(why)

    def set_budget(self, budget):
        """Changes the budget; the next step is planned for it (from the same recording)."""
        self.budget_bytes = _budget_bytes(budget)
        self._plan = None
        self._variants = {k: (rec, grads, None) for k, (rec, grads, _) in self._variants.items()}

    def limits(self):
        """After the first step: {'unlimited_bytes': what the step needs with nothing moved,
        'min_budget_bytes': the smallest budget a plan fits} (Ferry's memory model, predicted)."""
        if self._recording is None:
            raise RuntimeError("limits() needs a recorded step: run one trainer.step() first")
        probe = self._plan_for(1)
        unlimited = probe["unlimited"]["device_bytes"]
        # The search for the smallest budget probes the restricted planner, whose feasibility is
        # not monotone in the budget; the keep plan always fits what it needs.
        return {"unlimited_bytes": unlimited, "min_budget_bytes": min(probe["min_budget_bytes"], unlimited)}

    def trace(self):
        """The recorded iteration as a Ferry trace (dict), or None before the first step."""
        if self._recording is None:
            return None
        updates = update_groups(self._recording, self._parameters(), self.optimizer, self._grads)
        return self._recording.trace(type(self.model).__name__, updates)

    def _plan_for(self, budget_bytes):
        rec = self._recording
        graph = self.trace()
        saved = [False] * rec.num_graph_tensors(graph)
        for tid in rec.saved_ids():
            # Storages made in the step and then held only by autograd: data inputs and module
            # buffers stay referenced by the caller, so moving them would free nothing.
            if rec.tensors[tid]["role"] in ("activation", "gradient"):
                saved[tid] = True
        scratch = list(rec.op_scratch) + [0] * (len(graph["ops"]) - len(rec.op_scratch))
        replayable = rec.replayable() + [False] * (len(graph["ops"]) - len(rec.ops))
        return _ferry.plan(json.dumps(graph), budget_bytes, self.tier, self.device, saved, self.recompute, "ferry",
                           scratch, replayable)

    def _make_plan(self):
        rec = self._recording
        plan = self._plan_for(self.budget_bytes)
        if not plan["fits"] and self.budget_bytes >= plan["unlimited"]["device_bytes"]:
            # The keep plan fits: nothing needs to move (the restricted planner's search can miss it).
            plan = dict(plan, fits=True, actions=[], device_bytes=plan["unlimited"]["device_bytes"],
                        swapped_tensors=0, recomputed_tensors=0, predicted=plan["unlimited"])
        if not plan["fits"]:
            raise BudgetError(
                f"ferry.torch: a budget of {_ferry.format_bytes(self.budget_bytes)} cannot hold this model's step: "
                f"{plan['message']}; the smallest budget that fits is {_ferry.format_bytes(plan['min_budget_bytes'])} "
                f"({plan['min_budget_bytes']} bytes)", plan["min_budget_bytes"])
        self._plan = plan
        moved = {tid for _, _, _, tid, _ in plan["actions"]}
        tier_bytes = sum(rec.tensors[tid]["bytes"] for tid in moved)
        if moved and (self._engine is None or tier_bytes > self._engine_capacity):
            # Each moved tensor has at most one copy per step: their sum always fits, whatever order.
            self._engine = _ferry.Engine(self.tier, max(tier_bytes, 1 << 20) + 4096 * len(moved), self.ssd_dir)
            self._engine_capacity = tier_bytes
        recomputed = {tid for _, _, kind, tid, _ in plan["actions"] if kind == "recompute"}
        self._events.append({"step": self._steps + 1, "event": "planned", "moved_tensors": len(moved),
                             "recomputed_tensors": len(recomputed),
                             "predicted_ms": plan["predicted"]["iteration_ms"],
                             "device_bytes": plan["device_bytes"]})

    def report(self):
        """A dict: the budget, the plan (predicted by Ferry's simulator) and what happened."""
        out = {"budget_bytes": self.budget_bytes, "tier": self.tier, "steps": self._steps, "events": list(self._events)}
        if self._plan is not None:
            p = self._plan
            out["plan"] = {"device_bytes": p["device_bytes"], "moved_tensors": p["swapped_tensors"] + p["recomputed_tensors"],
                           "swapped_tensors": p["swapped_tensors"], "recomputed_tensors": p["recomputed_tensors"],
                           "predicted_ms": p["predicted"]["iteration_ms"],
                           "predicted_unlimited_ms": p["unlimited"]["iteration_ms"],
                           "unlimited_device_bytes": p["unlimited"]["peak_device_bytes"],
                           "notes": p.get("notes", "")}  # the planner's: which variant won, and how
        if self._engine is not None:
            out["transfers"] = self._engine.stats()
        out["replayed_ops"] = self._replays
        return out


def record(model, inputs, path, loss_fn=None, optimizer=None):
    """Records one forward and backward of `model` on `inputs` and writes it as a Ferry trace.

    inputs: a tensor or a tuple of arguments for model(...). loss_fn(output) gives the loss
    (default: the sum of the output). The model's gradients are left as they were (None). Returns
    the trace (dict); `ferry analyze --trace PATH` and `ferry plan --trace PATH` read the file.
    Each op's scratch, as the recorder measured it (what PyTorch's allocator held inside the op
    beyond its new outputs), is an extra output of role `workspace` that no op reads (trace format
    section 7), so `ferry analyze` and `ferry plan` count it as the adapter's planner does. The
    step's peak measured from the allocator rides along as `x_measured_peak_bytes`, an extension
    Ferry's reader ignores.
    """
    params = list(model.named_parameters())
    _check_no_grads(params)
    args = inputs if isinstance(inputs, tuple) else (inputs,)
    start_bytes = _measure.storage_bytes(
        _measure.persistent_tensors(model, optimizer, [a for a in args if isinstance(a, torch.Tensor)]))
    recorder = Recorder(params)
    with recorder:
        out = model(*args)
        loss = loss_fn(out) if loss_fn is not None else out.sum()
        loss.backward()
    grads = recorder.finish(params)
    trace = recorder.rec.trace(type(model).__name__, update_groups(recorder.rec, params, optimizer, grads),
                               scratch_outputs=True)
    # Measured by the recorder, for people and tools; Ferry's reader ignores x_ fields. The step's
    # peak counts what existed before it (parameters, buffers, inputs, optimizer state) plus the
    # allocator's highest level above that during the step.
    trace["x_measured_peak_bytes"] = start_bytes + recorder.rec.peak_increase_bytes
    for _, p in params:
        p.grad = None
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(trace, f)
    os.replace(tmp, path)
    return trace
