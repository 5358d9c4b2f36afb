"""Recording one PyTorch training iteration as a Ferry graph (trace format v2).

Design
- Two public PyTorch mechanisms watch the iteration: a TorchDispatchMode sees every aten op below
  autograd (forward and backward alike, with its real inputs and outputs), and
  saved_tensors_hooks sees every tensor autograd saves for backward (pack) and every time backward
  reads one (unpack).
- Ferry's graph is over *storages*, not tensor objects: memory is held by storages, and a view
  (`view`, `t`, `transpose`, slicing) shares its base's. An op output whose schema says it aliases
  an input without writing is a view: no new graph tensor. An output that aliases an input and
  writes it (`relu_`, `add_`, `out=` forms, batch norm's running statistics) is an in-place update: a
  new version of the storage becomes a new graph tensor, produced by that op from the old version,
  with `overwrites` naming the old one (trace v2: it takes over the old version's bytes, on any
  output), so every graph tensor is written once. Any other output is a new storage.
- Byte ranges: an op that reads part of a storage through a view (a slice, a narrow, one of
  several heads) names a trace-v2 *view* of that storage with the range's offset and bytes; reads
  of a whole storage (including transposes and reshapes of all of it) name the storage's tensor.
  Views are listed after every graph tensor, so graph ids stay the recording's ids.
- Storages are recognised by their data pointer and size among the storages alive in the
  recording; a pointer reused after a free is a new storage, because only an op's fresh output
  (schema without alias) creates a graph tensor, and that replaces the entry. A storage made
  outside any op (a Python scalar wrapped as a tensor) at a freed address is told apart by its size
  (keyed by the pointer alone, an 8-byte scalar once took a freed activation's id, and the next
  step's check of saved sizes saw a mismatch).
- Roles: a storage first seen as an input is a `weight` if it is a parameter's, else an `input`
  (data, buffers, anything made before the step); fresh outputs are `activation`s in forward and
  `gradient`s in backward; at the end, the storages that became parameters' `.grad` are
  `weight_gradient`s; optimizer state (added when the plan is made, after the optimizer has created
  it) is `optimizer_state`, read and written by one `update` op that stands for optimizer.step().
- Phases: ops are `forward` until backward reads its first saved tensor (the first unpack), then
  `backward`. The few backward ops that run before that (the loss's own gradient, which saves
  nothing) are counted as forward; they are tiny and save nothing, so no plan depends on them.
- Op times are the wall time of each aten call as this process ran it (measured, Python dispatch
  included), in microseconds.
- Memory is measured too: the recording runs under PyTorch's profiler with its allocator events
  (ferry._measure), and each op is bracketed by a `record_function` named after its index. An op's
  scratch is what the allocator held at the op's highest point above its start level, beyond the
  new storages it returned (oneDNN's reorders inside a convolution's backward, temporaries of
  composite kernels); the planner gets it as the op's scratch. The step's measured peak (the
  allocator's highest level above its start) is kept too.
- Each pack is remembered in order (which graph tensor, at which op), and so is each op's name and
  output sizes: the executor (ferry/torch.py) follows the plan by these counters and notices when a
  later iteration differs.
"""
import time

import torch
from torch.profiler import record_function
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ferry import _measure


def call_op(func, args, kwargs):
    """func(*args, **kwargs) as a TorchDispatchMode must return it.

    torch 1.13 turns a "wrapped number" result (the 0-dim double tensor PyTorch makes of a Python
    scalar operand, e.g. the 0.5 of `x.mul_(0.5)`, which autograd saves and backward detaches) into
    a Python number on its way back to Python; returned from __torch_dispatch__ it fails with
    "detach returned invalid type float". It goes back as the 0-dim tensor it was (same dtype; as
    an operand of the same value it computes the same numbers).
    """
    out = func(*args, **kwargs)
    if isinstance(out, (bool, int, float, complex)) and len(func._schema.returns) == 1 \
            and str(func._schema.returns[0].type) == "Tensor":
        dtype = {bool: torch.bool, int: torch.int64, float: torch.float64, complex: torch.complex128}[type(out)]
        out = torch.tensor(out, dtype=dtype)
    return out


class Unsupported(RuntimeError):
    """A PyTorch feature ferry.torch does not handle (the message names it)."""


_RANDOM = ("dropout", "bernoulli", "rand", "normal", "uniform", "multinomial", "exponential", "geometric",
           "cauchy", "poisson")


def _replayable_kind(func):
    """Whether an aten op is a pure function of its arguments (see Recording.replayable)."""
    schema = func._schema
    if any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments):
        return False
    if any(r.alias_info is not None for r in schema.returns):
        return False
    return not any(word in schema.name for word in _RANDOM)


def storage_key(t):
    """(data pointer, bytes) of a tensor's storage; bytes 0 for an empty one. Dense CPU tensors only:
    their storages are what the adapter measures and moves."""
    if t.device.type != "cpu":
        raise Unsupported(f"ferry.torch runs on the CPU only; a tensor is on '{t.device}'")
    if t.layout != torch.strided or t.is_quantized:
        raise Unsupported(f"ferry.torch handles dense tensors only; a tensor has layout {t.layout}"
                          f"{' (quantized)' if t.is_quantized else ''}")
    s = t.storage()
    return s.data_ptr(), s.nbytes()


def byte_range(t):
    """(offset, bytes) of the part of its storage a tensor spans: from its first element to its last
    (a strided view spans the gaps between its elements too)."""
    size = t.element_size()
    if t.numel() == 0:
        return t.storage_offset() * size, 0
    if any(st < 0 for st in t.stride()):
        return 0, t.storage().nbytes()
    extent = 1 + sum((n - 1) * st for n, st in zip(t.size(), t.stride()))
    return t.storage_offset() * size, extent * size


class Recording:
    """One recorded iteration: graph tensors and ops, saves, and the counters the executor checks."""

    def __init__(self):
        self.tensors = []        # dicts: id, name, role, bytes (and overwrites: an in-place version's old one)
        self.ops = []            # dicts: name, type, phase, inputs, outputs, time_us
        self.op_signatures = []  # per op: (aten name, output storage bytes) to recognise it later
        self.saves = []          # per pack, in order: (graph tensor id, op index at the pack)
        self.unpacks = []        # per unpack, in order: graph tensor id
        self.num_forward = 0     # ops before the first unpack
        self.weight_ids = {}     # parameter storage pointer -> graph tensor id
        self.op_scratch = []     # per op: measured bytes held inside the op beyond its new outputs
        self.op_new_outputs = [] # per op: (index in the flattened outputs, graph id) of each new tensor
        self.op_replayable = []  # per op: running it again recomputes its outputs (see replayable())
        self.op_ranges = []      # per op: {graph id: set of (offset, bytes)} of storages it read only in part
        self.superseded = set()  # graph ids whose storage a later in-place op overwrote
        self.peak_increase_bytes = 0  # measured: the allocator's peak over its level at the start

    def new_tensor(self, name, role, nbytes):
        tid = len(self.tensors)
        self.tensors.append({"id": tid, "name": name, "role": role, "bytes": int(nbytes)})
        return tid

    def saved_ids(self):
        return {tid for tid, _ in self.saves}

    def replayable(self):
        """Per op: whether the executor may run it again to recompute its outputs. Not an op that
        writes any argument (in-place, out=, batch norm's running statistics), returns a view, draws
        random numbers, or reads or writes a storage that an in-place op overwrites later (the bytes
        a replay would read are gone)."""
        out = []
        for op, ok in zip(self.ops, self.op_replayable):
            touched = set(op["inputs"]) | set(op["outputs"])
            out.append(ok and not (touched & self.superseded))
        return out

    def trace(self, model_name, updates=(), scratch_outputs=False):
        """The iteration as a Ferry trace (dict, format v2), with one update op per parameter.

        updates: update_groups(...): per parameter, its weight and gradient ids and its optimizer
        state, which gets graph ids after the recording's tensors.
        scratch_outputs: give every op with measured scratch (op_scratch) an output of role
        `workspace` of that size which no op reads, so it occupies memory exactly during its op
        (trace format section 7); for a trace file that Ferry's CLI reads alone. The adapter's
        planner gets the scratch beside the graph instead.
        """
        tensors = [dict(t) for t in self.tensors]
        ops = [dict(o) for o in self.ops]
        update_ops = []
        for name, wid, gid, state in updates:
            sids = []
            for state_name, nbytes in state:
                sids.append(len(tensors))
                tensors.append({"id": sids[-1], "name": state_name, "role": "optimizer_state", "bytes": int(nbytes)})
            update_ops.append({"name": f"optimizer.step[{name}]", "type": "opaque", "phase": "update",
                               "inputs": [wid] + sids + [gid], "outputs": [wid] + sids})
        if scratch_outputs:
            for op, scratch in zip(ops, self.op_scratch):
                if scratch > 0:
                    tensors.append({"id": len(tensors), "name": f"{op['name']}.scratch", "role": "workspace",
                                    "bytes": int(scratch)})
                    op["outputs"] = op["outputs"] + [tensors[-1]["id"]]
        views = {}  # (graph id, offset, bytes) -> view id, after every graph tensor
        for op, ranges in zip(ops, self.op_ranges):
            if not ranges:
                continue
            inputs = []
            for tid in op["inputs"]:
                for offset, nbytes in sorted(ranges.get(tid, ())):
                    key = (tid, offset, nbytes)
                    if key not in views:
                        views[key] = len(tensors)
                        tensors.append({"id": views[key], "name": f"{tensors[tid]['name']}[{offset}:{offset + nbytes}]",
                                        "view_of": tid, "offset": offset, "bytes": nbytes})
                    inputs.append(views[key])
                if tid not in ranges:
                    inputs.append(tid)
            op["inputs"] = inputs
        return {"format": "ferry-trace", "version": 2, "model": model_name, "tensors": tensors,
                "ops": ops + update_ops}

    @staticmethod
    def num_graph_tensors(trace):
        """Tensors of the graph a trace() makes (its views excluded): the recording's and the state's."""
        return sum(1 for t in trace["tensors"] if "view_of" not in t)


class Recorder(TorchDispatchMode):
    """Records the ops and saves of the code run inside `with Recorder(...)` (see the module doc)."""

    def __init__(self, parameters):
        super().__init__()
        self.rec = Recording()
        self._params = {}
        for name, p in parameters:
            ptr, nbytes = storage_key(p)
            if nbytes > 0 and ptr not in self._params:
                self._params[ptr] = (name, nbytes)
        self._current = {}  # (storage pointer, bytes) -> graph tensor id of its latest version
        self._backward = False
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._profiler = _measure.profiling()
        self._new_bytes = []  # per op: bytes of the new storages it returned

    def __enter__(self):
        self._profiler.__enter__()
        self._hooks.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        out = super().__exit__(*exc)
        self._hooks.__exit__(*exc)
        self._profiler.__exit__(*exc)
        if exc[0] is None:
            self._measure_memory()
        return out

    def _measure_memory(self):
        events = sorted(self._profiler.profiler.kineto_results.events(), key=lambda e: e.start_us())
        level = peak = 0
        spans = {}  # op index -> (start us, end us)
        for e in events:
            name = e.name()
            if name.startswith("ferry#"):
                spans[int(name[6:])] = (e.start_us(), e.start_us() + e.duration_us())
        memory = [(e.start_us(), e.nbytes()) for e in events if e.name() == "[memory]"]
        scratch = [0] * len(self.rec.ops)
        k = 0
        for index in range(len(self.rec.ops)):
            if index not in spans:
                continue
            start, end = spans[index]
            while k < len(memory) and memory[k][0] < start:
                level += memory[k][1]
                peak = max(peak, level)
                k += 1
            base = top = level
            while k < len(memory) and memory[k][0] <= end:
                level += memory[k][1]
                top = max(top, level)
                peak = max(peak, level)
                k += 1
            scratch[index] = max(0, top - base - self._new_bytes[index])
        for _, delta in memory[k:]:
            level += delta
            peak = max(peak, level)
        self.rec.op_scratch = scratch
        self.rec.peak_increase_bytes = peak

    # -- storages -------------------------------------------------------------------------------
    def _lookup(self, t, key=None):
        """Graph id of t's storage (created as weight or input when first seen), or None if empty.
        key: storage_key(t), when the caller has it."""
        ptr, nbytes = key or storage_key(t)
        if nbytes == 0:
            return None
        tid = self._current.get((ptr, nbytes))
        if tid is None:
            if ptr in self._params:
                name, _ = self._params[ptr]
                tid = self.rec.new_tensor(name, "weight", nbytes)
                self.rec.weight_ids[ptr] = tid
            else:
                tid = self.rec.new_tensor(f"input{len(self.rec.tensors)}", "input", nbytes)
            self._current[(ptr, nbytes)] = tid
        return tid

    # -- hooks ----------------------------------------------------------------------------------
    def _pack(self, t):
        tid = self._lookup(t)
        if tid is not None:
            self.rec.saves.append((tid, len(self.rec.ops)))
        return (tid, t)  # the graph id travels with the saved tensor to its unpacks

    def _unpack(self, packed):
        if not self._backward:
            self._backward = True
            self.rec.num_forward = len(self.rec.ops)
        tid, t = packed
        if tid is not None:
            self.rec.unpacks.append(tid)
        return t

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        in_ids, input_ptrs, whole, parts = [], set(), set(), {}
        for a in inputs:
            key = storage_key(a)
            tid = self._lookup(a, key)
            if tid is None:
                continue
            if tid not in in_ids:
                in_ids.append(tid)
            input_ptrs.add(key[0])
            offset, nbytes = byte_range(a)
            if (offset == 0 and nbytes >= self.rec.tensors[tid]["bytes"]) or \
                    offset + nbytes > self.rec.tensors[tid]["bytes"]:
                whole.add(tid)
            else:
                parts.setdefault(tid, set()).add((offset, nbytes))
        self.rec.op_ranges.append({tid: r for tid, r in parts.items() if tid not in whole})
        with record_function(f"ferry#{len(self.rec.ops)}"):
            start = time.perf_counter_ns()
            out = call_op(func, args, kwargs)
            time_us = (time.perf_counter_ns() - start) / 1e3
        self._record(func, in_ids, input_ptrs, out, time_us)
        return out

    def _record(self, func, in_ids, input_ptrs, out, time_us):
        index = len(self.rec.ops)
        name = str(func)
        phase = "backward" if self._backward else "forward"
        outs = tree_flatten(out)[0]
        returns = func._schema.returns
        out_ids, signature, new_positions = [], [], []
        for k, o in enumerate(outs):
            if not isinstance(o, torch.Tensor):
                continue
            ptr, nbytes = storage_key(o)
            signature.append(nbytes)
            if nbytes == 0:
                continue
            alias = returns[k].alias_info if k < len(returns) else None
            if alias is not None and not alias.is_write:
                continue  # a view: same storage, same graph tensor
            if alias is None and ptr in input_ptrs:
                continue  # a view the schema does not declare (_unsafe_view): same storage
            old = self._current.get((ptr, nbytes)) if alias is not None else None
            role = "gradient" if self._backward else "activation"
            tid = self.rec.new_tensor(f"{name}#{index}.{k}", role, nbytes)
            if old is not None:
                # In-place: a new version of the storage, which the op reads and overwrites.
                self.rec.superseded.add(old)
                if old not in in_ids:
                    in_ids.append(old)
                if self.rec.tensors[old]["role"] != "weight" and self.rec.tensors[old]["bytes"] == nbytes:
                    # (parameters are written by updates only; a resized storage is a new one)
                    self.rec.tensors[tid]["overwrites"] = old
            self._current[(ptr, nbytes)] = tid
            out_ids.append(tid)
            new_positions.append(k)
        op = {"name": f"{name}#{index}", "type": "opaque", "phase": phase, "inputs": in_ids, "outputs": out_ids,
              "time_us": time_us}
        self.rec.ops.append(op)
        self.rec.op_signatures.append((name, tuple(signature)))
        self.rec.op_new_outputs.append([(k, t) for k, t in zip(new_positions, out_ids)])
        self.rec.op_replayable.append(_replayable_kind(func))
        self._new_bytes.append(sum(self.rec.tensors[t]["bytes"] for t in out_ids))

    def finish(self, parameters):
        """Marks the storages that ended as parameters' .grad as weight gradients; returns
        {parameter name: graph id of its gradient}."""
        if not self._backward:
            self.rec.num_forward = len(self.rec.ops)
        grads = {}
        for name, p in parameters:
            if p.grad is None:
                continue
            tid = self._current.get(storage_key(p.grad))
            if tid is not None and self.rec.tensors[tid]["role"] in ("gradient", "activation"):
                self.rec.tensors[tid]["role"] = "weight_gradient"
                grads[name] = tid
        return grads


def update_groups(recording, parameters, optimizer, grads):
    """What optimizer.step() touches, per parameter in the recording: (name, weight id, gradient id,
    [(state name, bytes)] of its optimizer state). PyTorch 1.13's optimizers step the parameters of
    CPU models one at a time (no foreach kernels by default), so each becomes one update op.
    Parameters without a gradient are skipped, as the optimizers skip them."""
    seen, groups = set(), []
    for name, p in parameters:
        wid = recording.weight_ids.get(storage_key(p)[0])
        if wid is None or name not in grads:
            continue
        state = []
        for key, value in (optimizer.state.get(p, {}) if optimizer is not None else {}).items():
            if torch.is_tensor(value):
                ptr, nbytes = storage_key(value)
                if nbytes > 0 and ptr not in seen:
                    seen.add(ptr)
                    state.append((f"{name}.{key}", nbytes))
        groups.append((name, wid, grads[name], state))
    return groups
