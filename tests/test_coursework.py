"""The chapters as coursework: exercise format, leak-free student versions, and grading with nbgrader.

Grading is tested on a small fixture chapter (tests/fixtures/coursework/, three exercises in the
CONTRIBUTING format, 3 + 2 + 1 points) with one release and one grading run shared by the tests:
six students submit a correct, an untouched, a wrong, a crashing, a cheating and an unreadable
notebook. The format and release checks run over every chapter notebook that exists.
"""

from __future__ import annotations

import copy
import csv
import importlib.util
import json
import re
import sys
from pathlib import Path

import jupytext
import nbformat
import pytest

from transformer_course.coursework import (
    SOLUTION_MARKER_TAG, cell_source, chapter_table, exercise_table, format_problems, read_chapter,
    strip_solution_markers, student_version_leaks)

# nbgrader's own noise while autograding (its sqlalchemy session, the cell it adds back without an id)
pytestmark = [pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning"),
              pytest.mark.filterwarnings("ignore:Cell is missing an id field")]

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "chapters").glob("dl00*.ipynb"))
FIXTURE_MD = ROOT / "tests" / "fixtures" / "coursework" / "dl9001_coursework_fixture.myst.md"
FIXTURE = "dl9001_coursework_fixture"


def _load_tool():
    spec = importlib.util.spec_from_file_location("coursework_tool", ROOT / "tools" / "coursework.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["coursework_tool"] = module
    spec.loader.exec_module(module)
    return module


tool = _load_tool()


# --- the fixture chapter and one shared release + grading run ----------------------------------

@pytest.fixture(scope="module")
def fixture_chapter(tmp_path_factory) -> Path:
    """The fixture chapter as an .ipynb (stored as MyST so that nbval does not collect it)."""
    path = tmp_path_factory.mktemp("fixture") / f"{FIXTURE}.ipynb"
    jupytext.write(jupytext.read(FIXTURE_MD), path, fmt="ipynb")
    return path


@pytest.fixture(scope="module")
def course(tmp_path_factory, fixture_chapter) -> Path:
    course = tmp_path_factory.mktemp("course")
    assert tool.main(["release", "--out", str(course), str(fixture_chapter)]) == 0
    return course


def _student_version(course: Path):
    return nbformat.read(course / "release" / FIXTURE / f"{FIXTURE}.ipynb", as_version=4)


def _cell(notebook, grade_id):
    (cell,) = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    return cell


def _solution_code(fixture_chapter: Path, label: str) -> str:
    source = _cell(nbformat.read(fixture_chapter, as_version=4), f"{label}-solution").source
    return "\n".join(line for line in source.splitlines() if "### " not in line)


@pytest.fixture(scope="module")
def graded(tmp_path_factory, course, fixture_chapter):
    """Grade six students in one run; returns (totals rows, grades rows, output folder)."""
    submissions = tmp_path_factory.mktemp("submissions")
    student = _student_version(course)
    correct = copy.deepcopy(student)
    for k in (1, 2, 3):
        _cell(correct, f"dl9001-ex{k}-solution").source = _solution_code(fixture_chapter, f"dl9001-ex{k}")
    wrong = copy.deepcopy(correct)
    _cell(wrong, "dl9001-ex2-solution").source = "def allowed_pairs(t):\n    return t * t"
    crash = copy.deepcopy(correct)
    _cell(crash, "dl9001-ex1-solution").source = "1 / 0\n\n" + _cell(crash, "dl9001-ex1-solution").source
    cheat = copy.deepcopy(correct)
    _cell(cheat, "dl9001-ex1-solution").source = "def my_causal_mask(t):\n    raise NotImplementedError()"
    _cell(cheat, "dl9001-ex1-tests").source = "pass  # tests edited away"
    _cell(cheat, "dl9001-ex2-solution").source = "def allowed_pairs(t):\n    return 10  # passes the visible test"
    _cell(cheat, "dl9001-ex2-tests").source = "pass"
    _cell(cheat, "dl9001-ex2-tests").metadata.pop("nbgrader")  # and even drops the cell's metadata
    for name, notebook in {"correct": correct, "untouched": student, "wrong": wrong,
                           "crash": crash, "cheat": cheat}.items():
        (submissions / name).mkdir()
        nbformat.write(notebook, submissions / name / f"{FIXTURE}.ipynb")
    (submissions / "broken").mkdir()
    (submissions / "broken" / f"{FIXTURE}.ipynb").write_text("this is not a notebook")
    out = tmp_path_factory.mktemp("grades")
    assert tool.main(["grade", "--course", str(course), "--submissions", str(submissions),
                      "--out", str(out)]) == 0
    with open(out / "totals.csv") as handle:
        totals = {(row["student"], row["chapter"]): row for row in csv.DictReader(handle)}
    with open(out / "grades.csv") as handle:
        grades = {(row["student"], row["exercise"]): row for row in csv.DictReader(handle)}
    return totals, grades, out


def _points(grades, student):
    return {k: float(grades[student, f"dl9001-ex{k}"]["points"]) for k in (1, 2, 3)}


# --- the fixture and the parsing ----------------------------------------------------------------

def test_fixture_chapter_follows_the_exercise_format(fixture_chapter):
    chapter = read_chapter(fixture_chapter)
    assert format_problems(chapter) == []
    assert list(chapter.objectives) == [1, 2, 3]
    assert chapter.study_time.startswith("5 minutes")
    table = exercise_table([fixture_chapter])
    assert table["exercise"].tolist() == ["dl9001-ex1", "dl9001-ex2", "dl9001-ex3"]
    assert table["points"].tolist() == [3, 2, 1]
    assert table["objectives"].tolist() == ["1", "1, 2", "3"]
    assert table["assesses"][1].startswith("1. implement a causal mask")
    assert chapter_table([fixture_chapter])["points"].tolist() == [6]


def _edited(fixture_chapter, tmp_path, edit) -> Path:
    notebook = json.loads(fixture_chapter.read_text())
    edit(notebook["cells"])
    path = tmp_path / f"{FIXTURE}.ipynb"
    path.write_text(json.dumps(notebook))
    return path


def _find(cells, text):
    return next(c for c in cells if text in cell_source(c))


def _set_test_points(cells, grade_id, points):
    for cell in cells:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == grade_id:
            cell["metadata"]["nbgrader"]["points"] = points


def test_exercise_table_refuses_points_that_disagree_with_the_test_cell(fixture_chapter, tmp_path):
    path = _edited(fixture_chapter, tmp_path, lambda cells: _set_test_points(cells, "dl9001-ex2-tests", 5))
    with pytest.raises(ValueError, match=r"dl9001-ex2: the text says 2 points, the test cell's nbgrader points are 5"):
        exercise_table([path])
    assert tool.main(["release", "--out", str(tmp_path / "course"), str(path)]) == 1  # refused before nbgrader
    assert not (tmp_path / "course").exists()


def _replace_in(cells, text, old, new):
    cell = _find(cells, text)
    cell["source"] = cell_source(cell).replace(old, new)


@pytest.mark.parametrize("edit, problem", [
    (lambda cells: _find(cells, "{solution-start} dl9001-ex2")["metadata"].pop("tags"),
     "dl9001-ex2: the {solution-start} cell must be a markdown cell tagged 'solution-marker'"),
    (lambda cells: _replace_in(cells, ":label: dl9001-ex3", "objectives 3.", "objectives 3, 7."),
     "dl9001-ex3: refers to objectives [7], which the chapter does not list"),
    (lambda cells: _replace_in(cells, ":label: dl9001-ex3", ":label: dl9001-ex3", ":label: dl9001-ex4"),
     "exercise 3 has label 'dl9001-ex4', expected 'dl9001-ex3'"),
    (lambda cells: _replace_in(cells, ":label: dl9001-ex1", "**3 points · objectives 1.** ", ""),
     "dl9001-ex1: no '**N points · objectives i, j.**' header"),
    (lambda cells: _find(cells, 'check_tensor("my_causal_mask(4)"')["metadata"].update(tags=[]),
     "dl9001-ex1: the test cell must be tagged remove-cell"),
    (lambda cells: _find(cells, 'check_equal("type(answer)"').update(source="assert answer == 'sdpa'"),
     "dl9001-ex3: the test cell must contain ### BEGIN HIDDEN TESTS"),
    (lambda cells: _set_test_points(cells, "dl9001-ex1-tests", 4),
     "dl9001-ex1: the text says 3 points, the test cell's nbgrader points are 4"),
])
def test_format_problems_name_what_is_wrong(fixture_chapter, tmp_path, edit, problem):
    problems = format_problems(read_chapter(_edited(fixture_chapter, tmp_path, edit)))
    assert any(problem in p for p in problems), problems


# --- student versions: nothing leaks ------------------------------------------------------------

def test_student_version_of_the_fixture_keeps_the_chapter_and_hides_the_answers(course, fixture_chapter):
    student = _student_version(course)
    instructor = nbformat.read(fixture_chapter, as_version=4)
    assert student_version_leaks(student, instructor) == []
    text = "\n".join(cell.source for cell in student.cells)
    for secret in ("BEGIN SOLUTION", "HIDDEN TESTS", "tril()", "t * (t + 1) // 2", '"sdpa"\n', "(1, 5, 64)",
                   "{solution-start}", "{solution-end}"):
        assert secret not in text, secret
    assert not [c for c in student.cells if SOLUTION_MARKER_TAG in c.metadata.get("tags", [])]
    assert len(student.cells) == len(strip_solution_markers(instructor).cells)  # the text and code stay
    assert "print(causal_mask(3).int())" in text and "**3 points · objectives 1.**" in text
    for k in (1, 2, 3):
        assert "raise NotImplementedError()" in _cell(student, f"dl9001-ex{k}-solution").source
    assert 'check_tensor("my_causal_mask(4)"' in _cell(student, "dl9001-ex1-tests").source  # visible test
    assert all(not c.get("outputs") for c in student.cells if c.cell_type == "code")


def test_leak_checker_catches_a_leaking_student_version(fixture_chapter):
    instructor = nbformat.read(fixture_chapter, as_version=4)
    leaks = student_version_leaks(instructor, instructor)
    assert any("BEGIN SOLUTION" in leak for leak in leaks)
    assert any("is a solution-marker cell" in leak for leak in leaks)
    assert any("contains a solution or hidden test" in leak for leak in leaks)


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_student_version_of_every_chapter_hides_solutions_hidden_tests_and_markers(path, tmp_path):
    exercises = read_chapter(path).exercises
    assert exercises, f"no {{exercise}} cells found in {path.name}"
    (student_path,) = tool.release([path], tmp_path / "course")
    student = nbformat.read(student_path, as_version=4)
    instructor = nbformat.read(path, as_version=4)
    assert student_version_leaks(student, instructor) == []
    for exercise in exercises:
        assert "raise NotImplementedError()" in _cell(student, f"{exercise.label}-solution").source
        assert exercise.label in "\n".join(c.source for c in student.cells)  # the question stays


# --- every chapter's exercises follow the format ------------------------------------------------

@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_every_chapter_has_two_to_four_well_formed_exercises(path):
    chapter = read_chapter(path)
    assert 2 <= len(chapter.exercises) <= 4, f"{len(chapter.exercises)} exercises"
    assert format_problems(chapter) == []
    assert all(e.points == e.test_points for e in chapter.exercises)


def test_the_instructor_table_covers_every_chapter():
    table = exercise_table(CHAPTERS)
    assert sorted(set(table["chapter"])) == [p.stem for p in CHAPTERS]


# --- grading ------------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_correct_submission_scores_full_marks(graded):
    totals, grades, _ = graded
    assert _points(grades, "correct") == {1: 3, 2: 2, 3: 1}
    assert (totals["correct", FIXTURE]["points"], totals["correct", FIXTURE]["max_points"]) == ("6", "6")
    assert totals["correct", FIXTURE]["status"] == "graded"


@pytest.mark.slow
def test_an_untouched_student_version_scores_zero(graded):
    totals, grades, _ = graded
    assert _points(grades, "untouched") == {1: 0, 2: 0, 3: 0}
    assert totals["untouched", FIXTURE]["points"] == "0"


@pytest.mark.slow
def test_a_wrong_answer_loses_exactly_that_exercises_points(graded):
    totals, grades, _ = graded
    assert _points(grades, "wrong") == {1: 3, 2: 0, 3: 1}
    assert totals["wrong", FIXTURE]["points"] == "4"


@pytest.mark.slow
def test_a_crashing_cell_costs_its_exercise_not_the_run(graded):
    totals, grades, _ = graded
    assert _points(grades, "crash") == {1: 0, 2: 2, 3: 1}
    assert totals["crash", FIXTURE]["status"] == "graded"


@pytest.mark.slow
def test_editing_a_test_cell_does_not_pass_the_hidden_tests(graded):
    totals, grades, _ = graded
    assert _points(grades, "cheat") == {1: 0, 2: 0, 3: 1}


@pytest.mark.slow
def test_an_unreadable_notebook_is_reported_and_scores_zero(graded):
    totals, grades, _ = graded
    assert totals["broken", FIXTURE]["status"].startswith("error")
    assert totals["broken", FIXTURE]["points"] == "0" and totals["broken", FIXTURE]["max_points"] == "6"
    assert _points(grades, "broken") == {1: 0, 2: 0, 3: 0}


@pytest.mark.slow
def test_grades_csv_has_one_row_per_exercise_and_totals_per_student(graded):
    totals, grades, out = graded
    with open(out / "grades.csv") as handle:
        assert next(csv.reader(handle)) == ["student", "chapter", "exercise", "points", "max_points"]
    assert len(grades) == 6 * 3
    assert {row["max_points"] for row in grades.values()} == {"3", "2", "1"}
    assert totals["wrong", "TOTAL"]["points"] == "4" and totals["wrong", "TOTAL"]["max_points"] == "6"


@pytest.mark.slow
def test_feedback_is_written_per_student_without_revealing_hidden_tests(graded):
    _, _, out = graded
    for student in ("correct", "untouched", "wrong", "crash", "cheat"):
        assert (out / "feedback" / student / f"{FIXTURE}.html").exists(), student
    assert not (out / "feedback" / "broken").exists()
    html = (out / "feedback" / "wrong" / f"{FIXTURE}.html").read_text()
    assert "allowed_pairs(4): expected 10, got 16" in html  # the readable message of the failed test
    assert "HIDDEN TESTS" not in html and "(1, 5, 64)" not in html


def test_submissions_are_matched_by_chapter_name_or_number(tmp_path):
    chapters = ["dl0027_multi_head_attention", "dl0028_sliding_window"]
    for student, name in [("ada", "dl0027_multi_head_attention.ipynb"), ("bob", "dl0028 (1).ipynb"),
                          ("bob", "notes.ipynb"), ("bad id!", "dl0027_multi_head_attention.ipynb")]:
        (tmp_path / student).mkdir(exist_ok=True)
        (tmp_path / student / name).write_text("{}")
    found, warnings = tool.find_submissions(tmp_path, chapters)
    assert sorted(found) == [("ada", "dl0027_multi_head_attention"), ("bob", "dl0028_sliding_window")]
    assert any("notes.ipynb" in w for w in warnings) and any("bad id!" in w for w in warnings)


def test_grading_needs_a_released_course(tmp_path):
    with pytest.raises(tool.CourseworkError, match="no released chapters"):
        (tmp_path / "course").mkdir()
        (tmp_path / "course" / "nbgrader_config.py").write_text("")
        tool.grade(tmp_path / "course", tmp_path, tmp_path / "grades")
    with pytest.raises(tool.CourseworkError, match="not a course folder"):
        tool._config(tmp_path)
