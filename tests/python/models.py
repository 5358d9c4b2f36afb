"""Small models for bitwise-identity tests of memory-saving training (ferry.torch, checkpoint, save_on_cpu).

Design
- Three cases, each a `Case`: build(seed) -> fresh model, batch(step) -> deterministic (inputs,
  targets), loss_fn, optimizer(model), and checkpointed(model, inputs) -> the forward under
  torch.utils.checkpoint (non-reentrant), the reference a recompute must match.
  * resnet18: torchvision.models.resnet18(num_classes=10), batch 4 x 3 x 64 x 64, SGD momentum.
  * transformer: bench/pytorch_models.Gpt2 with 2 layers, d 64, 4 heads, seq 32, vocab 100:
    GPT-2-style pre-LN blocks, causal attention, tied embedding/LM head, dropout 0; Adam.
  * quirky: views (view, transpose, slicing, reshape), in-place ops on intermediates (relu_, mul_,
    add_ through a view), a weight tied between two Linear layers; SGD momentum.
- Sized for 2 cores: a forward+backward of each takes well under a second.
- Models built from the same seed are bitwise equal; training is deterministic on this CPU
  (tests/python/test_models.py checks it), so a memory-saving run must match a plain one exactly.
"""

import dataclasses
import pathlib
import sys
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
from pytorch_models import Gpt2, checkpointed_forward  # noqa: E402


def _generator(step, salt):
    return torch.Generator().manual_seed(1_000_003 * salt + step)


# ------------------------------------------------------------------------------------------------
# ResNet-18

def resnet18_small(seed=0):
    """torchvision ResNet-18 with 10 classes, random weights from `seed`."""
    torch.manual_seed(seed)
    return torchvision.models.resnet18(num_classes=10)


def resnet18_batch(step, batch=4, image=64):
    """Deterministic (images batch x 3 x image x image, labels) for a step."""
    g = _generator(step, 1)
    return torch.randn(batch, 3, image, image, generator=g), torch.randint(0, 10, (batch,), generator=g)


def classification_loss(logits, labels):
    return F.cross_entropy(logits, labels)


# ------------------------------------------------------------------------------------------------
# GPT-2-style transformer stack

def transformer_stack(layers=2, d=64, heads=4, seq=32, vocab=100, seed=0):
    """Pre-LN causal transformer blocks with a tied embedding/LM head (bench's Gpt2), dropout 0."""
    torch.manual_seed(seed)
    return Gpt2(layers=layers, hidden=d, heads=heads, vocab=vocab, max_positions=seq, dropout=0.0)


def transformer_batch(step, batch=4, seq=32, vocab=100):
    """Deterministic (token ids batch x seq, next-token targets batch x seq) for a step."""
    g = _generator(step, 2)
    tokens = torch.randint(0, vocab, (batch, seq + 1), generator=g)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def lm_loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


# ------------------------------------------------------------------------------------------------
# Views, in-place ops on intermediates and a tied weight

class Quirky(nn.Module):
    """inputs (batch, tokens, d) -> logits (batch, classes), through views, in-place ops and a tied weight."""

    def __init__(self, tokens=8, d=32, classes=10):
        super().__init__()
        self.inp = nn.Linear(d, d)
        self.proj_a = nn.Linear(d, d)
        self.proj_b = nn.Linear(d, d)
        self.proj_b.weight = self.proj_a.weight          # one weight, two layers (own biases)
        self.mix = nn.Linear(tokens, tokens)             # mixes along the token axis
        self.up = nn.Linear(d // 2, d)
        self.head = nn.Linear(d, classes)

    def front(self, x):
        b, t, d = x.shape
        h = self.inp(x)
        h.relu_()                                        # in-place on an intermediate (saved by ReluBackward)
        s = self.proj_a(h)
        s.mul_(0.5)                                      # in-place scale; Linear saved h, not s
        s = s + h
        left, right = s[..., : d // 2], s[..., d // 2:]  # two slices of one storage
        g = left * torch.sigmoid(right)                  # saves the slice view `left`
        mixed = self.mix(g.transpose(1, 2))              # (b, d/2, t): Linear on a transposed view
        u = self.up(mixed.transpose(1, 2).reshape(b * t, d // 2)).view(b, t, d)
        u[:, 1:, :].add_(h[:, :-1, :])                   # in-place add through a view of u
        return u

    def back(self, u):
        z = self.proj_b(torch.tanh(u))                   # the tied weight's second use
        return self.head(z[:, ::2, :].mean(dim=1))       # strided slice

    def forward(self, x, checkpoint_front=False):
        u = checkpoint(self.front, x, use_reentrant=False) if checkpoint_front else self.front(x)
        return self.back(u)


def quirky(seed=0):
    """The Quirky model with random weights from `seed`."""
    torch.manual_seed(seed)
    return Quirky()


def quirky_batch(step, batch=4, tokens=8, d=32):
    """Deterministic (inputs batch x tokens x d, labels) for a step."""
    g = _generator(step, 3)
    return torch.randn(batch, tokens, d, generator=g), torch.randint(0, 10, (batch,), generator=g)


# ------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[int], nn.Module]                         # seed -> fresh model
    batch: Callable[[int], tuple]                             # step -> (inputs, targets)
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    optimizer: Callable[[nn.Module], torch.optim.Optimizer]
    checkpointed: Callable[[nn.Module, torch.Tensor], torch.Tensor]  # forward under torch.utils.checkpoint

    def batches(self, steps):
        return [self.batch(step) for step in range(steps)]


CASES = {
    "resnet18": Case("resnet18", lambda seed: resnet18_small(seed), resnet18_batch, classification_loss,
                     lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9), checkpointed_forward),
    "transformer": Case("transformer", lambda seed: transformer_stack(seed=seed), transformer_batch, lm_loss,
                        lambda m: torch.optim.Adam(m.parameters(), lr=1e-3), checkpointed_forward),
    "quirky": Case("quirky", lambda seed: quirky(seed), quirky_batch, classification_loss,
                   lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9),
                   lambda m, x: m(x, checkpoint_front=True)),
}


def train_steps(model, optimizer, batches, loss_fn, step_ctx=None, forward=None):
    """Trains one step per (inputs, targets): zero_grad(set_to_none) -> forward -> loss -> backward -> step.

    step_ctx: a factory of context managers entered around forward+backward of each step
    (e.g. torch.autograd.graph.save_on_cpu); forward(model, inputs): replaces model(inputs).
    Returns the detached losses.
    """
    losses = []
    for inputs, targets in batches:
        optimizer.zero_grad(set_to_none=True)
        ctx = step_ctx() if step_ctx is not None else _NoContext()
        with ctx:
            outputs = forward(model, inputs) if forward is not None else model(inputs)
            loss = loss_fn(outputs, targets)
            loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return losses


class _NoContext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def bitwise_differences(model_a, model_b, buffers=True):
    """Names of parameters, gradients (and buffers) that are not bitwise equal (torch.equal); [] if identical."""
    diffs = []
    params_a, params_b = dict(model_a.named_parameters()), dict(model_b.named_parameters())
    if params_a.keys() != params_b.keys():
        return [f"parameter names: {sorted(params_a.keys() ^ params_b.keys())}"]
    for name, a in params_a.items():
        b = params_b[name]
        if not torch.equal(a, b):
            diffs.append(name)
        if (a.grad is None) != (b.grad is None):
            diffs.append(f"{name}.grad (None on one side)")
        elif a.grad is not None and not torch.equal(a.grad, b.grad):
            diffs.append(f"{name}.grad")
    if buffers:
        buffers_a, buffers_b = dict(model_a.named_buffers()), dict(model_b.named_buffers())
        diffs += [f"buffer {n}" for n in buffers_a if n not in buffers_b or not torch.equal(buffers_a[n], buffers_b[n])]
    return diffs


def assert_bitwise_equal(model_a, model_b, buffers=True):
    """Fails naming the first differing tensors if two models' parameters, gradients (or buffers) differ."""
    diffs = bitwise_differences(model_a, model_b, buffers)
    assert not diffs, f"{len(diffs)} tensors differ bitwise, first: {diffs[:5]}"
