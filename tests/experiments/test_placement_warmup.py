import math

import pandas as pd
import pytest
from matplotlib.figure import Figure

from transformer_course.experiments.placement_warmup import chance_loss, final_losses, placement_warmup_runs
from transformer_course.plotting.normalization import plot_placement_warmup

TINY = dict(steps=4, num_layers=1, d_model=8, num_heads=2, d_ff=16, vocab_size=6, seq_len=5, batch_size=4,
            warmup_steps=2)


def test_chance_loss_is_ln_vocab():
    assert chance_loss(16) == pytest.approx(math.log(16))
    with pytest.raises(ValueError, match="vocab_size must be >= 2"):
        chance_loss(1)
    with pytest.raises(TypeError, match="vocab_size must be an int"):
        chance_loss(16.0)


def test_runs_table_shape_and_determinism():
    runs = placement_warmup_runs(seeds=(0, 1), **TINY)
    assert runs.shape == (4, 8) and list(runs.index) == [1, 2, 3, 4]
    assert list(runs.columns.names) == ["placement", "warm-up", "seed"]
    assert set(runs.columns.get_level_values("placement")) == {"Post-LN", "Pre-LN"}
    assert set(runs.columns.get_level_values("warm-up")) == {"no warm-up", "warm-up"}
    assert bool(runs.notna().all().all())
    # Same seed, same weights and batches: the first step's loss does not depend on the warm-up
    # (the learning rate only acts after it) but the second does.
    post = runs["Post-LN"]
    assert post[("no warm-up", 0)].iloc[0] == post[("warm-up", 0)].iloc[0]
    assert post[("no warm-up", 0)].iloc[1] != post[("warm-up", 0)].iloc[1]
    assert post[("no warm-up", 0)].iloc[0] != post[("no warm-up", 1)].iloc[0]  # seeds differ
    # Reproducible, and a seed's runs do not depend on which other seeds are run.
    again = placement_warmup_runs(seeds=(1,), **TINY)
    pd.testing.assert_frame_equal(again, runs.loc[:, runs.columns.get_level_values("seed") == 1])


def test_final_losses_table():
    runs = placement_warmup_runs(seeds=(3,), **TINY)
    table = final_losses(runs, last=2)
    assert table.shape == (4, 1) and list(table.columns) == [3]
    assert table.loc[("Pre-LN", "warm-up"), 3] == pytest.approx(runs[("Pre-LN", "warm-up", 3)].iloc[-2:].mean())
    with pytest.raises(ValueError, match="last must be <= the number of steps 4"):
        final_losses(runs, last=5)
    with pytest.raises(ValueError, match="runs must have columns"):
        final_losses(pd.DataFrame({"a": [1.0]}))
    with pytest.raises(TypeError, match="runs must be a pandas DataFrame"):
        final_losses([1.0])
    fig = plot_placement_warmup(runs, chance_loss(6), warmup_steps=2, window=2)
    assert isinstance(fig, Figure) and [ax.get_title() for ax in fig.axes] == ["Post-LN", "Pre-LN"]
    with pytest.raises(ValueError, match="chance must be a positive number"):
        plot_placement_warmup(runs, 0.0, warmup_steps=2)
    with pytest.raises(ValueError, match="warmup_steps must be an int >= 1"):
        plot_placement_warmup(runs, 1.0, warmup_steps=0)
    with_baseline = plot_placement_warmup(runs, chance_loss(6), warmup_steps=2, window=2, baseline=1.3)
    assert any("positions only: 1.300" in text.get_text() for text in with_baseline.axes[0].texts)
    with pytest.raises(ValueError, match="baseline must be a number between 0 and chance"):
        plot_placement_warmup(runs, chance_loss(6), warmup_steps=2, baseline=2.0)


def test_validation():
    with pytest.raises(ValueError, match="seeds must hold at least one seed"):
        placement_warmup_runs(seeds=())
    with pytest.raises(TypeError, match="seeds must be an int"):
        placement_warmup_runs(seeds=(0.5,))
    with pytest.raises(ValueError, match="warmup_steps must be >= 1"):
        placement_warmup_runs(warmup_steps=0)


@pytest.mark.slow
def test_post_ln_needs_the_warm_up_at_this_learning_rate():
    # The 2 x 2 setting the chapter used before its learning-rate sweep, one seed, 100 steps: without
    # warm-up Post-LN stays at chance;
    # with it, it learns, and so does Pre-LN either way. About 5 s.
    final = final_losses(placement_warmup_runs(seeds=(0,)))
    chance = chance_loss(16)
    assert final.loc[("Post-LN", "no warm-up"), 0] > chance - 0.25
    for condition in (("Post-LN", "warm-up"), ("Pre-LN", "no warm-up"), ("Pre-LN", "warm-up")):
        assert final.loc[condition, 0] < chance - 0.6


# --- the learning-rate sweep, the position-only baseline, Adam's first step and the claims -----------

import itertools

import torch

from transformer_course.experiments.gradient_flow import layer_gradient_norms
from transformer_course.experiments.placement_warmup import (CHAPTER_SWEEP, SweepSettings, best_learning_rates,
                                                             first_adam_step, first_step_claims, first_step_ensemble,
                                                             gradient_norm_ensemble, gradient_profile_claims,
                                                             placement_lr_sweep, position_only_baseline,
                                                             sweep_claims, sweep_table)
from transformer_course.plotting.normalization import plot_gradient_flow, plot_lr_sweep

TINY_SWEEP = SweepSettings(lrs=(1e-3, 3e-2), steps=3, warmup_steps=2, num_layers=1, d_model=8, num_heads=2, d_ff=16,
                           vocab_size=6, seq_len=5, batch_size=4, eval_size=16, high_lr=3e-2)


def _brute_force_position_only(vocab_size, seq_len):
    """Enumerate every sequence: the per-position distribution of the sorted token, its entropy and mode."""
    counts = [[0] * vocab_size for _ in range(seq_len)]
    for tokens in itertools.product(range(vocab_size), repeat=seq_len):
        for i, token in enumerate(sorted(tokens)):
            counts[i][token] += 1
    total = vocab_size ** seq_len
    loss = -sum(c / total * math.log(c / total) for row in counts for c in row if c) / seq_len
    return loss, sum(max(row) / total for row in counts) / seq_len


@pytest.mark.parametrize("vocab_size, seq_len", [(2, 1), (3, 3), (4, 5), (6, 2)])
def test_position_only_baseline_matches_enumeration(vocab_size, seq_len):
    loss, accuracy = position_only_baseline(vocab_size, seq_len)
    expected_loss, expected_accuracy = _brute_force_position_only(vocab_size, seq_len)
    assert loss == pytest.approx(expected_loss, abs=1e-12) and accuracy == pytest.approx(expected_accuracy, abs=1e-12)


def test_position_only_baseline_of_the_chapter_task():
    loss, accuracy = position_only_baseline(16, 10)
    assert loss == pytest.approx(1.975, abs=5e-4)  # the value issue 23 measured
    assert math.log(16) - loss > 0.7 and accuracy > 3 * (1 / 16)  # positions alone say a lot
    assert position_only_baseline(16, 1) == pytest.approx((math.log(16), 1 / 16))  # one token: nothing to sort
    with pytest.raises(ValueError, match="seq_len must be >= 1"):
        position_only_baseline(16, 0)
    with pytest.raises(TypeError, match="vocab_size must be an int"):
        position_only_baseline(16.0, 3)


def test_sweep_settings_validation():
    assert CHAPTER_SWEEP.high_lr in CHAPTER_SWEEP.lrs
    with pytest.raises(ValueError, match="lrs must be increasing"):
        SweepSettings(lrs=(1e-2, 1e-3), high_lr=1e-2)
    with pytest.raises(ValueError, match="high_lr must be one of lrs"):
        SweepSettings(lrs=(1e-3,), high_lr=1e-2)
    with pytest.raises(ValueError, match="warmup_steps must be <= steps"):
        SweepSettings(steps=5, warmup_steps=6)
    with pytest.raises(ValueError, match="lrs must be a non-empty tuple"):
        SweepSettings(lrs=[1e-3])


def test_placement_lr_sweep_tables():
    sweep = placement_lr_sweep([0, 1], TINY_SWEEP)
    assert sweep.curves.shape == (3, 16) and list(sweep.curves.columns.names) == ["placement", "warm-up", "lr", "seed"]
    assert len(sweep.finals) == 16 and sweep.finals["accuracy"].between(0, 1).all()
    post = sweep.curves["Post-LN"]
    assert post[("no warm-up", 3e-2, 0)].iloc[0] == post[("warm-up", 3e-2, 0)].iloc[0]  # same weights and batch
    assert post[("no warm-up", 3e-2, 0)].iloc[1] != post[("no warm-up", 1e-3, 0)].iloc[1]  # the lr acts
    again = placement_lr_sweep([1], TINY_SWEEP)  # a seed's runs do not depend on the other seeds
    pd.testing.assert_frame_equal(again.finals, sweep.finals[sweep.finals["seed"] == 1].reset_index(drop=True))
    table = sweep_table(sweep.finals)
    assert table.shape == (4, 2) and list(table.columns) == ["lr 0.001", "lr 0.03"]
    assert "[" in table.iloc[0, 0] and "%" in sweep_table(sweep.finals, "accuracy").iloc[0, 0]
    best = best_learning_rates(sweep.finals)
    assert set(best["best lr"]) <= {1e-3, 3e-2} and best.shape == (4, 3)
    with pytest.raises(ValueError, match="metric must be one of"):
        sweep_table(sweep.finals, "perplexity")
    with pytest.raises(ValueError, match="finals must be the non-empty finals table"):
        best_learning_rates(sweep.finals.drop(columns="accuracy"))
    with pytest.raises(TypeError, match="settings must be"):
        placement_lr_sweep([0], settings=dict(steps=3))
    with pytest.raises(ValueError, match="seeds must hold at least one seed"):
        placement_lr_sweep([], TINY_SWEEP)
    fig = plot_lr_sweep(sweep.finals, position_only_baseline(6, 5), (math.log(6), 1 / 6))
    assert isinstance(fig, Figure) and len(fig.axes) == 2 and fig.axes[0].get_xscale() == "log"
    with pytest.raises(ValueError, match="baseline must be a"):
        plot_lr_sweep(sweep.finals, 1.3, (math.log(6), 1 / 6))


def _synthetic_finals(post_cold_high=2.5, pre_warm_high=1.2, warm_cost=0.1, pre_edge=0.2):
    """A finals table with chosen medians: each seed gets the same value, so medians are exact."""
    baseline = position_only_baseline(CHAPTER_SWEEP.vocab_size, CHAPTER_SWEEP.seq_len)[0]
    rows = []
    for (placement, warmup), lr, seed in itertools.product(
            [("Post-LN", "no warm-up"), ("Post-LN", "warm-up"), ("Pre-LN", "no warm-up"), ("Pre-LN", "warm-up")],
            CHAPTER_SWEEP.lrs, range(8)):
        loss = 1.5 - (pre_edge if placement == "Pre-LN" else 0.0)
        if lr == CHAPTER_SWEEP.high_lr:
            loss = {("Post-LN", "no warm-up"): post_cold_high, ("Post-LN", "warm-up"): baseline - 0.3,
                    ("Pre-LN", "no warm-up"): pre_warm_high + 0.2, ("Pre-LN", "warm-up"): pre_warm_high}[placement, warmup]
        if lr == CHAPTER_SWEEP.lrs[0] and warmup == "warm-up":
            loss += warm_cost
        rows.append({"placement": placement, "warm-up": warmup, "lr": lr, "seed": seed, "loss": loss, "accuracy": 0.5})
    return pd.DataFrame(rows)


def test_sweep_claims_hold_and_fail_when_they_should():
    assert all(claim.holds for claim in sweep_claims(_synthetic_finals()))
    # Post-LN without warm-up learning at the high rate breaks the first claim; a free warm-up the fifth;
    # Post-LN as good as Pre-LN the last.
    for broken, index in ((dict(post_cold_high=1.5), 0), (dict(warm_cost=-0.1), 4), (dict(pre_edge=-0.5, pre_warm_high=1.9), 5)):
        claims = sweep_claims(_synthetic_finals(**broken))
        assert not claims[index].holds, (broken, claims[index])


def test_first_adam_step_is_lr_times_sign_of_the_gradient():
    lr = 1e-3
    for norm_first in (False, True):
        step = first_adam_step(4, norm_first, lr=lr, seed=3, d_model=16, num_heads=2, d_ff=32)
        assert list(step.columns) == ["gradient norm", "update norm", "output change"] and len(step) == 4
        assert (step["output change"] > 0).all() and step["output change"].nunique() == 1
    # Rebuild the same stack: every entry with a non-zero gradient moved by lr, the others not at all.
    from transformer_course.experiments.training import seeded
    from transformer_course.experiments.gradient_flow import init_xavier_
    from transformer_course.nn.model import Encoder
    from torch import nn as tnn
    import torch.nn.functional as F
    with seeded(3):
        encoder = init_xavier_(Encoder(4, 16, 2, 32, dropout=0.0, norm_first=False))
        head = init_xavier_(tnn.Linear(16, 10))
    g = torch.Generator().manual_seed(3)
    x, labels = torch.randn(8, 16, 16, generator=g), None
    labels = torch.randint(0, 10, (8, 16), generator=g)
    F.cross_entropy(head(encoder(x)).flatten(0, 1), labels.flatten()).backward()
    nonzero = [int((layer.feed_forward.linear2.weight.grad != 0).sum()) for layer in encoder.layers]
    step = first_adam_step(4, False, lr=lr, seed=3, d_model=16, num_heads=2, d_ff=32)
    assert step["update norm"].tolist() == pytest.approx([lr * math.sqrt(n) for n in nonzero], rel=1e-4)
    with pytest.raises(ValueError, match="parameter must name a parameter"):
        first_adam_step(2, True, parameter="nope")
    with pytest.raises(ValueError, match="lr must be"):
        first_adam_step(2, True, lr=0.0)


def test_first_step_ensemble_and_claims():
    ensemble = first_step_ensemble([0, 1], depths=(2, 6))
    assert len(ensemble) == 8 and set(ensemble["depth"]) == {2, 6}
    assert (ensemble["update norm / lr"] <= math.sqrt(64 * 256) + 1e-6).all()
    claims = first_step_claims(ensemble)
    assert len(claims) == 5 and claims[0].name.startswith("6 layers")
    flat = ensemble.assign(**{"output change": 1.0})  # no amplification: the output-change claims must fail
    assert not first_step_claims(flat)[3].holds and not first_step_claims(flat)[4].holds


def test_gradient_norm_ensemble_and_claims():
    table = gradient_norm_ensemble(4, [0, 2], d_model=16, num_heads=2, d_ff=32)
    assert list(table.columns.names) == ["placement", "seed"] and table.shape == (4, 4)
    assert torch.allclose(torch.tensor(table[("Pre-LN", 2)].to_numpy()),
                          layer_gradient_norms(4, True, d_model=16, num_heads=2, d_ff=32, seed=2))
    assert len(plot_gradient_flow({"per seed": table}).axes) == 1
    rising = pd.DataFrame({("Post-LN", 0): [1.0, 2, 3, 4], ("Pre-LN", 0): [4.0, 3, 2, 1]})
    assert all(claim.holds for claim in gradient_profile_claims(rising, top=2))
    swapped = rising.rename(columns={"Post-LN": "Pre-LN", "Pre-LN": "Post-LN"})
    assert not any(claim.holds for claim in gradient_profile_claims(swapped, top=2))
