"""Tests for the copy-from-D task, its windowed model and the reach of its masks (DL0028)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from transformer_course.experiments import window_reach as wr


def test_batch_answers_sit_distance_from_the_end():
    tokens, answers = wr.make_reach_batch(6, torch.Generator().manual_seed(0), seq_len=10, distance=4, num_symbols=5)
    assert tokens.shape == (6, 10) and answers.shape == (6,)
    assert (tokens[:, -1] == 5).all() and (tokens[:, :-1] < 5).all()  # the query token is id K
    assert torch.equal(answers, tokens[:, 6])


def test_batches_are_reproducible():
    a = wr.make_reach_batch(4, torch.Generator().manual_seed(3))
    b = wr.make_reach_batch(4, torch.Generator().manual_seed(3))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@pytest.mark.parametrize("layers, window, expected", [(1, 5, 5), (2, 5, 9), (3, 3, 7), (4, 5, 12)])
def test_stack_reach_is_l_times_w_minus_1_plus_1_capped_at_t(layers, window, expected):
    assert wr.stack_reach(12, window, layers) == min(layers * (window - 1) + 1, 12) == expected


def test_global_query_reaches_everything_in_one_layer():
    assert wr.stack_reach(12, 3, 1, global_query=True) == 12
    mask = wr.reach_mask(12, 3, global_query=True)
    assert mask[-1].all() and not mask[0, 1:].any()  # causal: the other rows still look back only


def test_output_ignores_inputs_beyond_reach():
    """Property behind "provably": changing a token out of reach cannot change the logits."""
    torch.manual_seed(0)
    model = wr.WindowedReader(num_symbols=6, seq_len=10, num_layers=2, window=3).eval()  # reach 5
    tokens, _ = wr.make_reach_batch(3, torch.Generator().manual_seed(1), seq_len=10, distance=6, num_symbols=6)
    changed = tokens.clone()
    changed[:, :5] = (changed[:, :5] + 1) % 6  # positions 0..4: beyond the last 5
    with torch.no_grad():
        assert torch.equal(model(tokens), model(changed))
        inside = tokens.clone()
        inside[:, 5] = (inside[:, 5] + 1) % 6  # position 5 is the 5th from the end: in reach
        assert not torch.allclose(model(tokens), model(inside))


def test_model_shapes_and_reach_property():
    model = wr.WindowedReader(num_symbols=4, seq_len=8, num_layers=2, window=3)
    assert model(torch.zeros(5, 8, dtype=torch.long)).shape == (5, 4)
    assert model.reach == 5


@pytest.mark.slow
def test_training_solves_in_reach_and_fails_out_of_reach():
    table = wr.reach_experiment(steps=200, num_examples=256)
    assert list(table["in reach"]) == [False, True, True]
    assert abs(table["accuracy (%)"].iloc[0] - 12.5) < 8
    assert (table["accuracy (%)"].iloc[1:] >= 90).all()


def test_short_training_runs_and_reports():
    table = wr.reach_experiment(configs=(("one", 1, False),), steps=2, num_examples=16)
    assert isinstance(table, pd.DataFrame) and list(table.index) == ["one"]
    assert table.loc["one", "reach (positions)"] == 5 and table.loc["one", "chance (%)"] == 12.5


@pytest.mark.parametrize("call, match", [
    (lambda: wr.make_reach_batch(2, torch.Generator(), seq_len=5, distance=6), "distance"),
    (lambda: wr.make_reach_batch(2, torch.Generator(), distance=1), "distance"),
    (lambda: wr.make_reach_batch(2, "gen"), "generator"),
    (lambda: wr.make_reach_batch(0, torch.Generator()), "batch_size"),
    (lambda: wr.reach_mask(12, 0), "window"),
    (lambda: wr.reach_mask(12, 3, global_query=1), "global_query"),
    (lambda: wr.stack_reach(12, 3, 0), "num_layers"),
    (lambda: wr.WindowedReader(num_symbols=1), "num_symbols"),
    (lambda: wr.WindowedReader(seq_len=8)(torch.zeros(2, 7, dtype=torch.long)), "tokens"),
    (lambda: wr.WindowedReader(seq_len=8)(torch.zeros(2, 8)), "tokens"),
    (lambda: wr.reach_accuracy(torch.nn.Linear(2, 2), 4), "model"),
    (lambda: wr.reach_experiment(configs=()), "configs"),
    (lambda: wr.train_reach_model(1, lr=0.0), "lr"),
])
def test_bad_inputs_name_the_argument(call, match):
    with pytest.raises((TypeError, ValueError), match=match):
        call()
