"""nn.interop: our weights in PyTorch's own modules, the reference every attention test compares with."""

import pytest
import torch

from transformer_course.nn.attention import MultiHeadAttention
from transformer_course.nn.interop import to_torch_multihead_attention
from transformer_course.nn.masks import causal_mask


@pytest.mark.parametrize("bias", [True, False])
def test_torch_copy_matches(gen, bias):
    torch.manual_seed(0)
    module = MultiHeadAttention(8, 2, bias=bias).double()
    reference = to_torch_multihead_attention(module)
    x = torch.randn(2, 4, 8, generator=gen, dtype=torch.float64)
    mask = causal_mask(4)
    out, weights = module(x, x, x, mask=mask, need_weights=True)
    ref_out, ref_weights = reference(x, x, x, attn_mask=~mask, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(weights, ref_weights)


def test_torch_copy_is_refused_for_other_modules():
    with pytest.raises(TypeError, match="module must be a MultiHeadAttention"):
        to_torch_multihead_attention(torch.nn.Linear(2, 2))


def test_torch_copy_is_refused_for_grouped_query_attention():
    with pytest.raises(ValueError, match="num_kv_heads == num_heads"):
        to_torch_multihead_attention(MultiHeadAttention(16, 4, num_kv_heads=2))
