"""The chapters as coursework: release student versions, then grade submissions, with nbgrader.

    python tools/coursework.py release --out course/
    python tools/coursework.py grade --course course/ --submissions submissions/ --out grades/

``release`` turns every chapter (``chapters/dl00*.ipynb``, or the chapters named after ``--out``)
into one nbgrader assignment each, named after the chapter's stem, in an nbgrader course folder:

    course/nbgrader_config.py           the configuration (a copy of tools/nbgrader_config.py)
    course/gradebook.db                 the gradebook (sqlite): exercises, points, locked test cells
    course/source/<chapter>/<chapter>.ipynb    instructor version (solutions, hidden tests)
    course/release/<chapter>/<chapter>.ipynb   student version: hand these out

The student version keeps the chapter's text and code with outputs cleared; each solution is
replaced by ``raise NotImplementedError()``, hidden tests are removed, and the website's
``solution-marker`` cells are dropped before nbgrader sees the notebook. The release is checked:
a student version that still shows a solution, a hidden test or a marker is an error.

``grade`` expects one folder per student, holding the returned notebooks under their released
names (a name starting with the chapter's ``dlNNNN`` is accepted too):

    submissions/<student_id>/<chapter>.ipynb

It copies them into ``course/submitted/``, runs nbgrader's autograde (which restores the locked
test cells, hidden tests included, from the gradebook before executing, so editing a test cell
gains nothing) and generate_feedback, and writes

    grades/grades.csv     student, chapter, exercise, points, max_points (one row per exercise)
    grades/totals.csv     student, chapter, points, max_points, status (one row per chapter
                          graded in this run, plus a row "TOTAL" per student)
    grades/feedback/<student_id>/<chapter>.html   nbgrader's feedback report

A crashing cell costs the exercises that depend on it, not the run. Autograding executes student
code with your permissions: grade untrusted submissions inside a container or a throwaway VM.
"""

from __future__ import annotations

import argparse
import csv
import logging
import os
import re
import shutil
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"
CONFIG_TEMPLATE = Path(__file__).resolve().parent / "nbgrader_config.py"
STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@+-]*$")

sys.path.insert(0, str(ROOT / "src"))  # the tool also works before `pip install -e .`
from transformer_course.course.coursework import (  # noqa: E402
    format_problems, read_chapter, strip_solution_markers, student_version_leaks)


class CourseworkError(Exception):
    """A problem the instructor must fix (malformed chapter, leaking release, bad submissions)."""


# --- nbgrader plumbing --------------------------------------------------------------------------

def _alembic_head() -> str:
    """The gradebook schema's alembic revision, computed in-process.

    nbgrader stamps a new gradebook with this revision by running ``alembic heads`` in a
    subprocess (``nbgrader.api.get_alembic_version``), which needs ``alembic`` on PATH and costs a
    second Python start; reading the same migration scripts here gives the same answer.
    """
    import nbgrader
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(Path(nbgrader.__file__).parent / "alembic"))
    return ScriptDirectory.from_config(config).get_current_head()


def _use_in_process_alembic() -> None:
    import nbgrader.api

    nbgrader.api.get_alembic_version = _alembic_head


def _config(course: Path):
    from traitlets.config.loader import PyFileConfigLoader

    if not (course / "nbgrader_config.py").exists():
        raise CourseworkError(f"{course} is not a course folder (no nbgrader_config.py); "
                              "run `python tools/coursework.py release --out COURSE` first")
    return PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()


def _run_nbgrader(app_class, course: Path, verbose: bool = False, **coursedir_attributes) -> dict:
    """Run one nbgrader converter in-process for the course folder; returns capture_log's dict."""
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.utils import capture_log

    _use_in_process_alembic()
    config = _config(course)
    if app_class.__name__ == "GenerateFeedback":
        config.HTMLExporter.template_name = "feedback"
    coursedir = CourseDirectory(config=config)
    for name, value in coursedir_attributes.items():
        setattr(coursedir, name, value)
    app = app_class(coursedir=coursedir, config=config)
    app.log.setLevel(logging.INFO if verbose else logging.ERROR)
    app.force = True
    if hasattr(app, "create_assignment"):
        app.create_assignment = True
    if hasattr(app, "create_student"):
        app.create_student = True
    result = capture_log(app)
    if verbose and result.get("log"):
        print(result["log"], file=sys.stderr)
    return result


# --- release ------------------------------------------------------------------------------------

def default_chapters() -> list[Path]:
    """Every chapter notebook of the course, ``chapters/dl00*.ipynb``."""
    return sorted(CHAPTERS.glob("dl00*.ipynb"))


def release(chapters: list[Path], out: Path, verbose: bool = False) -> list[Path]:
    """Make the course folder ``out`` with one nbgrader assignment (and student version) per chapter.

    Returns:
        The student notebooks, ``out/release/<chapter>/<chapter>.ipynb``.

    Raises:
        CourseworkError: if a chapter breaks the exercise format, nbgrader fails, or a student
            version would leak a solution, a hidden test or a solution marker.
    """
    from nbgrader.converters import GenerateAssignment

    if not chapters:
        raise CourseworkError("no chapters to release")
    problems = [p for path in chapters for p in format_problems(read_chapter(path))]
    if problems:
        raise CourseworkError("fix the chapters' exercises first:\n  " + "\n  ".join(problems))
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(CONFIG_TEMPLATE, out / "nbgrader_config.py")
    released = []
    for path in chapters:
        stem = path.stem
        notebook = strip_solution_markers(nbformat.read(path, as_version=4))
        for cell in notebook.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        source = out / "source" / stem / f"{stem}.ipynb"
        source.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, source)
        result = _run_nbgrader(GenerateAssignment, out, verbose, assignment_id=stem)
        student = out / "release" / stem / f"{stem}.ipynb"
        if not result["success"] or not student.exists():
            raise CourseworkError(f"nbgrader generate_assignment failed for {stem}:\n"
                                  f"{result.get('log', '')}{result.get('error', '')}")
        leaks = student_version_leaks(nbformat.read(student, as_version=4), notebook)
        if leaks:
            student.unlink()
            raise CourseworkError(f"the student version of {stem} leaks:\n  " + "\n  ".join(leaks))
        released.append(student)
    return released


# --- grade --------------------------------------------------------------------------------------

@dataclass
class Graded:
    """One student's result for one chapter."""

    student: str
    chapter: str
    status: str  # "graded", "missing" or "error: ..."
    exercises: list[tuple[str, float, float]]  # (exercise label, points, max_points)

    @property
    def points(self) -> float:
        return sum(points for _, points, _ in self.exercises)

    @property
    def max_points(self) -> float:
        return sum(max_points for _, _, max_points in self.exercises)


def _released_chapters(course: Path) -> list[str]:
    return sorted(p.name for p in (course / "source").iterdir() if (p / f"{p.name}.ipynb").exists()) \
        if (course / "source").is_dir() else []


def find_submissions(submissions: Path, chapters: list[str]) -> tuple[dict[tuple[str, str], Path], list[str]]:
    """Map (student, chapter) -> notebook for ``submissions/<student_id>/<chapter>.ipynb``.

    A file named after the chapter's stem matches it; otherwise a name starting with the chapter's
    ``dlNNNN`` (e.g. a renamed download, ``dl0027 (1).ipynb``) does, when only one file does.

    Returns:
        The mapping and a list of warnings about files that were skipped.
    """
    if not submissions.is_dir():
        raise CourseworkError(f"{submissions} is not a folder of student folders")
    found: dict[tuple[str, str], Path] = {}
    warnings = []
    for folder in sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith(".")):
        student = folder.name
        if not STUDENT_ID.match(student):
            warnings.append(f"skipped {folder}: a student id may hold only letters, digits and _ . @ + -")
            continue
        files = sorted(p for p in folder.glob("*.ipynb"))
        for chapter in chapters:
            exact = [p for p in files if p.stem == chapter]
            prefix = [p for p in files if p.stem.startswith(chapter.split("_")[0])]
            if exact:
                found[student, chapter] = exact[0]
            elif len(prefix) == 1:
                found[student, chapter] = prefix[0]
            elif prefix:
                warnings.append(f"skipped {folder}: {len(prefix)} notebooks could be {chapter}: "
                                f"{[p.name for p in prefix]}")
        used = {path for (s, _), path in found.items() if s == student}
        for path in files:
            if path not in used:
                warnings.append(f"skipped {path}: not a released chapter ({', '.join(chapters)})")
    return found, warnings


def _exercise_of(grade_id: str) -> str:
    return grade_id[: -len("-tests")] if grade_id.endswith("-tests") else grade_id


def _natural(label: str) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", label)]


def _gradebook_scores(course: Path, student: str, chapter: str) -> list[tuple[str, float, float]]:
    from nbgrader.api import Gradebook
    from nbgrader.coursedir import CourseDirectory

    coursedir = CourseDirectory(config=_config(course))
    with Gradebook(coursedir.db_url, coursedir.course_id) as gradebook:
        notebook = gradebook.find_submission_notebook(chapter, chapter, student)
        scores = [(_exercise_of(g.name), float(g.score), float(g.max_score)) for g in notebook.grades]
    return sorted(scores, key=lambda row: _natural(row[0]))


def _chapter_max_points(course: Path, chapter: str) -> list[tuple[str, float, float]]:
    exercises = read_chapter(course / "source" / chapter / f"{chapter}.ipynb").exercises
    return [(e.label, 0.0, float(e.test_points or 0)) for e in exercises]


def grade(course: Path, submissions: Path, out: Path, verbose: bool = False) -> list[Graded]:
    """Autograde every submission, write grades.csv, totals.csv and feedback/ under ``out``.

    Returns:
        One :class:`Graded` per (student, chapter) of the chapters that anyone submitted; a
        chapter a student did not submit is ``"missing"`` with 0 points.
    """
    from nbgrader.converters import Autograde, GenerateFeedback

    chapters = _released_chapters(course)
    if not chapters:
        raise CourseworkError(f"{course} has no released chapters; run the release command first")
    found, warnings = find_submissions(submissions, chapters)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if not found:
        raise CourseworkError(f"no submissions found in {submissions}: expected "
                              f"{submissions}/<student_id>/<chapter>.ipynb with chapter one of {chapters}")
    students = sorted({student for student, _ in found})
    submitted_chapters = sorted({chapter for _, chapter in found})
    results = []
    feedback_dir = out / "feedback"
    for student in students:
        for chapter in submitted_chapters:
            if (student, chapter) not in found:
                results.append(Graded(student, chapter, "missing", _chapter_max_points(course, chapter)))
                continue
            target = course / "submitted" / student / chapter
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            shutil.copyfile(found[student, chapter], target / f"{chapter}.ipynb")
            result = _run_nbgrader(Autograde, course, verbose, assignment_id=chapter, student_id=student)
            if not result["success"]:
                reason = (result.get("log", "") + result.get("error", "")).strip().splitlines()
                status = "error: " + (reason[-1] if reason else "autograde failed")
                results.append(Graded(student, chapter, status, _chapter_max_points(course, chapter)))
                print(f"error: could not grade {found[student, chapter]}: {status}", file=sys.stderr)
                continue
            results.append(Graded(student, chapter, "graded", _gradebook_scores(course, student, chapter)))
            feedback = _run_nbgrader(GenerateFeedback, course, verbose, assignment_id=chapter, student_id=student)
            html = course / "feedback" / student / chapter / f"{chapter}.html"
            if feedback["success"] and html.exists():
                (feedback_dir / student).mkdir(parents=True, exist_ok=True)
                shutil.copyfile(html, feedback_dir / student / f"{chapter}.html")
            else:
                print(f"warning: no feedback for {student} {chapter}: {feedback.get('error', '')}", file=sys.stderr)
    write_csvs(results, out)
    return results


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else round(value, 2)


def write_csvs(results: list[Graded], out: Path) -> None:
    """Write ``out/grades.csv`` (per exercise) and ``out/totals.csv`` (per chapter and per student)."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "grades.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student", "chapter", "exercise", "points", "max_points"])
        for graded in results:
            for label, points, max_points in graded.exercises:
                writer.writerow([graded.student, graded.chapter, label, _number(points), _number(max_points)])
    with open(out / "totals.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student", "chapter", "points", "max_points", "status"])
        for student in sorted({g.student for g in results}):
            own = [g for g in results if g.student == student]
            for graded in own:
                writer.writerow([student, graded.chapter, _number(graded.points), _number(graded.max_points),
                                 graded.status])
            statuses = {g.status for g in own}
            writer.writerow([student, "TOTAL", _number(sum(g.points for g in own)),
                             _number(sum(g.max_points for g in own)),
                             "graded" if statuses == {"graded"} else "incomplete"])


# --- command line -------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[1:]))
    commands = parser.add_subparsers(dest="command", required=True)
    release_parser = commands.add_parser("release", help="make the course folder with the student versions")
    release_parser.add_argument("--out", type=Path, required=True, help="the course folder to create or update")
    release_parser.add_argument("chapters", nargs="*", type=Path,
                                help="chapter notebooks (default: chapters/dl00*.ipynb)")
    grade_parser = commands.add_parser("grade", help="autograde a folder of submissions")
    grade_parser.add_argument("--course", type=Path, required=True, help="the course folder made by release")
    grade_parser.add_argument("--submissions", type=Path, required=True,
                              help="a folder holding <student_id>/<chapter>.ipynb")
    grade_parser.add_argument("--out", type=Path, required=True, help="where grades.csv, totals.csv and feedback/ go")
    for sub in (release_parser, grade_parser):
        sub.add_argument("-v", "--verbose", action="store_true", help="show nbgrader's log")
    args = parser.parse_args(argv)
    # nbgrader's gradebook code trips sqlalchemy's autoflush warnings; they are not the user's concern
    warnings.filterwarnings("ignore", message=".*not in session, add operation along.*")
    os.environ.setdefault("PYTHONHASHSEED", "0")
    os.environ.pop("MPLBACKEND", None)
    try:
        if args.command == "release":
            chapters = [p.resolve() for p in args.chapters] or default_chapters()
            released = release(chapters, args.out.resolve(), args.verbose)
            print(f"released {len(released)} chapters; hand out the student versions:")
            for path in released:
                print(f"  {path}")
        else:
            results = grade(args.course.resolve(), args.submissions.resolve(), args.out.resolve(), args.verbose)
            for graded in results:
                print(f"{graded.student:>16}  {graded.chapter:<40} {_number(graded.points):>5} / "
                      f"{_number(graded.max_points):<5} {graded.status}")
            print(f"wrote {args.out / 'grades.csv'}, {args.out / 'totals.csv'} and {args.out / 'feedback'}/")
    except CourseworkError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
