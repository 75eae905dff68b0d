"""The student edition (``student/*.ipynb``): current, free of solutions, and its install cell works.

``tools/student_edition.py`` makes it from the chapters through the coursework release; these
tests fail when it is stale, when it shows a solution or a hidden test, when an exercise would
render as a code block in Jupyter or Colab, and they run its install cell's two paths: in Colab it
installs the package at the pinned commit; elsewhere, without the package, it stops with one line.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import types
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import student_edition  # noqa: E402

from transformer_course.course.coursework import LEAK_PATTERNS  # noqa: E402

CHAPTERS = sorted((ROOT / "chapters").glob("dl00*.ipynb"))
EDITIONS = [ROOT / "student" / p.name for p in CHAPTERS]
REPOSITORY_URL = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]


def _read(path: Path):
    return nbformat.read(path, as_version=4)


@pytest.mark.slow
def test_the_student_edition_is_up_to_date():
    problems = [p for p in student_edition.check(CHAPTERS) if not p.startswith("note:")]
    assert not problems, "student/ is stale (run python tools/student_edition.py):\n" + "\n".join(problems)


@pytest.mark.parametrize("path", EDITIONS, ids=[p.stem for p in EDITIONS])
def test_a_student_notebook_has_no_solution_and_renders_its_exercises(path):
    notebook = _read(path)
    text = path.read_text()
    for pattern in LEAK_PATTERNS:
        assert pattern not in text, f"{path.name} shows {pattern!r}"
    solutions = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("solution")]
    assert solutions, f"{path.name} has no exercise to solve"
    for cell in solutions:
        assert "raise NotImplementedError()" in cell.source, cell.source
    exercises = [c for c in notebook.cells
                 if c.cell_type == "markdown" and re.search(r"^### Exercise \d+: ", c.source, re.MULTILINE)]
    assert len(exercises) == len(solutions)
    for cell in exercises:
        assert "```" not in cell.source and ":::" not in cell.source, f"a fence left in {cell.source[:80]!r}"
        assert re.search(r"\*\*\d+ points? · objectives? ", cell.source), cell.source[:120]
    first_exercise = notebook.cells.index(exercises[0])
    teaching = [c for c in notebook.cells[:first_exercise] if c.cell_type == "code"]
    assert all(c.execution_count for c in teaching[1:]), "a teaching cell above the exercises lost its outputs"
    images = [o for c in teaching for o in c.outputs if "image/png" in o.get("data", {})]
    assert images, f"{path.name} shows no figure before its exercises"
    after = [c for c in notebook.cells[first_exercise:] if c.cell_type == "code"]
    assert not any(c.outputs for c in after), "cells from the first exercise on must start without outputs"


def _install_cell(path: Path) -> str:
    return next(c for c in _read(path).cells if c.cell_type == "code").source


def test_the_install_cell_pins_the_commit_of_the_package_the_outputs_came_from():
    refs = {student_edition.stored_ref(path) for path in EDITIONS}
    assert len(refs) == 1, refs
    (ref,) = refs
    assert re.fullmatch(r"[0-9a-f]{40}", ref), ref
    for path in EDITIONS:
        assert f'COURSE_REF = "{ref}"' in _install_cell(path)


def _run_install_cell(source: str, monkeypatch, *, colab: bool, installed: bool) -> list[list[str]]:
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda command, **kwargs: calls.append(command))
    if colab:
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: (real_find_spec(name, *args) if installed or name != "transformer_course"
                                             else None))
    exec(compile(source, "<install cell>", "exec"), {})
    return calls


@pytest.mark.parametrize("path", EDITIONS[:1] + [ROOT / "chapters" / CHAPTERS[0].name],
                         ids=["student", "instructor"])
def test_in_colab_the_install_cell_installs_the_package_at_its_ref(path, monkeypatch):
    source = _install_cell(path)
    ref = re.search(r'COURSE_REF = "([^"]+)"', source)[1]
    calls = _run_install_cell(source, monkeypatch, colab=True, installed=False)
    assert calls == [[sys.executable, "-m", "pip", "install", "-q", f"git+{REPOSITORY_URL}@{ref}"]]


def test_elsewhere_the_install_cell_does_nothing_when_the_package_is_there(monkeypatch):
    assert _run_install_cell(_install_cell(EDITIONS[0]), monkeypatch, colab=False, installed=True) == []


def test_elsewhere_a_missing_package_stops_the_notebook_with_one_line(monkeypatch, capsys, request):
    from IPython.core.interactiveshell import InteractiveShell

    source = _install_cell(EDITIONS[0])
    ref = student_edition.stored_ref(EDITIONS[0])
    with pytest.raises(ModuleNotFoundError) as raised:
        _run_install_cell(source, monkeypatch, colab=False, installed=False)
    assert raised.value._render_traceback_() == [
        f'transformer_course is not installed: pip install "git+{REPOSITORY_URL}@{ref}"']
    # What Jupyter shows: IPython renders the exception through _render_traceback_, one line.
    shell = InteractiveShell.instance()
    request.addfinalizer(InteractiveShell.clear_instance)  # no bare shell left behind for later tests
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None)
    result = shell.run_cell(source)
    assert isinstance(result.error_in_exec, ModuleNotFoundError)
    shown = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert shown == [f'transformer_course is not installed: pip install "git+{REPOSITORY_URL}@{ref}"'], shown


def test_exercise_markdown_becomes_a_heading_and_its_body():
    source = ":::{exercise} Split the heads\n:label: dl0027-ex1\n\n**3 points · objectives 1.** Write `f`.\n:::"
    assert student_edition.exercise_markdown(source) == (
        "### Exercise 1: Split the heads\n\n**3 points · objectives 1.** Write `f`.")
