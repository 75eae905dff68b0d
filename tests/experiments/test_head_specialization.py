"""Tests for the four-lookups task, its model, and the multi-head reference helpers."""

from __future__ import annotations

import pytest
import torch

from transformer_course.experiments import head_specialization as hs
from transformer_course.nn.attention import MultiHeadAttention
from transformer_course.nn.masks import causal_mask


def test_batch_shapes_and_one_marker_and_digit(gen):
    tokens, sources = hs.make_lookup_batch(5, gen, seq_len=9)
    assert tokens.shape == (5, 9) and tokens.dtype == torch.int64
    assert sources.shape == (5, len(hs.RELATIONS), 9)
    assert ((tokens >= 16) & (tokens < 20)).sum(1).tolist() == [1] * 5
    assert (tokens >= 20).sum(1).tolist() == [1] * 5
    # previous and first are undefined at position 0 only
    assert (sources[:, 0, 0] == -1).all() and (sources[:, 1, 0] == -1).all()
    assert (sources[:, 0, 1:] == torch.arange(8)).all()
    marker = sources[:, 2, 0]
    assert ((tokens.gather(1, marker[:, None]) >= 16) & (tokens.gather(1, marker[:, None]) < 20)).all()


def test_batches_are_reproducible():
    a = hs.make_lookup_batch(4, torch.Generator().manual_seed(3))
    b = hs.make_lookup_batch(4, torch.Generator().manual_seed(3))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_targets_copy_the_token_at_the_source(gen):
    tokens, sources = hs.make_lookup_batch(3, gen)
    targets = hs.lookup_targets(tokens, sources)
    assert targets.shape == sources.shape
    assert (targets[:, 0, 1:] == tokens[:, :-1]).all()  # previous token
    assert (targets[:, 1, 1:] == tokens[:, :1]).all()  # first token
    assert (targets[:, 0, 0] == hs.IGNORE_INDEX).all()


def test_token_names():
    assert hs.token_names(torch.tensor([0, 15, 16, 19, 20, 23])) == ["a", "p", "A", "D", "0", "3"]


@pytest.mark.parametrize("kwargs, error, match", [
    ({"batch_size": 0}, ValueError, "batch_size"),
    ({"seq_len": 2}, ValueError, "seq_len"),
    ({"num_digits": 11}, ValueError, "num_digits"),
    ({"num_letters": 1.5}, TypeError, "num_letters"),
])
def test_batch_validation(gen, kwargs, error, match):
    args = {"batch_size": 2, "generator": gen} | kwargs
    with pytest.raises(error, match=match):
        hs.make_lookup_batch(**args)


def test_batch_needs_a_generator():
    with pytest.raises(TypeError, match="generator"):
        hs.make_lookup_batch(2, 0)


def test_relation_sources_validation():
    with pytest.raises(ValueError, match="exactly one marker"):
        hs.relation_sources(torch.zeros(2, 5, dtype=torch.long))
    with pytest.raises(TypeError, match="tokens"):
        hs.relation_sources(torch.zeros(2, 5))
    with pytest.raises(ValueError, match="tokens"):
        hs.relation_sources(torch.zeros(5, dtype=torch.long))


def test_model_shapes_and_validation(gen):
    model = hs.LookupModel()
    tokens, _ = hs.make_lookup_batch(3, gen)
    logits, weights = model(tokens, need_weights=True)
    assert logits.shape == (3, 4, 12, 24) and weights.shape == (3, 4, 12, 12)
    torch.testing.assert_close(model(tokens), logits)  # fused path without weights
    with pytest.raises(ValueError, match="seq_len"):
        model(torch.zeros(1, 13, dtype=torch.long))
    with pytest.raises(TypeError, match="tokens"):
        model(torch.zeros(1, 12))


def test_scores_on_hand_built_weights():
    tokens = torch.tensor([[0, 1, 16, 2, 20, 3], [4, 21, 5, 6, 7, 17]])  # marker and digit away from 0
    sources = hs.relation_sources(tokens)
    weights = torch.zeros(2, 4, 6, 6)
    for r in range(4):  # head r attends exactly where relation r points (position 0 where undefined)
        weights[:, r].scatter_(2, sources[:, r].clamp(min=0).unsqueeze(-1), 1.0)
    scores = hs.head_relation_scores(weights, sources)
    assert list(scores.columns) == list(hs.RELATIONS)
    for r, relation in enumerate(hs.RELATIONS):
        assert scores.loc[f"head {r}", relation] == pytest.approx(1.0)
    assert hs.assign_heads(scores) == {relation: r for r, relation in enumerate(hs.RELATIONS)}
    with pytest.raises(ValueError, match="sources"):
        hs.head_relation_scores(weights, sources[:, :, :5])


def test_head_map_distances():
    uniform = torch.full((1, 2, 3, 4), 0.25)
    assert torch.allclose(hs.head_map_distances(uniform), torch.zeros(2, 2))
    disjoint = torch.zeros(1, 2, 3, 4)
    disjoint[0, 0, :, 0] = 1.0
    disjoint[0, 1, :, 1] = 1.0
    assert torch.allclose(hs.head_map_distances(disjoint), 1.0 - torch.eye(2))
    with pytest.raises(ValueError, match="weights"):
        hs.head_map_distances(torch.zeros(2, 3, 4))


@pytest.mark.parametrize("bias", [True, False])
def test_per_head_loop_equals_module(gen, bias):
    torch.manual_seed(0)
    module = MultiHeadAttention(12, 3, bias=bias).double()
    x = torch.randn(2, 5, 12, generator=gen, dtype=torch.float64)
    memory = torch.randn(2, 7, 12, generator=gen, dtype=torch.float64)
    out, heads = hs.per_head_attention(module, x, memory, memory)
    assert len(heads) == 3 and heads[0].shape == (2, 5, 4)
    torch.testing.assert_close(out, module(x, memory, memory))
    mask = causal_mask(5)
    torch.testing.assert_close(hs.per_head_attention(module, x, x, x, mask)[0], module(x, x, x, mask=mask))
    with pytest.raises(TypeError, match="module"):
        hs.per_head_attention(torch.nn.Linear(2, 2), x, x, x)


def test_ablate_heads_removes_exactly_one_head(gen):
    torch.manual_seed(0)
    module = MultiHeadAttention(12, 3).double()
    x = torch.randn(1, 4, 12, generator=gen, dtype=torch.float64)
    _, heads = hs.per_head_attention(module, x, x, x)
    ablated = hs.ablate_heads(module, [1])
    dh = module.d_head
    expected = module(x, x, x) - heads[1] @ module.out_proj.weight.T[dh:2 * dh]
    torch.testing.assert_close(ablated(x, x, x), expected)
    assert module.out_proj.weight[:, dh:2 * dh].abs().sum() > 0  # the original is untouched
    with pytest.raises(ValueError, match="heads"):
        hs.ablate_heads(module, [3])
    with pytest.raises(ValueError, match="no MultiHeadAttention"):
        hs.ablate_heads(torch.nn.Linear(2, 2), [0])


def test_training_is_deterministic():
    a, losses_a = hs.train_lookup_model(seed=0, steps=5, batch_size=8)
    b, losses_b = hs.train_lookup_model(seed=0, steps=5, batch_size=8)
    assert losses_a == losses_b
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)


def _tables(scores_rows, ablation_rows):
    import pandas as pd

    relations = list(hs.RELATIONS)
    heads = [f"head {k}" for k in range(len(scores_rows))]
    scores = pd.DataFrame(scores_rows, index=heads, columns=relations)
    ablation = pd.DataFrame([[1.0] * 4] + ablation_rows, index=["none"] + heads, columns=relations)
    return scores, ablation


def test_specialization_summary_one_to_one():
    scores, ablation = _tables(
        [[0.9, 0.1, 0.1, 0.1], [0.1, 0.9, 0.1, 0.1], [0.1, 0.1, 0.8, 0.1], [0.1, 0.1, 0.1, 0.7]],
        [[0.1, 1, 1, 1], [1, 0.1, 1, 1], [1, 1, 0.2, 1], [1, 1, 1, 0.9]])
    summary = hs.specialization_summary(scores, ablation)
    assert summary == {"owned": 4.0, "duplicated": 0.0, "shared": 0.0, "one_to_one": 1.0,
                       "necessary_share": 0.75, "heads": 4.0}


def test_specialization_summary_duplicated_and_shared_lookups():
    # heads 0 and 1 both do "previous"; "digit" is spread over heads 2 and 3; nothing breaks alone
    scores, ablation = _tables(
        [[0.9, 0.0, 0.0, 0.0], [0.6, 0.0, 0.0, 0.0], [0.0, 0.8, 0.1, 0.4], [0.0, 0.0, 0.7, 0.4]],
        [[1, 1, 1, 1], [1, 1, 1, 1], [1, 0.3, 1, 0.8], [1, 1, 0.6, 0.8]])
    summary = hs.specialization_summary(scores, ablation)
    assert summary["owned"] == 3.0 and summary["duplicated"] == 1.0 and summary["shared"] == 1.0
    assert summary["one_to_one"] == 0.0 and summary["necessary_share"] == 0.25


def test_specialization_summary_a_head_owning_two_lookups_is_not_one_to_one():
    scores, ablation = _tables(
        [[0.6, 0.6, 0.0, 0.0], [0.0, 0.0, 0.9, 0.0], [0.0, 0.0, 0.0, 0.9], [0.1, 0.1, 0.1, 0.1]],
        [[1, 1, 1, 1]] * 4)
    assert hs.specialization_summary(scores, ablation)["one_to_one"] == 0.0


def test_specialization_summary_validation():
    scores, ablation = _tables([[0.9, 0.1, 0.1, 0.1]] * 2, [[1, 1, 1, 1]] * 2)
    with pytest.raises(ValueError, match="owns must be"):
        hs.specialization_summary(scores, ablation, owns=0.0)
    with pytest.raises(ValueError, match="ablation must have"):
        hs.specialization_summary(scores, ablation.drop(index="head 1"))
    with pytest.raises(TypeError, match="scores"):
        hs.specialization_summary([[1.0]], ablation)


def test_batch_hook_sees_every_step_and_does_not_change_training():
    seen = []

    def hook(model, step):
        assert isinstance(model, hs.LookupModel)
        seen.append(step)

    a, losses_a = hs.train_lookup_model(seed=2, steps=6, batch_size=8, batch_hook=hook)
    b, losses_b = hs.train_lookup_model(seed=2, steps=6, batch_size=8)
    assert seen == list(range(6)) and losses_a == losses_b
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_per_head_loop_equals_a_grouped_query_module(gen):
    module = MultiHeadAttention(16, 4, num_kv_heads=2).double()
    x = torch.randn(2, 5, 16, generator=gen, dtype=torch.float64)
    looped, heads = hs.per_head_attention(module, x, x, x)
    torch.testing.assert_close(looped, module(x, x, x), rtol=0, atol=1e-12)


def _random_tokens(batch: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    tokens, _ = hs.make_lookup_batch(batch, generator=generator)
    return tokens


def test_score_ranks_never_exceed_the_head_width():
    torch.manual_seed(0)
    tokens = _random_tokens(16)
    for heads in (1, 4, 8):  # d_head 32, 8, 4 against T = 12
        table = hs.score_ranks(hs.LookupModel(num_heads=heads), tokens)
        d_head = 32 // heads
        assert list(table.index) == [f"head {k}" for k in range(heads)]
        assert (table["d_head"] == d_head).all()
        assert (table["numerical rank, max"] <= min(d_head, 12)).all()
        assert (table["effective rank, max"] <= table["numerical rank, max"]).all()
        assert (table["effective rank, median"] >= 1).all()
    # a random head of width 32 uses many dimensions: the count is not stuck at a small number
    assert hs.score_ranks(hs.LookupModel(num_heads=1), tokens)["numerical rank, max"].iloc[0] >= 10


def test_score_ranks_of_hand_built_rank_one_keys_and_an_independent_reference():
    torch.manual_seed(1)
    model = hs.LookupModel(num_heads=4)
    tokens = _random_tokens(8, seed=1)
    with torch.no_grad():
        keep = torch.zeros(32, dtype=torch.bool)
        keep[::8] = True  # one key feature per head: K_i has rank 1
        model.attention.k_proj.weight[~keep] = 0.0
        model.attention.k_proj.bias[~keep] = 0.0
    table = hs.score_ranks(model, tokens)
    assert (table["numerical rank, max"] <= 1).all() and (table["effective rank, max"] == 1).all()
    # an independent reference for an untouched model: the head's scores built from the projections
    other = hs.LookupModel(num_heads=2)
    table = hs.score_ranks(other, tokens, energy=1.0)
    with torch.no_grad():
        x = other.token_embedding(tokens) + other.position_embedding(torch.arange(tokens.shape[1]))  # (B, T, D)
        q = other.attention.q_proj(x).double().view(8, 12, 2, 16)[:, :, 1]  # (B, T, Dh): head 1
        k = other.attention.k_proj(x).double().view(8, 12, 2, 16)[:, :, 1]  # (B, T, Dh)
    s = q @ k.transpose(1, 2) / 4.0  # (B, T, T)
    centred = s - s.mean(dim=-1, keepdim=True)
    ranks = [int(torch.linalg.matrix_rank(m, rtol=1e-4)) for m in centred]
    assert table.loc["head 1", "numerical rank, max"] == max(ranks)
    assert table.loc["head 1", "effective rank, max"] == max(ranks)  # energy 1: every non-zero direction counts


def test_score_ranks_validates_its_arguments():
    model, tokens = hs.LookupModel(), _random_tokens(2)
    with pytest.raises(TypeError, match="model"):
        hs.score_ranks(torch.nn.Linear(2, 2), tokens)
    with pytest.raises(ValueError, match="energy"):
        hs.score_ranks(model, tokens, energy=1.5)
    with pytest.raises(ValueError, match="energy"):
        hs.score_ranks(model, tokens, energy=0.0)
    with pytest.raises(ValueError, match="rtol"):
        hs.score_ranks(model, tokens, rtol=-1.0)
