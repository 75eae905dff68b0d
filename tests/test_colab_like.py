"""A chapter runs outside the repository with nothing but the package and its declared dependencies.

This mirrors what Colab does with a chapter: a fresh Python with PyTorch preinstalled, the course
package installed by pip (not editable, not from requirements.txt, so only the dependencies
declared in pyproject.toml come with it), and the notebook alone, far from the repository. The
test builds such an environment in a temporary folder:

1. ``python -m venv``; ``pip install torch==2.13.0`` (Colab's preinstalled PyTorch; this pin takes
   the CPU wheel, an unpinned torch would download a multi-GB CUDA build);
2. ``pip install <a copy of the package's files>`` plus ``ipykernel`` and ``nbclient`` to run a
   kernel (Colab has both);
3. copies one chapter notebook into an empty folder and executes it there, top to bottom, in that
   environment's kernel.

The chapter is ``dl0030_positional_encoding.ipynb`` once it exists, else the pilot page
``running_the_course.ipynb``; ``COLAB_LIKE_NOTEBOOK`` (a path relative to chapters/) overrides it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.network, pytest.mark.slow]
PREFERRED = ["dl0030_positional_encoding.ipynb", "running_the_course.ipynb"]
TORCH = "torch==2.13.0"

EXECUTE = """
import sys, nbformat
from nbclient import NotebookClient
notebook = nbformat.read(sys.argv[1], as_version=4)
for cell in notebook.cells:
    if cell.cell_type == "code":
        cell.outputs = []
NotebookClient(notebook, timeout=600, kernel_name="python3",
               resources={"metadata": {"path": "."}}).execute()
errors = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
assert not errors, errors
print("executed", len([c for c in notebook.cells if c.cell_type == "code"]), "code cells")
"""


def _chapter() -> Path:
    override = os.environ.get("COLAB_LIKE_NOTEBOOK")
    names = [override] if override else PREFERRED
    for name in names:
        path = ROOT / "chapters" / name
        if path.exists():
            return path
    raise AssertionError(f"none of {names} exists in chapters/")


def _run(command: list[str], cwd: Path, env: dict[str, str], timeout: int = 1200) -> str:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def test_a_chapter_runs_outside_the_repository_with_only_the_declared_dependencies(tmp_path):
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "VIRTUAL_ENV", "MPLBACKEND", "PYTHONHOME")}
    env["PYTHONHASHSEED"] = "0"
    venv = tmp_path / "colab"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    # --no-compile: byte-compiling all of torch at install time is most of the wait; Python compiles
    # what the chapter imports when it imports it.
    pip = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile"]

    # What Colab has before a chapter's first cell: PyTorch.
    _run(pip + [TORCH], cwd=tmp_path, env=env)

    # The package as `pip install git+<repository URL>` would see it: its pyproject.toml, README
    # and src/, copied so that the build leaves nothing behind in the working tree.
    package = tmp_path / "package"
    package.mkdir()
    shutil.copy2(ROOT / "pyproject.toml", package)
    shutil.copy2(ROOT / "README.md", package)
    shutil.copytree(ROOT / "src", package / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc"))
    _run(pip + [str(package), "ipykernel", "nbclient"], cwd=tmp_path, env=env)

    # The same torch stays: the package's lower bounds must not pull another build.
    versions = _run([python, "-c", "import torch, transformer_course; print(torch.__version__); "
                     "print(transformer_course.__file__)"], cwd=tmp_path, env=env).split()
    assert versions[0].startswith("2.13.0"), f"installing the package replaced torch: {versions[0]}"
    assert str(venv) in versions[1] and str(ROOT) not in versions[1], versions[1]

    # The chapter alone, in a folder of its own, far from the repository.
    workdir = tmp_path / "work"
    workdir.mkdir()
    chapter = _chapter()
    notebook = workdir / chapter.name
    shutil.copy2(chapter, notebook)
    script = tmp_path / "execute.py"
    script.write_text(EXECUTE)
    output = _run([python, str(script), str(notebook)], cwd=workdir, env=env)
    assert "executed" in output, output
