"""The train-short-test-long experiment: task, model, schemes and validation (fast: no full training)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from transformer_course.experiments.length_generalization import (IGNORE_INDEX, SCHEMES, LengthGeneralizationModel,
                                                                  PositionalSelfAttention, accuracy_bands,
                                                                  far_end_accuracy, length_generalization,
                                                                  make_last_value_batch, train_last_value)
from transformer_course.nn.positional import alibi_bias, rotary_embedding
from transformer_course.plotting.positional import plot_length_generalization


def _reference_targets(tokens: torch.Tensor, num_noise: int) -> torch.Tensor:
    targets = torch.full_like(tokens, IGNORE_INDEX)
    for b in range(tokens.shape[0]):
        last = IGNORE_INDEX
        for t in range(tokens.shape[1]):
            if tokens[b, t] >= num_noise:
                last = int(tokens[b, t])
            targets[b, t] = last
    return targets


def test_last_value_targets_match_a_loop():
    tokens, targets = make_last_value_batch(16, 20, torch.Generator().manual_seed(0))
    assert tokens.shape == targets.shape == (16, 20)
    assert torch.equal(targets, _reference_targets(tokens, num_noise=8))
    assert ((targets == IGNORE_INDEX) | (targets >= 8)).all()


def test_last_value_batch_is_reproducible_and_uses_the_rate():
    a = make_last_value_batch(64, 50, torch.Generator().manual_seed(3), value_rate=0.2)
    b = make_last_value_batch(64, 50, torch.Generator().manual_seed(3), value_rate=0.2)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    rate = float((a[0] >= 8).float().mean())
    assert 0.15 < rate < 0.25


@pytest.mark.parametrize("kwargs, match", [
    (dict(batch_size=0), "batch_size"), (dict(length=0), "length"), (dict(num_values=1), "num_values"),
    (dict(value_rate=0.0), "value_rate"), (dict(value_rate=1.0), "value_rate")])
def test_last_value_batch_validates(kwargs, match):
    args = dict(batch_size=2, length=4, generator=torch.Generator())
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        make_last_value_batch(**args)


def test_last_value_batch_needs_a_generator():
    with pytest.raises(TypeError, match="generator"):
        make_last_value_batch(2, 4, generator=0)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_scheme_is_causal(scheme):
    torch.manual_seed(0)
    model = LengthGeneralizationModel(scheme, max_len=12).double().eval()
    tokens = torch.randint(0, 16, (2, 12))
    changed = tokens.clone()
    changed[:, 8:] = (changed[:, 8:] + 1) % 16  # change only the future of position 7
    with torch.no_grad():
        out, out_changed = model(tokens), model(changed)  # (B, T, V) each
    assert out.shape == (2, 12, 16)
    assert torch.allclose(out[:, :8], out_changed[:, :8], atol=1e-12)
    assert not torch.allclose(out[:, 8:], out_changed[:, 8:])


def test_attention_schemes_match_a_hand_computation():
    torch.manual_seed(1)
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    for scheme in ("rope", "alibi", "none"):
        layer = PositionalSelfAttention(8, 2, scheme).double()
        mha = layer.attention
        q, k, v = (mha.split_heads(p(x)) for p in (mha.q_proj, mha.k_proj, mha.v_proj))  # (B, H, T, Dh)
        if scheme == "rope":
            q, k = rotary_embedding(q), rotary_embedding(k)
        scores = q @ k.transpose(-2, -1) / 2.0  # Dh = 4
        if scheme == "alibi":
            scores = scores + alibi_bias(2, 5).double()
        scores = scores.masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), float("-inf"))
        expected = mha.out_proj(mha.merge_heads(scores.softmax(-1) @ v))
        assert torch.allclose(layer(x), expected, atol=1e-12), scheme


def test_rope_and_alibi_weights_depend_on_offsets_and_none_does_not():
    """Marking the nearer or the farther of two equal earlier tokens: the same output only without a scheme."""
    torch.manual_seed(2)
    token = torch.randn(1, 1, 8, dtype=torch.float64)
    x = token.expand(1, 3, 8)  # (B, T, D): the same vector at positions 0, 1, 2
    for scheme in ("rope", "alibi", "none"):
        layer = PositionalSelfAttention(8, 2, scheme).double()
        y = x.clone()
        y[0, 0] += 1.0  # mark position 0, the farthest key of query 2
        z = x.clone()
        z[0, 1] += 1.0  # mark position 1, the nearest earlier key of query 2
        delta_far, delta_near = (layer(y) - layer(x))[0, 2], (layer(z) - layer(x))[0, 2]
        same = torch.allclose(delta_far, delta_near, atol=1e-9)
        assert same == (scheme == "none"), scheme


def test_learned_table_is_refused_past_max_len():
    model = LengthGeneralizationModel("learned", max_len=8)
    with pytest.raises(ValueError, match="max_len"):
        model(torch.zeros(1, 9, dtype=torch.long))
    LengthGeneralizationModel("sinusoidal", max_len=8)(torch.zeros(1, 9, dtype=torch.long))  # defined anywhere


def test_learned_rows_past_the_training_length_stay_untrained():
    with torch.random.fork_rng():
        torch.manual_seed(0)
        initial = LengthGeneralizationModel("learned", max_len=12).positional.embedding.weight.detach().clone()
    model, losses = train_last_value("learned", train_length=4, steps=3, max_len=12)
    weight = model.positional.embedding.weight.detach()
    assert len(losses) == 3
    assert torch.equal(weight[4:], initial[4:])
    assert not torch.equal(weight[:4], initial[:4])


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(scheme="absolute"), ValueError, "scheme"), (dict(num_heads=3), ValueError, "num_heads"),
    (dict(d_model=0), ValueError, "d_model"), (dict(max_len=1.5), TypeError, "max_len")])
def test_model_validates(kwargs, error, match):
    args = dict(scheme="none")
    args.update(kwargs)
    with pytest.raises(error, match=match):
        LengthGeneralizationModel(**args)


def test_rope_needs_an_even_head_width():
    with pytest.raises(ValueError, match="even head width"):
        PositionalSelfAttention(6, 2, "rope")


def test_far_end_accuracy_scores_a_perfect_oracle_at_100_percent():
    class Oracle(torch.nn.Module):
        def forward(self, tokens):
            targets = _reference_targets(tokens, num_noise=8).clamp(min=0)
            return torch.nn.functional.one_hot(targets, 16).float()  # (B, T, V)

    assert far_end_accuracy(Oracle(), length=40, scored=10, num_sequences=8) == 1.0
    with pytest.raises(ValueError, match="scored"):
        far_end_accuracy(Oracle(), length=4, scored=5)
    with pytest.raises(TypeError, match="model"):
        far_end_accuracy("model", length=4, scored=2)


@pytest.mark.parametrize("kwargs, match", [
    (dict(schemes=()), "schemes"), (dict(schemes=("abs",)), "schemes"),
    (dict(test_lengths=(8,)), "test_lengths"), (dict(train_length=1), "train_length")])
def test_length_generalization_validates(kwargs, match):
    with pytest.raises(ValueError, match=match):
        length_generalization(**kwargs)


def test_length_generalization_table_and_figure():
    table = length_generalization(schemes=("alibi", "learned"), train_length=4, test_lengths=(4, 8), steps=2)
    assert list(table.index) == ["alibi", "learned"] and list(table.columns) == [4, 8]
    assert ((table >= 0) & (table <= 100)).all().all()
    fig = plot_length_generalization(table, train_length=4, chance=table.attrs["chance"])
    assert len(fig.axes) == 1 and len(fig.axes[0].lines) == 2 + 2  # two schemes, L line, chance line
    with pytest.raises(TypeError, match="table"):
        plot_length_generalization(pd.DataFrame(), train_length=4)
    with pytest.raises(ValueError, match="train_length"):
        plot_length_generalization(table, train_length=0)


@pytest.mark.slow
def test_alibi_extrapolates_and_learned_does_not():
    table = length_generalization(schemes=("alibi", "learned"), train_length=16, test_lengths=(16, 64))
    assert (table[16] > 90).all()
    assert table.loc["alibi", 64] > 80 > 50 > table.loc["learned", 64]


def test_accuracy_bands():
    table = pd.DataFrame({16: [99.0, 49.9], 64: [80.0, 50.0]}, index=["alibi", "learned"])
    bands = accuracy_bands(table)
    assert bands.loc["alibi"].tolist() == [">= 80", ">= 80"]
    assert bands.loc["learned"].tolist() == ["< 50", "50-80"]
    with pytest.raises(ValueError, match="thresholds"):
        accuracy_bands(table, thresholds=(80, 50))
    with pytest.raises(TypeError, match="table"):
        accuracy_bands([[1.0]])


def test_offset_targets_are_the_tokens_k_back():
    from transformer_course.experiments.length_generalization import make_offset_batch, make_task_batch, task_chance

    tokens, targets = make_offset_batch(5, 12, torch.Generator().manual_seed(0), offset=3)
    assert (targets[:, :3] == IGNORE_INDEX).all() and torch.equal(targets[:, 3:], tokens[:, :-3])
    tokens, targets = make_offset_batch(2, 2, torch.Generator().manual_seed(0), offset=3)  # offset >= length
    assert (targets == IGNORE_INDEX).all()
    a = make_task_batch("offset", 4, 10, torch.Generator().manual_seed(1))
    b = make_offset_batch(4, 10, torch.Generator().manual_seed(1))
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert task_chance("offset") == 100 / 16 and task_chance("last_value") == 100 / 8
    with pytest.raises(ValueError, match="task"):
        make_task_batch("copy", 4, 10, torch.Generator())
    with pytest.raises(ValueError, match="offset"):
        make_offset_batch(4, 10, torch.Generator(), offset=0)


def test_rope_scaling_changes_only_long_inputs_and_restores_the_model():
    from transformer_course.experiments.length_generalization import rope_scaling

    torch.manual_seed(0)
    model = LengthGeneralizationModel("rope", max_len=32).eval()
    short = torch.randint(0, 16, (2, 8))
    long = torch.randint(0, 16, (2, 32))
    with torch.no_grad():
        plain_short, plain_long = model(short), model(long)
        for method in ("interpolation", "ntk"):
            with rope_scaling(model, method, train_length=8):
                assert torch.equal(model(short), plain_short)  # T <= L: untouched
                assert not torch.allclose(model(long), plain_long)  # T > L: rescaled
            assert torch.equal(model(long), plain_long)  # restored on exit
    # interpolation is exactly RoPE at positions m L / T
    layer = model.blocks[0].self_attn
    x = torch.randn(1, 32, 32)
    with torch.no_grad(), rope_scaling(model, "interpolation", train_length=8):
        scaled = layer(x)
    mha = layer.attention
    q, k, v = (mha.split_heads(proj(x)) for proj in (mha.q_proj, mha.k_proj, mha.v_proj))
    positions = torch.arange(32, dtype=torch.float64) / 4
    from transformer_course.nn.attention import _attention
    from transformer_course.nn.masks import causal_mask
    heads, _ = _attention(rotary_embedding(q, positions), rotary_embedding(k, positions), v, causal_mask(32), None)
    assert torch.allclose(scaled, mha.out_proj(mha.merge_heads(heads)), atol=1e-6)
    with pytest.raises(ValueError, match="RoPE"):
        with rope_scaling(LengthGeneralizationModel("alibi"), "ntk", 8):
            pass
    with pytest.raises(ValueError, match="method"):
        with rope_scaling(model, "yarn", 8):
            pass


def test_ensemble_table_medians_and_figure():
    from transformer_course.experiments.length_generalization import ensemble_medians, length_generalization_ensemble, median_accuracy
    from transformer_course.plotting.positional import plot_length_generalization_ensemble

    results = length_generalization_ensemble("offset", ["rope", "none"], train_length=4, test_lengths=(4, 8), steps=2,
                                             seeds=[0, 1], rope_scalings=("interpolation", "ntk"))
    assert list(dict.fromkeys(results["scheme"])) == ["rope", "rope + PI", "rope + NTK", "none"]
    assert len(results) == 4 * 2 * 2 and results["accuracy"].between(0, 100).all()
    assert results.attrs["chance"] == 100 / 16 and results.attrs["task"] == "offset"
    # PI and NTK leave the training length alone
    at_L = results[results["test_length"] == 4].pivot_table(index="seed", columns="scheme", values="accuracy")
    assert (at_L["rope + PI"] == at_L["rope"]).all() and (at_L["rope + NTK"] == at_L["rope"]).all()
    medians = ensemble_medians(results)
    assert list(medians.index) == ["rope", "rope + PI", "rope + NTK", "none"] and list(medians.columns) == [4, 8]
    assert medians.loc["none", 8] == median_accuracy(results, "none", 8)
    with pytest.raises(ValueError, match="no row"):
        median_accuracy(results, "alibi", 8)
    fig = plot_length_generalization_ensemble([results], train_length=4)
    assert len(fig.axes) == 1 and "2 seeds" in fig.axes[0].get_title()
    with pytest.raises(ValueError, match="seeds"):
        length_generalization_ensemble("offset", ["rope"], train_length=4, test_lengths=(4,), steps=1, seeds=[0, 0])
    with pytest.raises(ValueError, match="missing"):
        plot_length_generalization_ensemble([results.drop(columns="seed")], train_length=4)


def _fake_results(task, values):
    """A results table whose every seed has ``values[scheme][multiple]`` at test length multiple * 16."""
    records = [{"task": task, "scheme": scheme, "seed": seed, "test_length": 16 * m, "accuracy": accuracy}
               for scheme, by_length in values.items() for seed in range(8) for m, accuracy in by_length.items()]
    return pd.DataFrame.from_records(records)


def test_chapter_claims_hold_on_the_expected_pattern_and_fail_on_a_broken_one():
    from transformer_course.experiments.claims import check_claims
    from transformer_course.experiments.length_generalization import chapter_claims

    lv = {"sinusoidal": {1: 99, 2: 60, 3: 45, 4: 35}, "learned": {1: 97, 2: 55, 3: 40, 4: 38},
          "rope": {1: 99, 2: 95, 3: 80, 4: 37}, "rope + PI": {1: 99, 2: 97, 3: 95, 4: 93},
          "rope + NTK": {1: 99, 2: 97, 3: 95, 4: 93}, "alibi": {1: 97, 2: 95, 3: 94, 4: 93},
          "none": {1: 92, 2: 71, 3: 55, 4: 48}}
    off = {"rope": {1: 100, 2: 100, 3: 66, 4: 7}, "rope + PI": {1: 100, 2: 7, 3: 6, 4: 6},
           "rope + NTK": {1: 100, 2: 100, 3: 100, 4: 99}, "alibi": {1: 26, 2: 22, 3: 21, 4: 20},
           "none": {1: 26, 2: 19, 3: 15, 4: 13}}
    results = {"last_value": _fake_results("last_value", lv), "offset": _fake_results("offset", off)}
    table = check_claims(chapter_claims(results))
    assert (table["verdict"] == "holds").all()
    lv["alibi"][4] = 40  # ALiBi no longer carries the last-value task: two claims must fail
    broken = {"last_value": _fake_results("last_value", lv), "offset": results["offset"]}
    with pytest.raises(AssertionError, match="ALiBi"):
        check_claims(chapter_claims(broken))


def test_the_ensemble_does_not_depend_on_the_number_of_worker_processes():
    from transformer_course.experiments.length_generalization import length_generalization_ensemble

    kwargs = dict(task="last_value", schemes=("rope", "none"), train_length=8, test_lengths=(8, 16), steps=5,
                  seeds=(3, 4), rope_scalings=("interpolation",))
    alone = length_generalization_ensemble(**kwargs)
    side_by_side = length_generalization_ensemble(**kwargs, workers=2)
    assert alone.equals(side_by_side) and alone.attrs == side_by_side.attrs
    with pytest.raises(ValueError, match="workers"):
        length_generalization_ensemble(**kwargs, workers=0)


def test_several_tasks_at_once_give_the_tables_of_one_call_per_task():
    from transformer_course.experiments.length_generalization import (length_generalization_ensemble,
                                                                      length_generalization_ensembles)

    common = dict(train_length=8, test_lengths=(8, 16), steps=3, seeds=(1, 2), rope_scalings=("ntk",))
    tasks = {"last_value": ("none", "rope"), "offset": ("alibi",)}  # RoPE is run first, its rows stay in place
    together = length_generalization_ensembles(tasks, **common)
    assert list(together) == ["last_value", "offset"]
    for task, schemes in tasks.items():
        alone = length_generalization_ensemble(task, schemes, **common)
        pd.testing.assert_frame_equal(together[task], alone)
        stamp = "transformer_course_made_by"  # @exhibit stamps what the one-task function returns
        assert together[task].attrs == {k: v for k, v in alone.attrs.items() if k != stamp}
    assert list(dict.fromkeys(together["last_value"]["scheme"])) == ["none", "rope", "rope + NTK"]
    with pytest.raises(ValueError, match="tasks must name at least one task"):
        length_generalization_ensembles({}, **common)
    with pytest.raises(ValueError, match="task"):
        length_generalization_ensembles({"copy": ("rope",)}, **common)


@pytest.mark.parametrize("scheme", ["rope", "learned", "alibi"])
def test_the_stacked_ensemble_is_each_seeds_own_run_to_rounding(scheme):
    from transformer_course.experiments.length_generalization import train_last_value_ensemble

    models, losses = train_last_value_ensemble(scheme, [5, 2], train_length=6, steps=4, max_len=12, task="offset")
    for seed, model, history in zip([5, 2], models, losses):
        alone, reference = train_last_value(scheme, train_length=6, steps=4, seed=seed, max_len=12, task="offset")
        assert history == pytest.approx(reference, abs=1e-5)
        for p, q in zip(model.parameters(), alone.parameters()):
            assert torch.allclose(p, q, atol=1e-5)
    with pytest.raises(ValueError, match="seeds"):
        train_last_value_ensemble(scheme, [1, 1], train_length=6, steps=1)
    with pytest.raises(ValueError, match="max_len"):
        train_last_value_ensemble(scheme, [1], train_length=6, steps=1, max_len=4)
