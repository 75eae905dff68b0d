"""Encoder and decoder layers: attention and FFN sub-layers, each wrapped in residual + LayerNorm.

Post-LN (the paper):  x = norm(x + sublayer(x))
Pre-LN (modern LLMs): x = x + sublayer(norm(x))

Each layer's ``forward`` writes both placements out, as PyTorch's ``nn.TransformerEncoderLayer``
does, with one helper per sub-layer (``_sa_block``, ``_ca_block``, ``_ff_block``). ``SUBLAYERS``
lists the same sub-layers as data, in the order ``forward`` applies them, for everything that reads
a layer's structure (diagrams, tables, parameter groups).

Shape legend: B batch, T target length, S source length, D = d_model.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from transformer_course._validation import check_bool, check_features, check_probability
from .attention import MultiHeadAttention
from .feedforward import FeedForward
from .kv_cache import LayerKVCache
from .normalization import LayerNorm


class Sublayer(NamedTuple):
    """One residual sub-layer of a layer, by attribute name: the sub-layer, its LayerNorm, its dropout."""

    name: str
    norm: str
    dropout: str


class _TransformerLayer(nn.Module):
    """What encoder and decoder layers share: sizes, placement, and their ``SUBLAYERS`` as modules."""

    SUBLAYERS: tuple[Sublayer, ...] = ()

    def __init__(self, d_model: int, dropout: float, norm_first: bool) -> None:
        super().__init__()
        self.d_model = d_model
        self.norm_first = check_bool("norm_first", norm_first)
        check_probability("dropout", dropout)

    def _add_norms_and_dropouts(self, dropout: float) -> None:
        """One LayerNorm and one dropout per entry of ``SUBLAYERS`` (norm1, norm2, ..., dropout1, ...)."""
        for sublayer in self.SUBLAYERS:
            setattr(self, sublayer.norm, LayerNorm(self.d_model))
        for sublayer in self.SUBLAYERS:
            setattr(self, sublayer.dropout, nn.Dropout(dropout))


class EncoderLayer(_TransformerLayer):
    """x -> self-attention sub-layer -> FFN sub-layer, each with its residual and LayerNorm.

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

    SUBLAYERS = (Sublayer("self_attn", "norm1", "dropout1"), Sublayer("feed_forward", "norm2", "dropout2"))

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0,
                 norm_first: bool = False, activation: str = "relu") -> None:
        super().__init__(d_model, dropout, norm_first)
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.feed_forward = FeedForward(d_model, d_ff, activation=activation, dropout=dropout)
        self._add_norms_and_dropouts(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        check_features("x", x, self.d_model, ndim=3)
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), mask)  # (B, S, D)
            x = x + self._ff_block(self.norm2(x))  # (B, S, D)
        else:
            x = self.norm1(x + self._sa_block(x, mask))  # (B, S, D)
            x = self.norm2(x + self._ff_block(x))  # (B, S, D)
        return x

    def _sa_block(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return self.dropout1(self.self_attn(x, x, x, mask=mask))

    def _ff_block(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout2(self.feed_forward(x))


class DecoderLayer(_TransformerLayer):
    """x -> masked self-attention -> cross-attention to memory -> FFN, each a residual sub-layer.

    Args: as ``EncoderLayer``.

    Shape:
        x (B, T, D), memory (B, S, D), self_mask broadcastable to (B, H, T, T) (pass
        ``causal_mask(T)`` for generation), memory_mask broadcastable to (B, H, T, S) -> (B, T, D).

    Vaswani et al., 2017, section 3.1.
    """

    SUBLAYERS = (Sublayer("self_attn", "norm1", "dropout1"), Sublayer("cross_attn", "norm2", "dropout2"),
                 Sublayer("feed_forward", "norm3", "dropout3"))

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0,
                 norm_first: bool = False, activation: str = "relu") -> None:
        super().__init__(d_model, dropout, norm_first)
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.feed_forward = FeedForward(d_model, d_ff, activation=activation, dropout=dropout)
        self._add_norms_and_dropouts(dropout)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, self_mask: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None, cache: LayerKVCache | None = None) -> torch.Tensor:
        """With a ``cache``, ``x`` holds only the new positions and self_mask is (T_new, T_cached + T_new)."""
        check_features("x", x, self.d_model, ndim=3)
        check_features("memory", memory, self.d_model, ndim=3)
        if cache is not None and not isinstance(cache, LayerKVCache):
            raise TypeError(f"cache must be a LayerKVCache, got {type(cache).__name__}")
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), self_mask, cache)  # (B, T, D)
            x = x + self._ca_block(self.norm2(x), memory, memory_mask, cache)  # (B, T, D)
            x = x + self._ff_block(self.norm3(x))  # (B, T, D)
        else:
            x = self.norm1(x + self._sa_block(x, self_mask, cache))  # (B, T, D)
            x = self.norm2(x + self._ca_block(x, memory, memory_mask, cache))  # (B, T, D)
            x = self.norm3(x + self._ff_block(x))  # (B, T, D)
        return x

    def _sa_block(self, x: torch.Tensor, mask: torch.Tensor | None, cache: LayerKVCache | None) -> torch.Tensor:
        return self.dropout1(self.self_attn(x, x, x, mask=mask, cache=None if cache is None else cache.self_attn))

    def _ca_block(self, x: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor | None,
                  cache: LayerKVCache | None) -> torch.Tensor:
        cross_cache = None if cache is None else cache.cross_attn
        return self.dropout2(self.cross_attn(x, memory, memory, mask=mask, cache=cross_cache))

    def _ff_block(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout3(self.feed_forward(x))
