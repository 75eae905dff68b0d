"""Wall-clock timing for the chapters: medians of repeats, and one block timed piece by piece.

Timings on a shared CPU are noisy: report medians, compare ratios measured side by side (the
models are timed in interleaved rounds, so a burst of load hits them all), never absolute seconds.

Shape legend: B batch, H heads, T = n length, D = d model width, Dh = D / H, F = d_ff.
"""

from __future__ import annotations

import math
import statistics
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import pandas as pd
import torch
from torch import nn

from transformer_course._validation import check_int, check_positive_float
from .cost import BLOCK_COMPONENTS, block_flops


def median_time(fn: Callable[[], object], repeats: int = 5, warmup: int = 1) -> float:
    """Median wall-clock seconds of ``fn()`` over ``repeats`` calls, after ``warmup`` untimed calls.

    Raises:
        TypeError: if ``fn`` is not callable or a count is not an int.
        ValueError: if ``repeats`` < 1 or ``warmup`` < 0.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    repeats = check_int("repeats", repeats, minimum=1)
    warmup = check_int("warmup", warmup, minimum=0)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def fastest_seconds(calls: Sequence[Callable[[], Any]], repeats: int = 5) -> list[float]:
    """The fastest of ``repeats`` timings of each call, the calls interleaved after one warm-up each.

    Interleaving exposes every call to the same background load, and the minimum is the timing
    least disturbed by it (the convention of :mod:`timeit`).
    """
    for call in calls:
        call()  # warm-up
    best = [math.inf] * len(calls)
    for _ in range(repeats):
        for index, call in enumerate(calls):
            start = time.perf_counter()
            call()
            best[index] = min(best[index], time.perf_counter() - start)
    return best


def interleaved_median_times(fns: dict[str, Callable[[], object]], repeats: int = 5,
                             warmup: int = 1) -> dict[str, float]:
    """Median seconds of each function, timed in rounds (one call of each per round).

    Interleaving makes the ratios fair on a loaded machine: a slow moment slows every contender.

    Returns:
        dict name -> median seconds.
    """
    if not isinstance(fns, dict) or not fns or not all(callable(f) for f in fns.values()):
        raise TypeError("fns must be a non-empty dict of name -> callable")
    repeats = check_int("repeats", repeats, minimum=1)
    warmup = check_int("warmup", warmup, minimum=0)
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def forward_time_table(modules: dict[str, nn.Module], lengths: tuple[int, ...], batch: int = 1,
                       repeats: int = 5, seed: int = 0, num_threads: int | None = None) -> pd.DataFrame:
    """Median forward time (ms, no grad) of each module for each length n, timed interleaved.

    Args:
        modules: name -> module taking (B, T, D) with an int attribute ``d_model``.
        lengths: sequence lengths n.
        batch: batch size B.
        repeats: timed rounds per length.
        seed: seeds the inputs.
        num_threads: if given, PyTorch's intra-op thread count while timing (restored after);
            one thread keeps a shared, busy machine from adding thread-synchronization stalls.

    Returns:
        DataFrame indexed by "n" with one column "<name> (ms)" per module.
    """
    if not isinstance(modules, dict) or not modules:
        raise ValueError(f"modules must be a non-empty dict of name -> module, got {modules!r}")
    for name, module in modules.items():
        if not isinstance(module, nn.Module) or not isinstance(getattr(module, "d_model", None), int):
            raise TypeError(f"modules[{name!r}] must be an nn.Module with an int d_model")
    if not isinstance(lengths, (list, tuple)) or not lengths:
        raise ValueError(f"lengths must be a non-empty list or tuple of ints, got {lengths!r}")
    lengths = tuple(check_int("lengths", n, minimum=1) for n in lengths)
    batch = check_int("batch", batch, minimum=1)
    generator = torch.Generator().manual_seed(seed)
    rows = []
    with threads(num_threads):
        for n in lengths:
            calls = {}
            for name, module in modules.items():
                x = torch.randn(batch, n, module.d_model, generator=generator)  # (B, T, D)
                calls[name] = _no_grad_call(module, x)
            medians = interleaved_median_times(calls, repeats=repeats)
            rows.append({f"{name} (ms)": 1e3 * seconds for name, seconds in medians.items()})
    return pd.DataFrame(rows, index=pd.Index(lengths, name="n"))


@contextmanager
def threads(num_threads: int | None) -> Iterator[None]:
    """Run the body with ``torch.set_num_threads(num_threads)``, restoring the previous count.

    ``None`` leaves the count alone.
    """
    previous = torch.get_num_threads()
    if num_threads is not None:
        torch.set_num_threads(check_int("num_threads", num_threads, minimum=1))
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _no_grad_call(module: nn.Module, x: torch.Tensor) -> Callable[[], object]:
    def call() -> object:
        with torch.no_grad():
            return module(x)
    return call


def time_block_components(n: int, d: int, num_heads: int = 8, expansion: float = 4, batch: int = 1,
                          repeats: int = 5, seed: int = 0, num_threads: int | None = None) -> pd.DataFrame:
    """Wall-clock time of each piece of one Transformer block beside its share of the FLOPs.

    The pieces are run as separate PyTorch calls on random inputs of the right shapes:
    "qkvo_projections" (four (D, D) linear maps), "scores_qk" (Q K^T / sqrt(Dh), all heads),
    "softmax" (over the last axis of the scores), "weighted_values_av" (A V) and "ffn" (two linear
    maps with a ReLU between). Their FLOPs come from ``block_flops`` (softmax: its elementwise
    estimate), so the table shows where the FLOPs are beside where the time goes.

    Args:
        n: sequence length.
        d: model width D; must be divisible by ``num_heads``.
        num_heads: heads H.
        expansion: FFN expansion e (F = e D).
        batch: batch size B (FLOPs are per block and batch, times B).
        repeats: timed rounds (medians reported).
        seed: seeds the inputs.
        num_threads: as in ``forward_time_table``.

    Returns:
        DataFrame indexed by "component" (``BLOCK_COMPONENTS`` order) with columns "time (ms)",
        "time share (%)", "FLOPs", "FLOP share (%)".

    Raises:
        TypeError, ValueError: for invalid sizes.
    """
    n = check_int("n", n, minimum=1)
    d = check_int("d", d, minimum=1)
    num_heads = check_int("num_heads", num_heads, minimum=1)
    if d % num_heads:
        raise ValueError(f"d must be divisible by num_heads, got d={d}, num_heads={num_heads}")
    expansion = check_positive_float("expansion", expansion)
    batch = check_int("batch", batch, minimum=1)
    flops = block_flops(n, d, expansion, num_heads)  # validates d_ff = e d is an integer
    d_ff, d_head = int(expansion * d), d // num_heads
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, n, d, generator=generator)  # (B, T, D)
    projections = [nn.Linear(d, d) for _ in range(4)]
    linear1, linear2 = nn.Linear(d, d_ff), nn.Linear(d_ff, d)
    q, k, v = (torch.randn(batch, num_heads, n, d_head, generator=generator) for _ in range(3))  # (B, H, T, Dh)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)  # (B, H, T, T)
    weights = scores.softmax(dim=-1)  # (B, H, T, T)

    def run_projections() -> None:
        for projection in projections:
            projection(x)  # (B, T, D)

    calls = {
        "qkvo_projections": run_projections,
        "scores_qk": lambda: q @ k.transpose(-2, -1) / math.sqrt(d_head),  # (B, H, T, T)
        "weighted_values_av": lambda: weights @ v,  # (B, H, T, Dh)
        "softmax": lambda: scores.softmax(dim=-1),  # (B, H, T, T)
        "ffn": lambda: linear2(torch.relu(linear1(x))),  # (B, T, D)
    }
    with torch.no_grad(), threads(num_threads):
        seconds = interleaved_median_times(calls, repeats=repeats)
    frame = pd.DataFrame({
        "time (ms)": [1e3 * seconds[c] for c in BLOCK_COMPONENTS],
        "FLOPs": [batch * flops[c] for c in BLOCK_COMPONENTS],
    }, index=pd.Index(BLOCK_COMPONENTS, name="component"))
    frame.insert(1, "time share (%)", 100 * frame["time (ms)"] / frame["time (ms)"].sum())
    frame["FLOP share (%)"] = 100 * frame["FLOPs"] / frame["FLOPs"].sum()
    return frame
