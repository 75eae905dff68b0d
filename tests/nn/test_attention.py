import math

import pytest
import torch
import torch.nn.functional as F

from transformer_course.nn.attention import MultiHeadAttention, scaled_dot_product_attention
from transformer_course.nn.interop import to_torch_multihead_attention
from transformer_course.nn.masks import causal_mask, dilated_mask, padding_mask, sliding_window_mask


def _qkv(gen, b=2, h=3, t=7, s=7, dh=8):
    q = torch.randn(b, h, t, dh, generator=gen, dtype=torch.float64)
    k = torch.randn(b, h, s, dh, generator=gen, dtype=torch.float64)
    v = torch.randn(b, h, s, dh + 1, generator=gen, dtype=torch.float64)
    return q, k, v


@pytest.mark.parametrize("make_mask", [
    lambda: None,
    lambda: causal_mask(7),
    lambda: sliding_window_mask(7, 2),
    lambda: sliding_window_mask(7, 3, causal=True),
    lambda: dilated_mask(7, 3),
    lambda: padding_mask([3, 7], 7),
])
def test_matches_pytorch_sdpa(gen, make_mask):
    q, k, v = _qkv(gen)
    mask = make_mask()
    out, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights.sum(-1)))
    if mask is not None:
        assert (weights.masked_select(~mask.expand_as(weights)) == 0).all()


def test_t_not_equal_s_and_single_query(gen):
    q, k, v = _qkv(gen, t=1, s=5)
    out, weights = scaled_dot_product_attention(q, k, v)
    assert out.shape == (2, 3, 1, 9) and weights.shape == (2, 3, 1, 5)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))


def test_bias_is_added_to_scores(gen):
    q, k, v = _qkv(gen)
    bias = torch.randn(3, 7, 7, generator=gen, dtype=torch.float64)
    out, _ = scaled_dot_product_attention(q, k, v, bias=bias)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=bias))


def test_gradcheck(gen):
    q, k, v = (x.requires_grad_() for x in _qkv(gen, b=1, h=2, t=3, s=4, dh=2))
    assert torch.autograd.gradcheck(lambda q, k, v: scaled_dot_product_attention(q, k, v)[0], (q, k, v))
    mask = torch.tensor([[1, 0, 1, 1], [1, 1, 0, 0], [0, 0, 0, 1]], dtype=torch.bool)
    assert torch.autograd.gradcheck(
        lambda q, k, v: scaled_dot_product_attention(q, k, v, mask=mask)[0], (q, k, v))


@pytest.mark.parametrize("fused", [True, False])
def test_mha_matches_nn_multihead_attention(gen, fused):
    torch.manual_seed(0)
    ours = MultiHeadAttention(16, 4).double()
    ours.fused = fused
    ref = to_torch_multihead_attention(ours)
    x = torch.randn(2, 6, 16, generator=gen, dtype=torch.float64)
    memory = torch.randn(2, 9, 16, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(ours(x, x, x), ref(x, x, x, need_weights=False)[0])
    torch.testing.assert_close(ours(x, memory, memory), ref(x, memory, memory, need_weights=False)[0])
    # nn.MultiheadAttention's bool mask has the opposite polarity: True = blocked.
    mask = causal_mask(6)
    torch.testing.assert_close(ours(x, x, x, mask=mask), ref(x, x, x, attn_mask=~mask, need_weights=False)[0])


def test_mha_weights_per_head_match_torch(gen):
    torch.manual_seed(1)
    ours = MultiHeadAttention(12, 3).double()
    ref = to_torch_multihead_attention(ours)
    x = torch.randn(2, 5, 12, generator=gen, dtype=torch.float64)
    out, weights = ours(x, x, x, need_weights=True)
    ref_out, ref_weights = ref(x, x, x, need_weights=True, average_attn_weights=False)
    assert weights.shape == (2, 3, 5, 5)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(weights, ref_weights)


def test_fused_and_hand_written_paths_agree(gen):
    torch.manual_seed(2)
    mha = MultiHeadAttention(32, 8).double()
    x = torch.randn(3, 10, 32, generator=gen, dtype=torch.float64)
    mask = padding_mask([4, 10, 7], 10)
    fused = mha(x, x, x, mask=mask)
    mha.fused = False
    torch.testing.assert_close(fused, mha(x, x, x, mask=mask))


def test_permutation_equivariance_without_positions(gen):
    torch.manual_seed(3)
    mha = MultiHeadAttention(16, 2).double()
    x = torch.randn(1, 8, 16, generator=gen, dtype=torch.float64)
    perm = torch.randperm(8, generator=gen)
    torch.testing.assert_close(mha(x, x, x)[:, perm], mha(x[:, perm], x[:, perm], x[:, perm]))


def test_heads_and_one_wide_head_have_equal_parameters():
    counts = {h: sum(p.numel() for p in MultiHeadAttention(64, h).parameters()) for h in (1, 2, 8, 64)}
    assert len(set(counts.values())) == 1


@pytest.mark.parametrize("num_heads, num_kv_heads", [(4, 4), (4, 2), (4, 1), (6, 3)])
def test_grouped_query_attention_equals_torch_sdpa_with_enable_gqa(num_heads, num_kv_heads):
    torch.manual_seed(0)
    d_model = 4 * num_heads
    module = MultiHeadAttention(d_model, num_heads, num_kv_heads=num_kv_heads).double()
    x = torch.randn(2, 5, d_model, dtype=torch.float64)
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    q = module.split_heads(module.q_proj(x))  # (B, H, T, Dh)
    k = module.split_heads(module.k_proj(x))  # (B, G, S, Dh)
    v = module.split_heads(module.v_proj(x))
    assert k.shape == (2, num_kv_heads, 5, d_model // num_heads)
    reference = module.out_proj(module.merge_heads(
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)))
    for fused in (True, False):
        module.fused = fused
        torch.testing.assert_close(module(x, x, x, mask=mask), reference, rtol=0, atol=1e-12)
    out, weights = module(x, x, x, mask=mask, need_weights=True)
    assert weights.shape == (2, num_heads, 5, 5)
    group = num_heads // num_kv_heads
    for i in range(num_heads):  # query heads of one group attend with the same keys, their own queries
        expected = (q[:, i] @ k[:, i // group].transpose(-2, -1) / math.sqrt(module.d_head)).masked_fill(
            ~mask, float("-inf")).softmax(-1)
        torch.testing.assert_close(weights[:, i], expected, rtol=0, atol=1e-12)


def test_grouped_query_attention_shrinks_the_key_value_projections_and_the_cache():
    from transformer_course.nn.kv_cache import AttentionCache

    mqa = MultiHeadAttention(32, 8, num_kv_heads=1)
    assert mqa.k_proj.weight.shape == (4, 32) and mqa.v_proj.weight.shape == (4, 32)
    assert MultiHeadAttention(32, 8).k_proj.weight.shape == (32, 32)  # the default is plain multi-head
    cache = AttentionCache()
    x = torch.randn(1, 3, 32)
    mqa(x, x, x, cache=cache)
    assert cache.keys.shape == (1, 1, 3, 4)  # one key/value head cached instead of eight


def test_grouped_query_attention_validation():
    with pytest.raises(ValueError, match="num_kv_heads must divide num_heads=4"):
        MultiHeadAttention(16, 4, num_kv_heads=3)
    with pytest.raises(ValueError, match="num_kv_heads must be >= 1"):
        MultiHeadAttention(16, 4, num_kv_heads=0)
