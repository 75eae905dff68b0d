import pytest
import torch

from transformer_course.measure.dependency import dependency_path
from transformer_course.nn.rnn import LSTM, LinearRNN, linear_recurrence, linear_recurrence_scan


def test_lstm_matches_torch_lstm():
    torch.manual_seed(0)
    ours = LSTM(6).double()
    reference = torch.nn.LSTM(6, 6, batch_first=True).double()
    with torch.no_grad():
        reference.weight_ih_l0.copy_(ours.input_proj.weight)
        reference.bias_ih_l0.copy_(ours.input_proj.bias)
        reference.weight_hh_l0.copy_(ours.hidden_proj.weight)
        reference.bias_hh_l0.copy_(ours.hidden_proj.bias)
    x = torch.randn(3, 9, 6, dtype=torch.float64)
    assert torch.allclose(ours(x), reference(x)[0], atol=1e-12, rtol=0)


def test_lstm_forget_bias_moves_only_the_forget_gate():
    torch.manual_seed(1)
    plain = LSTM(4)
    torch.manual_seed(1)
    raised = LSTM(4, forget_bias=1.0)
    difference = raised.hidden_proj.bias - plain.hidden_proj.bias
    assert torch.allclose(difference[4:8], torch.ones(4)) and not difference[:4].any() and not difference[8:].any()
    with pytest.raises(TypeError, match="forget_bias"):
        LSTM(4, forget_bias="1")


def test_scan_equals_the_loop_and_a_broken_scan_does_not():
    generator = torch.Generator().manual_seed(0)
    for length in (1, 2, 3, 7, 8, 33):
        a = torch.rand(2, length, 5, generator=generator, dtype=torch.float64)
        b = torch.randn(2, length, 5, generator=generator, dtype=torch.float64)
        assert torch.allclose(linear_recurrence_scan(a, b), linear_recurrence(a, b), atol=1e-12, rtol=0)
    # the composition must multiply the decays as well: skipping that gives other states
    a = torch.full((1, 8, 1), 0.5, dtype=torch.float64)
    b = torch.ones(1, 8, 1, dtype=torch.float64)
    wrong = b.clone()
    offset = 1
    while offset < 8:
        wrong = torch.cat([wrong[:, :offset], a[:, offset:] * wrong[:, :-offset] + wrong[:, offset:]], dim=1)
        offset *= 2
    assert not torch.allclose(wrong, linear_recurrence(a, b))
    assert torch.allclose(linear_recurrence(a, b)[0, :, 0], torch.tensor([2 - 0.5 ** t for t in range(8)],
                                                                           dtype=torch.float64))


def test_recurrence_validation():
    with pytest.raises(TypeError, match="a must be a torch.Tensor"):
        linear_recurrence(0.5, torch.zeros(1, 2, 3))
    with pytest.raises(ValueError, match="b must have shape"):
        linear_recurrence_scan(torch.zeros(3), torch.zeros(2, 3))
    with pytest.raises(ValueError, match="a must broadcast"):
        linear_recurrence(torch.zeros(4), torch.zeros(1, 2, 3))
    with pytest.raises(TypeError, match="parallel must be a bool"):
        LinearRNN(4, parallel=1)


def test_linear_rnn_scan_depth_is_logarithmic_and_loop_depth_linear():
    loop, scan = LinearRNN(4), LinearRNN(4, parallel=True)
    scan.load_state_dict(loop.state_dict())
    x = torch.randn(2, 13, 4)
    assert torch.allclose(scan(x), loop(x), atol=1e-5, rtol=0)
    for n, rounds in ((1, 0), (2, 1), (5, 3), (64, 6), (100, 7)):
        assert dependency_path(loop, n).longest == 2 * n + 6
        assert dependency_path(scan, n).longest == 4 * rounds + 5
