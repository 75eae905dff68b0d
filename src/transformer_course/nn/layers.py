"""Encoder and decoder layers: attention and FFN sub-layers, each wrapped in residual + LayerNorm.

Post-LN (the paper):  x = norm(x + sublayer(x))
Pre-LN (modern LLMs): x = x + sublayer(norm(x))

Shape legend: B batch, T target length, S source length, D = d_model.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from transformer_course._validation import check_probability, check_tensor
from .attention import MultiHeadAttention
from .feedforward import FeedForward
from .kv_cache import LayerKVCache
from .normalization import LayerNorm


class _Residual(nn.Module):
    """Shared constructor checks and the one line that differs between Post-LN and Pre-LN."""

    def __init__(self, d_model: int, dropout: float, norm_first: bool) -> None:
        super().__init__()
        check_probability("dropout", dropout)
        if not isinstance(norm_first, bool):
            raise TypeError(f"norm_first must be a bool, got {type(norm_first).__name__}")
        self.d_model = d_model
        self.norm_first = norm_first

    def sublayer(self, x: torch.Tensor, norm: LayerNorm, dropout: nn.Dropout,
                 f: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """Post-LN: norm(x + f(x)); Pre-LN: x + f(norm(x)). Dropout on f's output in both."""
        if self.norm_first:
            return x + dropout(f(norm(x)))  # (B, T, D)
        return norm(x + dropout(f(x)))  # (B, T, D)

    def _check_x(self, name: str, x: object) -> None:
        check_tensor(name, x, ndim=3, floating=True)
        if x.shape[-1] != self.d_model:
            raise ValueError(f"{name} must have last dimension d_model={self.d_model}, got shape {tuple(x.shape)}")


class EncoderLayer(_Residual):
    """x -> sublayer(self-attention) -> sublayer(FFN): two sub-layers, no mask by default.

    Args:
        d_model: width D.
        num_heads: heads H of the self-attention.
        d_ff: hidden width of the FFN.
        dropout: dropout on attention weights, FFN hidden units and each sub-layer output.
        norm_first: False for Post-LN (the paper), True for Pre-LN.
        activation: FFN activation, "relu", "gelu" or "swiglu".

    Shape:
        x (B, S, D), mask broadcastable to (B, H, S, S) -> (B, S, D).

    Vaswani et al., 2017, section 3.1.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0,
                 norm_first: bool = False, activation: str = "relu") -> None:
        super().__init__(d_model, dropout, norm_first)
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.feed_forward = FeedForward(d_model, d_ff, activation=activation, dropout=dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        self._check_x("x", x)
        x = self.sublayer(x, self.norm1, self.dropout1, lambda h: self.self_attn(h, h, h, mask=mask))  # (B, S, D)
        return self.sublayer(x, self.norm2, self.dropout2, self.feed_forward)  # (B, S, D)


class DecoderLayer(_Residual):
    """x -> sublayer(masked self-attention) -> sublayer(cross-attention to memory) -> sublayer(FFN).

    Args: as ``EncoderLayer``.

    Shape:
        x (B, T, D), memory (B, S, D), self_mask broadcastable to (B, H, T, T) (pass
        ``causal_mask(T)`` for generation), memory_mask broadcastable to (B, H, T, S) -> (B, T, D).

    Vaswani et al., 2017, section 3.1.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0,
                 norm_first: bool = False, activation: str = "relu") -> None:
        super().__init__(d_model, dropout, norm_first)
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.feed_forward = FeedForward(d_model, d_ff, activation=activation, dropout=dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.norm3 = LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, self_mask: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None, cache: LayerKVCache | None = None) -> torch.Tensor:
        """With a ``cache``, ``x`` holds only the new positions and self_mask is (T_new, T_cached + T_new)."""
        self._check_x("x", x)
        self._check_x("memory", memory)
        if cache is not None and not isinstance(cache, LayerKVCache):
            raise TypeError(f"cache must be a LayerKVCache, got {type(cache).__name__}")
        self_cache = cache.self_attn if cache is not None else None
        cross_cache = cache.cross_attn if cache is not None else None
        x = self.sublayer(x, self.norm1, self.dropout1,
                          lambda h: self.self_attn(h, h, h, mask=self_mask, cache=self_cache))  # (B, T, D)
        x = self.sublayer(x, self.norm2, self.dropout2,
                          lambda h: self.cross_attn(h, memory, memory, mask=memory_mask,
                                                    cache=cross_cache))  # (B, T, D)
        return self.sublayer(x, self.norm3, self.dropout3, self.feed_forward)  # (B, T, D)
