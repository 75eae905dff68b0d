"""Tests for the copy-from-D task, its windowed model and the reach of its masks (DL0028)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from transformer_course.experiments import window_reach as wr
from transformer_course.experiments.training import seeded


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


def _readers(specs, dtype=torch.float64):
    readers = []
    for seed, global_query in specs:
        with seeded(seed):
            readers.append(wr.WindowedReader(num_symbols=5, seq_len=8, num_layers=2, window=3, global_query=global_query,
                                             d_model=8, num_heads=2, d_ff=12).to(dtype))
    return readers


def test_ensemble_computes_what_each_reader_computes():
    readers = _readers([(0, False), (1, True), (2, False)])
    ensemble = wr.ReaderEnsemble(readers).double()
    gen = torch.Generator().manual_seed(3)
    tokens = torch.stack([wr.make_reach_batch(4, gen, seq_len=8, distance=5, num_symbols=5)[0] for _ in readers])
    with torch.no_grad():
        out = ensemble(tokens)  # (E, B, K)
        for e, reader in enumerate(readers):
            torch.testing.assert_close(out[e], reader(tokens[e]), rtol=0, atol=1e-12)
    assert ensemble.global_query == (False, True, False) and ensemble.num_members == 3


def test_ensemble_members_only_see_their_own_loss():
    ensemble = wr.ReaderEnsemble(_readers([(0, False), (1, False)], torch.float32))
    tokens = torch.stack([wr.make_reach_batch(4, torch.Generator().manual_seed(s), 8, 5, 5)[0] for s in (0, 1)])
    ensemble(tokens)[0].sum().backward()  # member 0's output only
    for name, parameter in ensemble.named_parameters():
        assert parameter.grad[1].abs().max() == 0, name
        assert parameter.grad[0].abs().max() > 0, name


def test_ensemble_rejects_readers_of_different_shapes():
    with seeded(0):
        other = wr.WindowedReader(num_symbols=5, seq_len=8, num_layers=1, window=3, d_model=8, num_heads=2, d_ff=12)
    with pytest.raises(ValueError, match="same"):
        wr.ReaderEnsemble(_readers([(0, False)], torch.float32) + [other])
    with pytest.raises(ValueError, match="readers"):
        wr.ReaderEnsemble([])
    with pytest.raises(ValueError, match="tokens"):
        wr.ReaderEnsemble(_readers([(0, False)], torch.float32))(torch.zeros(2, 3, 8, dtype=torch.long))


def test_steps_to_threshold_finds_the_first_window_and_marks_never():
    accuracy = torch.tensor([[0.0, 0.0, 1.0, 1.0, 1.0], [0.0, 1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0, 1.0]])
    steps = wr.steps_to_threshold(accuracy, 0.9, smooth=2)
    assert steps[0] == 4 and torch.isnan(steps[1]) and steps[2] == 2
    with pytest.raises(ValueError, match="smooth"):
        wr.steps_to_threshold(accuracy, 0.9, smooth=6)


def test_grid_settings_ask_each_depth_its_reach_and_one_beyond():
    grid = wr.ReachGrid(depths=(1, 2, 3), distances=(3, 5, 7))
    assert [grid.reach(depth) for depth in (1, 2, 3)] == [3, 5, 7]
    assert [grid.distances_for(depth) for depth in (1, 2, 3)] == [(3, 4), (3, 5, 6), (3, 5, 7, 8)]
    assert [wr.REACH_GRID.distances_for(depth) for depth in wr.REACH_GRID.depths] == [(3, 4), (3, 5, 6)]
    assert [grid.hops(d) for d in (2, 3, 4, 5, 7, 8)] == [1, 1, 2, 2, 3, 4]
    assert wr.ReachGrid(depths=(4,), distances=(3, 5, 7), seq_len=8).distances_for(4) == (3, 5, 7)  # reach 8 = T
    with pytest.raises(ValueError, match="smooth"):
        wr.ReachGrid(steps=10, smooth=20)
    with pytest.raises(ValueError, match="distance"):
        wr.ReachGrid(distances=(9,))


TINY = wr.ReachGrid(depths=(1, 2), steps=12, smooth=3, num_examples=32, d_model=8, num_heads=2, d_ff=12)


def test_grid_rows_and_a_member_does_not_depend_on_its_ensemble():
    both = wr.reach_grid([0, 1], TINY)
    alone = wr.reach_grid([1], TINY)
    cells = sum(len(TINY.distances_for(d)) + 1 for d in TINY.depths)
    assert len(both.table) == 2 * cells and both.curves.shape == (2 * cells, TINY.steps)
    picked = both.select([1])
    pd.testing.assert_frame_equal(picked.table, alone.table)
    assert torch.equal(picked.curves, alone.curves)
    row = both.table[(both.table["layers L"] == 1) & (both.table["distance D"] == 4)].iloc[0]
    assert row["reach"] == 3 and not row["in reach"] and row["hops"] == 2
    glob = both.table[both.table["global query"]]
    assert (glob["reach"] == 8).all() and glob["in reach"].all() and (glob["hops"] == 1).all()
    with pytest.raises(ValueError, match="seeds"):
        both.select([5])


def test_the_grid_in_two_workers_is_the_grid_in_one_process_bit_for_bit():
    one = wr.reach_grid([0, 1, 2], TINY)
    two = wr.reach_grid([0, 1, 2], TINY, workers=2)  # seeds [0, 2] and [1] as two ensembles per depth
    pd.testing.assert_frame_equal(two.table, one.table)
    assert torch.equal(two.curves, one.curves)
    with pytest.raises(ValueError, match="workers"):
        wr.reach_grid([0], TINY, workers=0)


def _fake_result(accuracy=None, steps=None):
    """A grid result with chosen per-cell accuracy and steps to threshold (8 seeds each)."""
    settings = wr.REACH_GRID
    accuracy, steps = dict(accuracy or {}), dict(steps or {})
    rows = []
    for depth in settings.depths:
        for distance, global_query in settings.cells(depth):
            reach = settings.seq_len if global_query else settings.reach(depth)
            hops = 1 if global_query else settings.hops(distance)
            default_acc = 100.0 if reach >= distance else 12.5
            for seed in range(8):
                rows.append({"layers L": depth, "distance D": distance, "global query": global_query, "seed": seed,
                             "reach": reach, "in reach": reach >= distance, "hops": hops,
                             "accuracy (%)": accuracy.get((depth, distance, global_query), default_acc),
                             "steps to threshold": steps.get((depth, distance, global_query),
                                                             40.0 * 4 ** (hops - 1) if reach >= distance else float("nan"))})
    table = pd.DataFrame(rows)
    return wr.ReachGridResult(table, torch.zeros(len(table), settings.steps), settings)


def test_reach_claims_hold_on_the_expected_pattern_and_fail_on_broken_ones():
    assert all(claim.holds for claim in wr.reach_claims(_fake_result()))
    failing = lambda result: {c.name for c in wr.reach_claims(result) if not c.holds}  # noqa: E731
    # a mask that leaked: a 2-layer stack answers D = 6, beyond its reach of 5
    assert failing(_fake_result(accuracy={(2, 6, False): 60.0})) == {"beyond reach, highest accuracy (%)"}
    # a relay that learns as fast as one hop
    flat = failing(_fake_result(steps={(2, 5, False): 40.0}))
    assert {"2-hop (L = 2, D = 5) / 1-hop (L = 1, D = 3) median steps",
            "2 layers, D = 5 (2 hops) / D = 3 (1 hop) median steps"} <= flat
    # a global query no faster than the relay
    assert failing(_fake_result(steps={(2, 8, True): 160.0})) == {
        "2 layers, global query at D = 8 / window at D = 5 median steps", }
    # a two-hop cell not solved within the budget
    assert failing(_fake_result(accuracy={(2, 5, False): 30.0})) == {"in reach, lowest cell median accuracy (%)"}
    # one-hop models that failed (all 8 seeds of the cell, so its median fails too)
    assert failing(_fake_result(accuracy={(1, 3, False): 80.0})) == {"one hop, lowest accuracy (%)",
                                                                     "in reach, lowest cell median accuracy (%)"}


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
    (lambda: wr.reach_grid([], TINY), "seeds"),
    (lambda: wr.reach_grid([0], "settings"), "settings"),
    (lambda: wr.reach_claims("result"), "result"),
    (lambda: wr.reach_grid_summary(None), "result"),
])
def test_bad_inputs_name_the_argument(call, match):
    with pytest.raises((TypeError, ValueError), match=match):
        call()
