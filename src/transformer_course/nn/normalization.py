"""Layer normalization, written out: each token is standardized across its own features.

``LayerNorm`` centres and rescales each token (Ba et al., 2016); ``RMSNorm`` only rescales it by
its root mean square (Zhang and Sennrich, 2019), the variant of LLaMA and many recent LLMs.

Shape legend: B batch, T length, D = d_model.
"""

from __future__ import annotations

import numbers

import torch
from torch import nn

from transformer_course._validation import (check_bool, check_features, check_int, check_positive_float,
                                            check_tensor)


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
        check_features("x", x, self.d_model)
        mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
        variance = (x - mean).pow(2).mean(dim=-1, keepdim=True)  # (..., 1) biased
        return (x - mean) / torch.sqrt(variance + self.eps) * self.weight + self.bias  # (..., D)


class RMSNorm(nn.Module):
    """RMSNorm(x) = x / sqrt(mean_i x_i^2 + eps) * gamma, the mean taken over the ``normalized_shape`` dimensions.

    LayerNorm without its two centring parts: no mean is subtracted before dividing, and there is
    no shift beta, only the learned per-feature scale gamma. The divisor is the root mean square
    of the features, RMS(x) = sqrt(mean_i x_i^2), which equals LayerNorm's sigma only when the
    token's mean is zero. Zhang and Sennrich argue that the re-scaling, not the re-centring, is
    what stabilizes training, and the reduction is one pass cheaper.

    The arguments and their defaults are those of ``torch.nn.RMSNorm``, including ``eps=None``,
    which means ``torch.finfo(x.dtype).eps`` of the input (about 1.2e-7 in float32, 2.2e-16 in
    float64), far smaller than LayerNorm's usual 1e-5.

    Args:
        normalized_shape: size D of the last dimension, or a tuple of the trailing sizes that
            share one root mean square (e.g. ``(T, D)``).
        eps: added to the mean square; None uses the machine epsilon of the input's dtype.
        elementwise_affine: learn a scale gamma of shape ``normalized_shape``, initialized to 1;
            False leaves the output unscaled and the module without parameters.

    Shape:
        x (..., *normalized_shape) -> (..., *normalized_shape).

    Raises:
        TypeError: if ``normalized_shape`` holds a non-int, ``eps`` is not a number or None,
            ``elementwise_affine`` is not a bool, or (in forward) ``x`` is not a floating tensor.
        ValueError: if ``normalized_shape`` is empty or holds a size < 1, ``eps`` <= 0, or (in
            forward) ``x`` does not end with ``normalized_shape``.

    Zhang and Sennrich, 2019, "Root Mean Square Layer Normalization", equation (4).
    """

    def __init__(self, normalized_shape: int | tuple[int, ...] | list[int], eps: float | None = None,
                 elementwise_affine: bool = True) -> None:
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral) and not isinstance(normalized_shape, bool):
            normalized_shape = (normalized_shape,)
        if not isinstance(normalized_shape, (tuple, list, torch.Size)):
            raise TypeError(f"normalized_shape must be an int or a tuple of ints, got {type(normalized_shape).__name__}"
                            f" ({normalized_shape!r})")
        if len(normalized_shape) == 0:
            raise ValueError("normalized_shape must be an int or a non-empty tuple of ints, got ()")
        self.normalized_shape = tuple(check_int("normalized_shape", size, minimum=1) for size in normalized_shape)
        self.eps = None if eps is None else check_positive_float("eps", eps)
        self.elementwise_affine = check_bool("elementwise_affine", elementwise_affine)
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(self.normalized_shape))  # gamma
        else:
            self.register_parameter("weight", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_tensor("x", x, floating=True)
        k = len(self.normalized_shape)
        if x.dim() < k or tuple(x.shape[-k:]) != self.normalized_shape:
            raise ValueError(f"x must end with normalized_shape={self.normalized_shape}, got shape {tuple(x.shape)}")
        eps = torch.finfo(x.dtype).eps if self.eps is None else self.eps
        dims = tuple(range(-k, 0))  # the normalized (trailing) dimensions
        rms = torch.sqrt(x.pow(2).mean(dim=dims, keepdim=True) + eps)  # (..., 1, ..., 1): no mean subtracted
        y = x / rms  # (..., *normalized_shape)
        return y if self.weight is None else y * self.weight  # no bias beta

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


# --- Functional forms, for comparing LayerNorm with BatchNorm on the same tokens -------------------


def layer_norm_statistics(x: torch.Tensor, unbiased: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """mu = mean_i x_i and sigma^2 = mean_i (x_i - mu)^2 over the last dimension: one pair per token.

    Args:
        x: (..., D) token vectors.
        unbiased: divide by D - 1 instead of D (what ``Tensor.std`` does by default, and what some
            popular re-implementations use by mistake); LayerNorm proper uses False.

    Returns:
        mean (..., 1) and variance (..., 1).

    Raises:
        TypeError: if ``x`` is not a floating tensor.
        ValueError: if ``x`` is 0-d, or has a single feature while ``unbiased=True``.

    Ba, Kiros and Hinton, 2016, equation (3).
    """
    check_tensor("x", x, floating=True)
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension (the features), got a 0-d tensor")
    if unbiased and x.shape[-1] < 2:
        raise ValueError(f"unbiased variance needs at least 2 features, got shape {tuple(x.shape)}")
    mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
    variance = x.var(dim=-1, unbiased=unbiased, keepdim=True)  # (..., 1)
    return mean, variance


def batch_norm_statistics(x: torch.Tensor, keep: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """mu_j and sigma_j^2 of every feature j over all tokens of the batch: one pair per feature.

    This is what ``nn.BatchNorm1d`` computes in training mode when a (B, T, D) batch is viewed as
    B * T samples: it mixes every token of every sequence, padding included unless ``keep``
    excludes it.

    Args:
        x: (N, D) or (B, T, D) token vectors.
        keep: optional bool tensor of x's shape without D ((N,) or (B, T)); True = a real token
            that enters the statistics, False = padding left out.

    Returns:
        mean (D,) and biased variance (D,).

    Raises:
        TypeError: if ``x`` is not a floating tensor or ``keep`` is not bool.
        ValueError: if ``x`` is not 2-d or 3-d, ``keep`` has the wrong shape or keeps no token.

    Ioffe and Szegedy, 2015, Algorithm 1.
    """
    check_tensor("x", x, ndim=(2, 3), floating=True)
    tokens = x.reshape(-1, x.shape[-1])  # (N, D)
    if keep is not None:
        check_tensor("keep", keep)
        if keep.dtype != torch.bool:
            raise TypeError(f"keep must be a bool tensor, got dtype {keep.dtype}")
        if tuple(keep.shape) != tuple(x.shape[:-1]):
            raise ValueError(f"keep must have shape {tuple(x.shape[:-1])}, got {tuple(keep.shape)}")
        if not bool(keep.any()):
            raise ValueError("keep must mark at least one token as True")
        tokens = tokens[keep.reshape(-1)]  # (N_kept, D)
    mean = tokens.mean(dim=0)  # (D,)
    variance = tokens.var(dim=0, unbiased=False)  # (D,)
    return mean, variance


def standardize(x: torch.Tensor, mean: torch.Tensor, variance: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """(x - mean) / sqrt(variance + eps), with ``mean``/``variance`` broadcast against ``x``.

    Args:
        x: (..., D) token vectors.
        mean, variance: statistics from ``layer_norm_statistics`` ((..., 1)) or
            ``batch_norm_statistics`` ((D,)).
        eps: added to the variance for numerical stability.

    Returns:
        The standardized tensor, x's shape.

    Raises:
        ValueError: if ``eps`` is not positive.
    """
    check_positive_float("eps", eps)
    return (x - mean) / torch.sqrt(variance + eps)  # (..., D)
