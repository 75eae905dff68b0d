"""The position-wise feed-forward network: FFN(x) = act(x W1 + b1) W2 + b2, the same for every token.

Shape legend: B batch, T length, D = d_model, F = d_ff.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._validation import check_choice, check_int, check_probability, check_tensor

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
        check_tensor("x", x, floating=True)
        if x.dim() == 0 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must have last dimension d_model={self.d_model}, got shape {tuple(x.shape)}")
        hidden = self.linear1(x)  # (..., F)
        if self.activation == "relu":
            hidden = F.relu(hidden)
        elif self.activation == "gelu":
            hidden = F.gelu(hidden)
        else:
            hidden = F.silu(hidden) * self.gate(x)  # (..., F)
        return self.linear2(self.dropout(hidden))  # (..., D)
