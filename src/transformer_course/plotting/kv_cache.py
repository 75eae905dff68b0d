"""What the KV cache saves, drawn from counted FLOPs: per generation run and per decoding step."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from matplotlib.figure import Figure

from transformer_course._exhibit import exhibit
from .style import PALETTE, new_figure

COST_COLUMNS = ("FLOPs without cache", "formula without cache", "FLOPs with cache", "formula with cache")


@exhibit
def plot_decode_flops(table: pd.DataFrame, steps_without: Sequence[int], steps_with: Sequence[int]) -> Figure:
    """Two panels: FLOPs per run against tokens generated (log-log), and FLOPs of each decoding step.

    Args:
        table: indexed by the number of generated tokens n, with the columns ``COST_COLUMNS``
            (as returned by ``experiments.kv_cache_cost.decode_cost_table``); counted values are
            drawn as markers, the closed form as lines.
        steps_without, steps_with: counted FLOPs of steps t = 1, 2, ... without and with the cache.

    Returns:
        The figure.

    Raises:
        TypeError: if ``table`` is not a DataFrame.
        ValueError: if it lacks a column, or a step list is empty.
    """
    if not isinstance(table, pd.DataFrame):
        raise TypeError(f"table must be a pandas DataFrame, got {type(table).__name__}")
    missing = [c for c in COST_COLUMNS if c not in table.columns]
    if table.empty or missing:
        raise ValueError(f"table must be a non-empty DataFrame with columns {COST_COLUMNS}, missing {missing}")
    for name, steps in (("steps_without", steps_without), ("steps_with", steps_with)):
        if len(steps) == 0:
            raise ValueError(f"{name} must hold at least one step's FLOPs, got {steps!r}")
    fig = new_figure(8.0, 3.6)
    runs, per_step = fig.subplots(1, 2)
    styles = (("without cache", PALETTE["output"], "o"), ("with cache", PALETTE["projection"], "s"))
    n = table.index.to_numpy()
    for label, color, marker in styles:
        runs.plot(n, table[f"formula {label}"] / 1e6, "-", color=color, linewidth=1.2)
        runs.plot(n, table[f"FLOPs {label}"] / 1e6, marker, color=color, label=f"{label} (counted; line: formula)")
    runs.set_xscale("log", base=2)
    runs.set_yscale("log")
    runs.set_xticks(list(n), [str(v) for v in n])
    runs.set_xlabel("tokens generated n")
    runs.set_ylabel("MFLOPs per run")
    runs.set_title("whole run (log-log)")
    runs.legend(fontsize=9, loc="upper left")
    for label, color, steps in (("without cache", PALETTE["output"], steps_without),
                                ("with cache", PALETTE["projection"], steps_with)):
        per_step.plot(range(1, len(steps) + 1), [s / 1e6 for s in steps], ".-", color=color, label=label,
                      markersize=4, linewidth=1)
    per_step.set_xlabel("decoding step t (prefix length)")
    per_step.set_ylabel("MFLOPs of step t")
    per_step.set_title("one step")
    per_step.legend(fontsize=9, loc="upper left")
    return fig
