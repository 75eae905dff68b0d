"""A student notebook runs outside the repository with nothing but the package its first cell names.

This mirrors what Colab does with a chapter's student edition (``student/*.ipynb``, what the site's
Colab button opens): a fresh Python with PyTorch preinstalled, then the course package that the
notebook's first cell installs (``git+<repository>@<COURSE_REF>``, not editable, not from
requirements.txt, so only the dependencies declared in pyproject.toml come with it), and the
notebook alone, far from the repository. The test builds such an environment in a temporary folder:

1. ``python -m venv``; ``pip install torch==2.13.0`` (Colab's preinstalled PyTorch; this pin takes
   the CPU wheel, an unpinned torch would download a multi-GB CUDA build);
2. ``pip install`` the package exactly as the first cell's ``git+URL@COURSE_REF`` would fetch it:
   the tree of commit COURSE_REF, taken from this clone with ``git archive`` (the URL is checked
   against _config.yml), plus ``ipykernel`` and ``nbclient`` to run a kernel (Colab has both);
3. copies the student notebook into an empty folder and executes it there, in that environment's
   kernel, from its first cell up to its first exercise (the exercises are the student's to write).

The notebook is ``student/dl0031_feed_forward_network.ipynb`` (its cells before the first exercise
train an ensemble in worker processes, so the workers start from the installed package too); ``COLAB_LIKE_NOTEBOOK`` (a file name
in student/) overrides it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.network, pytest.mark.slow]
PREFERRED = ["dl0031_feed_forward_network.ipynb"]
REPOSITORY_URL = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
TORCH = "torch==2.13.0"

EXECUTE = """
import re, sys, nbformat
from nbclient import NotebookClient
notebook = nbformat.read(sys.argv[1], as_version=4)
first = next(i for i, c in enumerate(notebook.cells)
             if c.cell_type == "markdown" and re.search(r"^### Exercise ", c.source, re.MULTILINE))
notebook.cells = notebook.cells[:first]
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
        path = ROOT / "student" / name
        if path.exists():
            return path
    raise AssertionError(f"none of {names} exists in student/")


def _run(command: list[str], cwd: Path, env: dict[str, str], timeout: int = 1200) -> str:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def test_a_student_notebook_runs_to_its_first_exercise_with_only_its_first_cells_package(tmp_path):
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

    # The package the student notebook's first cell installs: git+<repository URL>@<COURSE_REF>,
    # taken from this clone at that commit (what pip would check out).
    chapter = _chapter()
    first_cell = next(c for c in nbformat.read(chapter, as_version=4).cells if c.cell_type == "code").source
    url, ref = re.search(r'COURSE_PACKAGE = f"git\+([^"@]+)@\{COURSE_REF\}"', first_cell)[1], \
        re.search(r'COURSE_REF = "([^"]+)"', first_cell)[1]
    assert url == REPOSITORY_URL, (url, REPOSITORY_URL)
    package = tmp_path / "package"
    package.mkdir()
    archived = subprocess.run(["git", "archive", ref, "pyproject.toml", "README.md", "src"], cwd=ROOT,
                              capture_output=True)
    if archived.returncode != 0:
        pytest.skip(f"commit {ref} is not in this clone (a shallow checkout?): {archived.stderr.decode()[:200]}")
    archive = archived.stdout
    subprocess.run(["tar", "-x", "-C", str(package)], input=archive, check=True)
    _run(pip + [str(package), "ipykernel", "nbclient"], cwd=tmp_path, env=env)

    # The same torch stays: the package's lower bounds must not pull another build.
    versions = _run([python, "-c", "import torch, transformer_course; print(torch.__version__); "
                     "print(transformer_course.__file__)"], cwd=tmp_path, env=env).split()
    assert versions[0].startswith("2.13.0"), f"installing the package replaced torch: {versions[0]}"
    assert str(venv) in versions[1] and str(ROOT) not in versions[1], versions[1]

    # The chapter alone, in a folder of its own, far from the repository.
    workdir = tmp_path / "work"
    workdir.mkdir()
    notebook = workdir / chapter.name
    shutil.copy2(chapter, notebook)
    script = tmp_path / "execute.py"
    script.write_text(EXECUTE)
    output = _run([python, str(script), str(notebook)], cwd=workdir, env=env)
    assert "executed" in output, output
