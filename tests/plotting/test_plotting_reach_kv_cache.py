"""Tests for the DL0028 reach bar chart and the DL0036 KV-cache FLOP figure."""

from __future__ import annotations

import pandas as pd
import pytest
from matplotlib.figure import Figure

from transformer_course.plotting.kv_cache import plot_decode_flops
from transformer_course.plotting.reach import plot_reach_accuracy


def _reach_table() -> pd.DataFrame:
    return pd.DataFrame({"reach (positions)": [5, 9], "distance D": [8, 8], "accuracy (%)": [12.0, 99.0],
                         "chance (%)": [12.5, 12.5]}, index=["short", "deep"])


def test_reach_plot_has_one_bar_per_model_and_the_chance_line():
    fig = plot_reach_accuracy(_reach_table())
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert len(ax.patches) == 2
    assert any(list(line.get_ydata()) == [12.5, 12.5] for line in ax.lines)
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert "reach 5 < D = 8" in labels[0] and "reach 9 ≥ D = 8" in labels[1]


def _cost_table() -> pd.DataFrame:
    return pd.DataFrame({"FLOPs without cache": [10, 40], "formula without cache": [10, 40],
                         "FLOPs with cache": [5, 10], "formula with cache": [5, 10]},
                        index=pd.Index([8, 16], name="tokens generated n"))


def test_decode_flops_plot_has_two_panels():
    fig = plot_decode_flops(_cost_table(), [1, 2, 3], [1, 1, 1])
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    assert fig.axes[0].get_xscale() == "log" and fig.axes[0].get_yscale() == "log"


@pytest.mark.parametrize("call, match", [
    (lambda: plot_reach_accuracy("table"), "table"),
    (lambda: plot_reach_accuracy(_reach_table().drop(columns="chance (%)")), "chance"),
    (lambda: plot_decode_flops([1], [1], [1]), "table"),
    (lambda: plot_decode_flops(_cost_table().drop(columns="formula with cache"), [1], [1]), "formula with cache"),
    (lambda: plot_decode_flops(_cost_table(), [], [1]), "steps_without"),
])
def test_bad_inputs_name_the_argument(call, match):
    with pytest.raises((TypeError, ValueError), match=match):
        call()
