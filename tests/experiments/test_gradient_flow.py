import math

import pytest
import torch
from torch import nn

from transformer_course.experiments.gradient_flow import (SortingEncoder, gradient_norm_profile,
                                              init_xavier_, layer_gradient_norms, sorting_batch)
from transformer_course.nn.model import Encoder


def test_init_xavier_keeps_layer_norm_and_zeroes_biases():
    torch.manual_seed(0)
    encoder = init_xavier_(Encoder(2, 16, 2, 32))
    layer = encoder.layers[0]
    assert torch.equal(layer.norm1.weight, torch.ones(16)) and torch.equal(layer.norm1.bias, torch.zeros(16))
    assert torch.equal(layer.feed_forward.linear1.bias, torch.zeros(32))
    bound = math.sqrt(6 / (16 + 32))
    assert layer.feed_forward.linear1.weight.abs().max() <= bound
    assert layer.feed_forward.linear1.weight.abs().max() > 0.8 * bound
    with pytest.raises(TypeError, match="module must be a torch.nn.Module"):
        init_xavier_("encoder")


def test_layer_gradient_norms_shape_and_determinism():
    kwargs = dict(d_model=16, num_heads=2, d_ff=32, batch_size=2, seq_len=4)
    a = layer_gradient_norms(3, False, seed=1, **kwargs)
    b = layer_gradient_norms(3, False, seed=1, **kwargs)
    assert a.shape == (3,) and a.dtype == torch.float64 and bool((a > 0).all())
    assert torch.equal(a, b)
    assert not torch.equal(a, layer_gradient_norms(3, True, seed=1, **kwargs))
    attention = layer_gradient_norms(3, True, parameter="self_attn.q_proj.weight", **kwargs)
    assert attention.shape == (3,)


@pytest.mark.slow
def test_pre_ln_last_layer_gradient_is_smaller_at_init():
    # Xiong et al. (2020): with Xavier init the layers near the output get large gradients in
    # Post-LN and small ones in Pre-LN. Averaged over two seeds so the test is not about luck.
    profile = gradient_norm_profile(12, seeds=(0, 1), d_model=32, num_heads=4, d_ff=64)
    assert list(profile.columns) == ["Post-LN", "Pre-LN"] and list(profile.index) == list(range(1, 13))
    assert profile["Post-LN"].iloc[-1] > 1.5 * profile["Pre-LN"].iloc[-1]
    assert profile["Pre-LN"].iloc[-1] < profile["Pre-LN"].iloc[0]


def test_validation():
    with pytest.raises(ValueError, match="init must be one of"):
        layer_gradient_norms(2, False, init="he")
    with pytest.raises(ValueError, match="parameter must name a parameter"):
        layer_gradient_norms(2, False, parameter="nope.weight")
    with pytest.raises(TypeError, match="norm_first must be a bool"):
        layer_gradient_norms(2, 1)
    with pytest.raises(ValueError, match="num_layers must be >= 1"):
        layer_gradient_norms(0, False)
    with pytest.raises(ValueError, match="seeds must hold at least one seed"):
        gradient_norm_profile(2, seeds=())


def test_sorting_task_and_model():
    tokens, targets = sorting_batch(torch.Generator().manual_seed(0), batch_size=3, seq_len=5, vocab_size=7)
    assert tokens.shape == targets.shape == (3, 5)
    assert torch.equal(targets, tokens.sort(dim=1).values)
    model = SortingEncoder(7, 1, 16, 2, 32, norm_first=True)
    assert model(tokens).shape == (3, 5, 7)
    assert isinstance(SortingEncoder(6, 1, 16, 2, 32, False).head, nn.Linear)
