#!/usr/bin/python3
"""ferry.torch against PyTorch's own memory savers: step time and measured step peak, side by side.

Design
- Cases: a torchvision ResNet-50 (random weights, batch 16 at 160x160 by default, SGD momentum
  0.9) and the GPT-2-style model of bench/pytorch_models.py (Gpt2: pre-LN, tied head, d 768, 12
  heads, dropout 0.1, Adam) cut to 4 layers, batch 4 x seq 256 and a vocabulary of 8,192 by
  default. Each takes a few seconds a step on 2 cores (GPT-2 small's 12 layers take ~10 s). The
  vocabulary is cut because with GPT-2's 50,257 rows the step's peak is not a saved tensor: it is
  the tied embedding's gradient accumulation at the end of backward (the LM head's 147 MiB gradient,
  the embedding's 147 MiB gradient and their 147 MiB sum alive at once, activations already freed),
  which no saved-tensor method lowers: per-block checkpointing measured exactly plain's peak there
  (4 layers, batch 4 x seq 128). `--gpt2-vocab 50257` runs that case.
- Methods: plain (no memory saving); checkpoint (bench/pytorch_models.checkpointed_forward:
  torch.utils.checkpoint, non-reentrant, ResNet's [stem, layer1..4] as checkpoint_sequential would
  cut them into 5 segments, one segment per transformer block); save_on_cpu
  (torch.autograd.graph.save_on_cpu, which on a CPU-only machine keeps every saved tensor where it
  is: it saves no memory); ferry-host and ferry-ssd (ferry.torch.Budget with tier "host"/"ssd").
- Every (case, method) runs in its own process (`torch_adapter.py worker ...`): build, warm-up
  steps, timed steps (wall time of zero_grad -> forward -> loss -> backward -> optimizer.step ->
  loss.item()), then one more step measured with ferry._measure.step_peak_bytes (the profiler
  would slow the timed ones). One JSON line out.
- The driver runs plain first: its measured peak and persistent bytes (parameters, buffers,
  gradients, optimizer state) set the ferry budget, persistent + (plain peak - persistent) / 3,
  handed to the ferry workers as --budget BYTES; then a pass with no pressure (budget = 1.5 x
  plain peak) for the ferry methods; plain runs again last to show how much the machine drifted.
  Slowdowns are against the first plain run of the same invocation.
- What "measured peak" is: PyTorch's CPU allocator on the calling thread (python/ferry/_measure.py
  says what that sees and misses). Memory that ferry keeps outside PyTorch's allocator (a host
  tier's buffers: this machine's RAM too) or that other threads allocate is not in it; the max-RSS
  column (the process's whole-life resident peak, model build included) is there to show it.
"""

import argparse
import contextlib
import datetime
import importlib.util
import json
import os
import pathlib
import platform
import resource
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
METHODS = ["plain", "checkpoint", "save_on_cpu", "ferry-host", "ferry-ssd"]
CASES = ["resnet50", "gpt2"]
NO_PRESSURE_FACTOR = 1.5
NOTES = {
    "checkpoint": "torch.utils.checkpoint, use_reentrant=False (1.13's checkpoint_sequential is reentrant only)",
    "save_on_cpu": "CPU-only machine: save_on_cpu keeps the saved tensors where they are, so it saves no memory",
    "ferry-host": "the host tier is this machine's RAM: bytes ferry holds outside PyTorch's allocator are not in the peak",
}


def load_measure():
    """python/ferry/_measure.py on its own (plain rows need neither the built module nor the package)."""
    spec = importlib.util.spec_from_file_location("ferry_measure", ROOT / "python" / "ferry" / "_measure.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------------------------
# worker

def build_case(a):
    """(model, optimizer, inputs, labels, loss_fn, config) of a case, random weights from a.seed."""
    import torch
    import torch.nn.functional as F
    torch.manual_seed(a.seed)
    if a.case == "resnet50":
        import torchvision
        model = torchvision.models.resnet50()
        inputs = torch.randn(a.resnet_batch, 3, a.resnet_image, a.resnet_image)
        labels = torch.randint(0, 1000, (a.resnet_batch,))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        loss_fn = F.cross_entropy
        config = {"batch": a.resnet_batch, "image": a.resnet_image}
    else:
        sys.path.insert(0, str(ROOT / "bench"))
        from pytorch_models import Gpt2
        model = Gpt2(layers=a.gpt2_layers, vocab=a.gpt2_vocab, max_positions=max(1024, a.gpt2_seq),
                     dropout=a.gpt2_dropout)
        inputs = torch.randint(0, model.vocab, (a.gpt2_batch, a.gpt2_seq))
        labels = torch.randint(0, model.vocab, (a.gpt2_batch, a.gpt2_seq))
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        loss_fn = lambda out, y: F.cross_entropy(out.view(-1, out.shape[-1]), y.view(-1))
        config = {"batch": a.gpt2_batch, "seq": a.gpt2_seq, "layers": a.gpt2_layers, "dropout": a.gpt2_dropout,
                  "hidden": model.hidden, "vocab": model.vocab}
    model.train()
    return model, optimizer, inputs, labels, loss_fn, config


def method_setup(a, model, optimizer):
    """(forward(model, inputs), context-manager factory around forward+backward, trainer or None)."""
    import torch
    plain_forward = lambda m, x: m(x)
    if a.method == "plain":
        return plain_forward, contextlib.nullcontext, None
    if a.method == "checkpoint":
        sys.path.insert(0, str(ROOT / "bench"))
        from pytorch_models import checkpointed_forward
        return checkpointed_forward, contextlib.nullcontext, None
    if a.method == "save_on_cpu":
        return plain_forward, torch.autograd.graph.save_on_cpu, None
    import ferry.torch as ft  # imported (or reported as skipped) by run_worker before the build
    trainer = ft.Budget(model, optimizer, budget=a.budget, tier=a.method.split("-", 1)[1])
    return plain_forward, trainer.step, trainer


def run_worker(a):
    import torch
    torch.set_num_threads(a.threads)
    torch.backends.mkldnn.enabled = True
    measure = load_measure()
    result = {"case": a.case, "method": a.method, "threads": torch.get_num_threads(), "torch": torch.__version__,
              "warmup": a.warmup, "budget_bytes": a.budget}
    if a.method.startswith("ferry"):
        try:
            import ferry.torch  # noqa: F401
        except ImportError as e:  # no row is made up: the driver prints the reason
            result["skipped"] = f"import ferry.torch failed: {e}"
            print(json.dumps(result))
            return
    model, optimizer, inputs, labels, loss_fn, config = build_case(a)
    result["config"] = config
    forward, step_ctx, trainer = method_setup(a, model, optimizer)

    grads_bytes = [0]

    def forward_backward():
        with step_ctx():
            loss = loss_fn(forward(model, inputs), labels)
            loss.backward()
        grads_bytes[0] = measure.storage_bytes(p.grad for p in model.parameters())
        return loss.item()

    def step():
        loss = forward_backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    times_ms, losses = [], []
    cpu_start = resource.getrusage(resource.RUSAGE_SELF)
    wall_start = time.perf_counter()
    for _ in range(a.warmup + a.iters):
        start = time.perf_counter()
        losses.append(step())
        times_ms.append((time.perf_counter() - start) * 1e3)
    wall_s = time.perf_counter() - wall_start
    cpu_end = resource.getrusage(resource.RUSAGE_SELF)
    cpu_s = (cpu_end.ru_utime - cpu_start.ru_utime) + (cpu_end.ru_stime - cpu_start.ru_stime)

    # Two more steps, measured: the whole step, and forward+backward alone (the part that saved
    # tensors and ferry's budget govern; Adam's step can peak higher, with temporaries of the
    # largest parameter's size while every gradient is alive).
    extra = [inputs, labels]
    peak_loss, peak_bytes = measure.step_peak_bytes(model, optimizer, step, extra_tensors=extra)
    fb_loss, fb_peak_bytes = measure.step_peak_bytes(model, optimizer, forward_backward, extra_tensors=extra)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    params = list(model.parameters())
    result.update({
        "times_ms": times_ms, "losses": losses, "measured_step_losses": [peak_loss, fb_loss],
        "median_ms": statistics.median(times_ms[a.warmup:]),
        "cpu_use": cpu_s / wall_s,  # (user + sys) / wall over the steps: at most `threads`
        "peak_bytes": peak_bytes,
        "forward_backward_peak_bytes": fb_peak_bytes,
        "params_bytes": measure.storage_bytes(params),
        "buffers_bytes": measure.storage_bytes(model.buffers()),
        "grads_bytes": grads_bytes[0],
        "optimizer_state_bytes": measure.storage_bytes(measure.optimizer_state_tensors(optimizer)),
        "inputs_bytes": measure.storage_bytes([inputs, labels]),
        "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    })
    result["persistent_bytes"] = (result["params_bytes"] + result["buffers_bytes"] + result["grads_bytes"]
                                  + result["optimizer_state_bytes"])
    if a.method in NOTES:
        result["note"] = NOTES[a.method]
    if trainer is not None:
        result["ferry_report"] = trainer.report()
    print(json.dumps(result, default=str))


# ------------------------------------------------------------------------------------------------
# driver

def worker_command(a, case, method, budget=None):
    cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "worker", "--case", case, "--method", method,
           "--threads", str(a.threads), "--seed", str(a.seed),
           "--warmup", str(a.warmup), "--iters", str(a.resnet_iters if case == "resnet50" else a.gpt2_iters),
           "--resnet-batch", str(a.resnet_batch), "--resnet-image", str(a.resnet_image),
           "--gpt2-batch", str(a.gpt2_batch), "--gpt2-seq", str(a.gpt2_seq), "--gpt2-layers", str(a.gpt2_layers),
           "--gpt2-vocab", str(a.gpt2_vocab), "--gpt2-dropout", str(a.gpt2_dropout)]
    if budget is not None:
        cmd += ["--budget", str(budget)]
    return cmd


def ferry_env(a):
    """The environment for workers: ferry's Python path first (--ferry-python, else build/python and python/)."""
    env = dict(os.environ)
    paths = [a.ferry_python] if a.ferry_python else [str(ROOT / "build" / "python"), str(ROOT / "python")]
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def run_one(a, case, method, budget=None):
    """Runs one worker; returns its JSON object, or {"failed": reason}."""
    cmd = worker_command(a, case, method, budget)
    print(f"  {case} {method}" + (f" budget {budget:,} B" if budget else "") + " ...", file=sys.stderr, flush=True)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=ferry_env(a), timeout=a.worker_timeout_s)
    except subprocess.TimeoutExpired:
        return {"case": case, "method": method, "budget_bytes": budget,
                "failed": f"no result within --worker-timeout-s {a.worker_timeout_s}"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = [line for line in done.stderr.strip().splitlines() if line.strip()][-1:] or ["no output"]
        return {"case": case, "method": method, "budget_bytes": budget,
                "failed": f"exit {done.returncode}: {tail[0][:300]}"}
    return json.loads(lines[-1])


def mib(nbytes):
    return f"{nbytes / 2**20:,.0f} MiB"


def table_rows(rows, plain):
    """Markdown table lines: time and slowdown, measured peaks and their ratios to plain's, max RSS, same losses."""
    plain_fb_above = plain["forward_backward_peak_bytes"] - plain["persistent_bytes"]
    lines = ["| method | budget | median step ms | slowdown vs plain | step peak | fwd+bwd peak "
             "| fwd+bwd peak / plain's | (fwd+bwd peak - persistent) / plain's | fwd+bwd peak <= budget | max RSS "
             "| losses = plain's |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- |"]
    for label, r in rows:
        budget = mib(r["budget_bytes"]) if r.get("budget_bytes") else "-"
        if "skipped" in r or "failed" in r:
            what = f"skipped: {r['skipped']}" if "skipped" in r else f"failed: {r['failed']}"
            lines.append(f"| {label} | {budget} | {what} | | | | | | | | |")
            continue
        same = r["losses"] == plain["losses"] and r["measured_step_losses"] == plain["measured_step_losses"]
        fb = r["forward_backward_peak_bytes"]
        within = ("yes" if fb <= r["budget_bytes"] else "no") if r.get("budget_bytes") else "-"
        lines.append(
            f"| {label} | {budget} | {r['median_ms']:,.0f} | {r['median_ms'] / plain['median_ms']:.2f}x "
            f"| {mib(r['peak_bytes'])} | {mib(fb)} | {fb / plain['forward_backward_peak_bytes']:.2f} "
            f"| {(fb - r['persistent_bytes']) / plain_fb_above:.2f} | {within} | {mib(r['max_rss_bytes'])} "
            f"| {'yes' if same else 'no'} |")
    return lines


def target_lines(rows, plain):
    """The issue's targets, judged on this run's measured figures (no line for a skipped or failed row)."""
    done = {label: r for label, r in rows if "median_ms" in r}
    baselines = [(label, r) for label, r in done.items() if label in ("checkpoint", "save_on_cpu")]
    lines = []
    if baselines:
        name, best = min(baselines, key=lambda item: item[1]["median_ms"])
        for label, r in done.items():
            if label.endswith("(1/3)"):
                faster = r["median_ms"] < best["median_ms"]
                smaller = r["forward_backward_peak_bytes"] <= best["forward_backward_peak_bytes"]
                lines.append(f"- Target (1/3 budget): {label} {r['median_ms']:,.0f} ms vs the faster baseline, {name}, "
                             f"{best['median_ms']:,.0f} ms: {'faster' if faster else 'NOT faster'}, fwd+bwd peak "
                             f"{mib(r['forward_backward_peak_bytes'])} vs {mib(best['forward_backward_peak_bytes'])}: "
                             f"{'same or lower' if smaller else 'HIGHER'}.")
    for label, r in done.items():
        if label.endswith("(no pressure)"):
            overhead = r["median_ms"] / plain["median_ms"] - 1
            lines.append(f"- Target (no pressure, <= 3%): {label} {overhead:+.1%} over plain "
                         f"({'met' if overhead <= 0.03 else 'NOT met'}; compare the drift row's ratio).")
    return lines + ([""] if lines else [])


def run_case(a, case):
    """All rows of one case, in run order; returns (lines of markdown, raw results)."""
    plain = run_one(a, case, "plain")
    if "peak_bytes" not in plain:
        return [f"### {case}", "", f"plain failed: {plain.get('failed')}", ""], [plain]
    persistent = plain["persistent_bytes"]
    basis = plain["forward_backward_peak_bytes"] if a.budget_basis == "forward-backward" else plain["peak_bytes"]
    budget = persistent + (basis - persistent) // 3
    no_pressure = int(NO_PRESSURE_FACTOR * max(plain["peak_bytes"], plain["forward_backward_peak_bytes"]))
    rows = [("plain", plain)]
    for method in a.methods:
        if method.startswith("ferry"):
            rows.append((f"{method} (1/3)", run_one(a, case, method, budget)))
        elif method != "plain":
            rows.append((method, run_one(a, case, method)))
    for method in a.methods:
        if method.startswith("ferry") and not a.skip_no_pressure:
            rows.append((f"{method} (no pressure)", run_one(a, case, method, no_pressure)))
    rows.append(("plain (again: drift)", run_one(a, case, "plain")))
    for label, r in rows:
        if "skipped" in r or "failed" in r:
            print(f"  {label}: {'skipped' if 'skipped' in r else 'FAILED'}: {r.get('skipped') or r.get('failed')}",
                  file=sys.stderr)

    cfg = ", ".join(f"{k} {v}" for k, v in plain["config"].items())
    lines = [f"### {case} ({cfg}; {plain['threads']} threads)", "",
             f"Persistent = parameters {mib(plain['params_bytes'])} + buffers {mib(plain['buffers_bytes'])} + "
             f"gradients {mib(plain['grads_bytes'])} + optimizer state {mib(plain['optimizer_state_bytes'])} = "
             f"{mib(persistent)}. Plain measured peaks: step {mib(plain['peak_bytes'])}, forward+backward "
             f"{mib(plain['forward_backward_peak_bytes'])}. Ferry budget at 1/3: persistent + ({a.budget_basis} "
             f"peak - persistent) / 3 = {budget:,} B ({mib(budget)}); no pressure: {NO_PRESSURE_FACTOR} x the "
             f"larger plain peak = {mib(no_pressure)}.", ""]
    lines += table_rows(rows, plain)
    lines.append("")
    lines += target_lines(rows, plain)
    lines.append("CPU use per process ((user + sys) / wall over the steps, at most the thread count): "
                 + ", ".join(f"{label} {r['cpu_use']:.2f}" for label, r in rows if "cpu_use" in r) + ".")
    for label, r in rows:
        if "ferry_report" in r:
            lines.append(f"- {label} report: `{json.dumps(r['ferry_report'], default=str)}`")
    lines.append("")
    return lines, [r for _, r in rows]


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_driver(a):
    load_start = os.getloadavg()
    started = time.time()
    lines, raw = [], []
    for case in a.cases:
        print(f"{case}:", file=sys.stderr, flush=True)
        case_lines, case_raw = run_case(a, case)
        lines += case_lines
        raw += case_raw
        print("\n".join(case_lines), flush=True)
    load_end = os.getloadavg()
    minutes = (time.time() - started) / 60
    header = [
        f"# ferry.torch vs PyTorch's memory savers ({datetime.date.today().isoformat()}, measured)", "",
        f"Command: `OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')} bench/torch_adapter.py "
        f"{' '.join(a.argv)}`. {cpu_model()}, {os.cpu_count()} cores; "
        f"load average (1/5/15 min) {load_start[0]:.2f}/{load_start[1]:.2f}/{load_start[2]:.2f} at the start, "
        f"{load_end[0]:.2f}/{load_end[1]:.2f}/{load_end[2]:.2f} at the end; {minutes:.1f} minutes. "
        f"A load average above ~0.5 before the start means other work shared the two cores with these "
        f"2-thread runs: compare ratios within one case, not absolute times.", "",
        "Median step = median wall time of the timed steps (forward, loss, backward, optimizer step, "
        "zero_grad(set_to_none=True)), after the warm-up steps; slowdown is against the first plain run of "
        "the case. Measured peaks (python/ferry/_measure.py) = bytes of parameters, buffers, optimizer "
        "state and inputs at the start + the peak increase of PyTorch's CPU allocator during one more "
        "step ('step peak') and during the forward+backward of another ('fwd+bwd peak': what saved "
        "tensors and ferry's budget govern; an optimizer step can peak higher). The allocator is seen on "
        "the calling thread only; memory outside it is not in the peaks; max RSS is the process's "
        "lifetime resident peak. Persistent = parameters + buffers + gradients + optimizer state. "
        "'losses = plain's': every step's loss bitwise equal to the plain run's.", "",
        "Notes: " + " ".join(f"{m}: {n}." for m, n in NOTES.items()), "",
    ]
    if a.out:
        pathlib.Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(a.out).write_text("\n".join(header + lines) + "\n")
        print(f"wrote {a.out}", file=sys.stderr)
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(raw, indent=1, default=str) + "\n")


def add_case_options(p):
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--warmup", type=int, default=2, help="steps before the timed ones (ferry records and plans in them)")
    p.add_argument("--resnet-batch", type=int, default=16)
    p.add_argument("--resnet-image", type=int, default=160)
    p.add_argument("--gpt2-batch", type=int, default=4)
    p.add_argument("--gpt2-seq", type=int, default=256)
    p.add_argument("--gpt2-layers", type=int, default=4)
    p.add_argument("--gpt2-vocab", type=int, default=8192)
    p.add_argument("--gpt2-dropout", type=float, default=0.1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command")
    w = sub.add_parser("worker", help="one (case, method) in this process; prints one JSON line")
    w.add_argument("--case", required=True, choices=CASES)
    w.add_argument("--method", required=True, choices=METHODS)
    w.add_argument("--budget", type=int, default=None, help="bytes, for the ferry methods")
    w.add_argument("--iters", type=int, default=3)
    add_case_options(w)
    add_case_options(p)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--resnet-iters", type=int, default=5)
    p.add_argument("--gpt2-iters", type=int, default=3)
    p.add_argument("--budget-basis", default="forward-backward", choices=["forward-backward", "step"],
                   help="which plain peak the 1/3 budget is cut from (default: forward+backward, what ferry governs)")
    p.add_argument("--skip-no-pressure", action="store_true", help="no ferry pass at 1.5 x plain peak")
    p.add_argument("--ferry-python", default=None, help="directory holding the built `ferry` package "
                   "(default: build/python, then python/)")
    p.add_argument("--worker-timeout-s", type=int, default=600)
    p.add_argument("--out", default=None, help="write the markdown report here (e.g. bench/results/torch-adapter-DATE.md)")
    p.add_argument("--json", default=None, help="write every worker's JSON here")
    a = p.parse_args()
    if a.command == "worker":
        if a.method.startswith("ferry") and a.budget is None:
            p.error("the ferry methods need --budget BYTES")
        run_worker(a)
        return
    a.argv = sys.argv[1:]
    a.cases = [c for c in a.cases.split(",") if c]
    a.methods = [m for m in a.methods.split(",") if m]
    bad = [c for c in a.cases if c not in CASES] + [m for m in a.methods if m not in METHODS]
    if bad:
        p.error(f"unknown case or method {bad} (cases {CASES}, methods {METHODS})")
    if "plain" not in a.methods:
        a.methods.insert(0, "plain")
    run_driver(a)


if __name__ == "__main__":
    main()
