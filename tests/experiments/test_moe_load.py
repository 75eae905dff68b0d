"""Tests for the expert-load study of a trained mixture-of-experts FFN (experiments.moe_load)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from transformer_course.experiments import moe_load as ml
from transformer_course.nn.feedforward import MoEFeedForward


def test_cluster_batch_targets_are_the_cluster_maps():
    task = ml.make_cluster_task(torch.Generator().manual_seed(0), d_model=4, clusters=3, spread=50.0)
    assert task.centers.shape == (3, 4) and task.maps.shape == (3, 4, 4)
    x, y = ml.make_cluster_batch(task, 50, torch.Generator().manual_seed(1))
    assert x.shape == y.shape == (50, 4)
    nearest = torch.cdist(x, task.centers).argmin(dim=1)  # centres 50 apart, noise 1: nearest = own cluster
    assert nearest.unique().numel() == 3
    expected = torch.tanh(torch.einsum("nij,nj->ni", task.maps[nearest], x))
    assert (y - expected).abs().max() < 1e-6
    wrong = torch.tanh(torch.einsum("nij,nj->ni", task.maps[(nearest + 1) % 3], x))
    assert (y - wrong).abs().max() > 0.1  # another cluster's map gives other targets
    with pytest.raises(TypeError, match="generator"):
        ml.make_cluster_task(0)
    with pytest.raises(ValueError, match="size"):
        ml.make_cluster_batch(task, 0, torch.Generator())


def test_expert_fractions_count_token_slots():
    moe = MoEFeedForward(4, 8, num_experts=4, top_k=2)
    with pytest.raises(RuntimeError, match="forward pass first"):
        ml.expert_fractions(moe)
    with torch.no_grad():
        moe.router.weight.zero_()
        moe.router.weight[0, 0] = moe.router.weight[1, 0] = 10.0  # experts 0 and 1 win on every x with x_0 > 0
        moe(torch.rand(6, 4) + 0.1)
    fractions = ml.expert_fractions(moe)
    assert fractions.tolist() == [0.5, 0.5, 0.0, 0.0] and float(fractions.sum()) == 1.0


def test_moe_run_is_a_function_of_seed_and_alpha_and_the_loss_balances():
    a, b = ml.moe_run(2, 0.0, steps=3), ml.moe_run(2, 0.0, steps=3)
    assert a == b  # same seed, same alpha: the same run
    assert abs(sum(a.load_after) - 1) < 1e-9 and len(a.load_after) == ml.MOE_SETTINGS["num_experts"]
    assert a.load_before == ml.moe_run(2, 1.0, steps=3).load_before  # alpha changes training, not the start
    strong = ml.moe_run(2, 5.0, steps=40)  # a heavy balancing weight flattens the load
    assert max(strong.load_after) < max(strong.load_before)
    with pytest.raises(ValueError, match="balance_weight must be >= 0"):
        ml.moe_run(0, -0.1)
    with pytest.raises(TypeError, match="balance_weight"):
        ml.moe_run(0, "0.1")


def _run(seed, alpha, loads, mse=0.1):
    return ml.MoERun(seed, alpha, sorted(loads), loads, mse)


def test_table_and_claims_read_the_ensemble():
    flat, skewed = [0.125] * 8, [0.3, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1, 0.0]
    frame = ml.runs_frame([_run(0, 0.0, skewed, 0.1), _run(1, 0.0, skewed, 0.1),
                           _run(0, 0.05, flat, 0.1), _run(1, 0.05, flat, 0.1)])
    assert frame.groupby(["balance weight", "seed"])["expert rank"].apply(list).map(lambda r: r == list(range(1, 9))).all()
    first = frame[(frame["balance weight"] == 0.0) & (frame["seed"] == 0)]
    assert first["load after"].tolist() == sorted(skewed, reverse=True)  # ranked busiest first
    table = ml.expert_load_table(frame)
    assert table.loc[0.0, "busiest expert, median"] == pytest.approx(0.3)
    assert table.loc[0.05, "idlest expert, median"] == pytest.approx(0.125)
    claims = ml.moe_claims(frame)
    assert all(c.holds for c in claims)
    reversed_frame = ml.runs_frame([_run(0, 0.0, flat), _run(0, 0.05, skewed)])  # balancing that fails
    failing = [c.name for c in ml.moe_claims(reversed_frame) if not c.holds]
    assert len(failing) >= 4
    with pytest.raises(ValueError, match="alpha = 0 and with an alpha > 0"):
        ml.moe_claims(ml.runs_frame([_run(0, 0.05, flat)]))
    with pytest.raises(ValueError, match="columns"):
        ml.expert_load_table(pd.DataFrame({"seed": [0]}))


def test_ensemble_is_the_runs_of_every_alpha_and_seed():
    frame = ml.expert_load_ensemble([4], balance_weights=(0.0, 0.05))
    expected = ml.runs_frame([ml.moe_run(4, 0.0), ml.moe_run(4, 0.05)])
    pd.testing.assert_frame_equal(frame, expected)
    with pytest.raises(ValueError, match="seeds must be"):
        ml.expert_load_ensemble([1, 1])
    with pytest.raises(ValueError, match="balance_weights"):
        ml.expert_load_ensemble([1], balance_weights=())
