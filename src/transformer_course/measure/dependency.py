"""How far is the last output from the first token? Measured on the autograd graph, not asserted.

Three measurements back the Transformer-vs-RNN chapter (DL0032):

* **dependency depth**: the longest chain of operations in the autograd graph from token 1's input
  to token n's output. Operations on one chain must run one after the other, so this is the
  number of sequential steps no amount of hardware can remove (the critical path).
* **signal path length**: the shortest such chain, the fewest operations a signal (or a gradient)
  from token 1 must pass through to reach output n.
* **gradient reach**: the Frobenius norm of the Jacobian d y_n / d x_1, how much of the last
  output's gradient arrives at the first token.

plus ``count_matmuls``, which records every matrix product (GEMM) a forward pass launches, and
``sees_future``, which measures whether a stack's first output depends on its last input.

Shape legend: B batch, T length (n tokens), D = d_model.
"""

from __future__ import annotations

import copy
import statistics
from collections import Counter
from collections.abc import Callable
from typing import Any, NamedTuple

import pandas as pd
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from transformer_course._exhibit import exhibit
from transformer_course._validation import (check_choice, check_instance, check_int, check_sequence_models, check_sizes,
                                            check_tensor)
from transformer_course.nn.attention import hand_written_attention
from transformer_course.nn.model import Transformer
from .cost import count_parameters


class PathLengths(NamedTuple):
    """Number of autograd operations on the shortest and the longest path between two tensors."""

    shortest: int
    longest: int


class Gemm(NamedTuple):
    """One matrix product: ``batch`` independent (m, k) @ (k, n) products."""

    op: str
    batch: int
    m: int
    k: int
    n: int

    @property
    def flops(self) -> int:
        """2 m k n per product (a multiply-add counts 2), times the batch."""
        return 2 * self.batch * self.m * self.k * self.n


def graph_path_lengths(output: torch.Tensor, source: torch.Tensor) -> PathLengths:
    """Shortest and longest number of autograd operations from leaf ``source`` to ``output``.

    The graph is walked backwards from ``output.grad_fn`` through ``next_functions``; a path ends
    at the ``AccumulateGrad`` node of ``source``. Every node on the path except that leaf node is
    one operation, so a single ``y = x * 2`` has length 1.

    Args:
        output: a tensor computed from ``source`` (any shape).
        source: a leaf tensor with ``requires_grad=True``.

    Returns:
        ``PathLengths(shortest, longest)``.

    Raises:
        TypeError: if an argument is not a tensor.
        ValueError: if ``source`` is not a leaf that requires grad, or ``output`` does not depend
            on it.
    """
    check_tensor("output", output)
    check_tensor("source", source)
    if not (source.is_leaf and source.requires_grad):
        raise ValueError("source must be a leaf tensor with requires_grad=True")
    if output.grad_fn is None:
        raise ValueError("output does not depend on source: it has no grad_fn")
    unreachable = None
    # Iterative post-order walk (an RNN's graph is thousands of nodes deep: no recursion).
    memo: dict[Any, tuple[int, int] | None] = {}
    stack: list[tuple[Any, bool]] = [(output.grad_fn, False)]
    while stack:
        node, expanded = stack.pop()
        if node in memo:
            continue
        if getattr(node, "variable", None) is source:  # AccumulateGrad of the source leaf
            memo[node] = (0, 0)
            continue
        children = [child for child, _ in node.next_functions if child is not None]
        if not expanded:
            stack.append((node, True))
            stack.extend((child, False) for child in children if child not in memo)
            continue
        reached = [memo[child] for child in children if memo.get(child) is not None]
        memo[node] = unreachable if not reached else (1 + min(r[0] for r in reached),
                                                      1 + max(r[1] for r in reached))
    result = memo[output.grad_fn]
    if result is None:
        raise ValueError("output does not depend on source")
    return PathLengths(*result)


def _token_inputs(n: int, d_model: int, generator: torch.Generator | None,
                  dtype: torch.dtype = torch.float32) -> tuple[list[torch.Tensor], torch.Tensor]:
    """n separate leaf tokens (1, D) and their stack (1, n, D), so token 1 has its own graph node."""
    values = torch.randn(n, d_model, generator=generator, dtype=dtype)  # (T, D)
    tokens = [values[t:t + 1].clone().requires_grad_(True) for t in range(n)]  # T x (1, D)
    return tokens, torch.stack(tokens, dim=1)  # (1, T, D)


def dependency_path(module: nn.Module, n: int, generator: torch.Generator | None = None) -> PathLengths:
    """Path lengths in the autograd graph from token 1's input to token n's output of ``module``.

    Args:
        module: a sequence module mapping (B, T, D) to (B, T, D) with attribute ``d_model``
            (``ElmanRNN``, ``EncoderLayer``).
        n: sequence length.
        generator: seeds the random input (the graph does not depend on its values).

    Returns:
        ``PathLengths(shortest, longest)``; ``longest`` is the dependency depth (sequential steps).
    """
    module = check_sequence_models({"module": module})["module"]
    n = check_int("n", n, minimum=1)
    tokens, x = _token_inputs(n, module.d_model, generator)
    output = module(x)[:, -1]  # (1, D): the last token's output
    return graph_path_lengths(output, tokens[0])


@exhibit
def depth_table(modules: dict[str, nn.Module], lengths: tuple[int, ...],
                generator: torch.Generator | None = None) -> pd.DataFrame:
    """Dependency depth (longest path, token 1 -> output n) of each module for each length n.

    Returns:
        DataFrame indexed by "n" with one integer column per module name.
    """
    return _per_length(modules, lengths, lambda module, n: dependency_path(module, n, generator).longest)


def first_token_gradient_norm(module: nn.Module, n: int, generator: torch.Generator | None = None) -> float:
    """||d(u . y_n) / d x_1||: how much of the last output's gradient reaches the first token.

    The last output y_n is read along a fixed random unit direction u (drawn from ``generator``
    after the inputs), so one backward pass gives the gradient with respect to token 1's input.
    It runs in float64 on a copy of ``module`` in eval mode, so vanishing values do not underflow
    and dropout stays off.

    Args:
        module: as in ``dependency_path``.
        n: sequence length.
        generator: seeds the random input and the direction u.

    Returns:
        The Euclidean norm of the (1, D) gradient at token 1.

    Hochreiter, 1991; Bengio, Simard and Frasconi, 1994 (vanishing gradients).
    """
    module = check_sequence_models({"module": module})["module"]
    n = check_int("n", n, minimum=1)
    model = copy.deepcopy(module).double().eval()
    tokens, x = _token_inputs(n, model.d_model, generator, dtype=torch.float64)
    direction = torch.randn(model.d_model, generator=generator, dtype=torch.float64)  # (D,)
    direction = direction / direction.norm()
    output = model(x)[0, -1]  # (D,): the last token's output
    (grad,) = torch.autograd.grad(output @ direction, tokens[0])  # (1, D)
    return float(grad.norm())


@exhibit
def gradient_table(modules: dict[str, nn.Module], lengths: tuple[int, ...], seed: int = 0) -> pd.DataFrame:
    """``first_token_gradient_norm`` of each module for each length n (the same inputs for all).

    Returns:
        DataFrame indexed by "n" with one float column per module name.
    """
    return _per_length(modules, lengths,
                       lambda module, n: first_token_gradient_norm(module, n, torch.Generator().manual_seed(seed)))


def _per_length(modules: dict[str, nn.Module], lengths: tuple[int, ...],
                measure: Callable[[nn.Module, int], float]) -> pd.DataFrame:
    """A table indexed by "n" with one column per module: ``measure(module, n)``."""
    lengths = check_sizes("lengths", lengths)
    rows = {name: [measure(module, n) for n in lengths] for name, module in check_sequence_models(modules).items()}
    return pd.DataFrame(rows, index=pd.Index(lengths, name="n"))


class _GemmRecorder(TorchFunctionMode):
    """Records the shape of every matrix product (``F.linear``, ``@``, ``matmul``, ``mm``, ``bmm``).

    A ``TorchFunctionMode`` sees the calls as written in the module, cheaply (a dispatch-level
    mode would import TorchDynamo, seconds on a small CPU).
    """

    def __init__(self) -> None:
        super().__init__()
        self.gemms: list[Gemm] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name == "linear":
            x, weight = args[0], args[1]
            rows = x.numel() // x.shape[-1]  # every leading dimension becomes a row of one GEMM
            self.gemms.append(Gemm("linear", 1, rows, weight.shape[1], weight.shape[0]))
        elif name in ("matmul", "__matmul__", "mm", "bmm"):
            a, b = args[0], args[1]
            a2 = a if a.dim() > 1 else a.unsqueeze(0)
            b2 = b if b.dim() > 1 else b.unsqueeze(-1)
            batch = torch.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]).numel()
            self.gemms.append(Gemm(name.strip("_"), batch, a2.shape[-2], a2.shape[-1], b2.shape[-1]))
        return func(*args, **kwargs)


def count_matmuls(module: nn.Module, x: torch.Tensor) -> list[Gemm]:
    """Every matrix product ``module(x)`` launches, in order, with its shape.

    Attention runs through the hand-written path (explicit Q K^T and A V products) so the products
    inside it are visible; a ``linear`` on (B, T, D) is one GEMM with B * T rows.

    Args:
        module: any module.
        x: its input.

    Returns:
        A list of ``Gemm(op, batch, m, k, n)``; ``batch`` counts independent products run by
        one kernel (the heads of a batched ``@``).
    """
    check_instance("module", module, nn.Module, "torch.nn.Module")
    check_tensor("x", x)
    recorder = _GemmRecorder()
    with hand_written_attention(module), torch.no_grad(), recorder:
        module(x)
    return recorder.gemms


CARD_TABLE = {
    "Token dependency": ("sequential: h_t waits for h_{t-1}", "none: every token at once"),
    "Training steps for n tokens": ("n ordered steps", "one parallel pass"),
    "Core operation": ("many small vector updates", "a few large batched GEMMs"),
    "Long-range signal path": ("through n hidden states (vanishing gradients)", "one attention hop, O(1)"),
}


@exhibit
def comparison_table(rnn: nn.Module, layer: nn.Module, lengths: tuple[int, ...] = (16, 64),
                     seed: int = 0) -> pd.DataFrame:
    """The card DL0032 table, with a measured column for each model beside the card's words.

    Measured at the first and the last length of ``lengths``:
    * token dependency: how much the dependency depth grows per extra token;
    * training steps: the dependency depth (longest autograd path from token 1 to output n);
    * core operation: number of matrix products in one forward pass and the most common shape;
    * long-range signal path: the length of the path from token 1 to output n (the same longest
      path: every step of it is a real dependency) and the gradient norm reaching token 1.

    Args:
        rnn: the recurrent model (e.g. ``ElmanRNN``).
        layer: the Transformer model (e.g. ``EncoderLayer``).
        lengths: at least two sequence lengths, increasing.
        seed: seeds the inputs.

    Returns:
        DataFrame indexed by "Aspect" with columns "RNN (card)", "Transformer (card)",
        "RNN (measured)", "Transformer (measured)".
    """
    lengths = check_sizes("lengths", lengths)
    if len(lengths) < 2 or list(lengths) != sorted(set(lengths)):
        raise ValueError(f"lengths must hold at least two increasing lengths, got {lengths!r}")
    first, last = lengths[0], lengths[-1]
    numbers = measured_comparison(rnn, layer, (first, last), seed=seed)
    measured = {}
    for name, module in (("RNN", rnn), ("Transformer", layer)):
        depth = numbers[("depth", name)]
        grad = numbers[("grad norm", name)]
        slope = (depth[last] - depth[first]) / (last - first)
        x = torch.randn(1, last, module.d_model, generator=torch.Generator().manual_seed(seed))  # (1, T, D)
        gemms = count_matmuls(module, x)
        typical, count = Counter(g[1:] for g in gemms).most_common(1)[0]  # (batch, m, k, n)
        measured[name] = [
            f"dependency depth grows by {slope:g} operations per extra token",
            f"{depth[last]} operations in sequence at n={last} ({depth[first]} at n={first})",
            f"{len(gemms)} matrix products at n={last}; most common: {count} x "
            f"[{typical[0]} x ({typical[1]}x{typical[2]}) @ ({typical[2]}x{typical[3]})]",
            f"token 1 -> output n: {depth[last]} operations at n={last}; gradient reaching token 1: "
            f"{grad[first]:.1e} at n={first}, {grad[last]:.1e} at n={last}",
        ]
    return pd.DataFrame({
        "RNN (card)": [v[0] for v in CARD_TABLE.values()],
        "Transformer (card)": [v[1] for v in CARD_TABLE.values()],
        "RNN (measured)": measured["RNN"],
        "Transformer (measured)": measured["Transformer"],
    }, index=pd.Index(list(CARD_TABLE), name="Aspect"))


@exhibit
def measured_comparison(rnn: nn.Module, layer: nn.Module, lengths: tuple[int, ...],
                        seed: int = 0) -> pd.DataFrame:
    """Per-length numbers behind ``comparison_table``.

    Args:
        rnn, layer: as in ``comparison_table``.
        lengths: sequence lengths.
        seed: seeds the inputs.

    Returns:
        DataFrame indexed by "n" with two-level columns (quantity, model): quantities "depth"
        (longest autograd path token 1 -> output n), "matrix products" (GEMM kernels per
        forward), "median GEMM FLOPs" (the size of a typical product), "grad norm" (``first_token_gradient_norm``) and
        "parameters"; models "RNN" and "Transformer".
    """
    lengths = check_sizes("lengths", lengths)
    columns: dict[tuple[str, str], list] = {}
    for name, module in check_sequence_models({"RNN": rnn, "Transformer": layer}).items():
        for n in lengths:
            x = torch.randn(1, n, module.d_model, generator=torch.Generator().manual_seed(seed))  # (1, T, D)
            gemms = count_matmuls(module, x)
            values = {
                "depth": dependency_path(module, n, torch.Generator().manual_seed(seed)).longest,
                "matrix products": len(gemms),
                "median GEMM FLOPs": int(statistics.median_low([g.flops for g in gemms])),
                "grad norm": first_token_gradient_norm(module, n, torch.Generator().manual_seed(seed)),
                "parameters": count_parameters(module),
            }
            for key, value in values.items():
                columns.setdefault((key, name), []).append(value)
    order = sorted(columns, key=lambda key: list(dict.fromkeys(k for k, _ in columns)).index(key[0]))
    frame = pd.DataFrame({key: columns[key] for key in order}, index=pd.Index(lengths, name="n"))
    frame.columns = pd.MultiIndex.from_tuples(order)
    return frame


@torch.no_grad()
def sees_future(model: Transformer, stack: str, length: int = 6, seed: int = 0) -> bool:
    """Measure whether position 0's output of ``stack`` changes when the *last* input token changes.

    The encoder attends in both directions, so changing the last source token moves every output;
    the decoder's causal mask makes its first output blind to later tokens.

    Args:
        model: the encoder-decoder (evaluated in eval mode, restored afterwards).
        stack: "encoder" or "decoder".
        length: sequence length of the probe.
        seed: seeds the random probe tokens.

    Returns:
        True if position 0 depends on position ``length - 1``.
    """
    check_instance("model", model, Transformer, "transformer_course.nn.model.Transformer")
    check_choice("stack", stack, ("encoder", "decoder"))
    length = check_int("length", length, minimum=2)
    generator = torch.Generator().manual_seed(check_int("seed", seed, minimum=0))
    vocab = model.src_embed.num_embeddings if stack == "encoder" else model.tgt_embed.num_embeddings
    tokens = torch.randint(0, vocab, (1, length), generator=generator)  # (1, L)
    changed = tokens.clone()
    changed[0, -1] = (tokens[0, -1] + 1) % vocab
    was_training = model.training
    model.eval()
    try:
        if stack == "encoder":
            before, after = model.encode(tokens), model.encode(changed)  # (1, L, D) each
        else:
            memory = model.encode(torch.randint(0, model.src_embed.num_embeddings, (1, length), generator=generator))
            before, after = model.decode(tokens, memory), model.decode(changed, memory)  # (1, L, V) each
    finally:
        model.train(was_training)
    return not torch.allclose(before[0, 0], after[0, 0], atol=1e-6, rtol=0.0)


def position_jacobian_norms(fn: Callable[[torch.Tensor], torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
    """||d out_i / d x_j||_F for every pair of positions: which outputs depend on which inputs.

    A token-wise map (the FFN) gives a diagonal matrix: output i depends on input i alone. Any
    map that mixes positions (attention, a convolution over the sequence, a norm over the
    sequence axis) puts non-zero entries off the diagonal.

    Args:
        fn: maps a (T, D) tensor to a (T, D') tensor.
        tokens: (T, D) floating input at which the Jacobian is taken.

    Returns:
        (T, T) tensor: row i output position, column j input position.

    Raises:
        TypeError, ValueError: if ``tokens`` is not a 2-D floating tensor or ``fn`` changes the length.
    """
    check_tensor("tokens", tokens, ndim=2, floating=True)
    out = fn(tokens)
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.shape[0] != tokens.shape[0]:
        raise ValueError(f"fn must map (T, D) to (T, D') with T = {tokens.shape[0]}, "
                         f"got {tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__}")
    jacobian = torch.autograd.functional.jacobian(fn, tokens, vectorize=True)  # (T, D', T, D)
    return jacobian.pow(2).sum(dim=(1, 3)).sqrt()  # (T, T)
