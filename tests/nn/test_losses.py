"""label_smoothed_cross_entropy against PyTorch's F.cross_entropy(label_smoothing=...)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from transformer_course.nn.losses import label_smoothed_cross_entropy


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.3])
def test_equals_pytorch_cross_entropy_with_label_smoothing(epsilon):
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(20, 13, generator=generator, dtype=torch.float64)
    target = torch.randint(0, 13, (20,), generator=generator)
    target[::4] = 0  # the ignored id
    ours = label_smoothed_cross_entropy(logits, target, epsilon, ignore_index=0)
    reference = F.cross_entropy(logits, target, label_smoothing=epsilon, ignore_index=0)
    assert torch.allclose(ours, reference, rtol=0, atol=1e-12)


def test_gradient_equals_pytorch():
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(6, 5, generator=generator, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 5, (6,), generator=generator)
    (ours,) = torch.autograd.grad(label_smoothed_cross_entropy(logits, target, 0.1), logits)
    (reference,) = torch.autograd.grad(F.cross_entropy(logits, target, label_smoothing=0.1), logits)
    assert torch.allclose(ours, reference, rtol=0, atol=1e-12)


def test_smoothing_differs_from_plain_cross_entropy_and_its_minimum_is_the_smoothed_target():
    """The loss is minimized by p = (1 - eps) on the label + eps / V everywhere, not by a one-hot p."""
    epsilon, vocab = 0.1, 4
    target = torch.tensor([2])
    smoothed = torch.full((1, vocab), epsilon / vocab)
    smoothed[0, 2] += 1 - epsilon
    at_smoothed = label_smoothed_cross_entropy(smoothed.log(), target, epsilon)
    confident = torch.tensor([[-20.0, -20.0, 0.0, -20.0]])
    assert label_smoothed_cross_entropy(confident, target, epsilon) > at_smoothed
    assert label_smoothed_cross_entropy(confident, target, 0.0) < 1e-6 < label_smoothed_cross_entropy(confident, target, epsilon)


@pytest.mark.parametrize("call, error, match", [
    (lambda: label_smoothed_cross_entropy(torch.zeros(3), torch.zeros(3, dtype=torch.long)), ValueError, "logits"),
    (lambda: label_smoothed_cross_entropy(torch.zeros(3, 2), torch.zeros(4, dtype=torch.long)), ValueError, "target"),
    (lambda: label_smoothed_cross_entropy(torch.zeros(3, 2), torch.zeros(3, dtype=torch.long), 1.5), ValueError, "epsilon"),
    (lambda: label_smoothed_cross_entropy([[0.0]], torch.zeros(1, dtype=torch.long)), TypeError, "logits"),
])
def test_bad_arguments(call, error, match):
    with pytest.raises(error, match=match):
        call()
