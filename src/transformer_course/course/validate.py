"""Check a notebook before submitting it: run it top to bottom and say where each exercise stands.

Like nbgrader's "Validate" button. Run it from a terminal,

    python -m transformer_course.course.validate path/to/dl0031_feed_forward_network.ipynb

or in Colab as ``!python -m transformer_course.course.validate /content/<notebook>.ipynb`` after
saving a copy there (File > Download, or "Save a copy in Drive" and copy it to ``/content``). It is
not for a notebook cell: the grader forbids graded notebooks to import ``transformer_course.course``
but its ``notebook`` and ``checks`` modules, and this module is neither.

It executes an in-memory copy of the notebook in a fresh ``python3`` kernel, in the notebook's own
folder (so files next to it are found), with every cell run even after one fails; the file on disk
is never written. Then it prints one line per exercise and a verdict:

    dl0031_feed_forward_network.ipynb: 3 exercises
      dl0031-ex1  passes its visible checks
      dl0031-ex2  not answered yet (a function it defines still raises NotImplementedError)
      dl0031-ex3  fails its visible checks: changed_after_ffn: wrong answer, got False
    Ready to submit: no (1 not answered, 1 failing). The hidden tests run when it is graded.

Exit status: 0 when every exercise passes its visible checks, 1
otherwise, 2 when the file is not a notebook it can run.

How it reads a notebook (the conventions of CONTRIBUTING.md, "Exercises"):

* An exercise is a pair of code cells marked with nbgrader metadata: ``dlNNNN-exK-solution`` (the
  student's answer) and ``dlNNNN-exK-tests`` (the locked visible checks); exercises are listed in
  the order they first appear.
* An answer cell that still raises ``NotImplementedError`` (the stub), or whose function does when
  the test cell calls it, is "not answered yet". A test
  cell that raises fails its visible checks, with the first line of the message (the course's
  checks raise :class:`~transformer_course.course.checks.ExerciseError`, which says what is wrong and
  never the expected value). A test cell that prints the line of
  :func:`~transformer_course.course.checks.checks_passed` passes; one that runs without an error and
  prints no such line (an older notebook) "ran its checks", which counts as passing.
* When a cell before an exercise's test cell raised (other than the stubs and test cells of other
  exercises), an exercise whose checks did not pass is reported as "an earlier cell failed", naming
  that cell: the error there is the one to fix first.
* Grading is stricter than these visible checks in one way it cannot show here: each exercise is
  graded without the package functions it asks you to write (see
  :mod:`~transformer_course.course.view`), so an answer that calls one fails when graded.

Cells are numbered as the grader numbers them: from 0, over all cells, markdown included.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .plans import PINNED_REF, InvalidNotebook, read_submission

CELL_TIMEOUT = 600
"""Seconds one cell may run before the kernel is interrupted (the chapters' training cells are long)."""

KERNEL_NAME = "python3"

STATUSES = ("passed", "failed", "not answered", "earlier cell failed")
"""What :class:`ExerciseStatus` ``.status`` may be."""

EXERCISE_ID = re.compile(r"^(?P<label>dl\d{4}-ex\d+)-(?P<role>solution|tests)$")
"""An nbgrader ``grade_id`` of the course: ``dl0031-ex2-solution`` or ``dl0031-ex2-tests``."""


STUB_ERROR = "NotImplementedError"
CHECK_ERRORS = frozenset({"ExerciseError", "AssertionError"})
"""Errors whose message is the diagnosis itself (no need to name the exception)."""

MESSAGE_LIMIT = 300
"""Characters of an error message shown on a line (a student's answer may be huge)."""


@dataclass(frozen=True)
class ExerciseStatus:
    """Where one exercise stands after the run.

    Attributes:
        label: the exercise, e.g. ``dl0031-ex2``.
        status: one of :data:`STATUSES`.
        message: the line printed after the label, e.g. "passes its visible checks" or
            "fails its visible checks: <what is wrong>".
    """

    label: str
    status: str
    message: str


@dataclass(frozen=True)
class Report:
    """The result of :func:`validate_notebook`.

    Attributes:
        notebook: the notebook checked.
        exercises: one status per exercise, in the notebook's order.
        seconds: how long running the notebook took.
    """

    notebook: Path
    exercises: tuple[ExerciseStatus, ...]
    seconds: float = 0.0

    def count(self, status: str) -> int:
        """How many exercises have ``status`` (one of :data:`STATUSES`)."""
        return sum(exercise.status == status for exercise in self.exercises)

    @property
    def ready(self) -> bool:
        """Every exercise passes its visible checks."""
        return bool(self.exercises) and self.count("passed") == len(self.exercises)

    def lines(self) -> list[str]:
        """The report as printed: a header, one line per exercise, the verdict."""
        name = self.notebook.name
        if not self.exercises:
            return [(f"{name}: no exercises (no code cell has nbgrader metadata dlNNNN-exK-solution or "
                     "dlNNNN-exK-tests)"), "Ready to submit: no (nothing to check)."]
        total = len(self.exercises)
        width = max(len(e.label) for e in self.exercises)
        lines = [f"{name}: {total} exercise{'s' if total != 1 else ''}",
                 *(f"  {e.label:<{width}}  {e.message}" for e in self.exercises)]
        if self.ready:
            return lines + ["Ready to submit: yes. The hidden tests run when it is graded."]
        reasons = [f"{self.count(status)} {words}" for status, words in
                   (("not answered", "not answered"), ("failed", "failing"),
                    ("earlier cell failed", "after a failed cell")) if self.count(status)]
        return lines + [f"Ready to submit: no ({', '.join(reasons)}). The hidden tests run when it is graded."]


# --- reading the notebook ----------------------------------------------------------------------

def check_notebook_path(path: Path) -> Path:
    """``path`` if it names an existing ``.ipynb`` file; else ``ValueError`` naming it."""
    if path.suffix != ".ipynb":
        raise ValueError(f"{path}: not a notebook (expected a file ending in .ipynb)")
    if not path.exists():
        raise ValueError(f"{path}: no such file")
    if not path.is_file():
        raise ValueError(f"{path}: not a file")
    return path


def exercise_cells(notebook: Any) -> dict[str, dict[str, int]]:
    """``{label: {"solution": cell, "tests": cell}}`` from the nbgrader ids, in order of first appearance."""
    exercises: dict[str, dict[str, int]] = {}
    for index, cell in enumerate(notebook.cells):
        grading = cell.get("metadata", {}).get("nbgrader", {})
        match = EXERCISE_ID.match(str(grading.get("grade_id", ""))) if cell.cell_type == "code" else None
        if match:
            exercises.setdefault(match["label"], {}).setdefault(match["role"], index)
    return exercises


def is_install_cell(source: str) -> bool:
    """Whether a code cell is the course's install cell (it pins the package with ``COURSE_REF``)."""
    return PINNED_REF.search(source) is not None  # the grader's own reading of the pin line


# --- running it --------------------------------------------------------------------------------

def run_notebook(notebook: Any, folder: Path, timeout: int = CELL_TIMEOUT) -> str | None:
    """Execute ``notebook`` in place (outputs land in its cells), every cell even after errors.

    Returns:
        None, or why execution stopped early ("the kernel died in cell 12"); later cells keep no outputs.
    """
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    client = NotebookClient(notebook, timeout=timeout, kernel_name=KERNEL_NAME, allow_errors=True,
                            interrupt_on_timeout=True, resources={"metadata": {"path": str(folder)}})
    with client.setup_kernel(stderr=subprocess.DEVNULL):  # the kernel's own log lines, not the student's output
        for index, cell in enumerate(notebook.cells):
            try:
                client.execute_cell(cell, index)
            except DeadKernelError:
                return f"the kernel died in cell {index}"
    return None


def _first_line(text: str) -> str:
    line = next((part.strip() for part in str(text).splitlines() if part.strip()), "")
    return line if len(line) <= MESSAGE_LIMIT else line[: MESSAGE_LIMIT - 3] + "..."


def cell_error(cell: Any) -> tuple[str, str] | None:
    """The (ename, first line of evalue) of a code cell's error output, or None."""
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return output.get("ename", "Error"), _first_line(output.get("evalue", ""))
    return None


def _describe(error: tuple[str, str]) -> str:
    """"ValueError: bad shape"; a check's own message alone (it already says what is wrong)."""
    name, message = error
    if name in CHECK_ERRORS and message:
        return message
    return f"{name}: {message}" if message else name


def printed_pass_line(cell: Any, label: str) -> bool:
    """Whether a test cell printed :func:`~.checks.checks_passed`'s line for ``label``."""
    expected = f"\u2713 {label}: the visible checks pass"
    text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")
    return any(line.startswith(expected) for line in text.splitlines())


def _other_exercise_expected(index: int, error: tuple[str, str], roles: dict[int, str]) -> bool:
    """Whether an error in cell ``index`` is another exercise's own business (its stub, its checks)."""
    return roles.get(index) == "tests" or (roles.get(index) == "solution" and error[0] == STUB_ERROR)


def exercise_statuses(notebook: Any, stopped: str | None = None) -> list[ExerciseStatus]:
    """Each exercise's status, read from the outputs of an executed notebook.

    Args:
        notebook: the executed notebook (``nbformat.NotebookNode``).
        stopped: why execution stopped early, if it did (see :func:`run_notebook`).
    """
    exercises = exercise_cells(notebook)
    roles = {cell: role for cells in exercises.values() for role, cell in cells.items()}
    statuses = []
    for label, cells in exercises.items():
        solution, tests = cells.get("solution"), cells.get("tests")
        last = tests if tests is not None else solution
        answer_error = cell_error(notebook.cells[solution]) if solution is not None else None
        if answer_error and answer_error[0] == STUB_ERROR:
            statuses.append(ExerciseStatus(label, "not answered",
                                           f"not answered yet (its cell still raises {STUB_ERROR})"))
            continue
        checks_error = cell_error(notebook.cells[tests]) if tests is not None else None
        if checks_error and checks_error[0] == STUB_ERROR:  # the stub is the body of a function the checks call
            statuses.append(ExerciseStatus(label, "not answered",
                                           f"not answered yet (a function it defines still raises {STUB_ERROR})"))
            continue
        ran = bool(notebook.cells[last].get("outputs") or notebook.cells[last].get("execution_count"))
        if tests is not None and not checks_error and (ran or stopped is None):
            passed = printed_pass_line(notebook.cells[tests], label)
            statuses.append(ExerciseStatus(label, "passed", "passes its visible checks" if passed else "ran its checks"))
            continue
        if tests is None and not answer_error and (ran or stopped is None):
            statuses.append(ExerciseStatus(label, "passed", "ran (it has no visible checks)"))
            continue
        earlier = next(((i, e) for i in range(last) if i != solution and (e := cell_error(notebook.cells[i]))
                        and not _other_exercise_expected(i, e, roles)), None)
        if earlier is not None:
            statuses.append(ExerciseStatus(label, "earlier cell failed", f"an earlier cell failed "
                                           f"(cell {earlier[0]}: {earlier[1][0]}: {earlier[1][1]})"))
        elif answer_error:
            statuses.append(ExerciseStatus(label, "failed", f"fails: its answer (cell {solution}) "
                                           f"raised {_describe(answer_error)}"))
        elif checks_error:
            statuses.append(ExerciseStatus(label, "failed", f"fails its visible checks: {_describe(checks_error)}"))
        else:
            statuses.append(ExerciseStatus(label, "earlier cell failed", f"not run: {stopped}"))
    return statuses


def validate_notebook(path: Path, timeout: int = CELL_TIMEOUT) -> Report:
    """Run a copy of the notebook at ``path`` and report each exercise's visible checks.

    Args:
        path: the student's ``.ipynb``; never written.
        timeout: seconds one cell may run before the kernel is interrupted.

    Returns:
        A :class:`Report`.

    Raises:
        ValueError: ``path`` is not an existing ``.ipynb`` file.
        InvalidNotebook: the file is not a notebook (not UTF-8, not JSON, no cells...).
    """
    import nbformat

    check_notebook_path(path)
    data = path.read_bytes()
    read_submission(data)  # the grader's own reading: the same reasons for refusing a file
    try:
        notebook = nbformat.reads(data.decode("utf-8"), as_version=4)
    except (ValueError, KeyError, TypeError, AttributeError, nbformat.ValidationError) as error:  # a malformed file
        raise InvalidNotebook(f"invalid notebook: {_first_line(error) or type(error).__name__}") from None
    if not exercise_cells(notebook):
        return Report(path, ())
    start = time.monotonic()
    stopped = run_notebook(notebook, path.resolve().parent, timeout)
    return Report(path, tuple(exercise_statuses(notebook, stopped)), time.monotonic() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m transformer_course.course.validate",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("notebook", type=Path, help="the .ipynb to check (it is not modified)")
    parser.add_argument("--timeout", type=int, default=CELL_TIMEOUT,
                        help=f"seconds one cell may run (default {CELL_TIMEOUT})")
    args = parser.parse_args(argv)
    try:
        report = validate_notebook(args.notebook, args.timeout)
    except (ValueError, InvalidNotebook) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print("\n".join(report.lines()))
    return 0 if report.ready else 1


if __name__ == "__main__":
    sys.exit(main())
