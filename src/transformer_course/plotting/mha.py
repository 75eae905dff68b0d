"""Figures of multi-head attention: the pipeline diagram read off a module, and per-head maps.

* :func:`plot_mha_pipeline` draws split -> parallel heads -> concat -> W^O for a real
  ``MultiHeadAttention``; every number on it (H, D, Dh, the weight shapes) comes from the module.
* :func:`plot_head_maps` shows the attention weights (H, T, S) of one input, one panel per head.
* :func:`plot_relation_scores` shows a heads x relations score table as an annotated heatmap.
* :func:`plot_accuracy_by_heads` shows accuracy per relation against the number of heads at a
  fixed width (the table of ``experiments.head_count.head_count_table``).
* :func:`plot_head_count_study` shows an ensemble's learning curves and steps to threshold per h;
  :func:`plot_kv_heads_study` the same per number of key/value heads G (GQA, MQA).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure

from transformer_course._exhibit import exhibit
from transformer_course._validation import check_instance, check_int, check_tensor
from transformer_course.nn.attention import MultiHeadAttention
from .blocks import blank_axes, draw_arrow, draw_box
from .style import PALETTE, new_figure


def _shape(weight: torch.Tensor) -> str:
    """'D_in x D_out' of a linear layer's weight (stored as (out, in), used as x @ W^T)."""
    out_features, in_features = weight.shape
    return f"{in_features}×{out_features}"


def mha_pipeline_labels(module: MultiHeadAttention) -> dict[str, str]:
    """The labels of the pipeline diagram, read off ``module`` (sizes and weight shapes).

    Returns:
        dict with keys "input", "projections", "split", "head", "concat", "output_projection",
        "output"; "head" is a template with ``{i}`` for the head number.

    Raises:
        TypeError: if ``module`` is not a ``MultiHeadAttention``.
    """
    check_instance("module", module, MultiHeadAttention)
    h, d, dh = module.num_heads, module.d_model, module.d_head
    return {
        "input": f"Q, K, V\n(B, T, {d})",
        "projections": (f"$W^Q, W^K, W^V$\neach {_shape(module.q_proj.weight)}"),
        "split": f"split into h = {h} heads\n$d_k$ = {d} / {h} = {dh}",
        "head": "head {i}: softmax($Q_{i} K_{i}^T/\\sqrt{" + str(dh) + "}$) $V_{i}$\n(B, T, " + str(dh) + ")",
        "concat": f"Concat\n{h} × {dh} = {h * dh}",
        "output_projection": f"$W^O$\n{_shape(module.out_proj.weight)}",
        "output": f"MultiHead\n(B, T, {module.out_proj.weight.shape[0]})",
    }


@exhibit
def plot_mha_pipeline(module: MultiHeadAttention, max_heads_drawn: int = 4) -> Figure:
    """Diagram of ``module``: project -> split into H heads -> attend in parallel -> concat -> W^O.

    Args:
        module: the ``MultiHeadAttention`` to draw; H, D and Dh are read off it.
        max_heads_drawn: draw at most this many head boxes (the first ones and the last, with a
            vertical ellipsis between) so that wide modules stay readable.

    Returns:
        A ``Figure`` with one axes.

    Raises:
        TypeError, ValueError: if ``module`` is not a MultiHeadAttention or ``max_heads_drawn < 2``.
    """
    labels = mha_pipeline_labels(module)
    max_heads_drawn = check_int("max_heads_drawn", max_heads_drawn, minimum=2)
    h = module.num_heads
    if h <= max_heads_drawn:
        drawn: list[int | None] = list(range(1, h + 1))
    else:
        drawn = list(range(1, max_heads_drawn)) + [None, h]
    rows = len(drawn)
    spacing = 0.85
    height = max(2.4, rows * spacing + 0.9)
    fig = new_figure(10.2, 0.75 * height + 0.5)
    ax = blank_axes(fig.add_subplot(), (-0.1, 16.4), (0.0, height))
    ax.set_title(f"Multi-head attention read off MultiHeadAttention(d_model={module.d_model}, "
                 f"num_heads={h})", fontsize=11)
    mid = (height - 0.6) / 2
    box_h = 1.0
    draw_box(ax, 0.0, mid - box_h / 2, 1.7, box_h, labels["input"], color=PALETTE["embedding"], fontsize=10)
    draw_box(ax, 2.2, mid - box_h / 2, 2.3, box_h, labels["projections"], color=PALETTE["projection"], fontsize=10)
    ax.texts[-1].set_color("white")
    draw_arrow(ax, (1.75, mid), (2.15, mid))
    heads_mid = (height - 0.6) / 2
    ys = [heads_mid + ((rows - 1) / 2 - k) * spacing for k in range(rows)]
    ax.text(5.4, height - 0.05, labels["split"], ha="center", va="top", fontsize=10)
    head_x, head_w = 6.3, 4.2
    for y, i in zip(ys, drawn):
        if i is None:
            ax.text(head_x + head_w / 2, y, "⋮", ha="center", va="center", fontsize=16)
            continue
        draw_box(ax, head_x, y - 0.33, head_w, 0.66, labels["head"].replace("{i}", str(i)), color=PALETTE["attention"],
                 fontsize=10)
        draw_arrow(ax, (4.55, mid), (head_x - 0.05, y), connectionstyle="arc3,rad=0.0")
        draw_arrow(ax, (head_x + head_w + 0.05, y), (11.25, mid), connectionstyle="arc3,rad=0.0")
    draw_box(ax, 11.3, mid - box_h / 2, 1.5, box_h, labels["concat"], color=PALETTE["neutral"], fontsize=10)
    draw_box(ax, 13.2, mid - box_h / 2, 1.2, box_h, labels["output_projection"], color=PALETTE["projection"], fontsize=10)
    ax.texts[-1].set_color("white")
    draw_arrow(ax, (12.85, mid), (13.15, mid))
    draw_box(ax, 14.8, mid - box_h / 2, 1.55, box_h, labels["output"], color=PALETTE["output"], fontsize=10)
    draw_arrow(ax, (14.45, mid), (14.75, mid))
    return fig


@exhibit
def plot_head_maps(weights: torch.Tensor, tokens: Sequence[str], titles: Sequence[str] | None = None) -> Figure:
    """One heatmap per head of the attention weights of one input (rows: queries, columns: keys).

    Args:
        weights: (H, T, T) attention probabilities of one sequence (self-attention).
        tokens: T token names for the tick labels.
        titles: optional H panel titles (default "head 0", ...).

    Returns:
        A ``Figure`` with H heatmap axes and one shared colour bar.

    Raises:
        TypeError, ValueError: if ``weights`` is not (H, T, T) floating or the labels do not match.
    """
    check_tensor("weights", weights, ndim=3, floating=True)
    h, t, s = weights.shape
    if t != s:
        raise ValueError(f"weights must be square self-attention maps (H, T, T), got {tuple(weights.shape)}")
    tokens = list(tokens)
    if len(tokens) != t:
        raise ValueError(f"tokens must have T={t} names, got {len(tokens)}")
    titles = [f"head {k}" for k in range(h)] if titles is None else list(titles)
    if len(titles) != h:
        raise ValueError(f"titles must have H={h} entries, got {len(titles)}")
    data = weights.detach().double().cpu().numpy()
    fig = new_figure(2.0 * h + 0.6, 2.9)
    axes = fig.subplots(1, h, squeeze=False)[0]
    ticks = np.arange(t)
    image = None
    for k, ax in enumerate(axes):
        image = ax.imshow(data[k], vmin=0.0, vmax=1.0, cmap="viridis")
        ax.set_title(titles[k], fontsize=10)
        ax.set_xticks(ticks, tokens, fontsize=9)
        ax.set_yticks(ticks, tokens if k == 0 else [], fontsize=9)
        ax.set_xlabel("key")
        if k == 0:
            ax.set_ylabel("query")
    fig.colorbar(image, ax=list(axes), shrink=0.8, label="attention weight")
    return fig


@exhibit
def plot_relation_scores(scores: pd.DataFrame) -> Figure:
    """Annotated heatmap of a heads x relations score table (values in [0, 1]).

    Args:
        scores: DataFrame with one row per head and one column per relation, e.g. from
            ``head_specialization.head_relation_scores``.

    Returns:
        A ``Figure`` with one axes.
    """
    check_instance("scores", scores, pd.DataFrame, "pandas.DataFrame")
    values = scores.to_numpy(dtype=float)
    fig = new_figure(1.3 * values.shape[1] + 2.0, 0.6 * values.shape[0] + 1.4)
    ax = fig.add_subplot()
    image = ax.imshow(values, vmin=0.0, vmax=1.0, cmap="viridis")
    ax.set_xticks(range(values.shape[1]), [str(c) for c in scores.columns])
    ax.set_yticks(range(values.shape[0]), [str(i) for i in scores.index])
    ax.set_xlabel("relation (where the mass should go)")
    for (r, c), v in np.ndenumerate(values):
        ax.text(c, r, f"{v:.2f}", ha="center", va="center", fontsize=9, color="black" if v > 0.5 else "white")
    fig.colorbar(image, ax=ax, label="mean attention mass")
    return fig


_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_LINESTYLES = ("-", "--", ":", "-.")


@exhibit
def plot_accuracy_by_heads(table: pd.DataFrame, relations: Sequence[str] | None = None) -> Figure:
    """Accuracy (%) of each relation against the number of heads h, at a fixed model width.

    Args:
        table: DataFrame indexed by head count h (ints) with one accuracy column (a fraction in
            [0, 1]) per relation, e.g. from ``experiments.head_count.head_count_table`` (its
            "d_head" column labels the x ticks when present).
        relations: the columns to draw (default: every column except "d_head" and "parameters").

    Returns:
        A ``Figure`` with one axes: one line with markers per relation, h on a log-2 axis.

    Raises:
        TypeError, ValueError: if ``table`` is not a DataFrame, is empty, or lacks a relation column.
    """
    check_instance("table", table, pd.DataFrame, "pandas.DataFrame")
    if table.empty:
        raise ValueError("table must hold at least one row, got an empty DataFrame")
    if relations is None:
        relations = [c for c in table.columns if c not in ("d_head", "parameters")]
    relations = list(relations)
    missing = [r for r in relations if r not in table.columns]
    if not relations or missing:
        raise ValueError(f"relations must name columns of table {list(table.columns)}, got {relations}")
    heads = [int(h) for h in table.index]
    colours = [PALETTE[k] for k in ("projection", "output", "norm", "attention", "recurrent", "ffn")]
    fig = new_figure(6.4, 3.6)
    ax = fig.add_subplot()
    for k, relation in enumerate(relations):
        # line styles and shrinking markers keep lines that coincide (all at 100%) visible
        ax.plot(heads, 100 * table[relation].to_numpy(dtype=float), marker=_MARKERS[k % len(_MARKERS)],
                linestyle=_LINESTYLES[k % len(_LINESTYLES)], color=colours[k % len(colours)], linewidth=1.8,
                markersize=max(4.0, 10.0 - 2.0 * k), label=relation)
    ax.set_xscale("log", base=2)
    labels = ([f"{h}\n($d_k$={int(d)})" for h, d in zip(heads, table["d_head"])] if "d_head" in table.columns
              else [str(h) for h in heads])
    ax.set_xticks(heads, labels)
    ax.minorticks_off()
    ax.set_xlabel("heads h at a fixed $d_{model}$")
    ax.set_ylabel("test accuracy (%)")
    ax.legend(title="relation", frameon=False, loc="lower right")
    return fig


@exhibit
def plot_head_count_study(curves: Sequence[tuple[int, pd.DataFrame]], steps: Sequence[tuple[int, float]],
                          max_steps: int, threshold: float, chance: float, d_model: int = 32) -> Figure:
    """Learning curves and steps to threshold of an ensemble, per number of heads h.

    Args:
        curves: (h, curve) pairs, one per run: the curve's index is the step and its "worst" column
            the lowest accuracy over the lookups (``experiments.head_count.train_with_curve``).
        steps: (h, steps to threshold) pairs, one per run; NaN for a run that did not reach it.
        max_steps: the training budget (where the runs that did not reach the threshold are drawn).
        threshold: the accuracy threshold (a fraction), drawn as a line on the left panel.
        chance: the accuracy of guessing without looking (a fraction), drawn as a line.
        d_model: the models' width, for the head widths d_k = d_model / h on the x axis.

    Returns:
        A ``Figure`` with two axes: left, every run's worst-lookup accuracy (%) against the step
        (one colour per h, y axis from 0); right, every run's steps to threshold as a point per h,
        with the runs that did not reach it as open triangles at the budget.

    Raises:
        TypeError, ValueError: for empty or malformed inputs.
    """
    d_model = check_int("d_model", d_model, minimum=1)
    return _learning_study(curves, steps, max_steps, threshold, chance, legend=lambda h: f"h = {h}",
                           tick=lambda h: f"{h}\n($d_k$={d_model // h})", xlabel=f"heads h at $d_{{model}}$ = {d_model}")


@exhibit
def plot_kv_heads_study(curves: Sequence[tuple[int, pd.DataFrame]], steps: Sequence[tuple[int, float]],
                        max_steps: int, threshold: float, chance: float, cache_per_token: dict[int, int],
                        num_heads: int = 4) -> Figure:
    """Learning curves and steps to threshold of an ensemble, per number of key/value heads G (GQA, MQA).

    Args:
        curves: (G, curve) pairs, one per run (``experiments.kv_heads.KVRun.curve``).
        steps: (G, steps to threshold) pairs, one per run; NaN for a run that did not reach it.
        max_steps, threshold, chance: as in :func:`plot_head_count_study`.
        cache_per_token: G -> numbers the layer caches per token (2 G d_k), printed under each G.
        num_heads: the query heads H, to name G = H "MHA" and G = 1 "MQA".

    Returns:
        A ``Figure`` laid out as :func:`plot_head_count_study`'s, one colour per G, largest G first.

    Raises:
        TypeError, ValueError: for empty or malformed inputs, or a G without its cache size.
    """
    check_instance("cache_per_token", cache_per_token, dict, "a dict G -> numbers cached per token")
    num_heads = check_int("num_heads", num_heads, minimum=1)
    groups = {int(g) for g, _ in list(curves)} | {int(g) for g, _ in list(steps)}
    missing = sorted(groups - set(cache_per_token))
    if missing:
        raise ValueError(f"cache_per_token must hold every G of the runs, missing {missing}")

    def name(g: int) -> str:
        return {num_heads: "MHA", 1: "MQA"}.get(g, "GQA")

    return _learning_study(curves, steps, max_steps, threshold, chance, legend=lambda g: f"G = {g} ({name(g)})",
                           tick=lambda g: f"G = {g} ({name(g)})\n{cache_per_token[g]} / token",
                           xlabel=f"key/value heads G of {num_heads} query heads\n(numbers cached per token)",
                           descending=True, legend_loc="center right")


def _learning_study(curves, steps, max_steps, threshold, chance, legend, tick, xlabel, descending=False,
                    legend_loc="lower right") -> Figure:
    """The two panels of the ensemble studies: learning curves (left), steps to threshold (right)."""
    curves, steps = list(curves), list(steps)
    if not curves or not steps:
        raise ValueError("curves and steps must each hold at least one run")
    for h, curve in curves:
        check_int("curves' group", h, minimum=1)
        check_instance("curve", curve, pd.DataFrame, "pandas.DataFrame")
        if "worst" not in curve.columns:
            raise ValueError(f"each curve must have a 'worst' column, got {list(curve.columns)}")
    max_steps = check_int("max_steps", max_steps, minimum=1)
    for name, value in (("threshold", threshold), ("chance", chance)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be a fraction in [0, 1], got {value!r}")
    heads = sorted({h for h, _ in curves} | {int(h) for h, _ in steps}, reverse=descending)
    colours = {h: PALETTE[k] for h, k in zip(heads, ("attention", "projection", "output", "norm", "recurrent", "ffn"))}
    fig = new_figure(9.0, 3.8)
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.5, 1.0]})
    labelled = set()
    for h, curve in curves:
        left.plot(curve.index, 100 * curve["worst"].to_numpy(dtype=float), color=colours[h], linewidth=1.2,
                  alpha=0.8, label=None if h in labelled else legend(h))
        labelled.add(h)
    left.axhline(100 * threshold, color="black", linestyle="--", linewidth=1.0)
    left.text(0, 100 * threshold + 1.5, f"threshold {threshold:.0%}", fontsize=10, va="bottom")
    left.axhline(100 * chance, color="grey", linestyle=":", linewidth=1.2)
    left.text(max_steps, 100 * chance + 1.5, f"chance {chance:.1%}", fontsize=10, va="bottom", ha="right")
    left.set_ylim(0, 102)
    left.set_xlim(0, max_steps)
    left.set_xlabel("training step")
    left.set_ylabel("worst lookup: held-out accuracy (%)")
    left.legend(frameon=False, loc=legend_loc)
    left.set_title("every run (one line per seed)")
    rng = np.random.default_rng(len(steps))  # jitter only: a function of the data, not a seed of the course
    for position, h in enumerate(heads):
        values = np.array([s for g, s in steps if int(g) == h], dtype=float)
        x = position + rng.uniform(-0.15, 0.15, size=values.size)
        reached = ~np.isnan(values)
        right.scatter(x[reached], values[reached], color=colours[h], s=30, zorder=3)
        right.scatter(x[~reached], np.full((~reached).sum(), max_steps), facecolors="none", edgecolors=colours[h],
                      marker="^", s=40, zorder=3)
    right.axhline(max_steps, color="grey", linestyle=":", linewidth=1.0)
    right.text(len(heads) - 0.5, max_steps, f"budget {max_steps}:\nnot reached (△)", fontsize=10,
               va="top", ha="right")
    right.set_xticks(range(len(heads)), [tick(h) for h in heads])
    right.set_xlim(-0.5, len(heads) - 0.5)
    right.set_ylim(0, max_steps * 1.08)
    right.set_xlabel(xlabel)
    right.set_ylabel(f"steps until every lookup ≥ {threshold:.0%}")
    right.set_title("steps to threshold (one point per seed)")
    return fig
