"""Re-execute chapter notebooks in place from their MyST twins, so stored outputs match the code.

    python tools/refresh_notebooks.py                   # every chapter
    python tools/refresh_notebooks.py chapters/dl0027_multi_head_attention.myst.md

Authors edit either file of a pair; this script takes the newer one as the source, executes it
top to bottom in a fresh kernel (cwd = chapters/), and writes both the .ipynb (with outputs) and
the .myst.md, so the pair is in sync and every code cell is executed in order.
(``jupytext --sync`` alone would keep stale outputs.)
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"


def pair(path: Path) -> tuple[Path, Path]:
    """The (.ipynb, .myst.md) paths of the chapter that ``path`` belongs to."""
    name = path.name
    stem = name[: -len(".myst.md")] if name.endswith(".myst.md") else path.stem
    return path.with_name(stem + ".ipynb"), path.with_name(stem + ".myst.md")


def refresh(path: Path, timeout: int = 600) -> float:
    """Execute one chapter and rewrite both files of its pair; returns the seconds it took."""
    ipynb, md = pair(path)
    sources = [p for p in (ipynb, md) if p.exists()]
    if not sources:
        raise FileNotFoundError(f"neither {ipynb} nor {md} exists")
    source = max(sources, key=lambda p: p.stat().st_mtime)
    notebook = jupytext.read(source)
    notebook.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    seen: dict[str, int] = {}
    for cell in notebook.cells:  # start from a clean slate: no stale outputs or counts
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        # Ids derived from the content keep the .ipynb diff quiet when a cell did not change.
        digest = hashlib.sha1(f"{cell.cell_type}:{cell.source}".encode()).hexdigest()[:12]
        seen[digest] = seen.get(digest, 0) + 1
        cell.id = digest if seen[digest] == 1 else f"{digest}-{seen[digest]}"
    os.environ.pop("MPLBACKEND", None)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    start = time.perf_counter()
    NotebookClient(notebook, timeout=timeout, kernel_name="python3", record_timing=False,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    elapsed = time.perf_counter() - start
    notebook.metadata.pop("jupytext", None)
    jupytext.write(notebook, ipynb, fmt="ipynb")
    jupytext.write(notebook, md, fmt="md:myst")
    nbformat.validate(nbformat.read(ipynb, as_version=4))
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, help="chapter files (default: every chapter)")
    args = parser.parse_args(argv)
    paths = args.paths or sorted({pair(p)[1] for p in CHAPTERS.glob("*.myst.md")} |
                                 {pair(p)[1] for p in CHAPTERS.glob("*.ipynb")})
    for path in paths:
        seconds = refresh(path.resolve())
        print(f"{seconds:6.1f} s  {pair(path)[0].relative_to(ROOT) if path.is_absolute() else pair(path)[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
