"""Figures of chapters DL0030 and DL0031: they are Figures, their labels come from the data or module."""

import pytest
import torch
from matplotlib.figure import Figure

from transformer_course.nn.feedforward import FeedForward
from transformer_course.nn.positional import alibi_bias, alibi_slopes, position_similarity, sinusoidal_encoding
from transformer_course.plotting.feedforward import (ffn_diagram_labels, plot_activations, plot_ffn_diagram,
                                                     plot_position_jacobians)
from transformer_course.plotting.positional import (plot_alibi_bias, plot_pe_dimensions, plot_pe_matrix,
                                                    plot_position_similarity)


def _texts(fig):
    return [text.get_text() for ax in fig.axes for text in ax.texts]


def test_ffn_diagram_labels_are_read_off_the_module():
    base = plot_ffn_diagram(FeedForward(512, 2048))
    other = plot_ffn_diagram(FeedForward(64, 96, activation="gelu"))
    assert isinstance(base, Figure)
    base_texts, other_texts = _texts(base), _texts(other)
    assert "x\none token\nd = 512" in base_texts and "ReLU" in base_texts
    assert "linear1:\nW1 (512 x 2048) + b1" in base_texts and "hidden\n2048\n= 4 d" in base_texts
    assert "x\none token\nd = 64" in other_texts and "GELU" in other_texts
    assert "hidden\n96\n= 1.50 d" in other_texts
    assert set(ffn_diagram_labels(FeedForward(64, 96, activation="gelu")).values()) <= set(other_texts)
    assert base_texts != other_texts


def test_ffn_diagram_shows_the_gate_of_swiglu():
    labels = ffn_diagram_labels(FeedForward(512, 1365, activation="swiglu"))
    assert "gate:\nW3 (512 x 1365) + b3" in labels["expand"]
    assert labels["pre_activation"].startswith("a and g\n2 x 1365")
    assert labels["activate"] == "SiLU(a) * g"


def test_ffn_diagram_validation():
    with pytest.raises(TypeError, match="ffn must be a FeedForward"):
        plot_ffn_diagram(torch.nn.Linear(2, 2))


def test_activation_figure():
    fig = plot_activations()
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    assert len(fig.axes[0].lines) == 3 + 2  # three curves, two axis lines
    with pytest.raises(ValueError, match="low must be < high"):
        plot_activations(1.0, -1.0)
    with pytest.raises(ValueError, match="points must be >= 2"):
        plot_activations(points=1)


def test_position_jacobians_figure():
    fig = plot_position_jacobians({"FFN": torch.eye(4), "attention": torch.ones(4, 4)})
    assert [ax.get_title() for ax in fig.axes[:2]] == ["FFN", "attention"]
    with pytest.raises(ValueError, match="at least one"):
        plot_position_jacobians({})
    with pytest.raises(ValueError, match="must be square"):
        plot_position_jacobians({"x": torch.ones(2, 3)})


def test_pe_figures():
    pe = sinusoidal_encoding(30, 16)
    fig = plot_pe_matrix(pe)
    assert isinstance(fig, Figure) and fig.axes[0].images[0].get_array().shape == (30, 16)
    fig = plot_pe_dimensions(pe, [0, 6, 14], ["fast", "medium", "slow"])
    assert [ax.get_ylabel() for ax in fig.axes] == ["PE[:, 0]", "PE[:, 6]", "PE[:, 14]"]
    assert [ax.get_title(loc="left") for ax in fig.axes] == ["fast", "medium", "slow"]
    with pytest.raises(ValueError, match="dims must hold ints in"):
        plot_pe_dimensions(pe, [16])
    with pytest.raises(ValueError, match="labels must have one entry per dimension"):
        plot_pe_dimensions(pe, [0, 1], ["one"])
    with pytest.raises(ValueError, match="pe must have 2 dimensions"):
        plot_pe_matrix(torch.zeros(3))


def test_similarity_and_alibi_figures():
    fig = plot_position_similarity(position_similarity(sinusoidal_encoding(10, 8)))
    assert fig.axes[0].images[0].get_array().shape == (10, 10)
    with pytest.raises(ValueError, match="must be square"):
        plot_position_similarity(torch.zeros(3, 4))
    fig = plot_alibi_bias(alibi_bias(3, 5), alibi_slopes(3))
    assert [ax.get_title() for ax in fig.axes[:3]] == [f"head {h}, m = {2 ** (-8 * h / 3):.3g}" for h in (1, 2, 3)]
    image = fig.axes[0].images[0].get_array()
    assert image.mask[0, 1] and not image.mask[1, 0]  # the future is blank under the causal view
    with pytest.raises(ValueError, match="slopes must have shape"):
        plot_alibi_bias(alibi_bias(3, 5), alibi_slopes(2))


def test_rope_decay_figure_normalizes_each_curve():
    from transformer_course.nn.positional import rope_decay_bound
    from transformer_course.plotting.positional import plot_rope_decay

    distances = torch.arange(0, 65, dtype=torch.float64)
    fig = plot_rope_decay(distances, {"D_h = 8": rope_decay_bound(8, distances), "D_h = 32": rope_decay_bound(32, distances)})
    lines = fig.axes[0].get_lines()
    assert len(lines) == 2 and all(abs(line.get_ydata()[0] - 1) < 1e-12 for line in lines)
    with pytest.raises(ValueError, match="shape"):
        plot_rope_decay(distances, {"bad": torch.ones(3, dtype=torch.float64)})
    with pytest.raises(ValueError, match="at least one"):
        plot_rope_decay(distances, {})


def test_expert_load_figure_draws_every_run_and_the_uniform_line():
    import pandas as pd

    from transformer_course.experiments.moe_load import MoERun, runs_frame
    from transformer_course.plotting.feedforward import plot_expert_load

    skewed, flat = [0.4, 0.3, 0.2, 0.1], [0.25] * 4
    frame = runs_frame([MoERun(0, 0.0, skewed, skewed, 0.1), MoERun(1, 0.0, skewed, skewed, 0.1),
                        MoERun(0, 0.05, skewed, flat, 0.1)])
    fig = plot_expert_load(frame)
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    off, on = fig.axes
    assert len(off.collections[0].get_offsets()) == 8 and len(on.collections[0].get_offsets()) == 4  # every (run, expert)
    assert [t.get_text() for t in on.texts] == ["uniform 1/4"]
    assert "alpha = 0.05" in on.get_title() and "without" in off.get_title()
    medians = [line for line in on.lines if line.get_linestyle() == "-"]
    assert list(medians[0].get_ydata()) == [25.0] * 4  # the balanced run's loads, in percent
    with pytest.raises(ValueError, match="columns"):
        plot_expert_load(pd.DataFrame({"seed": [0]}))
    with pytest.raises(TypeError, match="frame"):
        plot_expert_load([1])


def test_plot_ffn_memory_draws_every_seed_and_the_medians():
    import pandas as pd

    from transformer_course.plotting.feedforward import plot_ffn_memory

    frame = pd.DataFrame({"d_ff": [4, 4, 16, 16], "seed": [0, 1, 0, 1], "FFN parameters": [148, 148, 544, 544],
                          "accuracy (%)": [40.0, 60.0, 100.0, 100.0], "agreement": [0.1, 0.1, 0.2, 0.3],
                          "agreement at init": [0.05, 0.07, 0.06, 0.06]})
    fig = plot_ffn_memory(frame, num_labels=16)
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    accuracy, agreement = fig.axes
    assert len(accuracy.collections[0].get_offsets()) == 4
    assert list(accuracy.lines[0].get_ydata()) == [50.0, 100.0]  # the medians per width
    assert [t.get_text() for t in agreement.get_legend().get_texts()] == ["after training", "at initialization",
                                                                          "chance 1/16"]
    assert [t.get_text() for t in accuracy.get_xticklabels()] == ["4", "16"]
    with pytest.raises(ValueError, match="columns"):
        plot_ffn_memory(frame.drop(columns="agreement"), 16)
    with pytest.raises(ValueError, match="num_labels"):
        plot_ffn_memory(frame, 1)
    with pytest.raises(TypeError, match="frame"):
        plot_ffn_memory([1], 16)
