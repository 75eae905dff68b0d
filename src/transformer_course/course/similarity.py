"""Copying, reported: how much of each student's code matches another student's or the package's source.

The grader never guesses at copying. After a grading run, ``similarity_report`` compares the code
each student wrote in a chapter (the code cells that are not the released notebook's own) with
every other student's code for that chapter and with the package's source, using ``copydetect``
(winnowed token fingerprints, the MOSS method: Schleimer, Wilkerson and Aiken, 2003). The released
notebook's code, stubs included, is boilerplate: what every student was given counts for no one.
It writes ``similarity.csv`` (one row per pair above the threshold, both ways) and one HTML report
per chapter with the matching passages side by side, for the instructor to read. It reads the
notebooks as data, never runs them, and a notebook it cannot read is left out (the grades say why).

Shapes: none; everything here is text.
"""

from __future__ import annotations

import csv
import tempfile
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from transformer_course._validation import check_instance
from .plans import InvalidNotebook, WATCHED_PACKAGES, course_cell_key, read_submission, released_sources

MAX_CODE_CHARS = 200_000
"""A student's code beyond this many characters is not compared (the report says so in its row's
``other`` column): fingerprinting a notebook padded with megabytes of code must not slow the run."""

PACKAGE = "package"
"""The name a match against the package's source carries in the report's ``other`` column."""


@dataclass(frozen=True)
class Match:
    """One student's code that matches another's, or the package's: a row of ``similarity.csv``."""

    chapter: str
    student: str
    other: str  # another student's id, or "package:<module file>"
    student_share: float  # share of the student's fingerprinted code found in the other
    other_share: float  # share of the other's fingerprinted code found in the student's
    tokens: int  # tokens the two have in common


def student_code(submission: bytes | Path, released_notebook: Path | None) -> str:
    """The code a student wrote in ``submission``: its code cells that are not the released notebook's.

    Raises:
        InvalidNotebook: if the submission cannot be read as a notebook.
    """
    given = released_sources(released_notebook)
    cells = read_submission(submission)
    return "\n\n".join(c["source"] for c in cells if course_cell_key(c["source"]) not in given and c["source"].strip())


def _released_code(released_notebook: Path | None) -> str:
    if released_notebook is None or not released_notebook.is_file():
        return ""
    return "\n\n".join(c["source"] for c in read_submission(released_notebook))


def package_sources() -> list[Path]:
    """The source files of the subpackages an exercise may ask a student to re-implement."""
    root = Path(__file__).resolve().parents[1]
    return sorted(path for package in WATCHED_PACKAGES
                  for path in (root / package.split(".", 1)[1].replace(".", "/")).glob("*.py")
                  if path.name != "__init__.py")


def compare_chapter(chapter: str, submissions: Mapping[str, bytes | Path], released_notebook: Path | None,
                    report: Path | None = None, threshold: float = 0.5, noise_tokens: int = 25) -> list[Match]:
    """Every pair (student, another student or a package file) whose shared code passes ``threshold``.

    Args:
        chapter: the chapter's stem, for the rows.
        submissions: student id -> notebook (bytes or path); ids must be safe file names.
        released_notebook: the student version handed out (its code is boilerplate).
        report: where the HTML report with the matching passages goes (None: no report).
        threshold: a pair is reported when either side has at least this share of its code in common.
        noise_tokens: matches shorter than this many tokens are ignored (copydetect's noise threshold).

    Returns:
        The matches, each pair once (the student whose code is the more copied first), sorted by
        chapter, student, other.
    """
    from copydetect import CopyDetector  # a grading dependency only: the chapters do not need it

    check_instance("submissions", submissions, Mapping, "student id -> notebook")
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must lie in (0, 1], got {threshold!r}")
    with tempfile.TemporaryDirectory(prefix="similarity-") as folder:
        root = Path(folder)
        students, truncated = {}, []
        for student, submission in sorted(submissions.items()):
            try:
                code = student_code(submission, released_notebook)
            except InvalidNotebook:
                continue  # the grades report why; there is no code to compare
            if len(code) > MAX_CODE_CHARS:
                truncated.append(student)
                code = code[:MAX_CODE_CHARS]
            if code.strip():
                path = root / "students" / f"{student}.py"
                path.parent.mkdir(exist_ok=True)
                path.write_text(code, encoding="utf-8")
                students[str(path)] = student
        if not students:
            return []
        boilerplate = root / "released.py"
        boilerplate.write_text(_released_code(released_notebook), encoding="utf-8")
        if report is not None:
            report.parent.mkdir(parents=True, exist_ok=True)
        detector = CopyDetector(extensions=["py"], noise_t=noise_tokens, guarantee_t=noise_tokens,
                                display_t=threshold, autoopen=False, silent=True,
                                out_file=str(report) if report else str(root / "report.html"))
        for path in students:
            detector.add_file(path, "testref")
        for path in package_sources():
            detector.add_file(str(path), "ref")
        detector.add_file(str(boilerplate), "boilerplate")
        with warnings.catch_warnings():  # copydetect 0.5 reads its templates with a deprecated importlib call
            warnings.simplefilter("ignore", DeprecationWarning)
            detector.run()
            if report is not None:
                detector.generate_html_report()
        matches = [Match(chapter, student, f"not compared past {MAX_CODE_CHARS:,} characters", 0.0, 0.0, 0)
                   for student in truncated]
        for student_share, other_share, test, ref, *_, tokens in detector.get_copied_code_list():
            other = students.get(ref, f"{PACKAGE}:{Path(ref).name}")
            matches.append(Match(chapter, students[test], other, round(float(student_share), 3),
                                 round(float(other_share), 3), int(tokens)))
    return sorted(matches, key=lambda m: (m.chapter, m.student, m.other))


def write_similarity_csv(matches: list[Match], path: Path) -> None:
    """``similarity.csv``: chapter, student, other, the two shares and the common tokens, one row per match."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["chapter", "student", "similar_to", "share_of_student_code", "share_of_other_code",
                         "common_tokens"])
        for m in matches:
            writer.writerow([m.chapter, m.student, m.other, m.student_share, m.other_share, m.tokens])
