"""Scaled dot-product attention and multi-head attention.

Shape legend: B batch, H heads, T queries, S keys, D = d_model, Dh = d_model / H.

Two paths compute the same thing:
* the hand-written path spells out softmax(Q K^T / sqrt(Dh) + bias) V and returns the weights,
  which is what the chapters read and what ``FlopCounterMode`` can count on CPU;
* the fused path calls ``torch.nn.functional.scaled_dot_product_attention`` and is used by
  ``MultiHeadAttention`` by default whenever the weights are not requested.

Inputs are checked at the door: ``scaled_dot_product_attention`` also refuses a mask that leaves a
query with no key (reading the mask's values); ``MultiHeadAttention.forward`` reads only shapes and
dtypes, so a layer's forward pass never waits for the device.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from transformer_course._validation import check_choice, check_features, check_int, check_probability, check_tensor
from .kv_cache import AttentionCache
from .masks import check_mask, validate_mask
from .normalization import LayerNorm, RMSNorm

QK_NORMS = ("layernorm", "rmsnorm")  # the normalizations ``MultiHeadAttention(qk_norm=...)`` accepts


def _check_qkv(q: object, k: object, v: object) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, x, floating=True)
        if x.dim() < 2:
            raise ValueError(f"{name} must have shape (..., length, width), got {tuple(x.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same last dimension (head width), "
                         f"got q {tuple(q.shape)} and k {tuple(k.shape)}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same length S, got k {tuple(k.shape)} and v {tuple(v.shape)}")


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k) + bias, masked) V.

    Args:
        q: (..., T, Dh) queries.
        k: (..., S, Dh) keys.
        v: (..., S, Dv) values.
        mask: optional bool tensor broadcastable to (..., T, S); True = may attend.
        bias: optional float tensor broadcastable to (..., T, S) added to the scores (e.g. ALiBi).

    Returns:
        out: (..., T, Dv) the weighted sums of values.
        weights: (..., T, S) attention probabilities; each row sums to 1.

    Raises:
        TypeError: if an input is not a floating tensor or the mask is not bool.
        ValueError: on mismatched widths/lengths, a mask of the wrong shape, or a mask that
            leaves a query with no key.

    Vaswani et al., 2017, "Attention Is All You Need", equation (1).
    """
    _check_qkv(q, k, v)
    t, s = q.shape[-2], k.shape[-2]
    if bias is not None:
        check_tensor("bias", bias, floating=True)
        if bias.dim() < 2 or bias.shape[-2] not in (1, t) or bias.shape[-1] not in (1, s):
            raise ValueError(f"bias must broadcast to (..., T={t}, S={s}), got shape {tuple(bias.shape)}")
    if mask is not None:
        validate_mask(mask, t, s)
    return _attention(q, k, v, mask, bias)


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
               bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The computation of :func:`scaled_dot_product_attention`, for callers that checked the inputs."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., T, S)
    if bias is not None:
        scores = scores + bias  # (..., T, S)
    if mask is not None:
        mask = mask.to(scores.device)  # a mask built on the CPU follows the inputs
        scores = scores.masked_fill(~mask, float("-inf"))  # (..., T, S)
    weights = scores.softmax(dim=-1)  # (..., T, S)
    return weights @ v, weights  # (..., T, Dv), (..., T, S)


class NormalizedProjection(nn.Linear):
    """A linear projection to heads of width Dh whose output is normalized over each head's Dh features.

    QK-norm's query and key projections: ``nn.Linear`` (same ``weight`` and ``bias``, same
    initialization), then ``norm`` (a LayerNorm or RMSNorm of width Dh, shared by the heads)
    applied to every head's slice of the output.

    Args:
        in_features, out_features, bias: as ``nn.Linear``; ``out_features`` must be a multiple of ``d_head``.
        d_head: width Dh of one head.
        kind: "layernorm" or "rmsnorm".

    Shape:
        (..., in_features) -> (..., out_features), each consecutive block of Dh features normalized.

    Henry et al., 2020, "Query-Key Normalization for Transformers"; Dehghani et al., 2023,
    "Scaling Vision Transformers to 22 Billion Parameters", section 2.
    """

    def __init__(self, in_features: int, out_features: int, d_head: int, kind: str, bias: bool = True) -> None:
        super().__init__(in_features, out_features, bias=bias)
        d_head = check_int("d_head", d_head, minimum=1)
        if out_features % d_head:
            raise ValueError(f"out_features must be a multiple of d_head={d_head}, got {out_features}")
        self.d_head = d_head
        self.norm = (LayerNorm if check_choice("kind", kind, QK_NORMS) == "layernorm" else RMSNorm)(d_head)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)  # (..., G * Dh)
        return self.norm(y.unflatten(-1, (-1, self.d_head))).flatten(-2)  # each head's Dh features normalized


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_H) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    The H per-head projections of width Dh = D / H are stored side by side in one (D, D) linear
    layer per role (``q_proj``, ``k_proj``, ``v_proj``), so H heads cost exactly the parameters and
    projection FLOPs of one head of width D.

    Args:
        d_model: model width D.
        num_heads: number of heads H; must divide ``d_model``.
        dropout: dropout rate on the attention weights (training only).
        bias: whether the four projections have biases.
        num_kv_heads: number of key/value heads G (default H, plain multi-head attention); must
            divide H. With G < H, query heads share key/value heads in groups of H / G: query head
            i reads key/value head i // (H / G) (grouped-query attention, Ainslie et al., 2023;
            G = 1 is multi-query attention, Shazeer, 2019). ``k_proj`` and ``v_proj`` then map D
            to G * Dh features, and a KV cache stores G heads instead of H.
        qk_norm: None (default, the paper's attention), "layernorm" or "rmsnorm": QK-norm, every
            query and key normalized over its head width Dh before the dot product, by one learned
            norm for the queries and one for the keys (``q_proj.norm``, ``k_proj.norm``, each of
            width Dh and shared by the heads; ``q_proj`` and ``k_proj`` become
            ``NormalizedProjection``). Unit-scale queries and keys bound every logit,
            |q.k| / sqrt(Dh) <= sqrt(Dh) * max_i |gamma_q,i gamma_k,i| (RMSNorm, or LayerNorm with
            beta = 0), however large the projection weights grow. Henry et al., 2020; Dehghani et
            al., 2023, section 2.

    Shape:
        query (B, T, D), key and value (B, S, D), mask broadcastable to (B, H, T, S) -> (B, T, D),
        plus the weights (B, H, T, S) when ``need_weights=True``.

    Attribute ``fused`` (default True) lets ``forward`` use PyTorch's fused kernel when the weights
    are not needed; set it to False to force the hand-written path.

    Vaswani et al., 2017, section 3.2.2.
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 num_kv_heads: int | None = None, qk_norm: str | None = None) -> None:
        super().__init__()
        d_model = check_int("d_model", d_model, minimum=1)
        num_heads = check_int("num_heads", num_heads, minimum=1)
        if d_model % num_heads:
            raise ValueError(f"d_model must be divisible by num_heads, got d_model={d_model}, num_heads={num_heads}")
        num_kv_heads = num_heads if num_kv_heads is None else check_int("num_kv_heads", num_kv_heads, minimum=1)
        if num_heads % num_kv_heads:
            raise ValueError(f"num_kv_heads must divide num_heads={num_heads}, got {num_kv_heads}")
        self.d_model = d_model
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.d_head = d_model // num_heads
        self.dropout = check_probability("dropout", dropout)
        self.qk_norm = None if qk_norm is None else check_choice("qk_norm", qk_norm, QK_NORMS)
        if qk_norm is None:
            self.q_proj = nn.Linear(d_model, d_model, bias=bias)
            self.k_proj = nn.Linear(d_model, num_kv_heads * self.d_head, bias=bias)
        else:  # same weights and initialization, then each head normalized over its Dh features
            self.q_proj = NormalizedProjection(d_model, d_model, self.d_head, qk_norm, bias=bias)
            self.k_proj = NormalizedProjection(d_model, num_kv_heads * self.d_head, self.d_head, qk_norm, bias=bias)
        self.v_proj = nn.Linear(d_model, num_kv_heads * self.d_head, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.fused = True

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, L, D) -> (B, H, L, Dh): head h owns features h*Dh ... (h+1)*Dh - 1.

        A (B, L, G * Dh) key or value projection of grouped-query attention splits into its G heads.
        """
        b, length, width = x.shape
        return x.view(b, length, width // self.d_head, self.d_head).transpose(1, 2)  # (B, H or G, L, Dh)

    def merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, H, L, Dh) -> (B, L, D): the concatenation Concat(head_1, ..., head_H)."""
        b, _, length, _ = x.shape
        return x.transpose(1, 2).reshape(b, length, self.d_model)  # (B, L, D)

    def attention_logits(self, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        """The scores q.k / sqrt(Dh) before mask and softmax: query (B, T, D), key (B, S, D) -> (B, H, T, S).

        As ``forward`` computes them (queries and keys normalized first when ``qk_norm`` is set;
        a grouped key head repeated for the query heads that read it). Watching the largest one
        during training shows attention-logit growth (Dehghani et al., 2023, section 2).
        """
        self._check_inputs(query, key, key)
        q = self.split_heads(self.q_proj(query))  # (B, H, T, Dh)
        k = self.split_heads(self.k_proj(key))  # (B, G, S, Dh)
        k = k.repeat_interleave(self.num_heads // self.num_kv_heads, dim=1)  # (B, H, S, Dh)
        return q @ k.transpose(-2, -1) / math.sqrt(self.d_head)  # (B, H, T, S)

    def _keys_and_values(self, key: torch.Tensor, value: torch.Tensor,
                         cache: AttentionCache | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Project to heads; with a cache, extend it (self-attention) or reuse it (cross-attention)."""
        if cache is not None and cache.is_filled:
            return cache.keys, cache.values  # (B, H, S, Dh): the encoder output has not changed
        k = self.split_heads(self.k_proj(key))  # (B, G, S_new, Dh), G = H unless grouped
        v = self.split_heads(self.v_proj(value))  # (B, G, S_new, Dh)
        return (k, v) if cache is None else cache.update(k, v)  # (B, G, S, Dh) each

    def _check_inputs(self, query: object, key: object, value: object) -> None:
        for name, x in (("query", query), ("key", key), ("value", value)):
            check_features(name, x, self.d_model, ndim=3)
        if key.shape[:2] != value.shape[:2]:
            raise ValueError(f"key and value must share (B, S), got {tuple(key.shape)} and {tuple(value.shape)}")
        if query.shape[0] != key.shape[0]:
            raise ValueError(f"query and key must have the same batch size, got {query.shape[0]} and {key.shape[0]}")

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
        need_weights: bool = False,
        cache: AttentionCache | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Attend from ``query`` (B, T, D) to ``key``/``value`` (B, S, D); see the class docstring.

        With a ``cache`` (see ``transformer_course.nn.kv_cache``), ``key``/``value`` hold only the new
        positions: their keys and values are appended to the cached ones (self-attention), or a
        filled static cache is reused without projecting again (cross-attention); the mask must
        then broadcast to (B, H, T, S_cached + S_new).
        """
        self._check_inputs(query, key, value)
        if cache is not None and not isinstance(cache, AttentionCache):
            raise TypeError(f"cache must be an AttentionCache, got {type(cache).__name__}")
        t = query.shape[1]
        s = key.shape[1] if cache is None else cache.length_after(key.shape[1])
        if mask is not None:  # shapes only (a layer's forward never waits for the device); a CPU mask follows
            mask = check_mask(mask, t, s).to(query.device)
        q = self.split_heads(self.q_proj(query))  # (B, H, T, Dh)
        k, v = self._keys_and_values(key, value, cache)  # (B, H, S, Dh) each
        dropout = self.dropout if self.training else 0.0
        grouped = self.num_kv_heads != self.num_heads
        if self.fused and not need_weights:
            heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout,
                                                   **({"enable_gqa": True} if grouped else {}))  # (B, H, T, Dh)
            return self.out_proj(self.merge_heads(heads))  # (B, T, D)
        if grouped:  # query head i reads key/value head i // (H / G)
            group = self.num_heads // self.num_kv_heads
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # (B, H, S, Dh) each
        heads, weights = _attention(q, k, v, mask)  # (B, H, T, Dh), (B, H, T, S)
        if dropout:
            heads = F.dropout(weights, dropout) @ v  # (B, H, T, Dh)
        out = self.out_proj(self.merge_heads(heads))  # (B, T, D)
        return (out, weights) if need_weights else out


@contextmanager
def hand_written_attention(module: nn.Module) -> Iterator[nn.Module]:
    """Temporarily route every ``MultiHeadAttention`` in ``module`` through the hand-written path.

    On CPU ``FlopCounterMode`` counts nothing inside the fused
    ``F.scaled_dot_product_attention`` kernel, so FLOP measurements use the explicit matmuls.
    """
    attention = [m for m in module.modules() if isinstance(m, MultiHeadAttention)]
    previous = [m.fused for m in attention]
    for m in attention:
        m.fused = False
    try:
        yield module
    finally:
        for m, fused in zip(attention, previous):
            m.fused = fused
