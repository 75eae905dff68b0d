"""Calibrate a chapter's asserted conclusions over many base seeds.

    python benchmarks/calibrate.py dl0030_positional_encoding            # base seeds 0..29
    python benchmarks/calibrate.py dl0030_positional_encoding --seeds 40 --jobs 2
    python benchmarks/calibrate.py --list

A chapter asserts its conclusions with ``experiments.claims.check_claims`` on the ensemble its base
seed (``COURSE_SEED``) draws. ``benchmarks/calibration/<chapter>.py`` defines
``claims(base_seed) -> list[Claim]``, which runs the same package functions with the same settings
as the chapter and returns the same claims. This script runs it for base seeds 0..N-1 and writes
``benchmarks/results/calibration/<chapter>.json``: for every claim its bound, the value on every
base seed, the pass rate and the smallest margin. ``tests/test_calibration.py`` fails when a
chapter asserts a claim that has no record here, fewer than 30 base seeds, or a seed that failed.
A trial with fewer than 30 base seeds writes to ``benchmarks/results/calibration/trials/`` instead,
so it never replaces a record.
The chapters never run this (it costs minutes); it is re-run when a claim or its experiment changes.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
CALIBRATION_DIR = ROOT / "benchmarks" / "calibration"
RESULTS_DIR = ROOT / "benchmarks" / "results" / "calibration"
MIN_BASE_SEEDS = 30


def chapters_with_calibration(directory: Path = CALIBRATION_DIR) -> list[str]:
    """The chapter stems that have a calibration module."""
    return sorted(p.stem for p in directory.glob("*.py") if not p.name.startswith("_"))


def load_claims_function(chapter: str, directory: Path = CALIBRATION_DIR):
    """``claims(base_seed)`` of ``benchmarks/calibration/<chapter>.py``."""
    path = directory / f"{chapter}.py"
    if not path.is_file():
        known = ", ".join(chapters_with_calibration(directory)) or "none"
        raise ValueError(f"chapter must name a module of {directory}, got {chapter!r} (known: {known})")
    if str(directory) not in sys.path:  # the modules share benchmarks/calibration/_cache.py
        sys.path.insert(0, str(directory))
    spec = importlib.util.spec_from_file_location(f"calibration_{chapter}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "claims", None)):
        raise ValueError(f"{path} must define claims(base_seed) -> list[Claim]")
    return module.claims


def _run_one(chapter: str, directory: str, base_seed: int) -> tuple[int, list[dict], float]:
    start = time.perf_counter()
    claims = load_claims_function(chapter, Path(directory))(base_seed)
    rows = [{"statement": c.statement, "name": c.name, "op": c.op, "bound": c.bound, "value": c.value,
             "holds": c.holds, "margin": c.margin} for c in claims]
    return base_seed, rows, time.perf_counter() - start


def calibrate(chapter: str, base_seeds: list[int], jobs: int = 1, directory: Path = CALIBRATION_DIR) -> dict:
    """Run a chapter's claims for every base seed; return the record that ``main`` writes as JSON."""
    load_claims_function(chapter, directory)  # fail early on a bad name
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as pool:
            runs = list(pool.map(_run_one, [chapter] * len(base_seeds), [str(directory)] * len(base_seeds),
                                 base_seeds))
    else:
        runs = [_run_one(chapter, str(directory), seed) for seed in base_seeds]
    runs.sort()
    statements = [row["statement"] for row in runs[0][1]]
    claims = []
    for index, statement in enumerate(statements):
        rows = []
        for seed, seed_rows, _ in runs:
            if [r["statement"] for r in seed_rows] != statements:
                raise RuntimeError(f"base seed {seed} returned other claims than base seed {runs[0][0]}")
            rows.append(seed_rows[index])
        values = [r["value"] for r in rows]
        margins = [r["margin"] for r in rows]
        claims.append({
            "statement": statement, "name": rows[0]["name"], "op": rows[0]["op"], "bound": rows[0]["bound"],
            "values": values, "pass_rate": sum(r["holds"] for r in rows) / len(rows),
            "min_margin": min(margins), "median_value": sorted(values)[len(values) // 2],
            "min_value": min(values), "max_value": max(values),
        })
    return {
        "chapter": chapter,
        "base_seeds": [seed for seed, _, _ in runs],
        "seconds_per_base_seed": round(sum(s for _, _, s in runs) / len(runs), 1),
        "machine": f"{platform.machine()}, torch {torch.__version__}",
        "claims": claims,
    }


def default_output(chapter: str, num_seeds: int) -> Path:
    """Where a run writes without ``--out``: the chapter's record, or for a trial below ``MIN_BASE_SEEDS`` a trial file.

    A quick trial (``--seeds 2``) must not replace the committed record of 30 base seeds that
    ``tests/test_calibration.py`` checks; it goes to ``benchmarks/results/calibration/trials/`` (ignored by git).
    """
    if num_seeds < MIN_BASE_SEEDS:
        return RESULTS_DIR / "trials" / f"{chapter}.json"
    return RESULTS_DIR / f"{chapter}.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapter", nargs="?", help="chapter stem, e.g. dl0030_positional_encoding")
    parser.add_argument("--seeds", type=int, default=MIN_BASE_SEEDS, help="base seeds 0..N-1 (default 30)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--out", type=Path, help="output JSON (default benchmarks/results/calibration/<chapter>.json; "
                        "below 30 base seeds, benchmarks/results/calibration/trials/<chapter>.json)")
    parser.add_argument("--list", action="store_true", help="list the chapters that have a calibration module")
    args = parser.parse_args(argv)
    if args.list or not args.chapter:
        print("\n".join(chapters_with_calibration()))
        return 0
    if args.seeds < 1 or args.jobs < 1:
        parser.error("--seeds and --jobs must be at least 1")
    record = calibrate(args.chapter, list(range(args.seeds)), jobs=args.jobs)
    out = args.out or default_output(args.chapter, args.seeds)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    for claim in record["claims"]:
        print(f"{claim['pass_rate']:6.1%}  min margin {claim['min_margin']:+.4g}  {claim['statement']}")
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return 0 if all(c["pass_rate"] == 1.0 for c in record["claims"]) else 1


if __name__ == "__main__":
    sys.exit(main())
