import pytest
import torch

from transformer_course.measure.cost import (BLOCK_COMPONENTS, block_flops, component_share_table, crossover_length,
                                     expansion_table, flop_share_table, measure_flops)
from transformer_course.nn.layers import EncoderLayer


@pytest.mark.parametrize("d,e", [(512, 4), (768, 4), (512, 8), (100, 3), (64, 2.5)])
def test_crossover_matches_closed_form(d, e):
    assert crossover_length(d, e) == pytest.approx((e - 2) * d, abs=1)
    n = crossover_length(d, e)
    assert block_flops(n, d, e)["attention"] >= block_flops(n, d, e)["ffn"]
    assert block_flops(n - 1, d, e)["attention"] < block_flops(n - 1, d, e)["ffn"]


def test_crossover_is_one_when_ffn_never_wins():
    assert crossover_length(512, 2) == 1
    assert crossover_length(512, 1) == 1


def test_crossover_validation():
    with pytest.raises(ValueError, match="d must be >= 1"):
        crossover_length(0)
    with pytest.raises(TypeError, match="expansion must be a positive float"):
        crossover_length(64, "4")


def test_card_crossover_row_is_a_tie():
    assert flop_share_table(512, (crossover_length(512),)).iloc[0]["Dominant Component"] == "Tie"


def test_component_share_table_rows_sum_to_100_and_quadratic_terms_rise():
    table = component_share_table(512, (64, 256, 1024, 4096))
    assert list(table.columns) == list(BLOCK_COMPONENTS)
    assert table.sum(axis=1).to_numpy() == pytest.approx([100] * 4)
    for component in BLOCK_COMPONENTS:
        assert table[component].is_monotonic_increasing == (component in ("scores_qk", "weighted_values_av",
                                                                          "softmax"))
    no_softmax = component_share_table(512, (64,), include_softmax=False)
    assert no_softmax.loc[64, "softmax"] == 0
    with pytest.raises(ValueError, match="lengths must be"):
        component_share_table(512, ())


def test_expansion_table_names_the_largest_component():
    table = expansion_table(64, 512, (4, 2, 1))
    assert table.loc[4, "largest"] == "ffn"
    assert table.loc[2, "largest"] == "qkvo_projections = ffn"
    assert table.loc[1, "largest"] == "qkvo_projections"
    with pytest.raises(ValueError, match="expansions must be"):
        expansion_table(expansions=())


@pytest.mark.parametrize("n,e", [(1, 1), (24, 2), (64, 4)])
def test_measured_flops_match_for_expansions(n, e):
    layer = EncoderLayer(32, 4, 32 * e)
    assert measure_flops(layer, torch.randn(1, n, 32)) == block_flops(n, 32, e, 4)["total"]
