"""Induction metrics on hand-built attention patterns, OV circuits and losses: each discriminates."""

import math

import pytest
import torch

from transformer_course.measure.induction import (composition_score, composition_scores, copying_score,
                                                  in_context_learning_score, prefix_matching_score,
                                                  previous_token_score, repeat_losses, repeated_random_tokens)


def pattern(t: int, offset: int | None) -> torch.Tensor:
    """(T, T) causal attention: all weight on key i - offset when it exists, else uniform over the prefix."""
    weights = torch.zeros(t, t)
    for i in range(t):
        if offset is not None and i - offset >= 0:
            weights[i, i - offset] = 1.0
        else:
            weights[i, :i + 1] = 1.0 / (i + 1)
    return weights


def induction_pattern(t: int, period: int) -> torch.Tensor:
    """Query i >= P attends to key i - P + 1 (the token after the earlier occurrence of token i)."""
    weights = pattern(t, None)
    for i in range(period, t):
        weights[i] = 0.0
        weights[i, i - period + 1] = 1.0
    return weights


def test_prefix_matching_scores_one_for_an_induction_head_and_little_for_the_others():
    t, period = 16, 8
    heads = torch.stack([induction_pattern(t, period), pattern(t, 1), pattern(t, 0), pattern(t, None)])
    scores = prefix_matching_score(heads.unsqueeze(0), period)  # (4,)
    assert scores[0] == pytest.approx(1.0)
    assert scores[1] == 0.0 and scores[2] == 0.0  # previous-token and self heads never hit i - P + 1
    uniform = sum(1.0 / (i + 1) for i in range(period, t)) / (t - period)
    assert scores[3] == pytest.approx(uniform)  # a spread head scores 1 / (i + 1) on average
    assert prefix_matching_score(heads.unsqueeze(0), period - 1)[0] < 0.2  # the wrong period misses


def test_previous_token_score_finds_the_previous_token_head():
    heads = torch.stack([induction_pattern(12, 6), pattern(12, 1), pattern(12, 0)]).unsqueeze(0)
    scores = previous_token_score(heads)
    assert scores.argmax() == 1 and scores[1] == pytest.approx(1.0) and scores[2] == 0.0
    assert scores[0] < 0.6


def test_scores_refuse_bad_shapes_and_periods():
    with pytest.raises(ValueError, match="weights"):
        prefix_matching_score(torch.ones(1, 2, 4, 5), 2)
    with pytest.raises(ValueError, match="period"):
        prefix_matching_score(torch.ones(1, 2, 4, 4), 4)
    with pytest.raises(TypeError):
        previous_token_score(torch.ones(1, 2, 4, 4, dtype=torch.long))


def test_copying_score_separates_copying_from_suppressing_and_mixing():
    assert float(copying_score(torch.eye(5))) == pytest.approx(1.0)
    assert float(copying_score(-2 * torch.eye(5))) == pytest.approx(-1.0)
    rotation = torch.tensor([[0.0, -1.0], [1.0, 0.0]])  # eigenvalues +-i: neither copies nor suppresses
    assert abs(float(copying_score(rotation))) < 1e-12
    mixed = torch.diag(torch.tensor([3.0, 1.0, -1.0]))
    assert float(copying_score(mixed)) == pytest.approx(3 / 5)
    basis = torch.randn(4, 4, generator=torch.Generator().manual_seed(0)) + 4 * torch.eye(4)
    similar = basis @ torch.diag(torch.tensor([1.0, 2.0, 3.0, -1.0])) @ torch.linalg.inv(basis)
    assert float(copying_score(similar)) == pytest.approx(5 / 7, abs=1e-5)  # a change of basis changes nothing
    assert copying_score(torch.stack([torch.eye(3), -torch.eye(3)])).tolist() == pytest.approx([1.0, -1.0])
    with pytest.raises(ValueError, match="square"):
        copying_score(torch.ones(2, 3))
    with pytest.raises(ValueError, match="zero"):
        copying_score(torch.zeros(3, 3))


def test_in_context_learning_score_is_late_minus_early():
    losses = torch.tensor([[4.0, 3.0, 2.0, 1.0], [2.0, 3.0, 2.0, 1.0]])
    assert in_context_learning_score(losses, 0, 3) == pytest.approx(-2.0)
    assert in_context_learning_score(losses.flip(1), 0, 3) == pytest.approx(2.0)
    assert in_context_learning_score(losses, range(0, 2), range(2, 4)) == pytest.approx(1.5 - 3.0)
    with pytest.raises(ValueError, match="early and late"):
        in_context_learning_score(losses, 3, 3)
    with pytest.raises(ValueError, match="early and late"):
        in_context_learning_score(losses, range(0, 3), range(2, 4))  # the bands overlap
    with pytest.raises(ValueError, match="late"):
        in_context_learning_score(losses, 0, range(3, 3))


def test_repeat_losses_split_the_first_copy_from_the_later_ones():
    period = 4
    losses = torch.tensor([[5.0, 5.0, 5.0, 9.0, 1.0, 1.0, 1.0]])  # positions 0..6 of a length-8 sequence
    first, later = repeat_losses(losses, period)
    assert first == 5.0 and later == 1.0  # position P - 1 = 3 (predicting the second copy's first token) is neither
    with pytest.raises(ValueError, match="period"):
        repeat_losses(losses, 6)


def test_repeated_random_tokens_repeat_exactly():
    tokens = repeated_random_tokens(3, 5, 7, torch.Generator().manual_seed(1), repeats=3)
    assert tokens.shape == (3, 15) and torch.equal(tokens[:, :5], tokens[:, 5:10]) and torch.equal(tokens[:, :5], tokens[:, 10:])
    assert int(tokens.max()) < 7
    with pytest.raises(TypeError, match="generator"):
        repeated_random_tokens(3, 5, 7, 0)


def subspace(d: int, dims: range) -> torch.Tensor:
    """(D, D) projection onto the coordinates ``dims``."""
    p = torch.zeros(d, d, dtype=torch.float64)
    p[list(dims), list(dims)] = 1.0
    return p


def test_composition_score_is_one_for_an_aligned_reader_zero_for_a_disjoint_one_and_small_for_random():
    d = 64
    generator = torch.Generator().manual_seed(0)
    u, v = torch.randn(d, 1, generator=generator, dtype=torch.float64), torch.randn(d, 1, generator=generator, dtype=torch.float64)
    writer = u @ v.T  # writes along u
    assert float(composition_score(7.0 * v @ u.T, writer)) == pytest.approx(1.0)  # rank one, reads along u
    low, high = subspace(d, range(0, 8)), subspace(d, range(8, 16))
    a = torch.randn(d, d, generator=generator, dtype=torch.float64)
    assert float(composition_score(a @ high, low @ a)) == 0.0  # reads coordinates the writer never writes
    random = composition_score(torch.randn(20, d, d, generator=generator, dtype=torch.float64),
                               torch.randn(20, d, d, generator=generator, dtype=torch.float64))  # (20,)
    assert 0.5 / d ** 0.5 < float(random.mean()) < 2.0 / d ** 0.5  # about 1/sqrt(D) for unrelated matrices


def test_composition_scores_tell_key_from_query_and_value_composition():
    """Later head 0 reads earlier head 0's output with its key only; later head 1 with its value only."""
    d = 16
    generator = torch.Generator().manual_seed(1)
    rand = lambda: torch.randn(d, d, generator=generator, dtype=torch.float64)  # noqa: E731
    prev, other = subspace(d, range(0, 4)), subspace(d, range(4, 8))  # where earlier heads 0 and 1 write
    rest = subspace(d, range(8, 16))
    ov_earlier = torch.stack([prev @ rand(), other @ rand()])  # (2, D, D)
    qk = torch.stack([rest @ rand() @ prev, rest @ rand() @ rest])  # x_q^T W_QK x_k: query side rest, key side prev / rest
    ov_later = torch.stack([rest @ rand() @ rest, rest @ rand() @ prev])  # head 1's value reads prev
    scores = composition_scores(qk, ov_later, ov_earlier)
    assert sorted(scores) == ["K", "Q", "V"] and all(s.shape == (2, 2) for s in scores.values())
    assert float(scores["K"][0, 0]) > 0.1 and float(scores["K"][0, 1]) == 0.0 and float(scores["K"][1, 0]) == 0.0
    assert float(scores["Q"].abs().max()) == 0.0  # no query reads an earlier head's output
    assert float(scores["V"][1, 0]) > 0.1 and float(scores["V"][0, 0]) == 0.0


def test_composition_scores_refuse_shapes_that_do_not_chain():
    m = torch.randn(2, 8, 8)
    with pytest.raises(ValueError, match="must chain"):
        composition_score(torch.randn(8, 8), torch.randn(4, 4))
    with pytest.raises(ValueError, match="zero matrices"):
        composition_score(torch.zeros(8, 8), torch.randn(8, 8))
    with pytest.raises(ValueError, match="ov_earlier"):
        composition_scores(m, m, torch.randn(2, 4, 4))
    with pytest.raises(ValueError, match="one matrix per later head"):
        composition_scores(m, torch.randn(3, 8, 8), m)


def test_the_induction_rule_is_right_on_a_repeat_and_checked_on_a_hand_example():
    from transformer_course.measure.induction import induction_guess_accuracy

    repeated = torch.tensor([[5, 1, 2, 3, 5, 1, 2, 3]])  # positions 4..6 copy; 1..3 have no earlier occurrence
    accuracy, coverage = induction_guess_accuracy(repeated)
    assert accuracy == 1.0 and coverage == pytest.approx(3 / 6)
    # "abab" then "ac": at the last "a" the most recent earlier "a" was followed by "b", not "c"; an
    # answer that used the first occurrence, or the token itself, would give another accuracy
    tokens = torch.tensor([[0, 1, 0, 2, 0, 3]])  # i=2: earlier 0 at 0 -> guess 1, next 2 (wrong); i=4: last 0 at 2 -> 2, next 3
    assert induction_guess_accuracy(tokens) == (0.0, pytest.approx(2 / 4))
    tokens = torch.tensor([[0, 1, 0, 2, 0, 2]])  # the most recent occurrence (2) is followed by 2: right once
    assert induction_guess_accuracy(tokens) == (pytest.approx(1 / 2), pytest.approx(2 / 4))
    assert math.isnan(induction_guess_accuracy(torch.tensor([[1, 2, 3, 4]]))[0])
    with pytest.raises(ValueError, match="tokens must be integer ids"):
        induction_guess_accuracy(torch.zeros(2, 5))
