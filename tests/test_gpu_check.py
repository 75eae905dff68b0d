"""benchmarks/gpu_check.py on tiny throw-away notebooks: seeds reach the chapter, failures are recorded,
and the stand-in accelerator reproduces the fork defect that ``parallel.map_runs`` avoids."""

import importlib.util
import json
import os
import sys
from pathlib import Path

import nbformat
import pandas as pd
import pytest
import torch

from transformer_course.course.notebook import course_seed

ROOT = Path(__file__).resolve().parent.parent


def _load_script(name: str, path: Path):
    """Import a script of benchmarks/ as a module (it is not in a package)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


gpu_check = _load_script("gpu_check", ROOT / "benchmarks" / "gpu_check.py")

BACKWARD = "x = torch.ones(3, requires_grad=True)\n(x * 2).sum().backward()  # autograd starts its device threads"
FORKED_BACKWARD = f"""\
import multiprocessing
import torch
{BACKWARD}

def backward_in_child():
    y = torch.ones(3, requires_grad=True)
    (y * 2).sum().backward()

child = multiprocessing.get_context("fork").Process(target=backward_in_child)
child.start()
child.join()
assert child.exitcode == 0, f"the forked child failed (exit code {{child.exitcode}})"
"""
MAP_RUNS_AFTER_BACKWARD = f"""\
import os, sys
sys.path.insert(0, os.getcwd())  # the spawned workers import square_gradient from here
import torch
from transformer_course.experiments import parallel
from square_gradient import square_gradient
{BACKWARD}
assert parallel.map_runs(square_gradient, [(1.0,), (2.0,), (3.0,)], workers=2) == [2.0, 4.0, 6.0]
"""
SQUARE_GRADIENT_MODULE = """\
import torch


def square_gradient(x: float) -> float:
    t = torch.tensor(x, requires_grad=True)
    (t * t).backward()
    return float(t.grad)
"""


def _notebook(path: Path, *sources: str) -> Path:
    """A notebook of a markdown title and one code cell per source, written to ``path``."""
    cells = [nbformat.v4.new_markdown_cell("# A throw-away chapter")]
    cells += [nbformat.v4.new_code_cell(source) for source in sources]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    return path


def test_setup_cell_sets_the_seed_that_course_seed_reads(monkeypatch):
    monkeypatch.setenv("COURSE_SEED", "7")
    exec(gpu_check.setup_cell_source(101, stand_in_accelerator=False), {})
    assert course_seed() == 101
    exec(gpu_check.setup_cell_source(None, stand_in_accelerator=False), {})
    assert "COURSE_SEED" not in os.environ and course_seed() == 0
    stand_in = gpu_check.setup_cell_source(None, stand_in_accelerator=True)  # not run here: it registers a device
    assert "_setup_privateuseone_for_python_backend()" in stand_in


def test_device_probe_is_parsed_from_the_last_cell():
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("")])
    assert gpu_check.probed_device(notebook) == {}
    line = 'GPU_CHECK {"device": "cuda:NVIDIA H200", "worker_start": "spawn", "torch": "2.5.1"}\n'
    notebook.cells[-1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="other\n" + line)]
    assert gpu_check.probed_device(notebook)["device"] == "cuda:NVIDIA H200"


def test_arguments_are_checked_at_the_door(tmp_path, capsys):
    missing = tmp_path / "dl0099_missing.ipynb"
    with pytest.raises(SystemExit):
        gpu_check.main([str(missing), "--out-dir", str(tmp_path)])
    assert f"no such notebook: {missing}" in capsys.readouterr().err
    text = tmp_path / "notes.txt"
    text.write_text("")
    with pytest.raises(SystemExit):
        gpu_check.main([str(text)])
    assert "not a notebook (.ipynb)" in capsys.readouterr().err
    for option, value, message in (("--jobs", "0", "--jobs must be >= 1"),
                                   ("--other-seed", "0", "0 is the stored seed")):
        with pytest.raises(SystemExit):
            gpu_check.main([option, value])
        assert message in capsys.readouterr().err
    assert not list(tmp_path.glob("gpu_check*"))


def test_attention_failures_become_error_rows():
    # The package's paths on the CPU, "blocked" as the reference (compiling FlexAttention takes half a minute here).
    frame = gpu_check.attention_rows(torch.device("cpu"), shapes=((2, 2, 300),), implementations=("fused", "no such"),
                                     reference="blocked", calls=2)
    assert frame.implementation.tolist() == ["blocked", "fused", "no such"]
    blocked, fused, unknown = frame.itertuples()
    assert blocked.time_vs_flex == 1 and blocked.max_abs_error == 0 and fused.max_abs_error < 2e-2
    assert fused.median_ms > 0 and pd.isna(fused.peak_mb) and pd.isna(fused.error)  # memory is measured on CUDA only
    assert unknown.error.startswith("ValueError: implementation must be one of") and pd.isna(unknown.median_ms)


@pytest.mark.slow
def test_chapters_run_at_both_seeds_and_failures_name_the_claim(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_SEED", "7")  # the stored-seed run must not inherit it
    seeds = _notebook(tmp_path / "seeds.ipynb", "from transformer_course.course.notebook import course_seed\n"
                                                "open(f'seed_seen_{course_seed()}', 'w').close()")
    claim = _notebook(tmp_path / "claim.ipynb", "x = 1", "assert False, 'claim X'", "x = 2")
    out = tmp_path / "results"
    assert gpu_check.main([str(seeds), str(claim), "--jobs", "2", "--no-attention", "--out-dir", str(out)]) == 1
    assert sorted(p.name for p in tmp_path.glob("seed_seen_*")) == ["seed_seen_0", "seed_seen_101"]
    frame = pd.read_csv(out / "gpu_check.csv", dtype={"seed": str, "failing_cell": str})
    assert frame[["chapter", "seed", "held"]].values.tolist() == [
        ["seeds", "stored", True], ["seeds", "101", True], ["claim", "stored", False], ["claim", "101", False]]
    held, failed = frame.iloc[0], frame.iloc[2]  # the claim fails in cell 2 (cell 0 is markdown)
    assert held.device == "cpu" and held.worker_start == "fork" and held.torch == torch.__version__
    assert failed.error_type == "AssertionError" and failed.error_message == "claim X" and failed.failing_cell == "2"
    assert failed.device == "unknown" and failed.seconds > 0
    machine = json.loads((out / "gpu_check.json").read_text())
    assert machine["stand_in_accelerator"] is False and machine["jobs"] == 2
    assert not (out / "gpu_check_attention.csv").exists()  # no CUDA here, and --no-attention
    page = (out / "gpu_check.md").read_text()
    assert "| claim | 101 | **no** |" in page and "AssertionError: claim X" in page and machine["date"] in page
    assert "Chapters held: 2 of 4 runs; failed: claim (seed stored), claim (seed 101)" in page


@pytest.mark.slow
def test_stand_in_accelerator_reproduces_the_fork_defect_that_map_runs_avoids(tmp_path):
    forked = _notebook(tmp_path / "forked.ipynb", FORKED_BACKWARD)
    (tmp_path / "square_gradient.py").write_text(SQUARE_GRADIENT_MODULE)
    mapped = _notebook(tmp_path / "mapped.ipynb", MAP_RUNS_AFTER_BACKWARD)
    out = tmp_path / "results"
    assert gpu_check.main([str(forked), str(mapped), "--stand-in-accelerator", "--seeds", "stored", "--jobs", "2",
                           "--no-attention", "--out-dir", str(out)]) == 1
    frame = pd.read_csv(out / "gpu_check.csv").set_index("chapter")
    assert not frame.loc["forked", "held"]
    assert frame.loc["forked", "error_message"] == "the forked child failed (exit code 1)"
    assert frame.loc["mapped", "held"] and frame.loc["mapped", "worker_start"] == "spawn"
    without_stand_in = gpu_check.run_chapter(forked, None)  # no accelerator: forking after backward is fine
    assert without_stand_in["held"] and without_stand_in["worker_start"] == "fork"
