"""Figures of the layer-normalization chapter: which axis the statistics run over, and gradient flow.

``plot_norm_axes`` shows a small batch of token vectors before and after LayerNorm (every row
standardized across its own features) beside BatchNorm (every column standardized across the
batch), with the mean and standard deviation of every row and column printed at the margins.
``plot_gradient_flow`` and ``plot_training_race`` draw the tables of ``transformer_course.experiments.gradient_flow``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from transformer_course._exhibit import exhibit
from transformer_course._validation import check_tensor
from transformer_course.nn.normalization import batch_norm_statistics, layer_norm_statistics, standardize
from .style import PALETTE, new_figure

_POST, _PRE = PALETTE["output"], PALETTE["projection"]


def _heatmap_with_margins(ax: Axes, values: np.ndarray, title: str, vmax: float) -> None:
    n, d = values.shape
    ax.imshow(values, cmap="RdBu_r", vmin=-vmax, vmax=vmax, aspect="equal")
    ax.set_title(title, fontsize=10, pad=16)
    ax.set_xticks(range(d), [str(j + 1) for j in range(d)], fontsize=9)
    ax.set_yticks(range(n), [f"token {i + 1}" for i in range(n)], fontsize=9)
    ax.set_xlabel("feature j", fontsize=9)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    # rounding, then adding 0.0, prints a tiny negative mean as 0.00 rather than -0.00
    rows_mean, rows_std = values.mean(axis=1).round(2) + 0.0, values.std(axis=1)
    cols_mean, cols_std = values.mean(axis=0).round(1) + 0.0, values.std(axis=0)
    ax.text(d - 0.3, -0.75, "row μ   σ", fontsize=9, ha="left", va="center", clip_on=False)
    for i in range(n):
        ax.text(d - 0.3, i, f"{rows_mean[i]:+.2f} {rows_std[i]:.2f}", fontsize=9, ha="left", va="center",
                family="monospace", clip_on=False)
    ax.text(-0.6, n + 0.95, "col μ\ncol σ", fontsize=9, ha="right", va="center", clip_on=False)
    for j in range(d):
        ax.text(j, n + 0.95, f"{cols_mean[j]:+.1f}\n{cols_std[j]:.1f}", fontsize=9, ha="center", va="center",
                family="monospace", clip_on=False)


@exhibit
def plot_norm_axes(x: torch.Tensor, eps: float = 1e-5) -> Figure:
    """Input | LayerNorm output | BatchNorm output for a batch of N token vectors of width D.

    LayerNorm standardizes each row (one token, across its D features); BatchNorm standardizes
    each column (one feature, across the N tokens of the batch). Margins print every row's and
    column's mean and standard deviation, so a reader can see which of them become 0 and 1. No
    learnable scale or shift is applied (gamma = 1, beta = 0).

    Args:
        x: (N, D) token vectors, a handful of each (e.g. 6 x 8) so the numbers stay legible.
        eps: the epsilon of both normalizations.

    Returns:
        A figure with three heatmaps (two a row) sharing one diverging colour scale.

    Raises:
        TypeError: if ``x`` is not a floating tensor.
        ValueError: if ``x`` is not 2-d or has fewer than 2 rows or columns.
    """
    check_tensor("x", x, ndim=2, floating=True)
    if min(x.shape) < 2:
        raise ValueError(f"x must have at least 2 tokens and 2 features, got shape {tuple(x.shape)}")
    x = x.detach().double().cpu()
    layer_normed = standardize(x, *layer_norm_statistics(x), eps=eps)  # (N, D)
    batch_normed = standardize(x, *batch_norm_statistics(x), eps=eps)  # (N, D)
    panels = [(x, "input x (N tokens × D features)"),
              (layer_normed, "LayerNorm: every row (token) → μ 0, σ 1"),
              (batch_normed, "BatchNorm: every column (feature) → μ 0, σ 1")]
    vmax = float(max(p.abs().max() for p, _ in panels))
    n, d = x.shape
    # Two panels a row, so each column keeps room for its margin numbers at a readable size.
    figure = new_figure(10.0, 2 * (0.36 * n + 1.6))
    axes = figure.subplots(2, 2).ravel()
    for ax, (values, title) in zip(axes, panels):
        _heatmap_with_margins(ax, values.numpy(), title, vmax)
    axes[3].set_axis_off()
    axes[1].add_patch(Rectangle((-0.5, -0.5), d, 1, fill=False, edgecolor="black", linewidth=2.0))
    axes[2].add_patch(Rectangle((-0.5, -0.5), 1, n, fill=False, edgecolor="black", linewidth=2.0))
    return figure


@exhibit
def plot_gradient_flow(profiles: Mapping[str, pd.DataFrame]) -> Figure:
    """Gradient norm per layer at initialization, Post-LN vs Pre-LN, one panel per setting.

    Args:
        profiles: panel title -> a table from ``gradient_flow.gradient_norm_profile`` (index
            layer, columns "Post-LN" and "Pre-LN"), e.g. one per initialization.

    Returns:
        A figure with one panel per entry, sharing the y axis.

    Raises:
        TypeError: if ``profiles`` is not a mapping of DataFrames.
        ValueError: if it is empty or a table lacks a "Post-LN" or "Pre-LN" column.
    """
    if not isinstance(profiles, Mapping):
        raise TypeError(f"profiles must be a mapping of title -> DataFrame, got {type(profiles).__name__}")
    if not profiles:
        raise ValueError("profiles must hold at least one table, got none")
    for title, table in profiles.items():
        if not isinstance(table, pd.DataFrame):
            raise TypeError(f"profiles[{title!r}] must be a pandas DataFrame, got {type(table).__name__}")
        if not {"Post-LN", "Pre-LN"} <= set(table.columns):
            raise ValueError(f"profiles[{title!r}] must have columns 'Post-LN' and 'Pre-LN', got {list(table.columns)}")
    figure = new_figure(5.0 * len(profiles), 3.8)
    axes = np.atleast_1d(figure.subplots(1, len(profiles), sharey=True))
    for ax, (title, table) in zip(axes, profiles.items()):
        for label, colour, marker in (("Post-LN", _POST, "o"), ("Pre-LN", _PRE, "s")):
            ax.plot(table.index, table[label], marker=marker, markersize=4, color=colour, label=label)
        ax.set_xlabel("layer (1 = next to the input)")
        ax.set_title(title)
        ax.set_ylim(bottom=0)
    axes[0].set_ylabel("‖∂loss/∂W²‖ (FFN output matrix)")
    axes[0].legend(frameon=False)
    return figure


@exhibit
def plot_training_race(losses: pd.DataFrame, window: int = 10) -> Figure:
    """Training loss of the Post-LN and Pre-LN models against step, smoothed by a running mean.

    Args:
        losses: from ``gradient_flow.compare_placements_training`` (index step, columns
            "Post-LN", "Pre-LN").
        window: length of the running mean (1 = raw losses).

    Returns:
        A one-panel figure.

    Raises:
        TypeError: if ``losses`` is not a DataFrame.
        ValueError: if a column is missing or ``window`` < 1.
    """
    if not isinstance(losses, pd.DataFrame):
        raise TypeError(f"losses must be a pandas DataFrame, got {type(losses).__name__}")
    if not {"Post-LN", "Pre-LN"} <= set(losses.columns):
        raise ValueError(f"losses must have columns 'Post-LN' and 'Pre-LN', got {list(losses.columns)}")
    if not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be an int >= 1, got {window!r}")
    figure = new_figure(6.4, 3.6)
    ax = figure.add_subplot()
    smooth = losses.rolling(window, min_periods=1).mean()
    for label, colour in (("Post-LN", _POST), ("Pre-LN", _PRE)):
        ax.plot(losses.index, losses[label], color=colour, alpha=0.25, linewidth=0.8)
        ax.plot(smooth.index, smooth[label], color=colour, label=f"{label} (running mean of {window})")
    ax.set_xlabel("training step")
    ax.set_ylabel("cross-entropy")
    ax.set_ylim(bottom=0)
    ax.legend(frameon=False)
    return figure
