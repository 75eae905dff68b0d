"""RMSNorm against torch.nn.RMSNorm (float64, copied weights) and its relation to LayerNorm."""

import pytest
import torch
from torch import nn

from transformer_course.nn.normalization import LayerNorm, RMSNorm


@pytest.mark.parametrize("x_shape, normalized_shape", [
    ((7,), 7),  # one token
    ((2, 5, 16), 16),  # (B, T, D)
    ((3, 1, 8), (8,)),  # T = 1, tuple form
    ((2, 4, 6), (4, 6)),  # the mean square over two trailing dimensions
    ((1, 1), 1),  # one feature: RMSNorm(x) = sign(x) * gamma
])
@pytest.mark.parametrize("eps", [None, 1e-5])
def test_matches_torch_rms_norm_with_copied_weight(gen, x_shape, normalized_shape, eps):
    x = 3.0 * torch.randn(x_shape, generator=gen, dtype=torch.float64) + 1.0  # not centred: the mean matters
    ours, reference = RMSNorm(normalized_shape, eps=eps).double(), nn.RMSNorm(normalized_shape, eps=eps).double()
    with torch.no_grad():
        ours.weight.copy_(torch.randn(ours.weight.shape, generator=gen, dtype=torch.float64))
        reference.weight.copy_(ours.weight)
    torch.testing.assert_close(ours(x), reference(x), rtol=0, atol=1e-12)


@torch.no_grad()
def test_default_eps_is_the_inputs_machine_epsilon_like_torch():
    # With eps=None both use torch.finfo(x.dtype).eps (1.2e-7 in float32). A small constant token c
    # gives c / sqrt(c^2 + eps), which tells eps = finfo.eps (about 0.993 for c = 3e-3) from
    # eps = 1e-5, LayerNorm's habit (about 0.69).
    for dtype in (torch.float32, torch.float64):
        x = torch.full((2, 4), 3e-3, dtype=dtype)
        ours, reference = RMSNorm(4).to(dtype), nn.RMSNorm(4).to(dtype)
        torch.testing.assert_close(ours(x), reference(x))
        assert float(ours(x)[0, 0]) > 0.99
    assert RMSNorm(4).eps is None and float(RMSNorm(4, eps=1e-5)(torch.full((1, 4), 3e-3))[0, 0]) < 0.8


def test_without_affine_and_unit_rms():
    x = torch.randn(4, 10, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 5
    norm = RMSNorm(10, elementwise_affine=False)
    assert norm.weight is None and len(list(norm.parameters())) == 0
    y = norm(x)  # (4, 10)
    torch.testing.assert_close(y.pow(2).mean(dim=-1), torch.ones(4, dtype=torch.float64))
    torch.testing.assert_close(y, nn.RMSNorm(10, elementwise_affine=False).double()(x), rtol=0, atol=1e-12)


def test_equals_layer_norm_without_bias_on_centred_tokens(gen):
    x = torch.randn(3, 5, 12, generator=gen, dtype=torch.float64)
    centred = x - x.mean(dim=-1, keepdim=True)  # (B, T, D) zero mean per token
    layer_norm, rms_norm = LayerNorm(12, eps=1e-5).double(), RMSNorm(12, eps=1e-5).double()
    torch.testing.assert_close(rms_norm(centred), layer_norm(centred))
    assert not torch.allclose(rms_norm(x + 2.0), layer_norm(x + 2.0), atol=1e-2)  # a mean makes them differ


def test_gradcheck():
    x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    norm = RMSNorm(4).double()
    assert torch.autograd.gradcheck(norm, (x,))


def test_validation():
    with pytest.raises(TypeError, match="normalized_shape must be an int"):
        RMSNorm(4.0)
    with pytest.raises(ValueError, match="normalized_shape must be an int or a non-empty tuple"):
        RMSNorm(())
    with pytest.raises(ValueError, match="normalized_shape must be >= 1"):
        RMSNorm((3, 0))
    with pytest.raises(TypeError, match="normalized_shape must be an int"):
        RMSNorm(True)
    with pytest.raises(ValueError, match="eps must be > 0"):
        RMSNorm(4, eps=0.0)
    with pytest.raises(TypeError, match="eps must be a positive float"):
        RMSNorm(4, eps="small")
    with pytest.raises(TypeError, match="elementwise_affine must be a bool"):
        RMSNorm(4, elementwise_affine=1)
    with pytest.raises(ValueError, match=r"x must end with normalized_shape=\(4,\)"):
        RMSNorm(4)(torch.ones(2, 5))
    with pytest.raises(ValueError, match="x must end with normalized_shape"):
        RMSNorm((2, 4))(torch.ones(4))
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        RMSNorm(4)(torch.ones(2, 4, dtype=torch.long))
