"""The student edition: what Colab opens and what the site's download button gives a reader.

    python tools/student_edition.py            # (re)write student/<chapter>.ipynb for every chapter
    python tools/student_edition.py --check    # exit 1 if student/ is stale (tests do the same)

Each chapter ``chapters/dlNNNN_<topic>.ipynb`` (the instructor notebook, which stays where it is)
becomes ``student/dlNNNN_<topic>.ipynb``:

* it is the coursework release's student version (``tools/coursework.py``'s ``release``, run into a
  temporary course folder): solutions replaced by nbgrader's stubs, hidden tests removed,
  ``solution-marker`` cells dropped, visible self-checks kept with their nbgrader metadata, so a
  returned edition can be graded like a released one;
* the outputs of the teaching cells above the first exercise are copied back from the instructor
  notebook, so a reader sees the figures and tables before running anything;
* each ``:::{exercise}`` block becomes a plain Markdown heading and body, which Jupyter and Colab
  render (bold, math, lists) without Sphinx;
* the install cell pins ``COURSE_REF`` to the commit of the package the outputs were made with:
  the last commit that changed ``src/`` or ``pyproject.toml``. So commit package changes first,
  then regenerate the edition (the tool refuses while ``src/`` has uncommitted changes, unless
  ``--ref`` names the commit, or a release tag such as ``v2026.12``: see CHANGELOG.md);
* the install cell first says, in one line, when the PyTorch it finds (Colab's own) is older than
  the oldest release the course runs on, ``torch>=`` in ``pyproject.toml`` (kept honest by
  ``tests/test_dependency_bounds.py``); it reads the installed version without importing torch.

``--check`` rebuilds the edition in memory with the stored ``COURSE_REF`` and fails when it differs
from ``student/``, or when the package at that commit differs from the package at ``HEAD``.
"""

from __future__ import annotations

import argparse
import copy
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
STUDENT = ROOT / "student"
EXERCISE = re.compile(r"^(?P<fence>:{3,}|`{3,})\{exercise\}[ \t]*(?P<title>[^\n]*)\n"
                      r"(?P<options>(?::[\w-]+:[^\n]*\n)*)(?P<body>.*?)^(?P=fence)[ \t]*$",
                      re.MULTILINE | re.DOTALL)
LABEL = re.compile(r"^:label:[ \t]*(?P<label>\S+)", re.MULTILINE)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import coursework  # noqa: E402  (tools/coursework.py: the release this edition is made from)
from coursework import PACKAGE_PATHS, _git  # noqa: E402


def exercise_markdown(source: str) -> str:
    """``:::{exercise} Title`` / ``:label: dlNNNN-exK`` / body / ``:::`` as a heading and its body."""
    def plain(match: re.Match) -> str:
        label = LABEL.search(match["options"])
        number = label["label"].rsplit("-ex", 1)[-1] if label else ""
        heading = f"### Exercise {number}: {match['title'].strip()}".replace("  ", " ")
        return heading + "\n\n" + match["body"].strip("\n")
    return EXERCISE.sub(plain, source)


def _is_exercise(cell) -> bool:
    return cell.cell_type == "markdown" and bool(EXERCISE.search(cell.source))


def student_notebook(released, instructor, ref: str):
    """The edition of one chapter from its released student version (install cell pinned to ``ref``).

    The edition's code cells are the release's, so a returned edition grades as a released one; it
    adds the teaching cells' outputs and renders the exercises as plain Markdown.
    """
    notebook = copy.deepcopy(released)
    outputs = {cell.get("id"): cell for cell in instructor.cells if cell.cell_type == "code"}
    first_exercise = next((i for i, c in enumerate(notebook.cells) if _is_exercise(c)), len(notebook.cells))
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "markdown":
            cell.source = exercise_markdown(cell.source)
        elif index < first_exercise and cell.get("id") in outputs:
            teacher = outputs[cell.get("id")]
            cell.outputs = copy.deepcopy(teacher.outputs)
            cell.execution_count = teacher.execution_count
    if not coursework.has_install_cell(notebook):
        raise coursework.CourseworkError(f"{instructor.metadata.get('title', 'a chapter')}: the first code cell "
                                         "has no COURSE_REF line to pin")
    notebook.metadata.pop("jupytext", None)
    notebook.metadata["transformer_course"] = {"edition": "student", "package_ref": ref}
    return notebook


def build(chapters: list[Path], ref: str) -> dict[str, str]:
    """Every chapter's edition as notebook JSON text, keyed by file name."""
    with tempfile.TemporaryDirectory() as folder:
        released = coursework.release(chapters, Path(folder), ref=ref)
        editions = {}
        for path, student in zip(chapters, released):
            notebook = student_notebook(nbformat.read(student, as_version=4),
                                        nbformat.read(path, as_version=4), ref)
            editions[path.name] = nbformat.writes(notebook) + "\n"
    return editions


def stored_ref(path: Path) -> str | None:
    notebook = nbformat.read(path, as_version=4)
    return notebook.metadata.get("transformer_course", {}).get("package_ref")


def check(chapters: list[Path]) -> list[str]:
    """Why ``student/`` is stale (an empty list when it is up to date)."""
    problems = []
    missing = [p.name for p in chapters if not (STUDENT / p.name).exists()]
    if missing:
        return [f"missing: student/{name}" for name in missing]
    refs = {stored_ref(STUDENT / p.name) for p in chapters}
    if len(refs) != 1 or None in refs:
        return [f"the editions pin different package commits: {sorted(map(str, refs))}"]
    (ref,) = refs
    try:
        changed = _git("diff", "--name-only", ref, "HEAD", "--", *PACKAGE_PATHS)
    except (subprocess.CalledProcessError, FileNotFoundError):
        changed = ""  # a shallow clone without that commit: the content check below still runs
        problems.append(f"note: commit {ref} is not in this clone; its package was not compared")
    if changed:
        problems.append(f"the package changed since {ref[:12]} ({len(changed.splitlines())} files)")
    editions = build(chapters, ref)
    extra = sorted(p.name for p in STUDENT.glob("*.ipynb") if p.name not in editions)
    problems += [f"student/{name} has no chapter" for name in extra]
    problems += [f"student/{name} differs from its chapter" for name, text in editions.items()
                 if (STUDENT / name).read_text() != text]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[1:]))
    parser.add_argument("--check", action="store_true", help="fail if student/ is stale; write nothing")
    parser.add_argument("--ref", help="the commit to pin (default: the last commit that changed src/)")
    args = parser.parse_args(argv)
    chapters = coursework.default_chapters()
    try:
        if args.check:
            problems = [p for p in check(chapters) if not p.startswith("note:")]
            for problem in problems:
                print(f"stale: {problem}", file=sys.stderr)
            if problems:
                print("run: python tools/student_edition.py", file=sys.stderr)
            return 1 if problems else 0
        ref = args.ref or coursework.package_ref()
        editions = build(chapters, ref)
    except coursework.CourseworkError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    STUDENT.mkdir(exist_ok=True)
    for stale in STUDENT.glob("*.ipynb"):
        if stale.name not in editions:
            stale.unlink()
    for name, text in editions.items():
        (STUDENT / name).write_text(text)
    print(f"wrote {len(editions)} notebooks to student/ (package at {ref[:12]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
