"""The one reader of the course's files: ``.ipynb`` notebooks as plain JSON, ``_toc.yml`` as YAML.

Coursework (exercises, objectives) and provenance (figures, tables) both read the chapters from
here, without Jupyter and without executing anything.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml


def read_notebook(path: str | Path) -> dict[str, Any]:
    """Read an ``.ipynb`` file as plain JSON (no dependency on nbformat)."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def cell_source(cell: dict[str, Any]) -> str:
    """A cell's source as one string (``.ipynb`` JSON stores it as a string or a list of lines)."""
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def cell_tags(cell: dict[str, Any]) -> list[str]:
    """The cell's ``metadata.tags`` (empty if none)."""
    return list(cell.get("metadata", {}).get("tags", []))


def chapter_title(cells: list[dict], default: str) -> str:
    """The text of the notebook's first level-1 heading, or ``default``."""
    for cell in cells:
        if cell.get("cell_type") == "markdown":
            match = re.search(r"^#\s+(.+?)\s*$", cell_source(cell), re.MULTILINE)
            if match:
                return match.group(1)
    return default


def toc_files(toc: str | Path) -> list[str]:
    """The ``file:`` entries of a Jupyter Book ``_toc.yml``, in reading order."""
    files: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if "file" in node:
                files.append(str(node["file"]))
            for key, value in node.items():
                if key != "file":
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(yaml.safe_load(Path(toc).read_text(encoding="utf-8")))
    return files


def course_notebooks(chapters: str | Path, toc: str | Path | None = None) -> list[Path]:
    """The chapter notebooks of a folder: in table-of-contents order when ``toc`` is given (only
    those listed there, so every link made from them resolves on the site), else by file name."""
    notebooks = sorted(Path(chapters).glob("*.ipynb"))
    if toc is None:
        return notebooks
    by_stem = {path.stem: path for path in notebooks}
    return [by_stem[stem] for stem in (Path(entry).name for entry in toc_files(toc)) if stem in by_stem]
