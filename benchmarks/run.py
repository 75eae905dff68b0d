"""Benchmarks: the package's attention against what a reader would otherwise use.

    python benchmarks/run.py            # the full run (minutes); writes benchmarks/results/<device>.{csv,json,md}
    python benchmarks/run.py --quick    # tiny sizes, seconds: checks correctness and the table only

Every comparison is a ratio of implementations timed side by side, in the same run, on the same
inputs, in interleaved rounds (one call of each implementation per round, so that a busy moment
of a shared machine slows them all); the tables give the median over the rounds and the range.
On the CPU each call is timed with ``torch.utils.benchmark.Timer`` at the process's thread count,
on a GPU with CUDA events. Peak memory is measured for every implementation and case in a fresh
subprocess: the growth of the process's peak resident set on the CPU,
``torch.cuda.max_memory_allocated`` on a GPU. The device is the best available one (CUDA if
present, else CPU).

Benchmarks (head width 64):
* sliding window (w = 512): the package's ``sliding_window_attention`` (its default path: the fused
  kernel on the CPU, FlexAttention on CUDA) and its readable blocked path, against dense
  ``F.scaled_dot_product_attention`` with a band mask and compiled FlexAttention with a
  ``create_block_mask`` band (its first-call compile time reported separately). CPU: n = 16,384,
  1 and 8 heads, float32. CUDA: also bfloat16 and n = 65,536.
* dilated attention (d = 8): the package's regrouped ``dilated_attention`` against dense masked SDPA.
* dilated sliding window (w = 512, d = 4; CUDA only): the package against compiled FlexAttention.
* ``MultiHeadAttention`` forward + backward vs ``nn.MultiheadAttention`` at (B=8, T=512, d=512, h=8),
  the fused default path and the hand-written teaching path.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import pandas as pd
import torch
import torch.nn.functional as F
from torch.utils import benchmark

from transformer_course.nn.attention import MultiHeadAttention
from transformer_course.nn.interop import to_torch_multihead_attention
from transformer_course.nn.masks import dilated_mask, dilated_sliding_window_mask, sliding_window_mask
from transformer_course.nn.sparse_attention import (
    dilated_attention,
    dilated_sliding_window_attention,
    sliding_window_attention,
)

RESULTS = Path(__file__).resolve().parent / "results"
D_HEAD = 64
PACKAGE = {"sliding_window": "package sliding_window_attention", "dilated": "package dilated_attention",
           "dilated_sliding_window": "package dilated_sliding_window_attention"}
IMPLEMENTATIONS = {
    "sliding_window": (PACKAGE["sliding_window"], "package blocked (readable)", "dense SDPA + mask",
                       "compiled FlexAttention"),
    "dilated": (PACKAGE["dilated"], "dense SDPA + mask"),
    "dilated_sliding_window": (PACKAGE["dilated_sliding_window"], "dense SDPA + mask", "compiled FlexAttention"),
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class Case:
    """One attention benchmark: the pattern ``kind`` at length n with ``heads`` heads of width 64.

    ``window`` and ``dilation`` are the pattern's parameters (None where it has none).
    """

    kind: str
    n: int
    heads: int
    dtype: str = "float32"
    window: int | None = None
    dilation: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in IMPLEMENTATIONS:
            raise ValueError(f"kind must be one of {tuple(IMPLEMENTATIONS)}, got {self.kind!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {tuple(DTYPES)}, got {self.dtype!r}")

    @property
    def param(self) -> str:
        return ", ".join(f"{name} {value}" for name, value in (("w", self.window), ("d", self.dilation)) if value)


def cases(device: torch.device, quick: bool) -> list[Case]:
    """The attention cases of a run: what readers run on this kind of device."""
    if quick:
        return [Case("sliding_window", 256, 1, window=32), Case("sliding_window", 256, 2, window=32),
                Case("dilated", 256, 1, dilation=4), Case("dilated_sliding_window", 256, 2, window=32, dilation=4)]
    if device.type == "cuda":
        return ([Case("sliding_window", n, 8, dtype, window=512)
                 for dtype in ("float32", "bfloat16") for n in (16_384, 65_536)]
                + [Case("sliding_window", 16_384, 1, window=512)]
                + [Case("dilated_sliding_window", n, 8, dtype, window=512, dilation=4)
                   for dtype in ("float32", "bfloat16") for n in (16_384, 65_536)]
                + [Case("dilated", 16_384, 8, dilation=8)])
    return [Case("sliding_window", 16_384, 1, window=512), Case("sliding_window", 16_384, 8, window=512),
            Case("dilated", 16_384, 1, dilation=8)]


def device_name(device: torch.device) -> str:
    """A short description of the device the benchmark ran on."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                 if line.startswith("model name")]
        model = names[0] if names else model
    capability = torch.backends.cpu.get_cpu_capability()
    return f"{model} CPU ({capability} kernels), {torch.get_num_threads()} threads"


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved_seconds(calls: dict[str, Callable[[], object]], device: torch.device, rounds: int,
                        warmup: int = 1) -> dict[str, list[float]]:
    """Seconds of each call in each of ``rounds`` rounds (one call of each per round), after warm-up.

    CPU: ``torch.utils.benchmark.Timer`` at the current thread count (the Timer's default is one
    thread). CUDA: CUDA events around the call.
    """
    for _ in range(warmup):
        for call in calls.values():
            call()
            synchronize(device)
    timers = {name: benchmark.Timer(stmt="call()", globals={"call": call}, num_threads=torch.get_num_threads())
              for name, call in calls.items()}
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            if device.type == "cuda":
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                call()
                stop.record()
                torch.cuda.synchronize(device)
                times[name].append(start.elapsed_time(stop) / 1000)
            else:
                times[name].append(timers[name].timeit(number=1).median)
    return times


def median_seconds(fn: Callable[[], object], repeats: int, device: torch.device | None = None,
                   warmup: int = 1) -> float:
    """Median seconds of ``fn()`` over ``repeats`` calls (see :func:`interleaved_seconds`)."""
    return statistics.median(interleaved_seconds({"fn": fn}, device or torch.device("cpu"), repeats, warmup)["fn"])


def _qkv(case: Case, device: torch.device, seed: int = 0) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    shape = (1, case.heads, case.n, D_HEAD)  # (B, H, T, Dh)
    return tuple(torch.randn(*shape, generator=generator).to(device, DTYPES[case.dtype]) for _ in range(3))


def _mask_mod(case: Case) -> Callable:
    """FlexAttention's mask_mod for the case's pattern (True = may attend)."""
    half, d = (case.window or 0) // 2, case.dilation or 1

    def band(b, h, i, j):
        return (i - j).abs() <= half

    def dilated_band(b, h, i, j):
        return ((i - j).remainder(d) == 0) & ((i - j).abs() <= d * half)

    return band if case.kind == "sliding_window" else dilated_band


def attention_impls(case: Case, device: torch.device, names: list[str]) -> dict[str, Callable[..., torch.Tensor]]:
    """The implementations ``names`` of ``case``, each a callable (q, k, v) -> out.

    Each is built only when asked for, so that a dense implementation's (n, n) mask never counts
    against another implementation's memory.
    """
    impls: dict[str, Callable[..., torch.Tensor]] = {}
    for name in names:
        if name not in IMPLEMENTATIONS[case.kind]:
            raise ValueError(f"implementation must be one of {IMPLEMENTATIONS[case.kind]}, got {name!r}")
        if name == PACKAGE["sliding_window"]:
            impls[name] = lambda q, k, v: sliding_window_attention(q, k, v, case.window)
        elif name == "package blocked (readable)":
            impls[name] = lambda q, k, v: sliding_window_attention(q, k, v, case.window, implementation="blocked")
        elif name == PACKAGE["dilated"]:
            impls[name] = lambda q, k, v: dilated_attention(q, k, v, case.dilation)
        elif name == PACKAGE["dilated_sliding_window"]:
            impls[name] = lambda q, k, v: dilated_sliding_window_attention(q, k, v, case.window, case.dilation)
        elif name == "dense SDPA + mask":
            if case.kind == "sliding_window":
                mask = sliding_window_mask(case.n, case.window, device=device)  # (n, n) bool
            elif case.kind == "dilated":
                mask = dilated_mask(case.n, case.dilation, device=device)  # (n, n) bool
            else:
                mask = dilated_sliding_window_mask(case.n, case.window, case.dilation, device=device)  # (n, n)
            impls[name] = lambda q, k, v, mask=mask: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:  # compiled FlexAttention with a block mask of the pattern
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention

            block_mask = create_block_mask(_mask_mod(case), 1, 1, case.n, case.n, device=device.type)
            compiled = torch.compile(flex_attention, dynamic=False)
            impls[name] = lambda q, k, v: compiled(q, k, v, block_mask=block_mask)
    return impls


def _tolerance(case: Case) -> float:
    return 2e-2 if case.dtype == "bfloat16" else 1e-4


def bench_attention(case: Case, device: torch.device, rounds: int, with_flex: bool) -> list[dict]:
    """Time every implementation of ``case`` side by side in interleaved rounds; check they agree."""
    q, k, v = _qkv(case, device)
    names = [name for name in IMPLEMENTATIONS[case.kind] if with_flex or "Flex" not in name]
    impls = attention_impls(case, device, names)
    calls, compile_seconds, errors, reference = {}, {}, {}, None
    with torch.no_grad():
        for name, fn in impls.items():
            start = time.perf_counter()
            out = fn(q, k, v)  # the first call: compilation, for FlexAttention
            synchronize(device)
            compile_seconds[name] = time.perf_counter() - start if "Flex" in name else None
            reference = out if reference is None else reference
            errors[name] = float((out.float() - reference.float()).abs().max())
            calls[name] = lambda fn=fn: fn(q, k, v)
        times = interleaved_seconds(calls, device, rounds)
    flex = times.get("compiled FlexAttention")
    rows = []
    for name in impls:
        ms = [1000 * s for s in times[name]]
        paired = statistics.median(a / b for a, b in zip(times[name], flex)) if flex else float("nan")
        rows.append({"benchmark": case.kind, "implementation": name, "n": case.n, "heads": case.heads,
                     "dtype": case.dtype, "param": case.param, "median_ms": statistics.median(ms),
                     "min_ms": min(ms), "max_ms": max(ms), "rounds": len(ms), "paired_vs_flex": paired,
                     "max_abs_error": errors[name], "error_ok": errors[name] <= _tolerance(case),
                     "first_call_compile_s": compile_seconds[name]})
    return rows


def bench_mha(device: torch.device, rounds: int, batch: int, t: int, d: int, heads: int) -> list[dict]:
    """Forward + backward of our MultiHeadAttention (fused and hand-written) vs nn.MultiheadAttention."""
    torch.manual_seed(0)
    ours = MultiHeadAttention(d, heads).to(device)
    ref = to_torch_multihead_attention(ours).train()  # same weights; training mode, as ours
    x = torch.randn(batch, t, d, device=device, requires_grad=True)

    def step(module_call):
        x.grad = None
        module_call().sum().backward()

    def ours_call(fused):
        def call():
            ours.fused = fused
            return ours(x, x, x)
        return call

    calls = {
        "nn.MultiheadAttention": lambda: ref(x, x, x, need_weights=False)[0],
        "package MHA (fused, default)": ours_call(True),
        "package MHA (hand-written)": ours_call(False),
    }
    with torch.no_grad():
        expected = calls["nn.MultiheadAttention"]()
        errors = {name: float((call() - expected).abs().max()) for name, call in calls.items()}
    times = interleaved_seconds({name: (lambda call=call: step(call)) for name, call in calls.items()}, device, rounds)
    ours.fused = True
    rows = []
    for name in calls:
        ms = [1000 * s for s in times[name]]
        rows.append({"benchmark": "mha_forward_backward", "implementation": name, "n": t, "heads": heads,
                     "dtype": "float32", "param": f"B {batch}, d {d}", "median_ms": statistics.median(ms),
                     "min_ms": min(ms), "max_ms": max(ms), "rounds": len(ms), "paired_vs_flex": float("nan"),
                     "max_abs_error": errors[name],
                     "error_ok": errors[name] <= 1e-4, "first_call_compile_s": None})
    return rows


def _resident_bytes(field: str) -> int:
    """VmRSS (resident now) or VmHWM (peak resident) of this process, from /proc/self/status.

    ``getrusage``'s ru_maxrss is not usable here: a child started by a large parent inherits the
    parent's maximum, so the child's own growth would be hidden.
    """
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not found in /proc/self/status")


def _reset_peak_resident() -> None:
    """Reset VmHWM to the current resident size (Linux: write 5 to /proc/self/clear_refs)."""
    Path("/proc/self/clear_refs").write_text("5")


def _peak_memory_worker(case: Case, implementation: str) -> None:
    """Run one implementation once in this (fresh) process and print its peak memory growth in MiB.

    The measured region includes building what the implementation needs (the dense n x n bool mask
    counts against dense SDPA); FlexAttention is compiled and warmed up first, so its block mask
    and compilation are outside the region (its steady-state call is measured). The package's own
    caches (band patterns, FlexAttention block masks) are warm too: a model calls it once per layer.
    """
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    q, k, v = _qkv(case, device)
    warm = "Flex" in implementation or implementation.startswith("package")

    def current() -> int:
        if device.type == "cuda":
            return torch.cuda.max_memory_allocated(device)
        return _resident_bytes("VmHWM")

    with torch.no_grad():
        if warm:
            fn = attention_impls(case, device, [implementation])[implementation]
            fn(q, k, v)
        synchronize(device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            before = torch.cuda.memory_allocated(device)
        else:
            _reset_peak_resident()
            before = _resident_bytes("VmRSS")
        if not warm:
            fn = attention_impls(case, device, [implementation])[implementation]
        fn(q, k, v)
        synchronize(device)
        peak = current() - before
    print(json.dumps({"peak_mb": max(peak, 0) / 2**20}))


def peak_memory_mb(case: Case, implementation: str) -> float:
    """Peak extra memory of one call, measured in a fresh subprocess."""
    result = subprocess.run(
        [sys.executable, __file__, "--memory-worker", json.dumps(asdict(case)), implementation],
        capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])["peak_mb"]


def run(quick: bool, device: torch.device) -> pd.DataFrame:
    """All benchmarks; ``quick`` uses tiny sizes and no compilation."""
    rows: list[dict] = []
    rounds, with_flex = (2, False) if quick else (7, True)
    attention_cases = cases(device, quick)
    for case in attention_cases:
        slow_dense = not quick and device.type == "cpu" and case.heads > 1  # dense SDPA, 8 heads: 12 s a call
        rows += bench_attention(case, device, 3 if slow_dense else rounds, with_flex)
    mha_shape = (2, 64, 64, 4) if quick else (8, 512, 512, 8)
    rows += bench_mha(device, rounds, *mha_shape)
    frame = pd.DataFrame(rows)
    memory_rows = []
    if not quick:
        memory_cases = list(attention_cases)
        if device.type != "cuda":  # how memory grows with n, one head
            memory_cases += [Case("sliding_window", n, 1, window=512) for n in (4096, 8192, 32_768)]
        for case in memory_cases:
            for name in IMPLEMENTATIONS[case.kind]:
                if "Flex" in name and not with_flex:
                    continue
                memory_rows.append({"benchmark": case.kind, "implementation": name, "n": case.n,
                                    "heads": case.heads, "dtype": case.dtype, "param": case.param,
                                    "peak_memory_mb": peak_memory_mb(case, name)})
    keys = ["benchmark", "implementation", "n", "heads", "dtype", "param"]
    if memory_rows:
        frame = frame.merge(pd.DataFrame(memory_rows), on=keys, how="outer")
    else:
        frame["peak_memory_mb"] = float("nan")
    reference = {"sliding_window": "dense SDPA + mask", "dilated": "dense SDPA + mask",
                 "dilated_sliding_window": "dense SDPA + mask", "mha_forward_backward": "nn.MultiheadAttention"}

    def vs(row, column: str, against: dict[str, str]) -> float:
        same = frame[(frame.benchmark == row.benchmark) & (frame.n == row.n) & (frame.heads == row.heads)
                     & (frame.dtype == row.dtype) & (frame.implementation == against.get(row.benchmark, ""))]
        value = getattr(row, column)
        return float(value / same[column].iloc[0]) if len(same) and pd.notna(value) else float("nan")

    frame["time_vs_dense"] = [vs(row, "median_ms", reference) for row in frame.itertuples()]
    flex = {kind: "compiled FlexAttention" for kind in IMPLEMENTATIONS}
    frame["time_vs_flex"] = [vs(row, "median_ms", flex) for row in frame.itertuples()]
    frame["memory_vs_flex"] = [vs(row, "peak_memory_mb", flex) for row in frame.itertuples()]
    frame.insert(0, "device", device_name(device))
    return frame.sort_values(["benchmark", "heads", "dtype", "n", "implementation"], kind="stable")


def _markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table: the first column left-aligned, the numbers right-aligned."""
    lines = ["| " + " | ".join(header) + " |", "|" + "".join("---|" if i == 0 else "--:|" for i in range(len(header)))]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _captioned(caption: str, table: str) -> str:
    """A MyST table directive: the table with a caption the site numbers and renders above it."""
    return f":::{{table}} {caption}\n:align: left\n\n{table}\n:::"


def _fixed(value: float, decimals: int, unit: str = "") -> str:
    """``value`` with fixed decimals and a thousands separator (never scientific notation); '' for NaN."""
    return "" if pd.isna(value) else f"{value:,.{decimals}f}{unit}"


def _error_bound(value: float) -> str:
    """The largest difference from the reference as an order-of-magnitude bound: '< 1e-6', or 'exact'."""
    if pd.isna(value):
        return ""
    return "exact" if value == 0 else f"< 1e{math.floor(math.log10(value)) + 1}"


def _by_case(frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The rows of ``frame`` grouped by case, in the frame's order, each with its label."""
    labels = [case_label(r) for r in frame.itertuples()]
    return [(label, frame[[x == label for x in labels]]) for label in dict.fromkeys(labels)]


def case_label(row) -> str:
    """A short name of a benchmark case: what is computed, at which size, heads and dtype."""
    heads = f"{row.heads} head{'s' if row.heads > 1 else ''}"
    name = {"mha_forward_backward": "MHA fwd+bwd", "sliding_window": "sliding window",
            "dilated_sliding_window": "dilated window", "dilated": "dilated"}.get(row.benchmark, row.benchmark)
    return f"{name}, n = {row.n:,}, {heads}, {row.dtype}, {row.param}"


def target_summary(frame: pd.DataFrame) -> list[str]:
    """The issue's targets, each with the measured ratio and whether it is met."""
    def ms(benchmark: str, implementation: str, heads: int, dtype: str, n: int, column: str = "median_ms") -> float:
        rows = frame[(frame.benchmark == benchmark) & (frame.implementation == implementation)
                     & (frame.heads == heads) & (frame.dtype == dtype) & (frame.n == n) & frame[column].notna()]
        return float(rows[column].iloc[0]) if len(rows) else float("nan")

    def met(ok: bool) -> str:
        return "met" if ok else "NOT met"

    lines = []
    cuda = "CUDA" in " ".join(frame.device.unique()) or "NVIDIA" in " ".join(frame.device.unique())
    for kind in ("sliding_window", "dilated_sliding_window"):
        for (heads, dtype, n), _ in frame[frame.benchmark == kind].groupby(["heads", "dtype", "n"]):
            ours = ms(kind, PACKAGE[kind], heads, dtype, n)
            dense, flex = ms(kind, "dense SDPA + mask", heads, dtype, n), ms(kind, "compiled FlexAttention", heads, dtype, n)
            label = f"{kind.replace('_', ' ')}, {heads} head{'s' if heads > 1 else ''}, {dtype}, n = {n:,}"
            if kind == "sliding_window" and dense == dense:
                lines.append(f"{label}: {dense / ours:.1f}x faster than dense masked SDPA "
                             f"(target >= 10x: {met(dense / ours >= 10)})")
            if flex == flex:  # not NaN
                bound = 1.3 if cuda else 1.0
                paired = ms(kind, PACKAGE[kind], heads, dtype, n, "paired_vs_flex")
                lines.append(f"{label}: {ours / flex:.2f}x the time of compiled FlexAttention "
                             f"(ratio of medians; median of the per-round ratios {paired:.2f}x) "
                             f"(target <= {bound}x: {met(ours <= bound * flex)})")
                mem_ours = ms(kind, PACKAGE[kind], heads, dtype, n, "peak_memory_mb")
                mem_flex = ms(kind, "compiled FlexAttention", heads, dtype, n, "peak_memory_mb")
                if cuda and mem_ours == mem_ours and mem_flex == mem_flex:
                    lines.append(f"{label}: {mem_ours / mem_flex:.2f}x the peak memory of FlexAttention "
                                 f"(target <= 2x: {met(mem_ours <= 2 * mem_flex)})")
    for (heads, dtype, n), _ in frame[frame.benchmark == "dilated"].groupby(["heads", "dtype", "n"]):
        dilated, dense = ms("dilated", PACKAGE["dilated"], heads, dtype, n), ms("dilated", "dense SDPA + mask", heads, dtype, n)
        lines.append(f"dilated, {heads} head{'s' if heads > 1 else ''}, n = {n:,}: {dense / dilated:.1f}x faster "
                     f"than dense masked SDPA (target >= 4x: {met(dense / dilated >= 4)})")
    mha = frame[frame.benchmark == "mha_forward_backward"]
    if len(mha):
        row = mha.iloc[0]
        ours = ms("mha_forward_backward", "package MHA (fused, default)", row.heads, "float32", row.n)
        ref = ms("mha_forward_backward", "nn.MultiheadAttention", row.heads, "float32", row.n)
        lines.append(f"MHA forward+backward: {ours / ref:.2f}x the time of nn.MultiheadAttention "
                     f"(target <= 1.1x: {met(ours <= 1.1 * ref)})")
    return lines


def write_markdown(frame: pd.DataFrame, machine: dict, path: Path) -> None:
    """The results as a markdown fragment for the book's Performance page: narrow tables, fixed decimals.

    The machine, date and PyTorch version head the page once; each table has a caption saying what
    its numbers are. Times are milliseconds with one decimal, ratios two decimals with a '×'.
    """
    timing = frame[frame.median_ms.notna()]
    memory = frame[frame.peak_memory_mb.notna()]
    rounds = sorted({int(r) for r in timing["rounds"].dropna()})
    where = f"{machine['device']}, {machine['date']}"
    parts = [f"**Machine:** {machine['device']}; {machine['cpu_count']} CPU cores; torch {machine['torch']}; "
             f"Python {machine['python']}; run on {machine['date']}; load average at the start "
             f"{machine['load_average']}.", "",
             "**Targets:**", ""] + [f"- {line}" for line in target_summary(frame)]
    parts += ["", f"**Times in milliseconds**, one table per case: the median of {' or '.join(map(str, rounds))} "
              "interleaved rounds, and the fastest and slowest round. *vs reference* divides by dense masked SDPA "
              "(by `nn.MultiheadAttention` for MHA), *vs Flex* by compiled FlexAttention; below 1 is faster. "
              "*error* bounds the largest difference from the reference's output."]
    for label, group in _by_case(timing):
        rows = [[r.implementation, _fixed(r.median_ms, 1), f"{_fixed(r.min_ms, 1)} to {_fixed(r.max_ms, 1)}",
                 _fixed(r.time_vs_dense, 2, "×"), _fixed(r.time_vs_flex, 2, "×"), _error_bound(r.max_abs_error)]
                for r in group.itertuples()]
        parts += ["", _captioned(f"{label}: times (ms); {where}",
                                 _markdown_table(["implementation", "median", "range", "vs reference", "vs Flex",
                                                  "error"], rows))]
    compiles = timing[timing.first_call_compile_s.notna()]
    if len(compiles):
        parts += ["", "Compiled FlexAttention's first call, which compiles it, is not in the tables: "
                  + "; ".join(f"{_fixed(r.first_call_compile_s, 1)} s for {case_label(r)}" for r in compiles.itertuples())
                  + "."]
    if len(memory):
        parts += ["", "**Peak memory of one call, in MiB**, one table per case; *vs Flex* divides by compiled "
                  "FlexAttention's."]
        for label, group in _by_case(memory):
            rows = [[r.implementation, _fixed(r.peak_memory_mb, 1), _fixed(r.memory_vs_flex, 2, "×")]
                    for r in group.itertuples()]
            parts += ["", _captioned(f"{label}: peak memory (MiB); {where}",
                                     _markdown_table(["implementation", "peak", "vs Flex"], rows))]
    path.write_text("\n".join(parts) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Benchmarks of the transformer_course package.")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, no compilation (for the tests)")
    parser.add_argument("--out", type=Path, default=None, help="CSV path (default benchmarks/results/<device>.csv)")
    parser.add_argument("--memory-worker", nargs=2, metavar=("CASE", "IMPL"), help=argparse.SUPPRESS)
    parser.add_argument("--markdown-only", action="store_true",
                        help="re-render the .md page from the recorded .csv and .json at --out, without running")
    args = parser.parse_args(argv)
    if args.markdown_only:
        out = args.out or RESULTS / "cpu.csv"
        write_markdown(pd.read_csv(out), json.loads(out.with_suffix(".json").read_text()), out.with_suffix(".md"))
        return 0
    if args.memory_worker:
        case, implementation = args.memory_worker
        _peak_memory_worker(Case(**json.loads(case)), implementation)
        return 0
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    # A fresh compile cache, so FlexAttention's reported first-call time is a cold compile.
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor-"))
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    frame = run(args.quick, device)
    out = args.out or RESULTS / f"{'quick-' if args.quick else ''}{device.type}.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out, index=False, float_format="%.4g")
    machine = {"device": device_name(device), "torch": torch.__version__, "python": platform.python_version(),
               "cpu_count": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "load_average": load}
    out.with_suffix(".json").write_text(json.dumps(machine, indent=2) + "\n")
    write_markdown(frame, machine, out.with_suffix(".md"))
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(frame.drop(columns=["device"]).to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    print("\n".join(["", *target_summary(frame), f"written: {out}"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
