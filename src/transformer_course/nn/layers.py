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

from transformer_course._validation import (check_bool, check_features, check_instance, check_int,
                                            check_positive_float, check_probability)
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
        qk_norm: None, "layernorm" or "rmsnorm": QK-norm in the self-attention (see ``MultiHeadAttention``).

    Shape:
        x (B, S, D), mask broadcastable to (B, H, S, S) -> (B, S, D).

    Vaswani et al., 2017, section 3.1.
    """

    SUBLAYERS = (Sublayer("self_attn", "norm1", "dropout1"), Sublayer("feed_forward", "norm2", "dropout2"))

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0,
                 norm_first: bool = False, activation: str = "relu", qk_norm: str | None = None) -> None:
        super().__init__(d_model, dropout, norm_first)
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout, qk_norm=qk_norm)
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

    Args: as ``EncoderLayer`` (``qk_norm`` applies to the self- and the cross-attention).

    Shape:
        x (B, T, D), memory (B, S, D), self_mask broadcastable to (B, H, T, T) (pass
        ``causal_mask(T)`` for generation), memory_mask broadcastable to (B, H, T, S) -> (B, T, D).

    Vaswani et al., 2017, section 3.1.
    """

    SUBLAYERS = (Sublayer("self_attn", "norm1", "dropout1"), Sublayer("cross_attn", "norm2", "dropout2"),
                 Sublayer("feed_forward", "norm3", "dropout3"))

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0,
                 norm_first: bool = False, activation: str = "relu", qk_norm: str | None = None) -> None:
        super().__init__(d_model, dropout, norm_first)
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout, qk_norm=qk_norm)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout, qk_norm=qk_norm)
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


# --- DeepNorm: Post-LN with an up-weighted residual and down-scaled branch weights (Wang et al., 2022) ---


def deepnorm_constants(num_layers: int) -> tuple[float, float]:
    """DeepNorm's (alpha, beta) for an encoder-only (or decoder-only) stack of ``num_layers`` layers.

    alpha = (2N)^(1/4) multiplies the residual inside every Post-LN sub-layer, LN(alpha x + F(x));
    beta = (8N)^(-1/4) scales the initial weights of the FFN and of the value and output
    projections. Wang et al. derive them so that a model update moves the output by O(1)
    whatever the depth N (their Table 1, encoder-only row; encoder-decoder models use others).

    Args:
        num_layers: number of layers N (>= 1).

    Returns:
        (alpha, beta).

    Raises:
        TypeError, ValueError: if ``num_layers`` is not an int >= 1.

    Wang et al., 2022, "DeepNet: Scaling Transformers to 1,000 Layers", section 3, Table 1.
    """
    n = check_int("num_layers", num_layers, minimum=1)
    return (2 * n) ** 0.25, (8 * n) ** -0.25


class DeepNormEncoderLayer(EncoderLayer):
    """A Post-LN ``EncoderLayer`` whose residual is up-weighted: x <- LN(alpha x + F(x)) for each sub-layer.

    With alpha = 1 it is ``EncoderLayer(norm_first=False)`` exactly (same parameters, same
    initialization, same output). DeepNorm also down-scales some initial weights: see
    ``deepnorm_init_``.

    Args:
        d_model, num_heads, d_ff, dropout, activation, qk_norm: as ``EncoderLayer``.
        alpha: the residual weight (> 0), ``deepnorm_constants(N)[0]`` for an N-layer stack.

    Shape:
        x (B, S, D), mask broadcastable to (B, H, S, S) -> (B, S, D).

    Wang et al., 2022, "DeepNet: Scaling Transformers to 1,000 Layers", section 3.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0, activation: str = "relu",
                 qk_norm: str | None = None, alpha: float = 1.0) -> None:
        super().__init__(d_model, num_heads, d_ff, dropout, norm_first=False, activation=activation, qk_norm=qk_norm)
        self.alpha = check_positive_float("alpha", alpha)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        check_features("x", x, self.d_model, ndim=3)
        x = self.norm1(self.alpha * x + self._sa_block(x, mask))  # (B, S, D)
        x = self.norm2(self.alpha * x + self._ff_block(x))  # (B, S, D)
        return x


def deepnorm_init_(module: nn.Module, beta: float) -> nn.Module:
    """Scale by ``beta`` the weight matrices of every FFN and of every attention's value and output projections.

    DeepNorm's initialization: Wang et al. draw these with Xavier gain beta and the query and key
    projections with gain 1; applied after a Xavier initialization (``init_xavier_``), this
    scaling gives a Xavier draw with gain beta. The family differs: ``init_xavier_`` draws
    Xavier-*uniform*, while DeepNet's pseudo-code uses ``xavier_normal_``; both have the same
    variance, 2 beta^2 / (fan_in + fan_out). Biases and norms are left alone.
    beta = 1 changes nothing.

    Args:
        module: any module holding ``MultiHeadAttention`` and ``FeedForward`` sub-modules; changed in place.
        beta: the scale (> 0), ``deepnorm_constants(N)[1]`` for an N-layer stack.

    Returns:
        ``module``, for chaining.

    Raises:
        TypeError: if ``module`` is not an ``nn.Module`` or ``beta`` not a number.
        ValueError: if ``beta`` <= 0.

    Wang et al., 2022, "DeepNet: Scaling Transformers to 1,000 Layers", Figure 2 (pseudo-code).
    """
    check_instance("module", module, nn.Module, "torch.nn.Module")
    beta = check_positive_float("beta", beta)
    with torch.no_grad():
        for sub in module.modules():
            if isinstance(sub, MultiHeadAttention):
                linears = [sub.v_proj, sub.out_proj]
            elif isinstance(sub, FeedForward):
                linears = [m for m in sub.modules() if isinstance(m, nn.Linear)]
            else:
                continue
            for linear in linears:
                linear.weight.mul_(beta)
    return module
