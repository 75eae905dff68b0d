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
from torch.overrides import TorchFunctionMode
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
    parts = {  # "softmax" is an estimate; count_elementwise_operations(explicit_softmax) checks it
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

    return _first_length(attention_reaches_ffn)


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


def _first_length(reached: Callable[[int], bool]) -> int:
    """Smallest n >= 1 with ``reached(n)``, for a predicate that stays true once true (doubling + bisection)."""
    low, high = 1, 1
    while not reached(high):
        low, high = high, 2 * high
    if reached(low):
        return low
    while high - low > 1:  # invariant: not at low, reached at high
        middle = (low + high) // 2
        low, high = (low, middle) if reached(middle) else (middle, high)
    return high


def quadratic_crossover_length(d: int, expansion: float = 4, num_heads: int = 8) -> int:
    """Smallest n at which the quadratic pair (Q K^T and A V) reaches all the block's linear work.

    The linear work is the projections and the FFN, 8 n d^2 + 4 e n d^2; the pair costs 4 n^2 d;
    they meet at n = (e + 2) d, 6d for e = 4 (three times the attention-vs-FFN crossover 2d). Found by
    bisection on ``block_flops``, not from that formula, so the chapter can check one with the other.
    """
    def pair_reaches_linear(n: int) -> bool:
        parts = block_flops(n, d, expansion, num_heads)
        return parts["scores_qk"] + parts["weighted_values_av"] >= parts["qkvo_projections"] + parts["ffn"]

    return _first_length(pair_reaches_linear)


def matrix_weight_count(module: nn.Module) -> int:
    """Entries of ``module``'s matrices (parameters with two or more dimensions): N without biases and norms.

    This is the N of Kaplan et al. (2020), whose forward pass costs 2N FLOPs per token (one multiply-add
    per weight) when embeddings, biases and normalisations are left out.
    """
    check_instance("module", module, nn.Module, "torch.nn.Module")
    return sum(p.numel() for p in module.parameters() if p.dim() >= 2)


def kaplan_flops_per_token(d: int, n_ctx: int, expansion: float = 4, n_layer: int = 1) -> dict[str, int]:
    """Kaplan et al. (2020), Table 1: forward FLOPs per token of a decoder, C_forward = 2N + 2 n_layer n_ctx d.

    N = n_layer (4 d^2 + 2 e d^2) counts the non-embedding weights (d_attn = d); the context term is
    the paper's single "Attention: Mask" row. The training cost per token is about 3 C_forward (the
    backward pass costs twice the forward), C ~ 6N for short contexts.

    Returns:
        dict with "2N", "context" (2 n_layer n_ctx d), "forward" (their sum) and "training" (3 x forward).
    """
    d = check_int("d", d, minimum=1)
    n_ctx = check_int("n_ctx", n_ctx, minimum=1)
    n_layer = check_int("n_layer", n_layer, minimum=1)
    expansion = check_positive_float("expansion", expansion)
    weights = n_layer * (4 * d * d + 2 * expansion * d * d)
    if weights != int(weights):
        raise ValueError(f"expansion * d must be an integer d_ff, got expansion={expansion}, d={d}")
    parts = {"2N": 2 * int(weights), "context": 2 * n_layer * n_ctx * d}
    parts["forward"] = parts["2N"] + parts["context"]
    parts["training"] = 3 * parts["forward"]
    return parts


def measure_training_flops(module: nn.Module, x: torch.Tensor) -> dict[str, int]:
    """FLOPs of ``module(x)`` forward and of its backward pass, counted by ``FlopCounterMode``.

    ``x`` is given ``requires_grad`` (as the activations inside a deep model have), so the backward
    pass computes the gradient with respect to every matrix product's inputs and weights; the loss
    is the sum of the output. Attention runs through the hand-written path.

    Returns:
        dict with "forward", "backward" and "total".
    """
    check_instance("module", module, nn.Module, "torch.nn.Module")
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    x = x.detach().clone().requires_grad_(True)
    forward_counter, backward_counter = FlopCounterMode(display=False), FlopCounterMode(display=False)
    with hand_written_attention(module):
        with forward_counter:
            output = module(x)
        with backward_counter:
            output.sum().backward()
    module.zero_grad(set_to_none=True)
    forward, backward = int(forward_counter.get_total_flops()), int(backward_counter.get_total_flops())
    return {"forward": forward, "backward": backward, "total": forward + backward}


def explicit_softmax(scores: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax written as its five elementwise steps: max, subtract, exp, sum, divide (equal to ``torch.softmax``)."""
    if not isinstance(scores, torch.Tensor):
        raise TypeError(f"scores must be a torch.Tensor, got {type(scores).__name__}")
    shifted = scores - scores.amax(dim=dim, keepdim=True)  # max, subtract: exp cannot overflow
    exps = shifted.exp()
    return exps / exps.sum(dim=dim, keepdim=True)  # sum, divide


class _ElementwiseCounter(TorchFunctionMode):
    """Counts the elements each torch call touches: the largest tensor among its inputs and output."""

    def __init__(self) -> None:
        super().__init__()
        self.operations: list[tuple[str, int]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if isinstance(result, torch.Tensor):
            tensors.append(result)
        name = getattr(func, "__name__", str(func))
        if tensors and name not in ("__get__", "dim", "size", "shape"):
            self.operations.append((name.strip("_"), max(t.numel() for t in tensors)))
        return result


def count_elementwise_operations(fn: Callable[[], object]) -> list[tuple[str, int]]:
    """(operation, elements touched) for every torch call of ``fn()``, in order (no grad).

    One operation on each element of the largest tensor involved: a reduction over n numbers counts
    n, an elementwise map of n numbers counts n. ``FlopCounterMode`` counts only matrix products, so
    this is how the chapter counts the softmax.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    counter = _ElementwiseCounter()
    with counter, torch.no_grad():
        fn()
    return counter.operations


def operation_traffic(n: int, d: int, num_heads: int = 8, expansion: float = 4, batch: int = 1,
                      dtype: torch.dtype = torch.float32, seed: int = 0) -> pd.DataFrame:
    """FLOPs and bytes of each component of one block, read off real tensors of the right shapes.

    Each component is run once on random tensors: "qkvo_projections" (four linear maps),
    "scores_qk" (Q K^T), "softmax", "weighted_values_av" (A V) and "ffn" (two linear maps and a ReLU).
    FLOPs: counted by ``FlopCounterMode`` for the matrix products; the softmax's by
    ``count_elementwise_operations`` on ``explicit_softmax``. Bytes: the ``nbytes`` of every operand
    and result of every call: the least memory traffic if each is read or written once.

    Returns:
        DataFrame indexed by "component" (``BLOCK_COMPONENTS``) with columns "FLOPs", "bytes" and
        "FLOPs per byte" (the arithmetic intensity).
    """
    flops_check = block_flops(n, d, expansion, num_heads)  # validates the sizes
    if d % num_heads:
        raise ValueError(f"d must be divisible by num_heads, got d={d}, num_heads={num_heads}")
    batch = check_int("batch", batch, minimum=1)
    d_ff, d_head = int(expansion * d), d // num_heads
    generator = torch.Generator().manual_seed(check_int("seed", seed, minimum=0))

    def random(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=dtype)

    x = random(batch, n, d)  # (B, T, D)
    q, k, v = (random(batch, num_heads, n, d_head) for _ in range(3))  # (B, H, T, Dh)
    scores = q @ k.transpose(-2, -1)  # (B, H, T, T)
    weights = explicit_softmax(scores)  # (B, H, T, T)
    projections = [(random(d, d), random(d)) for _ in range(4)]  # (D, D), (D,)
    w1, b1, w2, b2 = random(d_ff, d), random(d_ff), random(d, d_ff), random(d)
    hidden = torch.relu(torch.nn.functional.linear(x, w1, b1))  # (B, T, F)
    calls = {  # component -> [(function, operands)]
        "qkvo_projections": [(lambda w=w, b=b: torch.nn.functional.linear(x, w, b), (x, w, b)) for w, b in projections],
        "scores_qk": [(lambda: q @ k.transpose(-2, -1), (q, k))],
        "softmax": [(lambda: explicit_softmax(scores), (scores,))],
        "weighted_values_av": [(lambda: weights @ v, (weights, v))],
        "ffn": [(lambda: torch.relu(torch.nn.functional.linear(x, w1, b1)), (x, w1, b1)),
                (lambda: torch.nn.functional.linear(hidden, w2, b2), (hidden, w2, b2))],
    }
    rows = []
    for component in BLOCK_COMPONENTS:
        flops = moved = 0
        for fn, operands in calls[component]:
            if component == "softmax":
                flops += sum(count for _, count in count_elementwise_operations(fn))
            else:
                flops += count_flops(fn)
            with torch.no_grad():
                result = fn()
            moved += sum(t.nbytes for t in operands) + result.nbytes
        rows.append({"component": component, "FLOPs": flops, "bytes": moved})
    frame = pd.DataFrame(rows).set_index("component")
    frame["FLOPs per byte"] = frame["FLOPs"] / frame["bytes"]
    del flops_check
    return frame
