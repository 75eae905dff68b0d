"""The position-wise feed-forward network: FFN(x) = act(x W1 + b1) W2 + b2, the same for every token.

Shape legend: B batch, T length, D = d_model, F = d_ff.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from transformer_course._validation import check_choice, check_features, check_int, check_probability

ACTIVATIONS = ("relu", "gelu", "swiglu")


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2 (ReLU), with GELU and SwiGLU variants.

    SwiGLU replaces the activation by a gate: (SiLU(x W1) * (x W3)) W2, with ``gate`` holding W3;
    it has three matrices, so a parameter-matched SwiGLU uses d_ff about 2/3 of the ReLU one.

    Args:
        d_model: width D.
        d_ff: hidden width F (the paper: 2048 = 4 * 512).
        activation: "relu" (paper), "gelu" (BERT, GPT) or "swiglu" (PaLM, LLaMA).
        dropout: dropout on the hidden activations.

    Shape:
        x (..., D) -> (..., D); it acts on the last dimension only, token by token.

    Vaswani et al., 2017, equation (2); Shazeer, 2020, "GLU Variants Improve Transformer".
    """

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu", dropout: float = 0.0) -> None:
        super().__init__()
        self.d_model = check_int("d_model", d_model, minimum=1)
        self.d_ff = check_int("d_ff", d_ff, minimum=1)
        self.activation = check_choice("activation", activation, ACTIVATIONS)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.gate = nn.Linear(d_model, d_ff) if activation == "swiglu" else None
        self.dropout = nn.Dropout(check_probability("dropout", dropout))
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_features("x", x, self.d_model)
        hidden = self.linear1(x)  # (..., F)
        if self.activation == "relu":
            hidden = F.relu(hidden)
        elif self.activation == "gelu":
            hidden = F.gelu(hidden)
        else:
            hidden = F.silu(hidden) * self.gate(x)  # (..., F)
        return self.linear2(self.dropout(hidden))  # (..., D)


def swiglu_matched_d_ff(d_model: int, d_ff: int) -> int:
    """The SwiGLU hidden width whose FeedForward has (nearly) the parameters of a ReLU one of width ``d_ff``.

    A two-matrix FFN has 2 D F + F + D parameters, SwiGLU's three matrices 3 D f + 2 f + D; equal
    counts need f = F (2D + 1) / (3D + 2), about 2F/3 (Shazeer, 2020, who uses 2/3 of 4D).
    The result is that f rounded to the nearest int.

    Args:
        d_model: width D.
        d_ff: hidden width F of the two-matrix (ReLU or GELU) FFN to match.

    Returns:
        The int hidden width f for ``FeedForward(d_model, f, activation="swiglu")``.

    Raises:
        TypeError, ValueError: if ``d_model`` or ``d_ff`` is not a positive int.

    Shazeer, 2020, "GLU Variants Improve Transformer", section 2.
    """
    d_model = check_int("d_model", d_model, minimum=1)
    d_ff = check_int("d_ff", d_ff, minimum=1)
    return max(1, round(d_ff * (2 * d_model + 1) / (3 * d_model + 2)))
