"""``python -m transformer_course.course.validate``: run a student's notebook and say where each exercise stands.

Throw-away notebooks shaped like the student edition's (an install cell, nbgrader answer and test
cells calling the course's checks). The two that start a kernel run several exercises each, so the
file stays well under a minute on two cores; the rest read hand-made outputs and run no kernel.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import nbformat
import pytest

from transformer_course.course.validate import (
    ExerciseStatus,
    Report,
    exercise_statuses,
    main,
)

INSTALL = 'import subprocess\nimport sys\n\nCOURSE_REF = "abc"  # the commit\n'
EXPECTED = 12345
"""The answer every exercise of the throw-away notebooks checks for; it must never be printed."""


def answer_cell(label: str, source: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_code_cell(source, metadata={"nbgrader": {
        "grade_id": f"{label}-solution", "solution": True, "grade": False}})


def checks_cell(label: str, name: str) -> nbformat.NotebookNode:
    source = ("from transformer_course.course.checks import check_number, checks_passed\n\n"
              f"check_number({name!r}, {name}, {EXPECTED})\nchecks_passed({label!r})\n")
    return nbformat.v4.new_code_cell(source, metadata={"nbgrader": {
        "grade_id": f"{label}-tests", "grade": True, "points": 1, "locked": True, "solution": False}})


def write(folder: Path, name: str, cells: list[nbformat.NotebookNode]) -> Path:
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(INSTALL), *cells])
    path = folder / name
    nbformat.write(notebook, path)
    return path


def run_main(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


# --- with a kernel -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One notebook with every outcome: right, stub, wrong, flagged, after a broken cell."""
    path = write(tmp_path_factory.mktemp("mixed"), "dl9001_mixed.ipynb", [
        nbformat.v4.new_markdown_cell("## Exercises"),                            # cell 1
        answer_cell("dl9001-ex1", f"answer_one = {EXPECTED}"), checks_cell("dl9001-ex1", "answer_one"),  # 2, 3
        answer_cell("dl9001-ex2", "# YOUR CODE HERE\nraise NotImplementedError()"),  # 4
        checks_cell("dl9001-ex2", "answer_two"),                                        # 5
        answer_cell("dl9001-ex3", "answer_three = 7"), checks_cell("dl9001-ex3", "answer_three"),  # 6, 7
        answer_cell("dl9001-ex4", f"import gc\nanswer_four = {EXPECTED}"), checks_cell("dl9001-ex4", "answer_four"),  # 8, 9
        nbformat.v4.new_code_cell("helper = 1 / 0"),                              # cell 10
        answer_cell("dl9001-ex5", "answer_five = helper"), checks_cell("dl9001-ex5", "answer_five"),  # 11, 12
    ])
    before = path.read_bytes()
    code, out, err = run_main([str(path)])
    return {"code": code, "out": out, "err": err, "before": before, "after": path.read_bytes()}


@pytest.mark.slow
def test_each_outcome_gets_its_line(mixed: dict) -> None:
    lines = mixed["out"].splitlines()
    assert lines[0] == "dl9001_mixed.ipynb: 5 exercises"
    assert lines[1] == "  dl9001-ex1  passes its visible checks"
    assert lines[2] == "  dl9001-ex2  not answered yet (its cell still raises NotImplementedError)"
    assert lines[3].startswith("  dl9001-ex3  fails its visible checks: answer_three")
    assert "too small" in lines[3]
    assert lines[4] == "  dl9001-ex4  passes its visible checks"
    assert lines[5] == ("  dl9001-ex5  an earlier cell failed (cell 10: ZeroDivisionError: division by zero)")
    assert lines[-1] == ("Ready to submit: no (1 not answered, 1 failing, 1 after a failed cell). "
                         "The hidden tests run when it is graded.")
    assert mixed["code"] == 1 and mixed["err"] == ""


@pytest.mark.slow
def test_a_failing_check_never_shows_the_expected_value(mixed: dict) -> None:
    assert str(EXPECTED) not in mixed["out"]


@pytest.mark.slow
def test_no_cell_is_flagged_for_what_it_imports(mixed: dict) -> None:
    assert not any(line.startswith("Warning:") for line in mixed["out"].splitlines())


@pytest.mark.slow
def test_the_file_on_disk_is_not_changed(mixed: dict) -> None:
    assert mixed["after"] == mixed["before"]


@pytest.mark.slow
def test_all_answered_and_right_is_ready(tmp_path: Path) -> None:
    path = write(tmp_path, "dl9001_done.ipynb", [
        answer_cell("dl9001-ex1", f"answer_one = {EXPECTED}"), checks_cell("dl9001-ex1", "answer_one"),
        answer_cell("dl9001-ex2", "from pathlib import Path\nanswer_two = int(Path('beside.txt').read_text())"),
        checks_cell("dl9001-ex2", "answer_two"),
    ])
    (tmp_path / "beside.txt").write_text(str(EXPECTED))  # the kernel runs in the notebook's folder
    before = path.read_bytes()
    code, out, _ = run_main([str(path)])
    assert out.splitlines() == ["dl9001_done.ipynb: 2 exercises", "  dl9001-ex1  passes its visible checks",
                                "  dl9001-ex2  passes its visible checks",
                                "Ready to submit: yes. The hidden tests run when it is graded."]
    assert code == 0
    assert path.read_bytes() == before


# --- without a kernel ----------------------------------------------------------------------------

def test_a_broken_file_is_one_line_and_status_2(tmp_path: Path) -> None:
    path = tmp_path / "dl9001_broken.ipynb"
    path.write_text("{not json")
    code, out, err = run_main([str(path)])
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "not valid JSON" in err and "Traceback" not in err
    assert path.read_text() == "{not json"


@pytest.mark.parametrize(("name", "create", "message"), [
    ("missing.ipynb", False, "missing.ipynb: no such file"),
    ("notes.txt", True, "notes.txt: not a notebook"),
])
def test_a_bad_argument_is_named(tmp_path: Path, name: str, create: bool, message: str) -> None:
    if create:
        (tmp_path / name).write_text("{}")
    code, _, err = run_main([str(tmp_path / name)])
    assert code == 2 and message in err and err.count("\n") == 1


def test_a_notebook_without_exercises_says_so(tmp_path: Path) -> None:
    path = write(tmp_path, "plain.ipynb", [nbformat.v4.new_code_cell("x = 1")])
    code, out, _ = run_main([str(path)])
    assert code == 1 and "no exercises" in out


def executed(cells: list[tuple[nbformat.NotebookNode, list[dict]]]) -> nbformat.NotebookNode:
    """A notebook whose cells carry the given outputs, as if it had run (execution count 1 when any)."""
    notebook = nbformat.v4.new_notebook()
    for cell, outputs in cells:
        cell.outputs = [nbformat.from_dict(o) for o in outputs]
        cell.execution_count = 1 if outputs else None
        notebook.cells.append(cell)
    return notebook


def error(name: str, message: str) -> dict:
    return {"output_type": "error", "ename": name, "evalue": message, "traceback": []}


def test_an_older_test_cell_without_a_pass_line_ran_its_checks() -> None:
    notebook = executed([(answer_cell("dl9001-ex1", "a = 1"), []), (checks_cell("dl9001-ex1", "a"), [])])
    notebook.cells[1].execution_count = 2
    assert exercise_statuses(notebook) == [ExerciseStatus("dl9001-ex1", "passed", "ran its checks")]


def test_the_first_line_of_a_check_message_and_the_answer_cell_error() -> None:
    notebook = executed([
        (answer_cell("dl9001-ex1", "a = 1"), []),
        (checks_cell("dl9001-ex1", "a"), [error("ExerciseError", "a: wrong answer, got 1\nmore detail")]),
        (answer_cell("dl9001-ex2", "b = f("), [error("SyntaxError", "'(' was never closed (1 line)")]),
        (checks_cell("dl9001-ex2", "b"), [error("NameError", "name 'b' is not defined")]),
    ])
    assert [s.message for s in exercise_statuses(notebook)] == [
        "fails its visible checks: a: wrong answer, got 1",
        "fails: its answer (cell 2) raised SyntaxError: '(' was never closed (1 line)"]


def test_a_stub_inside_a_function_is_not_answered() -> None:
    notebook = executed([(answer_cell("dl9001-ex1", "def f():\n    raise NotImplementedError()"), []),
                         (checks_cell("dl9001-ex1", "f()"), [error("NotImplementedError", "")])])
    notebook.cells[0].execution_count = 1
    assert exercise_statuses(notebook) == [ExerciseStatus(
        "dl9001-ex1", "not answered", "not answered yet (a function it defines still raises NotImplementedError)")]


def test_exercises_after_a_dead_kernel_were_not_run() -> None:
    notebook = executed([(answer_cell("dl9001-ex1", "a = 1"), []), (checks_cell("dl9001-ex1", "a"), [])])
    assert exercise_statuses(notebook, "the kernel died in cell 0") == [
        ExerciseStatus("dl9001-ex1", "earlier cell failed", "not run: the kernel died in cell 0")]


