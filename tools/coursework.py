"""The chapters as coursework: release student versions with nbgrader, then grade submissions in a sandbox.

    python tools/coursework.py release --out course/
    python tools/coursework.py grade --course course/ --submissions submissions/ --out grades/
    python tools/coursework.py gradescope --course course/ --out gradescope/ [chapter ...]

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

It grades each notebook exercise by exercise with ``transformer_course.course.grading`` (not nbgrader's
autograde): the student's cells run in a bubblewrap sandbox (a temporary folder, no network, no
access to the course folder, other submissions or the hidden tests; limits on time and memory),
and each exercise's test cell, hidden tests included, runs in the grading process on the plain
values the sandbox hands back. It writes

    grades/grades.csv     student, chapter, exercise, points, max_points, result (one row per exercise)
    grades/totals.csv     student, chapter, points, max_points, status, file: one row per submitted
                          chapter, per chapter a student did not submit ("missing"), per file or
                          folder that was not graded (with the reason), and a "TOTAL" per student
    grades/feedback/<student_id>/<chapter>.html   per exercise: result, points, a message
    grades/similarity.csv chapter, student, similar_to (another student or package:<file>), the share of
                          each one's code in common, the common tokens: every pair with at least half
                          of either side's own code in common (copydetect; never a grade, a pointer)
    grades/similarity/<chapter>.html   the matching passages side by side

and prints a summary. Options: ``--jobs N`` (parallel notebooks), ``--timeout S`` (per exercise,
default 60), ``--memory-mb``, and ``--no-sandbox`` (only for submissions you trust: without it,
grading refuses to run student code when bubblewrap is missing or broken).

``gradescope`` writes ``gradescope/<chapter>_gradescope.zip`` per chapter: the autograder for a
Gradescope programming assignment, grading with the same grader and sandbox (see
``transformer_course.course.gradescope``).
"""

from __future__ import annotations

import argparse
import csv
import logging
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"
CONFIG_TEMPLATE = Path(__file__).resolve().parent / "nbgrader_config.py"
STUDENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+-]{0,63}")  # always used with fullmatch

sys.path.insert(0, str(ROOT / "src"))  # the tool also works before `pip install -e .`
from transformer_course.course.coursework import (  # noqa: E402
    format_problems, read_chapter, strip_solution_markers, student_version_leaks)
from transformer_course.course.feedback import csv_cell, feedback_html, safe_text  # noqa: E402
from transformer_course.course.plans import PINNED_REF  # noqa: E402
from transformer_course.course.sandbox import walk_files  # noqa: E402


class CourseworkError(Exception):
    """A problem the instructor must fix (malformed chapter, leaking release, bad submissions)."""


# --- the install cell: pinned to the package that grades it ------------------------------------

PACKAGE_PATHS = ("src", "pyproject.toml")
# The install cell's pin line, as the grader reads it (plans.PINNED_REF): a release writes only pins the
# grader will recognise when a student's notebook pins another commit.
REF_LINE = PINNED_REF
TORCH_BOUND = re.compile(r"^torch\s*>=\s*(?P<version>[0-9][0-9.]*)\s*$")
# Put into the install cell right after the COURSE_REF line: one line of output when the runtime's
# PyTorch is older than the course's bound (Colab keeps its own PyTorch).
TORCH_CHECK = """\
TORCH_MIN = "{minimum}"  # the oldest PyTorch the course runs on (pyproject.toml; tools/coursework.py)
try:
    from importlib.metadata import version as _installed_version
    _torch = _installed_version("torch")
except Exception:  # no PyTorch at all: the install below brings one
    _torch = None
if _torch and tuple(int(x) for x in re.findall(r"\\d+", _torch)[:2]) < tuple(int(x) for x in TORCH_MIN.split(".")[:2]):
    print(f'PyTorch {{_torch}} here is older than {{TORCH_MIN}}, the oldest this course runs on: pip install -U '
          f'"torch>={{TORCH_MIN}}" (in Colab the install below does it), then restart the kernel.')
"""


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def package_ref() -> str:
    """The last commit that changed the package (``src/``, ``pyproject.toml``): what a release pins."""
    try:
        if _git("status", "--porcelain", "--", *PACKAGE_PATHS):
            raise CourseworkError("src/ or pyproject.toml has uncommitted changes; commit them first (the student "
                                  "notebooks pin the commit their package comes from), or pass --ref")
        return _git("log", "-1", "--format=%H", "HEAD", "--", *PACKAGE_PATHS)
    except (subprocess.CalledProcessError, FileNotFoundError):
        raise CourseworkError("this is not a git checkout of the course: pass --ref (a commit or an edition tag "
                              "such as v2026.12) to say which package the student notebooks install") from None


def torch_minimum(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """The lower bound of ``torch`` in the package's dependencies (``torch>=X``)."""
    dependencies = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"]
    for dependency in dependencies:
        match = TORCH_BOUND.match(dependency)
        if match:
            return match["version"]
    raise CourseworkError(f"{pyproject} has no torch>=X dependency")


def with_torch_check(source: str, minimum: str) -> str:
    """The install cell with the PyTorch check after its ``COURSE_REF`` line (and ``import re``)."""
    lines = source.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if REF_LINE.match(line.rstrip("\n")))
    check = TORCH_CHECK.format(minimum=minimum)
    if not re.search(r"^import re$", source, re.MULTILINE):
        check = "import re\n" + check
    return "".join(lines[: at + 1]) + check + "".join(lines[at + 1:])


def has_install_cell(notebook) -> bool:
    """Whether the notebook's first code cell is an install cell (it has a ``COURSE_REF = "..."`` line)."""
    first = next((c for c in notebook.cells if c.cell_type == "code"), None)
    return first is not None and bool(REF_LINE.search(first.source))


def pin_install_cell(notebook, ref: str) -> None:
    """Pin the first code cell's ``COURSE_REF`` to ``ref`` and add the PyTorch check (in place).

    The student notebook that is handed out, opened in Colab, downloaded from the site and graded is
    one notebook: its install cell installs the package at the commit (or edition tag) that grades it.
    """
    if not re.fullmatch(r"[0-9A-Za-z._/-]{1,100}", ref):
        raise CourseworkError(f"--ref must be a commit or a tag (letters, digits, '.', '_', '/', '-'), got {ref!r}")
    install = next(c for c in notebook.cells if c.cell_type == "code")
    what = "commit" if re.fullmatch(r"[0-9a-f]{40}", ref) else "release"
    install.source = REF_LINE.sub(f'COURSE_REF = "{ref}"  # the {what} whose package made the outputs below',
                                  install.source, count=1)
    install.source = with_torch_check(install.source, torch_minimum())


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


def release(chapters: list[Path], out: Path, verbose: bool = False, ref: str | None = None) -> list[Path]:
    """Make the course folder ``out`` with one nbgrader assignment (and student version) per chapter.

    A chapter's install cell is pinned to ``ref`` (default: the last commit that changed the package,
    :func:`package_ref`), as in the student edition (``student/``), so the two hold the same code cells.

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
        version = nbformat.read(student, as_version=4)
        leaks = student_version_leaks(version, notebook)
        if leaks:
            student.unlink()
            raise CourseworkError(f"the student version of {stem} leaks:\n  " + "\n  ".join(leaks))
        if has_install_cell(version):
            ref = ref or package_ref()
            pin_install_cell(version, ref)
            nbformat.write(version, student)
        released.append(student)
    return released


# --- grade ------------------------------------------------------------------------------------

NO_STUDENT = "(no student folder)"


@dataclass
class Graded:
    """One row of totals.csv: a student's chapter, graded or not, with a readable status.

    ``exercises`` holds (label, points, max_points, result) rows for grades.csv; it is empty for
    rows that are not a chapter attempt (a stray file, a notebook in the wrong place).
    """

    student: str
    chapter: str
    status: str
    exercises: list[tuple[str, float, float, str]] = field(default_factory=list)
    file: str = ""
    seconds: float = 0.0
    cpu_seconds: float = 0.0

    @property
    def points(self) -> float:
        return sum(points for _, points, _, _ in self.exercises)

    @property
    def max_points(self) -> float:
        return sum(max_points for _, _, max_points, _ in self.exercises)


def _released_chapters(course: Path) -> list[str]:
    return sorted(p.name for p in (course / "source").iterdir() if (p / f"{p.name}.ipynb").exists()) \
        if (course / "source").is_dir() else []


def _chapter_of(name: str, chapters: list[str]) -> str | None:
    """The chapter a notebook file name stands for: its stem, or a name starting with its dlNNNN."""
    stem = Path(name).stem
    if stem in chapters:
        return stem
    matches = [c for c in chapters if stem.startswith(c.split("_")[0])]
    return matches[0] if len(matches) == 1 else None


def find_submissions(submissions: Path, chapters: list[str]) -> tuple[dict[tuple[str, str], Path], list[Graded]]:
    """Map (student, chapter) -> notebook for ``submissions/<student_id>/<chapter>.ipynb``.

    A file named after the chapter's stem matches it; so does a name starting with the chapter's
    ``dlNNNN`` (e.g. a renamed download, ``dl0027 (1).ipynb``). Every other file and folder under
    ``submissions`` gets a row that says why it was not graded.

    Returns:
        The notebooks to grade and the rows for everything else.
    """
    if not submissions.is_dir():
        raise CourseworkError(f"{submissions} is not a folder of student folders")
    found: dict[tuple[str, str], Path] = {}
    rows: list[Graded] = []

    def relative(path: Path) -> str:
        return safe_text(path.relative_to(submissions), 500)

    for entry in sorted(submissions.iterdir()):
        kind = _kind(entry)
        if entry.name.startswith("."):
            rows.append(Graded(NO_STUDENT, "", "ignored: a hidden file or folder", file=relative(entry)))
        elif kind == "link":
            rows.append(Graded(NO_STUDENT, "", "refused: a symbolic link (links are never followed; copy the "
                               "files themselves)", file=relative(entry)))
        elif kind != "folder":
            chapter = _chapter_of(entry.name, chapters) if entry.suffix == ".ipynb" else None
            rows.append(Graded(NO_STUDENT, chapter or "", "wrong place: a file at the top of the submissions "
                               "folder belongs to no student; move it into submissions/<student_id>/",
                               file=relative(entry)))
        elif not STUDENT_ID.fullmatch(entry.name):
            rows.append(Graded(NO_STUDENT, "", "invalid student folder name: use only letters, digits and "
                               "_ . @ + - (nothing in it was graded)", file=relative(entry)))
        else:
            _student_folder(entry, chapters, found, rows, relative)
    return found, rows


def _kind(path: Path) -> str:
    """"link", "folder", "file" (regular) or "special" (FIFO, device, socket), never following a link."""
    import stat

    mode = os.lstat(path).st_mode
    if stat.S_ISLNK(mode):
        return "link"
    if stat.S_ISDIR(mode):
        return "folder"
    return "file" if stat.S_ISREG(mode) else "special"


def _student_folder(folder: Path, chapters: list[str], found: dict, rows: list[Graded], relative) -> None:
    student = folder.name
    candidates: dict[str, list[Path]] = {}
    entries = sorted(folder.iterdir())
    if not entries:
        rows.append(Graded(student, "", "empty folder: no notebook to grade", file=relative(folder)))
    for entry in entries:
        kind = _kind(entry)
        chapter = _chapter_of(entry.name, chapters) if entry.suffix == ".ipynb" else None
        if entry.name.startswith("."):
            rows.append(Graded(student, "", "ignored: a hidden file or folder", file=relative(entry)))
        elif kind == "link":
            rows.append(Graded(student, chapter or "", "refused: a symbolic link (links are never followed; "
                               "submit the notebook itself)", file=relative(entry)))
        elif kind == "special":
            rows.append(Graded(student, chapter or "", "refused: not a regular file (a pipe, device or socket)",
                               file=relative(entry)))
        elif kind == "folder":
            inside = walk_files(entry, limit=100)
            for name in inside or [""]:
                path = entry / name if name else entry
                chapter = _chapter_of(path.name, chapters) if path.suffix == ".ipynb" else None
                rows.append(Graded(student, chapter or "", f"wrong place: inside the subfolder {safe_text(entry.name, 200)}/; "
                                   f"put notebooks directly in submissions/{student}/ (not graded)",
                                   file=relative(path)))
        elif entry.suffix != ".ipynb":
            rows.append(Graded(student, "", "not a notebook (not graded)", file=relative(entry)))
        elif chapter is None:
            rows.append(Graded(student, "", "not a released chapter: name the notebook after one of "
                               f"{', '.join(chapters)} (not graded)", file=relative(entry)))
        else:
            candidates.setdefault(chapter, []).append(entry)
    for chapter, paths in candidates.items():
        if len(paths) == 1:
            found[student, chapter] = paths[0]
        else:
            names = ", ".join(safe_text(p.name, 200) for p in paths)
            rows.append(Graded(student, chapter, f"two candidates for {chapter}: {names}; keep one "
                               "and grade again (none was graded)", file=", ".join(relative(p) for p in paths)))


def handed_in(found: dict[tuple[str, str], Path], rows: list[Graded]) -> list[str]:
    """The chapters more than half of the students submitted: the default list of chapters being graded.

    A week's hand-in, without the instructor naming it; more than half, so that no single student's
    notebook can add a chapter to everyone else's list (and a "missing" row to their totals).
    """
    submitted: dict[str, set[str]] = {}
    for student, chapter in found:
        submitted.setdefault(chapter, set()).add(student)
    for row in rows:  # two candidate notebooks for one chapter: still handed in
        if row.chapter and row.status.startswith("two candidates"):
            submitted.setdefault(row.chapter, set()).add(row.student)
    students = {student for student, _ in found} | {r.student for r in rows if r.student != NO_STUDENT}
    return sorted(chapter for chapter, who in submitted.items() if 2 * len(who) > len(students))


def _chapter_max_points(course: Path, chapter: str) -> list[tuple[str, float, float, str]]:
    exercises = read_chapter(course / "source" / chapter / f"{chapter}.ipynb").exercises
    return [(e.label, 0.0, float(e.test_points or 0), "not graded") for e in exercises]


def grade(course: Path, submissions: Path, out: Path, verbose: bool = False, jobs: int = 1,
          timeout: float = 60.0, memory_mb: int = 6144, sandbox: bool = True,
          chapters: list[str] | None = None, notebook_mb: int = 20) -> list[Graded]:
    """Grade every submission exercise by exercise in a sandbox; write grades.csv, totals.csv, feedback/.

    Args:
        jobs: notebooks graded at once (each in its own processes, with its own sandbox uid and cgroup).
        timeout: seconds per exercise (its cells, a replay of earlier cells, its checks).
        memory_mb: memory limit of each notebook's sandbox.
        sandbox: False runs student code without bubblewrap: only for trusted submissions.
        chapters: the chapters being graded (the instructor's list: every student gets a row for
            each, "missing" if not submitted); default: :func:`handed_in`, the released chapters
            more than half of the students submitted. A notebook of another released chapter is
            reported, not graded.
        notebook_mb: larger submissions are refused unread.

    Returns:
        One :class:`Graded` per totals.csv row, the TOTAL rows excepted: each submitted chapter
        (graded, invalid, timed out...), each chapter a student did not submit ("missing"), and
        each file or folder that was not graded, with the reason. The files are written even when
        grading stops on an error.
    """
    from transformer_course.course.grading import Limits, sandbox_problem

    released = _released_chapters(course)
    if not released:
        raise CourseworkError(f"{course} has no released chapters; run the release command first")
    unknown = [c for c in (chapters or []) if c not in released]
    if unknown:
        raise CourseworkError(f"not released in {course}: {', '.join(unknown)}")
    for inside, outside, what in ((out, submissions, "--out"), (course, submissions, "--course")):
        if inside.resolve() == outside.resolve() or outside.resolve() in inside.resolve().parents:
            raise CourseworkError(f"{what} {inside} lies inside {outside}; keep the course, the submissions "
                                  "and the grades in separate folders")
    found, rows = find_submissions(submissions, released)
    due = sorted(set(chapters)) if chapters is not None else handed_in(found, rows)
    if chapters is None:
        print(f"grading the chapters more than half of the students handed in (choose with --chapters): "
              f"{', '.join(due) or 'none'}")
    for (student, chapter) in sorted(found):
        if chapter not in due:
            rows.append(Graded(student, chapter, "not graded: this chapter is not in the list of chapters "
                               "being graded (--chapters)", file=safe_text(found.pop((student, chapter))
                                                                            .relative_to(submissions), 500)))
    submitted = dict(found)  # the chapters being graded, compared for copying after grading
    limits = Limits(timeout=timeout, memory_mb=memory_mb, notebook_mb=notebook_mb,
                    sandbox="bwrap" if sandbox else "none")
    results: list[Graded] = []
    started = time.monotonic()
    try:
        for row in rows:  # a chapter with two candidate notebooks counts as attempted, at 0 points
            if row.status.startswith("two candidates") and row.chapter in due:
                row.exercises = _chapter_max_points(course, row.chapter)
        results += rows
        refused = sandbox_problem() if sandbox and found else None
        shutil.rmtree(out / "feedback", ignore_errors=True)  # a re-run writes the same files afresh
        if refused:
            print(f"error: the sandbox cannot run: {refused}. Install bubblewrap, or pass --no-sandbox "
                  "if (and only if) you trust every submission.", file=sys.stderr)
            for (student, chapter), path in sorted(found.items()):
                results.append(Graded(student, chapter, f"sandbox refused: {refused}",
                                      _chapter_max_points(course, chapter), safe_text(path.relative_to(submissions))))
            found = {}
        elif not sandbox and found:
            print("warning: grading WITHOUT the sandbox (--no-sandbox): student code runs with your permissions",
                  file=sys.stderr)
        results += _run_jobs(course, submissions, found, limits, jobs, verbose, out)
    finally:
        attempted = {(g.student, g.chapter) for g in results if g.exercises}
        students = sorted({g.student for g in results if g.student != NO_STUDENT})
        for student in students:
            for chapter in due:
                if (student, chapter) not in attempted:
                    results.append(Graded(student, chapter, "missing", _chapter_max_points(course, chapter)))
        results.sort(key=lambda g: (g.student, g.chapter, g.file))
        write_csvs(results, out)
    _print_summary(results, time.monotonic() - started, jobs)
    report_similarity(course, submitted, out, limits.notebook_mb * 2**20)
    return results


def report_similarity(course: Path, found: dict[tuple[str, str], Path], out: Path, max_bytes: int) -> None:
    """Write ``out/similarity.csv`` and ``out/similarity/<chapter>.html``: copying reported, not guessed.

    Each chapter's submissions are compared with each other and with the package's source
    (``course.similarity``); the notebooks are read as data (bounded, as the grader reads them),
    never run. A file that cannot be read is left out: its row in totals.csv says why.
    """
    from transformer_course.course.grading import RefusedFile, read_regular_file
    from transformer_course.course.similarity import compare_chapter, write_similarity_csv

    matches = []
    shutil.rmtree(out / "similarity", ignore_errors=True)
    for chapter in sorted({chapter for _, chapter in found}):
        notebooks = {}
        for (student, other_chapter), path in found.items():
            if other_chapter == chapter:
                try:
                    notebooks[student] = read_regular_file(path, max_bytes)
                except RefusedFile:
                    continue
        matches += compare_chapter(chapter, notebooks, course / "release" / chapter / f"{chapter}.ipynb",
                                   report=out / "similarity" / f"{chapter}.html")
    write_similarity_csv(matches, out / "similarity.csv")
    print(f"similarity: {len(matches)} pair(s) with at least half their code in common "
          f"(similarity.csv; the passages side by side in similarity/<chapter>.html)")


def _run_jobs(course: Path, submissions: Path, found: dict, limits, jobs: int, verbose: bool, out: Path) -> list[Graded]:
    """Grade the notebooks, ``jobs`` at a time, each in a worker of its own; write the feedback pages.

    A file is read once, as a regular file no larger than the limit; a worker that dies costs only
    its own notebook, whose row says what happened."""
    from transformer_course.course.grading import RefusedFile, Task, grade_many, notebook_budget, read_regular_file

    rows, tasks = [], []
    for (student, chapter), path in sorted(found.items()):
        file = safe_text(path.relative_to(submissions), 500)
        try:
            data = read_regular_file(path, limits.notebook_mb * 2**20)
        except RefusedFile as error:
            rows.append(Graded(student, chapter, str(error), _chapter_max_points(course, chapter), file))
            continue
        exercises = len(_chapter_max_points(course, chapter))
        tasks.append(Task((student, chapter, file), data, course / "source" / chapter / f"{chapter}.ipynb",
                          course / "release" / chapter, notebook_budget(limits, exercises)))
    if not tasks:
        return rows

    def done(key) -> None:
        if verbose:
            print(f"graded {key[0]} {key[1]}", file=sys.stderr)

    graded, cgroup_note = grade_many(tasks, limits, jobs, done)
    if cgroup_note and limits.sandbox != "none":
        print(f"note: no cgroup per sandbox here ({cgroup_note}); each sandbox is bounded by its own uid's "
              "process cap and per-process memory and CPU-time limits only", file=sys.stderr)
    for (student, chapter, file), result in sorted(graded.items()):
        if isinstance(result, str) or not result.exercises:
            status = result if isinstance(result, str) else result.status
            rows.append(Graded(student, chapter, safe_text(status, 300), _chapter_max_points(course, chapter), file))
            continue
        rows.append(Graded(student, chapter, safe_text(result.status, 300),
                           [(e.label, e.points, e.max_points, e.result) for e in result.exercises],
                           file, result.seconds, result.cpu_seconds))
        feedback = out / "feedback" / student
        feedback.mkdir(parents=True, exist_ok=True)
        (feedback / f"{chapter}.html").write_text(feedback_html(student, chapter, result), encoding="utf-8",
                                                  errors="backslashreplace")
    return rows


def _print_summary(results: list[Graded], seconds: float, jobs: int) -> None:
    graded = [g for g in results if g.seconds > 0]
    counts: dict[str, int] = {}
    for g in results:
        kind = re.split(r"[:;]| for ", g.status)[0]
        counts[kind] = counts.get(kind, 0) + 1
    print(f"summary: {len(results)} rows: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    if graded:
        times = sorted(g.seconds for g in graded)
        cpu = sorted(g.cpu_seconds for g in graded)
        print(f"summary: {len(graded)} notebooks graded in {seconds:.0f} s with {jobs} job(s); per notebook "
              f"median {times[len(times) // 2]:.1f} s (CPU {cpu[len(cpu) // 2]:.1f} s), slowest {times[-1]:.1f} s")
    for g in results:
        if g.status != "graded":
            where = f" ({g.file})" if g.file else ""
            print(f"  {g.student} {g.chapter or '-'}{where}: {g.status}")
    students = sorted({g.student for g in results if g.student != NO_STUDENT and STUDENT_ID.fullmatch(g.student)})
    if students:
        print("summary per student (points, chapters graded of those due):")
    for student in students:
        own = [g for g in results if g.student == student and g.chapter]
        chapters = sorted({g.chapter for g in own if g.exercises})
        done = sorted({g.chapter for g in own if g.status.startswith("graded")})
        points, most = sum(g.points for g in own), sum(g.max_points for g in own)
        print(f"  {student}: {_number(points)} / {_number(most)} points, {len(done)} of {len(chapters)} chapters graded")


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else round(value, 2)


class _SafeWriter:
    """A csv writer whose text cells cannot be read as spreadsheet formulas (see ``csv_cell``)."""

    def __init__(self, handle) -> None:
        self.writer = csv.writer(handle)

    def writerow(self, row: list) -> None:
        self.writer.writerow([csv_cell(value) for value in row])


def write_csvs(results: list[Graded], out: Path) -> None:
    """Write ``out/grades.csv`` (per exercise) and ``out/totals.csv`` (per row and per student)."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "grades.csv", "w", newline="", encoding="utf-8", errors="backslashreplace") as handle:
        writer = _SafeWriter(handle)
        writer.writerow(["student", "chapter", "exercise", "points", "max_points", "result"])
        for graded in results:
            for label, points, max_points, result in graded.exercises:
                writer.writerow([graded.student, graded.chapter, label, _number(points), _number(max_points), result])
    with open(out / "totals.csv", "w", newline="", encoding="utf-8", errors="backslashreplace") as handle:
        writer = _SafeWriter(handle)
        writer.writerow(["student", "chapter", "points", "max_points", "status", "file"])
        for student in sorted({g.student for g in results}):
            own = [g for g in results if g.student == student]
            for graded in own:
                writer.writerow([student, graded.chapter, _number(graded.points), _number(graded.max_points),
                                 graded.status, graded.file])
            if student != NO_STUDENT and STUDENT_ID.fullmatch(student):
                complete = all(g.status.startswith("graded") for g in own)  # time-outs are graded too
                writer.writerow([student, "TOTAL", _number(sum(g.points for g in own)),
                                 _number(sum(g.max_points for g in own)), "graded" if complete else "incomplete", ""])


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
    release_parser.add_argument("--ref", default=None,
                                help="the commit or edition tag the student notebooks install the package at "
                                     "(default: the last commit that changed src/ or pyproject.toml)")
    grade_parser = commands.add_parser("grade", help="grade a folder of submissions, each in a sandbox")
    grade_parser.add_argument("--course", type=Path, required=True, help="the course folder made by release")
    grade_parser.add_argument("--submissions", type=Path, required=True,
                              help="a folder holding <student_id>/<chapter>.ipynb")
    grade_parser.add_argument("--out", type=Path, required=True, help="where grades.csv, totals.csv and feedback/ go")
    grade_parser.add_argument("--jobs", type=int, default=1, help="notebooks graded in parallel (default 1)")
    grade_parser.add_argument("--timeout", type=float, default=60.0,
                              help="seconds per exercise, its cells and its checks (default 60)")
    grade_parser.add_argument("--memory-mb", type=int, default=6144, help="memory limit per notebook (default 6144)")
    grade_parser.add_argument("--chapters", nargs="+", default=None,
                              help="the chapters being graded (default: the released chapters more than half of "
                                   "the students submitted); each student gets a row for each, 'missing' if "
                                   "not submitted")
    grade_parser.add_argument("--notebook-mb", type=int, default=20, help="largest submission read (default 20)")
    grade_parser.add_argument("--no-sandbox", action="store_true",
                              help="run student code WITHOUT bubblewrap; only for submissions you trust")
    gradescope_parser = commands.add_parser(
        "gradescope", help="write per chapter the zip Gradescope's autograder takes (same grader, same sandbox)")
    gradescope_parser.add_argument("--course", type=Path, required=True, help="the course folder made by release")
    gradescope_parser.add_argument("--out", type=Path, required=True, help="where <chapter>_gradescope.zip go")
    gradescope_parser.add_argument("--timeout", type=float, default=60.0,
                                   help="seconds per exercise, its cells and its checks (default 60)")
    gradescope_parser.add_argument("--memory-mb", type=int, default=6144, help="memory limit (default 6144)")
    gradescope_parser.add_argument("--visibility", default="visible",
                                   choices=("visible", "after_due_date", "after_published", "hidden"),
                                   help="when students see their results on Gradescope (default: visible, at once)")
    gradescope_parser.add_argument("chapters", nargs="*", help="chapter stems (default: every released chapter)")
    for sub in (release_parser, grade_parser, gradescope_parser):
        sub.add_argument("-v", "--verbose", action="store_true", help="show nbgrader's log")
    args = parser.parse_args(argv)
    # nbgrader's gradebook code trips sqlalchemy's autoflush warnings; they are not the user's concern
    warnings.filterwarnings("ignore", message=".*not in session, add operation along.*")
    os.environ.setdefault("PYTHONHASHSEED", "0")
    os.environ.pop("MPLBACKEND", None)
    try:
        if args.command == "release":
            chapters = [p.resolve() for p in args.chapters] or default_chapters()
            released = release(chapters, args.out.resolve(), args.verbose, ref=args.ref)
            print(f"released {len(released)} chapters; hand out the student versions:")
            for path in released:
                print(f"  {path}")
        elif args.command == "gradescope":
            from transformer_course.course.gradescope import build_autograder

            course = args.course.resolve()
            chapters = args.chapters or _released_chapters(course)
            if not chapters:
                raise CourseworkError(f"{course} has no released chapters; run the release command first")
            for chapter in chapters:
                try:
                    path = build_autograder(course, chapter, args.out.resolve(), args.timeout, args.memory_mb,
                                            args.visibility)
                except ValueError as error:
                    raise CourseworkError(str(error)) from None
                print(f"wrote {path}: upload it as the autograder of a Gradescope programming assignment")
        else:
            results = grade(args.course.resolve(), args.submissions.resolve(), args.out.resolve(), args.verbose,
                            jobs=args.jobs, timeout=args.timeout, memory_mb=args.memory_mb,
                            sandbox=not args.no_sandbox, chapters=args.chapters, notebook_mb=args.notebook_mb)
            print(f"wrote {args.out / 'grades.csv'}, {args.out / 'totals.csv'} and {args.out / 'feedback'}/")
            if any(g.status.startswith("sandbox refused") for g in results):
                return 1
    except CourseworkError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
