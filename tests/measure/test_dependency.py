import pytest
import torch

from transformer_course.measure.dependency import (CARD_TABLE, Gemm, comparison_table, count_matmuls, dependency_path,
                                           depth_table, first_token_gradient_norm, gradient_table,
                                           graph_path_lengths, measured_comparison)
from transformer_course.nn.layers import EncoderLayer
from transformer_course.nn.rnn import ElmanRNN, rnn_parameters, rnn_width_for_parameters


def test_graph_path_lengths_on_a_small_graph():
    x = torch.randn(3, requires_grad=True)
    assert graph_path_lengths(x * 2, x) == (1, 1)
    y = x * 2
    z = y.exp() + y  # two paths: mul -> exp -> add (3) and mul -> add (2)
    assert graph_path_lengths(z, x) == (2, 3)


def test_graph_path_lengths_validation():
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(ValueError, match="source must be a leaf"):
        graph_path_lengths(x * 2, torch.randn(3))
    with pytest.raises(ValueError, match="no grad_fn"):
        graph_path_lengths(torch.randn(3), x)
    other = torch.randn(3, requires_grad=True)
    with pytest.raises(ValueError, match="does not depend on source"):
        graph_path_lengths(other * 2, x)
    with pytest.raises(TypeError, match="output must be a torch.Tensor"):
        graph_path_lengths([1.0], x)


def test_rnn_depth_grows_by_three_per_token_and_transformer_depth_is_constant(gen):
    torch.manual_seed(0)
    rnn, layer = ElmanRNN(8), EncoderLayer(8, 2, 16)
    table = depth_table({"rnn": rnn, "layer": layer}, (1, 2, 5, 30), generator=gen)
    assert list(table.columns) == ["rnn", "layer"]
    assert (table["rnn"] == 3 * table.index + 6).all()
    assert table["layer"].nunique() == 1
    assert dependency_path(rnn, 4).longest == 18


def test_depth_survives_long_chains_without_recursion():
    assert dependency_path(ElmanRNN(2), 1500).longest == 3 * 1500 + 6


def test_gradient_vanishes_through_the_rnn_not_through_attention():
    torch.manual_seed(0)
    table = gradient_table({"rnn": ElmanRNN(16), "layer": EncoderLayer(16, 2, 32)}, (2, 8, 32))
    assert table["rnn"].is_monotonic_decreasing
    assert table["rnn"].iloc[-1] < 1e-6 * table["rnn"].iloc[0]
    assert (table["layer"] * table.index).min() > 0.01 * (table["layer"] * table.index).max()


def test_first_token_gradient_norm_is_deterministic_and_leaves_module_alone():
    rnn = ElmanRNN(4)
    before = [p.clone() for p in rnn.parameters()]
    a = first_token_gradient_norm(rnn, 5, torch.Generator().manual_seed(1))
    b = first_token_gradient_norm(rnn, 5, torch.Generator().manual_seed(1))
    assert a == b > 0
    assert all(torch.equal(p, q) for p, q in zip(before, rnn.parameters()))
    assert next(rnn.parameters()).dtype == torch.float32 and rnn.training


def test_count_matmuls_shapes():
    rnn_gemms = count_matmuls(ElmanRNN(8), torch.zeros(2, 5, 8))
    assert len(rnn_gemms) == 6
    assert rnn_gemms[0] == Gemm("linear", 1, 10, 8, 8)
    assert all(g == Gemm("linear", 1, 2, 8, 8) for g in rnn_gemms[1:])
    layer = EncoderLayer(8, 2, 16)
    gemms = count_matmuls(layer, torch.zeros(1, 6, 8))
    assert len(gemms) == 8
    assert Gemm("matmul", 2, 6, 4, 6) in gemms  # Q K^T: H x (T, Dh) @ (Dh, T)
    assert gemms[0].flops == 2 * 6 * 8 * 8
    assert layer.self_attn.fused  # the hand-written path was only borrowed
    with pytest.raises(TypeError, match="module must be"):
        count_matmuls("rnn", torch.zeros(1, 2, 8))


def test_comparison_tables():
    torch.manual_seed(0)
    rnn, layer = ElmanRNN(8), EncoderLayer(8, 2, 16)
    table = comparison_table(rnn, layer, lengths=(4, 8))
    assert list(table.index) == list(CARD_TABLE)
    assert list(table.columns) == ["RNN (card)", "Transformer (card)", "RNN (measured)", "Transformer (measured)"]
    assert "grows by 3 operations" in table.loc["Token dependency", "RNN (measured)"]
    assert "grows by 0 operations" in table.loc["Token dependency", "Transformer (measured)"]
    numbers = measured_comparison(rnn, layer, (4, 8))
    assert list(numbers["matrix products"]["RNN"]) == [5, 9]
    assert list(numbers["matrix products"]["Transformer"]) == [8, 8]
    assert numbers.columns.get_level_values(0)[0] == "depth"
    with pytest.raises(ValueError, match="at least two increasing"):
        comparison_table(rnn, layer, lengths=(8,))
    with pytest.raises(TypeError, match="d_model"):
        comparison_table(torch.nn.Linear(2, 2), layer)


def test_input_validation():
    with pytest.raises(TypeError, match="n must be an int"):
        dependency_path(ElmanRNN(2), 2.0)
    with pytest.raises(ValueError, match="n must be >= 1"):
        first_token_gradient_norm(ElmanRNN(2), 0)
    with pytest.raises(ValueError, match="lengths must be a non-empty"):
        depth_table({"rnn": ElmanRNN(2)}, ())
    with pytest.raises(ValueError, match="modules must be a non-empty dict"):
        gradient_table({}, (2,))


def test_rnn_parameter_helpers():
    assert rnn_parameters(5) == sum(p.numel() for p in ElmanRNN(5).parameters())
    assert rnn_width_for_parameters(rnn_parameters(37)) == 37
    assert rnn_width_for_parameters(33472) == 129
    with pytest.raises(ValueError, match="parameters must be >= 1"):
        rnn_width_for_parameters(0)
    with pytest.raises(TypeError, match="d_model must be an int"):
        rnn_parameters(2.5)


def test_position_jacobian_norms_is_diagonal_for_a_token_wise_map_and_flags_mixing():
    from transformer_course.measure.dependency import position_jacobian_norms
    from transformer_course.nn.feedforward import FeedForward

    ffn = FeedForward(8, 16).double()
    tokens = torch.randn(5, 8, dtype=torch.float64)
    norms = position_jacobian_norms(ffn, tokens)
    assert norms.shape == (5, 5) and (norms.diagonal() > 0).all()
    assert (norms[~torch.eye(5, dtype=torch.bool)] == 0).all()
    shifted = position_jacobian_norms(lambda t: ffn(t.roll(1, dims=0)), tokens)  # output i reads input i - 1
    assert (shifted.diagonal() == 0).all() and (shifted.roll(1, dims=1).diagonal() > 0).all()
    mixed = position_jacobian_norms(lambda t: ffn(t - t.mean(dim=0)), tokens)  # a norm over positions mixes
    assert (mixed > 0).all()
    with pytest.raises(ValueError, match="fn must map"):
        position_jacobian_norms(lambda t: t[:2], tokens)
    with pytest.raises(ValueError):
        position_jacobian_norms(ffn, torch.zeros(2, 5, 8))
