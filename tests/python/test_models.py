"""The test models train deterministically, and PyTorch's own memory savers reproduce plain training
bitwise: the reference behaviour ferry.torch must match too."""

import sys

import pytest
import torch

import models

torch.set_num_threads(2)
STEPS = 3
CASE_NAMES = sorted(models.CASES)


def trained(case, seed=0, steps=STEPS, **train_kwargs):
    """A fresh model of `case` after `steps` training steps, and its losses."""
    model = case.build(seed)
    losses = models.train_steps(model, case.optimizer(model), case.batches(steps), case.loss_fn, **train_kwargs)
    return model, losses


@pytest.fixture(scope="module")
def plain_runs():
    return {name: trained(models.CASES[name]) for name in CASE_NAMES}


@pytest.mark.parametrize("name", CASE_NAMES)
def test_two_fresh_copies_train_bitwise_equal(name, plain_runs):
    model, losses = plain_runs[name]
    again, losses_again = trained(models.CASES[name])
    models.assert_bitwise_equal(model, again)
    assert all(torch.equal(a, b) for a, b in zip(losses, losses_again))
    assert all(torch.isfinite(loss) for loss in losses)
    assert all(p.grad is not None for p in model.parameters())  # every parameter is trained


@pytest.mark.parametrize("name", CASE_NAMES)
def test_the_comparison_sees_a_different_run(name, plain_runs):
    model, _ = plain_runs[name]
    other_seed, _ = trained(models.CASES[name], seed=1)
    assert models.bitwise_differences(model, other_seed)
    one_step_less, _ = trained(models.CASES[name], steps=STEPS - 1)
    diffs = models.bitwise_differences(model, one_step_less)
    assert len(diffs) >= len(list(model.parameters()))  # every weight moved in the last step


def test_the_comparison_sees_one_changed_gradient_element(plain_runs):
    model, _ = plain_runs["quirky"]
    copy = models.quirky()
    copy.load_state_dict(model.state_dict())
    for p, q in zip(model.parameters(), copy.parameters()):
        q.grad = p.grad.clone()
    assert models.bitwise_differences(model, copy) == []
    copy.head.bias.grad[3] = torch.nextafter(copy.head.bias.grad[3], torch.tensor(1.0))
    assert models.bitwise_differences(model, copy) == ["head.bias.grad"]


def _one_ulp_up(tensor):
    """A copy of a saved tensor with its first element one ulp larger (integer tensors unchanged)."""
    if not tensor.is_floating_point() or tensor.numel() == 0:
        return tensor
    changed = tensor.clone()
    first = (0,) * changed.dim()
    changed[first] = torch.nextafter(changed[first], changed[first] + 1)
    return changed


@pytest.mark.parametrize("name", CASE_NAMES)
def test_a_saved_tensor_hook_that_changes_one_ulp_is_caught(name, plain_runs):
    # What a faulty swap or recompute would do: the comparison must see it in the weights.
    model, _ = plain_runs[name]
    hooks = lambda: torch.autograd.graph.saved_tensors_hooks(_one_ulp_up, lambda packed: packed)
    corrupted, _ = trained(models.CASES[name], step_ctx=hooks)
    diffs = models.bitwise_differences(model, corrupted, buffers=False)
    assert sum(not d.endswith(".grad") for d in diffs) >= len(list(model.parameters())) // 2


@pytest.mark.parametrize("name", CASE_NAMES)
def test_save_on_cpu_matches_plain_bitwise(name, plain_runs):
    model, losses = plain_runs[name]
    saved, saved_losses = trained(models.CASES[name], step_ctx=torch.autograd.graph.save_on_cpu)
    models.assert_bitwise_equal(model, saved)
    assert all(torch.equal(a, b) for a, b in zip(losses, saved_losses))


@pytest.mark.parametrize("name", CASE_NAMES)
def test_checkpoint_matches_plain_weights_and_grads_bitwise(name, plain_runs):
    model, losses = plain_runs[name]
    case = models.CASES[name]
    recomputed, recomputed_losses = trained(case, forward=case.checkpointed)
    models.assert_bitwise_equal(model, recomputed, buffers=False)
    assert all(torch.equal(a, b) for a, b in zip(losses, recomputed_losses))


def test_checkpoint_updates_batch_norm_running_stats_again_when_it_recomputes(plain_runs):
    # torch.utils.checkpoint reruns the forward of checkpointed segments, BatchNorm's running-stat
    # update included: a reference quirk that a recompute which matches plain training must not copy.
    model, _ = plain_runs["resnet18"]
    case = models.CASES["resnet18"]
    recomputed, _ = trained(case, forward=case.checkpointed)
    assert int(model.layer1[0].bn1.num_batches_tracked) == STEPS
    assert int(recomputed.layer1[0].bn1.num_batches_tracked) == 2 * STEPS   # checkpointed segment
    assert int(recomputed.layer4[0].bn1.num_batches_tracked) == STEPS       # plain segment
    assert models.bitwise_differences(model, recomputed) != []


def test_quirky_ties_one_weight_between_two_layers():
    model = models.quirky()
    assert model.proj_a.weight is model.proj_b.weight
    names = [name for name, _ in model.named_parameters()]
    assert "proj_a.weight" in names and "proj_b.weight" not in names  # a tied weight is one parameter


def test_transformer_ties_its_embedding_and_head_and_is_causal():
    model = models.transformer_stack()
    ids, _ = models.transformer_batch(0)
    with torch.no_grad():
        logits = model(ids)
        changed = ids.clone()
        changed[:, -1] = (changed[:, -1] + 1) % 100
        logits_changed = model(changed)
    assert logits.shape == (4, 32, 100)
    assert torch.equal(logits[:, :-1], logits_changed[:, :-1])  # the last token cannot change earlier ones
    assert not torch.equal(logits[:, -1], logits_changed[:, -1])


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
