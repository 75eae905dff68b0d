"""Tests for the head-count ablation at a fixed width (experiments.head_count)."""

from __future__ import annotations

import pytest

from transformer_course.experiments.seeds import ensemble_seeds
from transformer_course.experiments.seeds import ensemble_seeds
import torch

from transformer_course.experiments import head_count as hc
from transformer_course.experiments import head_specialization as hs


def _test_batch():
    return hs.make_lookup_batch(64, torch.Generator().manual_seed(1))


def test_models_share_width_and_parameters_and_differ_only_in_heads():
    models = hc.train_head_counts(heads=(1, 2, 4), d_model=16, steps=2, batch_size=8)
    assert list(models) == [1, 2, 4]
    assert [m.attention.num_heads for m in models.values()] == [1, 2, 4]
    assert [m.attention.d_head for m in models.values()] == [16, 8, 4]
    table = hc.head_count_table(models, *_test_batch())
    assert table.index.name == "heads h" and list(table.index) == [1, 2, 4]
    assert table["d_head"].tolist() == [16, 8, 4]
    assert table["parameters"].nunique() == 1  # the split adds no parameters
    assert table["parameters"].iloc[0] == sum(p.numel() for p in models[1].parameters())
    assert list(table.columns[2:]) == list(hs.RELATIONS)
    assert ((table[list(hs.RELATIONS)] >= 0) & (table[list(hs.RELATIONS)] <= 1)).all().all()


def test_same_seed_same_initial_weights_whatever_the_head_count():
    """Only the split changes: with 0 training steps the weights of h = 1 and h = 4 are identical."""
    a = hc.train_head_counts(heads=(1,), d_model=16, steps=1, lr=1e-12, batch_size=4)[1]
    b = hc.train_head_counts(heads=(4,), d_model=16, steps=1, lr=1e-12, batch_size=4)[4]
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-9, msg=name)


def test_trained_models_are_reused_not_retrained():
    model, _ = hs.train_lookup_model(steps=2, d_model=16, num_heads=2, batch_size=8)
    before = [p.clone() for p in model.parameters()]
    models = hc.train_head_counts(heads=(1, 2), d_model=16, steps=2, batch_size=8, trained={2: model})
    assert models[2] is model
    assert all(torch.equal(p, q) for p, q in zip(before, model.parameters()))


def test_curve_run_without_stopping_is_the_plain_training_run():
    tokens, sources = _test_batch()
    model, curve = hc.train_with_curve(3, 2, tokens, sources, max_steps=10, eval_every=4,
                                       stop_at_threshold=False, d_model=16, batch_size=8)
    plain, _ = hs.train_lookup_model(seed=3, steps=10, d_model=16, num_heads=2, batch_size=8)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), plain.parameters()))
    assert list(curve.index) == [0, 4, 8, 10]  # every eval_every steps, and at the end
    assert list(curve.columns) == [*hs.RELATIONS, "worst"]
    assert (curve["worst"] == curve[list(hs.RELATIONS)].min(axis=1)).all()
    assert curve.loc[10].drop("worst").tolist() == hs.lookup_accuracy(model, tokens, sources).tolist()


def test_curve_run_stops_at_the_first_evaluation_that_meets_the_threshold():
    tokens, sources = _test_batch()
    # threshold below anything the model can score: met at step 0, before the first update
    model, curve = hc.train_with_curve(3, 2, tokens, sources, max_steps=50, threshold=1e-9, d_model=16, batch_size=8)
    assert list(curve.index) == [0] and hc.steps_to_threshold(curve, 1e-9) == 0.0
    with hs.seeded(3):
        fresh = hs.LookupModel(d_model=16, num_heads=2)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), fresh.parameters()))
    assert not model.training


def test_steps_to_threshold_reads_the_first_step_and_nan_when_never_reached():
    import math

    import pandas as pd

    curve = pd.DataFrame({"worst": [0.1, 0.96, 0.94, 0.99]}, index=pd.Index([0, 25, 50, 75], name="step"))
    assert hc.steps_to_threshold(curve, 0.95) == 25.0
    assert hc.steps_to_threshold(curve, 0.97) == 75.0
    assert math.isnan(hc.steps_to_threshold(curve, 0.995))
    with pytest.raises(ValueError, match="worst"):
        hc.steps_to_threshold(curve.rename(columns={"worst": "x"}))


def _fake_run(seed, h, steps, worst_half, worst_end, one_to_one=True, necessary=1.0):
    import pandas as pd

    relations = list(hs.RELATIONS)
    heads = [f"head {k}" for k in range(h)]
    scores = pd.DataFrame(0.0, index=heads, columns=relations)
    ablation = pd.DataFrame(1.0, index=["none"] + heads, columns=relations)
    for k in range(h):  # with more than four heads, heads 4, 5, ... duplicate the lookups of heads 0, 1, ...
        scores.iloc[k, k % 4] = 0.9 if one_to_one or k % 4 < 2 else 0.4  # positional lookups always owned
    for k in range(round(necessary * h)):
        ablation.iloc[1 + k, k % 4] = 0.1
    positional = [0.0, worst_half, worst_end]  # the positional lookups lag, the content lookups are done
    curve = pd.DataFrame({"previous": positional, "first": positional, "marker": [0.0, 0.99, 0.99],
                          "digit": [0.0, 0.99, 0.99], "worst": positional}, index=pd.Index([0, 200, 400], name="step"))
    return hc.LookupRun(seed, h, curve, steps, scores, ablation)


def test_steps_and_specialization_tables_and_claims_on_known_runs():
    nan = float("nan")
    runs = {}
    for seed in range(8):
        runs[1, seed] = _fake_run(seed, 1, nan, 0.6, 0.8)
        runs[1, seed].scores.iloc[0, 0] = 0.4  # the single head spreads its mass
        runs[2, seed] = _fake_run(seed, 2, 300.0 + seed, 0.9, 0.99)
        runs[4, seed] = _fake_run(seed, 4, 150.0 + seed, 0.97, 0.99, one_to_one=seed < 5)  # 5 of 8 one-to-one
        runs[8, seed] = _fake_run(seed, 8, 175.0, 0.97, 0.99, necessary=0.25)
    steps = hc.steps_table(runs)
    assert steps.loc[1, "reached"] == 0 and steps.loc[1, "median steps"] == 400.0  # censored at the budget
    assert steps.loc[2, "median steps"] == 303.5 and steps.loc[2, "min steps"] == 300.0
    assert steps.loc[1, "worst lookup at step 200"] == 0.6 and steps.loc[1, "worst lookup at the end"] == 0.8
    special = hc.specialization_table(runs)
    assert special.xs(4, level="heads h")["one_to_one"].sum() == 5
    assert special.xs(8, level="heads h")["necessary_share"].median() == 0.25
    claims = {c.name: c for c in hc.study_claims(runs)}
    assert all(c.holds for c in claims.values()), [c.statement for c in claims.values() if not c.holds]
    assert claims["median steps to threshold, h = 2 minus h = 4"].value == 150.0
    assert hc.owned_lookups(runs, 4).sum().tolist() == [8, 8, 5, 5]
    assert hc.final_accuracy(runs, 1).loc[0].tolist() == [0.8, 0.8, 0.99, 0.99]
    assert claims["h = 1: worst content lookup minus worst positional lookup at the end, median over runs"].value == (
        pytest.approx(0.19))
    # a study in which one head learns as fast as four contradicts the claims
    for seed in range(8):
        runs[1, seed] = _fake_run(seed, 1, 150.0, 0.99, 0.99)
    assert not all(c.holds for c in hc.study_claims(runs))


def test_run_ensemble_calls_the_run_for_every_head_count_and_seed():
    calls = []

    def run(seed, h):
        calls.append((h, seed))
        return _fake_run(seed, h, 100.0, 1.0, 1.0)

    runs = hc.run_ensemble(5, heads=(1, 4), size=3, run=run)
    a, b, c = ensemble_seeds(5, hc.EXPERIMENT, 3)  # the ensemble of base seed 5: independent draws, shared by every h
    assert list(runs) == calls == [(1, a), (1, b), (1, c), (4, a), (4, b), (4, c)]
    with pytest.raises(ValueError, match="base_seed"):
        hc.run_ensemble(-1, run=run)


@pytest.mark.parametrize("call, error, match", [
    (lambda: hc.train_head_counts(heads=(1, 3), d_model=16), ValueError, "heads must divide d_model=16"),
    (lambda: hc.train_head_counts(heads=(2, 2), d_model=16), ValueError, "heads must not repeat"),
    (lambda: hc.train_head_counts(heads=(), d_model=16), ValueError, "heads must hold at least one"),
    (lambda: hc.train_head_counts(heads=(0,), d_model=16), ValueError, "heads must be >= 1"),
    (lambda: hc.train_head_counts(heads=4, d_model=16), TypeError, "heads must be a sequence"),
    (lambda: hc.train_head_counts(heads=(2.0,), d_model=16), TypeError, "heads must be an int"),
    (lambda: hc.train_head_counts(heads=(2,), d_model=16, trained={2: hs.LookupModel(d_model=16, num_heads=4)}),
     ValueError, r"trained\[2\] must have num_heads=2"),
    (lambda: hc.train_head_counts(heads=(2,), d_model=16, trained={2: "model"}), TypeError, r"trained\[2\]"),
    (lambda: hc.head_count_table({}, *_test_batch()), ValueError, "models must hold at least one"),
    (lambda: hc.head_count_table({2: hs.LookupModel(num_heads=4)}, *_test_batch()), ValueError,
     r"models\[2\] must have 2 heads"),
    (lambda: hc.head_count_table([1], *_test_batch()), TypeError, "models must be"),
    (lambda: hc.head_count_table({4: hs.LookupModel()}, torch.zeros(3), torch.zeros(1, 4, 3)), ValueError, "tokens"),
    (lambda: hc.train_with_curve(0, 2, *_test_batch(), max_steps=0), ValueError, "max_steps"),
    (lambda: hc.train_with_curve(0, 2, *_test_batch(), max_steps=5, threshold=1.5), ValueError, "threshold"),
    (lambda: hc.train_with_curve(0, 2, *_test_batch(), max_steps=5, steps=3), TypeError, "max_steps, not steps"),
    (lambda: hc.steps_table({}), ValueError, "runs must hold"),
])
def test_bad_arguments(call, error, match):
    with pytest.raises(error, match=match):
        call()
