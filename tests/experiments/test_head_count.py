"""Tests for the head-count ablation at a fixed width (experiments.head_count)."""

from __future__ import annotations

import pytest
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


@pytest.mark.slow
def test_one_head_loses_the_positional_lookups_that_four_heads_learn():
    models = hc.train_head_counts(heads=(1, 4), steps=400)
    table = hc.head_count_table(models, *_test_batch())
    assert table.loc[1, ["previous", "first"]].min() < 0.95
    assert (table.loc[4, list(hs.RELATIONS)] > 0.97).all()


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
])
def test_bad_arguments(call, error, match):
    with pytest.raises(error, match=match):
        call()
