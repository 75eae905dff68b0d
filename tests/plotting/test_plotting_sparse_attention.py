"""The sparse-attention figures: built from data, without pyplot, with the expected panels."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import pytest
import torch
from matplotlib.figure import Figure

from transformer_course.nn.masks import dilated_mask, sliding_window_mask
from transformer_course.plotting.sparse_attention import plot_attention_cost, plot_masks, plot_receptive_field


def test_plot_masks_one_panel_per_mask():
    before = plt.get_fignums()
    fig = plot_masks({"window": sliding_window_mask(12, 3), "dilated": dilated_mask(12, 3)},
                     notes={"window": "34 kept"}, suptitle="patterns")
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    assert [ax.get_title() for ax in fig.axes] == ["window", "dilated"]
    assert "34 kept" in fig.axes[0].get_xlabel()
    image = fig.axes[1].images[0].get_array()
    assert image.shape == (12, 12) and bool((image == dilated_mask(12, 3).numpy()).all())
    assert plt.get_fignums() == before  # never registered with pyplot


def test_plot_attention_cost_panels():
    counts = pd.DataFrame({"dense": [16, 64], "sparse": [8, 16]}, index=pd.Index([4, 8], name="T"))
    assert len(plot_attention_cost(counts).axes) == 1
    measured = pd.DataFrame({"dense_ms": [1.0, 4.0], "sparse_ms": [1.0, 2.0], "dense_MiB": [1.0, 4.0],
                             "sparse_MiB": [0.5, 1.0]}, index=pd.Index([4, 8], name="T"))
    fig = plot_attention_cost(counts, measured, highlight=8)
    assert len(fig.axes) == 3 and fig.axes[2].get_ylabel() == "peak memory (MiB)"


def test_plot_attention_cost_rejects_missing_columns():
    with pytest.raises(ValueError, match="counts must be a DataFrame"):
        plot_attention_cost(pd.DataFrame({"dense": [1]}))


def test_plot_masks_rejects_bad_input():
    with pytest.raises(ValueError, match="non-empty mapping"):
        plot_masks({})
    with pytest.raises(TypeError, match="2-D bool tensor"):
        plot_masks({"x": torch.ones(3, 3)})


def test_plot_receptive_field_lines():
    fig = plot_receptive_field([1, 2, 3], {"w = 3": [3, 5, 7]}, {"formula": [3, 5, 7]}, length=10)
    ax = fig.axes[0]
    assert len(ax.lines) == 3  # markers, formula, sequence length
    assert list(ax.get_xticks()) == [1, 2, 3]
