"""LongNet's dilated attention: segments, rows kept at a stride inside each, and a mixture of (w, r) patterns.

Shape legend: ... any leading batch/head dims, T sequence length (queries = keys), Dh head width,
Dv value width, G = T / w segments of one pattern, m = w / r rows kept per segment.

Ding et al. (2023), "LongNet: Scaling Transformers to 1,000,000,000 Tokens", section 2.2:

* One pattern (w, r) cuts Q, K and V into T / w segments of w rows and keeps every r-th row of
  each (rows s w + o, s w + o + r, ..., with the head's offset o < r; eq. 4). Attention runs inside
  each sparsified segment, m = w / r queries against the same m keys (eq. 5), and the outputs are
  scattered back to their rows; the rows a pattern did not keep get nothing from it (eq. 6). Its
  cost is (T / w) m^2 = T w / r^2 scores.
* Several patterns (w_i, r_i) run side by side and their outputs are mixed with weights
  alpha_i = s_i / sum_j s_j, s_i the softmax denominator of pattern i at that row (eq. 8-10).
  Weighting by the denominators turns the mixture into one softmax over all the keys the patterns
  select for that row, a key selected by several patterns counted once per pattern:
  ``longnet_attention`` equals dense attention with the additive bias log(count) of
  :func:`longnet_key_counts` (the tests check it in float64).
* With geometric schedules, w_i = w_0 a^i up to T and r_i = a^i (:func:`longnet_schedule`), every
  kept row reads w_0 keys in every pattern, pattern i keeps T / r_i rows, and the total,
  sum_i T w_0 / a^i < T w_0 a / (a - 1) scores, grows linearly in T, while the largest segment
  still spans the whole sequence.
* Heads differ by their offset o (section 2.3), so that together they cover every row of the
  patterns with r > 1; one head with one offset leaves some rows out of those patterns.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from transformer_course._validation import check_int, check_sizes
from .sparse_attention import _check_self_attention


def _check_schedule(t: int, segment_lengths: object, dilation_rates: object, offset: object
                    ) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    segments = check_sizes("segment_lengths", segment_lengths)
    rates = check_sizes("dilation_rates", dilation_rates)
    if len(segments) != len(rates):
        raise ValueError(f"segment_lengths and dilation_rates must pair up, got {len(segments)} and {len(rates)} values")
    for w, r in zip(segments, rates):
        if t % w:
            raise ValueError(f"segment_lengths must divide the sequence length T={t}, got {w}")
        if w % r:
            raise ValueError(f"dilation_rates must divide their segment length, got r={r} for w={w}")
    return segments, rates, check_int("offset", offset, minimum=0)


def _kept_rows(t: int, w: int, r: int, offset: int, device: torch.device) -> torch.Tensor:
    """(G, m) the rows pattern (w, r) keeps: s w + (offset mod r) + j r for segment s, j < w / r."""
    start = torch.arange(0, t, w, device=device).unsqueeze(-1)  # (G, 1)
    return start + offset % r + torch.arange(0, w, r, device=device)  # (G, m)


def longnet_schedule(t: int, first_segment: int, ratio: int = 2) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Geometric (w, r) pairs: w = w_0, w_0 a, w_0 a^2, ... up to T, with r = 1, a, a^2, ...

    Every pattern then keeps w_0 rows per segment, and the last segment spans the sequence.

    Raises:
        ValueError: unless T = w_0 a^k for some k >= 0, with w_0 >= 1 and a >= 2.
    """
    t, w = check_int("t", t, minimum=1), check_int("first_segment", first_segment, minimum=1)
    ratio = check_int("ratio", ratio, minimum=2)
    segments, rates, r = [], [], 1
    while w < t:
        segments.append(w)
        rates.append(r)
        w, r = w * ratio, r * ratio
    if w != t:
        raise ValueError(f"t must be first_segment x ratio^k, got t={t}, first_segment={first_segment}, ratio={ratio}")
    return tuple(segments + [w]), tuple(rates + [r])


def longnet_score_count(t: int, segment_lengths: Sequence[int], dilation_rates: Sequence[int]) -> int:
    """Query-key scores ``longnet_attention`` computes: sum over patterns of (T / w) (w / r)^2 = T w / r^2."""
    t = check_int("t", t, minimum=1)
    segments, rates, _ = _check_schedule(t, segment_lengths, dilation_rates, 0)
    return sum((t // w) * (w // r) ** 2 for w, r in zip(segments, rates))


def longnet_key_counts(t: int, segment_lengths: Sequence[int], dilation_rates: Sequence[int],
                       offset: int = 0) -> torch.Tensor:
    """(T, T) int64: how many patterns let query i read key j (0: none). For tests and figures (it is T x T)."""
    t = check_int("t", t, minimum=1)
    segments, rates, offset = _check_schedule(t, segment_lengths, dilation_rates, offset)
    counts = torch.zeros(t, t, dtype=torch.int64)
    for w, r in zip(segments, rates):
        rows = _kept_rows(t, w, r, offset, counts.device)  # (G, m)
        counts[rows.unsqueeze(-1), rows.unsqueeze(-2)] += 1  # each segment's kept rows read each other
    return counts


def longnet_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segment_lengths: Sequence[int],
                      dilation_rates: Sequence[int], offset: int = 0) -> torch.Tensor:
    """LongNet's mixture of dilated attentions (non-causal), for one head offset.

    Args:
        q: (..., T, Dh) queries.
        k: (..., T, Dh) keys.
        v: (..., T, Dv) values.
        segment_lengths: w_i, each dividing T.
        dilation_rates: r_i, each dividing its w_i (pairs with ``segment_lengths``).
        offset: the head's row offset o (pattern i keeps rows o mod r_i, o mod r_i + r_i, ... of each segment).

    Returns:
        (..., T, Dv): row i mixes the patterns that keep it, weighted by their softmax denominators;
        a row no pattern keeps is 0.

    Raises:
        TypeError: if an input is not a floating tensor or dtypes differ.
        ValueError: on mismatched shapes or a schedule that does not fit T.
    """
    t = _check_self_attention(q, k, v)
    segments, rates, offset = _check_schedule(t, segment_lengths, dilation_rates, offset)
    scale = 1 / math.sqrt(q.shape[-1])
    outputs, log_denominators = [], []
    for w, r in zip(segments, rates):
        rows = _kept_rows(t, w, r, offset, q.device).flatten()  # (G m,) the kept rows, segment by segment
        groups = (t // w, w // r)
        qs, ks, vs = (x[..., rows, :].unflatten(-2, groups) for x in (q, k, v))  # (..., G, m, Dh|Dv)
        scores = scale * qs @ ks.transpose(-2, -1)  # (..., G, m, m): each segment on its own
        log_den = torch.logsumexp(scores, dim=-1)  # (..., G, m): log s_i
        out = torch.softmax(scores, dim=-1) @ vs  # (..., G, m, Dv)
        full = v.new_zeros(*v.shape[:-2], t, v.shape[-1])  # (..., T, Dv): rows not kept stay 0
        full[..., rows, :] = out.flatten(-3, -2)
        lse = q.new_full((*q.shape[:-2], t), float("-inf"))  # (..., T): -inf = not kept, weight 0
        lse[..., rows] = log_den.flatten(-2)
        outputs.append(full)
        log_denominators.append(lse)
    log_den = torch.stack(log_denominators)  # (P, ..., T)
    total = torch.logsumexp(log_den, dim=0)  # (..., T): log sum_i s_i
    weights = torch.where(torch.isinf(total), torch.zeros_like(log_den), torch.exp(log_den - total))  # alpha_i
    return (weights.unsqueeze(-1) * torch.stack(outputs)).sum(dim=0)  # (..., T, Dv)
