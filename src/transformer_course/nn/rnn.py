"""A single-layer Elman RNN, the sequential baseline: h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh).

Shape legend: B batch, T length, D = d_model (input and hidden width are both D).
"""

from __future__ import annotations

import torch
from torch import nn

from transformer_course._validation import check_features, check_int


class ElmanRNN(nn.Module):
    """h_t = f(h_{t-1}, x_t): step t cannot start before step t-1 has finished.

    The loop over time is written out on purpose: the autograd graph is a chain of T cells, which is
    what the Transformer-vs-RNN chapter measures. Parameter names match ``nn.RNN`` (layer 0).

    Args:
        d_model: input and hidden width D.

    Shape:
        x (B, T, D), optional h0 (B, D) -> all hidden states (B, T, D).

    Elman, 1990, "Finding Structure in Time".
    """

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.d_model = check_int("d_model", d_model, minimum=1)
        self.input_proj = nn.Linear(d_model, d_model)  # W_ih, b_ih
        self.hidden_proj = nn.Linear(d_model, d_model)  # W_hh, b_hh

    def forward(self, x: torch.Tensor, h0: torch.Tensor | None = None) -> torch.Tensor:
        check_features("x", x, self.d_model, ndim=3)
        b, t, _ = x.shape
        h = x.new_zeros(b, self.d_model) if h0 is None else h0  # (B, D)
        if h.shape != (b, self.d_model):
            raise ValueError(f"h0 must have shape (B, D) = ({b}, {self.d_model}), got {tuple(h.shape)}")
        inputs = self.input_proj(x)  # (B, T, D): all x_t W_ih at once, no dependency between steps
        states = []
        for step in range(t):
            h = torch.tanh(inputs[:, step] + self.hidden_proj(h))  # (B, D): waits for h_{t-1}
            states.append(h)
        return torch.stack(states, dim=1)  # (B, T, D)


def rnn_parameters(d_model: int) -> int:
    """Parameters of ``ElmanRNN(d_model)``: two (D, D) matrices and two biases, 2 D^2 + 2 D."""
    d_model = check_int("d_model", d_model, minimum=1)
    return 2 * d_model * d_model + 2 * d_model


def rnn_width_for_parameters(parameters: int) -> int:
    """The width D whose ``ElmanRNN(D)`` has the parameter count closest to ``parameters``.

    Used to compare an RNN and a Transformer layer of (nearly) the same size.

    Raises:
        TypeError, ValueError: if ``parameters`` is not a positive int.
    """
    parameters = check_int("parameters", parameters, minimum=1)
    width = max(1, int((parameters / 2) ** 0.5))
    candidates = (max(1, width - 1), width, width + 1)
    return min(candidates, key=lambda d: (abs(rnn_parameters(d) - parameters), d))
