"""The benchmark script runs (quick mode) and its implementations agree; timings are never asserted."""

import importlib.util
import json
import re
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


def _load_script(name: str, path: Path):
    """Import a script of benchmarks/ as a module (it is not in a package)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # run.py's dataclass looks its module up while being defined
    spec.loader.exec_module(module)
    return module


benchmarks_run = _load_script("benchmarks_run", ROOT / "benchmarks" / "run.py")
course_timing = _load_script("course_timing", ROOT / "benchmarks" / "course_timing.py")
Case = benchmarks_run.Case


def test_quick_benchmark_produces_a_correct_table(tmp_path):
    out = tmp_path / "quick.csv"
    assert benchmarks_run.main(["--quick", "--out", str(out)]) == 0
    frame = pd.read_csv(out)
    assert set(frame.benchmark) == {"sliding_window", "dilated", "dilated_sliding_window", "mha_forward_backward"}
    assert {"package sliding_window_attention", "package blocked (readable)", "package dilated_attention",
            "package dilated_sliding_window_attention", "package MHA (fused, default)",
            "package MHA (hand-written)", "nn.MultiheadAttention"} <= set(frame.implementation)
    assert set(frame[frame.benchmark == "sliding_window"].heads) == {1, 2}  # one head and several
    assert (frame.max_abs_error < 1e-4).all() and frame.error_ok.all(), frame[["implementation", "max_abs_error"]]
    assert (frame.median_ms > 0).all() and (frame.min_ms <= frame.median_ms).all() and (frame.median_ms <= frame.max_ms).all()
    reference = frame[frame.implementation.isin(["dense SDPA + mask", "nn.MultiheadAttention"])]
    assert (reference.time_vs_dense == 1).all()
    assert out.with_suffix(".json").exists()
    page = out.with_suffix(".md").read_text()
    assert "**Machine:**" in page and "torch " in page and "**Targets:**" in page
    assert_readable_tables(page, json.loads(out.with_suffix(".json").read_text()))


def assert_readable_tables(page: str, machine: dict) -> None:
    """Narrow tables with captions naming the machine and date; fixed decimals, never 1.5e+03."""
    assert not re.search(r"\d(\.\d+)?e[+-]\d", page.replace("< 1e", "")), "scientific notation in the page"
    captions = re.findall(r"^:::\{table\} (.*)$", page, flags=re.M)
    assert captions and all(machine["device"] in c and machine["date"] in c for c in captions), captions
    headers = [line for line in page.splitlines() if line.startswith("| implementation")]
    assert len(headers) == len(captions) and all(line.count("|") - 1 <= 6 for line in headers), headers


def test_readable_tables_check_can_fail():
    machine = {"device": "CPU", "date": "2026-12-01"}
    with pytest.raises(AssertionError, match="scientific"):
        assert_readable_tables(":::{table} CPU 2026-12-01\n| implementation | ms |\n| x | 1.54e+03 |", machine)


def test_course_timing_page_collapses_the_slowest_cells(tmp_path):
    frame = pd.DataFrame([{"chapter": "dl0027_x", "seconds": 8.83, "budget_s": 60, "within_budget": True,
                           "slowest_cells": json.dumps([{"cell": 28, "seconds": 2.4, "code": "start = `x`"}])}])
    course_timing.write_markdown(frame, tmp_path / "t.md")
    page = (tmp_path / "t.md").read_text()
    table, _, rest = page.partition(":::{dropdown}")
    assert "| dl0027_x | 8.8 | 60 |" in table and "`" not in table  # code only inside the collapsed block
    assert "cell 28, 2.4 s: `start = 'x'`" in rest and rest.rstrip().endswith(":::")
    assert "The ten chapters: 8.8 s (budget 240 s); every page" in page  # no capstone row: no eleven-chapter total


def test_course_timing_gives_the_capstone_its_budget_and_the_eleven_chapters_theirs():
    assert course_timing.budget_seconds("dl0037_capstone_induction_heads") == 120
    assert course_timing.budget_seconds("dl0036_encoder_vs_decoder") == 60
    assert course_timing.budget_seconds("figure_index") == 30
    frame = pd.DataFrame({"chapter": ["dl0027_x", "dl0037_capstone", "intro"], "seconds": [50.0, 80.0, 5.0]})
    line = course_timing.totals_line(frame)
    assert line == ("The ten chapters: 50.0 s (budget 240 s); the 2 chapters with the capstone: 130.0 s "
                    "(budget 360 s); every page: 135.0 s."), line


def test_full_run_cases_cover_what_readers_run():
    cpu = benchmarks_run.cases(torch.device("cpu"), quick=False)
    assert {(c.kind, c.heads) for c in cpu} >= {("sliding_window", 1), ("sliding_window", 8), ("dilated", 1)}
    assert all(c.dtype == "float32" and c.n == 16_384 for c in cpu)
    cuda = benchmarks_run.cases(torch.device("cuda"), quick=False)
    sliding = {(c.n, c.heads, c.dtype) for c in cuda if c.kind == "sliding_window"}
    assert {(n, 8, dtype) for n in (16_384, 65_536) for dtype in ("float32", "bfloat16")} <= sliding
    assert any(c.kind == "dilated_sliding_window" for c in cuda)


def test_case_validates_its_kind_and_dtype():
    with pytest.raises(ValueError, match="kind must be one of"):
        Case("banded", 16, 1)
    with pytest.raises(ValueError, match="dtype must be one of"):
        Case("sliding_window", 16, 1, "float16", window=4)


@pytest.mark.slow
def test_memory_worker_sees_the_dense_mask():
    # The dense approach holds at least its (n, n) bool mask: 16 MiB at n = 4096.
    case = Case("sliding_window", 4096, 1, window=64)
    dense = benchmarks_run.peak_memory_mb(case, "dense SDPA + mask")
    banded = benchmarks_run.peak_memory_mb(case, "package sliding_window_attention")
    assert dense >= 16
    assert banded < dense


def test_median_seconds_is_positive():
    assert benchmarks_run.median_seconds(lambda: torch.ones(3).sum(), repeats=3) > 0


def test_course_timing_reports_each_page_median_round_and_every_round_total(monkeypatch, tmp_path):
    measured = iter([30.0, 10.0, 50.0, 12.0, 40.0, 11.0])  # rounds of (dl0027_x, dl0028_y): a slow first round
    cells = iter(range(6))

    def fake_time_notebook(path):
        return {"chapter": path.stem, "seconds": next(measured), "budget_s": 60, "within_budget": True,
                "slowest_cells": json.dumps([{"cell": next(cells), "seconds": 1.0, "code": "x"}])}

    monkeypatch.setattr(course_timing, "time_notebook", fake_time_notebook)
    frame = course_timing.time_rounds([Path("dl0027_x.ipynb"), Path("dl0028_y.ipynb")], rounds=3)
    assert frame.seconds.tolist() == [40.0, 11.0] and frame.seconds_min.tolist() == [30.0, 10.0]
    assert frame.seconds_max.tolist() == [50.0, 12.0] and frame.rounds.tolist() == [3, 3]
    assert json.loads(frame.slowest_cells[0])[0]["cell"] == 4  # the cells of the page's median round
    assert course_timing.round_totals_line(frame) == (
        "The ten chapters in each of the 3 rounds, in order: 40.0 s, 62.0 s, 51.0 s.")
    course_timing.write_markdown(frame, tmp_path / "t.md")
    page = (tmp_path / "t.md").read_text()
    assert "| dl0027_x | 40.0 | 30.0, 50.0 | 60 |" in page and "median of 3 rounds" in page
    assert "The ten chapters: 51.0 s (budget 240 s)" in page and "62.0 s, 51.0 s." in page
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        course_timing.time_rounds([Path("dl0027_x.ipynb")], rounds=0)
    with pytest.raises(TypeError, match="rounds must be an int"):
        course_timing.time_rounds([Path("dl0027_x.ipynb")], rounds=True)


def test_course_timing_single_round_has_no_round_totals(monkeypatch):
    monkeypatch.setattr(course_timing, "time_notebook", lambda path: {
        "chapter": path.stem, "seconds": 5.0, "budget_s": 60, "within_budget": True, "slowest_cells": "[]"})
    frame = course_timing.time_rounds([Path("dl0027_x.ipynb")], rounds=1)
    assert frame.seconds.tolist() == [5.0] and course_timing.round_totals_line(frame) == ""
