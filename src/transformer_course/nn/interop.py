"""Interop with PyTorch's own modules, the tests' independent reference: our weights in ``torch.nn``'s layout."""

from __future__ import annotations

import torch
from torch import nn

from transformer_course._validation import check_instance
from .attention import MultiHeadAttention


def to_torch_multihead_attention(module: MultiHeadAttention) -> nn.MultiheadAttention:
    """An ``nn.MultiheadAttention`` (batch_first) holding the same weights as ``module``.

    PyTorch stacks W^Q, W^K, W^V into one ``in_proj_weight`` of shape (3D, D). Remember that its
    bool ``attn_mask`` means True = *blocked*, the opposite of ours: pass ``~mask``.
    """
    check_instance("module", module, MultiHeadAttention)
    if module.num_kv_heads != module.num_heads:
        raise ValueError(f"module must have num_kv_heads == num_heads (nn.MultiheadAttention has no grouped "
                         f"key/value heads), got {module.num_kv_heads} and {module.num_heads}")
    has_bias = module.q_proj.bias is not None
    weight = module.q_proj.weight
    ref = nn.MultiheadAttention(module.d_model, module.num_heads, bias=has_bias, batch_first=True,
                                device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([module.q_proj.weight, module.k_proj.weight, module.v_proj.weight]))
        ref.out_proj.weight.copy_(module.out_proj.weight)
        if has_bias:
            ref.in_proj_bias.copy_(torch.cat([module.q_proj.bias, module.k_proj.bias, module.v_proj.bias]))
            ref.out_proj.bias.copy_(module.out_proj.bias)
    return ref.eval()
