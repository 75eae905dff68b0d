"""Figures of an encoder-decoder's cross-attention: one heatmap per decoder layer and head.

* :func:`plot_cross_attention_maps` draws the (N, H, T, S) cross-attention weights of one example
  (from ``experiments.cross_attention.cross_attention_weights``) as an N x H grid, queries (the
  tokens the decoder predicts) down, source tokens across.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from matplotlib.figure import Figure

from transformer_course._exhibit import exhibit
from transformer_course._validation import check_tensor
from .style import new_figure


@exhibit
def plot_cross_attention_maps(weights: torch.Tensor, source: Sequence[str], predicted: Sequence[str],
                              titles: Sequence[str] | None = None) -> Figure:
    """An N x H grid of cross-attention heatmaps of one example (rows: decoder layers, columns: heads).

    Args:
        weights: (N, H, T, S) cross-attention probabilities of one example.
        source: S names of the source tokens (the keys, along x).
        predicted: T names of what each decoder position predicts (the queries, along y).
        titles: optional N * H panel titles, row by row (default "layer i, head k", from 1).

    Returns:
        A ``Figure`` with N * H heatmap axes and one shared colour bar.

    Raises:
        TypeError, ValueError: if ``weights`` is not a floating 4-D tensor or the labels do not match.
    """
    check_tensor("weights", weights, ndim=4, floating=True)
    n, h, t, s = weights.shape
    source, predicted = list(source), list(predicted)
    if len(source) != s:
        raise ValueError(f"source must have S={s} names, got {len(source)}")
    if len(predicted) != t:
        raise ValueError(f"predicted must have T={t} names, got {len(predicted)}")
    if titles is None:
        titles = [f"layer {i + 1}, head {k + 1}" for i in range(n) for k in range(h)]
    titles = list(titles)
    if len(titles) != n * h:
        raise ValueError(f"titles must have N * H = {n * h} entries, got {len(titles)}")
    data = weights.detach().double().cpu().numpy()
    fig = new_figure(1.9 * h + 1.0, 2.2 * n + 0.6)
    axes = fig.subplots(n, h, squeeze=False)
    image = None
    for i in range(n):
        for k in range(h):
            ax = axes[i, k]
            image = ax.imshow(data[i, k], vmin=0.0, vmax=1.0, cmap="viridis")
            ax.set_title(titles[i * h + k], fontsize=10)
            ax.set_xticks(np.arange(s), source if i == n - 1 else [], fontsize=9)
            ax.set_yticks(np.arange(t), predicted if k == 0 else [], fontsize=9)
            if i == n - 1:
                ax.set_xlabel("source token")
            if k == 0:
                ax.set_ylabel("predicting")
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="attention weight")
    return fig


@exhibit
def plot_memory_patching(changed: torch.Tensor, predicted: Sequence[str], per_seed: dict[str, Sequence[float]]) -> Figure:
    """Activation patching of the encoder memory: which outputs change, and the per-seed summary.

    Args:
        changed: (T, S) fraction of sources whose prediction at decoder position t changes when the
            memory at source position s is patched (e.g. the median over an ensemble's seeds).
        predicted: T names of the decoder positions (y axis of the heatmap), e.g. "output 0" .. "<eos>".
        per_seed: {statistic name: one value per seed}, drawn as points on a 0..1 axis.

    Returns:
        A ``Figure``: left the (T, S) heatmap, right one row of points per statistic.

    Raises:
        TypeError, ValueError: if ``changed`` is not a floating 2-D tensor or the labels do not match.
    """
    check_tensor("changed", changed, ndim=2, floating=True)
    t, s = changed.shape
    predicted = list(predicted)
    if len(predicted) != t:
        raise ValueError(f"predicted must have T={t} names, got {len(predicted)}")
    if not per_seed:
        raise ValueError("per_seed must hold at least one statistic, got none")
    fig = new_figure(9.0, 3.8)
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.0, 1.4]})
    image = left.imshow(changed.detach().double().cpu().numpy(), vmin=0.0, vmax=1.0, cmap="viridis")
    left.set_xticks(np.arange(s), [str(j) for j in range(s)], fontsize=9)
    left.set_yticks(np.arange(t), predicted, fontsize=9)
    left.set_xlabel("patched source position s")
    left.set_ylabel("decoder position")
    left.set_title("changed, median of seeds", fontsize=10)
    fig.colorbar(image, ax=left, shrink=0.8, label="share of sources")
    names = list(per_seed)
    for row, name in enumerate(names):
        values = np.asarray(list(per_seed[name]), dtype=float)
        right.plot(values, np.full(len(values), row), linestyle="none", marker="o", markersize=6, alpha=0.6,
                   color="#0072B2")
    right.set_yticks(np.arange(len(names)), names, fontsize=9)
    right.set_ylim(len(names) - 0.5, -0.5)
    right.set_xlim(-0.02, 1.02)
    right.set_xlabel("value (one point per seed)")
    right.grid(axis="x", alpha=0.3)
    return fig
