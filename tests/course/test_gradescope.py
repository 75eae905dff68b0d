"""The Gradescope autograder: the zip, and run_autograder in an imitation of Gradescope's container.

Gradescope unpacks the zip into ``/autograder/source``, copies ``run_autograder`` to
``/autograder/run_autograder``, puts the student's files in ``/autograder/submission`` and runs
``run_autograder`` as root; it reads ``/autograder/results/results.json``
(https://gradescope-autograders.readthedocs.io/en/latest/specs/). Here the same layout lives in a
temporary root (``AUTOGRADER_ROOT``), run as root in a network namespace of its own, and the
results are validated against ``tests/fixtures/gradescope_results.schema.json``, written from
that page. Submissions are built from the released fixture chapter (3 + 2 + 1 points), as in
test_coursework_grading.py.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import jsonschema
import jupytext
import nbformat
import pytest

from transformer_course.course.gradescope import build_autograder, choose_sandbox, find_submission, results_json
from transformer_course.course.grading import ExerciseResult, NotebookResult, split_hidden

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_MD = ROOT / "tests" / "fixtures" / "coursework" / "dl9001_coursework_fixture.myst.md"
SCHEMA = json.loads((ROOT / "tests" / "fixtures" / "gradescope_results.schema.json").read_text())
FIXTURE = "dl9001_coursework_fixture"
TIMEOUT = 15

from coursework_tool_loader import tool  # noqa: E402  (tools/coursework.py, loaded once)

needs_sandbox = pytest.mark.skipif(  # as in test_coursework_grading.py: never skipped under CI
    (shutil.which("bwrap") is None or os.geteuid() != 0) and not os.environ.get("CI"),
    reason="imitating Gradescope's container needs root and bubblewrap (CI has both)")


def _validate(results: dict) -> None:
    jsonschema.Draft7Validator(SCHEMA).validate(results)


# --- fast: results.json, the submission's name, the arguments -----------------------------------

def test_results_json_has_one_test_per_exercise_and_fits_the_schema():
    result = NotebookResult([ExerciseResult("dl9001-ex1", "Mask", 3.0, 3.0, "passed"),
                             ExerciseResult("dl9001-ex2", "Pairs", 0.0, 2.0, "failed", "x: wrong, in a hidden check"),
                             ExerciseResult("dl9001-ex3", "Name \udcff", 0.0, 1.0, "timed out", "timed out")],
                            "graded; timed out in dl9001-ex3")
    data = results_json(result, 12.4)
    _validate(data)
    assert data["score"] == 3.0 and data["execution_time"] == 12
    assert [t["number"] for t in data["tests"]] == ["dl9001-ex1", "dl9001-ex2", "dl9001-ex3"]
    assert [t["status"] for t in data["tests"]] == ["passed", "failed", "failed"]
    assert data["tests"][1]["output"] == "failed: x: wrong, in a hidden check"
    assert data["output"].startswith("3 / 6 points; graded; timed out in dl9001-ex3")
    json.dumps(data, ensure_ascii=True).encode("ascii")  # a lone surrogate never breaks the file
    with pytest.raises(jsonschema.ValidationError):  # the schema can fail: a misspelt key
        _validate({**data, "tests": [{**data["tests"][0], "max_points": 3}]})
    with pytest.raises(jsonschema.ValidationError):
        _validate({**data, "visibility": "students"})


def test_the_submission_is_found_by_name_or_refused_with_a_reason(tmp_path):
    assert find_submission(tmp_path / "absent", FIXTURE) == "no submission folder"
    assert "no notebook" in find_submission(tmp_path, FIXTURE)
    (tmp_path / "notes.ipynb").write_text("{}")
    assert find_submission(tmp_path, FIXTURE) == tmp_path / "notes.ipynb"  # the only notebook
    (tmp_path / "dl9001_mine.ipynb").write_text("{}")
    assert find_submission(tmp_path, FIXTURE) == tmp_path / "dl9001_mine.ipynb"  # its dlNNNN
    (tmp_path / f"{FIXTURE}.ipynb").write_text("{}")
    assert find_submission(tmp_path, FIXTURE) == tmp_path / f"{FIXTURE}.ipynb"  # its released name
    (tmp_path / f"{FIXTURE}.ipynb").unlink()
    (tmp_path / "dl9001_other.ipynb").write_text("{}")
    assert find_submission(tmp_path, FIXTURE).startswith("two or more notebooks")


def test_a_broken_autograder_still_writes_results_json(tmp_path):
    from transformer_course.course.gradescope import run

    (tmp_path / "source").mkdir()
    data = run(tmp_path)
    assert json.loads((tmp_path / "results" / "results.json").read_text()) == data
    _validate(data)
    assert data["score"] == 0.0 and "misconfigured" in data["output"]


def test_bad_arguments_are_named(tmp_path):
    with pytest.raises(ValueError, match="chapter"):
        build_autograder(tmp_path, "../x", tmp_path)
    with pytest.raises(ValueError, match="timeout"):
        build_autograder(tmp_path, FIXTURE, tmp_path, timeout=0)
    with pytest.raises(ValueError, match="course"):
        build_autograder(tmp_path, FIXTURE, tmp_path)
    with pytest.raises(ValueError, match="sandbox"):
        choose_sandbox("docker")


# --- the zip and the imitated container ----------------------------------------------------------

@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    chapter = tmp_path_factory.mktemp("fixture") / f"{FIXTURE}.ipynb"
    jupytext.write(jupytext.read(FIXTURE_MD), chapter, fmt="ipynb")
    course = tmp_path_factory.mktemp("course")
    assert tool.main(["release", "--out", str(course), str(chapter)]) == 0
    return course


@pytest.fixture(scope="module")
def autograder(course, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gradescope")
    assert tool.main(["gradescope", "--course", str(course), "--out", str(out), "--timeout", str(TIMEOUT)]) == 0
    return out / f"{FIXTURE}_gradescope.zip"


def _cell(notebook, grade_id):
    (cell,) = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    return cell


def _notebooks(course: Path, root: Path) -> dict:
    """The honest, blank and hostile submissions; the hostile one aims at the hidden tests under ``root``."""
    student = nbformat.read(course / "release" / FIXTURE / f"{FIXTURE}.ipynb", as_version=4)
    source = nbformat.read(course / "source" / FIXTURE / f"{FIXTURE}.ipynb", as_version=4)
    honest = copy.deepcopy(student)
    for k in (1, 2, 3):
        solution = _cell(source, f"dl9001-ex{k}-solution").source
        _cell(honest, f"dl9001-ex{k}-solution").source = "\n".join(
            line for line in solution.splitlines() if "### " not in line)
    hostile = copy.deepcopy(honest)
    # exercise 1: the package's reference answer; exercise 2: right on the visible test only
    _cell(hostile, "dl9001-ex1-solution").source = (
        "from transformer_course.nn.masks import causal_mask\n\ndef my_causal_mask(t):\n    return causal_mask(t)")
    _cell(hostile, "dl9001-ex2-solution").source = "def allowed_pairs(t):\n    return 10 if t == 4 else -7"
    # exercise 3: the hidden tests' answer if it can read them (the marker is split, so that this
    # notebook itself never matches), and an attempt to overwrite results.json
    _cell(hostile, "dl9001-ex3-solution").source = f"""
import glob
answer = "blocked"
for path in glob.glob({str(root / "source" / "course" / "source")!r} + "/*/*.ipynb") + \\
        glob.glob("/autograder/source/course/source/*/*.ipynb"):
    try:
        if "BEGIN HIDDEN" + " TESTS" in open(path).read():
            answer = "sd" + "pa"
    except OSError:
        pass
for path in [{str(root / "results" / "results.json")!r}, "/autograder/results/results.json"]:
    try:
        open(path, "w").write('{{"score": 100}}')
    except OSError:
        pass
"""
    return {"honest": honest, "blank": student, "hostile": hostile}


def _hidden_lines(course: Path) -> list[str]:
    notebook = nbformat.read(course / "source" / FIXTURE / f"{FIXTURE}.ipynb", as_version=4)
    return [line.strip() for cell in notebook.cells for code, hidden in split_hidden(cell.source) if hidden
            for line in code.splitlines() if line.strip()]


def _gradescope(autograder: Path, root: Path, notebook=None, sandbox: str = "auto") -> dict:
    """Lay out Gradescope's container under ``root``, run run_autograder as root, return results.json."""
    source = root / "source"
    with zipfile.ZipFile(autograder) as archive:
        for info in archive.infolist():
            archive.extract(info, source)
            os.chmod(source / info.filename, (info.external_attr >> 16) & 0o777)
    shutil.copy2(source / "run_autograder", root / "run_autograder")
    (root / "submission").mkdir()
    (root / "results").mkdir()
    if notebook is not None:
        nbformat.write(notebook, root / "submission" / f"{FIXTURE}.ipynb")
    for folder in (root, root / "submission", root / "results", *root.parents):
        if folder == Path(tempfile.gettempdir()):
            break
        os.chmod(folder, 0o755)  # as /autograder: any user may walk to it (the hidden tests are guarded inside)
    env = {"PATH": os.environ["PATH"], "AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": sys.executable,
           "AUTOGRADER_SANDBOX": sandbox, "LANG": "C.UTF-8"}
    command = [str(root / "run_autograder")]
    if shutil.which("unshare") and subprocess.run(["unshare", "--net", "true"]).returncode == 0:
        command = ["unshare", "--net"] + command  # no network, as on Gradescope's graders
    run = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    results = json.loads((root / "results" / "results.json").read_text())
    _validate(results)
    assert [t["number"] for t in results["tests"]] == ["dl9001-ex1", "dl9001-ex2", "dl9001-ex3"]
    assert [t["max_score"] for t in results["tests"]] == [3.0, 2.0, 1.0]
    return results


@pytest.fixture(scope="module")
def graded(course, autograder, tmp_path_factory) -> dict:
    found = {}
    for name in ("honest", "blank", "hostile"):
        root = tmp_path_factory.mktemp(f"autograder-{name}")
        found[name] = _gradescope(autograder, root, _notebooks(course, root)[name])
    return found


def test_the_zip_holds_what_gradescope_needs(autograder):
    with zipfile.ZipFile(autograder) as archive:
        names = set(archive.namelist())
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in archive.infolist()}
        config = json.loads(archive.read("gradescope.json"))
    assert {"setup.sh", "run_autograder", "requirements.txt", "gradescope.json",
            "package/transformer_course/course/grading.py", "package/transformer_course/course/gradescope.py",
            f"course/source/{FIXTURE}/{FIXTURE}.ipynb", f"course/release/{FIXTURE}/{FIXTURE}.ipynb"} <= names
    assert modes["setup.sh"] & 0o111 and modes["run_autograder"] & 0o111
    assert modes[f"course/source/{FIXTURE}/{FIXTURE}.ipynb"] == 0o600  # the hidden tests: root only
    assert config == {"chapter": FIXTURE, "timeout": float(TIMEOUT), "memory_mb": 6144, "visibility": "visible"}
    assert not any("__pycache__" in n for n in names)


def test_the_zip_installs_the_versions_this_environment_has(autograder):
    from importlib.metadata import version

    with zipfile.ZipFile(autograder) as archive:
        requirements = archive.read("requirements.txt").decode().split()
        setup = archive.read("setup.sh").decode()
    assert all("==" in r for r in requirements) and f"numpy=={version('numpy')}" in requirements
    assert f'"torch=={version("torch").split("+")[0]}"' in setup  # from PyTorch's CPU index, pinned


def test_results_visibility_is_the_instructors_choice(course, tmp_path):
    from transformer_course.course.gradescope import build_autograder, results_json
    from transformer_course.course.grading import NotebookResult

    zip_path = build_autograder(course, FIXTURE, tmp_path, visibility="after_due_date")
    with zipfile.ZipFile(zip_path) as archive:
        assert json.loads(archive.read("gradescope.json"))["visibility"] == "after_due_date"
    data = results_json(NotebookResult([], "graded", 1.0, 1.0), 1.0, visibility="hidden")
    assert data["visibility"] == "hidden"
    with pytest.raises(ValueError, match="visibility must be one of visible, after_due_date"):
        build_autograder(course, FIXTURE, tmp_path, visibility="students")


@pytest.mark.slow
@needs_sandbox
def test_an_honest_submission_gets_full_marks(graded):
    results = graded["honest"]
    print("seconds per notebook (execution_time):", {k: v["execution_time"] for k, v in graded.items()})
    assert results["score"] == 6.0
    assert [t["status"] for t in results["tests"]] == ["passed"] * 3
    assert [t["score"] for t in results["tests"]] == [3.0, 2.0, 1.0]


@pytest.mark.slow
@needs_sandbox
def test_a_blank_submission_gets_zero_with_a_row_for_every_exercise(graded):
    results = graded["blank"]
    assert results["score"] == 0.0
    assert [t["score"] for t in results["tests"]] == [0.0, 0.0, 0.0]
    assert all("not answered" in t["output"] for t in results["tests"]), results["tests"]


@pytest.mark.slow
@needs_sandbox
def test_a_hostile_submission_scores_zero_and_sees_no_hidden_test(course, graded):
    results = graded["hostile"]
    ex1, ex2, ex3 = results["tests"]
    assert results["score"] == 0.0, results
    assert ex1["score"] == 0.0 and "causal_mask is not available while this exercise is graded" in ex1["output"]
    assert ex2["score"] == 0.0 and "allowed_pairs(64), pair by pair: wrong, in a hidden check" in ex2["output"]
    assert "expected" not in ex2["output"] and "-7" not in ex2["output"]  # the property, never a value
    assert ex3["score"] == 0.0  # it could not read the hidden tests (their answer would score 1)
    text = json.dumps(results)
    for line in _hidden_lines(course):
        assert line not in text


@pytest.mark.slow
@needs_sandbox
def test_without_bubblewrap_the_student_runs_as_an_unprivileged_user(course, autograder, tmp_path):
    """Gradescope's containers may refuse bubblewrap: then the kernel runs as another uid, and the
    hidden tests (root only) stay out of its reach all the same."""
    results = _gradescope(autograder, tmp_path, _notebooks(course, tmp_path)["hostile"], sandbox="user")
    hidden = tmp_path / "source" / "course" / "source" / FIXTURE / f"{FIXTURE}.ipynb"
    assert "BEGIN HIDDEN TESTS" in hidden.read_text()  # the file it aimed at is there, and root reads it
    assert "unprivileged uid" in results["output"]
    assert [t["score"] for t in results["tests"]] == [0.0, 0.0, 0.0], results
    assert not (tmp_path / "results" / "results.json.partial").exists()


@pytest.mark.slow
@needs_sandbox
def test_no_notebook_still_gives_every_exercise_a_row(autograder, tmp_path):
    results = _gradescope(autograder, tmp_path, None)
    assert results["score"] == 0.0
    assert all(t["status"] == "failed" and "no notebook in the submission" in t["output"] for t in results["tests"])
