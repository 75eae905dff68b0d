"""The benchmark script runs (quick mode) and its implementations agree; timings are never asserted."""

import importlib.util
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("benchmarks_run", ROOT / "benchmarks" / "run.py")
benchmarks_run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(benchmarks_run)


def test_quick_benchmark_produces_a_correct_table(tmp_path):
    out = tmp_path / "quick.csv"
    assert benchmarks_run.main(["--quick", "--out", str(out)]) == 0
    import pandas as pd

    frame = pd.read_csv(out)
    assert set(frame.benchmark) == {"sliding_window", "dilated", "mha_forward_backward"}
    assert {"package banded", "package dilated", "package MHA (fused, default)",
            "package MHA (hand-written)", "nn.MultiheadAttention"} <= set(frame.implementation)
    assert (frame.max_abs_error < 1e-4).all(), frame[["implementation", "max_abs_error"]]
    assert (frame.median_ms > 0).all()
    reference = frame[frame.implementation.isin(["dense SDPA + mask", "nn.MultiheadAttention"])]
    assert (reference.time_vs_reference == 1).all()
    assert out.with_suffix(".json").exists()


@pytest.mark.slow
def test_memory_worker_sees_the_dense_mask():
    # The dense approach holds at least its (n, n) bool mask: 16 MiB at n = 4096.
    dense = benchmarks_run.peak_memory_mb("sliding_window", "dense SDPA + mask", 4096, 64)
    banded = benchmarks_run.peak_memory_mb("sliding_window", "package banded", 4096, 64)
    assert dense >= 16
    assert banded < dense


def test_median_seconds_is_positive():
    assert benchmarks_run.median_seconds(lambda: torch.ones(3).sum(), repeats=3) > 0
