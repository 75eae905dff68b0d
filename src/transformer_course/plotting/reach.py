"""DL0028's training grid: accuracy against distance for each depth (the reach cliff) and the learning curves."""

from __future__ import annotations

import torch
from matplotlib.figure import Figure

from transformer_course._exhibit import exhibit
from transformer_course._validation import check_instance
from transformer_course.experiments.window_reach import ReachGridResult
from .style import PALETTE, new_figure

_DEPTH_COLORS = (PALETTE["projection"], PALETTE["attention"], PALETTE["norm"], PALETTE["recurrent"], PALETTE["ffn"])


def _color(index: int) -> str:
    return _DEPTH_COLORS[index % len(_DEPTH_COLORS)]


@exhibit
def plot_reach_cliff(result: ReachGridResult) -> Figure:
    """Held-out accuracy against the distance D, one colour per depth L: every seed a point, the median a line.

    A dashed vertical line of the depth's colour marks the edge of its reach, L (w - 1) + 1; the
    global-query models (same weights, the last row of the mask full) are drawn as stars at their
    distance; the dotted horizontal line is chance, 1 / K.

    Args:
        result: what ``experiments.window_reach.reach_grid`` returned.

    Returns:
        The figure.
    """
    check_instance("result", result, ReachGridResult, "ReachGridResult")
    g, table = result.settings, result.table
    fig = new_figure(6.4, 3.9)
    ax = fig.subplots()
    depths = sorted(table["layers L"].unique())
    spread = 0.12
    for index, depth in enumerate(depths):
        color, offset = _color(index), (index - (len(depths) - 1) / 2) * spread
        rows = table[(table["layers L"] == depth) & ~table["global query"]]
        medians = rows.groupby("distance D")["accuracy (%)"].median()
        ax.scatter(rows["distance D"] + offset, rows["accuracy (%)"], s=12, color=color, alpha=0.6, linewidths=0)
        ax.plot(medians.index + offset, medians.values, "-o", color=color, markersize=4,
                label=f"{depth} window layer{'s' if depth > 1 else ''} (reach {g.reach(depth)})")
        ax.axvline(g.reach(depth) + 0.5, color=color, linestyle="--", linewidth=1)
        glob = table[(table["layers L"] == depth) & table["global query"]]
        ax.scatter(glob["distance D"] + offset, glob["accuracy (%)"], marker="*", s=60, color=color,
                   edgecolors="black", linewidths=0.4, label="global query, same weights" if index == len(depths) - 1 else None)
    chance = 100 / g.num_symbols
    ax.axhline(chance, color="#555555", linestyle=":", linewidth=1.2)
    ax.text(table["distance D"].min() - 0.4, chance + 2, f"chance {chance:.1f}%", fontsize=9, color="#555555")
    ax.set_xticks(sorted(table["distance D"].unique()))
    ax.set_xlabel("distance D of the answer from the end (dashed: edge of reach, L (w − 1) + 1)")
    ax.set_ylabel("held-out accuracy (%)")
    ax.set_ylim(0, 108)
    ax.legend(fontsize=9, loc="center left", frameon=False)
    return fig


def _running_mean(curves: torch.Tensor, smooth: int) -> torch.Tensor:
    return curves.unfold(1, smooth, 1).mean(dim=-1)  # (E, steps - smooth + 1)


@exhibit
def plot_reach_learning(result: ReachGridResult, cells: list[tuple[int, int, bool]] | None = None) -> Figure:
    """Learning curves and steps to threshold of chosen cells, over the seeds.

    Left: the running mean of the accuracy on the training batches (each fresh data), median over
    the seeds as a line, the range as a band. Right: the step at which each seed reaches the
    threshold (a point per seed; an open circle at the budget for a seed that never does).

    Args:
        result: what ``experiments.window_reach.reach_grid`` returned.
        cells: (L, D, global query) per curve; default: the edge of reach of each depth (one hop
            per layer), the deepest stack at D = 3 (one hop), and the deepest stack's global query.

    Returns:
        The figure.
    """
    check_instance("result", result, ReachGridResult, "ReachGridResult")
    g, table = result.settings, result.table
    deepest = max(g.depths)
    if cells is None:
        cells = [(depth, g.reach(depth), False) for depth in g.depths] + [(deepest, 3, False),
                                                                          (deepest, g.global_distance, True)]
    fig = new_figure(8.6, 3.9)
    left, right = fig.subplots(1, 2, width_ratios=(1.6, 1))
    steps = torch.arange(g.smooth, g.steps + 1)
    for index, (depth, distance, global_query) in enumerate(cells):
        chosen = ((table["layers L"] == depth) & (table["distance D"] == distance)
                  & (table["global query"] == global_query)).to_numpy()
        if not chosen.any():
            raise ValueError(f"cells must name trained cells (L, D, global query), got {(depth, distance, global_query)}")
        hops = int(table.loc[chosen, "hops"].iloc[0])
        label = (f"L = {depth}, D = {distance}" + (", global query" if global_query else "")
                 + f" ({hops} hop{'s' if hops > 1 else ''})")
        color = _color(index)
        smooth = 100 * _running_mean(result.curves[torch.tensor(chosen)], g.smooth)  # (S, steps')
        left.fill_between(steps, smooth.min(dim=0).values, smooth.max(dim=0).values, color=color, alpha=0.15, linewidth=0)
        left.plot(steps, smooth.median(dim=0).values, color=color, label=label, linewidth=1.6,
                  linestyle="--" if global_query else "-")
        reached = table.loc[chosen, "steps to threshold"]
        y = [index] * len(reached)
        right.scatter(reached, y, color=color, s=18)
        never = reached.isna().sum()
        if never:
            right.scatter([g.steps] * never, [index] * never, facecolors="none", edgecolors=color, s=30)
    left.axhline(100 * g.threshold, color="#555555", linestyle=":", linewidth=1)
    left.set_xlabel(f"training step (running mean of {g.smooth} batches)")
    left.set_ylabel("accuracy on the training batch (%)")
    left.set_ylim(0, 105)
    left.legend(fontsize=9, loc="lower right", frameon=False)
    right.set_yticks(range(len(cells)), [f"L = {L}, D = {D}" + (", global" if q else "") for L, D, q in cells], fontsize=10)
    right.invert_yaxis()
    right.set_xlabel(f"steps to {100 * g.threshold:.0f}% (one point per seed)")
    right.set_xlim(0, g.steps * 1.05)
    return fig
