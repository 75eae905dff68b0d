"""Inputs on another device: a mask built on the CPU follows the inputs, and training follows the model.

No accelerator is needed: PyTorch's ``meta`` device stands in for one (tensors with shapes and
dtypes but no data), so a CPU tensor meeting a meta tensor fails exactly as it would on a GPU.
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_course.nn.attention import MultiHeadAttention, scaled_dot_product_attention
from transformer_course.nn.masks import causal_mask
from transformer_course.experiments.training import fit, model_device

OTHER = torch.device("meta")


@pytest.mark.parametrize("fused, need_weights", [(True, False), (False, False), (False, True)])
def test_multi_head_attention_takes_a_cpu_mask_for_inputs_on_another_device(fused, need_weights):
    attention = MultiHeadAttention(16, 4).to(OTHER)
    attention.fused = fused
    x = torch.empty(2, 5, 16, device=OTHER)  # (B, T, D)
    result = attention(x, x, x, mask=causal_mask(5), need_weights=need_weights)  # the mask stays on the CPU
    out = result[0] if need_weights else result
    assert out.device == OTHER and out.shape == (2, 5, 16)
    if need_weights:
        assert result[1].shape == (2, 4, 5, 5)


def test_scaled_dot_product_attention_takes_a_cpu_mask_for_inputs_on_another_device():
    q = torch.empty(2, 5, 8, device=OTHER)  # (B, T, Dh)
    out, weights = scaled_dot_product_attention(q, q, q, mask=causal_mask(5))
    assert out.device == OTHER and weights.shape == (2, 5, 5)


def test_a_bad_mask_is_still_refused_before_it_moves():
    """The fully-masked-row check reads the mask's values, so it runs at the door (the public
    function), on the CPU mask, before the mask follows the inputs; layers only read shapes."""
    q = torch.empty(1, 4, 3, 8, device=OTHER)
    with pytest.raises(ValueError, match="mask leaves at least one query with no key"):
        scaled_dot_product_attention(q, q, q, mask=torch.zeros(3, 3, dtype=torch.bool))
    attention = MultiHeadAttention(16, 4).to(OTHER)
    x = torch.empty(1, 3, 16, device=OTHER)
    with pytest.raises(ValueError, match="mask must broadcast"):
        attention(x, x, x, mask=torch.zeros(4, 4, dtype=torch.bool))


def test_fit_moves_every_batch_to_the_model_device():
    model = nn.Linear(3, 1).to(OTHER)
    assert model_device(model) == OTHER
    devices = []

    def loss_fn(module, batch):
        devices.extend(tensor.device for tensor in batch)
        module(batch[0])  # would raise on a device mismatch
        return torch.zeros((), requires_grad=True)  # a CPU loss, so that float(loss) works

    fit(model, lambda g: (torch.randn(4, 3, generator=g), torch.randn(4, 1, generator=g)), loss_fn,
        steps=2, clip_grad_norm=None)
    assert devices == [OTHER] * 4


def test_fit_on_the_cpu_is_unchanged():
    model = nn.Linear(3, 1)
    losses = fit(model, lambda g: (torch.randn(8, 3, generator=g), torch.randn(8, 1, generator=g)),
                 lambda m, batch: F.mse_loss(m(batch[0]), batch[1]), steps=3)
    assert len(losses) == 3 and model_device(model).type == "cpu"
