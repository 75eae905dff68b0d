"""QK-norm in MultiHeadAttention and DeepNorm's layer, constants and initialization."""

import math

import pytest
import torch

from transformer_course.experiments.gradient_flow import init_xavier_
from transformer_course.nn.attention import MultiHeadAttention, NormalizedProjection
from transformer_course.nn.kv_cache import AttentionCache
from transformer_course.nn.layers import DeepNormEncoderLayer, EncoderLayer, deepnorm_constants, deepnorm_init_
from transformer_course.nn.masks import causal_mask
from transformer_course.nn.model import Encoder


def _inputs(seed=0, b=2, t=5, d=16):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, t, d, generator=g, dtype=torch.float64)


def test_qk_norm_off_by_default_and_state_dict_unchanged():
    torch.manual_seed(0)
    plain = MultiHeadAttention(16, 4)
    assert plain.qk_norm is None and type(plain.q_proj) is torch.nn.Linear
    torch.manual_seed(0)
    normed = MultiHeadAttention(16, 4, qk_norm="layernorm")
    assert isinstance(normed.q_proj, NormalizedProjection) and isinstance(normed.q_proj, torch.nn.Linear)
    # Same draws for the shared weights; the norms add gamma and beta of width Dh for queries and keys.
    extra = set(normed.state_dict()) - set(plain.state_dict())
    assert extra == {"q_proj.norm.weight", "q_proj.norm.bias", "k_proj.norm.weight", "k_proj.norm.bias"}
    for name, value in plain.state_dict().items():
        assert torch.equal(value, normed.state_dict()[name])
    assert normed.q_proj.norm.weight.shape == (4,)
    assert set(MultiHeadAttention(16, 4, qk_norm="rmsnorm").state_dict()) - set(plain.state_dict()) == {
        "q_proj.norm.weight", "k_proj.norm.weight"}


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_qk_norm_normalizes_every_head_and_matches_forward(kind):
    torch.manual_seed(1)
    mha = MultiHeadAttention(16, 4, qk_norm=kind).double()
    x = _inputs(1)
    q = mha.split_heads(mha.q_proj(x))  # (B, H, T, Dh)
    if kind == "layernorm":
        assert torch.allclose(q.mean(dim=-1), torch.zeros(()).double(), atol=1e-12)
    assert torch.allclose(q.pow(2).mean(dim=-1), torch.ones(()).double(), atol=1e-3)  # unit scale per head (up to eps)
    # the hand-written path, the fused path and attention_logits agree
    out_fused = mha(x, x, x, mask=causal_mask(5))
    mha.fused = False
    out, weights = mha(x, x, x, mask=causal_mask(5), need_weights=True)
    assert torch.allclose(out, out_fused, atol=1e-12)
    logits = mha.attention_logits(x, x).masked_fill(~causal_mask(5), float("-inf"))
    assert torch.allclose(logits.softmax(dim=-1), weights, atol=1e-12)


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_qk_norm_bounds_the_logits_however_large_the_weights(kind):
    torch.manual_seed(2)
    plain, normed = MultiHeadAttention(32, 2).double(), MultiHeadAttention(32, 2, qk_norm=kind).double()
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for mha in (plain, normed):
            for proj in (mha.q_proj, mha.k_proj):
                proj.weight.mul_(100.0)  # what attention-logit growth does to the projections
        gains = [torch.randn(16, generator=g, dtype=torch.float64) for _ in range(2)]
        normed.q_proj.norm.weight.copy_(gains[0])
        normed.k_proj.norm.weight.copy_(gains[1])
    x = 3 * _inputs(2, t=9, d=32)
    d_head = 16
    bound = math.sqrt(d_head) * float((gains[0] * gains[1]).abs().max())  # sqrt(Dh) * max |gamma_q gamma_k|
    with torch.no_grad():
        largest = float(normed.attention_logits(x, x).abs().max())
        unbounded = float(plain.attention_logits(x, x).abs().max())
    assert largest <= bound * (1 + 1e-9)
    assert largest > 0.2 * bound  # not vacuous
    assert unbounded > 50 * bound  # without QK-norm: no such bound


def test_qk_norm_with_grouped_heads_and_kv_cache():
    torch.manual_seed(3)
    mha = MultiHeadAttention(24, 6, num_kv_heads=2, qk_norm="rmsnorm").double().eval()
    x = _inputs(3, t=6, d=24)
    full = mha(x, x, x, mask=causal_mask(6))
    cache, steps = AttentionCache(), []
    for i in range(6):
        steps.append(mha(x[:, i:i + 1], x[:, i:i + 1], x[:, i:i + 1], mask=causal_mask(1, i + 1), cache=cache))
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-12)  # cached keys are normalized once
    assert mha.attention_logits(x, x).shape == (2, 6, 6, 6)


def test_qk_norm_validation():
    with pytest.raises(ValueError, match="qk_norm must be one of"):
        MultiHeadAttention(16, 4, qk_norm="l2")
    with pytest.raises(ValueError, match="out_features must be a multiple of d_head"):
        NormalizedProjection(8, 10, 4, "layernorm")
    with pytest.raises(ValueError, match="kind must be one of"):
        NormalizedProjection(8, 8, 4, "batchnorm")
    layer = EncoderLayer(16, 4, 32, qk_norm="layernorm")
    assert layer.self_attn.qk_norm == "layernorm"


def test_deepnorm_constants():
    for n in (1, 2, 6, 18, 1000):
        alpha, beta = deepnorm_constants(n)
        assert alpha == pytest.approx((2 * n) ** 0.25) and beta == pytest.approx((8 * n) ** -0.25)
    assert deepnorm_constants(2) == pytest.approx((math.sqrt(2), 0.5))  # 4^(1/4), 16^(-1/4)
    assert deepnorm_constants(8) == pytest.approx((2.0, 0.5 ** 1.5))  # 16^(1/4) = 2, 64^(-1/4) = 2^(-1.5)
    with pytest.raises(ValueError, match="num_layers must be >= 1"):
        deepnorm_constants(0)


def test_deepnorm_with_alpha_one_and_beta_one_is_post_ln_exactly():
    x = _inputs(4).float()
    torch.manual_seed(4)
    post = init_xavier_(Encoder(3, 16, 4, 32))
    torch.manual_seed(4)
    deep = deepnorm_init_(init_xavier_(Encoder(3, 16, 4, 32, deepnorm_alpha=1.0)), 1.0)
    assert all(isinstance(layer, DeepNormEncoderLayer) for layer in deep.layers)
    assert torch.equal(deep(x), post(x))
    torch.manual_seed(4)
    other = Encoder(3, 16, 4, 32, deepnorm_alpha=1.5)
    other.load_state_dict(post.state_dict())
    assert not torch.allclose(other(x), post(x), atol=1e-3)  # alpha acts


def test_deepnorm_layer_is_ln_of_alpha_x_plus_sublayer():
    torch.manual_seed(5)
    layer = DeepNormEncoderLayer(16, 4, 32, alpha=1.7).double()
    x = _inputs(5)
    h = layer.norm1(1.7 * x + layer.self_attn(x, x, x))
    assert torch.allclose(layer(x), layer.norm2(1.7 * h + layer.feed_forward(h)), atol=1e-12)
    with pytest.raises(ValueError, match="alpha must be"):
        DeepNormEncoderLayer(16, 4, 32, alpha=0.0)
    with pytest.raises(ValueError, match="deepnorm_alpha needs the Post-LN placement"):
        Encoder(2, 16, 4, 32, norm_first=True, deepnorm_alpha=1.2)


def test_deepnorm_init_scales_ffn_value_and_output_only():
    torch.manual_seed(6)
    encoder = init_xavier_(Encoder(2, 16, 4, 32, qk_norm="layernorm"))
    before = {name: p.detach().clone() for name, p in encoder.named_parameters()}
    deepnorm_init_(encoder, 0.5)
    scaled = {"self_attn.v_proj.weight", "self_attn.out_proj.weight", "feed_forward.linear1.weight",
              "feed_forward.linear2.weight"}
    for name, p in encoder.named_parameters():
        expected = 0.5 * before[name] if name.split(".", 2)[2] in scaled else before[name]
        assert torch.equal(p.detach(), expected), name
    with pytest.raises(ValueError, match="beta must be"):
        deepnorm_init_(encoder, -1.0)
    with pytest.raises(TypeError, match="module must be"):
        deepnorm_init_("encoder", 0.5)
