"""The capstone's figures: the phase change against the loss curves, the heads' scores, the ablation, a pattern."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure

from transformer_course._exhibit import exhibit
from transformer_course._validation import check_tensor
from transformer_course.experiments.induction_heads import (CAPSTONE, CapstoneSettings, InductionRun, icl_scores, phase_step,
                                                            top_prefix_matching)
from .style import PALETTE, new_figure

_SEED = dict(color="#999999", linewidth=0.6, alpha=0.6)


def _check_runs(runs: object) -> list[InductionRun]:
    runs = list(runs)
    if not runs or not all(isinstance(run, InductionRun) for run in runs):
        raise TypeError("runs must be a non-empty sequence of InductionRun")
    return runs


def _median_line(ax, steps: np.ndarray, curves: np.ndarray, color: str, label: str) -> None:
    for curve in curves:
        ax.plot(steps, curve, **_SEED)
    ax.plot(steps, np.median(curves, axis=0), color=color, linewidth=2, label=label)


def _smoothed(losses: Sequence[float], width: int) -> np.ndarray:
    values = np.asarray(losses, dtype=float)
    return np.convolve(values, np.ones(width) / width, mode="valid")


@exhibit
def plot_phase_change(runs: Sequence[InductionRun], settings: CapstoneSettings = CAPSTONE) -> Figure:
    """Four panels against training step, every seed a thin grey line, the median a thick one.

    (a) training loss (moving average over ``eval_every`` steps) and held-out text loss; (b) loss on
    the first and on the later copies of repeated random strings; (c) the highest prefix-matching
    score of any head, with the induction threshold dotted; (d) the in-context learning score on
    held-out text. A dashed line in every panel marks the median phase step (the first probe at
    which some head reaches the threshold).
    """
    runs = _check_runs(runs)
    steps = runs[0].record["step"].to_numpy()
    phase = float(np.nanmedian([phase_step(run.record, settings.induction_threshold) for run in runs]))
    fig = new_figure(7.2, 5.6)
    (a, b), (c, d) = fig.subplots(2, 2, sharex=True)
    width = settings.eval_every
    train = np.stack([_smoothed(run.losses, width) for run in runs])
    _median_line(a, np.arange(width, len(runs[0].losses) + 1), train, PALETTE["projection"], "training (text + repeats)")
    _median_line(a, steps, np.stack([run.record["held_out_loss"] for run in runs]), PALETTE["output"], "held-out text")
    a.set_ylabel("loss (nats per character)")
    a.set_title("(a) loss", loc="left")
    _median_line(b, steps, np.stack([run.record["first_repeat_loss"] for run in runs]), PALETTE["recurrent"],
                 "first copy")
    _median_line(b, steps, np.stack([run.record["later_repeat_loss"] for run in runs]), PALETTE["norm"],
                 "second copy")
    b.set_ylabel("loss on repeated random strings")
    b.set_title("(b) a random string, then the same again", loc="left")
    _median_line(c, steps, np.stack([top_prefix_matching(run.record) for run in runs]), PALETTE["attention"],
                 "best head")
    c.axhline(settings.induction_threshold, color="#555555", linestyle=":", linewidth=1.2)
    c.text(steps[-1], settings.induction_threshold + 0.02, f"threshold {settings.induction_threshold:g}", fontsize=9,
           color="#555555", ha="right")
    c.set_ylabel("prefix-matching score")
    c.set_ylim(0, 1)
    c.set_title("(c) the best head's prefix matching", loc="left")
    late, early = settings.icl_late, settings.icl_early
    _median_line(d, steps, np.stack([icl_scores(run.record, settings) for run in runs]), PALETTE["ffn"],
                 f"positions {late.start}–{late.stop - 1} minus {early.start}–{early.stop - 1}")
    d.axhline(0, color="#555555", linewidth=0.8)
    d.set_ylabel("in-context learning score (nats)")
    d.set_title("(d) late minus early position, held-out text", loc="left")
    for ax in (a, b, c, d):
        ax.axvline(phase, color="black", linestyle="--", linewidth=1)
        ax.legend(fontsize=9, frameon=False, loc="best")
    for ax in (c, d):
        ax.set_xlabel("training step")
    return fig


@exhibit
def plot_head_scores(runs: Sequence[InductionRun]) -> Figure:
    """Every head of every seed at the end of training: prefix-matching score (x) against copying score (y).

    Orange: heads identified as induction heads; grey: the others; one marker shape per layer.
    """
    runs = _check_runs(runs)
    fig = new_figure(6.4, 4.0)
    ax = fig.subplots()
    markers = ("o", "s", "^", "D")
    for layer in range(len(runs[0].copying)):
        for chosen, color in ((False, "#999999"), (True, PALETTE["attention"])):
            xs, ys = [], []
            for run in runs:
                prefix = run.record["prefix_matching"].iloc[-1]
                for head, copy in enumerate(run.copying[layer]):
                    if ((layer, head) in run.induction) == chosen:
                        xs.append(prefix[layer][head])
                        ys.append(copy)
            if xs:
                kind = "induction head" if chosen else "other head"
                ax.scatter(xs, ys, s=22, color=color, marker=markers[layer % len(markers)], alpha=0.8,
                           edgecolors="black" if chosen else "none", linewidths=0.4,
                           label=f"layer {layer}, {kind}")
    ax.axhline(0, color="#555555", linewidth=0.8)
    ax.set_xlabel("prefix-matching score (attention to the token after the earlier occurrence)")
    ax.set_ylabel("copying score of the OV circuit")
    ax.set_xlim(-0.02, 1)
    ax.set_ylim(-1.05, 1.05)
    ax.legend(fontsize=9, frameon=False, loc="lower right")
    return fig


@exhibit
def plot_ablation(runs: Sequence[InductionRun]) -> Figure:
    """Repeat advantage (first-copy loss minus second-copy loss) intact and with heads zeroed: seeds as points."""
    runs = _check_runs(runs)
    conditions = list(runs[0].advantage)
    fig = new_figure(6.0, 3.4)
    ax = fig.subplots()
    colors = (PALETTE["projection"], PALETTE["output"], PALETTE["norm"])
    for index, condition in enumerate(conditions):
        values = np.array([run.advantage[condition] for run in runs])
        jitter = np.linspace(-0.12, 0.12, len(values))
        ax.scatter(index + jitter, values, s=20, color=colors[index % len(colors)], alpha=0.8)
        ax.plot([index - 0.25, index + 0.25], [np.median(values)] * 2, color="black", linewidth=2)
    ax.axhline(0, color="#555555", linewidth=0.8)
    ax.set_xticks(range(len(conditions)), conditions)
    ax.set_ylabel("repeat advantage (nats)")
    return fig


@exhibit
def plot_attention_patterns(weights: torch.Tensor, tokens: str, titles: Sequence[str]) -> Figure:
    """Heat maps of attention patterns (K, T, T) over one sequence, its characters as tick labels."""
    check_tensor("weights", weights, ndim=3, floating=True)
    if len(titles) != weights.shape[0] or len(tokens) != weights.shape[-1]:
        raise ValueError("need one title per pattern and one character per position")
    k = weights.shape[0]
    fig = new_figure(3.4 * k, 3.6)
    axes = np.atleast_1d(fig.subplots(1, k))
    ticks = range(0, len(tokens), max(1, len(tokens) // 16))
    labels = [repr(tokens[i])[1:-1] or " " for i in ticks]
    for ax, pattern, title in zip(axes, weights, titles):
        ax.imshow(pattern.detach().cpu().numpy(), cmap="viridis", vmin=0, vmax=1)
        ax.set_title(title, fontsize=10)
        ax.set_xticks(list(ticks), labels, fontsize=9)
        ax.set_yticks(list(ticks), labels, fontsize=9)
        ax.set_xlabel("key")
    axes[0].set_ylabel("query")
    return fig


@exhibit
def ablation_table(runs: Sequence[InductionRun]) -> pd.DataFrame:
    """Median, min and max of the repeat advantage (nats) in each condition, over the seeds."""
    runs = _check_runs(runs)
    frame = pd.DataFrame([run.advantage for run in runs])
    return frame.agg(["median", "min", "max"]).T.rename_axis("repeat advantage (nats)")
