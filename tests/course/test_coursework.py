"""The chapters as coursework: exercise format and leak-free student versions (release with nbgrader).

The format and release checks run over every chapter notebook and over a small fixture chapter
(tests/fixtures/coursework/, three exercises in the CONTRIBUTING format, 3 + 2 + 1 points).
Grading, with its sandbox and the attacks it must survive, is tested in test_coursework_grading.py.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import jupytext
import nbformat
import pytest

from transformer_course.course.coursework import (
    SOLUTION_MARKER_TAG, cell_source, chapter_table, exercise_table, format_problems, read_chapter,
    strip_solution_markers, student_version_leaks)

# nbgrader's own noise while releasing (its sqlalchemy session, cells without an id)
pytestmark = [pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning"),
              pytest.mark.filterwarnings("ignore:Cell is missing an id field")]

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "chapters").glob("dl00*.ipynb"))
FIXTURE_MD = ROOT / "tests" / "fixtures" / "coursework" / "dl9001_coursework_fixture.myst.md"
FIXTURE = "dl9001_coursework_fixture"


from coursework_tool_loader import tool  # noqa: E402  (tools/coursework.py, loaded once)


# --- the fixture chapter and one shared release ------------------------------------------------

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
    (student_path,) = tool.release([path], tmp_path / "course", ref="0123456789abcdef0123456789abcdef01234567")
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


# --- grading (the grading runs themselves are in test_coursework_grading.py) ------------------

def test_submissions_are_matched_by_chapter_name_or_number(tmp_path):
    chapters = ["dl0027_multi_head_attention", "dl0028_sliding_window"]
    for student, name in [("ada", "dl0027_multi_head_attention.ipynb"), ("bob", "dl0028 (1).ipynb"),
                          ("bob", "notes.ipynb"), ("bad id!", "dl0027_multi_head_attention.ipynb")]:
        (tmp_path / student).mkdir(exist_ok=True)
        (tmp_path / student / name).write_text("{}")
    found, rows = tool.find_submissions(tmp_path, chapters)
    assert sorted(found) == [("ada", "dl0027_multi_head_attention"), ("bob", "dl0028_sliding_window")]
    statuses = {row.file: row.status for row in rows}
    assert statuses["bob/notes.ipynb"].startswith("not a released chapter")
    assert statuses["bad id!"].startswith("invalid student folder name")


def test_every_file_and_folder_gets_a_row_with_a_reason(tmp_path):
    chapters = ["dl0027_multi_head_attention", "dl0028_sliding_window"]
    files = ["ada/dl0027_multi_head_attention.ipynb", "ada/dl0027 (1).ipynb", "ada/week1/dl0028.ipynb",
             "ada/readme.txt", "ada/.ipynb_checkpoints/x.ipynb", "dl0028.ipynb", ".DS_Store", "bob/x/y/"]
    for name in files:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if not name.endswith("/"):
            path.write_text("{}")
    (tmp_path / "carol").mkdir()
    found, rows = tool.find_submissions(tmp_path, chapters)
    assert found == {}
    statuses = {row.file: row.status for row in rows}
    assert statuses["ada/dl0027 (1).ipynb, ada/dl0027_multi_head_attention.ipynb"].startswith(
        "two candidates for dl0027_multi_head_attention")
    assert statuses["ada/week1/dl0028.ipynb"].startswith("wrong place: inside the subfolder week1/")
    assert statuses["ada/readme.txt"].startswith("not a notebook")
    assert statuses["ada/.ipynb_checkpoints"].startswith("ignored: a hidden")
    assert statuses["dl0028.ipynb"].startswith("wrong place: a file at the top")
    assert statuses[".DS_Store"].startswith("ignored")
    assert statuses["bob/x"].startswith("wrong place")
    assert statuses["carol"].startswith("empty folder")


def test_grading_needs_a_released_course(tmp_path):
    with pytest.raises(tool.CourseworkError, match="no released chapters"):
        (tmp_path / "course").mkdir()
        (tmp_path / "course" / "nbgrader_config.py").write_text("")
        tool.grade(tmp_path / "course", tmp_path, tmp_path / "grades")
    with pytest.raises(tool.CourseworkError, match="not a course folder"):
        tool._config(tmp_path)


def test_grades_and_course_stay_out_of_the_submissions(course, tmp_path):
    (tmp_path / "submissions").mkdir()
    with pytest.raises(tool.CourseworkError, match="--out .* lies inside"):
        tool.grade(course, tmp_path / "submissions", tmp_path / "submissions" / "grades")
    with pytest.raises(tool.CourseworkError, match="lies inside"):
        tool.grade(course, course.parent, tmp_path / "grades")


# --- every exercise has a visible self-check that catches a typical mistake ---------------------

def _typical_wrong_answers():
    path = ROOT / "tests" / "fixtures" / "coursework" / "typical_wrong_answers.py"
    spec = importlib.util.spec_from_file_location("typical_wrong_answers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


WRONG, PREDICTIONS = _typical_wrong_answers().WRONG, _typical_wrong_answers().PREDICTIONS
EXERCISES = [(path, e.label) for path in CHAPTERS for e in read_chapter(path).exercises]


@pytest.mark.parametrize("path, label", EXERCISES, ids=[label for _, label in EXERCISES])
def test_the_visible_self_check_fails_a_typical_wrong_answer(path, label):
    from transformer_course.course.checks import ExerciseError
    from transformer_course.course.grading import split_hidden

    assert label in WRONG, f"add a typical wrong answer for {label} to tests/fixtures/coursework/typical_wrong_answers.py"
    test = _cell(nbformat.read(path, as_version=4), f"{label}-tests").source
    namespace: dict = {}
    exec("import math\nimport torch\nfrom torch import nn\n" + WRONG[label], namespace)  # noqa: S102
    with pytest.raises(ExerciseError):
        for code, hidden in split_hidden(test):
            if not hidden:
                exec(code, namespace)  # noqa: S102


PREDICTED = [(path, label) for path, label in EXERCISES if label in PREDICTIONS]


def test_every_listed_prediction_is_an_exercise():
    assert set(PREDICTIONS) <= {label for _, label in EXERCISES}


@pytest.mark.parametrize("path, label", PREDICTED, ids=[label for _, label in PREDICTED])
def test_a_predictions_visible_check_does_not_give_the_answer_away(path, label, capsys):
    """A well-formed wrong prediction passes the visible checks (one guess reveals nothing) and fails the hidden ones."""
    from transformer_course.course.checks import ExerciseError
    from transformer_course.course.grading import split_hidden

    test = _cell(nbformat.read(path, as_version=4), f"{label}-tests").source
    namespace: dict = {}
    exec("import math\nimport torch\nfrom torch import nn\n" + PREDICTIONS[label], namespace)  # noqa: S102
    parts = split_hidden(test)
    for code, hidden in parts:
        if not hidden:
            exec(code, namespace)  # noqa: S102  (must not raise)
    assert f"{label}: the visible checks pass" in capsys.readouterr().out
    with pytest.raises(ExerciseError):
        for code, hidden in parts:
            if hidden:
                exec(code, namespace)  # noqa: S102


# --- every wrong answer scores 0 on the whole test cell, hidden tests included (issue 37, item 5) ---

WRONG_LISTS = [(path, label, index) for path, label in EXERCISES
               for index in range(len(_typical_wrong_answers().wrong_answers(label)))]


@pytest.mark.parametrize("path, label, index", WRONG_LISTS, ids=[f"{l}-{i}" for _, l, i in WRONG_LISTS])
def test_each_wrong_answer_scores_zero_on_the_full_test_cell(path, label, index):
    """What the grader runs (every part of the test cell) rejects each listed wrong answer."""
    test = _cell(nbformat.read(path, as_version=4), f"{label}-tests").source
    namespace: dict = {}
    exec("import math\nimport torch\nfrom torch import nn\n" + _typical_wrong_answers().wrong_answers(label)[index],
         namespace)  # noqa: S102
    with pytest.raises(Exception):  # noqa: B017,PT011 (the grader scores any exception 0)
        exec(test, namespace)  # noqa: S102


def test_every_exercise_has_wrong_answers_to_reject():
    assert all(_typical_wrong_answers().wrong_answers(label) for _, label in EXERCISES)


# --- the package's reference is absent from the exercise's graded replay ------------------------

def test_the_reference_is_among_what_the_exercises_replay_lacks():
    from transformer_course.course.plans import exercise_plans

    plans = {p.label: p for p in exercise_plans(ROOT / "chapters" / "dl0030_positional_encoding.ipynb")}
    assert ("transformer_course.nn.positional", "sinusoidal_encoding") in plans["dl0030-ex1"].absent
    assert all(set(p.targets) <= set(p.absent) for p in plans.values())


def test_every_output_that_holds_solutions_or_student_work_is_ignored_by_git():
    import subprocess

    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    for folder in ("course", "grades", "submissions", "gradescope"):
        probe = f"{folder}/dl0027_multi_head_attention/x.ipynb"
        result = subprocess.run(["git", "check-ignore", "-q", probe], cwd=ROOT)
        assert result.returncode == 0, f"{folder}/ is not in .gitignore"


# --- library calls an exercise puts off limits: flagged for the instructor (issue 37, item 2) -----

def test_off_limits_library_calls_are_read_from_the_test_cell_and_found_in_student_code():
    from transformer_course.course.plans import exercise_plans, forbidden_library_names, library_calls

    plans = {p.label: p for p in exercise_plans(ROOT / "chapters" / "dl0034_layer_norm.ipynb")}
    assert set(plans["dl0034-ex1"].forbidden) == {"layer_norm", "LayerNorm", "group_norm", "GroupNorm"}
    assert "RMSNorm" not in plans["dl0034-ex1"].forbidden and plans["dl0034-ex2"].forbidden == ("RMSNorm", "rms_norm")
    # a package name passed as a plain name or through a package class is the view's business, not a flag
    assert forbidden_library_names("from transformer_course.nn.moe import MoEFeedForward\n"
                                   "check_no_shortcut('f', f, MoEFeedForward, MoEFeedForward.loss, F.relu)") == ("relu",)
    forbidden = plans["dl0034-ex1"].forbidden
    for source in ("def f(x):\n    return F.layer_norm(x, x.shape[-1:])",
                   "from torch.nn.functional import layer_norm as ln\ndef f(x):\n    return ln(x, (4,))",
                   "def f(x):\n    return getattr(torch.nn.functional, 'layer_norm')(x, (4,))",
                   "norm = torch.nn.LayerNorm(4)"):
        assert library_calls([source], forbidden), source
    assert library_calls(["def f(x):\n    m = x.mean(-1, keepdim=True)\n    return (x - m) / x.std(-1, keepdim=True)",
                          "def broken(:"], forbidden) == []
