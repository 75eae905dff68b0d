"""Does a deep stack of attention layers keep its tokens apart? Rank collapse with depth (Dong et al., 2021).

Self-attention replaces every token by a convex combination of value vectors. Dong, Cordonnier and
Loukas (2021) proved that a stack of pure attention layers (no skip connections, no FFN) drives
its output, doubly exponentially fast in depth, towards a rank-one matrix 1 x^T: every token the
same vector. They also showed what counteracts it: skip connections do; the FFN (an MLP) can only
slow it, by its Lipschitz constant.

We measure it on the package's own layers at their default initialization: the relative residual

    r(X) = ||X - 1 mean_t(X)||_F / ||X||_F,

the distance of the (T, D) token matrix X from the nearest matrix with identical rows, relative to
its size (0: every token identical; Dong et al. use a composite l1 / l_inf norm, we use the
Frobenius norm). Four stacks of the same layers (the same weights for a given seed):

* ``"attention"``: X <- SA(X)
* ``"attention + FFN"``: X <- FFN(SA(X))
* ``"attention + skip"``: X <- X + SA(X)
* ``"attention + FFN + skip"``: X <- X + SA(X), then X <- X + FFN(X) (a block without LayerNorm)

Shape legend: B batch, T length, D = d_model.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pandas as pd
import torch

from transformer_course._exhibit import exhibit
from transformer_course._validation import check_choice, check_int, check_tensor
from transformer_course.nn.attention import MultiHeadAttention
from transformer_course.measure.timing import threads
from transformer_course.nn.feedforward import FeedForward
from .claims import Claim
from .training import seeded

ARCHITECTURES = ("attention", "attention + FFN", "attention + skip", "attention + FFN + skip")
EXPERIMENT = "rank collapse"  # the ensemble's name for seeds.ensemble_seeds
CHAPTER_SETTINGS = {  # DL0031's ensemble, shared by the chapter and benchmarks/calibration/dl0031_feed_forward_network.py
    "depth": 24,
    "d_model": 32,
    "num_heads": 4,
    "seq_len": 16,
    "batch_size": 4,
    "num_seeds": 16,
}


def relative_residual(x: torch.Tensor) -> torch.Tensor:
    """r(X) = ||X - 1 mean_t(X)||_F / ||X||_F for each sequence of a (B, T, D) batch.

    Args:
        x: (B, T, D) or (T, D) floating tensor of token vectors.

    Returns:
        (B,) tensor (a 0-d tensor for a (T, D) input), in [0, 1]: 0 when every token is the same vector.

    Raises:
        TypeError, ValueError: if ``x`` is not a 2-D or 3-D floating tensor.

    Dong, Cordonnier and Loukas, 2021, "Attention is not all you need: pure attention loses rank
    doubly exponentially with depth", the residual res(X) = X - 1 x^T (here with x the mean row,
    which minimises its Frobenius norm).
    """
    check_tensor("x", x, ndim=(2, 3), floating=True)
    residual = x - x.mean(dim=-2, keepdim=True)  # (..., T, D)
    return residual.flatten(-2).norm(dim=-1) / x.flatten(-2).norm(dim=-1)  # (...,)


@torch.no_grad()
def residual_by_depth(architecture: str, attentions: Sequence[MultiHeadAttention], ffns: Sequence[FeedForward],
                      x: torch.Tensor) -> list[float]:
    """r(X) after 0, 1, ..., N layers of ``architecture`` (mean over the batch), N = len(attentions).

    Raises:
        TypeError, ValueError: for an unknown architecture or mismatched layer lists.
    """
    check_choice("architecture", architecture, ARCHITECTURES)
    if len(attentions) != len(ffns) or not attentions:
        raise ValueError(f"attentions and ffns must be non-empty and of equal length, got {len(attentions)}, {len(ffns)}")
    check_tensor("x", x, ndim=3, floating=True)
    skip, with_ffn = "skip" in architecture, "FFN" in architecture
    residuals = [float(relative_residual(x).mean())]
    for attention, ffn in zip(attentions, ffns):
        mixed = attention(x, x, x)  # (B, T, D)
        x = x + mixed if skip else mixed
        if with_ffn:
            x = x + ffn(x) if skip else ffn(x)  # (B, T, D)
        residuals.append(float(relative_residual(x).mean()))
    return residuals


@exhibit
def rank_collapse(architectures: Sequence[str] = ARCHITECTURES, depth: int = 24, d_model: int = 32,
                  num_heads: int = 4, seq_len: int = 16, batch_size: int = 4,
                  seeds: Iterable[int] = range(16)) -> pd.DataFrame:
    """r(X) against depth for each architecture and seed, on freshly initialized layers and random inputs.

    For each seed, ``depth`` ``MultiHeadAttention`` and ``FeedForward(d_model, 4 d_model)`` layers are
    drawn (in float64, at PyTorch's default initialization) and a batch of Gaussian token vectors;
    every architecture runs on those same layers and inputs.

    Returns:
        Long DataFrame with columns architecture, seed, depth (0 .. ``depth``), residual.

    Raises:
        TypeError, ValueError: for an unknown architecture, sizes out of range, or empty/repeated seeds.
    """
    architectures = [check_choice("architectures", a, ARCHITECTURES) for a in architectures]
    if not architectures:
        raise ValueError("architectures must name at least one architecture, got none")
    depth = check_int("depth", depth, minimum=1)
    d_model = check_int("d_model", d_model, minimum=1)
    num_heads = check_int("num_heads", num_heads, minimum=1)
    seq_len = check_int("seq_len", seq_len, minimum=2)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    seeds = [check_int("seeds", s, minimum=0) for s in seeds]
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be a non-empty collection of distinct ints >= 0, got {seeds}")
    records = []
    with threads(1):  # tiny float64 products: one thread is fastest and sums in the same order everywhere
        for seed in seeds:
            records += _one_seed(architectures, depth, d_model, num_heads, seq_len, batch_size, seed)
    return pd.DataFrame.from_records(records)


def _one_seed(architectures: list[str], depth: int, d_model: int, num_heads: int, seq_len: int, batch_size: int,
              seed: int) -> list[dict]:
    records = []
    with seeded(seed):
        attentions = [MultiHeadAttention(d_model, num_heads).double() for _ in range(depth)]
        ffns = [FeedForward(d_model, 4 * d_model).double() for _ in range(depth)]
    x = torch.randn(batch_size, seq_len, d_model, dtype=torch.float64,
                    generator=torch.Generator().manual_seed(seed))  # (B, T, D)
    for architecture in architectures:
        for layer, r in enumerate(residual_by_depth(architecture, attentions, ffns, x)):
            records.append({"architecture": architecture, "seed": seed, "depth": layer, "residual": r})
    return records


def chapter_claims(results: pd.DataFrame) -> list[Claim]:
    """DL0031's conclusions about rank collapse, as statements about the seeds of :func:`rank_collapse`.

    Args:
        results: the table of :func:`rank_collapse` run with ``CHAPTER_SETTINGS``.

    Returns:
        The claims the chapter asserts; ``benchmarks/calibration/dl0031_feed_forward_network.py``
        computes the same ones for 30 base seeds.
    """
    depth = int(results["depth"].max())

    def at(architecture: str, layer: int) -> pd.Series:
        rows = results[(results["architecture"] == architecture) & (results["depth"] == layer)]
        if rows.empty:
            raise ValueError(f"results has no row for {architecture!r} at depth {layer}")
        return rows["residual"]

    return [
        Claim("highest r(X) over seeds after 1 layer, attention only", float(at("attention", 1).max()), "<", 0.6),
        Claim("highest r(X) over seeds after 2 layers, attention only", float(at("attention", 2).max()), "<", 1e-3),
        Claim("highest r(X) over seeds after 3 layers, attention only", float(at("attention", 3).max()), "<", 1e-12),
        Claim("highest r(X) over seeds after 3 layers, attention + FFN", float(at("attention + FFN", 3).max()), "<", 1e-12),
        Claim(f"lowest r(X) over seeds after {depth} layers, attention + skip",
              float(at("attention + skip", depth).min()), ">", 0.2),
        Claim(f"lowest r(X) over seeds after {depth} layers, attention + FFN + skip",
              float(at("attention + FFN + skip", depth).min()), ">", 0.15),
    ]
