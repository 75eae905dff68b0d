"""Layer normalization, written out: each token is standardized across its own features.

Shape legend: B batch, T length, D = d_model.
"""

from __future__ import annotations

import torch
from torch import nn

from ._validation import check_int, check_positive_float, check_tensor


class LayerNorm(nn.Module):
    """LN(x) = (x - mu) / sqrt(sigma^2 + eps) * gamma + beta, with mu, sigma^2 over the last dimension.

    sigma^2 is the *biased* variance (divide by D), as in the paper and ``nn.LayerNorm``; the
    unbiased estimate (divide by D - 1) would shrink every output by sqrt((D - 1) / D).

    Args:
        d_model: number of features D normalized together.
        eps: added to the variance for numerical stability.

    Shape:
        x (..., D) -> (..., D).

    Ba, Kiros and Hinton, 2016, "Layer Normalization".
    """

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.d_model = check_int("d_model", d_model, minimum=1)
        self.eps = check_positive_float("eps", eps)
        self.weight = nn.Parameter(torch.ones(d_model))  # gamma
        self.bias = nn.Parameter(torch.zeros(d_model))  # beta

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_tensor("x", x, floating=True)
        if x.dim() == 0 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must have last dimension d_model={self.d_model}, got shape {tuple(x.shape)}")
        mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
        variance = (x - mean).pow(2).mean(dim=-1, keepdim=True)  # (..., 1) biased
        return (x - mean) / torch.sqrt(variance + self.eps) * self.weight + self.bias  # (..., D)
