"""Tests of the functional normalization helpers and the figures of the layer-norm chapter."""

import math

import pandas as pd
import pytest
import torch
from matplotlib.figure import Figure
from torch import nn

from transformer_course.nn.normalization import LayerNorm, batch_norm_statistics, layer_norm_statistics, standardize
from transformer_course.plotting.normalization import plot_gradient_flow, plot_norm_axes


def test_layer_norm_statistics_match_torch(gen):
    x = torch.randn(3, 4, 10, generator=gen, dtype=torch.float64)
    mean, variance = layer_norm_statistics(x)
    assert mean.shape == variance.shape == (3, 4, 1)
    expected = nn.functional.layer_norm(x, (10,))
    torch.testing.assert_close(standardize(x, mean, variance), expected)
    torch.testing.assert_close(LayerNorm(10).double()(x), expected)


def test_unbiased_variance_is_larger_by_d_over_d_minus_1(gen):
    d = 8
    x = torch.randn(5, d, generator=gen, dtype=torch.float64)
    _, biased = layer_norm_statistics(x)
    _, unbiased = layer_norm_statistics(x, unbiased=True)
    torch.testing.assert_close(unbiased / biased, torch.full_like(biased, d / (d - 1)))
    with pytest.raises(ValueError, match="unbiased variance needs at least 2 features"):
        layer_norm_statistics(torch.ones(3, 1), unbiased=True)


def test_batch_norm_statistics_match_batchnorm1d_in_training_mode(gen):
    x = torch.randn(4, 6, 5, generator=gen, dtype=torch.float64)
    mean, variance = batch_norm_statistics(x)
    assert mean.shape == variance.shape == (5,)
    reference = nn.BatchNorm1d(5, affine=False).double().train()(x.reshape(-1, 5)).reshape(4, 6, 5)
    torch.testing.assert_close(standardize(x, mean, variance), reference)


def test_keep_leaves_padding_out_of_batch_statistics(gen):
    real = torch.randn(2, 3, 4, generator=gen, dtype=torch.float64)
    padded = torch.cat([real, torch.zeros(2, 5, 4, dtype=torch.float64)], dim=1)  # (2, 8, 4)
    keep = torch.zeros(2, 8, dtype=torch.bool)
    keep[:, :3] = True
    for got, want in zip(batch_norm_statistics(padded, keep), batch_norm_statistics(real)):
        torch.testing.assert_close(got, want)
    assert not torch.allclose(batch_norm_statistics(padded)[1], batch_norm_statistics(real)[1])


def test_validation():
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        layer_norm_statistics(torch.ones(3, dtype=torch.long))
    with pytest.raises(ValueError, match="x must have at least one dimension"):
        layer_norm_statistics(torch.tensor(1.0))
    with pytest.raises(ValueError, match="x must have 2 or 3 dimensions"):
        batch_norm_statistics(torch.ones(3))
    with pytest.raises(TypeError, match="keep must be a bool tensor"):
        batch_norm_statistics(torch.ones(2, 3), keep=torch.ones(2))
    with pytest.raises(ValueError, match="keep must have shape"):
        batch_norm_statistics(torch.ones(2, 3), keep=torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="keep must mark at least one token"):
        batch_norm_statistics(torch.ones(2, 3), keep=torch.zeros(2, dtype=torch.bool))
    with pytest.raises(ValueError, match="eps must be > 0"):
        standardize(torch.ones(2, 3), torch.zeros(2, 1), torch.ones(2, 1), eps=0.0)


def test_plot_norm_axes(gen):
    fig = plot_norm_axes(torch.randn(4, 5, generator=gen))
    assert isinstance(fig, Figure) and len([ax for ax in fig.axes if ax.axison]) == 3  # a 2 x 2 grid, one cell empty
    text = [t.get_text() for t in fig.axes[1].texts]
    assert text.count("+0.00 1.00") == 4  # every LayerNorm row has mean 0 and std 1
    with pytest.raises(ValueError, match="x must have 2 dimensions"):
        plot_norm_axes(torch.randn(2, 3, 4))
    with pytest.raises(ValueError, match="at least 2 tokens and 2 features"):
        plot_norm_axes(torch.randn(1, 4))


def test_plot_gradient_flow():
    table = pd.DataFrame({"Post-LN": [1.0, 2.0], "Pre-LN": [1.0, 0.5]}, index=pd.RangeIndex(1, 3, name="layer"))
    assert len(plot_gradient_flow({"a": table, "b": table}).axes) == 2
    with pytest.raises(TypeError, match="profiles must be a mapping"):
        plot_gradient_flow(table)
    with pytest.raises(ValueError, match="profiles must hold at least one table"):
        plot_gradient_flow({})
    with pytest.raises(ValueError, match=r"profiles\['a'\] must have columns"):
        plot_gradient_flow({"a": table.rename(columns={"Pre-LN": "x"})})
    assert math.isfinite(float(table.sum().sum()))
