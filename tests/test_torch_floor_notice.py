"""The student edition's install cell says, in one line, when the runtime's PyTorch is too old.

``tools/coursework.py`` (release, and so the student edition) puts the check into each chapter's install cell, with the ``torch>=``
bound of ``pyproject.toml`` (which ``tests/test_dependency_bounds.py`` keeps honest). The cell is
run here as the edition has it, outside Colab and with the package importable, with the installed
PyTorch version faked: older than the bound, it prints exactly one line naming both versions and
the fix; at or above the bound, or with no PyTorch at all, it prints nothing.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import coursework  # noqa: E402  (the release pins the install cell and adds the check)

CHAPTER = sorted((ROOT / "chapters").glob("dl00*.ipynb"))[0]


def _install_cell(minimum: str) -> str:
    notebook = nbformat.read(CHAPTER, as_version=4)
    source = next(c for c in notebook.cells if c.cell_type == "code").source
    source = coursework.REF_LINE.sub('COURSE_REF = "0123456789abcdef0123456789abcdef01234567"', source, count=1)
    return coursework.with_torch_check(source, minimum)


def _run(source: str, installed: str | None, monkeypatch) -> str:
    def fake_version(name: str) -> str:
        if name == "torch" and installed is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return installed if name == "torch" else importlib.metadata.version(name)

    monkeypatch.setattr(importlib.metadata, "version", fake_version)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source, "install-cell", "exec"), {})
    return out.getvalue()


def test_the_bound_in_the_cell_is_pyprojects():
    minimum = coursework.torch_minimum()
    assert minimum == "2.5"
    assert f'TORCH_MIN = "{minimum}"' in _install_cell(minimum)


@pytest.mark.parametrize("installed", ["2.4.1+cu121", "2.3.0", "1.13.1"])
def test_an_older_pytorch_gets_one_line(installed, monkeypatch):
    printed = _run(_install_cell("2.5"), installed, monkeypatch)
    lines = printed.splitlines()
    assert len(lines) == 1, printed
    assert f"PyTorch {installed} here is older than 2.5" in lines[0]
    assert 'pip install -U "torch>=2.5"' in lines[0]


@pytest.mark.parametrize("installed", ["2.5.0", "2.5.1+cpu", "2.13.0", "3.0.0", None])
def test_a_recent_or_missing_pytorch_gets_nothing(installed, monkeypatch):
    assert _run(_install_cell("2.5"), installed, monkeypatch) == ""


def test_the_check_comes_before_the_install_and_after_the_pin():
    source = _install_cell("2.5")
    assert source.index("COURSE_REF = ") < source.index("TORCH_MIN = ") < source.index('"google.colab" in sys.modules')
    assert source.count("TORCH_MIN = ") == 1
