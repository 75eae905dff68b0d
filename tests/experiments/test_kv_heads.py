"""Tests for the key/value-sharing study on the four lookups (experiments.kv_heads)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from transformer_course.experiments.seeds import ensemble_seeds
from transformer_course.experiments import head_count as hc
from transformer_course.experiments import head_specialization as hs
from transformer_course.experiments import kv_heads as kv
from transformer_course.nn.attention import MultiHeadAttention


def test_lookup_model_with_as_many_kv_heads_as_heads_is_the_plain_model():
    """G = H draws the same weights as the default, so the study's four-head runs serve as G = 4."""
    torch.manual_seed(0)
    plain = hs.LookupModel(num_heads=4)
    torch.manual_seed(0)
    same = hs.LookupModel(num_heads=4, num_kv_heads=4)
    for (name, p), q in zip(plain.named_parameters(), same.parameters()):
        assert torch.equal(p, q), name
    mqa = hs.LookupModel(num_heads=4, num_kv_heads=1)
    assert mqa.attention.num_kv_heads == 1 and mqa.attention.k_proj.out_features == 8  # one head of d_k = 8
    logits, weights = mqa(hs.make_lookup_batch(3, torch.Generator().manual_seed(1))[0], need_weights=True)
    assert logits.shape == (3, 4, 12, 24) and weights.shape == (3, 4, 12, 12)


def test_cached_numbers_per_token_is_two_g_dk_and_validates():
    assert [kv.cached_numbers_per_token(g) for g in (4, 2, 1)] == [64, 32, 16]  # d_k = 32 / 4 = 8
    layer = MultiHeadAttention(32, 4, num_kv_heads=2)  # the module's own key/value widths agree
    assert layer.k_proj.out_features + layer.v_proj.out_features == kv.cached_numbers_per_token(2)
    with pytest.raises(ValueError, match="num_kv_heads must divide num_heads=4, got 3"):
        kv.cached_numbers_per_token(3)
    with pytest.raises(ValueError, match="num_heads must divide d_model=32, got 5"):
        kv.cached_numbers_per_token(1, num_heads=5)


def test_kv_run_with_g_equal_h_is_the_head_count_run():
    """from_lookup_run reads off a four-head run exactly what kv_run(seed, 4) records."""
    study = hc.lookup_run(3, 4, max_steps=30)
    direct = kv.kv_run(3, 4, max_steps=30)
    shared = kv.from_lookup_run(study)
    pd.testing.assert_frame_equal(direct.curve, shared.curve)
    assert direct.steps == shared.steps or (math.isnan(direct.steps) and math.isnan(shared.steps))
    pd.testing.assert_series_equal(direct.accuracy, shared.accuracy)
    mqa = kv.kv_run(3, 1, max_steps=30)
    assert mqa.num_kv_heads == 1 and not mqa.curve.equals(direct.curve)  # another model, another curve
    with pytest.raises(ValueError, match="num_heads=4, got 2"):
        kv.from_lookup_run(hc.LookupRun(0, 2, direct.curve, 1.0, pd.DataFrame(), pd.DataFrame()))
    with pytest.raises(TypeError, match="run"):
        kv.from_lookup_run(direct)


def _run(seed, g, steps, worst):
    curve = pd.DataFrame({"worst": [0.1, 0.97]}, index=pd.Index([0, 100], name="step"))
    accuracy = pd.Series([worst, 1.0, 1.0, 1.0], index=list(hs.RELATIONS), name="accuracy")
    return kv.KVRun(seed, g, curve, steps, accuracy)


def test_table_and_claims_read_the_ensemble():
    runs = {(4, 0): _run(0, 4, 100.0, 0.97), (4, 1): _run(1, 4, 150.0, 0.96),
            (2, 0): _run(0, 2, 125.0, 0.95), (2, 1): _run(1, 2, float("nan"), 0.80),
            (1, 0): _run(0, 1, 300.0, 0.96), (1, 1): _run(1, 1, 200.0, 0.99)}
    table = kv.kv_table(runs)
    assert list(table.index) == [4, 2, 1] and table.index.name == "key/value heads G"
    assert table["cached numbers per token"].tolist() == [64, 32, 16]
    assert table["reached"].tolist() == [2, 1, 2]
    assert table.loc[2, "median steps"] == (125 + hc.MAX_STEPS) / 2  # a miss counts as the budget
    assert table.loc[2, "min steps"] == table.loc[2, "max steps"] == 125  # ... and is left out of the range
    assert table.loc[2, "worst lookup at the end, min"] == pytest.approx(0.80)
    claims = {c.name: c for c in kv.kv_claims(runs)}
    fewest = next(c for s, c in claims.items() if s.startswith("G = 4, 2, 1: fewest"))
    assert fewest.value == 1 and not fewest.holds  # a run that missed fails the claim
    mqa = claims["|median steps to threshold, G = 1 (MQA) minus G = 4 (MHA)|"]
    assert mqa.value == 250 - 125 and not mqa.holds
    gqa = claims["|median steps to threshold, G = 2 (GQA) minus G = 4 (MHA)|"]
    assert gqa.value == (125 + hc.MAX_STEPS) / 2 - 125 and not gqa.holds  # the miss drags GQA's median up
    assert not any(s.startswith("G = 4, 2, 1: lowest") for s in claims)  # the stopping rule sets the end accuracy
    close = {(4, 0): _run(0, 4, 100.0, 0.97), (2, 0): _run(0, 2, 100.0 + 2 * hc.EVAL_EVERY, 0.97),
             (1, 0): _run(0, 1, 100.0 - hc.EVAL_EVERY, 0.97)}
    two_sided = {c.name: c for c in kv.kv_claims(close)}
    assert two_sided["|median steps to threshold, G = 1 (MQA) minus G = 4 (MHA)|"].holds  # one check faster: within
    assert not two_sided["|median steps to threshold, G = 2 (GQA) minus G = 4 (MHA)|"].holds  # two checks slower: not


def test_run_kv_ensemble_keys_and_validation():
    calls = []

    def fake(seed, g):
        calls.append((seed, g))
        return _run(seed, g, 100.0, 0.99)

    runs = kv.run_kv_ensemble(5, kv_heads=(2, 1), size=2, run=fake)
    s, r = ensemble_seeds(5, hc.EXPERIMENT, 2)  # the head-count study's seeds: the two studies are paired
    assert list(runs) == [(2, s), (2, r), (1, s), (1, r)] and calls == [(s, 2), (r, 2), (s, 1), (r, 1)]
    with pytest.raises(ValueError, match="num_kv_heads must divide num_heads=4, got 3"):
        kv.run_kv_ensemble(0, kv_heads=(3,), run=fake)
    with pytest.raises(TypeError, match="kv_heads"):
        kv.run_kv_ensemble(0, kv_heads=2, run=fake)
    with pytest.raises(ValueError, match="runs must hold at least one run"):
        kv.kv_table({})
