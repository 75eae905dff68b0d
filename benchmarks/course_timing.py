"""How long each chapter takes to execute top to bottom, and its slowest cells.

    python benchmarks/course_timing.py                 # every notebook in chapters/
    python benchmarks/course_timing.py --out benchmarks/results/course_timing.csv

Each notebook runs in a fresh kernel (cwd = chapters/), as the book build and nbval do. Budgets on
2 CPU cores: 60 s per chapter, 240 s for the ten chapters DL0027-DL0036, 90 s for the capstone
(DL0037, which trains an ensemble of small language models), 330 s for all eleven chapters, 30 s for
each other page.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import datetime
from pathlib import Path

import nbformat
import pandas as pd
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
CHAPTER_BUDGET_S, COURSE_BUDGET_S, PAGE_BUDGET_S = 60, 240, 30
CAPSTONE_PREFIX, CAPSTONE_BUDGET_S, ALL_CHAPTERS_BUDGET_S = "dl0037", 90, 330


def budget_seconds(stem: str) -> int:
    """The execution budget of a page on a 2-core CPU: the capstone, a chapter (dlNNNN_...) or another page."""
    if stem.startswith(CAPSTONE_PREFIX):
        return CAPSTONE_BUDGET_S
    return CHAPTER_BUDGET_S if stem.startswith("dl") else PAGE_BUDGET_S


def totals_line(frame: pd.DataFrame) -> str:
    """The course totals: the ten chapters (budget 240 s), the eleven with the capstone (330 s), every page."""
    chapters = frame[frame.chapter.str.startswith("dl")]
    ten = chapters[~chapters.chapter.str.startswith(CAPSTONE_PREFIX)]
    line = f"The ten chapters: {ten.seconds.sum():.1f} s (budget {COURSE_BUDGET_S} s); "
    if len(ten) != len(chapters):
        line += (f"the {len(chapters)} chapters with the capstone: {chapters.seconds.sum():.1f} s "
                 f"(budget {ALL_CHAPTERS_BUDGET_S} s); ")
    return line + f"every page: {frame.seconds.sum():.1f} s."


def _cell_seconds(cell) -> float:
    timing = cell.get("metadata", {}).get("execution", {})
    try:
        start = datetime.fromisoformat(timing["iopub.execute_input"].replace("Z", "+00:00"))
        end = datetime.fromisoformat(timing["shell.execute_reply"].replace("Z", "+00:00"))
    except (KeyError, ValueError):
        return float("nan")
    return (end - start).total_seconds()


def _first_statement(source: str) -> str:
    """The first line of a cell that is code (not a comment), cut to 60 characters."""
    lines = [line for line in source.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return lines[0][:60] if lines else ""


def time_notebook(path: Path, slowest: int = 3) -> dict:
    """Execute one notebook; return its wall time (kernel start included) and its slowest cells."""
    notebook = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(notebook, timeout=600, kernel_name="python3", record_timing=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    seconds = time.perf_counter() - start
    cells = [(_cell_seconds(c), index, _first_statement(c.source))
             for index, c in enumerate(notebook.cells) if c.cell_type == "code"]
    cells.sort(reverse=True)
    return {"chapter": path.stem, "seconds": round(seconds, 1), "budget_s": budget_seconds(path.stem),
            "within_budget": seconds <= budget_seconds(path.stem),
            "slowest_cells": json.dumps([{"cell": i, "seconds": round(s, 1), "code": line} for s, i, line in cells[:slowest]])}


def write_markdown(frame: pd.DataFrame, path: Path) -> None:
    """The timing table, the course totals and (collapsed) the slowest cells as a markdown fragment."""
    when = f"{time.strftime('%Y-%m-%d')}, {platform.machine()} CPU with {os.cpu_count()} cores"
    rows = ["| page | seconds | budget (s) |", "|---|--:|--:|"]
    rows += [f"| {r.chapter} | {r.seconds:.1f} | {r.budget_s} |" for r in frame.itertuples()]
    table = (f":::{{table}} Seconds to execute each page top to bottom in a fresh kernel (kernel start included); "
             f"{when}\n:align: left\n\n" + "\n".join(rows) + "\n:::")
    summary = totals_line(frame)
    slowest = [f"- **{r.chapter}**: " + "; ".join(
                   f"cell {c['cell']}, {c['seconds']:.1f} s: `{c['code'].replace('`', chr(39))}`"
                   for c in json.loads(r.slowest_cells)) for r in frame.itertuples()]
    dropdown = ":::{dropdown} The three slowest cells of each page\n" + "\n".join(slowest) + "\n:::"
    path.write_text(table + "\n\n" + summary + "\n\n" + dropdown + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="write the table as CSV (and .md) here")
    args = parser.parse_args(argv)
    paths = args.paths or sorted((ROOT / "chapters").glob("*.ipynb"))
    frame = pd.DataFrame([time_notebook(p.resolve()) for p in paths])
    with pd.option_context("display.width", 200, "display.max_colwidth", 120):
        print(frame.to_string(index=False))
    print(f"\n{totals_line(frame)[:-1]}; "
          f"over budget: {', '.join(frame.loc[~frame.within_budget, 'chapter']) or 'none'}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        frame.to_csv(args.out, index=False)
        write_markdown(frame, args.out.with_suffix(".md"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
