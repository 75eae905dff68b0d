"""Wall-clock timing for the chapters, on ``torch.utils.benchmark``: medians of interleaved rounds.

Timings on a shared CPU are noisy: report medians, compare ratios measured side by side (the
calls are timed in interleaved rounds, so a burst of load hits them all), never absolute seconds.
``median_times`` is the one timing helper; ``forward_time_table`` and ``time_block_components``
build the chapters' tables on it.

Shape legend: B batch, H heads, T = n length, D = d model width, Dh = D / H, F = d_ff.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

import numpy as np
import pandas as pd
import torch
from torch import nn
from torch.utils.benchmark import Timer

from transformer_course._exhibit import exhibit
from transformer_course._validation import check_int, check_positive_float, check_sequence_models, check_sizes
from .cost import BLOCK_COMPONENTS, block_flops, measure_training_flops


def round_times(fns: Mapping[str, Callable[[], object]], repeats: int = 5, number: int = 1,
                num_threads: int | None = None) -> pd.DataFrame:
    """Seconds per call of each function in each of ``repeats`` interleaved rounds.

    Each round times every function once with ``torch.utils.benchmark.Timer`` (``number`` calls,
    averaged), which warms the call up, runs it with ``num_threads`` intra-op threads and waits for
    a GPU to finish. Rounds interleave the functions, so a slow moment of a shared machine slows
    every contender alike and their ratios stay fair.

    Args:
        fns: name -> function of no arguments.
        repeats: number of rounds.
        number: calls per timing (their mean is one round's value).
        num_threads: PyTorch's intra-op threads while timing (default: the current count).

    Returns:
        DataFrame indexed by "round" (0 .. repeats - 1) with one column of seconds per function.

    Raises:
        TypeError: if ``fns`` is not a non-empty dict of callables.
        ValueError: if ``repeats``, ``number`` or ``num_threads`` is < 1.
    """
    if not isinstance(fns, Mapping) or not fns:
        raise TypeError(f"fns must be a non-empty dict of name -> callable, got {fns!r}")
    for name, fn in fns.items():
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__} for {name!r}")
    repeats = check_int("repeats", repeats, minimum=1)
    number = check_int("number", number, minimum=1)
    num_threads = torch.get_num_threads() if num_threads is None else check_int("num_threads", num_threads, minimum=1)
    timers = {name: Timer(stmt="fn()", globals={"fn": fn}, num_threads=num_threads) for name, fn in fns.items()}
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, timer in timers.items():
            times[name].append(timer.timeit(number).median)
    return pd.DataFrame(times, index=pd.RangeIndex(repeats, name="round"))


def median_times(fns: Mapping[str, Callable[[], object]], repeats: int = 5,
                 num_threads: int | None = None) -> dict[str, float]:
    """Median seconds of one call of each function, over ``repeats`` interleaved rounds (``round_times``).

    Args:
        fns: name -> function of no arguments.
        repeats: number of rounds (timed calls per function).
        num_threads: PyTorch's intra-op threads while timing (default: the current count).

    Returns:
        dict name -> median seconds per call.

    Raises:
        TypeError: if ``fns`` is not a non-empty dict of callables.
        ValueError: if ``repeats`` or ``num_threads`` is < 1.
    """
    rounds = round_times(fns, repeats=repeats, num_threads=num_threads)
    return {name: statistics.median(rounds[name].tolist()) for name in fns}


@contextmanager
def threads(num_threads: int | None) -> Iterator[None]:
    """Run the body with ``torch.set_num_threads(num_threads)``, restoring the previous count.

    ``None`` leaves the count alone. (Timing sets its threads itself; this is for training runs
    that want one thread for bitwise-reproducible results.)
    """
    previous = torch.get_num_threads()
    if num_threads is not None:
        torch.set_num_threads(check_int("num_threads", num_threads, minimum=1))
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@exhibit
def forward_time_table(modules: dict[str, nn.Module], lengths: tuple[int, ...], batch: int = 1,
                       repeats: int = 5, seed: int = 0, num_threads: int | None = None) -> pd.DataFrame:
    """Median forward time (ms, no grad) of each module for each length n, timed interleaved.

    Args:
        modules: name -> module taking (B, T, D) with an int attribute ``d_model``.
        lengths: sequence lengths n.
        batch: batch size B.
        repeats: timed rounds per length.
        seed: seeds the inputs.
        num_threads: PyTorch's intra-op thread count while timing (default: the current count);
            one thread keeps a shared, busy machine from adding thread-synchronization stalls.

    Returns:
        DataFrame indexed by "n" with one column "<name> (ms)" per module.
    """
    check_sequence_models(modules)
    lengths = check_sizes("lengths", lengths)
    batch = check_int("batch", batch, minimum=1)
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for n in lengths:
        calls = {}
        for name, module in modules.items():
            x = torch.randn(batch, n, module.d_model, generator=generator)  # (B, T, D)
            calls[name] = _no_grad_call(module, x)
        medians = median_times(calls, repeats=repeats, num_threads=num_threads)
        rows.append({f"{name} (ms)": 1e3 * seconds for name, seconds in medians.items()})
    return pd.DataFrame(rows, index=pd.Index(lengths, name="n"))


def _no_grad_call(module: nn.Module, x: torch.Tensor) -> Callable[[], object]:
    def call() -> object:
        with torch.no_grad():
            return module(x)
    return call


@exhibit
def time_block_components(n: int, d: int, num_heads: int = 8, expansion: float = 4, batch: int = 1,
                          repeats: int = 5, seed: int = 0, num_threads: int | None = None,
                          statistic: str = "median", number: int = 1, groups: int = 1) -> pd.DataFrame:
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
        repeats: timed rounds.
        seed: seeds the inputs.
        num_threads: as in ``forward_time_table``.
        statistic: "median" or "min" of the rounds: the minimum is the run least disturbed by
            other work on the machine, the usual choice for a micro-benchmark on a shared CPU.
        number: calls per round (averaged).
        groups: the rounds are also split into this many consecutive groups, and the statistic's
            shares computed for each group alone: their extremes show how much the estimate moves
            between repetitions of the whole measurement.

    Returns:
        DataFrame indexed by "component" (``BLOCK_COMPONENTS`` order) with columns "time (ms)"
        (the statistic over all rounds), "time share (%)" (the mean over the groups of each group's
        share; with one group, the share of the statistic's times), "lowest share (%)" and
        "highest share (%)" (the extremes of the share over the groups), "FLOPs", "FLOP share (%)".

    Raises:
        TypeError, ValueError: for invalid sizes or an unknown statistic.
    """
    flops = block_flops(n, d, expansion, num_heads)  # checks n, d, num_heads and that e d is an integer
    if d % num_heads:
        raise ValueError(f"d must be divisible by num_heads, got d={d}, num_heads={num_heads}")
    if statistic not in ("median", "min"):
        raise ValueError(f"statistic must be 'median' or 'min', got {statistic!r}")
    batch = check_int("batch", batch, minimum=1)
    repeats = check_int("repeats", repeats, minimum=1)
    groups = check_int("groups", groups, minimum=1)
    if groups > repeats:
        raise ValueError(f"groups must be <= repeats, got groups={groups}, repeats={repeats}")
    d_ff, d_head = int(expansion * d), d // num_heads
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, n, d, generator=generator)  # (B, T, D)
    projections = [nn.Linear(d, d) for _ in range(4)]
    linear1, linear2 = nn.Linear(d, d_ff), nn.Linear(d_ff, d)
    q, k, v = (torch.randn(batch, num_heads, n, d_head, generator=generator) for _ in range(3))  # (B, H, T, Dh)
    q_scaled = q / math.sqrt(d_head)  # (B, H, T, Dh): scaled once, so the timed call is the product alone
    scores = q_scaled @ k.transpose(-2, -1)  # (B, H, T, T)
    weights = scores.softmax(dim=-1)  # (B, H, T, T)

    def run_projections() -> None:
        for projection in projections:
            projection(x)  # (B, T, D)

    calls = {
        "qkvo_projections": run_projections,
        "scores_qk": lambda: q_scaled @ k.transpose(-2, -1),  # (B, H, T, T): the matrix product only
        "weighted_values_av": lambda: weights @ v,  # (B, H, T, Dh)
        "softmax": lambda: scores.softmax(dim=-1),  # (B, H, T, T)
        "ffn": lambda: linear2(torch.relu(linear1(x))),  # (B, T, D)
    }
    with torch.no_grad():
        rounds = round_times(calls, repeats=repeats, number=number, num_threads=num_threads)
    rounds = rounds[list(BLOCK_COMPONENTS)]
    def reduce(frame: pd.DataFrame) -> pd.Series:
        return frame.min() if statistic == "min" else frame.median()

    seconds = reduce(rounds)
    group_shares = pd.DataFrame([100 * reduce(part) / reduce(part).sum()
                                 for part in (rounds.iloc[rows] for rows in np.array_split(np.arange(repeats), groups))])
    frame = pd.DataFrame({
        "time (ms)": 1e3 * seconds,
        "FLOPs": [batch * flops[c] for c in BLOCK_COMPONENTS],
    }, index=pd.Index(BLOCK_COMPONENTS, name="component"))
    frame.insert(1, "time share (%)", group_shares.mean())  # sums to 100; lies within the groups' range
    frame.insert(2, "lowest share (%)", group_shares.min())
    frame.insert(3, "highest share (%)", group_shares.max())
    frame["FLOP share (%)"] = 100 * frame["FLOPs"] / frame["FLOPs"].sum()
    return frame


@exhibit
def machine_peaks(size: int = 384, copy_megabytes: float = 8, repeats: int = 20,
                  num_threads: int | None = None) -> pd.Series:
    """This machine's measured matrix-product rate and memory bandwidth, for a roofline.

    Matmul FLOP/s: the fastest of ``repeats`` float32 (size x size) @ (size x size) products,
    2 size^3 FLOPs each. It is the rate a matrix product attains here (on ``num_threads`` threads),
    not the processor's specified peak, which a vendor quotes for all cores and vector units at the
    highest clock and which is higher. Bandwidth: the fastest of ``repeats`` copies of a float32
    tensor of ``copy_megabytes`` MB, counting the bytes read and the bytes written; it is the
    bandwidth for data of that size, from whichever level of the memory hierarchy holds it (a
    tensor that fits in a cache is copied faster than one that does not). Both are minimum-time
    measurements, the machine at its least disturbed; short calls (the defaults take about a
    millisecond) are less often interrupted on a busy machine.

    Returns:
        Series with "matmul FLOP/s", "bandwidth (bytes/s)" and "ridge (FLOPs per byte)", their ratio:
        an operation with fewer FLOPs per byte than the ridge is limited by memory, not arithmetic.
    """
    size = check_int("size", size, minimum=1)
    if isinstance(copy_megabytes, bool) or not isinstance(copy_megabytes, (int, float)) or not copy_megabytes > 0:
        raise ValueError(f"copy_megabytes must be a positive number, got {copy_megabytes!r}")
    a, b = torch.randn(size, size), torch.randn(size, size)  # (S, S)
    source = torch.zeros(max(1, int(copy_megabytes * 2 ** 20) // 4))
    target = torch.zeros_like(source)
    rounds = round_times({"matmul": lambda: a @ b, "copy": lambda: target.copy_(source)}, repeats=repeats,
                         num_threads=num_threads)
    matmul = 2 * size ** 3 / rounds["matmul"].min()
    bandwidth = 2 * source.nbytes / rounds["copy"].min()
    return pd.Series({"matmul FLOP/s": matmul, "bandwidth (bytes/s)": bandwidth,
                      "ridge (FLOPs per byte)": matmul / bandwidth})


def training_step_mfu(module: nn.Module, x: torch.Tensor, reference_flops: float, flops: int | None = None,
                      repeats: int = 7, num_threads: int | None = 1) -> pd.Series:
    """Utilisation of one training step of ``module`` on ``x``: achieved model FLOP/s / a reference FLOP/s.

    With the hardware's specified peak as the reference this is Chowdhery et al.'s model FLOPs
    utilisation (MFU). With a measured rate as the reference (``machine_peaks``'s fastest matrix
    product) it is the share of that measured rate, which is higher than the MFU, because the
    measured rate is below the specified peak.

    A training step is the forward pass, the backward pass of the summed output (``x`` requires a
    gradient, as the activations inside a deep model do) and an Adam update (learning rate 0, so
    the weights and every timed step stay the same). Its model FLOPs are the forward and backward
    matrix products counted by ``FlopCounterMode`` (``cost.measure_training_flops``), unless given;
    the optimizer's few FLOPs per weight are not model FLOPs. The time is the fastest of
    ``repeats`` timings by ``torch.utils.benchmark`` (``round_times``), the machine at its least
    disturbed, as ``machine_peaks`` measures its matrix-product rate.

    Args:
        module: the model (trained in float32 on its device as given).
        x: its input, e.g. (B, T, D).
        reference_flops: the FLOP/s to divide by: the specified peak for MFU, or a measured rate
            such as ``machine_peaks(...)["matmul FLOP/s"]``.
        flops: model FLOPs of one step; None counts them with ``FlopCounterMode``.
        repeats: timed steps (each after a warm-up call), the fastest is kept.
        num_threads: PyTorch's intra-op threads while timing (match the reference's).

    Returns:
        Series with "model FLOPs per step", "step time (s)", "achieved FLOP/s", "reference FLOP/s" and
        "utilisation" (achieved / reference).

    Raises:
        TypeError: if ``module`` is not an ``nn.Module`` or ``x`` not a floating tensor.
        ValueError: if ``reference_flops`` or ``flops`` is not positive, or ``repeats`` < 1.

    Chowdhery et al., 2022, "PaLM: Scaling Language Modeling with Pathways", section 4.1 and appendix B.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"x must be a floating torch.Tensor, got {type(x).__name__}")
    reference_flops = check_positive_float("reference_flops", reference_flops)
    if flops is None:
        flops = measure_training_flops(module, x)["total"]
    flops = check_int("flops", flops, minimum=1)
    repeats = check_int("repeats", repeats, minimum=1)
    inputs = x.detach().clone().requires_grad_(True)
    optimizer = torch.optim.Adam(module.parameters(), lr=0.0)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        inputs.grad = None
        module(inputs).sum().backward()
        optimizer.step()

    seconds = float(round_times({"step": step}, repeats=repeats, num_threads=num_threads)["step"].min())
    module.zero_grad(set_to_none=True)
    achieved = flops / seconds
    return pd.Series({"model FLOPs per step": float(flops), "step time (s)": seconds, "achieved FLOP/s": achieved,
                      "reference FLOP/s": reference_flops, "utilisation": achieved / reference_flops})
