import pytest
import torch

from transformer_course.measure.cost import (BLOCK_COMPONENTS, block_flops, component_share_table, count_elementwise_operations,
                                             count_flops, crossover_length, expansion_table, explicit_softmax,
                                             flop_share_table, kaplan_flops_per_token, matrix_weight_count,
                                             measure_flops, measure_training_flops, operation_traffic,
                                             quadratic_crossover_length)
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


@pytest.mark.parametrize("d,e", [(512, 4), (768, 4), (100, 3), (64, 8)])
def test_quadratic_crossover_is_e_plus_2_times_d(d, e):
    n = quadratic_crossover_length(d, e)
    assert n == (e + 2) * d
    before = block_flops(n - 1, d, e)
    assert before["scores_qk"] + before["weighted_values_av"] < before["qkvo_projections"] + before["ffn"]


def test_training_flops_are_three_times_the_forward_and_match_kaplan_linear_term():
    layer = EncoderLayer(32, 4, 128)
    counted = measure_training_flops(layer, torch.randn(1, 20, 32))
    assert counted["forward"] == block_flops(20, 32, 4, 4)["total"]
    assert counted["backward"] == 2 * counted["forward"] and counted["total"] == 3 * counted["forward"]
    assert all(p.grad is None for p in layer.parameters())  # gradients cleared again
    assert matrix_weight_count(layer) == 12 * 32 * 32
    kaplan = kaplan_flops_per_token(32, 20)
    assert kaplan == {"2N": 2 * 12 * 32 * 32, "context": 2 * 20 * 32, "forward": 24 * 32 * 32 + 40 * 32,
                      "training": 3 * (24 * 32 * 32 + 40 * 32)}
    assert kaplan_flops_per_token(32, 20, n_layer=3)["forward"] == 3 * kaplan["forward"]
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        measure_training_flops(layer, [1.0])


def test_softmax_is_counted_as_five_steps_and_flop_counter_sees_none():
    scores = torch.randn(2, 3, 7, 7)
    assert torch.allclose(explicit_softmax(scores), scores.softmax(-1), atol=1e-6)
    steps = count_elementwise_operations(lambda: explicit_softmax(scores))
    assert [name for name, _ in steps] == ["amax", "sub", "exp", "sum", "div"]
    assert sum(count for _, count in steps) == block_flops(7, 12, 4, num_heads=3)["softmax"] * 2  # batch 2
    assert count_flops(lambda: scores.softmax(-1)) == 0
    # a softmax without the max subtraction has four steps: the count notices
    assert len(count_elementwise_operations(lambda: scores.exp() / scores.exp().sum(-1, keepdim=True))) == 4
    with pytest.raises(TypeError, match="fn must be callable"):
        count_elementwise_operations(3)


def test_operation_traffic_reads_flops_and_bytes_off_the_tensors():
    frame = operation_traffic(16, 32, num_heads=4, expansion=2)
    parts = block_flops(16, 32, 2, 4)
    assert list(frame.index) == list(BLOCK_COMPONENTS)
    assert all(frame.loc[c, "FLOPs"] == parts[c] for c in BLOCK_COMPONENTS)
    assert frame.loc["softmax", "bytes"] == 2 * 4 * 16 * 16 * 4  # H n^2 float32 scores read and written
    assert frame.loc["scores_qk", "bytes"] == 4 * (2 * 4 * 16 * 8 + 4 * 16 * 16)
    assert frame.loc["softmax", "FLOPs per byte"] == 5 / 8
    doubled = operation_traffic(16, 32, num_heads=4, expansion=2, dtype=torch.float64)
    assert (doubled["bytes"] == 2 * frame["bytes"]).all()
    with pytest.raises(ValueError, match="d must be divisible by num_heads"):
        operation_traffic(8, 10, num_heads=4)
