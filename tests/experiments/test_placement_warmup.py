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


def test_validation():
    with pytest.raises(ValueError, match="seeds must hold at least one seed"):
        placement_warmup_runs(seeds=())
    with pytest.raises(TypeError, match="seeds must be an int"):
        placement_warmup_runs(seeds=(0.5,))
    with pytest.raises(ValueError, match="warmup_steps must be >= 1"):
        placement_warmup_runs(warmup_steps=0)


@pytest.mark.slow
def test_post_ln_needs_the_warm_up_at_this_learning_rate():
    # The chapter's setting, one seed, 100 steps: without warm-up Post-LN stays at chance;
    # with it, it learns, and so does Pre-LN either way. About 5 s.
    final = final_losses(placement_warmup_runs(seeds=(0,)))
    chance = chance_loss(16)
    assert final.loc[("Post-LN", "no warm-up"), 0] > chance - 0.25
    for condition in (("Post-LN", "warm-up"), ("Pre-LN", "no warm-up"), ("Pre-LN", "warm-up")):
        assert final.loc[condition, 0] < chance - 0.6
