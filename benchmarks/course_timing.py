"""How long each chapter takes to execute top to bottom, and its slowest cells.

    python benchmarks/course_timing.py                 # every notebook in chapters/
    python benchmarks/course_timing.py --out benchmarks/results/course_timing.csv
    python benchmarks/course_timing.py --repeat 3 chapters/dl00*.ipynb   # median of 3 rounds per page

Each notebook runs in a fresh kernel (cwd = chapters/), as the book build and nbval do. Budgets on
2 CPU cores: 60 s per chapter, 240 s for the ten chapters DL0027-DL0036, 120 s for the capstone (issue 36)
(DL0037, which trains an ensemble of small language models), 360 s for all eleven chapters, 30 s for
each other page.

A shared machine's speed changes from one spell of minutes to the next (on the course's 2-core VM
the same ten chapters took 208 s and 259 s ten minutes apart). ``--repeat N``
runs N rounds over the pages, one page after another in each round, and reports each page's median
round, with its fastest and slowest, and every round's totals: a slow spell then shows as one slow
round, not as the course's cost.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

import nbformat
import pandas as pd
from nbclient import NotebookClient

from transformer_course._validation import check_int

ROOT = Path(__file__).resolve().parent.parent
CHAPTER_BUDGET_S, COURSE_BUDGET_S, PAGE_BUDGET_S = 60, 240, 30
CAPSTONE_PREFIX, CAPSTONE_BUDGET_S, ALL_CHAPTERS_BUDGET_S = "dl0037", 120, 360


def budget_seconds(stem: str) -> int:
    """The execution budget of a page on a 2-core CPU: the capstone, a chapter (dlNNNN_...) or another page."""
    if stem.startswith(CAPSTONE_PREFIX):
        return CAPSTONE_BUDGET_S
    return CHAPTER_BUDGET_S if stem.startswith("dl") else PAGE_BUDGET_S


def is_one_of_the_ten(page: str) -> bool:
    """Whether a page is one of the ten chapters DL0027-DL0036 (a chapter page, not the capstone)."""
    return page.startswith("dl") and not page.startswith(CAPSTONE_PREFIX)


def totals_line(frame: pd.DataFrame) -> str:
    """The course totals: the ten chapters (budget 240 s), the eleven with the capstone (360 s), every page."""
    chapters = frame[frame.chapter.str.startswith("dl")]
    ten = chapters[chapters.chapter.map(is_one_of_the_ten)]
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


def time_rounds(paths: list[Path], rounds: int) -> pd.DataFrame:
    """``rounds`` rounds of :func:`time_notebook` over ``paths``; one row per page with its median round.

    ``seconds`` is the page's median over the rounds (its slowest cells those of its median round,
    the faster middle one for an even count), ``seconds_min`` and ``seconds_max`` its fastest and
    slowest, ``rounds`` the round count; the frame's ``attrs["round_seconds"]`` holds each round's
    seconds per page, for :func:`round_totals_line`.
    """
    rounds = check_int("rounds", rounds, minimum=1)
    results = [[time_notebook(path) for path in paths] for _ in range(rounds)]  # (rounds, pages)
    rows = []
    for page in range(len(paths)):
        timings = sorted((result[page] for result in results), key=lambda r: r["seconds"])
        median = statistics.median(t["seconds"] for t in timings)
        row = dict(timings[(len(timings) - 1) // 2], seconds=round(median, 1))
        row.update(within_budget=median <= row["budget_s"], seconds_min=timings[0]["seconds"],
                   seconds_max=timings[-1]["seconds"], rounds=rounds)
        rows.append(row)
    frame = pd.DataFrame(rows)
    frame.attrs["round_seconds"] = [{r["chapter"]: r["seconds"] for r in result} for result in results]
    return frame


def round_totals_line(frame: pd.DataFrame) -> str:
    """Each round's total for the ten chapters (empty for a single round)."""
    rounds = frame.attrs.get("round_seconds", [])
    if len(rounds) < 2:
        return ""
    ten = [sum(seconds for page, seconds in r.items() if is_one_of_the_ten(page)) for r in rounds]
    totals = ", ".join(f"{t:.1f} s" for t in ten)
    return f"The ten chapters in each of the {len(rounds)} rounds, in order: {totals}."


def write_markdown(frame: pd.DataFrame, path: Path) -> None:
    """The timing table, the course totals and (collapsed) the slowest cells as a markdown fragment."""
    when = f"{time.strftime('%Y-%m-%d')}, {platform.machine()} CPU with {os.cpu_count()} cores"
    repeated = "rounds" in frame and frame.rounds.max() > 1  # then a column of each page's fastest and slowest
    if repeated:
        rows = ["| page | seconds (median) | fastest, slowest | budget (s) |", "|---|--:|--:|--:|"]
    else:
        rows = ["| page | seconds | budget (s) |", "|---|--:|--:|"]
    for r in frame.itertuples():
        spread = f" {r.seconds_min:.1f}, {r.seconds_max:.1f} |" if repeated else ""
        rows.append(f"| {r.chapter} | {r.seconds:.1f} |{spread} {r.budget_s} |")
    what = f"median of {frame.rounds.max()} rounds, " if repeated else ""
    table = (f":::{{table}} Seconds to execute each page top to bottom in a fresh kernel (kernel start included; "
             f"{what}one page at a time); {when}\n:align: left\n\n" + "\n".join(rows) + "\n:::")
    summary = " ".join(filter(None, [totals_line(frame), round_totals_line(frame)]))
    slowest = [f"- **{r.chapter}**: " + "; ".join(
                   f"cell {c['cell']}, {c['seconds']:.1f} s: `{c['code'].replace('`', chr(39))}`"
                   for c in json.loads(r.slowest_cells)) for r in frame.itertuples()]
    dropdown = ":::{dropdown} The three slowest cells of each page\n" + "\n".join(slowest) + "\n:::"
    path.write_text(table + "\n\n" + summary + "\n\n" + dropdown + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="write the table as CSV (and .md) here")
    parser.add_argument("--repeat", type=int, default=1, help="rounds over the pages; each page's median is reported")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be >= 1, got {args.repeat}")
    paths = [p.resolve() for p in (args.paths or sorted((ROOT / "chapters").glob("*.ipynb")))]
    frame = time_rounds(paths, args.repeat)
    with pd.option_context("display.width", 200, "display.max_colwidth", 120):
        print(frame.to_string(index=False))
    print(f"\n{totals_line(frame)[:-1]}; "
          f"over budget: {', '.join(frame.loc[~frame.within_budget, 'chapter']) or 'none'}")
    rounds_line = round_totals_line(frame)
    if rounds_line:
        print(rounds_line)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        frame.to_csv(args.out, index=False)
        write_markdown(frame, args.out.with_suffix(".md"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
