"""Reachability through stacked masks: receptive fields, gridding, global tokens."""

from __future__ import annotations

import math

import pytest
import torch

from transformer_course.measure.receptive_field import (
    bool_matmul,
    coverage_gaps,
    dilation_schedule_masks,
    global_token_mask,
    layers_to_cover,
    reachability,
    reachability_by_depth,
    receptive_field,
    schedule_reach,
    unreachable_pairs,
)
from transformer_course.nn.masks import causal_mask, dilated_mask, sliding_window_mask


def _reach_by_paths(masks):
    """Independent reference: breadth-first propagation of each input position through the layers."""
    t = masks[0].shape[0]
    reach = torch.zeros(t, t, dtype=torch.bool)
    for j in range(t):
        frontier = {j}
        for mask in masks:
            frontier = {i for i in range(t) if any(bool(mask[i, k]) for k in frontier)}
        for i in frontier:
            reach[i, j] = True
    return reach


def test_bool_matmul_is_or_of_ands(gen):
    a = torch.rand(7, 5, generator=gen) > 0.6
    b = torch.rand(5, 6, generator=gen) > 0.6
    expected = (a.unsqueeze(2) & b.unsqueeze(0)).any(dim=1)
    assert torch.equal(bool_matmul(a, b), expected)


def test_reachability_matches_path_search(gen):
    masks = [(torch.rand(9, 9, generator=gen) > 0.7) | torch.eye(9, dtype=torch.bool) for _ in range(3)]
    assert torch.equal(reachability(masks), _reach_by_paths(masks))
    by_depth = reachability_by_depth(masks)
    assert len(by_depth) == 3 and torch.equal(by_depth[0], masks[0])


@pytest.mark.parametrize("window", [3, 8, 9, 16])
def test_window_receptive_field_grows_linearly(window):
    t = 201
    reach = reachability_by_depth([sliding_window_mask(t, window)] * 6)
    assert [receptive_field(r) for r in reach] == [2 * layers * (window // 2) + 1 for layers in range(1, 7)]
    assert all(coverage_gaps(r) == 0 for r in reach)


def test_causal_window_receptive_field():
    reach = reachability([sliding_window_mask(100, 5, causal=True)] * 3)
    assert receptive_field(reach, query=50) == 3 * 4 + 1
    assert not bool(reach.triu(1).any())  # nothing from the future, however deep


def test_fixed_dilation_never_connects_residue_classes():
    for d in (2, 3, 4):
        masks = dilation_schedule_masks(24, [d] * 5)
        assert torch.equal(reachability(masks), dilated_mask(24, d))
        assert unreachable_pairs(masks) == 24 * 24 - int(dilated_mask(24, d).sum())


@pytest.mark.parametrize("schedule", [(1, 2, 4, 8), (8, 4, 2, 1), (2, 3), (3, 5), (2, 4, 8, 16), (6, 10, 15)])
def test_strided_schedule_connects_everything_iff_gcd_is_one(schedule):
    assert (unreachable_pairs(dilation_schedule_masks(30, schedule)) == 0) == (math.gcd(*schedule) == 1)


def test_gridding_with_dilated_windows():
    fixed = reachability(dilation_schedule_masks(16, (2, 2, 2, 2), window=3))
    mixed = dilation_schedule_masks(16, (1, 2, 4, 8), window=3)
    assert coverage_gaps(fixed) > 0 and unreachable_pairs([fixed]) > 0
    assert unreachable_pairs(mixed) == 0 and coverage_gaps(reachability(mixed)) == 0
    assert receptive_field(reachability(dilation_schedule_masks(64, (1, 2, 4, 8), window=3)), 32) == 2 * 15 + 1


def test_schedule_reach():
    assert schedule_reach(3, (1, 2, 4, 8)) == 15
    assert schedule_reach(3, [2**layer for layer in range(10)]) == 1023
    assert schedule_reach(9, (1, 1)) == 8


def test_coverage_gaps_counts_only_inside():
    reach = torch.eye(5, dtype=torch.bool)
    reach[2, 0] = True  # hole at (2, 1); (2, 3), (2, 4) are beyond the reach, not holes
    assert coverage_gaps(reach) == 1


def test_global_tokens():
    mask = global_token_mask(40, 5, [0, 39])
    assert bool(mask[0].all()) and bool(mask[:, 39].all())
    assert receptive_field(mask, 20) == 5 + 2
    assert layers_to_cover(mask) == 2
    assert layers_to_cover(sliding_window_mask(40, 5)) == math.ceil(39 / 2)
    causal = global_token_mask(20, 3, [0], causal=True)
    assert not bool(causal.triu(1).any()) and bool(causal[:, 0].all())


def test_layers_to_cover_none_when_gridded():
    assert layers_to_cover(dilated_mask(12, 2), max_layers=5) is None
    assert layers_to_cover(causal_mask(6)) is None  # the first token never reads the last


@pytest.mark.parametrize("call, error, match", [
    (lambda: reachability([]), ValueError, "non-empty sequence"),
    (lambda: reachability([torch.ones(3, 3)]), TypeError, "bool torch.Tensor"),
    (lambda: reachability([torch.ones(3, 4, dtype=torch.bool)]), ValueError, "square"),
    (lambda: reachability([torch.ones(3, 3, dtype=torch.bool), torch.ones(4, 4, dtype=torch.bool)]), ValueError, r"shape \(3, 3\)"),
    (lambda: receptive_field(torch.ones(3, 3, dtype=torch.bool), query=3), ValueError, "query must be < T"),
    (lambda: receptive_field(torch.ones(3, 3, dtype=torch.bool), query=-1), ValueError, "query must be >= 0"),
    (lambda: layers_to_cover(torch.ones(3, 3, dtype=torch.bool), max_layers=0), ValueError, "max_layers"),
    (lambda: dilation_schedule_masks(8, []), ValueError, "dilations must be a non-empty"),
    (lambda: dilation_schedule_masks(8, [2, 0]), ValueError, "dilation must be >= 1"),
    (lambda: schedule_reach(3, [1, 0]), ValueError, "dilations must be >= 1"),
    (lambda: global_token_mask(8, 3, [8]), ValueError, "global_positions must lie"),
    (lambda: global_token_mask(8, 3, [1.5]), TypeError, "global_positions must be an int"),
])
def test_bad_inputs(call, error, match):
    with pytest.raises(error, match=match):
        call()
