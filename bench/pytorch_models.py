#!/usr/bin/python3
"""PyTorch twins of Ferry's zoo models, and a worker that times their training iterations.

Design
- The models are written inline with torch.nn (no torchvision, no transformers, no downloads) so
  that they match Ferry's zoo layer for layer; `build()` asserts the parameter counts Ferry's zoo
  reports (ResNet-50 25,557,032; GPT-2 small with tied LM head 124,439,808).
- What the two sides share, so a time ratio compares implementations and not workloads:
  * ResNet-50 v1.5 (torchvision layout, stride on the bottleneck's 3x3 conv), batch norm on batch
    statistics. Ferry models no running statistics, so the PyTorch batch norms are built with
    track_running_stats=False (same parameters; the running-average update is skipped on both
    sides). Mean cross-entropy over 1000 classes, SGD momentum 0.9, lr 0.01, no weight decay.
  * GPT-2 small (Hugging Face GPT2LMHeadModel in training mode): pre-LN blocks, dropout 0.1 on the
    embeddings, attention probabilities and both residual branches, tanh GELU, textbook causal
    attention that materialises scores and probabilities (as Ferry does), LM head tied to the word
    embedding, mean cross-entropy over all B*T positions. Adam lr 1e-3 (betas 0.9/0.999, eps 1e-8,
    no weight decay), as `ferry train --optimizer adam`.
  * fp32, synthetic data of the same shapes (fixed seed), same thread count.
- The worker (`python3 pytorch_models.py worker ...`) runs warm-up + timed iterations of
  zero_grad(set_to_none=True) -> forward -> loss -> backward -> optimizer.step() and prints one JSON
  object with the per-iteration wall times; pytorch_vs_ferry.py starts one worker process per
  measurement so that both frameworks pay process start-up outside their timed loops alike.
- PyTorch gets its strongest setup on this CPU: set_num_threads, oneDNN (mkldnn) enabled,
  channels_last tried for the CNN, in-place ReLUs, fused tanh GELU, no anomaly detection, and the
  optimizer's multi-tensor (foreach) path selectable.

Forward MACs are counted here independently of Ferry (module hooks on Conv2d/Linear plus the
attention and tied-head matmuls, which are not modules), so the comparison script can check that
both sides do the same arithmetic.
"""

import argparse
import json
import math
import os
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

RESNET50_PARAMS = 25_557_032
GPT2_SMALL_PARAMS = 124_439_808


# ------------------------------------------------------------------------------------------------
# ResNet-50 v1.5 (torchvision.models.resnet50 layout and state_dict names)

def _bn(channels):
    # Batch statistics only, as Ferry's batch_norm (no running mean/var buffers to update).
    return nn.BatchNorm2d(channels, eps=1e-5, track_running_stats=False)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, in_channels, planes, stride):
        super().__init__()
        out_channels = planes * self.expansion
        self.conv1 = nn.Conv2d(in_channels, planes, 1, bias=False)
        self.bn1 = _bn(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = _bn(planes)
        self.conv3 = nn.Conv2d(planes, out_channels, 1, bias=False)
        self.bn3 = _bn(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False), _bn(out_channels))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + identity)


class ResNet50(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = _bn(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        in_channels = 64
        for stage, blocks in enumerate((3, 4, 6, 3)):
            planes = 64 << stage
            layers = []
            for block in range(blocks):
                stride = 2 if stage > 0 and block == 0 else 1
                layers.append(Bottleneck(in_channels, planes, stride))
                in_channels = planes * Bottleneck.expansion
            setattr(self, f"layer{stage + 1}", nn.Sequential(*layers))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(2048, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))

    def extra_forward_macs(self, inputs):
        return 0  # every MAC is in a Conv2d or Linear module


# ------------------------------------------------------------------------------------------------
# GPT-2 small (Hugging Face GPT2LMHeadModel: n_layer 12, n_embd 768, n_head 12, vocab 50257)

class CausalSelfAttention(nn.Module):
    def __init__(self, hidden, heads, max_positions, dropout):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(hidden, 3 * hidden)
        self.c_proj = nn.Linear(hidden, hidden)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        mask = torch.tril(torch.ones(max_positions, max_positions, dtype=torch.bool))
        self.register_buffer("causal_mask", mask, persistent=False)

    def forward(self, x):
        b, t, d = x.shape
        head_dim = d // self.heads
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, head_dim).transpose(1, 2) for z in (q, k, v))
        scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(head_dim))
        scores = scores.masked_fill(~self.causal_mask[:t, :t], float("-inf"))
        probs = self.attn_dropout(F.softmax(scores, dim=-1))
        context = torch.matmul(probs, v).transpose(1, 2).reshape(b, t, d)
        return self.resid_dropout(self.c_proj(context))


class Mlp(nn.Module):
    def __init__(self, hidden, dropout):
        super().__init__()
        self.c_fc = nn.Linear(hidden, 4 * hidden)
        self.c_proj = nn.Linear(4 * hidden, hidden)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))


class Block(nn.Module):
    def __init__(self, hidden, heads, max_positions, dropout):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden, eps=1e-5)
        self.attn = CausalSelfAttention(hidden, heads, max_positions, dropout)
        self.ln_2 = nn.LayerNorm(hidden, eps=1e-5)
        self.mlp = Mlp(hidden, dropout)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt2(nn.Module):
    def __init__(self, layers=12, hidden=768, heads=12, vocab=50257, max_positions=1024, dropout=0.1):
        super().__init__()
        self.hidden, self.heads, self.vocab, self.layers = hidden, heads, vocab, layers
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(max_positions, hidden)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList(Block(hidden, heads, max_positions, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden, eps=1e-5)
        # HF's initializer_range; nn.Embedding's N(0, 1) would, through the tied head, start from logits
        # of standard deviation ~sqrt(768) and a far larger loss than Ferry's.
        self.wte.weight.data.normal_(0.0, 0.02)
        self.wpe.weight.data.normal_(0.0, 0.02)

    def forward(self, ids, checkpoint_blocks=False):
        """Logits; with checkpoint_blocks, each block runs under torch.utils.checkpoint (non-reentrant)."""
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.drop(self.wte(ids) + self.wpe(positions))
        for block in self.h:
            x = checkpoint(block, x, use_reentrant=False) if checkpoint_blocks else block(x)
        return F.linear(self.ln_f(x), self.wte.weight)  # LM head tied to the word embedding

    def extra_forward_macs(self, ids):
        batch, seq = ids.shape
        head_dim = self.hidden // self.heads
        attention = 2 * batch * self.heads * seq * seq * head_dim  # q k^T and probs v, full T x T
        return self.layers * attention + batch * seq * self.hidden * self.vocab  # + tied LM head


# ------------------------------------------------------------------------------------------------
# torch.utils.checkpoint baselines (what a PyTorch user would write to save memory)

def checkpointed_forward(model, inputs):
    """The model's forward under torch.utils.checkpoint (non-reentrant), segmented as a user would.

    - ResNets (torchvision layout, or ResNet50 above): the children [stem, layer1, layer2, layer3,
      layer4] in 5 segments as checkpoint_sequential cuts them: the first four checkpointed, the
      last (layer4) and the head run plainly, since backward needs them at once.
    - Gpt2: each block checkpointed (the embeddings, final norm and tied head run plainly).
    Not torch 1.13's checkpoint_sequential itself: it is reentrant only, and a reentrant checkpoint
    whose input does not require grad (the image) returns an output that does not either, so every
    checkpointed segment's parameters get no gradient (a warning, then silently wrong training).
    """
    if isinstance(model, Gpt2):
        return model(inputs, checkpoint_blocks=True)
    if all(hasattr(model, name) for name in ("conv1", "bn1", "relu", "maxpool", "layer4", "avgpool", "fc")):
        stem = lambda x: model.maxpool(model.relu(model.bn1(model.conv1(x))))
        x = inputs
        for segment in (stem, model.layer1, model.layer2, model.layer3):
            x = checkpoint(segment, x, use_reentrant=False)
        return model.fc(torch.flatten(model.avgpool(model.layer4(x)), 1))
    raise ValueError(f"checkpointed_forward: no segmenting for {type(model).__name__} (ResNets and Gpt2 only)")


# ------------------------------------------------------------------------------------------------

def build(case, batch, image, seq, seed):
    """Returns (model, inputs, labels, loss_fn, extra_macs) for a case; asserts the parameter count."""
    torch.manual_seed(seed)
    if case == "resnet50":
        model = ResNet50()
        expected = RESNET50_PARAMS
        inputs = torch.randn(batch, 3, image, image)
        labels = torch.randint(0, 1000, (batch,))
        loss_fn = lambda out, y: F.cross_entropy(out, y)
    elif case == "gpt2":
        model = Gpt2()
        expected = GPT2_SMALL_PARAMS
        inputs = torch.randint(0, model.vocab, (batch, seq))
        labels = torch.randint(0, model.vocab, (batch, seq))
        loss_fn = lambda out, y: F.cross_entropy(out.view(-1, out.shape[-1]), y.view(-1))
    else:
        raise SystemExit(f"pytorch_models.py: unknown case '{case}' (resnet50, gpt2)")
    params = sum(p.numel() for p in model.parameters())  # tied weights are counted once
    assert params == expected, f"{case}: {params:,} parameters, Ferry's zoo has {expected:,}"
    return model, inputs, labels, loss_fn, model.extra_forward_macs(inputs)


def count_forward_macs(model, inputs, extra):
    """MACs of one forward pass: Conv2d/Linear modules via hooks, plus the model's non-module matmuls."""
    total = [extra]

    def hook(module, args, out):
        if isinstance(module, nn.Conv2d):
            k = module.in_channels // module.groups * module.kernel_size[0] * module.kernel_size[1]
            total[0] += out.numel() * k
        else:
            total[0] += out.numel() * module.in_features

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    with torch.no_grad():
        model(inputs)
    for h in handles:
        h.remove()
    return total[0]


def environment():
    """What PyTorch runs on: versions, BLAS and oneDNN, threads (for the report)."""
    config = torch.__config__.show()
    info = {
        "torch": torch.__version__,
        "mkldnn_available": torch.backends.mkldnn.is_available(),
        "mkldnn_enabled": torch.backends.mkldnn.enabled,
        "onednn": next((line.strip(" -") for line in config.splitlines() if "MKL-DNN" in line), "unknown"),
        "blas_info": next((part.split("=", 1)[1] for part in config.replace(",", " ").split()
                           if part.startswith("BLAS_INFO=")), "unknown"),
        "cpu_capability": next((line.split(":", 1)[1].strip() for line in config.splitlines()
                                if "CPU capability" in line), "unknown"),
        "threads": torch.get_num_threads(),
        "parallel_backend": next((line.split(":", 1)[1].strip() for line in torch.__config__.parallel_info()
                                  .splitlines() if "parallel backend" in line), "unknown"),
    }
    # Which BLAS libblas.so.3 really is: PyTorch's generic BLAS goes through Debian's alternatives.
    try:
        import ctypes
        blas = ctypes.CDLL("libopenblas.so.0")
        blas.openblas_get_config.restype = ctypes.c_char_p
        blas.openblas_get_corename.restype = ctypes.c_char_p
        info["openblas"] = f"{blas.openblas_get_config().decode()} core {blas.openblas_get_corename().decode()}" \
                           f", {blas.openblas_get_num_threads()} threads"
    except (OSError, AttributeError):
        info["openblas"] = "not loaded"
    try:
        info["libblas.so.3"] = os.path.realpath("/etc/alternatives/libblas.so.3-x86_64-linux-gnu")
    except OSError:
        info["libblas.so.3"] = "unknown"
    return info


def run_worker(a):
    torch.set_num_threads(a.threads)
    torch.backends.mkldnn.enabled = True
    torch.autograd.set_detect_anomaly(False)
    model, inputs, labels, loss_fn, extra = build(a.case, a.batch, a.image, a.seq, a.seed)
    if a.layout == "channels_last":
        if a.case != "resnet50":
            raise SystemExit("pytorch_models.py: channels_last applies to the CNN only")
        model = model.to(memory_format=torch.channels_last)
        inputs = inputs.contiguous(memory_format=torch.channels_last)
    macs = count_forward_macs(model, inputs, extra) if a.count_macs else None
    model.train()
    foreach = {"default": None, "on": True, "off": False}[a.foreach]
    if a.case == "resnet50":
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=0.0, foreach=foreach)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                                     foreach=foreach)
    times_ms, losses = [], []
    for _ in range(a.warmup + a.iters):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs), labels)
        loss.backward()
        optimizer.step()
        loss_value = loss.item()  # CPU: already computed; keeps the step's end inside the timing
        times_ms.append((time.perf_counter() - start) * 1e3)
        losses.append(loss_value)
    result = {
        "case": a.case, "layout": a.layout, "batch": a.batch, "threads": torch.get_num_threads(),
        "foreach": a.foreach, "warmup": a.warmup, "times_ms": times_ms, "losses": losses,
        "params": sum(p.numel() for p in model.parameters()), "forward_macs": macs,
        "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
    if a.environment:
        result["environment"] = environment()
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    w = sub.add_parser("worker", help="time training iterations of one case and print JSON")
    w.add_argument("--case", required=True, choices=["resnet50", "gpt2"])
    w.add_argument("--layout", default="contiguous", choices=["contiguous", "channels_last"])
    w.add_argument("--batch", type=int, required=True)
    w.add_argument("--image", type=int, default=224)
    w.add_argument("--seq", type=int, default=256)
    w.add_argument("--threads", type=int, default=2)
    w.add_argument("--warmup", type=int, default=2, help="untimed-for-the-median iterations first")
    w.add_argument("--iters", type=int, default=5, help="iterations for the median")
    w.add_argument("--foreach", default="default", choices=["default", "on", "off"],
                   help="optimizer multi-tensor path (default: PyTorch's choice, the per-tensor loop on CPU)")
    w.add_argument("--seed", type=int, default=1)
    w.add_argument("--count-macs", action="store_true", help="also count forward MACs with hooks")
    w.add_argument("--environment", action="store_true", help="also report torch/BLAS/oneDNN configuration")
    a = p.parse_args()
    if a.command == "worker":
        run_worker(a)


if __name__ == "__main__":
    main()
