"""Figures for sparse attention: mask patterns, score counts, measured cost curves, receptive fields.

Every function takes data (masks, tables) and returns a ``Figure`` made with ``new_figure``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd
import torch
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

from transformer_course._exhibit import exhibit
from .style import PALETTE, new_figure

_MASK_CMAP = ListedColormap(["#FFFFFF", PALETTE["projection"]])
_DENSE, _SPARSE = PALETTE["output"], PALETTE["projection"]


def _check_masks(masks: object) -> dict[str, torch.Tensor]:
    if not isinstance(masks, Mapping) or not masks:
        raise ValueError(f"masks must be a non-empty mapping of title -> (T, S) bool tensor, got {type(masks).__name__}")
    for title, mask in masks.items():
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.dim() != 2:
            raise TypeError(f"masks[{title!r}] must be a 2-D bool tensor")
    return dict(masks)


def _count(x: float, _pos: object = None) -> str:
    """1234567 -> '1.2M': short labels for counts on a log axis."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= scale:
            return f"{x / scale:.3g}{suffix}"
    return f"{x:.3g}"


@exhibit
def plot_masks(masks: Mapping[str, torch.Tensor], notes: Mapping[str, str] | None = None,
               suptitle: str | None = None, panel_width: float = 2.9) -> Figure:
    """Boolean masks side by side: a filled cell is a (query, key) pair that may attend.

    Args:
        masks: title -> (T, S) bool mask, one panel each, left to right.
        notes: optional title -> text printed under the panel (e.g. a count of kept scores).
        suptitle: optional title over all panels.
        panel_width: width of one panel in inches.

    Returns:
        The figure; rows are queries i (top to bottom), columns keys j.
    """
    masks = _check_masks(masks)
    notes = dict(notes or {})
    fig = new_figure(panel_width * len(masks), panel_width + 0.5 + (0.3 if notes else 0))
    axes = fig.subplots(1, len(masks), squeeze=False)[0]
    for ax, (title, mask) in zip(axes, masks.items()):
        t, s = mask.shape
        ax.imshow(mask.cpu().numpy(), cmap=_MASK_CMAP, vmin=0, vmax=1, interpolation="nearest",
                  extent=(-0.5, s - 0.5, t - 0.5, -0.5))
        if max(t, s) <= 40:  # a cell grid helps to count on small masks
            ax.vlines([x - 0.5 for x in range(1, s)], -0.5, t - 0.5, color="#BBBBBB", linewidth=0.4)
            ax.hlines([y - 0.5 for y in range(1, t)], -0.5, s - 0.5, color="#BBBBBB", linewidth=0.4)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        for spine in ax.spines.values():
            spine.set_visible(True)
        ax.set_title(title)
        ax.set_xlabel("key position j" + (f"\n{notes[title]}" if title in notes else ""))
        ax.set_ylabel("query position i")
    if suptitle:
        fig.suptitle(suptitle)
    return fig


@exhibit
def plot_attention_cost(counts: pd.DataFrame, measured: pd.DataFrame | None = None,
                        highlight: int | None = None, sparse_label: str = "sliding window") -> Figure:
    """Scores counted, and time and memory measured, for dense versus sparse attention across T.

    Args:
        counts: indexed by T, columns ``dense`` and ``sparse`` (number of scores).
        measured: optional, indexed by T, columns ``dense_ms``, ``sparse_ms``, ``dense_MiB``,
            ``sparse_MiB`` (as returned by :func:`~transformer_course.measure.memory.measure_attention`).
        highlight: a T of ``counts`` to annotate with both counts and their ratio.
        sparse_label: legend name of the sparse pattern.

    Returns:
        One log-log panel of counts, plus time and memory panels when ``measured`` is given.
    """
    for name, frame, columns in (("counts", counts, ("dense", "sparse")),
                                 ("measured", measured, ("dense_ms", "sparse_ms", "dense_MiB", "sparse_MiB"))):
        if frame is not None and (not isinstance(frame, pd.DataFrame) or not set(columns) <= set(frame.columns)):
            raise ValueError(f"{name} must be a DataFrame with columns {columns}")
    panels = 1 if measured is None else 3
    fig = new_figure(3.1 * panels, 3.2)
    axes = fig.subplots(1, panels, squeeze=False)[0]
    ax = axes[0]
    t = counts.index.to_numpy()
    ax.loglog(t, counts["dense"], "o-", color=_DENSE, label="full attention")
    ax.loglog(t, counts["sparse"], "s-", color=_SPARSE, label=sparse_label)
    ax.set_xscale("log", base=2)
    ax.yaxis.set_major_formatter(FuncFormatter(_count))
    ax.set_xlabel("sequence length T")
    ax.set_ylabel("query-key scores")
    ax.set_title("scores computed (counted)")
    if highlight is not None:
        dense, sparse = counts.loc[highlight, "dense"], counts.loc[highlight, "sparse"]
        ax.annotate(f"{dense:,.0f}", (highlight, dense), textcoords="offset points", xytext=(-8, 6),
                    ha="right", fontsize=9.5, color=_DENSE)
        ax.annotate(f"{sparse:,.0f}\n({dense / sparse:.0f}x fewer)", (highlight, sparse), textcoords="offset points",
                    xytext=(6, -26), ha="left", fontsize=9.5, color=_SPARSE)
    ax.legend(loc="upper left", fontsize=9.5)
    if measured is not None:
        tm = measured.index.to_numpy()
        for ax, column, label in ((axes[1], "ms", "time per call (ms)"), (axes[2], "MiB", "peak memory (MiB)")):
            ax.loglog(tm, measured[f"dense_{column}"], "o-", color=_DENSE, label="dense masked")
            ax.loglog(tm, measured[f"sparse_{column}"], "s-", color=_SPARSE, label=sparse_label)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("sequence length T")
            ax.set_ylabel(label)
            ax.legend(loc="upper left", fontsize=9.5)
        axes[1].set_title("time (measured)")
        axes[2].set_title("memory (measured)")
    return fig


@exhibit
def plot_receptive_field(layers: Sequence[int], measured: Mapping[str, Sequence[float]],
                         predicted: Mapping[str, Sequence[float]] | None = None, length: int | None = None) -> Figure:
    """Receptive field (positions one output reads) against the number of stacked layers.

    Args:
        layers: the layer counts L on the x axis.
        measured: label -> receptive field for each L (from reachability through the masks), drawn as markers.
        predicted: optional label -> formula values for each L, drawn as dashed lines.
        length: optional sequence length T, drawn as a horizontal line (the receptive field cannot exceed it).

    Returns:
        The figure.
    """
    fig = new_figure(5.6, 3.6)
    ax = fig.subplots()
    colors = [PALETTE["projection"], PALETTE["output"], PALETTE["norm"], PALETTE["recurrent"], PALETTE["attention"]]
    for color, (label, values) in zip(colors, measured.items()):
        ax.plot(layers, values, "o", color=color, label=f"{label} (reachability)")
    for color, (label, values) in zip(colors, (predicted or {}).items()):
        ax.plot(layers, values, "--", color=color, label=label)
    if length is not None:
        ax.axhline(length, color="#777777", linewidth=1, linestyle=":")
        ax.text(layers[0], length, f" sequence length T = {length}", va="bottom", fontsize=9.5, color="#555555")
    ax.set_xlabel("stacked layers L")
    ax.set_ylabel("receptive field (positions)")
    ax.set_xticks(list(layers))
    ax.legend(fontsize=9.5, loc="upper left")
    return fig
