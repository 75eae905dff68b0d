"""The chapters as coursework: read their exercises, objectives and points, and check student versions.

Every chapter ends with 2-4 exercises in one fixed format (see CONTRIBUTING.md, "Exercises"): an
``{exercise}`` markdown cell whose body starts with ``**N points · objectives i, j.**``, then a
``solution-marker`` cell (``{solution-start}``), the nbgrader solution cell
(``### BEGIN SOLUTION`` ... ``### END SOLUTION``), a ``solution-marker`` cell (``{solution-end}``)
and the nbgrader test cell (``### BEGIN HIDDEN TESTS`` ... ``### END HIDDEN TESTS``).

This module reads that format from the ``.ipynb`` files (through :mod:`.ipynb`), so that

* the instructor page can print which exercise assesses which learning objective, for how many
  points (:func:`exercise_table`, :func:`chapter_table`);
* the tests can check every chapter's exercises (:func:`format_problems`);
* ``tools/coursework.py`` can refuse a malformed chapter before release and prove that a student
  version leaks nothing (:func:`strip_solution_markers`, :func:`student_version_leaks`).

Grading itself (nbgrader) lives in ``tools/coursework.py``; this module needs only the standard
library and pandas.
"""

from __future__ import annotations

import ast
import builtins
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from transformer_course._exhibit import exhibit
from .ipynb import cell_source, cell_tags, chapter_title, read_notebook

SOLUTION_MARKER_TAG = "solution-marker"
"""Tag of the markdown cells that only carry the website's ``{solution-start}``/``{solution-end}``."""

LEAK_PATTERNS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS",
                 "{solution-start}", "{solution-end}")
"""Text that must never appear in a student version."""

_EXERCISE_FENCE = re.compile(r"^(`{3,}|:{3,})\{exercise\}[ \t]*(?P<title>.*)$", re.MULTILINE)
_LABEL = re.compile(r"^:label:[ \t]*(?P<label>\S+)[ \t]*$", re.MULTILINE)
_HEADER = re.compile(r"\*\*(?P<points>\d+)\s+points?\s+·\s+objectives?\s+(?P<objectives>\d+(?:\s*(?:,|and)\s*\d+)*)\.\*\*")
_OBJECTIVE = re.compile(r"^(?P<number>\d+)\.\s+(?P<text>.+)$")
_STUDY_TIME = re.compile(r"\*\*Estimated study time:?\*\*:?\s*(?P<time>.+)")


@dataclass(frozen=True)
class Exercise:
    """One exercise of a chapter, as read from its five cells.

    Attributes:
        chapter: the chapter's notebook stem, e.g. ``"dl0036_encoder_vs_decoder"``.
        label: ``"dlNNNN-exK"``, from the ``:label:`` option of the ``{exercise}`` cell.
        title: the exercise's title (the text after ``{exercise}``).
        points: N from the ``**N points · objectives i, j.**`` header (None if the header is missing).
        objectives: the objective numbers i, j of the header.
        test_points: the ``points`` of the nbgrader test cell ``<label>-tests`` (None if absent).
        cell_index: index of the ``{exercise}`` cell in the notebook.
    """

    chapter: str
    label: str
    title: str
    points: int | None
    objectives: tuple[int, ...]
    test_points: float | None
    cell_index: int


@dataclass(frozen=True)
class Chapter:
    """A chapter notebook's coursework facts: title, numbered objectives, study time, exercises.

    Attributes:
        path: the ``.ipynb`` file.
        title: the text of the first ``# `` heading.
        objectives: objective number -> objective text (the numbered list after
            ``**Learning objectives.**``).
        study_time: the text after ``**Estimated study time:**`` (None if missing).
        exercises: the exercises, in notebook order.
        cells: the notebook's cells (JSON dicts), for the format checks.
    """

    path: Path
    title: str
    objectives: dict[int, str]
    study_time: str | None
    exercises: tuple[Exercise, ...]
    cells: list[dict[str, Any]] = field(repr=False, default_factory=list)

    @property
    def stem(self) -> str:
        """The notebook's file name without ``.ipynb``; also its nbgrader assignment name."""
        return self.path.stem

    @property
    def number(self) -> str | None:
        """The four digits NNNN of a ``dlNNNN_...`` stem."""
        match = re.match(r"dl(\d{4})", self.stem)
        return match.group(1) if match else None


def nbgrader_metadata(cell: dict[str, Any]) -> dict[str, Any]:
    """The cell's ``metadata.nbgrader`` (empty if none)."""
    return dict(cell.get("metadata", {}).get("nbgrader", {}))


def _parse_objectives(markdown: str) -> dict[int, str]:
    """The numbered list after ``**Learning objectives.**`` (continuation lines are joined)."""
    _, _, after = markdown.partition("**Learning objectives.**")
    objectives: dict[int, str] = {}
    current: int | None = None
    after_blank = False
    for line in after.splitlines():
        stripped = line.strip()
        match = _OBJECTIVE.match(stripped)
        if match:
            current, after_blank = int(match.group("number")), False
            objectives[current] = match.group("text").strip()
        elif current is None:
            continue  # the lead-in, "After this chapter you can:"
        elif not stripped:
            after_blank = True
        elif after_blank or stripped.startswith("**"):
            break  # the list has ended
        else:
            objectives[current] += " " + stripped  # a wrapped line of the same objective
    return objectives


def _parse_header_objectives(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", text))


def read_chapter(path: str | Path) -> Chapter:
    """Read a chapter notebook's title, objectives, study time and exercises.

    Args:
        path: a chapter ``.ipynb``.

    Returns:
        The :class:`Chapter`; malformed parts are recorded as None/empty, and
        :func:`format_problems` says what is wrong.
    """
    path = Path(path)
    cells = read_notebook(path)["cells"]
    title, objectives, study_time = chapter_title(cells, ""), {}, None
    tests = {nbgrader_metadata(c).get("grade_id"): nbgrader_metadata(c) for c in cells
             if nbgrader_metadata(c).get("grade")}
    exercises = []
    for index, cell in enumerate(cells):
        if cell.get("cell_type") != "markdown":
            continue
        source = cell_source(cell)
        if not objectives and "**Learning objectives.**" in source:
            objectives = _parse_objectives(source)
        if study_time is None and (time := _STUDY_TIME.search(source)):
            study_time = time.group("time").strip()
        fence = _EXERCISE_FENCE.search(source)
        if not fence:
            continue
        label_match = _LABEL.search(source)
        label = label_match.group("label") if label_match else ""
        header = _HEADER.search(source)
        test = tests.get(f"{label}-tests", {})
        exercises.append(Exercise(
            chapter=path.stem,
            label=label,
            title=fence.group("title").strip(),
            points=int(header.group("points")) if header else None,
            objectives=_parse_header_objectives(header.group("objectives")) if header else (),
            test_points=test.get("points"),
            cell_index=index,
        ))
    return Chapter(path=path, title=title, objectives=objectives, study_time=study_time,
                   exercises=tuple(exercises), cells=cells)


def _exercise_cell_problems(chapter: Chapter, exercise: Exercise) -> list[str]:
    """Problems with the five cells of one exercise (exercise, marker, solution, marker, tests)."""
    problems: list[str] = []
    where = f"{chapter.stem} {exercise.label or f'exercise at cell {exercise.cell_index}'}"
    cells = chapter.cells[exercise.cell_index: exercise.cell_index + 5]
    if len(cells) < 5:
        return [f"{where}: expected 5 cells (exercise, solution-start, solution, solution-end, tests), "
                f"found {len(cells)}"]
    body = cell_source(cells[0])
    body_text = body[_LABEL.search(body).end():].lstrip() if _LABEL.search(body) else body
    if not _HEADER.match(body_text):
        problems.append(f"{where}: the exercise body must start with '**N points · objectives i, j.**'")
    start, solution, end, tests = cells[1:]
    for marker, directive in ((start, "{solution-start}"), (end, "{solution-end}")):
        if marker.get("cell_type") != "markdown" or SOLUTION_MARKER_TAG not in cell_tags(marker):
            problems.append(f"{where}: the {directive} cell must be a markdown cell tagged "
                            f"'{SOLUTION_MARKER_TAG}'")
        if directive not in cell_source(marker):
            problems.append(f"{where}: expected a {directive} cell after the "
                            f"{'exercise' if directive == '{solution-start}' else 'solution'}")
    if exercise.label and not re.search(r"\{solution-start\}[ \t]*" + re.escape(exercise.label) + r"\s",
                                        cell_source(start) + "\n"):
        problems.append(f"{where}: the solution-start cell must name the label {exercise.label}")
    if ":class: dropdown" not in cell_source(start):
        problems.append(f"{where}: the solution-start cell needs ':class: dropdown'")
    for cell, role, graded, markers in ((solution, "solution", False, "SOLUTION"),
                                        (tests, "tests", True, "HIDDEN TESTS")):
        what = "solution cell" if role == "solution" else "test cell"
        expected = {"grade": graded, "solution": not graded, "locked": graded,
                    "grade_id": f"{exercise.label}-{role}", "schema_version": 3}
        meta = nbgrader_metadata(cell)
        if cell.get("cell_type") != "code" or any(meta.get(k) != v for k, v in expected.items()):
            problems.append(f"{where}: the {what} must be a code cell with nbgrader metadata "
                            f"{expected}{' and points' if graded else ''}, found {meta}")
        if f"### BEGIN {markers}" not in cell_source(cell) or f"### END {markers}" not in cell_source(cell):
            problems.append(f"{where}: the {what} must contain ### BEGIN {markers} / ### END {markers}")
    if "remove-cell" not in cell_tags(tests):
        problems.append(f"{where}: the test cell must be tagged remove-cell")
    source = cell_source(tests)
    if "transformer_course.course.checks" not in source:
        problems.append(f"{where}: the test cell must give feedback through transformer_course.course.checks")
    if re.search(r"^\s*assert\b", source, re.MULTILINE):
        problems.append(f"{where}: the test cell uses a bare assert; use transformer_course.course.checks")
    visible = _HIDDEN_REGION.sub("", source)
    if not re.search(r"\bcheck_\w+\(", visible):
        problems.append(f"{where}: the test cell needs a visible self-check (a check_... call outside the "
                        "hidden region) that a correct answer passes and a typical wrong answer fails")
    if re.search(r"^[ \t]+### (BEGIN|END) HIDDEN TESTS", source, re.MULTILINE):
        problems.append(f"{where}: ### BEGIN/END HIDDEN TESTS must start at the beginning of a line "
                        "(the grader runs the hidden region as top-level code)")
    try:
        classes = [node.name for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ClassDef)]
    except SyntaxError:
        classes = []
    if classes:
        problems.append(f"{where}: the test cell defines the class {', '.join(classes)}; the grader runs the tests "
                        "outside the student's sandbox, where an instance of a class defined in a test cannot be "
                        "sent to the student's code: use a torch or standard-library container (nn.ModuleDict, "
                        "types.SimpleNamespace)")
    borrowed = sorted(_free_names_or_empty(source) & _imported_elsewhere(chapter, exercise))
    if borrowed:
        problems.append(f"{where}: the test cell uses {', '.join(borrowed)} without importing it; the grader "
                        "takes every name a test does not define from the student's notebook, so import it "
                        "in the test cell")
    return problems


def _points_problems(chapter: Chapter, exercise: Exercise) -> list[str]:
    """The points of the header against the test cell's, and objectives the chapter does not list."""
    where, problems = f"{chapter.stem} {exercise.label}", []
    if exercise.points is None:
        problems.append(f"{where}: no '**N points · objectives i, j.**' header")
    elif exercise.test_points is None:
        problems.append(f"{where}: no nbgrader test cell {exercise.label}-tests with points")
    elif exercise.points != exercise.test_points:
        problems.append(f"{where}: the text says {exercise.points} points, "
                        f"the test cell's nbgrader points are {exercise.test_points}")
    unknown = [n for n in exercise.objectives if n not in chapter.objectives]
    if unknown:
        problems.append(f"{where}: refers to objectives {unknown}, which the chapter "
                        f"does not list (it has {sorted(chapter.objectives)})")
    return problems


_HIDDEN_REGION = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS.*?^[ \t]*### END HIDDEN TESTS[^\n]*",
                            re.DOTALL | re.MULTILINE)


def bound_names(tree: ast.AST) -> set[str]:
    """Every name a parsed piece of Python binds: assignments, definitions, arguments, imports."""
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
    return bound


def free_names(source: str) -> set[str]:
    """The names a piece of Python reads but never binds, builtins excluded.

    For a test cell these are the names the grader takes from the student's notebook.

    Raises:
        SyntaxError: if ``source`` is not Python.
    """
    tree = ast.parse(source)
    loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return loaded - bound_names(tree) - set(dir(builtins))


def _free_names_or_empty(source: str) -> set[str]:
    try:
        return free_names(source)
    except SyntaxError:
        return set()


def _imported_elsewhere(chapter: Chapter, exercise: Exercise) -> set[str]:
    """Names the chapter's other code cells bind by import (and the exercise's solution does not bind)."""
    imported: set[str] = set()
    solution_bound: set[str] = set()
    own = {f"{exercise.label}-tests", f"{exercise.label}-solution"}
    for cell in chapter.cells:
        if cell.get("cell_type") != "code":
            continue
        try:
            tree = ast.parse(cell_source(cell))
        except SyntaxError:
            continue
        grade_id = nbgrader_metadata(cell).get("grade_id")
        if grade_id == f"{exercise.label}-solution":
            solution_bound |= bound_names(tree)
        if grade_id in own:
            continue
        imported |= {(a.asname or a.name).split(".")[0] for node in ast.walk(tree)
                     if isinstance(node, (ast.Import, ast.ImportFrom)) for a in node.names}
    return imported - solution_bound


def format_problems(chapter: Chapter, min_exercises: int = 2, max_exercises: int = 4) -> list[str]:
    """Everything in a chapter's coursework that breaks the CONTRIBUTING format, as messages.

    Checks: a title, numbered objectives 1..n, a study time; ``min_exercises``..``max_exercises``
    exercises labelled ``dlNNNN-ex1``, ``-ex2``, ... with the chapter's own NNNN; each header's
    points equal its test cell's nbgrader points and its objectives exist; the five cells of each
    exercise in order with the right tags, nbgrader metadata, markers and grade ids; no other
    nbgrader cells and no stray ``solution-marker`` cells.

    Returns:
        A list of readable problems; empty when the chapter is fine.
    """
    problems: list[str] = []
    stem = chapter.stem
    if not chapter.title:
        problems.append(f"{stem}: no '# ' title")
    if not chapter.objectives:
        problems.append(f"{stem}: no numbered list after '**Learning objectives.**'")
    elif sorted(chapter.objectives) != list(range(1, len(chapter.objectives) + 1)):
        problems.append(f"{stem}: objectives must be numbered 1..n, found {sorted(chapter.objectives)}")
    if chapter.study_time is None:
        problems.append(f"{stem}: no '**Estimated study time:**'")
    count = len(chapter.exercises)
    if not min_exercises <= count <= max_exercises:
        problems.append(f"{stem}: {count} exercises, expected {min_exercises}-{max_exercises}")
    for k, exercise in enumerate(chapter.exercises, start=1):
        expected_label = f"dl{chapter.number}-ex{k}"
        if exercise.label != expected_label:
            problems.append(f"{stem}: exercise {k} has label {exercise.label!r}, expected {expected_label!r}")
        problems.extend(_points_problems(chapter, exercise))
        problems.extend(_exercise_cell_problems(chapter, exercise))
    expected_ids = {f"{e.label}-{kind}" for e in chapter.exercises for kind in ("solution", "tests")}
    marker_cells = {e.cell_index + offset for e in chapter.exercises for offset in (1, 3)}
    for index, cell in enumerate(chapter.cells):
        meta = nbgrader_metadata(cell)
        if meta and (meta.get("grade") or meta.get("solution") or meta.get("locked")) \
                and meta.get("grade_id") not in expected_ids:
            problems.append(f"{stem}: cell {index} has nbgrader metadata (grade_id "
                            f"{meta.get('grade_id')!r}) but belongs to no exercise")
        if SOLUTION_MARKER_TAG in cell_tags(cell) and index not in marker_cells:
            problems.append(f"{stem}: cell {index} is tagged {SOLUTION_MARKER_TAG} outside an exercise")
    return problems


@exhibit
def exercise_table(notebook_paths: Iterable[str | Path]) -> pd.DataFrame:
    """Which exercise assesses which learning objective, for how many points, chapter by chapter.

    Args:
        notebook_paths: chapter ``.ipynb`` files.

    Returns:
        One row per exercise: ``chapter``, ``exercise`` (the label), ``title``, ``points``,
        ``objectives`` (e.g. ``"1, 2"``) and ``assesses`` (the numbered objectives' text).

    Raises:
        ValueError: if an exercise's stated points differ from its test cell's nbgrader points,
            an exercise has no points header or no test cell, or it refers to an objective the
            chapter does not list.
    """
    rows, problems = [], []
    for path in notebook_paths:
        chapter = read_chapter(path)
        for exercise in chapter.exercises:
            problems.extend(_points_problems(chapter, exercise))
            rows.append({
                "chapter": chapter.stem,
                "exercise": exercise.label,
                "title": exercise.title,
                "points": exercise.points,
                "objectives": ", ".join(str(n) for n in exercise.objectives),
                "assesses": "; ".join(f"{n}. {chapter.objectives.get(n, '?')}" for n in exercise.objectives),
            })
    if problems:
        raise ValueError("exercise format problems:\n  " + "\n  ".join(problems))
    return pd.DataFrame(rows, columns=["chapter", "exercise", "title", "points", "objectives", "assesses"])


@exhibit
def chapter_table(notebook_paths: Iterable[str | Path]) -> pd.DataFrame:
    """One row per chapter: title, number of objectives, exercises, total points, study time."""
    rows = []
    for path in notebook_paths:
        chapter = read_chapter(path)
        rows.append({
            "chapter": chapter.stem,
            "title": chapter.title,
            "objectives": len(chapter.objectives),
            "exercises": len(chapter.exercises),
            "points": sum(e.points or 0 for e in chapter.exercises),
            "study time": chapter.study_time or "",
        })
    return pd.DataFrame(rows, columns=["chapter", "title", "objectives", "exercises", "points", "study time"])


def strip_solution_markers(notebook: dict[str, Any]) -> dict[str, Any]:
    """Remove the cells tagged ``solution-marker`` (the website's solution dropdown markers), in place.

    They carry no code and mean nothing to nbgrader, and the student version must not show
    ``{solution-start}``. Works on a JSON dict or an ``nbformat.NotebookNode``.

    Returns:
        The same notebook, for chaining.
    """
    notebook["cells"] = [c for c in notebook["cells"] if SOLUTION_MARKER_TAG not in cell_tags(c)]
    return notebook


def _marked_blocks(source: str, begin: str, end: str) -> list[str]:
    pattern = re.compile(rf"^[ \t]*{re.escape(begin)}[^\n]*\n(.*?)^[ \t]*{re.escape(end)}", re.DOTALL | re.MULTILINE)
    return [block.strip() for block in pattern.findall(source) if block.strip()]


def secret_blocks(instructor_notebook: dict[str, Any]) -> list[str]:
    """The solutions and hidden tests of an instructor notebook, as stripped text blocks."""
    blocks = []
    for cell in instructor_notebook["cells"]:
        source = cell_source(cell)
        blocks += _marked_blocks(source, "### BEGIN SOLUTION", "### END SOLUTION")
        blocks += _marked_blocks(source, "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")
    return blocks


def student_version_leaks(student_notebook: dict[str, Any],
                          instructor_notebook: dict[str, Any] | None = None) -> list[str]:
    """What a student version shows that it must not: markers, marker cells, outputs, secret code.

    Args:
        student_notebook: the released notebook (JSON dict or ``NotebookNode``).
        instructor_notebook: the chapter it was made from; when given, the text of each solution
            and hidden-test block must not appear anywhere in the student version.

    Returns:
        Readable problems; empty when the student version is clean.
    """
    leaks = []
    secrets = secret_blocks(instructor_notebook) if instructor_notebook is not None else []
    for index, cell in enumerate(student_notebook["cells"]):
        source = cell_source(cell)
        for pattern in LEAK_PATTERNS:
            if pattern in source:
                leaks.append(f"cell {index} contains {pattern!r}")
        if SOLUTION_MARKER_TAG in cell_tags(cell):
            leaks.append(f"cell {index} is a {SOLUTION_MARKER_TAG} cell")
        if cell.get("outputs"):
            leaks.append(f"cell {index} has stored outputs")
        text = source + json.dumps(cell.get("outputs", []))
        for secret in secrets:
            if len(secret) >= 12 and secret in text:  # shorter blocks could be innocent coincidences
                leaks.append(f"cell {index} contains a solution or hidden test: {secret[:60]!r}")
    return leaks
