"""Grade a chapter on Gradescope: the autograder zip, and the ``run_autograder`` that uses the course's grader.

:func:`build_autograder` writes, for one released chapter, the zip Gradescope's "programming
assignment" autograder takes (https://gradescope-autograders.readthedocs.io/en/latest/specs/):

    setup.sh             installs Python, bubblewrap and the package's dependencies, at the versions
                         the instructor's environment has (run once, as root; pick Gradescope's
                         Ubuntu 22.04 base image or newer: the package needs Python >= 3.10)
    run_autograder       grades /autograder/submission/ and writes /autograder/results/results.json
    gradescope.json      the chapter, the limits (seconds per exercise, memory) and when students see results
    requirements.txt     the package's dependencies (from pyproject.toml), pinned (``==``) to the versions
                         installed where the zip was built, so the autograder grades as local grading does
    package/transformer_course/   the course's package, hence its grader
    course/source/<chapter>/<chapter>.ipynb    the instructor version (solutions, hidden tests)
    course/release/<chapter>/                  the student version and the files next to it

:func:`run` is what ``run_autograder`` calls. It grades the submission with
:func:`~transformer_course.course.grading.grade_many`, exactly as local grading does: the student's
cells run in bubblewrap where the container allows it, else (as root) as an unprivileged uid without
capabilities (``Limits.sandbox == "user"``), and in both cases the hidden tests stay in
``course/``, which it makes readable by root only before any student code runs. Each exercise has
its time-out; whatever happens (no notebook, two notebooks, a broken one, a crashed grader) every
exercise gets a row and results.json is written. The autograder's root is ``$AUTOGRADER_ROOT``
(default ``/autograder``), so that a test can imitate Gradescope's container in a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import stat
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

ROOT_ENV = "AUTOGRADER_ROOT"
"""Environment variable naming the autograder's root (Gradescope's is ``/autograder``)."""

SANDBOX_ENV = "AUTOGRADER_SANDBOX"
"""``auto`` (default: bubblewrap if it works here, else an unprivileged uid), ``bwrap`` or ``user``."""

PYTHON_ENV = "AUTOGRADER_PYTHON"
"""The Python that ``run_autograder`` uses (default: the virtual environment setup.sh makes)."""

DEFAULT_ROOT = Path("/autograder")

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends python3 python3-venv python3-pip bubblewrap util-linux
python3 -m venv /autograder/venv
/autograder/venv/bin/pip install --no-cache-dir --index-url https://download.pytorch.org/whl/cpu "{torch}"
/autograder/venv/bin/pip install --no-cache-dir -r /autograder/source/requirements.txt
chmod -R go-rwx /autograder/source/course
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this, as root, for each submission; it writes $ROOT/results/results.json.
ROOT="${AUTOGRADER_ROOT:-/autograder}"
PYTHON="${AUTOGRADER_PYTHON:-$ROOT/venv/bin/python}"
cd "$ROOT"
export PYTHONPATH="$ROOT/source/package" PYTHONHASHSEED=0 AUTOGRADER_ROOT="$ROOT"
exec "$PYTHON" -m transformer_course.course.gradescope run --root "$ROOT"
"""

EXTRA_REQUIREMENTS = ("ipython", "nbformat")
"""What the grader needs besides the package's own dependencies (the kernel is an IPython shell)."""

VISIBILITIES = ("visible", "after_due_date", "after_published", "hidden")
"""When students see their results on Gradescope (its ``visibility`` field)."""


# --- the zip ------------------------------------------------------------------------------------

def _pinned(requirement: str) -> str:
    """``name==<installed version>`` for a requirement such as ``numpy>=1.21.2`` (a local tag like +cpu dropped)."""
    from importlib.metadata import PackageNotFoundError, version

    name = re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].strip()
    try:
        return f"{name}=={version(name).split('+')[0]}"
    except PackageNotFoundError:
        raise ValueError(f"{name} is not installed here, so the autograder cannot pin it: install the course's "
                         "environment (pip install -r requirements.txt) before building the zip") from None


def _requirements(pyproject: Path) -> tuple[str, list[str]]:
    """(the pinned torch, the other pinned requirements): the package's dependencies and the grader's extras."""
    import tomllib

    with open(pyproject, "rb") as handle:
        project = tomllib.load(handle)["project"]
    pinned = [_pinned(d) for d in [*project["dependencies"], *EXTRA_REQUIREMENTS]]
    torch = next(d for d in pinned if d.startswith("torch=="))
    return torch, [d for d in pinned if d != torch]


def build_autograder(course: Path, chapter: str, out: Path, timeout: float = 60.0,
                     memory_mb: int = 6144, visibility: str = "visible") -> Path:
    """Write ``out/<chapter>_gradescope.zip`` for a chapter released in ``course``; returns its path.

    Args:
        course: the course folder made by ``tools/coursework.py release``.
        chapter: the chapter's stem (``dl0012_...``).
        out: the folder the zip goes to (created if needed).
        timeout: seconds per exercise (its cells, a replay, its checks), as in local grading.
        memory_mb: memory of the student's sandbox.
        visibility: when students see their results: "visible" (at once), "after_due_date",
            "after_published" or "hidden" (Gradescope's settings).
    """
    from transformer_course.course.sandbox import package_root

    if not isinstance(chapter, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", chapter):
        raise ValueError(f"chapter must be a chapter's stem, got {chapter!r}")
    if not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if not (isinstance(memory_mb, int) and memory_mb > 0):
        raise ValueError(f"memory_mb must be a positive integer, got {memory_mb!r}")
    if visibility not in VISIBILITIES:
        raise ValueError(f"visibility must be one of {', '.join(VISIBILITIES)}, got {visibility!r}")
    source = Path(course) / "source" / chapter / f"{chapter}.ipynb"
    released = Path(course) / "release" / chapter
    if not source.is_file() or not (released / f"{chapter}.ipynb").is_file():
        raise ValueError(f"course: {chapter} is not released in {course} (run tools/coursework.py release)")
    package = package_root() / "transformer_course"
    pyproject = package_root().parent / "pyproject.toml"
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{chapter}_gradescope.zip"

    def add(archive: zipfile.ZipFile, name: str, data: bytes, mode: int = 0o644) -> None:
        info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))  # the same bytes on every build
        info.external_attr = (stat.S_IFREG | mode) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        archive.writestr(info, data)

    config = {"chapter": chapter, "timeout": float(timeout), "memory_mb": memory_mb, "visibility": visibility}
    torch, requirements = _requirements(pyproject)
    with zipfile.ZipFile(target, "w") as archive:
        add(archive, "setup.sh", SETUP_SH.replace("{torch}", torch).encode(), 0o755)
        add(archive, "run_autograder", RUN_AUTOGRADER.encode(), 0o755)
        add(archive, "gradescope.json", json.dumps(config, indent=1).encode())
        add(archive, "requirements.txt", "\n".join(requirements).encode() + b"\n")
        for path in sorted(package.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                add(archive, f"package/{path.relative_to(package.parent).as_posix()}", path.read_bytes())
        add(archive, f"course/source/{chapter}/{chapter}.ipynb", source.read_bytes(), 0o600)
        for path in sorted(released.iterdir()):
            if path.is_file() and not path.is_symlink():
                add(archive, f"course/release/{chapter}/{path.name}", path.read_bytes())
    return target


# --- results.json -------------------------------------------------------------------------------

def results_json(result: Any, seconds: float, note: str = "", visibility: str = "visible") -> dict[str, Any]:
    """Gradescope's results.json for a :class:`~transformer_course.course.grading.NotebookResult`:
    one test per exercise (name, number, score, max_score, status, student-facing output,
    visibility), the total score and a one-line output; ``visibility`` is one of :data:`VISIBILITIES`."""
    from transformer_course.course.feedback import safe_text

    tests = [{"name": safe_text(f"{e.label}: {e.title}", 200), "number": e.label,
              "score": float(e.points), "max_score": float(e.max_points),
              "status": "passed" if e.result == "passed" else "failed",
              "output": safe_text(e.result + (f": {e.message}" if e.message else ""), 2000),
              "output_format": "text", "visibility": visibility} for e in result.exercises]
    total = sum(t["score"] for t in tests)
    maximum = sum(t["max_score"] for t in tests)
    output = f"{total:g} / {maximum:g} points; {result.status}"
    if note:
        output += f". {note}"
    return {"score": total, "execution_time": max(0, round(seconds)), "output": safe_text(output, 2000),
            "output_format": "text", "visibility": visibility, "stdout_visibility": "hidden", "tests": tests}


def _write_results(results: Path, data: dict[str, Any]) -> None:
    results.mkdir(parents=True, exist_ok=True)
    partial = results / "results.json.partial"
    partial.write_text(json.dumps(data, indent=1, ensure_ascii=True), encoding="ascii")
    os.replace(partial, results / "results.json")


# --- run_autograder -----------------------------------------------------------------------------

def find_submission(folder: Path, chapter: str) -> Path | str:
    """The notebook to grade in ``folder`` (Gradescope's submission folder), or why none is graded:
    ``<chapter>.ipynb``, else the one notebook whose name starts with the chapter's ``dlNNNN``,
    else the only notebook there."""
    from transformer_course.course.sandbox import walk_files

    if not folder.is_dir():
        return "no submission folder"
    notebooks = [name for name in walk_files(folder) if name.endswith(".ipynb")
                 and not any(part.startswith(".") for part in name.split("/"))]
    prefix = chapter.split("_")[0]
    for candidates in ([n for n in notebooks if n == f"{chapter}.ipynb"],
                       [n for n in notebooks if n.split("/")[-1].startswith(prefix)], notebooks):
        if len(candidates) == 1:
            return folder / candidates[0]
        if len(candidates) > 1:
            return f"two or more notebooks could be {chapter}: {', '.join(sorted(candidates))[:300]}; submit one"
    return f"no notebook in the submission: submit {chapter}.ipynb"


def choose_sandbox(requested: str = "auto") -> tuple[str | None, str]:
    """(``"bwrap"`` or ``"user"``, a note) for the sandbox to use here, or (None, why none can run)."""
    from transformer_course.course.sandbox import sandbox_problem

    if requested not in ("auto", "bwrap", "user"):
        raise ValueError(f"sandbox must be auto, bwrap or user, got {requested!r}")
    problem = sandbox_problem() if requested in ("auto", "bwrap") else "not requested"
    if problem is None:
        return "bwrap", "sandbox: bubblewrap"
    if requested == "bwrap":
        return None, f"bubblewrap cannot run here ({problem})"
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return None, "no sandbox: bubblewrap cannot run here and the autograder is not root with setpriv"
    from transformer_course.course.sandbox import network_unshare

    network = ("no network" if network_unshare() else
               "the network stays reachable: this container cannot remove it from the student's code")
    return "user", f"sandbox: an unprivileged uid (bubblewrap cannot run in this container); {network}"


def run(root: Path = DEFAULT_ROOT, sandbox: str = "auto") -> dict[str, Any]:
    """Grade ``root/submission`` and write ``root/results/results.json``; returns what it wrote.

    Never raises for anything a submission does: a missing, ambiguous, refused or broken notebook,
    a grader that dies or overruns, each gives every exercise a row scored 0 with the reason."""
    from transformer_course.course.grading import (Limits, RefusedFile, Task, grade_many, not_graded,
                                                   notebook_budget, read_regular_file)
    from transformer_course.course.plans import exercise_plans

    started = time.monotonic()
    root = Path(root)
    results = root / "results"
    try:
        config = json.loads((root / "source" / "gradescope.json").read_text())
        chapter = config["chapter"]
        course = root / "source" / "course"
        os.chmod(course, 0o700)  # the hidden tests: root only, before any student code runs
        instructor = course / "source" / chapter / f"{chapter}.ipynb"
        os.chmod(instructor, 0o600)
        plans = exercise_plans(instructor)
    except Exception as error:  # noqa: BLE001 (the zip is broken: say so, grade nothing)
        print(f"autograder error: {type(error).__name__}: {error}", file=sys.stderr)
        data = {"score": 0.0, "output": "The autograder is misconfigured (its zip is incomplete); nothing was "
                "graded. Please tell your instructor.", "visibility": "visible", "tests": []}
        _write_results(results, data)
        return data
    note = ""
    try:
        mode, note = choose_sandbox(sandbox)
        limits = Limits(timeout=float(config["timeout"]), memory_mb=int(config["memory_mb"]),
                        sandbox=mode or "bwrap")
        found = find_submission(root / "submission", chapter)
        if mode is None:
            result = not_graded(plans, f"not graded: the autograder has no sandbox ({note})")
        elif isinstance(found, str):
            result = not_graded(plans, found)
        else:
            try:
                data = read_regular_file(found, limits.notebook_mb * 2**20)
            except RefusedFile as error:
                result = not_graded(plans, str(error))
            else:
                task = Task(chapter, data, instructor, course / "release" / chapter,
                            notebook_budget(limits, len(plans)))
                graded = grade_many([task], limits, 1)[0][chapter]
                if isinstance(graded, str) or not graded.exercises:
                    result = not_graded(plans, graded if isinstance(graded, str) else graded.status)
                else:
                    result = graded
    except Exception as error:  # noqa: BLE001 (whatever happens, Gradescope gets a results.json)
        result = not_graded(plans, f"grader error: {type(error).__name__}")
        print(f"grader error: {type(error).__name__}: {error}", file=sys.stderr)
    visibility = config.get("visibility", "visible")
    data = results_json(result, time.monotonic() - started, note,
                        visibility if visibility in VISIBILITIES else "visible")
    _write_results(results, data)
    for test in data["tests"]:  # the instructor's log (results/stdout)
        print(f"{test['number']}: {test['score']:g}/{test['max_score']:g} {test['output'][:200]}")
    print(data["output"])
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="grade the submission (what run_autograder calls)")
    run_parser.add_argument("--root", type=Path, default=Path(os.environ.get(ROOT_ENV, DEFAULT_ROOT)),
                            help=f"the autograder's root (default ${ROOT_ENV} or /autograder)")
    run_parser.add_argument("--sandbox", default=os.environ.get(SANDBOX_ENV, "auto"),
                            choices=("auto", "bwrap", "user"), help="default: bubblewrap where it runs")
    args = parser.parse_args(argv)
    run(args.root, args.sandbox)
    return 0


if __name__ == "__main__":
    sys.exit(main())
