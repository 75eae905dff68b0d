"""LongNet's dilated attention: equal to one softmax over the selected keys, linear cost, full coverage by offsets."""

import pytest
import torch

from transformer_course.measure.cost import count_flops
from transformer_course.nn.attention import scaled_dot_product_attention
from transformer_course.nn.longnet import (longnet_attention, longnet_key_counts, longnet_schedule,
                                           longnet_score_count)


def _dense_with_counts(q, k, v, counts):
    """softmax(q k^T / sqrt(Dh) + log counts) v: one softmax over the multiset of selected keys."""
    bias = torch.log(counts.to(q.dtype))  # -inf where no pattern selects the key
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5 + bias
    out = torch.softmax(scores, dim=-1) @ v
    return torch.where(counts.sum(-1, keepdim=True) > 0, out, torch.zeros_like(out))  # unselected rows: 0


@pytest.mark.parametrize("segments, rates, offset", [
    ((4, 8, 16), (1, 2, 4), 0),
    ((4, 8, 16), (1, 2, 4), 3),  # another head: rows 1 mod 2 and 3 mod 4
    ((8, 16), (2, 4), 1),  # no r = 1 pattern: some rows are kept by none
    ((16,), (1,), 0),  # one segment spanning the sequence, no dilation: full attention
])
def test_longnet_equals_one_softmax_over_the_selected_keys(segments, rates, offset):
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(2, 3, 16, 5, generator=g, dtype=torch.float64) for _ in range(2))
    v = torch.randn(2, 3, 16, 7, generator=g, dtype=torch.float64)
    counts = longnet_key_counts(16, segments, rates, offset)
    out = longnet_attention(q, k, v, segments, rates, offset)
    torch.testing.assert_close(out, _dense_with_counts(q, k, v, counts), rtol=1e-12, atol=1e-12)
    if segments == (16,):
        torch.testing.assert_close(out, scaled_dot_product_attention(q, k, v)[0], rtol=1e-12, atol=1e-12)


def test_a_key_two_patterns_select_counts_twice_not_once():
    """The denominator weighting is a softmax over the multiset: not attention over the union."""
    counts = longnet_key_counts(16, (4, 16), (1, 4))
    assert counts.max() == 2 and counts[0, 0] == 2 and counts[0, 1] == 1 and counts[0, 4] == 1
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(16, 4, generator=g, dtype=torch.float64) for _ in range(3))
    union = _dense_with_counts(q, k, v, counts.clamp(max=1))
    assert not torch.allclose(longnet_attention(q, k, v, (4, 16), (1, 4)), union)


def test_rows_a_pattern_skips_get_nothing_from_it_and_offsets_cover_every_row():
    kept_by_any = lambda offset: longnet_key_counts(16, (8, 16), (2, 4), offset).sum(-1) > 0
    assert kept_by_any(0).sum() == 8  # rows 0 mod 2 only
    assert torch.stack([kept_by_any(o) for o in range(4)]).any(0).all()  # heads with offsets 0..3 cover all
    q, k, v = (torch.randn(16, 4) for _ in range(3))
    out = longnet_attention(q, k, v, (8, 16), (2, 4), offset=0)
    assert (out[1::2] == 0).all() and (out[0::2] != 0).all()


def test_the_cost_is_counted_and_linear_with_a_geometric_schedule():
    assert longnet_schedule(64, 8) == ((8, 16, 32, 64), (1, 2, 4, 8))
    assert longnet_schedule(8, 8) == ((8,), (1,))
    counts = {}
    for t in (64, 128, 256, 512):
        segments, rates = longnet_schedule(t, 16)
        q, k, v = (torch.randn(1, t, 8) for _ in range(3))
        flops = count_flops(lambda: longnet_attention(q, k, v, segments, rates))
        assert flops == 2 * 2 * 8 * longnet_score_count(t, segments, rates)  # QK^T and AV: 2 Dh FLOPs a score each
        assert longnet_score_count(t, segments, rates) == int(longnet_key_counts(t, segments, rates).sum())
        counts[t] = longnet_score_count(t, segments, rates)
    for t in (128, 256, 512):  # w_0 keys per kept row, sum_i T / r_i < 2 T rows: below 2 T w_0, rising with T
        assert counts[t] < 2 * t * 16 and counts[t] / t > counts[t // 2] / (t // 2)
    assert counts[512] / counts[256] < 2.1  # doubling T about doubles the cost (x 4 for full attention)


def test_bad_schedules_and_inputs_are_named():
    q = torch.randn(16, 4)
    with pytest.raises(ValueError, match="segment_lengths must divide"):
        longnet_attention(q, q, q, (5,), (1,))
    with pytest.raises(ValueError, match="dilation_rates must divide"):
        longnet_attention(q, q, q, (8,), (3,))
    with pytest.raises(ValueError, match="pair up"):
        longnet_attention(q, q, q, (8, 16), (1,))
    with pytest.raises(ValueError, match="offset"):
        longnet_attention(q, q, q, (8,), (1,), offset=-1)
    with pytest.raises(ValueError, match="segment_lengths"):
        longnet_score_count(16, [], [])
    with pytest.raises(ValueError, match="first_segment x ratio"):
        longnet_schedule(48, 16)
    with pytest.raises(TypeError, match="q"):
        longnet_attention("q", q, q, (8,), (1,))
