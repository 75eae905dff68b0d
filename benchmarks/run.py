"""Benchmarks: the package's attention against what a reader would otherwise use.

    python benchmarks/run.py            # the full run (minutes); writes benchmarks/results/<device>.csv
    python benchmarks/run.py --quick    # tiny sizes, seconds: checks correctness and the table only

Every timing is the median of repeated calls after warm-up, and every comparison is a ratio of
implementations timed side by side in the same run on the same inputs. Peak memory is measured in
a fresh subprocess per (implementation, size): the growth of the process's peak resident set on
CPU, ``torch.cuda.max_memory_allocated`` on a GPU. The device is the best available one (CUDA if
present, else CPU).

Benchmarks:
* sliding window (one head, d_head 64, float32): the package's banded attention vs dense
  ``F.scaled_dot_product_attention`` with a band mask vs compiled FlexAttention with a
  ``create_block_mask`` band (its first-call compile time reported separately);
* dilated attention: the package's regrouped implementation vs dense masked SDPA;
* ``MultiHeadAttention`` forward + backward vs ``nn.MultiheadAttention`` at (B=8, T=512, d=512, h=8),
  the fused default path and the hand-written teaching path.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import pandas as pd
import torch
import torch.nn.functional as F

from transformer_course.measure.timing import median_times
from transformer_course.nn.attention import MultiHeadAttention
from transformer_course.nn.interop import to_torch_multihead_attention
from transformer_course.nn.masks import dilated_mask, sliding_window_mask
from transformer_course.nn.sparse_attention import dilated_attention, sliding_window_attention

RESULTS = Path(__file__).resolve().parent / "results"
IMPLEMENTATIONS = {
    "sliding_window": ("package banded", "dense SDPA + mask", "compiled FlexAttention"),
    "dilated": ("package dilated", "dense SDPA + mask"),
}


def device_name(device: torch.device) -> str:
    """A short description of the device the benchmark ran on."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{platform.processor() or platform.machine()} CPU, {torch.get_num_threads()} threads"


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    """Median seconds of ``fn()`` (``torch.utils.benchmark`` waits for the device to finish each call)."""
    return median_times({"call": fn}, repeats=repeats)["call"]


def _qkv(n: int, d_head: int, device: torch.device, seed: int = 0) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, 1, n, d_head, generator=generator).to(device) for _ in range(3))  # (1, 1, n, Dh)


def attention_impls(kind: str, n: int, param: int, device: torch.device,
                    names: list[str]) -> dict[str, Callable[..., torch.Tensor]]:
    """The implementations ``names`` of ``kind`` ("sliding_window" or "dilated") at size n.

    Each is built only when asked for, so that a dense implementation's (n, n) mask never counts
    against another implementation's memory.
    """
    if kind not in IMPLEMENTATIONS:
        raise ValueError(f"kind must be one of {tuple(IMPLEMENTATIONS)}, got {kind!r}")
    impls: dict[str, Callable[..., torch.Tensor]] = {}
    for name in names:
        if name not in IMPLEMENTATIONS[kind]:
            raise ValueError(f"implementation must be one of {IMPLEMENTATIONS[kind]}, got {name!r}")
        if name == "package banded":
            impls[name] = lambda q, k, v: sliding_window_attention(q, k, v, param)
        elif name == "package dilated":
            impls[name] = lambda q, k, v: dilated_attention(q, k, v, param)
        elif name == "dense SDPA + mask":
            make_mask = sliding_window_mask if kind == "sliding_window" else dilated_mask
            mask = make_mask(n, param, device=device)  # (n, n) bool
            impls[name] = lambda q, k, v, mask=mask: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:  # compiled FlexAttention with a band block mask
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention

            half = param // 2
            block_mask = create_block_mask(lambda b, h, i, j: (i - j).abs() <= half, 1, 1, n, n,
                                           device=device.type)
            compiled = torch.compile(flex_attention, dynamic=False)
            impls[name] = lambda q, k, v: compiled(q, k, v, block_mask=block_mask)
    return impls


def bench_attention(kind: str, n: int, param: int, device: torch.device, repeats: int,
                    with_flex: bool) -> list[dict]:
    """Time every implementation of ``kind`` at size n side by side; check they agree."""
    q, k, v = _qkv(n, 64, device)
    names = [name for name in IMPLEMENTATIONS[kind] if with_flex or "Flex" not in name]
    impls = attention_impls(kind, n, param, device, names)
    rows, reference = [], None
    with torch.no_grad():
        for name, fn in impls.items():
            compile_seconds = None
            if "Flex" in name:
                start = time.perf_counter()
                fn(q, k, v)
                synchronize(device)
                compile_seconds = time.perf_counter() - start
            out = fn(q, k, v)
            if reference is None:
                reference = out
            error = float((out - reference).abs().max())
            seconds = median_seconds(lambda: fn(q, k, v), repeats)
            rows.append({"benchmark": kind, "implementation": name, "n": n, "param": param,
                         "median_ms": 1000 * seconds, "max_abs_error": error,
                         "first_call_compile_s": compile_seconds})
    return rows


def bench_mha(device: torch.device, repeats: int, batch: int, t: int, d: int, heads: int) -> list[dict]:
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
    rows = []
    for name, call in calls.items():
        error = errors[name]
        seconds = median_seconds(lambda: step(call), repeats)
        rows.append({"benchmark": "mha_forward_backward", "implementation": name, "n": t,
                     "param": heads, "median_ms": 1000 * seconds, "max_abs_error": error,
                     "first_call_compile_s": None})
    ours.fused = True
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


def _peak_memory_worker(kind: str, implementation: str, n: int, param: int) -> None:
    """Run one implementation once in this (fresh) process and print its peak memory growth in MB.

    The measured region includes building what the implementation needs (the dense n x n bool mask
    counts against dense SDPA); FlexAttention is compiled and warmed up first, so its block mask
    and compilation are outside the region (its steady-state call is measured).
    """
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    q, k, v = _qkv(n, 64, device)
    flex = "Flex" in implementation

    def current() -> int:
        if device.type == "cuda":
            return torch.cuda.max_memory_allocated(device)
        return _resident_bytes("VmHWM")

    with torch.no_grad():
        if flex:
            fn = attention_impls(kind, n, param, device, [implementation])[implementation]
            fn(q, k, v)
        synchronize(device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            before = torch.cuda.memory_allocated(device)
        else:
            _reset_peak_resident()
            before = _resident_bytes("VmRSS")
        if not flex:
            fn = attention_impls(kind, n, param, device, [implementation])[implementation]
        fn(q, k, v)
        synchronize(device)
        peak = current() - before
    print(json.dumps({"peak_mb": max(peak, 0) / 2**20}))


def peak_memory_mb(kind: str, implementation: str, n: int, param: int) -> float:
    """Peak extra memory of one call, measured in a fresh subprocess."""
    result = subprocess.run(
        [sys.executable, __file__, "--memory-worker", kind, implementation, str(n), str(param)],
        capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])["peak_mb"]


def run(quick: bool, device: torch.device) -> pd.DataFrame:
    """All benchmarks; ``quick`` uses tiny sizes and no compilation."""
    rows: list[dict] = []
    if quick:
        sizes, window, dilation, repeats, with_flex = [256], 32, 4, 2, False
        memory_sizes: list[int] = []
        mha_shape = (2, 64, 64, 4)
    else:
        sizes, window, dilation, repeats, with_flex = [16384], 512, 8, 5, True
        memory_sizes = [4096, 8192, 16384, 32768]
        mha_shape = (8, 512, 512, 8)
    for n in sizes:
        rows += bench_attention("sliding_window", n, window, device, repeats, with_flex)
        rows += bench_attention("dilated", n, dilation, device, repeats, with_flex=False)
    rows += bench_mha(device, repeats, *mha_shape)
    frame = pd.DataFrame(rows)
    memory_rows = []
    for kind, param, names in (("sliding_window", window, ["package banded", "dense SDPA + mask"]
                                + (["compiled FlexAttention"] if with_flex else [])),
                               ("dilated", dilation, ["package dilated", "dense SDPA + mask"])):
        for n in memory_sizes:
            for name in names:
                memory_rows.append({"benchmark": kind, "implementation": name, "n": n, "param": param,
                                    "peak_memory_mb": peak_memory_mb(kind, name, n, param)})
    if memory_rows:
        memory = pd.DataFrame(memory_rows)
        frame = frame.merge(memory, on=["benchmark", "implementation", "n", "param"], how="outer")
    else:
        frame["peak_memory_mb"] = float("nan")
    reference = {"sliding_window": "dense SDPA + mask", "dilated": "dense SDPA + mask",
                 "mha_forward_backward": "nn.MultiheadAttention"}
    frame["time_vs_reference"] = [
        row.median_ms / frame.loc[(frame.benchmark == row.benchmark) & (frame.n == row.n)
                                  & (frame.implementation == reference[row.benchmark]), "median_ms"].iloc[0]
        if pd.notna(row.median_ms) else float("nan")
        for row in frame.itertuples()]
    frame.insert(0, "device", device_name(device))
    return frame


def _markdown_table(frame: pd.DataFrame) -> str:
    def cell(value: object) -> str:
        if isinstance(value, float):
            return "" if pd.isna(value) else f"{value:.3g}"
        return str(value)

    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def target_summary(frame: pd.DataFrame) -> list[str]:
    """The issue's targets, each with the measured ratio and whether it is met."""
    def ms(benchmark: str, implementation: str) -> float:
        rows = frame[(frame.benchmark == benchmark) & (frame.implementation == implementation)
                     & frame.median_ms.notna()]
        return float(rows.median_ms.iloc[0]) if len(rows) else float("nan")

    lines = []
    banded, dense = ms("sliding_window", "package banded"), ms("sliding_window", "dense SDPA + mask")
    flex = ms("sliding_window", "compiled FlexAttention")
    lines.append(f"sliding window: banded speed-up over dense masked SDPA {dense / banded:.1f}x "
                 f"(target >= 10x: {'met' if dense / banded >= 10 else 'NOT met'})")
    if flex == flex:  # not NaN
        lines.append(f"sliding window: banded takes {banded / flex:.2f}x the time of compiled FlexAttention "
                     f"(target <= 1x: {'met' if banded <= flex else 'NOT met'})")
    dilated, dense_d = ms("dilated", "package dilated"), ms("dilated", "dense SDPA + mask")
    lines.append(f"dilated: speed-up over dense masked SDPA {dense_d / dilated:.1f}x")
    ours, ref = ms("mha_forward_backward", "package MHA (fused, default)"), ms("mha_forward_backward",
                                                                           "nn.MultiheadAttention")
    lines.append(f"MHA forward+backward: {ours / ref:.2f}x the time of nn.MultiheadAttention "
                 f"(target <= 1.1x: {'met' if ours <= 1.1 * ref else 'NOT met'})")
    return lines


def write_markdown(frame: pd.DataFrame, machine: dict, path: Path) -> None:
    """The results as a markdown fragment for the book's benchmark page."""
    timing = frame[frame.median_ms.notna()].drop(columns=["peak_memory_mb"])
    memory = frame[frame.peak_memory_mb.notna()][["benchmark", "implementation", "n", "param", "peak_memory_mb"]]
    parts = [f"**Machine:** {machine['device']}; {machine['cpu_count']} CPU cores; torch {machine['torch']}; "
             f"Python {machine['python']}; run on {machine['date']}.", "",
             "**Targets:**", ""] + [f"- {line}" for line in target_summary(frame)] + [
             "", "**Median times** (ms; `time_vs_reference` < 1 is faster than the reference):", "",
             _markdown_table(timing)]
    if len(memory):
        parts += ["", "**Peak memory of one call** (MiB):", "", _markdown_table(memory)]
    path.write_text("\n".join(parts) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Benchmarks of the transformer_course package.")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, no compilation (for the tests)")
    parser.add_argument("--out", type=Path, default=None, help="CSV path (default benchmarks/results/<device>.csv)")
    parser.add_argument("--memory-worker", nargs=4, metavar=("KIND", "IMPL", "N", "PARAM"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_worker:
        kind, implementation, n, param = args.memory_worker
        _peak_memory_worker(kind, implementation, int(n), int(param))
        return 0
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    # A fresh compile cache, so FlexAttention's reported first-call time is a cold compile.
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor-"))
    frame = run(args.quick, device)
    out = args.out or RESULTS / f"{'quick-' if args.quick else ''}{device.type}.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out, index=False, float_format="%.4g")
    machine = {"device": device_name(device), "torch": torch.__version__, "python": platform.python_version(),
               "cpu_count": os.cpu_count(), "date": time.strftime("%Y-%m-%d")}
    out.with_suffix(".json").write_text(json.dumps(machine, indent=2) + "\n")
    write_markdown(frame, machine, out.with_suffix(".md"))
    with pd.option_context("display.width", 160, "display.max_columns", 20):
        print(frame.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    print(f"\nwritten: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
