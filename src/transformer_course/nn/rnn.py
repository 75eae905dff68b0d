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


class LSTM(nn.Module):
    """A single-layer LSTM, written as an explicit loop over time like ``ElmanRNN``.

    gates = x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh, split into input i, forget f, cell g, output o
    (``nn.LSTM``'s order); c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g); h_t = sigmoid(o) * tanh(c_t).
    The cell state c carries gradient from step to step through a product of forget gates, not
    through a matrix product and a tanh (Hochreiter and Schmidhuber, 1997).

    Args:
        d_model: input and hidden width D.
        forget_bias: added to the forget gate's bias after the default initialisation (0: PyTorch's
            ``nn.LSTM`` exactly; 1 is the common choice of Gers et al., 2000 and Jozefowicz et al., 2015).

    Shape:
        x (B, T, D) -> all hidden states h (B, T, D).
    """

    def __init__(self, d_model: int, forget_bias: float = 0.0) -> None:
        super().__init__()
        self.d_model = check_int("d_model", d_model, minimum=1)
        if isinstance(forget_bias, bool) or not isinstance(forget_bias, (int, float)):
            raise TypeError(f"forget_bias must be a real number, got {type(forget_bias).__name__}")
        self.input_proj = nn.Linear(d_model, 4 * d_model)  # W_ih, b_ih: rows (i, f, g, o)
        self.hidden_proj = nn.Linear(d_model, 4 * d_model)  # W_hh, b_hh
        with torch.no_grad():
            self.hidden_proj.bias[d_model:2 * d_model] += float(forget_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_features("x", x, self.d_model, ndim=3)
        b, t, _ = x.shape
        h = x.new_zeros(b, self.d_model)  # (B, D)
        c = x.new_zeros(b, self.d_model)  # (B, D)
        inputs = self.input_proj(x)  # (B, T, 4D): all x_t W_ih at once
        states = []
        for step in range(t):
            i, f, g, o = (inputs[:, step] + self.hidden_proj(h)).chunk(4, dim=-1)  # 4 x (B, D): wait for h_{t-1}
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)  # (B, D)
            h = torch.sigmoid(o) * torch.tanh(c)  # (B, D)
            states.append(h)
        return torch.stack(states, dim=1)  # (B, T, D)


def linear_recurrence(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """h_t = a_t * h_{t-1} + b_t (elementwise, h_0 = 0), one step after another: the reference loop.

    Args:
        a, b: (B, T, D) decays and inputs (``a`` may also broadcast, e.g. (D,)).

    Returns:
        h (B, T, D).
    """
    a, b = _recurrence_operands(a, b)
    h = torch.zeros_like(b[:, 0])  # (B, D)
    states = []
    for step in range(b.shape[1]):
        h = a[:, step] * h + b[:, step]  # (B, D): waits for h_{t-1}
        states.append(h)
    return torch.stack(states, dim=1)  # (B, T, D)


def linear_recurrence_scan(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The same h_t = a_t * h_{t-1} + b_t, computed by a parallel (associative) scan in ceil(log2 T) rounds.

    A step is the affine map h -> a h + b; two steps compose to another one,
    (a2, b2) o (a1, b1) = (a2 a1, a2 b1 + b2), and composition is associative. Round k combines every
    position t with position t - 2^k (Hillis and Steele, 1986), so after ceil(log2 T) rounds position t
    holds the composition of steps 1..t, applied to h_0 = 0: h_t. Every round works on all positions at
    once. This only works because the step is linear in h; a tanh between steps breaks the
    composition rule (Martin and Cundy, 2018).

    Args:
        a, b: as in ``linear_recurrence``.

    Returns:
        h (B, T, D), equal to ``linear_recurrence(a, b)`` up to rounding.
    """
    a, b = _recurrence_operands(a, b)
    offset = 1
    while offset < b.shape[1]:
        # position t takes in the composed steps ending at t - offset (positions < offset have none)
        b = torch.cat([b[:, :offset], a[:, offset:] * b[:, :-offset] + b[:, offset:]], dim=1)  # (B, T, D)
        a = torch.cat([a[:, :offset], a[:, offset:] * a[:, :-offset]], dim=1)  # (B, T, D)
        offset *= 2
    return b


def _recurrence_operands(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    for name, value in (("a", a), ("b", b)):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if b.dim() != 3:
        raise ValueError(f"b must have shape (B, T, D), got {tuple(b.shape)}")
    try:
        a = a.expand_as(b)
    except RuntimeError as error:
        raise ValueError(f"a must broadcast to b's shape {tuple(b.shape)}, got {tuple(a.shape)}") from error
    return a, b


class LinearRNN(nn.Module):
    """h_t = a * h_{t-1} + x_t W^T: a recurrence with no nonlinearity between steps, per channel.

    The decay a = sigmoid(decay_logit) lies in (0, 1) for each of the D channels (the diagonal
    linear recurrences of Martin and Cundy, 2018, and of state-space models such as S4 and Mamba, in
    their simplest form). Because the step is linear, the loop can be replaced by a parallel scan:
    ``parallel=True`` computes the same states with ``linear_recurrence_scan``.

    Args:
        d_model: width D.
        parallel: use the parallel scan (True) or the step-by-step loop (False).

    Shape:
        x (B, T, D) -> h (B, T, D).
    """

    def __init__(self, d_model: int, parallel: bool = False) -> None:
        super().__init__()
        self.d_model = check_int("d_model", d_model, minimum=1)
        if not isinstance(parallel, bool):
            raise TypeError(f"parallel must be a bool, got {type(parallel).__name__}")
        self.parallel = parallel
        self.input_proj = nn.Linear(d_model, d_model)
        self.decay_logit = nn.Parameter(torch.randn(d_model))  # a = sigmoid(.) in (0, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_features("x", x, self.d_model, ndim=3)
        inputs = self.input_proj(x)  # (B, T, D)
        decay = torch.sigmoid(self.decay_logit)  # (D,)
        return (linear_recurrence_scan if self.parallel else linear_recurrence)(decay, inputs)
