"""Provenance: which package function makes each figure and table of the course.

The course's figure index (``chapters/figure_index``) and the slide export
(``tools/export_figures.py``) both need the same facts about a chapter notebook: which cells show
a figure or a table, their caption and anchor, and which function of ``transformer_course`` made
the object the cell displays. Nothing here guesses the function from the code: every figure and
table maker is decorated with ``transformer_course._exhibit.exhibit``, which stamps its dotted name
on what it returns, and ``course.notebook.setup_notebook`` copies that stamp into the metadata of
the output that shows it. This module reads the stored ``.ipynb`` files (through
:mod:`.ipynb`, without executing anything): captions from the cell metadata, makers from the
output metadata.

The conventions it reads (see CONTRIBUTING.md):

* A **figure** cell carries ``mystnb.figure.caption`` ("Figure N: ...") and usually
  ``mystnb.figure.name`` (the anchor on the page, e.g. ``fig-dl0030-pe``).
* A **table** cell carries the same ``mystnb.figure`` metadata with a caption starting
  "Table N: ..." (myst-nb then captions the table like a figure and gives it the anchor), and may
  also carry the tag ``table``. A cell tagged ``table`` without a caption is still listed.
* The maker is the stamp on the cell's last stamped output (``None`` when no output is stamped).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .ipynb import cell_tags, chapter_title, course_notebooks, read_notebook
from .notebook import PROVENANCE_KEY

PACKAGE = "transformer_course"
TABLE_TAG = "table"
_NUMBER = re.compile(r"^\s*(Figure|Table)\s+(\d+[a-z]?)\s*[:.]\s*", re.IGNORECASE)


@dataclass(frozen=True)
class Exhibit:
    """One figure or table of a chapter.

    Attributes:
        notebook: the chapter's stem, e.g. ``"dl0030_positional_encoding"``.
        chapter: the chapter's title (its first ``#`` heading), or the stem when it has none.
        kind: ``"figure"`` or ``"table"``.
        number: the number from the caption ("1", "2b"), or ``""`` when the caption has none.
        caption: the caption without its "Figure N:" prefix.
        name: the anchor (``mystnb.figure.name``), or ``None``.
        function: the dotted name of the package function that made it (the stamp on the cell's
            output), or ``None`` if no output carries one.
        cell_index: the index of the cell in the notebook (all cells, markdown included).
    """

    notebook: str
    chapter: str
    kind: str
    number: str
    caption: str
    name: str | None
    function: str | None
    cell_index: int

    @property
    def label(self) -> str:
        """``"Figure 1"``, ``"Table 2"``, or just the kind when the caption is unnumbered."""
        return f"{self.kind.capitalize()} {self.number}".strip()


def maker_of(cell: dict) -> str | None:
    """The stamp ``made_by`` of a code cell's last stamped output, or ``None``."""
    stamps = [output.get("metadata", {}).get(PROVENANCE_KEY, {}).get("made_by") for output in cell.get("outputs", [])]
    stamps = [stamp for stamp in stamps if stamp]
    return stamps[-1] if stamps else None


def notebook_exhibits(path: str | Path) -> list[Exhibit]:
    """Every figure and table of one chapter notebook, in cell order.

    Args:
        path: the ``.ipynb`` file, with its stored outputs.

    Returns:
        A list of :class:`Exhibit`.
    """
    path = Path(path)
    cells = read_notebook(path)["cells"]
    title = chapter_title(cells, path.stem)
    exhibits: list[Exhibit] = []
    for index, cell in enumerate(cells):
        if cell.get("cell_type") != "code":
            continue
        mystnb = cell.get("metadata", {}).get("mystnb", {})
        options = mystnb.get("figure", {}) if isinstance(mystnb, dict) else {}
        options = options if isinstance(options, dict) else {}
        caption = str(options.get("caption", "")).strip()
        tagged = TABLE_TAG in cell_tags(cell)
        if not caption and not tagged:
            continue
        match = _NUMBER.match(caption)
        kind = "table" if tagged or (match and match.group(1).lower() == "table") else "figure"
        exhibits.append(Exhibit(
            notebook=path.stem,
            chapter=title,
            kind=kind,
            number=match.group(2) if match else "",
            caption=caption[match.end():] if match else caption,
            name=str(options["name"]) if options.get("name") else None,
            function=maker_of(cell),
            cell_index=index,
        ))
    return exhibits


def course_exhibits(chapters: str | Path, toc: str | Path | None = None,
                    exclude: tuple[str, ...] = ("figure_index",)) -> list[Exhibit]:
    """The exhibits of the course's notebooks (see :func:`.ipynb.course_notebooks`), ``exclude`` stems left out."""
    found: list[Exhibit] = []
    for path in course_notebooks(chapters, toc):
        if path.stem not in exclude:
            found.extend(notebook_exhibits(path))
    return found


def _cell_text(text: str) -> str:
    """Text safe inside one cell of a Markdown pipe table."""
    return " ".join(text.split()).replace("|", "\\|")


def _role_text(text: str) -> str:
    """Text safe as the title of a ``{doc}``/``{ref}`` role inside a table cell."""
    return _cell_text(text).replace("`", "").replace("<", "(").replace(">", ")")


def exhibits_markdown(exhibits: list[Exhibit]) -> str:
    """The exhibits as a MyST Markdown table with cross-references to the chapters.

    Each row links to the exhibit's anchor (``{ref}``) when it has a name, else to its chapter
    (``{doc}``), so Sphinx checks every link at build time. Render it from a notebook cell with
    ``mystnb: {markdown_format: myst}`` in the cell's metadata.

    Args:
        exhibits: from :func:`course_exhibits`.

    Returns:
        The Markdown text (a one-line note when there are no exhibits).
    """
    if not exhibits:
        return "*No chapter has a captioned figure or table yet.*\n"
    lines = [f"| chapter | exhibit | what it shows | made by `{PACKAGE}.` ... |", "| --- | --- | --- | --- |"]
    previous = None
    for e in exhibits:
        chapter = ""
        if e.notebook != previous:  # the chapter once, on its first row
            chapter = f"{{doc}}`{_role_text(e.chapter)} <{e.notebook}>`"
            previous = e.notebook
        target = f"{{ref}}`{e.label} <{e.name}>`" if e.name else f"{{doc}}`{e.label} <{e.notebook}>`"
        made_by = f"`{e.function.removeprefix(PACKAGE + '.')}`" if e.function else "(no package function found)"
        lines.append(f"| {chapter} | {target} | {_cell_text(e.caption)} | {made_by} |")
    return "\n".join(lines) + "\n"
