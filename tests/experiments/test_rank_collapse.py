"""Rank collapse of attention stacks (Dong et al., 2021): the residual measure, the stacks, the claims."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from transformer_course.experiments.claims import check_claims
from transformer_course.experiments.rank_collapse import (ARCHITECTURES, chapter_claims, rank_collapse,
                                                          relative_residual, residual_by_depth)
from transformer_course.nn.attention import MultiHeadAttention
from transformer_course.nn.feedforward import FeedForward
from transformer_course.plotting.feedforward import plot_rank_collapse


def test_relative_residual_is_zero_for_identical_tokens_and_scale_free():
    same = torch.randn(1, 16, dtype=torch.float64).expand(5, 16)  # (T, D): every token the same
    assert float(relative_residual(same)) < 1e-15
    x = torch.randn(3, 5, 16, dtype=torch.float64)
    r = relative_residual(x)
    assert r.shape == (3,) and ((r > 0) & (r <= 1)).all()
    assert torch.allclose(relative_residual(7 * x), r)
    centred = x - x.mean(dim=1, keepdim=True)
    assert torch.allclose(relative_residual(centred), torch.ones(3, dtype=torch.float64))
    with pytest.raises(ValueError):
        relative_residual(torch.zeros(2, 2, 2, 2))


def test_uniform_attention_collapses_in_one_layer_and_a_skip_keeps_the_tokens():
    attention = MultiHeadAttention(8, 2).double()
    with torch.no_grad():  # zero queries: every score 0, every weight 1/T: the output is the mean token
        attention.q_proj.weight.zero_()
        attention.q_proj.bias.zero_()
    ffn = FeedForward(8, 32).double()
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    assert residual_by_depth("attention", [attention], [ffn], x)[1] < 1e-12
    assert residual_by_depth("attention + FFN", [attention], [ffn], x)[1] < 1e-12  # the FFN cannot undo it
    kept = residual_by_depth("attention + skip", [attention], [ffn], x)[1]
    assert kept > 0.5
    with pytest.raises(ValueError, match="architecture"):
        residual_by_depth("ffn only", [attention], [ffn], x)
    with pytest.raises(ValueError, match="equal length"):
        residual_by_depth("attention", [attention, attention], [ffn], x)


def test_rank_collapse_table_claims_and_figure():
    results = rank_collapse(depth=6, d_model=16, num_heads=2, seq_len=8, batch_size=2, seeds=[0, 1])
    assert set(results["architecture"]) == set(ARCHITECTURES)
    assert len(results) == len(ARCHITECTURES) * 2 * 7
    start = results[results["depth"] == 0]
    assert start.groupby("seed")["residual"].nunique().eq(1).all()  # all stacks start from the same input
    fig = plot_rank_collapse(results)
    assert fig.axes[0].get_yscale() == "log"
    with pytest.raises(ValueError, match="seeds"):
        rank_collapse(seeds=[])
    with pytest.raises(TypeError):
        plot_rank_collapse(pd.DataFrame())


def _fake(values):
    return pd.DataFrame.from_records([{"architecture": a, "seed": s, "depth": d, "residual": r}
                                      for a, by_depth in values.items() for s in range(3) for d, r in by_depth.items()])


def test_claims_hold_on_collapse_and_fail_when_attention_does_not_collapse():
    good = {"attention": {1: 0.3, 2: 1e-5, 3: 1e-16, 24: 1e-16}, "attention + FFN": {1: 0.1, 2: 1e-7, 3: 1e-16, 24: 1e-16},
            "attention + skip": {1: 0.9, 2: 0.9, 3: 0.9, 24: 0.6}, "attention + FFN + skip": {1: 0.9, 2: 0.9, 3: 0.9, 24: 0.5}}
    assert (check_claims(chapter_claims(_fake(good)))["verdict"] == "holds").all()
    good["attention"] = {1: 0.9, 2: 0.8, 3: 0.7, 24: 0.5}  # a stack that keeps its tokens apart
    with pytest.raises(AssertionError, match="attention only"):
        check_claims(chapter_claims(_fake(good)))
