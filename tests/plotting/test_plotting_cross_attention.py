"""Tests for the cross-attention heatmap grid."""

from __future__ import annotations

import pytest
import torch

from transformer_course.plotting.cross_attention import plot_cross_attention_maps


def test_one_panel_per_layer_and_head_with_token_labels():
    weights = torch.softmax(torch.randn(2, 3, 5, 4), dim=-1)  # (N, H, T, S)
    fig = plot_cross_attention_maps(weights, list("abcd"), list("vwxyz"))
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 6
    assert panels[0].get_title() == "layer 1, head 1" and panels[5].get_title() == "layer 2, head 3"
    assert [t.get_text() for t in panels[3].get_xticklabels()] == list("abcd")  # bottom row
    assert [t.get_text() for t in panels[3].get_yticklabels()] == list("vwxyz")  # first column
    torch.testing.assert_close(torch.as_tensor(panels[4].images[0].get_array()).double(), weights[1, 1].double())


@pytest.mark.parametrize("args, error, match", [
    ((torch.zeros(2, 3, 4), "abc", "abc"), ValueError, "weights must have 4 dimensions"),
    ((torch.zeros(1, 1, 2, 3), "ab", "ab"), ValueError, "source must have S=3"),
    ((torch.zeros(1, 1, 2, 3), "abc", "abc"), ValueError, "predicted must have T=2"),
    ((torch.zeros(1, 2, 2, 3), "abc", "ab", ["one"]), ValueError, "titles must have N \\* H = 2"),
])
def test_bad_arguments(args, error, match):
    with pytest.raises(error, match=match):
        plot_cross_attention_maps(*args)


def test_memory_patching_figure():
    from transformer_course.plotting.cross_attention import plot_memory_patching

    changed = torch.rand(5, 4, dtype=torch.float64)
    fig = plot_memory_patching(changed, [f"output {t}" for t in range(5)], {"a": [0.1, 0.9], "b": [0.5]})
    heatmap, points = fig.axes[0], fig.axes[1]
    assert heatmap.images and [t.get_text() for t in points.get_yticklabels()] == ["a", "b"]
    with pytest.raises(ValueError, match="T=5 names"):
        plot_memory_patching(changed, ["x"], {"a": [0.1]})
    with pytest.raises(ValueError, match="at least one statistic"):
        plot_memory_patching(changed, list("abcde"), {})
