"""Export every figure of the course as PNG and SVG and every table as CSV, for slides.

    python tools/export_figures.py --out exports/                 # every chapter in _toc.yml
    python tools/export_figures.py --out exports/ chapters/dl0030_positional_encoding.ipynb

Each chapter that has captioned figures or tables (see ``transformer_course.course.provenance``) is
executed top to bottom in a fresh kernel, as the site build does, with chapters/ as the working
directory; right after each figure or table cell, the object that cell displayed (the
``matplotlib`` ``Figure`` or the ``pandas`` ``DataFrame``) is saved:

    exports/<chapter>/<anchor>.png  .svg     e.g. exports/dl0030_positional_encoding/fig-dl0030-pe.png
    exports/<chapter>/<anchor>.csv           for a table
    exports/index.csv                        chapter, exhibit, caption, function, files

The files are deterministic, so an unchanged figure re-exports byte for byte: PNG and SVG carry no
date and no software version, SVG ids come from a fixed ``svg.hashsalt``, and CSV uses ``\\n``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))  # the provenance reader, even without an installed package

from transformer_course.course.ipynb import course_notebooks  # noqa: E402
from transformer_course.course.provenance import Exhibit, notebook_exhibits  # noqa: E402

PNG_DPI = 200  # sharper than the site's 100 dpi, for slides

# Run in the chapter's kernel before its first cell: remember every object that gets displayed
# (both `display(x)` and a cell's last expression go through the display formatter).
PROLOGUE = r'''
import IPython as _export_ipython

_export_shell = _export_ipython.get_ipython()
_export_displayed = []
_export_original_format = _export_shell.display_formatter.format


def _export_recording_format(obj, *args, **kwargs):
    _export_displayed.append(obj)
    return _export_original_format(obj, *args, **kwargs)


_export_shell.display_formatter.format = _export_recording_format


def _export_save(base, kind):
    """Save the last figure (or table) the previous cell displayed, deterministically; return the
    files written and the stamp of the package function that made it."""
    import pathlib

    import matplotlib as mpl
    import pandas as pd
    from matplotlib.figure import Figure

    from transformer_course._exhibit import made_by

    base = pathlib.Path(base)
    base.parent.mkdir(parents=True, exist_ok=True)
    wanted = Figure if kind == "figure" else pd.DataFrame
    found = None
    for obj in reversed(_export_displayed):
        if kind == "table" and hasattr(obj, "data") and isinstance(getattr(obj, "data"), pd.DataFrame):
            obj = obj.data  # a pandas Styler: export the data it styles
        if isinstance(obj, wanted):
            found = obj
            break
    _export_displayed.clear()
    if found is None:
        return {"files": [], "made_by": None}
    if kind == "figure":
        with mpl.rc_context({"svg.hashsalt": "transformers-executed", "svg.fonttype": "path"}):
            found.savefig(base.with_suffix(".png"), format="png", dpi=%(dpi)d,
                          metadata={"Software": None})
            found.savefig(base.with_suffix(".svg"), format="svg",
                          metadata={"Date": None, "Creator": None})
        return {"files": [base.with_suffix(".png").name, base.with_suffix(".svg").name], "made_by": made_by(found)}
    found.to_csv(base.with_suffix(".csv"), lineterminator="\n")
    return {"files": [base.with_suffix(".csv").name], "made_by": made_by(found)}
''' % {"dpi": PNG_DPI}


def file_stem(exhibit: Exhibit) -> str:
    """The exported files' name: the anchor, else kind and number, else kind and cell index."""
    if exhibit.name:
        return exhibit.name
    if exhibit.number:
        return f"{exhibit.kind}-{exhibit.number}"
    return f"{exhibit.kind}-cell{exhibit.cell_index}"


def export_notebook(path: Path, out: Path, timeout: int = 600) -> list[dict[str, str]]:
    """Execute one chapter and save its exhibits under ``out/<chapter>/``; return their index rows."""
    exhibits = {e.cell_index: e for e in notebook_exhibits(path)}
    if not exhibits:
        return []
    source = nbformat.read(path, as_version=4)
    cells = [nbformat.v4.new_code_cell(PROLOGUE)]
    targets: list[tuple[Exhibit, int]] = []
    for index, cell in enumerate(source.cells):
        if cell.cell_type != "code":
            continue
        if index in exhibits:
            cells.append(nbformat.v4.new_code_cell("_export_displayed.clear()"))
        cells.append(nbformat.v4.new_code_cell(cell.source, metadata=cell.metadata))
        if index in exhibits:
            exhibit = exhibits[index]
            base = (out / path.stem / file_stem(exhibit)).resolve()
            cells.append(nbformat.v4.new_code_cell(
                f"print(__import__('json').dumps(_export_save({str(base)!r}, {exhibit.kind!r})))"))
            targets.append((exhibit, len(cells) - 1))
    notebook = nbformat.v4.new_notebook(cells=cells, metadata=source.metadata)
    NotebookClient(notebook, timeout=timeout, kernel_name="python3", record_timing=False,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    rows = []
    for exhibit, cell_index in targets:
        text = "".join(o.get("text", "") for o in notebook.cells[cell_index].outputs)
        saved = json.loads(text.strip().splitlines()[-1]) if text.strip() else {"files": [], "made_by": None}
        files = saved["files"]
        if not files:
            raise RuntimeError(f"{path.name}: {exhibit.label} (cell {exhibit.cell_index}) displayed no "
                               f"{'matplotlib Figure' if exhibit.kind == 'figure' else 'DataFrame'}")
        rows.append({"chapter": path.stem, "exhibit": exhibit.label, "caption": exhibit.caption,
                     "function": saved["made_by"] or "", "files": " ".join(f"{path.stem}/{f}" for f in files)})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "exports", help="folder to write into")
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="chapter .ipynb files (default: every chapter in _toc.yml)")
    args = parser.parse_args(argv)
    notebooks = args.notebooks or [p for p in course_notebooks(ROOT / "chapters", ROOT / "_toc.yml")
                                   if p.stem != "figure_index"]
    os.environ.pop("MPLBACKEND", None)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, str]] = []
    for path in notebooks:
        start = time.perf_counter()
        found = export_notebook(path.resolve(), args.out)
        rows += found
        print(f"{time.perf_counter() - start:6.1f} s  {path.name}: {len(found)} exhibits", flush=True)
    with open(args.out / "index.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=["chapter", "exhibit", "caption", "function", "files"],
                                lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows)} figures and tables exported to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
