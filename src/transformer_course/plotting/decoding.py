"""Figures of how the original Transformer was trained and decoded (DL0035) and of exposure bias (DL0036)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from matplotlib.figure import Figure

from transformer_course._exhibit import exhibit
from transformer_course._validation import check_int
from transformer_course.experiments.training import transformer_learning_rate
from .style import PALETTE, new_figure


@exhibit
def plot_learning_rate_schedule(d_models: Sequence[int] = (512,), warmup_steps: int = 4000,
                                steps: int = 100_000) -> Figure:
    """lrate = d^-0.5 min(step^-0.5, step warmup^-1.5) against the step, one curve per d_model, peak marked.

    Raises:
        ValueError: for an empty ``d_models`` or non-positive sizes.
    """
    if not d_models:
        raise ValueError("d_models must hold at least one width, got none")
    warmup_steps = check_int("warmup_steps", warmup_steps, minimum=1)
    steps = check_int("steps", steps, minimum=warmup_steps)
    figure = new_figure(6.4, 3.4)
    ax = figure.add_subplot()
    grid = sorted(set(range(1, steps + 1, max(1, steps // 2000))) | {warmup_steps, steps})
    colours = [PALETTE["projection"], PALETTE["output"], PALETTE["norm"]]
    for index, d_model in enumerate(d_models):
        d_model = check_int("d_model", d_model, minimum=1)
        rates = [transformer_learning_rate(step, d_model, warmup_steps) for step in grid]
        colour = colours[index % len(colours)]
        ax.plot(grid, rates, color=colour, linewidth=1.6, label=f"d_model = {d_model}")
        peak = transformer_learning_rate(warmup_steps, d_model, warmup_steps)
        ax.plot([warmup_steps], [peak], marker="o", color=colour, markersize=5)
        ax.annotate(f"peak {peak:.2e} at step {warmup_steps:,}", (warmup_steps, peak), xytext=(8, 4),
                    textcoords="offset points", fontsize=9, color=colour)
    ax.axvline(warmup_steps, color="black", linestyle="--", linewidth=0.8)
    ax.set_xlabel("training step")
    ax.set_ylabel("learning rate")
    ax.set_title(f"The paper's schedule: linear warm-up over {warmup_steps:,} steps, then 1/√step")
    ax.legend(frameon=False, fontsize=9)
    return figure


@exhibit
def plot_label_smoothing(plain: Sequence, smoothed: Sequence) -> Figure:
    """Per seed: mean confidence against per-token accuracy, without and with label smoothing (pairs joined).

    Points below the diagonal are underconfident (they are right more often than they claim),
    points above it overconfident. ``plain`` and ``smoothed`` are ``experiments.decoding.DecodingRun``
    lists of the same seeds.
    """
    if not plain or len(plain) != len(smoothed):
        raise ValueError("plain and smoothed must be non-empty and of one length")
    figure = new_figure(6.4, 4.0)
    ax = figure.add_subplot()
    for p, s in zip(plain, smoothed):
        ax.plot([p.token_accuracy, s.token_accuracy], [p.confidence, s.confidence], color=PALETTE["neutral"],
                linewidth=1.0, zorder=1)
    ax.scatter([r.token_accuracy for r in plain], [r.confidence for r in plain], color=PALETTE["projection"],
               s=22, zorder=2, label="cross-entropy (ε = 0)")
    ax.scatter([r.token_accuracy for r in smoothed], [r.confidence for r in smoothed], color=PALETTE["output"],
               s=22, marker="s", zorder=2, label=f"label smoothing (ε = {smoothed[0].label_smoothing:g})")
    values = [r.token_accuracy for r in (*plain, *smoothed)] + [r.confidence for r in (*plain, *smoothed)]
    low, high = min(values) - 0.02, min(1.0, max(values) + 0.02)
    ax.plot([low, high], [low, high], color="black", linestyle="--", linewidth=0.8, label="confidence = accuracy")
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.set_aspect("equal")
    ax.set_xlabel("per-token accuracy (teacher forcing, held out)")
    ax.set_ylabel("mean top probability (confidence)")
    ax.set_title(f"{len(plain)} seeds, each trained both ways (pairs joined)")
    ax.legend(frameon=False, fontsize=9, loc="upper left")
    return figure


@exhibit
def plot_exposure_bias(runs: Sequence) -> Figure:
    """Per output position: accuracy with teacher forcing and with free-running (greedy) decoding, over seeds.

    Lines are the median over seeds, bands the range; ``runs`` are ``experiments.decoding.DecodingRun``.
    """
    if not runs:
        raise ValueError("runs must hold at least one run, got none")
    figure = new_figure(6.4, 3.6)
    ax = figure.add_subplot()
    for name, colour, marker in (("forced_by_position", PALETTE["projection"], "o"),
                                 ("free_by_position", PALETTE["output"], "s")):
        values = torch.stack([getattr(run, name) for run in runs])  # (seeds, T)
        positions = range(values.shape[1])
        label = "teacher forcing (reads the reference)" if name.startswith("forced") else "free running (reads its own output)"
        ax.fill_between(positions, values.min(0).values, values.max(0).values, color=colour, alpha=0.18, linewidth=0)
        ax.plot(positions, values.median(0).values, color=colour, marker=marker, markersize=4, label=label)
    ticks = list(range(runs[0].forced_by_position.shape[0]))
    ax.set_xticks(ticks, [str(t) for t in ticks[:-1]] + ["<eos>"])
    ax.set_xlabel("output position")
    ax.set_ylabel("accuracy (held-out sources)")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"Median and range over {len(runs)} seeds")
    ax.legend(frameon=False, fontsize=9, loc="lower left")
    return figure
