"""Tests for the multi-head attention figures: labels read off the module, shapes, validation."""

from __future__ import annotations

import pytest
import torch
from matplotlib.figure import Figure

from transformer_course.nn.attention import MultiHeadAttention
from transformer_course.plotting.mha import (mha_pipeline_labels, plot_head_maps, plot_mha_pipeline,
                                             plot_relation_scores)


def _texts(fig: Figure) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_labels_come_from_the_module():
    a, b = MultiHeadAttention(512, 8), MultiHeadAttention(32, 4)
    la, lb = mha_pipeline_labels(a), mha_pipeline_labels(b)
    assert "h = 8" in la["split"] and "= 64" in la["split"]
    assert "h = 4" in lb["split"] and "= 8" in lb["split"]
    assert "512×512" in la["projections"] and "32×32" in lb["projections"]
    assert la["concat"] == "Concat\n8 × 64 = 512"
    assert la != lb


def test_pipeline_figure_draws_the_labels_and_each_head():
    module = MultiHeadAttention(24, 3)
    fig = plot_mha_pipeline(module)
    assert isinstance(fig, Figure)
    texts = _texts(fig)
    labels = mha_pipeline_labels(module)
    for key in ("input", "projections", "split", "concat", "output_projection", "output"):
        assert labels[key] in texts
    assert sum(t.startswith("head ") for t in texts) == 3
    assert "d_model=24" in fig.axes[0].get_title()


def test_wide_modules_draw_an_ellipsis():
    texts = _texts(plot_mha_pipeline(MultiHeadAttention(64, 16), max_heads_drawn=4))
    assert sum(t.startswith("head ") for t in texts) == 4
    assert any(t.startswith("head 16") for t in texts) and "⋮" in texts


def test_pipeline_validation():
    with pytest.raises(TypeError, match="module"):
        plot_mha_pipeline(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="max_heads_drawn"):
        plot_mha_pipeline(MultiHeadAttention(8, 2), max_heads_drawn=1)


def test_head_maps(gen):
    weights = torch.rand(3, 5, 5, generator=gen).softmax(-1)
    fig = plot_head_maps(weights, list("abcde"), ["x", "y", "z"])
    assert len(fig.axes) == 4  # three maps and a colour bar
    assert [ax.get_title() for ax in fig.axes[:3]] == ["x", "y", "z"]
    with pytest.raises(ValueError, match="tokens"):
        plot_head_maps(weights, list("abc"))
    with pytest.raises(ValueError, match="titles"):
        plot_head_maps(weights, list("abcde"), ["x"])
    with pytest.raises(ValueError, match="weights"):
        plot_head_maps(torch.rand(3, 5, 4), list("abcde"))
    with pytest.raises(TypeError, match="weights"):
        plot_head_maps(torch.ones(3, 5, 5, dtype=torch.long), list("abcde"))


def test_relation_scores_figure():
    import pandas as pd

    scores = pd.DataFrame([[0.9, 0.1], [0.2, 0.8]], index=["head 0", "head 1"], columns=["a", "b"])
    fig = plot_relation_scores(scores)
    assert "0.90" in _texts(fig)
    with pytest.raises(TypeError, match="scores"):
        plot_relation_scores([[1.0]])


def test_accuracy_by_heads_draws_one_line_per_relation_with_head_widths():
    import pandas as pd

    from transformer_course.plotting.mha import plot_accuracy_by_heads

    table = pd.DataFrame({"d_head": [32, 16, 8], "parameters": [10, 10, 10], "previous": [0.5, 0.9, 1.0],
                          "first": [0.6, 1.0, 1.0]}, index=pd.Index([1, 2, 4], name="heads h"))
    fig = plot_accuracy_by_heads(table)
    ax = fig.axes[0]
    assert [line.get_label() for line in ax.lines] == ["previous", "first"]
    assert list(ax.lines[0].get_ydata()) == [50.0, 90.0, 100.0]
    assert [t.get_text() for t in ax.get_xticklabels()][0] == "1\n($d_k$=32)"
    with pytest.raises(ValueError, match="relations must name columns"):
        plot_accuracy_by_heads(table, relations=["marker"])
    with pytest.raises(TypeError, match="table must be"):
        plot_accuracy_by_heads([1, 2])


def test_head_count_study_draws_every_run_and_marks_the_runs_that_missed_the_threshold():
    import pandas as pd

    from transformer_course.plotting.mha import plot_head_count_study

    curve = pd.DataFrame({"worst": [0.05, 0.5, 0.97]}, index=pd.Index([0, 25, 50], name="step"))
    runs = [(1, curve), (1, curve), (4, curve)]
    fig = plot_head_count_study(runs, [(1, float("nan")), (1, 50.0), (4, 25.0)], max_steps=100,
                                threshold=0.95, chance=1 / 16)
    left, right = fig.axes
    run_lines = [line for line in left.lines if len(line.get_xdata()) == 3]
    assert len(run_lines) == 3 and list(run_lines[0].get_ydata()) == [5.0, 50.0, 97.0]
    assert [t.get_text() for t in left.get_legend().get_texts()] == ["h = 1", "h = 4"]
    assert left.get_ylim()[0] == 0  # the accuracy axis starts at 0, below chance
    assert any("chance 6.2%" in t for t in _texts(fig))
    missed = [c for c in right.collections if len(c.get_offsets()) and c.get_offsets()[0][1] == 100]
    assert len(missed) == 1 and len(missed[0].get_offsets()) == 1  # one run at the budget, open triangle
    assert [t.get_text() for t in right.get_xticklabels()] == ["1\n($d_k$=32)", "4\n($d_k$=8)"]
    with pytest.raises(ValueError, match="worst"):
        plot_head_count_study([(1, curve.rename(columns={"worst": "x"}))], [(1, 1.0)], 100, 0.95, 0.1)
    with pytest.raises(ValueError, match="chance"):
        plot_head_count_study(runs, [(1, 1.0)], 100, 0.95, 2.0)


def test_kv_heads_study_names_each_g_with_its_cache_and_draws_every_run():
    import pandas as pd

    from transformer_course.plotting.mha import plot_kv_heads_study

    curve = pd.DataFrame({"worst": [0.05, 0.5, 0.97]}, index=pd.Index([0, 25, 50], name="step"))
    runs = [(1, curve), (4, curve), (2, curve)]
    fig = plot_kv_heads_study(runs, [(1, float("nan")), (4, 50.0), (2, 25.0)], max_steps=100, threshold=0.95,
                              chance=1 / 16, cache_per_token={4: 64, 2: 32, 1: 16})
    left, right = fig.axes
    assert len([line for line in left.lines if len(line.get_xdata()) == 3]) == 3
    assert [t.get_text() for t in right.get_xticklabels()] == [
        "G = 4 (MHA)\n64 / token", "G = 2 (GQA)\n32 / token", "G = 1 (MQA)\n16 / token"]
    assert sorted(t.get_text() for t in left.get_legend().get_texts()) == ["G = 1 (MQA)", "G = 2 (GQA)", "G = 4 (MHA)"]
    missed = [c for c in right.collections if len(c.get_offsets()) and c.get_offsets()[0][1] == 100]
    assert len(missed) == 1  # the MQA run that did not reach the threshold
    with pytest.raises(ValueError, match="missing \\[1\\]"):
        plot_kv_heads_study(runs, [(1, 1.0)], 100, 0.95, 0.1, cache_per_token={4: 64, 2: 32})
