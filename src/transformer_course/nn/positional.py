"""Positional information: sinusoidal and learned absolute encodings, RoPE and ALiBi.

Shape legend: B batch, T length, D = d_model, H heads, Dh head width.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from transformer_course._validation import (check_features, check_int, check_positive_float, check_probability,
                                            check_tensor)


def pair_frequencies(width: int, base: float = 10000.0, device: torch.device | str | None = None) -> torch.Tensor:
    """w_i = base^(-2i / width) for each feature pair i = 0 .. width/2 - 1: the sinusoids' and RoPE's frequencies.

    Args:
        width: an even feature width (D for the sinusoidal encoding, Dh for RoPE).
        base: the wavelength scale (10000 in both papers).
        device: where to build the tensor.

    Returns:
        (width / 2,) float64 tensor, from 1 down to about 1 / base.

    Raises:
        TypeError, ValueError: if ``width`` is not a positive even int or ``base`` <= 0.
    """
    width = check_int("d_model", width, minimum=2)
    if width % 2:
        raise ValueError(f"d_model must be even (sin/cos pairs), got {width}")
    base = check_positive_float("base", base)
    return base ** (-torch.arange(0, width, 2, dtype=torch.float64, device=device) / width)  # (width/2,)


def sinusoidal_encoding(num_positions: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """PE[pos, 2i] = sin(pos / base^(2i/D)), PE[pos, 2i+1] = cos(pos / base^(2i/D)).

    Args:
        num_positions: number of positions P (rows), >= 1.
        d_model: encoding width D (columns), even.
        base: the wavelength scale (10000 in the paper): wavelengths run from 2*pi to 2*pi*base.

    Returns:
        (P, D) float32 tensor.

    Raises:
        TypeError, ValueError: if ``num_positions`` < 1, ``d_model`` is not a positive even int,
            or ``base`` <= 0.

    Vaswani et al., 2017, section 3.5.
    """
    num_positions = check_int("num_positions", num_positions, minimum=1)
    frequency = pair_frequencies(d_model, base)  # (D/2,)
    position = torch.arange(num_positions, dtype=torch.float64).unsqueeze(1)  # (P, 1)
    angle = position * frequency  # (P, D/2)
    pe = torch.stack((angle.sin(), angle.cos()), dim=-1).flatten(1)  # (P, D), interleaved sin, cos
    return pe.float()


class SinusoidalPositionalEncoding(nn.Module):
    """z = x + PE[:T]: adds fixed sinusoidal encodings; extrapolates past ``max_len``.

    Args:
        d_model: width D (even).
        max_len: positions precomputed in a non-persistent buffer; longer inputs are encoded on
            the fly (the encoding is defined for every position).
        dropout: dropout applied to the sum (the paper uses 0.1).

    Shape:
        x (B, T, D) -> (B, T, D).
    """

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.0) -> None:
        super().__init__()
        self.d_model = check_int("d_model", d_model, minimum=2)
        self.max_len = check_int("max_len", max_len, minimum=1)
        self.dropout = nn.Dropout(check_probability("dropout", dropout))
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)  # (max_len, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_features("x", x, self.d_model, ndim=3)
        t = x.shape[1]
        pe = self.pe[:t] if t <= self.max_len else sinusoidal_encoding(t, self.d_model).to(x.device)  # (T, D)
        return self.dropout(x + pe.to(x.dtype))  # (B, T, D)


class LearnedPositionalEmbedding(nn.Module):
    """z = x + E[pos]: one trainable vector per position, refused beyond ``max_len``.

    Args:
        max_len: number of learned positions.
        d_model: width D.

    Shape:
        x (B, T, D) -> (B, T, D), with T <= max_len.

    Raises (in forward):
        ValueError: if T exceeds ``max_len`` (there is no vector to add).

    Gehring et al., 2017; Devlin et al., 2019 (BERT).
    """

    def __init__(self, max_len: int, d_model: int) -> None:
        super().__init__()
        self.max_len = check_int("max_len", max_len, minimum=1)
        self.d_model = check_int("d_model", d_model, minimum=1)
        self.embedding = nn.Embedding(max_len, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_features("x", x, self.d_model, ndim=3)
        t = x.shape[1]
        if t > self.max_len:
            raise ValueError(f"sequence length {t} exceeds max_len={self.max_len} of the learned positional "
                             "embedding: positions beyond the training length have no vector")
        positions = torch.arange(t, device=x.device)  # (T,)
        return x + self.embedding(positions)  # (B, T, D)


def rotary_embedding(x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0) -> torch.Tensor:
    """RoPE: rotate each feature pair (2i, 2i+1) of x at position p by the angle p * base^(-2i/Dh).

    Applied to queries and keys, it makes q_m . k_n depend only on the offset m - n.

    Args:
        x: (..., T, Dh) queries or keys, Dh even.
        positions: (T,) positions; defaults to 0..T-1.
        base: frequency base (10000 in RoFormer).

    Returns:
        (..., T, Dh) rotated tensor, same dtype as ``x``.

    Raises:
        TypeError, ValueError: on a non-float ``x``, odd Dh, or positions of the wrong length.

    Su et al., 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding".
    """
    check_tensor("x", x, floating=True)
    if x.dim() < 2 or x.shape[-1] % 2:
        raise ValueError(f"x must have shape (..., T, Dh) with Dh even, got {tuple(x.shape)}")
    t, dh = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(t, device=x.device)
    elif positions.shape != (t,):
        raise ValueError(f"positions must have shape (T,) = ({t},), got {tuple(positions.shape)}")
    frequency = pair_frequencies(dh, base, device=x.device)  # (Dh/2,)
    angle = positions.to(torch.float64).unsqueeze(-1) * frequency  # (T, Dh/2)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)  # (T, Dh/2)
    even, odd = x[..., 0::2], x[..., 1::2]  # (..., T, Dh/2)
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)  # (..., T, Dh/2, 2)
    return rotated.flatten(-2)  # (..., T, Dh)


def interpolated_positions(t: int, train_length: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Position interpolation: positions 0 .. T-1 squeezed into [0, L) when T exceeds the training length L.

    RoPE at position m rotates pair i by m * w_i; past the training length L the angles m * w_i of the
    slow pairs are larger than any seen in training. Chen et al. (2023) rescale every position by
    L / T' (here T' = T, the length of the input) so that all angles stay inside the trained range;
    neighbouring tokens then sit L / T apart instead of 1. For T <= L the positions are unchanged.

    Args:
        t: sequence length T (>= 1).
        train_length: L, the longest length seen in training (>= 1).
        device: where to build the tensor.

    Returns:
        (T,) float64 tensor: m * min(1, L / T) for m = 0 .. T-1.

    Raises:
        TypeError, ValueError: if ``t`` or ``train_length`` is not a positive int.

    Chen, Wong, Chen and Tian, 2023, "Extending Context Window of Large Language Models via
    Positional Interpolation", equation (4).
    """
    t = check_int("t", t, minimum=1)
    train_length = check_int("train_length", train_length, minimum=1)
    return torch.arange(t, dtype=torch.float64, device=device) * min(1.0, train_length / t)  # (T,)


def ntk_scaled_base(base: float, scale: float, head_dim: int) -> float:
    """"NTK-aware" RoPE scaling: the base that stretches the slowest pair's wavelength by ``scale``.

    Instead of squeezing positions (which shrinks every angle, the fast pairs' too), raise the base
    to base * scale^(Dh / (Dh - 2)): the fastest pair (w_0 = 1) is unchanged, and the slowest pair,
    w = base^(-(Dh-2)/Dh), becomes w / scale, as in position interpolation.

    Args:
        base: the RoPE base used in training (10000).
        scale: T / L, how much longer the input is than the training length (>= 1).
        head_dim: Dh, an even head width >= 4.

    Returns:
        The new base (a float >= ``base``).

    Raises:
        TypeError, ValueError: if ``base`` <= 0, ``scale`` < 1 or ``head_dim`` is not an even int >= 4.

    bloc97, 2023 (the "NTK-aware scaled RoPE" post); Peng et al., 2023, "YaRN", section 3.2.
    """
    base = check_positive_float("base", base)
    scale = check_positive_float("scale", scale)
    if scale < 1:
        raise ValueError(f"scale must be >= 1 (an input at least as long as the training length), got {scale}")
    head_dim = check_int("head_dim", head_dim, minimum=4)
    if head_dim % 2:
        raise ValueError(f"head_dim must be even, got {head_dim}")
    return base * scale ** (head_dim / (head_dim - 2))


def rope_decay_bound(head_dim: int, distances: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """RoFormer's long-term decay curve: (2 / Dh) * sum_j |S_j(r)|, S_j(r) = sum_{k < j} exp(i r w_k), at each distance r.

    Su et al. bound the RoPE score of two vectors at relative distance r by
    (max_j |h_{j+1} - h_j|) * sum_j |S_j(r)| (Abel summation over the Dh/2 pairs); the factor that
    depends on r alone, averaged over the pairs, decays (with oscillations) as r grows.

    Args:
        head_dim: Dh, an even head width.
        distances: (R,) relative distances r (any real values).
        base: the RoPE base.

    Returns:
        (R,) float64 tensor: (Dh/2 + 1) / 2 at r = 0 (every |S_j| = j), smaller as r grows.

    Raises:
        TypeError, ValueError: if ``head_dim`` is not a positive even int or ``distances`` is not 1-D.

    Su et al., 2021, "RoFormer", section 3.4.3 and Figure 2.
    """
    check_tensor("distances", distances, ndim=1)
    frequency = pair_frequencies(head_dim, base)  # (Dh/2,)
    angle = distances.to(torch.float64).unsqueeze(-1) * frequency  # (R, Dh/2)
    partial = torch.polar(torch.ones_like(angle), angle).cumsum(dim=-1)  # (R, Dh/2): S_1 .. S_{Dh/2}
    return partial.abs().mean(dim=-1)  # (R,)


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """Head slopes m_h = 2^(-8 h / H), h = 1..H (the geometric sequence of the ALiBi paper)."""
    num_heads = check_int("num_heads", num_heads, minimum=1)
    return torch.tensor([2.0 ** (-8.0 * h / num_heads) for h in range(1, num_heads + 1)])  # (H,)


def alibi_bias(num_heads: int, t: int) -> torch.Tensor:
    """ALiBi bias[h, i, j] = -m_h * |i - j|: a per-head linear penalty on distance, added to scores.

    With a causal mask this is exactly the paper's -m_h * (i - j) for j <= i.

    Args:
        num_heads: H.
        t: sequence length T.

    Returns:
        (H, T, T) float tensor (pass it as ``bias`` to attention).

    Press et al., 2022, "Train Short, Test Long: Attention with Linear Biases".
    """
    t = check_int("t", t, minimum=1)
    distance = (torch.arange(t).unsqueeze(1) - torch.arange(t)).abs().float()  # (T, T)
    return -alibi_slopes(num_heads)[:, None, None] * distance  # (H, T, T)


def wavelengths(d_model: int, base: float = 10000.0) -> torch.Tensor:
    """Wavelength 2*pi*base^(2i/D) of each sin/cos pair i of the sinusoidal encoding, (D/2,)."""
    return 2 * math.pi / pair_frequencies(d_model, base)


def relative_rotation(d_model: int, k: int, base: float = 10000.0) -> torch.Tensor:
    """The fixed linear map M_k with PE[pos + k] = M_k PE[pos] for every position pos.

    For each sin/cos pair i with frequency w_i = base^(-2i/D) the angle addition formulas give

        [sin((pos + k) w_i)]   [ cos(k w_i)  sin(k w_i)] [sin(pos w_i)]
        [cos((pos + k) w_i)] = [-sin(k w_i)  cos(k w_i)] [cos(pos w_i)],

    so M_k is block diagonal with one 2x2 rotation per pair, and it depends on the offset k only,
    never on pos. In row form (as ``sinusoidal_encoding`` stores positions): PE[pos + k] = PE[pos] M_k^T.

    Args:
        d_model: encoding width D, a positive even int.
        k: the offset; any int (negative offsets rotate backwards, M_{-k} = M_k^T).
        base: the wavelength scale of the encoding (10000 in the paper).

    Returns:
        (D, D) float64 tensor, orthogonal, with M_a M_b = M_{a+b}.

    Raises:
        TypeError, ValueError: if ``d_model`` is not a positive even int, ``k`` is not an int or
            ``base`` <= 0.

    Vaswani et al., 2017, section 3.5 ("PE_{pos+k} can be represented as a linear function of PE_pos").
    """
    k = check_int("k", k)
    angle = k * pair_frequencies(d_model, base)  # (D/2,)
    cos, sin = angle.cos(), angle.sin()  # (D/2,)
    blocks = torch.stack((torch.stack((cos, sin), -1), torch.stack((-sin, cos), -1)), -2)  # (D/2, 2, 2)
    return torch.block_diag(*blocks)  # (D, D)


def position_similarity(pe: torch.Tensor) -> torch.Tensor:
    """Cosine similarity cos(PE[p], PE[q]) between the encodings of every pair of positions.

    Args:
        pe: (P, D) positional encodings, one row per position.

    Returns:
        (P, P) float tensor with ones on the diagonal.

    Raises:
        TypeError, ValueError: if ``pe`` is not a 2-D floating tensor.
    """
    check_tensor("pe", pe, ndim=2, floating=True)
    unit = pe / pe.norm(dim=-1, keepdim=True)  # (P, D)
    return unit @ unit.T  # (P, P)
