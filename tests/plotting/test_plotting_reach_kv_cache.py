"""Tests for the DL0028 reach grid figures and the DL0036 KV-cache FLOP figure."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from matplotlib.figure import Figure

from transformer_course.experiments.window_reach import REACH_GRID, ReachGridResult

from transformer_course.plotting.kv_cache import plot_decode_flops
from transformer_course.plotting.reach import plot_reach_cliff, plot_reach_learning


def _grid_result():
    """A synthetic grid: 100% in reach, 12.5% beyond, 2 seeds per cell."""
    settings = REACH_GRID
    rows = []
    for depth in settings.depths:
        for distance, global_query in settings.cells(depth):
            reach = settings.seq_len if global_query else settings.reach(depth)
            for seed in range(2):
                rows.append({"layers L": depth, "distance D": distance, "global query": global_query, "seed": seed,
                             "reach": reach, "in reach": reach >= distance, "hops": settings.hops(distance),
                             "accuracy (%)": 100.0 if reach >= distance else 12.5,
                             "steps to threshold": 50.0 * (seed + 1) if reach >= distance else float("nan")})
    table = pd.DataFrame(rows)
    return ReachGridResult(table, torch.rand(len(table), settings.steps), settings)


def test_reach_cliff_draws_every_seed_the_medians_and_the_reach_lines():
    result = _grid_result()
    fig = plot_reach_cliff(result)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    vertical = sorted(line.get_xdata()[0] for line in ax.lines if line.get_linestyle() == "--")
    assert vertical == [3.5, 5.5]  # the edge of reach L (w - 1) + 1 of each depth, + 0.5
    points = sum(len(c.get_offsets()) for c in ax.collections)
    assert points == len(result.table)  # every model of every seed, window and global
    assert any(list(line.get_ydata()) == [12.5, 12.5] for line in ax.lines)


def test_reach_learning_has_one_curve_and_one_row_of_points_per_cell():
    result = _grid_result()
    fig = plot_reach_learning(result)
    left, right = fig.axes
    assert len([line for line in left.lines if line.get_label().startswith("L = ")]) == 4
    assert [t.get_text() for t in right.get_yticklabels()] == ["L = 1, D = 3", "L = 2, D = 5", "L = 2, D = 3",
                                                              "L = 2, D = 8, global"]
    with pytest.raises(ValueError, match="cells"):
        plot_reach_learning(result, cells=[(1, 7, False)])


def _cost_table() -> pd.DataFrame:
    return pd.DataFrame({"FLOPs without cache": [10, 40], "formula without cache": [10, 40],
                         "FLOPs with cache": [5, 10], "formula with cache": [5, 10]},
                        index=pd.Index([8, 16], name="tokens generated n"))


def test_decode_flops_plot_has_two_panels():
    fig = plot_decode_flops(_cost_table(), [1, 2, 3], [1, 1, 1])
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    assert fig.axes[0].get_xscale() == "log" and fig.axes[0].get_yscale() == "log"


@pytest.mark.parametrize("call, match", [
    (lambda: plot_reach_cliff("table"), "result"),
    (lambda: plot_reach_learning(None), "result"),
    (lambda: plot_decode_flops([1], [1], [1]), "table"),
    (lambda: plot_decode_flops(_cost_table().drop(columns="formula with cache"), [1], [1]), "formula with cache"),
    (lambda: plot_decode_flops(_cost_table(), [], [1]), "steps_without"),
])
def test_bad_inputs_name_the_argument(call, match):
    with pytest.raises((TypeError, ValueError), match=match):
        call()
