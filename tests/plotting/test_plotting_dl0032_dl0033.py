import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from transformer_course.measure.cost import component_share_table, crossover_length, flop_share_table
from transformer_course.nn.layers import EncoderLayer
from transformer_course.nn.rnn import ElmanRNN
from transformer_course.plotting.cost import (plot_component_shares, plot_roofline, plot_share_vs_length,
                                             plot_time_vs_flops)
from transformer_course.plotting.sequential_vs_parallel import (depth_growth, plot_dependency_depth,
                                                                plot_gradient_ensemble, plot_gradient_reach,
                                                                plot_rnn_vs_transformer)


def _texts(fig):
    return " ".join(t.get_text() for ax in fig.axes for t in ax.texts + [ax.title])


def test_structure_diagram_reads_the_modules():
    fig = plot_rnn_vs_transformer(ElmanRNN(12), EncoderLayer(12, 3, 24), n=4)
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    text = _texts(fig)
    assert "D=12" in text and "H=3" in text and "12->24->12" in text and "step 4" in text
    assert "step 5" not in text
    pre_ln = _texts(plot_rnn_vs_transformer(ElmanRNN(4), EncoderLayer(4, 2, 8, norm_first=True), n=2))
    assert "add residual" in pre_ln


def test_structure_diagram_validation():
    with pytest.raises(ValueError, match="n must be <= 8"):
        plot_rnn_vs_transformer(ElmanRNN(4), EncoderLayer(4, 2, 8), n=9)
    with pytest.raises(ValueError, match="n must be >= 2"):
        plot_rnn_vs_transformer(ElmanRNN(4), EncoderLayer(4, 2, 8), n=1)
    with pytest.raises(TypeError, match="layer must be"):
        plot_rnn_vs_transformer(ElmanRNN(4), "layer")


def test_curves():
    depths = pd.DataFrame({"RNN": [9, 12, 18], "Transformer": [40, 40, 40]}, index=pd.Index([1, 2, 4], name="n"))
    fig = plot_dependency_depth(depths)
    labels = [line.get_label() for line in fig.axes[0].lines]
    assert labels == ["RNN: +3 operations per extra token", "Transformer: the same for every n"]
    scan = pd.DataFrame({"scan": [5, 9, 13, 17, 21]}, index=pd.Index([1, 2, 4, 7, 9], name="n"))
    assert plot_dependency_depth(scan).axes[0].lines[0].get_label() == "scan: +4 operations per doubling of n"
    assert depth_growth(np.array([1, 2, 4]), np.array([1, 5, 6])) == "grows with n"
    grads = pd.DataFrame({"RNN": [1e-1, 1e-5], "Transformer": [0.2, 0.1]}, index=[2, 8])
    assert plot_gradient_reach(grads).axes[0].get_yscale() == "log"
    with pytest.raises(ValueError, match="depths must be a non-empty DataFrame"):
        plot_dependency_depth(pd.DataFrame())
    with pytest.raises(ValueError, match="gradients must be"):
        plot_gradient_reach([1, 2])


def test_gradient_ensemble_figure():
    index = pd.MultiIndex.from_product([["RNN", "Transformer"], [0, 1, 2]], names=["model", "seed"])
    ensemble = pd.DataFrame({2: [0.1] * 6, 8: [1e-5] * 3 + [0.05] * 3, "factor per token": 0.5}, index=index)
    fig = plot_gradient_ensemble(ensemble)
    ax = fig.axes[0]
    assert ax.get_yscale() == "log" and len(ax.lines) == 2 * 3 + 2  # every seed, and a median per model
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["RNN (median of 3 seeds)",
                                                                   "Transformer (median of 3 seeds)"]
    with pytest.raises(ValueError, match="indexed by \\(model, seed\\)"):
        plot_gradient_ensemble(pd.DataFrame({2: [1.0]}))
    with pytest.raises(ValueError, match="two integer length columns"):
        plot_gradient_ensemble(ensemble[[2, "factor per token"]])


def test_cost_figures():
    shares = flop_share_table(512, (64, 1024, 4096))
    fig = plot_share_vs_length(shares, crossover_length(512), d=512)
    assert isinstance(fig, Figure) and "1024" in _texts(fig)
    assert fig.axes[0].get_xscale() == "log"
    bars = plot_component_shares(component_share_table(512, (64, 4096)))
    assert len(bars.axes[0].patches) == 10  # 5 components x 2 lengths
    timed = pd.DataFrame({"time share (%)": [60, 40], "FLOP share (%)": [10, 90]}, index=["softmax", "ffn"])
    assert len(plot_time_vs_flops(timed).axes[0].patches) == 4
    spread = timed.assign(**{"lowest share (%)": [50, 30], "highest share (%)": [70, 45]})
    assert len(plot_time_vs_flops(spread).axes[0].collections) >= 1  # the range markers
    traffic = pd.DataFrame({"FLOPs": [10, 1000], "bytes": [16, 10]}, index=["softmax", "ffn"])
    traffic["FLOPs per byte"] = traffic["FLOPs"] / traffic["bytes"]
    peaks = pd.Series({"matmul FLOP/s": 1e11, "bandwidth (bytes/s)": 1e10})
    roof = plot_roofline(traffic, peaks, pd.DataFrame({"time (ms)": [1.0, 1.0]}, index=["softmax", "ffn"]))
    ax = roof.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log" and "ridge: 10.0" in _texts(roof)
    with pytest.raises(ValueError, match="peaks must be a Series"):
        plot_roofline(traffic, {"matmul FLOP/s": 1})
    with pytest.raises(ValueError, match="missing columns"):
        plot_share_vs_length(pd.DataFrame({"x": [1]}), 1, 1)
    with pytest.raises(ValueError, match="components must be a non-empty DataFrame"):
        plot_time_vs_flops(pd.DataFrame())
