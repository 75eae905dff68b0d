"""Accuracy of trained window stacks against their reach: the bar chart of DL0028's training experiment."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from transformer_course._exhibit import exhibit
from .style import PALETTE, new_figure

REACH_COLUMNS = ("reach (positions)", "distance D", "accuracy (%)", "chance (%)")


@exhibit
def plot_reach_accuracy(table: pd.DataFrame) -> Figure:
    """One bar per trained model: held-out accuracy, with the chance line and "reach vs D" under each bar.

    Args:
        table: indexed by model name, with the columns ``REACH_COLUMNS`` (as returned by
            ``experiments.window_reach.reach_experiment``).

    Returns:
        The figure. Bars of models whose reach is below D are grey, the others blue.

    Raises:
        TypeError: if ``table`` is not a DataFrame.
        ValueError: if it is empty or lacks a column.
    """
    if not isinstance(table, pd.DataFrame):
        raise TypeError(f"table must be a pandas DataFrame, got {type(table).__name__}")
    missing = [c for c in REACH_COLUMNS if c not in table.columns]
    if table.empty or missing:
        raise ValueError(f"table must be a non-empty DataFrame with columns {REACH_COLUMNS}, missing {missing}")
    fig = new_figure(6.0, 3.6)
    ax = fig.subplots()
    positions = range(len(table))
    in_reach = table["reach (positions)"] >= table["distance D"]
    colors = [PALETTE["projection"] if ok else "#999999" for ok in in_reach]
    bars = ax.bar(positions, table["accuracy (%)"], color=colors, width=0.6)
    for bar, accuracy in zip(bars, table["accuracy (%)"]):
        ax.text(bar.get_x() + bar.get_width() / 2, accuracy + 2, f"{accuracy:.1f}%", ha="center", va="bottom",
                fontsize=9)
    chance = float(table["chance (%)"].iloc[0])
    ax.axhline(chance, color=PALETTE["output"], linestyle="--", linewidth=1.2)
    ax.text(0.5, chance + 1.5, f"chance ({chance:.1f}%)", ha="center", va="bottom", fontsize=9,
            color=PALETTE["output"])  # between the first two bars
    labels = [f"{name}\nreach {reach} {'≥' if ok else '<'} D = {d}"
              for name, reach, d, ok in zip(table.index, table["reach (positions)"], table["distance D"], in_reach)]
    ax.set_xticks(list(positions), labels, fontsize=9)
    ax.set_ylim(0, 112)
    ax.set_ylabel("held-out accuracy (%)")
    return fig
