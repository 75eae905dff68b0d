"""How long each chapter takes to execute top to bottom, and its slowest cells.

    python benchmarks/course_timing.py                 # every notebook in chapters/
    python benchmarks/course_timing.py --out benchmarks/results/course_timing.csv

Each notebook runs in a fresh kernel (cwd = chapters/), as the book build and nbval do. Budgets:
30 s per chapter, 60 s for a chapter that trains a model, 180 s for the whole course (2 CPU cores).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import datetime
from pathlib import Path

import nbformat
import pandas as pd
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
TRAINING_CHAPTERS = {"dl0027_multi_head_attention", "dl0035_transformer_architecture"}


def budget_seconds(stem: str) -> int:
    """The execution budget of a chapter on a 2-core CPU."""
    return 60 if stem in TRAINING_CHAPTERS else 30


def _cell_seconds(cell) -> float:
    timing = cell.get("metadata", {}).get("execution", {})
    try:
        start = datetime.fromisoformat(timing["iopub.execute_input"].replace("Z", "+00:00"))
        end = datetime.fromisoformat(timing["shell.execute_reply"].replace("Z", "+00:00"))
    except (KeyError, ValueError):
        return float("nan")
    return (end - start).total_seconds()


def time_notebook(path: Path, slowest: int = 3) -> dict:
    """Execute one notebook; return its wall time (kernel start included) and its slowest cells."""
    notebook = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(notebook, timeout=600, kernel_name="python3", record_timing=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    seconds = time.perf_counter() - start
    cells = [(_cell_seconds(c), index, c.source.splitlines()[0][:60] if c.source else "")
             for index, c in enumerate(notebook.cells) if c.cell_type == "code"]
    cells.sort(reverse=True)
    return {"chapter": path.stem, "seconds": round(seconds, 1), "budget_s": budget_seconds(path.stem),
            "within_budget": seconds <= budget_seconds(path.stem),
            "slowest_cells": "; ".join(f"cell {i} {s:.1f} s ({line})" for s, i, line in cells[:slowest])}


def write_markdown(frame: pd.DataFrame, path: Path) -> None:
    """The timing table and the course totals as a markdown fragment for the book."""
    chapters = frame[frame.chapter.str.startswith("dl")]
    rows = ["| page | seconds | budget (s) | slowest cells |", "|---|---|---|---|"]
    rows += [f"| {r.chapter} | {r.seconds:.1f} | {r.budget_s} | {r.slowest_cells} |" for r in frame.itertuples()]
    summary = (f"The ten chapters: {chapters.seconds.sum():.1f} s (budget 180 s); every page: "
               f"{frame.seconds.sum():.1f} s; measured on {time.strftime('%Y-%m-%d')} with {os.cpu_count()} CPU "
               f"cores, each page in a fresh kernel (kernel start included).")
    path.write_text("\n".join(rows) + "\n\n" + summary + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="write the table as CSV (and .md) here")
    args = parser.parse_args(argv)
    paths = args.paths or sorted((ROOT / "chapters").glob("*.ipynb"))
    frame = pd.DataFrame([time_notebook(p.resolve()) for p in paths])
    with pd.option_context("display.width", 200, "display.max_colwidth", 120):
        print(frame.to_string(index=False))
    chapters = frame[frame.chapter.str.startswith("dl")]
    print(f"\nthe ten chapters: {chapters.seconds.sum():.1f} s (budget 180 s); every page: {frame.seconds.sum():.1f} s; "
          f"over budget: {', '.join(frame.loc[~frame.within_budget, 'chapter']) or 'none'}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        frame.to_csv(args.out, index=False)
        write_markdown(frame, args.out.with_suffix(".md"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
