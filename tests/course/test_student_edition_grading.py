"""The student notebook that is handed out grades: every chapter's ``student/`` edition, as committed.

What Colab opens and the site's download button gives (``student/<chapter>.ipynb``) is what a
student returns. Each chapter is released (``tools/coursework.py release``, pinned to the commit
the editions pin), then two copies of every edition are graded in the sandbox:

* solved: each solution stub replaced by the instructor's solution; it must score full marks;
* unsolved: the edition untouched; it must score 0 on every exercise, each "failed" (the stub
  raises ``NotImplementedError``), none "flagged": the edition's own install cell (``subprocess``,
  ``importlib.util``) is the course's code, not the student's.

A third student returns one chapter's solved edition pinned to another commit (as an edition downloaded
from an older build of the site would be): the pin alone must not change the grade.
"""

from __future__ import annotations

import copy
import csv
import os
import re
import shutil
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
STUDENT = ROOT / "student"
EDITIONS = sorted(STUDENT.glob("dl00*.ipynb"))
SOLUTION_MARKER = re.compile(r"^\s*### (BEGIN|END) SOLUTION\s*$")

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning"),
              pytest.mark.skipif(shutil.which("bwrap") is None and not os.environ.get("CI"),
                                 reason="bubblewrap is not installed (CI installs it: apt-get install bubblewrap)")]

from coursework_tool_loader import tool  # noqa: E402  (tools/coursework.py, loaded once)


def _grade_id(cell) -> str:
    return cell.metadata.get("nbgrader", {}).get("grade_id", "")


def _solved(edition, instructor):
    """The edition with every solution cell's stub replaced by the instructor's solution."""
    solutions = {_grade_id(c): c.source for c in instructor.cells
                 if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")}
    solved = copy.deepcopy(edition)
    replaced = 0
    for cell in solved.cells:
        if cell.cell_type == "code" and _grade_id(cell) in solutions:
            cell.source = "\n".join(line for line in solutions[_grade_id(cell)].splitlines()
                                    if not SOLUTION_MARKER.match(line))
            replaced += 1
    assert replaced == len(solutions), f"{replaced} of {len(solutions)} solution cells found in the edition"
    return solved


def _repinned(notebook, ref: str):
    other = copy.deepcopy(notebook)
    install = next(c for c in other.cells if c.cell_type == "code")
    install.source, count = re.subn(r'^COURSE_REF = "[^"]*"', f'COURSE_REF = "{ref}"', install.source,
                                    flags=re.MULTILINE)
    assert count == 1
    return other


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    assert EDITIONS, "student/ holds no editions"
    (ref,) = {nbformat.read(p, as_version=4).metadata["transformer_course"]["package_ref"] for p in EDITIONS}
    course = tmp_path_factory.mktemp("course")
    chapters = [ROOT / "chapters" / p.name for p in EDITIONS]
    assert tool.main(["release", "--ref", ref, "--out", str(course), *map(str, chapters)]) == 0
    submissions = tmp_path_factory.mktemp("submissions")
    for folder in ("solved", "unsolved", "repinned"):
        (submissions / folder).mkdir()
    for path in EDITIONS:
        edition = nbformat.read(path, as_version=4)
        instructor = nbformat.read(course / "source" / path.stem / path.name, as_version=4)
        solved = _solved(edition, instructor)
        nbformat.write(solved, submissions / "solved" / path.name)
        shutil.copyfile(path, submissions / "unsolved" / path.name)
        if path == EDITIONS[0]:  # the pin is the same line in every chapter: one is enough
            nbformat.write(_repinned(solved, "0123456789abcdef0123456789abcdef01234567"),
                           submissions / "repinned" / path.name)
    out = tmp_path_factory.mktemp("grades")
    assert tool.main(["grade", "--course", str(course), "--submissions", str(submissions), "--out", str(out),
                      "--jobs", "2", "--timeout", "120"]) == 0
    with open(out / "grades.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    with open(out / "totals.csv", newline="") as handle:
        totals = {(r["student"], r["chapter"]): r for r in csv.DictReader(handle)}
    return rows, totals


@pytest.mark.parametrize("student", ["solved", "repinned"])
def test_a_solved_edition_scores_full_marks_in_every_chapter(graded, student):
    rows, totals = graded
    chapters = {p.stem for p in EDITIONS} if student == "solved" else {EDITIONS[0].stem}
    mine = [r for r in rows if r["student"] == student and r["chapter"] in chapters]  # (the rest: "missing")
    assert {r["chapter"] for r in mine} == chapters
    wrong = [(r["exercise"], r["result"]) for r in mine if r["points"] != r["max_points"]]
    assert not wrong
    for chapter in chapters:
        row = totals[student, chapter]
        assert row["status"] == "graded" and float(row["points"]) == float(row["max_points"]) > 0


def test_an_unsolved_edition_scores_zero_and_is_never_flagged(graded):
    rows, _ = graded
    mine = [r for r in rows if r["student"] == "unsolved"]
    assert {r["chapter"] for r in mine} == {p.stem for p in EDITIONS}
    assert {float(r["points"]) for r in mine} == {0.0}
    assert {r["result"] for r in mine} == {"failed"}
