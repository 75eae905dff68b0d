"""What a Transformer block costs: analytic FLOPs and parameters, and measured counts to check them.

FLOPs here count a multiply-add as 2 operations, as ``torch.utils.flop_counter.FlopCounterMode``
does; shares and ratios are the same whether one counts FLOPs or multiply-adds.

Per block of width d, sequence length n and FFN expansion e (d_ff = e * d):
    QKVO projections   4 * (2 n d^2)
    scores Q K^T       2 n^2 d
    weighted sum A V   2 n^2 d
    FFN                2 * (2 n d (e d))
    softmax            about 5 n^2 h elementwise operations (max, subtract, exp, sum, divide);
                       not a matrix product, so FlopCounterMode does not count it.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import pandas as pd
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ._validation import check_int, check_positive_float
from .attention import MultiHeadAttention

SOFTMAX_OPS_PER_SCORE = 5

BLOCK_COMPONENTS = ("qkvo_projections", "scores_qk", "weighted_values_av", "softmax", "ffn")


def block_flops(n: int, d: int, expansion: float = 4, num_heads: int = 8) -> dict[str, int]:
    """Analytic FLOPs of one encoder block's attention and FFN, per component (batch of one).

    Args:
        n: sequence length.
        d: model width d_model.
        expansion: FFN expansion e (d_ff = e * d); 4 in the paper.
        num_heads: heads h (only the softmax term depends on it).

    Returns:
        dict with keys ``BLOCK_COMPONENTS`` plus "attention" (projections + QK^T + AV, the card's
        MHA cost), "total" (attention + ffn, matrix products only).

    Raises:
        TypeError, ValueError: for non-positive sizes or an expansion that does not give an
            integer d_ff.
    """
    n = check_int("n", n, minimum=1)
    d = check_int("d", d, minimum=1)
    num_heads = check_int("num_heads", num_heads, minimum=1)
    expansion = check_positive_float("expansion", expansion)
    d_ff = expansion * d
    if d_ff != int(d_ff):
        raise ValueError(f"expansion * d must be an integer d_ff, got expansion={expansion}, d={d}")
    d_ff = int(d_ff)
    parts = {
        "qkvo_projections": 4 * 2 * n * d * d,
        "scores_qk": 2 * n * n * d,
        "weighted_values_av": 2 * n * n * d,
        "softmax": SOFTMAX_OPS_PER_SCORE * n * n * num_heads,
        "ffn": 2 * 2 * n * d * d_ff,
    }
    parts["attention"] = parts["qkvo_projections"] + parts["scores_qk"] + parts["weighted_values_av"]
    parts["total"] = parts["attention"] + parts["ffn"]
    return parts


def flop_share_table(d: int = 512, lengths: tuple[int, ...] = (64, 256, 1024, 4096),
                     expansion: float = 4) -> pd.DataFrame:
    """The card DL0033 table: MHA and FFN shares (%) of a block's matrix-product FLOPs per length n.

    Returns:
        DataFrame indexed by "Sequence Length n" with columns "MHA Share (%)", "FFN Share (%)",
        "Dominant Component" ("MHA", "FFN" or "Tie").
    """
    rows = []
    for n in lengths:
        parts = block_flops(n, d, expansion)
        mha = 100 * parts["attention"] / parts["total"]
        ffn = 100 * parts["ffn"] / parts["total"]
        dominant = "Tie" if parts["attention"] == parts["ffn"] else ("MHA" if mha > ffn else "FFN")
        rows.append({"Sequence Length n": n, "MHA Share (%)": mha, "FFN Share (%)": ffn,
                     "Dominant Component": dominant})
    return pd.DataFrame(rows).set_index("Sequence Length n")


def count_parameters(module: nn.Module, trainable_only: bool = False) -> int:
    """Number of distinct parameters of ``module`` (shared tensors counted once)."""
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


def parameter_breakdown(module: nn.Module, depth: int = 1) -> pd.DataFrame:
    """Parameters per named sub-module at ``depth`` (e.g. depth 1: encoder, decoder, embeddings).

    A tensor shared between sub-modules is attributed to the first one that owns it, so the rows
    add up to ``count_parameters(module)``.

    Returns:
        DataFrame indexed by "component" with columns "parameters" and "share (%)".
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    depth = check_int("depth", depth, minimum=1)
    counts: dict[str, int] = {}
    for name, parameter in module.named_parameters():  # named_parameters skips shared duplicates
        component = ".".join(name.split(".")[:depth])
        counts[component] = counts.get(component, 0) + parameter.numel()
    total = sum(counts.values())
    frame = pd.DataFrame({"parameters": counts}).rename_axis("component")
    frame["share (%)"] = 100 * frame["parameters"] / total
    return frame


def mha_parameters(d_model: int, bias: bool = True) -> int:
    """Four (D, D) projections W^Q, W^K, W^V, W^O, plus biases: 4 D^2 + 4 D; independent of H."""
    return 4 * d_model * d_model + (4 * d_model if bias else 0)


def ffn_parameters(d_model: int, d_ff: int, activation: str = "relu") -> int:
    """Two matrices and biases, 2 D F + F + D (three-matrix SwiGLU: 3 D F + 2 F + D)."""
    matrices = 3 if activation == "swiglu" else 2
    return matrices * d_model * d_ff + (matrices - 1) * d_ff + d_model


def layer_norm_parameters(d_model: int) -> int:
    """gamma and beta: 2 D."""
    return 2 * d_model


def encoder_layer_parameters(d_model: int, d_ff: int, activation: str = "relu") -> int:
    """Self-attention + FFN + two LayerNorms."""
    return mha_parameters(d_model) + ffn_parameters(d_model, d_ff, activation) + 2 * layer_norm_parameters(d_model)


def decoder_layer_parameters(d_model: int, d_ff: int, activation: str = "relu") -> int:
    """Self-attention + cross-attention + FFN + three LayerNorms."""
    return (2 * mha_parameters(d_model) + ffn_parameters(d_model, d_ff, activation)
            + 3 * layer_norm_parameters(d_model))


@contextmanager
def hand_written_attention(module: nn.Module) -> Iterator[nn.Module]:
    """Temporarily route every ``MultiHeadAttention`` in ``module`` through the hand-written path.

    On CPU ``FlopCounterMode`` counts nothing inside the fused
    ``F.scaled_dot_product_attention`` kernel, so FLOP measurements use the explicit matmuls.
    """
    attention = [m for m in module.modules() if isinstance(m, MultiHeadAttention)]
    previous = [m.fused for m in attention]
    for m in attention:
        m.fused = False
    try:
        yield module
    finally:
        for m, fused in zip(attention, previous):
            m.fused = fused


def measure_flops(module: nn.Module, *inputs: Any, **kwargs: Any) -> int:
    """Total FLOPs of ``module(*inputs, **kwargs)`` counted by ``FlopCounterMode`` (matrix products)."""
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    counter = FlopCounterMode(display=False)
    with hand_written_attention(module), counter, torch.no_grad():
        module(*inputs, **kwargs)
    return int(counter.get_total_flops())
