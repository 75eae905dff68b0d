"""Figures of the layer-normalization chapter: which axis the statistics run over, and gradient flow.

``plot_norm_axes`` shows a small batch of token vectors before and after LayerNorm (every row
standardized across its own features) beside BatchNorm (every column standardized across the
batch), with the mean and standard deviation of every row and column printed at the margins.
``plot_gradient_flow`` draws the tables of ``transformer_course.experiments.gradient_flow``;
``plot_placement_warmup`` those of ``transformer_course.experiments.placement_warmup``.
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
    figure = new_figure(9.0, 2 * (0.36 * n + 1.6))
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
            layer, columns "Post-LN" and "Pre-LN"), e.g. one per initialization; or from
            ``placement_warmup.gradient_norm_ensemble`` (columns (placement, seed)), drawn as the
            median over the seeds with a band from the smallest to the largest.

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
        if not {"Post-LN", "Pre-LN"} <= set(table.columns.get_level_values(0)):
            raise ValueError(f"profiles[{title!r}] must have columns 'Post-LN' and 'Pre-LN', got {list(table.columns)}")
    figure = new_figure(5.0 * len(profiles), 3.8)
    axes = np.atleast_1d(figure.subplots(1, len(profiles), sharey=True))
    for ax, (title, table) in zip(axes, profiles.items()):
        for label, colour, marker in (("Post-LN", _POST, "o"), ("Pre-LN", _PRE, "s")):
            values = table[label]
            if isinstance(values, pd.DataFrame):  # one column per seed: median line, min-max band
                ax.fill_between(table.index, values.min(axis=1), values.max(axis=1), color=colour, alpha=0.2,
                                linewidth=0)
                values = values.median(axis=1)
                label = f"{label} (median, range of {table[label].shape[1]} seeds)"
            ax.plot(table.index, values, marker=marker, markersize=4, color=colour, label=label)
        ax.set_xlabel("layer (1 = next to the input)")
        ax.set_title(title)
        ax.set_ylim(bottom=0)
    axes[0].set_ylabel("‖∂loss/∂W²‖ (FFN output matrix)")
    axes[0].legend(frameon=False)
    return figure


@exhibit
def plot_placement_warmup(runs: pd.DataFrame, chance: float, warmup_steps: int, window: int = 10,
                          baseline: float | None = None) -> Figure:
    """Training loss of every run of the placement x warm-up experiment, one panel per placement.

    Each panel draws one line per seed and warm-up setting (running mean of ``window`` steps),
    a dashed line at the loss of a uniform guess, and a dotted line where the warm-up ends.

    Args:
        runs: from ``placement_warmup.placement_warmup_runs`` (columns (placement, warm-up, seed)).
        chance: the loss of a uniform guess, ln V (``placement_warmup.chance_loss``).
        warmup_steps: length of the warm-up of the "warm-up" runs, marked on the step axis.
        window: length of the running mean (1 = raw losses).
        baseline: if given, the loss of the best model that reads only positions
            (``placement_warmup.position_only_baseline``), drawn as a dash-dotted line.

    Returns:
        A figure with a "Post-LN" and a "Pre-LN" panel sharing the y axis.

    Raises:
        TypeError: if ``runs`` is not a DataFrame.
        ValueError: if ``runs`` lacks the (placement, warm-up, seed) columns, or ``chance``,
            ``warmup_steps`` or ``window`` is not positive.
    """
    if not isinstance(runs, pd.DataFrame):
        raise TypeError(f"runs must be a pandas DataFrame, got {type(runs).__name__}")
    if list(runs.columns.names) != ["placement", "warm-up", "seed"]:
        raise ValueError(f"runs must have columns (placement, warm-up, seed), got names {list(runs.columns.names)}")
    if not isinstance(chance, (int, float)) or not chance > 0:
        raise ValueError(f"chance must be a positive number (ln V), got {chance!r}")
    for name, value in (("warmup_steps", warmup_steps), ("window", window)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if baseline is not None and (not isinstance(baseline, (int, float)) or not 0 < baseline < chance):
        raise ValueError(f"baseline must be a number between 0 and chance ({chance}), got {baseline!r}")
    smooth = runs.rolling(window, min_periods=1).mean()
    colours = {"no warm-up": _POST, "warm-up": _PRE}
    placements = list(dict.fromkeys(runs.columns.get_level_values("placement")))
    top = max(chance + 0.6, 1.05 * float(smooth.max().max()))  # room for the chance label and the first steps
    figure = new_figure(min(4.3 * len(placements), 9.0), 3.6)  # at most 9 in wide: 9-pt text stays >= 9 px on the page
    axes = np.atleast_1d(figure.subplots(1, len(placements), sharey=True))
    for ax, placement in zip(axes, placements):
        for (warmup, seed), curve in smooth[placement].items():
            first_seed = seed == smooth[placement][warmup].columns[0]
            ax.plot(curve.index, curve, color=colours.get(warmup, "black"), linewidth=1.4, alpha=0.85,
                    label=(f"{warmup} ({warmup_steps} steps)" if warmup == "warm-up" else warmup)
                    if first_seed else None)
        ax.axhline(chance, color="black", linestyle="--", linewidth=1.0)
        ax.text(runs.index[-1], chance + 0.05, f"chance: {chance:.2f}", ha="right", va="bottom", fontsize=9)
        if baseline is not None:
            ax.axhline(baseline, color="dimgrey", linestyle="-.", linewidth=1.0)
            ax.text(runs.index[-1], baseline + 0.05, f"positions only: {baseline:.3f}", ha="right", va="bottom",
                    fontsize=9, color="dimgrey")
        ax.axvline(warmup_steps, color="grey", linestyle=":", linewidth=1.0)
        ax.text(warmup_steps + 1, 0.15, "end of\nwarm-up", fontsize=9, color="dimgrey", va="bottom")
        ax.set_title(placement)
        ax.set_xlabel("training step")
        ax.set_ylim(0, top)
    axes[0].set_ylabel(f"cross-entropy (running mean of {window})")
    if len(placements) > 2:  # narrow panels: the legend goes under them
        handles, labels = axes[0].get_legend_handles_labels()
        figure.legend(handles, labels, frameon=False, loc="outside lower center", ncol=2, title="one line per seed",
                      title_fontsize=9, fontsize=9)
    else:
        axes[0].legend(frameon=False, loc="lower right", title="one line per seed", title_fontsize=9, fontsize=9)
    return figure


_DEEP = PALETTE["norm"]
_CONDITION_STYLE = {("Post-LN", "no warm-up"): (_POST, "--", "o"), ("Post-LN", "warm-up"): (_POST, "-", "s"),
                    ("Pre-LN", "no warm-up"): (_PRE, "--", "^"), ("Pre-LN", "warm-up"): (_PRE, "-", "D"),
                    ("DeepNorm", "no warm-up"): (_DEEP, "--", "v"), ("DeepNorm", "warm-up"): (_DEEP, "-", "P")}


@exhibit
def plot_logit_growth(max_logits: Mapping[str, pd.DataFrame], losses: Mapping[str, pd.DataFrame] | None = None,
                      window: int = 5) -> Figure:
    """The largest attention logit during training (log scale), one line per seed, one colour per condition.

    Args:
        max_logits: condition name -> a table indexed by step with one column per seed (e.g. the
            ``max_logits`` of ``placement_warmup.placement_lr_sweep`` for one condition).
        losses: optionally the training losses laid out the same way, drawn in a second panel
            (running mean of ``window`` steps).
        window: length of the running mean of the loss panel.

    Returns:
        A figure with one panel (logits) or two (logits, loss); thin lines are seeds, thick ones
        the medians over the seeds.

    Raises:
        TypeError: if a table is not a DataFrame.
        ValueError: if ``max_logits`` is empty, a table is empty, or ``losses`` names other conditions.
    """
    if not isinstance(max_logits, Mapping) or not max_logits:
        raise ValueError("max_logits must be a non-empty mapping of condition -> DataFrame")
    if losses is not None and (not isinstance(losses, Mapping) or set(losses) != set(max_logits)):
        raise ValueError(f"losses must name the same conditions as max_logits {sorted(max_logits)}")
    for table in [*max_logits.values(), *(losses or {}).values()]:
        if not isinstance(table, pd.DataFrame):
            raise TypeError(f"every table must be a pandas DataFrame, got {type(table).__name__}")
        if table.empty:
            raise ValueError("every table must hold at least one step and one seed")
    colours = [_POST, _PRE, PALETTE["recurrent"], _DEEP, PALETTE["attention"]]  # in the order of ``max_logits``
    panels = [("largest attention logit q.k / sqrt(Dh)", max_logits, True)]
    if losses is not None:
        panels.append((f"training cross-entropy (running mean of {window})",
                       {name: table.rolling(window, min_periods=1).mean() for name, table in losses.items()}, False))
    figure = new_figure(5.0 * len(panels), 3.8)
    axes = np.atleast_1d(figure.subplots(1, len(panels)))
    for ax, (label, tables, log) in zip(axes, panels):
        for k, (name, table) in enumerate(tables.items()):
            colour = colours[k % len(colours)]
            ax.plot(table.index, table.to_numpy(), color=colour, linewidth=0.8, alpha=0.45)
            ax.plot(table.index, table.median(axis=1), color=colour, linewidth=2.4,
                    label=f"{name} (median of {table.shape[1]})")
        if log:
            ax.set_yscale("log")
        ax.set_xlabel("training step")
        ax.set_ylabel(label)
    axes[0].legend(frameon=False, fontsize=10, loc="upper left")
    return figure


@exhibit
def plot_lr_sweep(finals: pd.DataFrame, baseline: tuple[float, float], chance: tuple[float, float]) -> Figure:
    """Final loss and accuracy against the learning rate for the four placement x warm-up conditions.

    Every seed is a point (spread a little sideways so they do not hide each other); the line joins
    the medians over the seeds. Horizontal lines mark the uniform guess (chance) and the best model
    that ignores its input and uses only positions (``placement_warmup.position_only_baseline``).

    Args:
        finals: ``placement_warmup.PlacementSweep.finals`` (columns placement, warm-up, lr, seed,
            loss, accuracy).
        baseline: (loss, accuracy) of the position-only model.
        chance: (loss, accuracy) of a uniform guess, (ln V, 1 / V).

    Returns:
        A figure with a loss panel and an accuracy panel, learning rate on a log axis.

    Raises:
        TypeError: if ``finals`` is not a DataFrame.
        ValueError: if ``finals`` lacks a column, or ``baseline`` / ``chance`` is not a pair of
            positive numbers.
    """
    if not isinstance(finals, pd.DataFrame):
        raise TypeError(f"finals must be a pandas DataFrame, got {type(finals).__name__}")
    missing = {"placement", "warm-up", "lr", "seed", "loss", "accuracy"} - set(finals.columns)
    if missing or finals.empty:
        raise ValueError(f"finals must be a non-empty table with columns placement, warm-up, lr, seed, loss, "
                         f"accuracy; missing {sorted(missing)}")
    for name, pair in (("baseline", baseline), ("chance", chance)):
        if (not isinstance(pair, tuple) or len(pair) != 2
                or not all(isinstance(v, (int, float)) and v > 0 for v in pair)):
            raise ValueError(f"{name} must be a (loss, accuracy) pair of positive numbers, got {pair!r}")
    lrs = np.array(sorted(finals["lr"].unique()), dtype=float)
    step = float(np.log10(lrs[-1] / lrs[0]) / max(len(lrs) - 1, 1)) if len(lrs) > 1 else 1.0
    figure = new_figure(10.0, 4.2)
    axes = figure.subplots(1, 2)
    conditions = list(dict.fromkeys(zip(finals["placement"], finals["warm-up"])))
    for ax, metric, scale in ((axes[0], "loss", 1.0), (axes[1], "accuracy", 100.0)):
        for k, condition in enumerate(conditions):
            colour, style, marker = _CONDITION_STYLE.get(condition, ("black", "-", "o"))
            runs = finals[(finals["placement"] == condition[0]) & (finals["warm-up"] == condition[1])]
            offset = 10 ** ((k - (len(conditions) - 1) / 2) * 0.06 * step)  # side by side at each lr
            ax.scatter(runs["lr"] * offset, runs[metric] * scale, color=colour, marker=marker, s=14, alpha=0.55,
                       linewidths=0)
            medians = runs.groupby("lr")[metric].median() * scale
            ax.plot(medians.index * offset, medians, color=colour, linestyle=style, marker=marker, markersize=5,
                    label=f"{condition[0]}, {condition[1]}")
        index = 0 if metric == "loss" else 1
        ax.axhline(chance[index] * scale, color="black", linestyle=":", linewidth=1.0)
        ax.axhline(baseline[index] * scale, color="dimgrey", linestyle="-.", linewidth=1.0)
        ax.set_xscale("log")
        ax.set_xticks(lrs, [f"{lr:g}" for lr in lrs])
        ax.minorticks_off()
        ax.set_xlabel("peak learning rate (Adam)")
    axes[0].text(lrs[0], chance[0] + 0.03, f"uniform guess: ln V = {chance[0]:.2f}", fontsize=10, va="bottom")
    axes[0].text(lrs[0], baseline[0] + 0.03, f"positions only: {baseline[0]:.3f}", fontsize=10, va="bottom",
                 color="dimgrey")
    axes[1].text(lrs[0], chance[1] * 100 + 1, f"uniform guess: {chance[1]:.1%}", fontsize=10, va="bottom")
    axes[1].text(lrs[0], baseline[1] * 100 + 1, f"positions only: {baseline[1]:.1%}", fontsize=10, va="bottom",
                 color="dimgrey")
    axes[0].set_ylabel("held-out cross-entropy (nats)")
    axes[1].set_ylabel("held-out accuracy on the sorted tokens (%)")
    axes[0].set_ylim(0, max(chance[0] + 0.35, float(finals["loss"].max()) + 0.1))
    axes[1].set_ylim(0, 100)
    axes[0].legend(frameon=False, fontsize=10, loc="lower left")
    return figure
