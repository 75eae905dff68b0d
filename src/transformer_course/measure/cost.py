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

from collections.abc import Callable
from typing import Any

import pandas as pd
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from transformer_course._exhibit import exhibit
from transformer_course._validation import check_instance, check_int, check_positive_float, check_sizes
from transformer_course.nn.attention import hand_written_attention
from transformer_course.nn.normalization import LayerNorm

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


@exhibit
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
    check_instance("module", module, nn.Module, "torch.nn.Module")
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


@exhibit
def parameter_breakdown(module: nn.Module, depth: int = 1) -> pd.DataFrame:
    """Parameters per named sub-module at ``depth`` (e.g. depth 1: encoder, decoder, embeddings).

    A tensor shared between sub-modules is attributed to the first one that owns it, so the rows
    add up to ``count_parameters(module)``.

    Returns:
        DataFrame indexed by "component" with columns "parameters" and "share (%)".
    """
    check_instance("module", module, nn.Module, "torch.nn.Module")
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


def count_flops(fn: Callable[[], object]) -> int:
    """Total FLOPs of the matrix products in ``fn()``, counted by ``FlopCounterMode`` (no grad).

    PyTorch's fused CPU attention kernel is not counted by ``FlopCounterMode``: count attention
    written with explicit products (the package's ``scaled_dot_product_attention``).
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        fn()
    return int(counter.get_total_flops())


def measure_flops(module: nn.Module, *inputs: Any, **kwargs: Any) -> int:
    """Total FLOPs of ``module(*inputs, **kwargs)`` counted by ``FlopCounterMode`` (matrix products)."""
    check_instance("module", module, nn.Module, "torch.nn.Module")
    with hand_written_attention(module):
        return count_flops(lambda: module(*inputs, **kwargs))


def crossover_length(d: int, expansion: float = 4, num_heads: int = 8) -> int:
    """Smallest integer n at which a block's attention FLOPs reach its FFN FLOPs (found numerically).

    Solving 8 n d^2 + 4 n^2 d = 4 e n d^2 gives n = (e - 2) d: 2d for the usual e = 4. This
    function does not use that formula: it bisects on ``block_flops`` so the chapter can check
    the algebra against the package's own count. For e <= 2 attention is never below the FFN and
    the answer is 1.

    Args:
        d: model width.
        expansion: FFN expansion e.
        num_heads: heads (does not change matrix-product FLOPs).

    Returns:
        The smallest n >= 1 with attention FLOPs >= FFN FLOPs.
    """
    def attention_reaches_ffn(n: int) -> bool:
        parts = block_flops(n, d, expansion, num_heads)
        return parts["attention"] >= parts["ffn"]

    low, high = 1, 1
    while not attention_reaches_ffn(high):  # the n^2 term wins eventually: double until it does
        low, high = high, 2 * high
    if attention_reaches_ffn(low):
        return low
    while high - low > 1:  # invariant: not at low, reached at high
        middle = (low + high) // 2
        low, high = (low, middle) if attention_reaches_ffn(middle) else (middle, high)
    return high


@exhibit
def component_share_table(d: int = 512, lengths: tuple[int, ...] = (64, 256, 1024, 4096),
                          expansion: float = 4, num_heads: int = 8,
                          include_softmax: bool = True) -> pd.DataFrame:
    """Share (%) of one block's FLOPs in each component (``BLOCK_COMPONENTS``) for each length n.

    Args:
        d: model width.
        lengths: sequence lengths n.
        expansion: FFN expansion e.
        num_heads: heads (sets the softmax's elementwise count).
        include_softmax: count the softmax's elementwise operations (True) or only matrix
            products, as the card's table does (False: the softmax column is then 0).

    Returns:
        DataFrame indexed by "n" with one column per component; each row sums to 100.
    """
    rows = []
    for n in check_sizes("lengths", lengths):
        parts = block_flops(n, d, expansion, num_heads)
        if not include_softmax:
            parts["softmax"] = 0
        total = sum(parts[c] for c in BLOCK_COMPONENTS)
        rows.append({c: 100 * parts[c] / total for c in BLOCK_COMPONENTS})
    return pd.DataFrame(rows, index=pd.Index(lengths, name="n"))


@exhibit
def expansion_table(n: int = 64, d: int = 512, expansions: tuple[float, ...] = (4, 2, 1),
                    num_heads: int = 8) -> pd.DataFrame:
    """Each component's FLOPs at one (n, d) for several FFN expansions, and the largest component.

    Returns:
        DataFrame indexed by "expansion" with one FLOP column per ``BLOCK_COMPONENTS`` entry and a
        "largest" column naming the component with the most FLOPs.
    """
    if not isinstance(expansions, (list, tuple)) or not expansions:
        raise ValueError(f"expansions must be a non-empty list or tuple, got {expansions!r}")
    rows = []
    for expansion in expansions:
        parts = block_flops(n, d, expansion, num_heads)
        row = {c: parts[c] for c in BLOCK_COMPONENTS}
        most = max(parts[c] for c in BLOCK_COMPONENTS)
        row["largest"] = " = ".join(c for c in BLOCK_COMPONENTS if parts[c] == most)  # ties named together
        rows.append(row)
    return pd.DataFrame(rows, index=pd.Index(expansions, name="expansion"))


PARAMETER_GROUPS = ("feed-forward networks", "attention", "layer norms", "embeddings and output")


@exhibit
def parameter_groups(model: nn.Module) -> pd.DataFrame:
    """Parameters of ``model`` grouped by the kind of module that owns them, read off the module tree.

    Each encoder and decoder layer says what it is made of (its ``SUBLAYERS``): the FFN counts as
    "feed-forward networks", the attention sub-layers as "attention", their LayerNorms as "layer
    norms". A LayerNorm outside a layer (the final norm of a Pre-LN stack; the course's or
    ``nn.LayerNorm``) is a "layer norm" too; the rest (token embeddings, the output projection) is
    "embeddings and output". A tensor shared by several
    modules (tied embeddings) is counted once, so the rows add up to the model's total.

    Args:
        model: any module, e.g. ``Transformer(config)`` (the meta device works: only shapes are read).

    Returns:
        DataFrame indexed by "group" (``PARAMETER_GROUPS``) with columns "parameters",
        "share (%)" of all parameters and "share without embeddings (%)" (NaN on the embeddings row).

    Raises:
        TypeError: if ``model`` is not an ``nn.Module``.
    """
    check_instance("model", model, nn.Module, "torch.nn.Module")
    ffn, attention, norms, rest = PARAMETER_GROUPS
    owners: list[tuple[nn.Module, str]] = []
    for module in model.modules():
        for sublayer in getattr(module, "SUBLAYERS", ()):
            owners.append((getattr(module, sublayer.name), ffn if sublayer.name == "feed_forward" else attention))
            owners.append((getattr(module, sublayer.norm), norms))
        if isinstance(module, (LayerNorm, nn.LayerNorm)):  # e.g. the final norm of a Pre-LN stack
            owners.append((module, norms))
    owner: dict[int, str] = {}
    for module, group in owners:
        for parameter in module.parameters():
            owner.setdefault(id(parameter), group)
    counts = dict.fromkeys(PARAMETER_GROUPS, 0)
    for parameter in model.parameters():  # each distinct tensor once
        counts[owner.get(id(parameter), rest)] += parameter.numel()
    frame = pd.DataFrame({"parameters": counts}).rename_axis("group")
    total = frame["parameters"].sum()
    frame["share (%)"] = 100 * frame["parameters"] / total
    frame["share without embeddings (%)"] = (100 * frame["parameters"] / (total - counts[rest])).where(
        frame.index != rest)
    return frame
