"""Grading submissions in the sandbox: honest students, careless students and hostile students.

One release of the fixture chapter (tests/fixtures/coursework/, 3 + 2 + 1 points) and one grading
run (``--jobs 2 --timeout 15``) are shared by the tests. Each student folder is a submission
fixture built here from the released student version:

honest:   correct, untouched, wrong (exercise 2), crash (exercise 1 divides by zero), fresh (the
          answers pasted into a new notebook, without the exercise cells' metadata)
careless: broken (not JSON), nocells (valid JSON without cells), two (two candidates), nested
          (a notebook in a subfolder), a notebook at the top of submissions/
hostile:  cheat (edits the test cells), tamper (rewrites the gradebook), readsource (executes
          the instructor's solutions from source/), writeout (writes outside its folder),
          patched (no-op checks, torch.testing, builtins, a custom exception handler), transform
          (an input transformer that blanks every test), printin (prints ``In`` and fakes the
          hidden-test markers), sigint (an endless loop that ignores SIGINT), slowcheck (a function
          that loops on the hidden inputs), reference (imports
          the package function it is asked to write), probe (right on the visible test only)
issue 22: bigcount (an answer that makes a hidden check build a 10**9-element list in the
          grader), hiddenleak (an exception type named after the hidden inputs), crossleak
          (records exercise 1's hidden inputs and shows them in exercise 2's visible check),
          ref_importlib, ref_sysmodules, ref_exec, ref_othercell, ref_rebind, ref_magic,
          ref_nometa, ref_getsource (the reference reached by paths no parser follows, or
          compiled from its own source at run time), ref_pasted (its source pasted, renamed),
          ref_alternative (another package function that computes the same mask)
issue 37: route_getdata, route_loadsource, route_subprocess, route_concat (the reference module
          copied with pkgutil.get_data, loaded again from its file, run in an asyncio child
          process, reached by a concatenated name), route_earlier (a value the reference computed
          in exercise 1's segment, in a cell that binds no answer name). Each exercise is graded
          without its references within reach (see transformer_course.course.view), so these
          answers fail like any wrong answer; a pasted copy is reported for review.

Every hostile student leaves exercises blank (or wrong) and must score 0 on them, without
changing anyone else's row.
"""

from __future__ import annotations

import copy
import csv
import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import jupytext
import nbformat
import pytest

from transformer_course.course.grading import sandbox_problem, split_hidden

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_MD = ROOT / "tests" / "fixtures" / "coursework" / "dl9001_coursework_fixture.myst.md"
FIXTURE = "dl9001_coursework_fixture"
TIMEOUT = 15

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning"),
              # Without bubblewrap these tests are skipped on a contributor's machine, never under CI
              # (.ci/run sets CI and installs it), where a missing sandbox must fail the run.
              pytest.mark.skipif(shutil.which("bwrap") is None and not os.environ.get("CI"),
                                 reason="bubblewrap is not installed (CI installs it: apt-get install bubblewrap)")]


from coursework_tool_loader import tool  # noqa: E402  (tools/coursework.py, loaded once)


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    chapter = tmp_path_factory.mktemp("fixture") / f"{FIXTURE}.ipynb"
    jupytext.write(jupytext.read(FIXTURE_MD), chapter, fmt="ipynb")
    course = tmp_path_factory.mktemp("course")
    assert tool.main(["release", "--out", str(course), str(chapter)]) == 0
    return course


def _cell(notebook, grade_id):
    (cell,) = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    return cell


def _solution(course: Path, label: str) -> str:
    source = _cell(nbformat.read(course / "source" / FIXTURE / f"{FIXTURE}.ipynb", as_version=4),
                   f"{label}-solution").source
    return "\n".join(line for line in source.splitlines() if "### " not in line)


def _add_cell(notebook, source, before_grade_id=None):
    cell = nbformat.v4.new_code_cell(source)
    if before_grade_id is None:
        notebook.cells.append(cell)
    else:
        index = notebook.cells.index(_cell(notebook, before_grade_id))
        notebook.cells.insert(index, cell)


def _hidden_lines(course: Path) -> list[str]:
    notebook = nbformat.read(course / "source" / FIXTURE / f"{FIXTURE}.ipynb", as_version=4)
    lines = []
    for cell in notebook.cells:
        for code, hidden in split_hidden(cell.source):
            if hidden:
                lines += [line.strip() for line in code.splitlines() if line.strip()]
    return lines


def _submissions(course: Path, root: Path) -> Path:
    """Write every student's submission; returns the submissions folder."""
    submissions = root / "submissions"
    submissions.mkdir()
    student = nbformat.read(course / "release" / FIXTURE / f"{FIXTURE}.ipynb", as_version=4)
    correct = copy.deepcopy(student)
    for k in (1, 2, 3):
        _cell(correct, f"dl9001-ex{k}-solution").source = _solution(course, f"dl9001-ex{k}")
    notebooks = {"correct": correct, "untouched": student}

    wrong = notebooks["wrong"] = copy.deepcopy(correct)
    _cell(wrong, "dl9001-ex2-solution").source = "def allowed_pairs(t):\n    return t * t"
    crash = notebooks["crash"] = copy.deepcopy(correct)
    _cell(crash, "dl9001-ex1-solution").source = "1 / 0\n\n" + _cell(crash, "dl9001-ex1-solution").source

    cheat = notebooks["cheat"] = copy.deepcopy(correct)
    _cell(cheat, "dl9001-ex1-solution").source = "def my_causal_mask(t):\n    raise NotImplementedError()"
    _cell(cheat, "dl9001-ex1-tests").source = "pass  # tests edited away"
    _cell(cheat, "dl9001-ex2-solution").source = "def allowed_pairs(t):\n    return 10  # passes the visible test"
    _cell(cheat, "dl9001-ex2-tests").source = "pass"
    _cell(cheat, "dl9001-ex2-tests").metadata.pop("nbgrader")

    gradebook = course / "gradebook.db"
    tamper = notebooks["tamper"] = copy.deepcopy(student)
    _add_cell(tamper, f"""
import sqlite3
for path in ["../../../gradebook.db", "../gradebook.db", {str(gradebook)!r}]:
    try:
        db = sqlite3.connect(path)
        db.execute("update grade_cells set max_score = 0")
        db.execute("update source_cells set source = 'pass', checksum = ''")
        db.commit()
    except Exception:
        pass
""", "dl9001-ex1-solution")

    readsource = notebooks["readsource"] = copy.deepcopy(student)
    _add_cell(readsource, f"""
import glob, json
for path in glob.glob("../../../source/*/*.ipynb") + [{str(course / "source" / FIXTURE / f"{FIXTURE}.ipynb")!r}]:
    try:
        for cell in json.load(open(path))["cells"]:
            if cell["cell_type"] == "code" and "BEGIN SOLUTION" in "".join(cell["source"]):
                exec("".join(cell["source"]))
    except Exception:
        pass
""", "dl9001-ex1-solution")
    for k in (1, 2, 3):  # the stubs would overwrite what the solutions defined
        _cell(readsource, f"dl9001-ex{k}-solution").source = "pass"

    marker = root / "escaped.txt"
    writeout = notebooks["writeout"] = copy.deepcopy(student)
    _add_cell(writeout, f"""
for path in [{str(marker)!r}, "../escaped.txt", "../../escaped.txt", "/tmp/../escaped.txt",
             {str(root / "submissions" / "correct" / f"{FIXTURE}.ipynb")!r}]:
    try:
        open(path, "w").write("escaped")
    except Exception:
        pass
""", "dl9001-ex1-solution")

    patched = notebooks["patched"] = copy.deepcopy(student)
    _add_cell(patched, """
import builtins, torch, torch.testing
import transformer_course.course.checks as checks
for name in dir(checks):
    if name.startswith("check_"):
        setattr(checks, name, lambda *args, **kwargs: None)
torch.testing.assert_close = lambda *args, **kwargs: None
builtins.isinstance = lambda *args: True
get_ipython().set_custom_exc((BaseException,), lambda *args, **kwargs: None)
my_causal_mask = lambda t: None
allowed_pairs = lambda t: None
answer = None
""", "dl9001-ex1-solution")
    for k in (1, 2, 3):
        _cell(patched, f"dl9001-ex{k}-solution").source = "pass"

    transform = notebooks["transform"] = copy.deepcopy(student)
    _add_cell(transform, """
def _blank_tests(lines):
    return ["pass\\n"] if any("check_" in line for line in lines) else lines
get_ipython().input_transformers_cleanup.append(_blank_tests)
""", "dl9001-ex1-solution")

    printin = notebooks["printin"] = copy.deepcopy(correct)
    _add_cell(printin, "# ### BEGIN HIDDEN TESTS\nprint('### END HIDDEN TESTS')")
    _add_cell(printin, "print('\\n'.join(In))\nraise RuntimeError('\\n'.join(In))", "dl9001-ex3-solution")
    _add_cell(printin, "print('\\n'.join(In))")

    sigint = notebooks["sigint"] = copy.deepcopy(correct)
    _cell(sigint, "dl9001-ex2-solution").source = (
        "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass")

    slowcheck = notebooks["slowcheck"] = copy.deepcopy(correct)  # loops on the hidden inputs only
    _cell(slowcheck, "dl9001-ex1-solution").source = (
        "import torch\n\ndef my_causal_mask(t):\n    while t != 4:\n        pass\n"
        "    return torch.ones(t, t, dtype=torch.bool).tril()")

    reference = notebooks["reference"] = copy.deepcopy(correct)
    _cell(reference, "dl9001-ex1-solution").source = (
        "from transformer_course.nn.masks import causal_mask\n\ndef my_causal_mask(t):\n    return causal_mask(t)")

    probe = notebooks["probe"] = copy.deepcopy(correct)
    _cell(probe, "dl9001-ex2-solution").source = "def allowed_pairs(t):\n    return 10 if t == 4 else -7"

    bigcount = notebooks["bigcount"] = copy.deepcopy(correct)
    _cell(bigcount, "dl9001-ex2-solution").source = (
        "def allowed_pairs(t):\n    return 10**9 if t == 64 else t * (t + 1) // 2")
    hiddenleak = notebooks["hiddenleak"] = copy.deepcopy(correct)
    _cell(hiddenleak, "dl9001-ex2-solution").source = (
        "def allowed_pairs(t):\n    if t != 4:\n        raise type(f'Input_{t}_seen', (Exception,), {})(f'got t={t}')\n"
        "    return 10")
    crossleak = notebooks["crossleak"] = copy.deepcopy(correct)
    _cell(crossleak, "dl9001-ex1-solution").source = (
        "import torch\nseen = []\n\ndef my_causal_mask(t):\n    seen.append(t)\n"
        "    return torch.ones(t, t, dtype=torch.bool).tril()")
    _cell(crossleak, "dl9001-ex2-solution").source = (
        "def allowed_pairs(t):\n    return int('9' + ''.join(str(s) for s in seen))")
    hidden_pick = "getattr(importlib.import_module('transformer_course.nn.' + 'ma' + 'sks'), 'causal' + '_mask')"
    variants = {
        "ref_importlib": f"import importlib\n\ndef my_causal_mask(t):\n    return {hidden_pick}(t)",
        "ref_sysmodules": "import sys\nimport transformer_course.nn.masks\n\ndef my_causal_mask(t):\n"
                          "    return vars(sys.modules['transformer_course.nn.' + 'masks'])['causal_' + 'mask'](t)",
        "ref_exec": "exec('from transformer_course.nn.masks import causal_mask as _m')\n\n"
                    "def my_causal_mask(t):\n    return _m(t)",
        "ref_magic": "%%capture\nfrom transformer_course.nn.masks import causal_mask as my_causal_mask",
        "ref_getsource": "import transformer_course.nn.masks as _masks\n_scope = {}\n"
                         "exec(open(_masks.__file__).read(), _scope)  # the module, compiled afresh\n"
                         "my_causal_mask = _scope['causal_mask']",
        "ref_pasted": "import torch\nfrom transformer_course.nn.masks import check_int\n\n" + __import__("inspect")
                      .getsource(__import__("transformer_course.nn.masks", fromlist=["x"]).causal_mask)
                      .replace("def causal_mask", "def my_causal_mask"),
    }
    for name, source in variants.items():
        notebooks[name] = copy.deepcopy(correct)
        _cell(notebooks[name], "dl9001-ex1-solution").source = source
    othercell = notebooks["ref_othercell"] = copy.deepcopy(correct)
    _add_cell(othercell, "from transformer_course.nn.masks import causal_mask as helper", "dl9001-ex1-solution")
    _cell(othercell, "dl9001-ex1-solution").source = "def my_causal_mask(t):\n    return helper(t)"
    rebind = notebooks["ref_rebind"] = copy.deepcopy(correct)
    _add_cell(rebind, "from transformer_course.nn import masks as _mk\nmy_causal_mask = _mk.causal_mask",
              "dl9001-ex1-tests")
    nometa = notebooks["ref_nometa"] = copy.deepcopy(correct)
    _cell(nometa, "dl9001-ex1-solution").source = "from transformer_course.nn.masks import causal_mask as my_causal_mask"
    _cell(nometa, "dl9001-ex1-solution").metadata.pop("nbgrader")

    package = Path(__import__("transformer_course").__file__).resolve().parent
    routes = {  # issue 37: routes to the reference past the old guards; each answers exercise 2 with it
        "route_getdata": "import pkgutil\n_scope = {}\n"
                         "exec(pkgutil.get_data('transformer_course.nn', 'masks.py').decode(), _scope)\n"
                         "allowed_pairs = lambda t: int(_scope['causal_mask'](t).sum())",
        "route_loadsource": "import importlib.machinery\n"
                            f"_m = importlib.machinery.SourceFileLoader('_copy', {str(package / 'nn' / 'masks.py')!r})"
                            ".load_module()\nallowed_pairs = lambda t: int(_m.causal_mask(t).sum())",
        "route_subprocess": "import asyncio, sys\n\nasync def _count(t):\n"
                            "    child = await asyncio.create_subprocess_exec(sys.executable, '-c', "
                            "f'from transformer_course.nn.masks import causal_mask; print(int(causal_mask({t}).sum()))', "
                            "stdout=asyncio.subprocess.PIPE)\n    out, _ = await child.communicate()\n"
                            "    return int(out)\n\nallowed_pairs = lambda t: asyncio.run(_count(t))",
        "route_concat": "import importlib\n_m = importlib.import_module('transformer_course.nn.' + 'ma' + 'sks')\n"
                        "allowed_pairs = lambda t: int(getattr(_m, 'causal' + '_mask')(t).sum())",
    }
    for name, source in routes.items():
        notebooks[name] = copy.deepcopy(correct)
        _cell(notebooks[name], "dl9001-ex2-solution").source = source
    earlier = notebooks["route_earlier"] = copy.deepcopy(correct)  # computed in exercise 1's segment, no answer name
    _add_cell(earlier, "from transformer_course.nn.masks import causal_mask as _cm\n"
                       "_table = {t: int(_cm(t).sum()) for t in range(100)}", "dl9001-ex1-tests")
    _cell(earlier, "dl9001-ex2-solution").source = "def allowed_pairs(t):\n    return _table[t]"

    alternative = notebooks["ref_alternative"] = copy.deepcopy(correct)  # another package function, same mask
    _cell(alternative, "dl9001-ex1-solution").source = (
        "from transformer_course.nn.masks import dilated_mask\n\ndef my_causal_mask(t):\n"
        "    return dilated_mask(t, 1, causal=True)")

    fresh = notebooks["fresh"] = nbformat.v4.new_notebook()  # answers pasted into a new notebook
    fresh.cells = [nbformat.v4.new_code_cell(_solution(course, f"dl9001-ex{k}")) for k in (1, 2, 3)]

    for name, notebook in notebooks.items():
        (submissions / name).mkdir()
        nbformat.write(notebook, submissions / name / f"{FIXTURE}.ipynb")
    (submissions / "broken").mkdir()
    (submissions / "broken" / f"{FIXTURE}.ipynb").write_text("this is not a notebook")
    (submissions / "nocells").mkdir()
    (submissions / "nocells" / f"{FIXTURE}.ipynb").write_text(json.dumps({"nbformat": 4, "metadata": {}}))
    (submissions / "two").mkdir()
    nbformat.write(correct, submissions / "two" / f"{FIXTURE}.ipynb")
    nbformat.write(correct, submissions / "two" / "dl9001 (1).ipynb")
    (submissions / "nested" / "week1").mkdir(parents=True)
    nbformat.write(correct, submissions / "nested" / "week1" / f"{FIXTURE}.ipynb")
    nbformat.write(correct, submissions / f"{FIXTURE}.ipynb")
    return submissions


def _read(out: Path):
    with open(out / "totals.csv") as handle:
        totals = {(row["student"], row["chapter"]): row for row in csv.DictReader(handle)}
    with open(out / "grades.csv") as handle:
        grades = {(row["student"], row["exercise"]): row for row in csv.DictReader(handle)}
    return totals, grades


@pytest.fixture(scope="module")
def graded(tmp_path_factory, course):
    """Grade every student in one run; returns (totals, grades, out, submissions, seconds, stdout)."""
    problem = sandbox_problem()
    assert problem is None, f"bubblewrap is installed but the sandbox does not work: {problem}"
    root = tmp_path_factory.mktemp("run")
    submissions = _submissions(course, root)
    gradebook = hashlib.sha256((course / "gradebook.db").read_bytes()).hexdigest()
    out = root / "grades"
    start = time.monotonic()
    results = tool.grade(course, submissions, out, jobs=2, timeout=TIMEOUT)
    seconds = time.monotonic() - start
    assert hashlib.sha256((course / "gradebook.db").read_bytes()).hexdigest() == gradebook
    totals, grades = _read(out)
    return totals, grades, out, submissions, seconds, results


def _points(grades, student):
    return {k: float(grades[student, f"dl9001-ex{k}"]["points"]) for k in (1, 2, 3)}


# --- honest students ----------------------------------------------------------------------------

def test_a_correct_submission_scores_full_marks(graded):
    totals, grades, *_ = graded
    assert _points(grades, "correct") == {1: 3, 2: 2, 3: 1}
    assert (totals["correct", FIXTURE]["points"], totals["correct", FIXTURE]["max_points"]) == ("6", "6")
    assert totals["correct", FIXTURE]["status"] == "graded"
    assert totals["correct", "TOTAL"]["status"] == "graded"


def test_an_untouched_student_version_scores_zero_with_a_reason(graded):
    totals, grades, *_ = graded
    assert _points(grades, "untouched") == {1: 0, 2: 0, 3: 0}
    assert {grades["untouched", f"dl9001-ex{k}"]["result"] for k in (1, 2, 3)} == {"failed"}


def test_a_wrong_answer_loses_exactly_that_exercises_points(graded):
    totals, grades, out, *_ = graded
    assert _points(grades, "wrong") == {1: 3, 2: 0, 3: 1}
    html = (out / "feedback" / "wrong" / f"{FIXTURE}.html").read_text()
    # the visible check's whole message: what is wrong, never the expected value (10)
    assert "<td>allowed_pairs(4): got 16, too large by 50-100%</td>" in html


def test_a_crashing_cell_costs_its_exercise_not_the_run(graded):
    totals, grades, out, *_ = graded
    assert _points(grades, "crash") == {1: 0, 2: 2, 3: 1}
    assert "ZeroDivisionError" in (out / "feedback" / "crash" / f"{FIXTURE}.html").read_text()


# --- careless students --------------------------------------------------------------------------

def test_answers_without_the_exercise_metadata_are_still_graded(graded):
    totals, grades, *_ = graded
    assert _points(grades, "fresh") == {1: 3, 2: 2, 3: 1}


def test_malformed_and_misplaced_submissions_get_rows_with_readable_reasons(graded):
    totals, grades, *_ = graded
    assert totals["broken", FIXTURE]["status"].startswith("invalid notebook: not valid JSON")
    assert totals["broken", FIXTURE]["max_points"] == "6" and _points(grades, "broken") == {1: 0, 2: 0, 3: 0}
    assert totals["nocells", FIXTURE]["status"] == "invalid notebook: no list of cells"
    assert totals["two", FIXTURE]["status"].startswith("two candidates for dl9001_coursework_fixture")
    assert totals["nested", FIXTURE]["status"].startswith("wrong place: inside the subfolder week1/")
    assert totals[tool.NO_STUDENT, FIXTURE]["status"].startswith("wrong place: a file at the top")


def test_a_re_run_gives_the_same_files(graded, course, tmp_path):
    totals, grades, out, submissions, *_ = graded
    small = tmp_path / "submissions"
    for student in ("correct", "broken", "two"):
        shutil.copytree(submissions / student, small / student)
    again = tmp_path / "again"
    tool.grade(course, small, again, timeout=TIMEOUT)
    (again / "feedback" / "stale.html").write_text("from an earlier run")
    first = {name: (again / name).read_text() for name in ("grades.csv", "totals.csv")}
    tool.grade(course, small, again, timeout=TIMEOUT)
    for name, text in first.items():
        assert (again / name).read_text() == text, name
    assert not (again / "feedback" / "stale.html").exists()
    feedback = f"feedback/correct/{FIXTURE}.html"
    assert (again / feedback).read_text() == (out / feedback).read_text()
    again_totals, again_grades = _read(again)
    for key, row in again_totals.items():  # the same rows as in the big run, with its hostile students
        assert row == totals[key], row
    for key, row in again_grades.items():
        assert row == grades[key], row


def test_the_summary_counts_every_row_and_the_time_per_notebook(graded, capsys, course, tmp_path):
    *_, submissions, _, _ = graded
    shutil.copytree(submissions / "broken", tmp_path / "s" / "broken")
    tool.grade(course, tmp_path / "s", tmp_path / "g")
    printed = capsys.readouterr().out
    assert "summary:" in printed and "invalid notebook" in printed


# --- hostile students ---------------------------------------------------------------------------

@pytest.mark.parametrize("student", ["cheat", "tamper", "readsource", "writeout", "patched", "transform"])
def test_tricks_earn_a_blank_notebook_nothing(graded, student):
    totals, grades, *_ = graded
    expected = {1: 0, 2: 0, 3: 1} if student == "cheat" else {1: 0, 2: 0, 3: 0}  # cheat answered ex3
    assert _points(grades, student) == expected


def test_no_submission_escapes_its_folder(graded):
    totals, grades, out, submissions, *_ = graded
    assert not (submissions.parent / "escaped.txt").exists()
    assert not (submissions / "escaped.txt").exists()
    assert "escaped" not in (submissions / "correct" / f"{FIXTURE}.ipynb").read_text()


def test_tricks_leave_the_other_students_untouched(graded):
    totals, grades, *_ = graded
    # the honest students, graded in the same run alongside the tamperers, keep their marks
    assert _points(grades, "correct") == {1: 3, 2: 2, 3: 1}
    assert _points(grades, "untouched") == {1: 0, 2: 0, 3: 0}


def test_printing_in_leaks_no_hidden_test(graded, course):
    totals, grades, out, *_ = graded
    assert _points(grades, "printin") == {1: 3, 2: 2, 3: 1}
    for html_file in (out / "feedback").rglob("*.html"):
        html = html_file.read_text()
        for line in _hidden_lines(course):
            assert line not in html, (html_file, line)


def test_hidden_failures_show_no_expected_value(graded):
    totals, grades, out, *_ = graded
    assert _points(grades, "probe") == {1: 3, 2: 0, 3: 1}
    html = (out / "feedback" / "probe" / f"{FIXTURE}.html").read_text()
    assert "allowed_pairs(64), pair by pair: wrong, in a hidden check" in html  # the property, never a value
    body = html.split("<tbody>")[1].split("</tbody>")[0]
    assert "expected" not in body and "-7" not in body


def test_a_sigint_ignoring_loop_costs_only_its_exercise(graded):
    totals, grades, out, *_ = graded
    assert _points(grades, "sigint") == {1: 3, 2: 0, 3: 1}
    assert grades["sigint", "dl9001-ex2"]["result"] == "timed out"
    assert totals["sigint", FIXTURE]["status"] == "graded; timed out in dl9001-ex2"
    seconds = next(r.seconds for r in graded[5] if r.student == "sigint")
    assert seconds < 4 * TIMEOUT + 30, seconds


def test_a_function_that_hangs_on_a_hidden_test_costs_only_its_exercise(graded):
    totals, grades, out, *_ = graded
    assert _points(grades, "slowcheck") == {1: 0, 2: 2, 3: 1}
    assert grades["slowcheck", "dl9001-ex1"]["result"] == "timed out"


def test_importing_the_reference_answer_scores_zero_with_a_message(graded):
    totals, grades, out, *_ = graded
    assert _points(grades, "reference") == {1: 0, 2: 2, 3: 1}
    assert grades["reference", "dl9001-ex1"]["result"] == "failed"
    html = (out / "feedback" / "reference" / f"{FIXTURE}.html").read_text()
    assert "causal_mask is not available while this exercise is graded" in html


def test_grading_refuses_without_a_working_sandbox(course, tmp_path, monkeypatch, capsys):
    import transformer_course.course.grading as grading

    (tmp_path / "s" / "ada").mkdir(parents=True)
    shutil.copyfile(course / "release" / FIXTURE / f"{FIXTURE}.ipynb", tmp_path / "s" / "ada" / f"{FIXTURE}.ipynb")
    monkeypatch.setattr(grading, "sandbox_problem", lambda: "bubblewrap is not installed")
    code = tool.main(["grade", "--course", str(course), "--submissions", str(tmp_path / "s"),
                      "--out", str(tmp_path / "g")])
    assert code == 1
    totals, _ = _read(tmp_path / "g")
    assert totals["ada", FIXTURE]["status"] == "sandbox refused: bubblewrap is not installed"
    assert "--no-sandbox" in capsys.readouterr().err


def test_the_run_stays_within_the_time_budget(graded):
    *_, seconds, results = graded
    times = sorted(r.seconds for r in results if r.seconds > 0)
    assert len(times) == 18 + 12 + 6  # every graded notebook
    assert seconds < 600, seconds  # the whole run, 2 jobs
    assert times[len(times) // 2] < 20, times  # median per notebook, fixture chapter, 2 jobs


# --- issue 22: hostile students the old grader lost to ------------------------------------------

def test_an_answer_that_makes_a_check_huge_costs_only_its_exercise(graded):
    totals, grades, out, *_ = graded
    assert _points(grades, "bigcount") == {1: 3, 2: 0, 3: 1}
    html = (out / "feedback" / "bigcount" / f"{FIXTURE}.html").read_text()
    assert "the tests ran out of memory on your answer" in html


def test_no_hidden_input_comes_back_through_an_exception_name(graded):
    totals, grades, out, *_ = graded
    assert _points(grades, "hiddenleak") == {1: 3, 2: 0, 3: 1}
    html = (out / "feedback" / "hiddenleak" / f"{FIXTURE}.html").read_text()
    body = html.split("<tbody>")[1].split("</tbody>")[0]
    assert "Input_" not in body and "t=" not in body
    assert "your code raised an exception in a hidden check" in html


def test_no_state_carries_from_a_hidden_check_to_the_next_visible_message(graded):
    totals, grades, out, *_ = graded
    assert _points(grades, "crossleak") == {1: 3, 2: 0, 3: 1}
    html = (out / "feedback" / "crossleak" / f"{FIXTURE}.html").read_text()
    # the message of a kernel that ran no hidden check: exercise 1's function saw no input yet
    assert "<td>allowed_pairs(4): got 9, too small by 10-50%</td>" in html, html
    assert "417" not in html.replace(",", "")  # exercise 1 saw 4, then the hidden 1 and 7


@pytest.mark.parametrize("student", ["ref_importlib", "ref_sysmodules", "ref_exec", "ref_magic",
                                     "ref_othercell", "ref_nometa", "ref_getsource", "ref_alternative"])
def test_the_reference_answer_is_out_of_reach_however_it_is_reached(graded, student):
    totals, grades, out, *_ = graded  # ref_getsource: exec(open(module.__file__).read()), the view's file
    assert grades[student, "dl9001-ex1"]["result"] == "failed", student
    assert _points(grades, student) == {1: 0, 2: 2, 3: 1}


def test_a_cell_that_rebinds_the_answer_to_the_reference_changes_nothing(graded):
    totals, grades, *_ = graded  # the rebinding cell fails; the student's own right answer stands
    assert _points(grades, "ref_rebind") == {1: 3, 2: 2, 3: 1}


def test_a_pasted_copy_of_the_reference_is_reported_for_review_not_guessed(graded):
    totals, grades, out, *_ = graded
    assert _points(grades, "ref_pasted") == {1: 3, 2: 2, 3: 1}
    html = (out / "feedback" / "ref_pasted" / f"{FIXTURE}.html").read_text()
    assert "for your instructor to review: my_causal_mask copies the package&#x27;s causal_mask" in html
    # and the similarity report next to the grades names it, with the package file it came from
    similar = list(csv.DictReader((out / "similarity.csv").open(encoding="utf-8")))
    pasted = [row for row in similar if row["student"] == "ref_pasted" and row["similar_to"].startswith("package:")]
    assert pasted and float(pasted[0]["share_of_student_code"]) >= 0.5, similar
    assert (out / "similarity" / f"{FIXTURE}.html").is_file()


@pytest.mark.parametrize("student", ["route_getdata", "route_loadsource", "route_subprocess", "route_concat",
                                     "route_earlier"])
def test_routes_past_the_old_guards_find_no_reference(graded, student):
    totals, grades, out, *_ = graded
    assert _points(grades, student) == {1: 3, 2: 0, 3: 1}, student
    assert grades[student, "dl9001-ex2"]["result"] == "failed"
