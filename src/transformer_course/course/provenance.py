"""Provenance: which package function makes each figure and table of the course.

The course's figure index (``chapters/figure_index``) and the slide export
(``tools/export_figures.py``) both need the same facts about a chapter notebook: which cells show
a figure or a table, their caption and anchor, and which function of ``transformer_course`` made
the object the cell displays. This module reads them off the ``.ipynb`` files, without executing
anything: cell metadata for the captions, and the cell's source, parsed with :mod:`ast`, for the
function.

The conventions it reads (see CONTRIBUTING.md):

* A **figure** cell carries ``mystnb.figure.caption`` ("Figure N: ...") and usually
  ``mystnb.figure.name`` (the anchor on the page, e.g. ``fig-dl0030-pe``).
* A **table** cell carries the same ``mystnb.figure`` metadata with a caption starting
  "Table N: ..." (myst-nb then captions the table like a figure and gives it the anchor), and may
  also carry the tag ``table``. A cell tagged ``table`` without a caption is still listed.
* The displayed object is what the cell's last expression evaluates to; the function that made
  it is found by following that expression back through attribute access, method calls and
  assignments (in the cell, then in earlier cells) to a call of a name imported from
  ``transformer_course``.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

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
        function: the dotted name of the package function that makes it, or ``None`` if the cell
            calls none that could be resolved.
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


def _clean_source(source: str) -> str:
    """The cell source with IPython magics and shell escapes blanked, so that :mod:`ast` parses it."""
    lines = []
    for line in source.splitlines():
        stripped = line.lstrip()
        lines.append("" if stripped.startswith(("%", "!")) else line)
    return "\n".join(lines)


def _parse(source: str) -> ast.Module | None:
    try:
        return ast.parse(_clean_source(source))
    except SyntaxError:
        return None


def package_imports(sources: list[str], package: str = PACKAGE) -> dict[str, str]:
    """Map each local name bound by an import from ``package`` to the dotted path it names.

    ``from transformer_course.plotting.positional import plot_pe as pe`` gives
    ``{"pe": "transformer_course.plotting.positional.plot_pe"}``; ``import transformer_course.measure.cost
    as cost`` gives ``{"cost": "transformer_course.measure.cost"}``. Later imports win, as in Python.

    Args:
        sources: the code cells' sources, in order.
        package: the top-level package whose names are collected.

    Returns:
        A dict from local name to dotted path.
    """
    names: dict[str, str] = {}
    for source in sources:
        tree = _parse(source)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
                    node.module == package or node.module.startswith(package + ".")):
                for alias in node.names:
                    if alias.name != "*":
                        names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == package or alias.name.startswith(package + "."):
                        if alias.asname:
                            names[alias.asname] = alias.name
                        else:  # `import a.b` binds `a`
                            names[alias.name.split(".")[0]] = alias.name.split(".")[0]
    return names


def _dotted(node: ast.AST, imports: dict[str, str]) -> str | None:
    """The dotted package path an expression such as ``tc.plotting.plot_x`` names, if any."""
    if isinstance(node, ast.Name):
        return imports.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, imports)
        return f"{base}.{node.attr}" if base else None
    return None


def _assignments(tree: ast.Module) -> dict[str, ast.AST]:
    """The last value assigned to each plain name at the top level of a cell."""
    values: dict[str, ast.AST] = {}
    for statement in tree.body:
        if isinstance(statement, ast.Assign):
            for target in statement.targets:
                if isinstance(target, ast.Name):
                    values[target.id] = statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None and isinstance(
                statement.target, ast.Name):
            values[statement.target.id] = statement.value
    return values


def _maker(node: ast.AST, imports: dict[str, str], scopes: list[dict[str, ast.AST]],
           depth: int = 0) -> str | None:
    """Follow an expression back to the package call that produced its value."""
    if depth > 20:
        return None
    if isinstance(node, ast.Call):
        called = _dotted(node.func, imports)
        if called:
            return called
        # A method call such as `make_table(...).round(2)`: the object came from the receiver.
        if isinstance(node.func, ast.Attribute):
            return _maker(node.func.value, imports, scopes, depth + 1)
        return None
    if isinstance(node, (ast.Attribute, ast.Subscript)):
        return _maker(node.value, imports, scopes, depth + 1)
    if isinstance(node, ast.Name):
        for scope in scopes:  # this cell first, then earlier cells, nearest first
            if node.id in scope:
                return _maker(scope[node.id], imports, scopes, depth + 1)
    return None


def _package_calls(tree: ast.Module, imports: dict[str, str]) -> list[str]:
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)]
    calls.sort(key=lambda call: (call.lineno, call.col_offset))
    return [name for name in (_dotted(call.func, imports) for call in calls) if name]


def find_maker(source: str, imports: dict[str, str],
               earlier_sources: list[str] | tuple[str, ...] = ()) -> str | None:
    """The dotted name of the package function that makes what a cell displays.

    The cell's last expression is followed back to a package call (through method calls,
    attributes, subscripts and assignments in this cell or, nearest first, in earlier cells). If
    that finds none, the last call in the cell of a ``plotting`` function is taken, else the last
    call of any package function.

    Args:
        source: the cell's source.
        imports: local names bound to package paths (see :func:`package_imports`).
        earlier_sources: the sources of the cells before it, in order.

    Returns:
        The dotted path as imported (e.g. ``"transformer_course.plotting.positional.plot_pe"``),
        or ``None``.
    """
    tree = _parse(source)
    if tree is None:
        return None
    scopes = [_assignments(tree)]
    for earlier in reversed(list(earlier_sources)):
        earlier_tree = _parse(earlier)
        if earlier_tree is not None:
            scopes.append(_assignments(earlier_tree))
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        found = _maker(tree.body[-1].value, imports, scopes)
        if found:
            return found
    calls = _package_calls(tree, imports)
    plotting = [name for name in calls if ".plotting." in name]
    if plotting:
        return plotting[-1]
    return calls[-1] if calls else None


def defining_name(dotted: str) -> str:
    """Where a function imported as ``dotted`` is defined (re-exports resolved), if importable.

    ``"transformer_course.plotting.plot_pe"`` becomes
    ``"transformer_course.plotting.positional.plot_pe"`` when ``plotting/__init__.py`` re-exports
    it. Falls back to ``dotted`` itself when it cannot be imported.
    """
    parts = dotted.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for attribute in parts[split:]:
                obj = getattr(obj, attribute)
        except AttributeError:
            return dotted
        module = getattr(obj, "__module__", None)
        qualname = getattr(obj, "__qualname__", None)
        if module and qualname and module.startswith(PACKAGE):
            return f"{module}.{qualname}"
        return dotted
    return dotted


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def read_cells(path: str | Path) -> list[dict]:
    """The cells of an ``.ipynb`` file as plain dicts (read as JSON: no dependency on nbformat)."""
    return json.loads(Path(path).read_text(encoding="utf-8"))["cells"]


def chapter_title(cells: list[dict], default: str) -> str:
    """The text of the notebook's first level-1 heading, or ``default``."""
    for cell in cells:
        if cell.get("cell_type") == "markdown":
            match = re.search(r"^#\s+(.+?)\s*$", _source(cell), re.MULTILINE)
            if match:
                return match.group(1)
    return default


def notebook_exhibits(path: str | Path, resolve: bool = True) -> list[Exhibit]:
    """Every figure and table of one chapter notebook, in cell order.

    Args:
        path: the ``.ipynb`` file.
        resolve: also import the package to report where each function is defined (re-exports
            resolved); with ``False`` the path is reported as the notebook imports it.

    Returns:
        A list of :class:`Exhibit`.
    """
    path = Path(path)
    cells = read_cells(path)
    code_sources = [_source(cell) for cell in cells if cell.get("cell_type") == "code"]
    imports = package_imports(code_sources)
    title = chapter_title(cells, path.stem)
    exhibits: list[Exhibit] = []
    code_index = -1
    for index, cell in enumerate(cells):
        if cell.get("cell_type") != "code":
            continue
        code_index += 1
        metadata = cell.get("metadata", {})
        mystnb = metadata.get("mystnb", {})
        options = mystnb.get("figure", {}) if isinstance(mystnb, dict) else {}
        options = options if isinstance(options, dict) else {}
        caption = str(options.get("caption", "")).strip()
        tagged = TABLE_TAG in metadata.get("tags", [])
        if not caption and not tagged:
            continue
        match = _NUMBER.match(caption)
        if tagged or (match and match.group(1).lower() == "table"):
            kind = "table"
        else:
            kind = "figure"
        function = find_maker(_source(cell), imports, code_sources[:code_index])
        if function and resolve:
            function = defining_name(function)
        exhibits.append(Exhibit(
            notebook=path.stem,
            chapter=title,
            kind=kind,
            number=match.group(2) if match else "",
            caption=caption[match.end():] if match else caption,
            name=str(options["name"]) if options.get("name") else None,
            function=function,
            cell_index=index,
        ))
    return exhibits


def toc_files(toc: str | Path) -> list[str]:
    """The ``file:`` entries of a Jupyter Book ``_toc.yml``, in order (read without a YAML parser)."""
    text = Path(toc).read_text(encoding="utf-8")
    return [match.group(1).strip("'\"") for match in
            re.finditer(r"^\s*-?\s*file:\s*(\S+)\s*(?:#.*)?$", text, re.MULTILINE)]


def course_notebooks(chapters: str | Path, toc: str | Path | None = None) -> list[Path]:
    """The chapter notebooks of a folder: in table-of-contents order when ``toc`` is given (only
    those listed there, so every link made from them resolves on the site), else by file name."""
    chapters = Path(chapters)
    notebooks = sorted(chapters.glob("*.ipynb"))
    if toc is None:
        return notebooks
    by_stem = {path.stem: path for path in notebooks}
    listed = [Path(entry).name for entry in toc_files(toc)]
    return [by_stem[stem] for stem in listed if stem in by_stem]


def course_exhibits(chapters: str | Path, toc: str | Path | None = None,
                    exclude: tuple[str, ...] = ("figure_index",), resolve: bool = True) -> list[Exhibit]:
    """The exhibits of the course's notebooks (see :func:`course_notebooks`), ``exclude`` stems left out."""
    found: list[Exhibit] = []
    for path in course_notebooks(chapters, toc):
        if path.stem not in exclude:
            found.extend(notebook_exhibits(path, resolve=resolve))
    return found


def exhibits_frame(exhibits: list[Exhibit]) -> pd.DataFrame:
    """The exhibits as a table: one row each, columns chapter, exhibit, caption, made by, anchor."""
    return pd.DataFrame(
        [{"chapter": e.notebook, "exhibit": e.label, "caption": e.caption,
          "made by": e.function or "", "anchor": e.name or ""} for e in exhibits],
        columns=["chapter", "exhibit", "caption", "made by", "anchor"],
    )


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

