"""Calibrate a chapter's asserted conclusions over 30 independent ensembles, under two CPU kernel sets.

    python benchmarks/calibrate.py run dl0030_positional_encoding --jobs 2      # base seeds 0..29, both kernel sets
    python benchmarks/calibrate.py part dl0030_positional_encoding --kernel-set default --base-seeds 0-14 --out a.json
    python benchmarks/calibrate.py merge parts/*.json --out benchmarks/results/calibration/dl0030_positional_encoding.json
    python benchmarks/calibrate.py list

A chapter asserts its conclusions with ``experiments.claims.check_claims`` on the ensembles its base
seed (``COURSE_SEED``) draws (``experiments.seeds.ensemble_seeds``: no two base seeds share a member
seed). ``benchmarks/calibration/<chapter>.py`` defines ``claims(base_seed) -> list[Claim]``, which
runs the same package functions with the same settings as the chapter and returns the same claims.

``part`` runs it for some base seeds under one CPU kernel set (``default``: PyTorch's portable
kernels, ``ATEN_CPU_CAPABILITY=default``; ``native``: this CPU's own) and writes a partial record,
adding each base seed as it finishes (a run that stops resumes where it was). ``merge`` combines
partial records, from one machine or many (the workflow ``.github/workflows/calibrate.yml`` runs one
part per chapter and kernel set and merges their artifacts), in a deterministic order, into
``benchmarks/results/calibration/<chapter>.json`` (a link to the package's ``_data/calibration/``, so that a
chapter opened in Colab reads its record too): the member seeds of every ensemble, the kernel
sets, and for every claim its bound, its value on every ensemble under every kernel set, the pass
rate, the smallest margin and a 95% upper confidence bound on the per-draw failure rate
(Clopper-Pearson, ``scipy.stats.binomtest``). ``run`` is ``part`` under both kernel sets, then ``merge``.
``rebound`` applies a bound chosen from a calibration's values to a partial or merged record without
re-running it (a claim's value does not depend on its bound).
``tests/test_calibration.py`` fails on an asserted claim without a record, on fewer than 30
pairwise-disjoint ensembles or two kernel sets, or on a draw that failed. A trial below 30 base
seeds writes to ``benchmarks/results/calibration_runs/trials/`` (ignored by git), never over a record.
The chapters never run this (it costs minutes to hours; ``performance.md`` gives the cost per chapter).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CALIBRATION_DIR = ROOT / "benchmarks" / "calibration"
RESULTS_DIR = ROOT / "src" / "transformer_course" / "_data" / "calibration"  # the records ship with the package
WORK_DIR = ROOT / "benchmarks" / "results" / "calibration_runs"  # partial records and trials (ignored by git)
MIN_BASE_SEEDS = 30
KERNEL_SETS = ("default", "native")  # ATEN_CPU_CAPABILITY=default, and this CPU's own (the variable unset)
CONFIDENCE = 0.95


def chapters_with_calibration(directory: Path = CALIBRATION_DIR) -> list[str]:
    """The chapter stems that have a calibration module."""
    return sorted(p.stem for p in directory.glob("*.py") if not p.name.startswith("_"))


def load_claims_function(chapter: str, directory: Path = CALIBRATION_DIR):
    """``claims(base_seed)`` of ``benchmarks/calibration/<chapter>.py``."""
    path = directory / f"{chapter}.py"
    if not path.is_file():
        known = ", ".join(chapters_with_calibration(directory)) or "none"
        raise ValueError(f"chapter must name a module of {directory}, got {chapter!r} (known: {known})")
    spec = importlib.util.spec_from_file_location(f"calibration_{chapter}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "claims", None)):
        raise ValueError(f"{path} must define claims(base_seed) -> list[Claim]")
    return module.claims


def current_kernel_set() -> str:
    """The CPU kernel set PyTorch dispatches to in this process ("DEFAULT", "AVX2", "AVX512", ...)."""
    import torch

    return torch.backends.cpu.get_cpu_capability()


def _run_one(chapter: str, directory: str, base_seed: int) -> dict:
    """One base seed: its claims and the ensembles they were computed on (every ``ensemble_seeds`` call)."""
    from transformer_course.experiments.seeds import recorded_ensembles

    start = time.perf_counter()
    with recorded_ensembles() as calls:
        claims = load_claims_function(chapter, Path(directory))(base_seed)
    if not calls:
        raise RuntimeError(f"{chapter}: claims({base_seed}) drew no ensemble with experiments.seeds.ensemble_seeds")
    if {b for _, b, _ in calls} != {base_seed}:
        raise RuntimeError(f"{chapter}: claims({base_seed}) drew ensembles of other base seeds: {calls}")
    return {"base_seed": base_seed, "seconds": round(time.perf_counter() - start, 1),
            "ensembles": [[experiment, seeds] for experiment, _, seeds in calls],
            "claims": [{"statement": c.statement, "name": c.name, "op": c.op, "bound": c.bound, "value": c.value,
                        "holds": c.holds, "margin": c.margin} for c in claims]}


def run_part(chapter: str, base_seeds: list[int], out: Path, jobs: int = 1, directory: Path = CALIBRATION_DIR) -> dict:
    """The claims of ``base_seeds`` under this process's kernel set, written to ``out`` as each finishes.

    Base seeds already in ``out`` (same chapter and kernel set) are kept, not run again.
    """
    load_claims_function(chapter, directory)  # fail early on a bad name
    import torch

    part = {"chapter": chapter, "kernel_set": current_kernel_set(), "machine": platform.machine(),
            "torch": torch.__version__, "runs": []}
    if out.is_file():
        previous = json.loads(out.read_text(encoding="utf-8"))
        if (previous.get("chapter"), previous.get("kernel_set")) != (chapter, part["kernel_set"]):
            raise ValueError(f"out: {out} holds another chapter or kernel set "
                             f"({previous.get('chapter')}, {previous.get('kernel_set')}); choose another file")
        part["runs"] = [run for run in previous["runs"] if run["base_seed"] in base_seeds]
    done = {run["base_seed"] for run in part["runs"]}
    todo = [seed for seed in base_seeds if seed not in done]
    out.parent.mkdir(parents=True, exist_ok=True)

    def save(run: dict) -> None:
        if part["runs"] and [c["statement"] for c in part["runs"][0]["claims"]] != [c["statement"] for c in run["claims"]]:
            raise ValueError(f"out: {out} holds runs of other claims than this code returns (was a bound changed?); "
                             "delete it and run again")
        part["runs"] = sorted(part["runs"] + [run], key=lambda r: r["base_seed"])
        out.write_text(json.dumps(part, indent=1) + "\n", encoding="utf-8")
        failing = [c["statement"] for c in run["claims"] if not c["holds"]]
        print(f"base seed {run['base_seed']}: {run['seconds']} s, {len(run['claims'])} claims"
              + (f", FAILING: {failing}" if failing else ""), flush=True)

    if jobs > 1 and len(todo) > 1:
        with ProcessPoolExecutor(min(jobs, len(todo))) as pool:
            futures = [pool.submit(_run_one, chapter, str(directory), seed) for seed in todo]
            for future in as_completed(futures):
                save(future.result())
    else:
        for seed in todo:
            save(_run_one(chapter, str(directory), seed))
    return part


def rebound_part(part: dict, bounds: dict[str, tuple[str, float]]) -> dict:
    """``part`` (a partial record, or a merged record) with new bounds for the claims named in ``bounds``
    (name -> (op, bound)), judged on the recorded values.

    A claim's value does not depend on its bound, so a bound chosen from a calibration's values (with
    margin) need not re-run the calibration: each run keeps its value, and its statement, verdict and
    margin follow the new bound, as ``Claim`` computes them; a merged record's failures, smallest
    margin and failure-rate bound are recomputed from its values.

    Raises:
        ValueError: for a name that no claim of ``part`` has.
    """
    from transformer_course.experiments.claims import Claim

    merged = "runs" not in part  # a merged record: one entry per claim, its values by kernel set
    names = {c["name"] for c in part["claims"]} if merged else {c["name"] for run in part["runs"] for c in run["claims"]}
    unknown = sorted(set(bounds) - names)
    if unknown:
        raise ValueError(f"bounds must name claims of the {'record' if merged else 'part'}, got unknown names {unknown}")
    if merged:
        claims = []
        for c in part["claims"]:
            if c["name"] in bounds:
                judged = {k: [Claim(c["name"], v, *bounds[c["name"]]) for v in values] for k, values in c["values"].items()}
                rows = {k: [{"value": j.value, "holds": j.holds, "margin": j.margin} for j in js] for k, js in judged.items()}
                first = next(iter(judged.values()))[0]
                c = _claim_entry(first.statement, {"name": c["name"], "op": first.op, "bound": first.bound}, rows)
            claims.append(c)
        return {**part, "claims": claims}
    runs = []
    for run in part["runs"]:
        claims = []
        for c in run["claims"]:
            if c["name"] in bounds:
                claim = Claim(c["name"], c["value"], *bounds[c["name"]])
                c = {**c, "statement": claim.statement, "op": claim.op, "bound": claim.bound, "holds": claim.holds,
                     "margin": claim.margin}
            claims.append(c)
        runs.append({**run, "claims": claims})
    return {**part, "runs": runs}


def drop_claims(part: dict, names: list[str]) -> dict:
    """``part`` (a partial record, or a merged record) without the claims named in ``names``.

    For a claim the chapter no longer asserts: every other claim keeps its recorded values, which do
    not depend on which claims sit beside it.

    Raises:
        ValueError: for a name that no claim of ``part`` has, or for dropping every claim.
    """
    merged = "runs" not in part
    names = set(names)
    held = {c["name"] for c in part["claims"]} if merged else {c["name"] for run in part["runs"] for c in run["claims"]}
    unknown = sorted(names - held)
    if unknown:
        raise ValueError(f"names must name claims of the {'record' if merged else 'part'}, got unknown names {unknown}")
    if not held - names:
        raise ValueError("names must leave at least one claim; a chapter that asserts none has no record")
    if merged:
        return {**part, "claims": [c for c in part["claims"] if c["name"] not in names]}
    return {**part, "runs": [{**run, "claims": [c for c in run["claims"] if c["name"] not in names]} for run in part["runs"]]}


def failure_rate_upper_bound(failures: int, draws: int, confidence: float = CONFIDENCE) -> float:
    """Upper end of the two-sided Clopper-Pearson interval for a per-draw failure rate (``scipy.stats.binomtest``)."""
    from scipy.stats import binomtest

    return float(binomtest(failures, draws).proportion_ci(confidence_level=confidence, method="exact").high)


def _claim_entry(statement: str, claim: dict, rows: dict[str, list[dict]]) -> dict:
    """A record's entry for one claim from its runs (kernel set -> one row per base seed: value, holds, margin).

    An ensemble fails the claim when any kernel set's run of it fails.
    """
    every = [row for runs in rows.values() for row in runs]
    draws = len(next(iter(rows.values())))
    failures = sum(not all(runs[i]["holds"] for runs in rows.values()) for i in range(draws))
    values = [row["value"] for row in every]
    return {
        "statement": statement, "name": claim["name"], "op": claim["op"], "bound": claim["bound"],
        "values": {k: [row["value"] for row in runs] for k, runs in rows.items()},
        "ensembles": draws, "failures": failures, "pass_rate": 1 - failures / draws,
        "min_margin": min(row["margin"] for row in every), "median_value": statistics.median(values),
        "min_value": min(values), "max_value": max(values),
        "failure_rate_upper_95": round(failure_rate_upper_bound(failures, draws), 4),
    }


def merge_parts(parts: list[dict]) -> dict:
    """One calibration record from partial records of one chapter (any split over base seeds and kernel sets).

    The result does not depend on the order of ``parts``: kernel sets and base seeds are sorted.

    Raises:
        ValueError: for parts of several chapters, a base seed run twice under one kernel set, kernel
            sets with different base seeds, or runs whose claims or ensembles disagree.
    """
    if not parts:
        raise ValueError("parts must hold at least one partial record, got none")
    chapters = {part["chapter"] for part in parts}
    if len(chapters) != 1:
        raise ValueError(f"parts must be of one chapter, got {sorted(chapters)}")
    runs: dict[str, dict[int, dict]] = {}
    for part in parts:
        by_seed = runs.setdefault(part["kernel_set"], {})
        for run in part["runs"]:
            if run["base_seed"] in by_seed:
                raise ValueError(f"parts: base seed {run['base_seed']} appears twice under kernel set {part['kernel_set']}")
            by_seed[run["base_seed"]] = run
    kernel_sets = sorted(runs)
    base_seeds = sorted(runs[kernel_sets[0]])
    for kernel_set in kernel_sets:
        if sorted(runs[kernel_set]) != base_seeds:
            raise ValueError(f"parts: kernel set {kernel_set} has other base seeds than {kernel_sets[0]}")
    reference = runs[kernel_sets[0]][base_seeds[0]]
    statements = [c["statement"] for c in reference["claims"]]
    for kernel_set in kernel_sets:
        for seed in base_seeds:
            run = runs[kernel_set][seed]
            if [c["statement"] for c in run["claims"]] != statements:
                raise ValueError(f"parts: base seed {seed} under {kernel_set} returned other claims than base seed "
                                 f"{base_seeds[0]} under {kernel_sets[0]}")
            if run["ensembles"] != runs[kernel_sets[0]][seed]["ensembles"]:
                raise ValueError(f"parts: base seed {seed} drew other ensembles under {kernel_set}")
    ensembles = []  # per base seed: the member seeds of every ensemble it drew, each once (paired arms share them)
    for seed in base_seeds:
        members = []
        for _, seeds in runs[kernel_sets[0]][seed]["ensembles"]:
            members += [s for s in seeds if s not in members]
        ensembles.append(members)
    claims = []
    for index, statement in enumerate(statements):
        rows = {k: [runs[k][seed]["claims"][index] for seed in base_seeds] for k in kernel_sets}
        claims.append(_claim_entry(statement, reference["claims"][index], rows))
    first = next(part for part in parts if part["kernel_set"] == kernel_sets[0])
    return {
        "chapter": first["chapter"],
        "base_seeds": base_seeds,
        "ensembles": ensembles,
        "experiments": {experiment: len(seeds) for experiment, seeds in sorted(reference["ensembles"])},  # name -> members
        "kernel_sets": kernel_sets,
        "seconds_per_base_seed": {k: round(statistics.mean(r["seconds"] for r in runs[k].values()), 1) for k in kernel_sets},
        "machine": f"{first['machine']}, torch {first['torch']}",
        "claims": claims,
    }


def default_output(chapter: str, num_seeds: int) -> Path:
    """Where ``run`` writes without ``--out``: the chapter's record, or for a trial below ``MIN_BASE_SEEDS`` a trial file.

    A quick trial (``--seeds 2``) must not replace the committed record that ``tests/test_calibration.py``
    checks; it goes to ``benchmarks/results/calibration_runs/trials/`` (ignored by git).
    """
    if num_seeds < MIN_BASE_SEEDS:
        return WORK_DIR / "trials" / f"{chapter}.json"
    return RESULTS_DIR / f"{chapter}.json"


def kernel_set_environment(kernel_set: str) -> dict[str, str]:
    """This process's environment with ``ATEN_CPU_CAPABILITY`` set for ``kernel_set`` (removed for "native")."""
    if kernel_set not in KERNEL_SETS:
        raise ValueError(f"kernel_set must be one of {KERNEL_SETS}, got {kernel_set!r}")
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    if kernel_set == "default":
        env["ATEN_CPU_CAPABILITY"] = "default"
    return env


def parse_base_seeds(text: str) -> list[int]:
    """``"0-29"`` -> 0..29; ``"3,5,9"`` -> those; a mix of both is allowed."""
    seeds = []
    for piece in text.split(","):
        first, dash, last = piece.strip().partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise argparse.ArgumentTypeError(f"base seeds must look like 0-29 or 3,5,9, got {text!r}")
        seeds += range(int(first), int(last or first) + 1)
    if len(set(seeds)) != len(seeds) or not seeds:
        raise argparse.ArgumentTypeError(f"base seeds must be distinct and at least one, got {text!r}")
    return seeds


def cost_report(directory: Path = RESULTS_DIR) -> str:
    """A Markdown table of every record: ensembles, kernel sets, claims, and the calibration's cost (CPU time)."""
    lines = ["| chapter | ensembles | kernel sets | claims | s per ensemble, by kernel set | CPU minutes |",
             "|---|---:|---|---:|---|---:|"]
    for path in sorted(directory.glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        if "kernel_sets" not in record:  # a record from before independent ensembles
            lines.append(f"| {record['chapter']} | {len(record['base_seeds'])} overlapping | one | "
                         f"{len(record['claims'])} | not re-run yet | |")
            continue
        seconds = record["seconds_per_base_seed"]
        minutes = sum(seconds.values()) * len(record["base_seeds"]) / 60
        lines.append(f"| {record['chapter']} | {len(record['ensembles'])} independent | {', '.join(record['kernel_sets'])} | "
                     f"{len(record['claims'])} | {', '.join(f'{k} {v:.0f}' for k, v in sorted(seconds.items()))} | "
                     f"{minutes:.0f} |")
    return "\n".join(lines) + "\n"


def _summary(record: dict) -> None:
    for claim in record["claims"]:
        print(f"{claim['pass_rate']:6.1%}  min margin {claim['min_margin']:+.4g}  failure rate <= "
              f"{claim['failure_rate_upper_95']:.3f}  {claim['statement']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="the chapters that have a calibration module")
    report = commands.add_parser("report", help="write the cost table of every record (performance.md includes it)")
    report.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "calibration_cost.md")
    run = commands.add_parser("run", help="every kernel set, then merge into the chapter's record")
    part = commands.add_parser("part", help="some base seeds under one kernel set, as a partial record")
    for sub in (run, part):
        sub.add_argument("chapter", help="chapter stem, e.g. dl0030_positional_encoding")
        sub.add_argument("--jobs", type=int, default=1, help="worker processes (base seeds side by side)")
    run.add_argument("--seeds", type=int, default=MIN_BASE_SEEDS, help="base seeds 0..N-1 (default 30)")
    run.add_argument("--parts", type=Path, default=WORK_DIR / "parts",
                     help="folder of the partial records (kept, so a stopped run resumes)")
    run.add_argument("--out", type=Path, help="the record (default benchmarks/results/calibration/<chapter>.json; "
                     "below 30 base seeds, benchmarks/results/calibration_runs/trials/<chapter>.json)")
    part.add_argument("--kernel-set", choices=KERNEL_SETS, required=True)
    part.add_argument("--base-seeds", type=parse_base_seeds, default=list(range(MIN_BASE_SEEDS)),
                      help="e.g. 0-29 (default) or 0-14 for one machine's share")
    part.add_argument("--out", type=Path, required=True, help="the partial record (resumed if it exists)")
    part.add_argument("--modules", type=Path, default=CALIBRATION_DIR, help="folder of the calibration modules")
    rebound = commands.add_parser("rebound", help="new bounds for named claims of a partial or merged record, on its values")
    rebound.add_argument("part", type=Path)
    rebound.add_argument("--claim", nargs=3, action="append", required=True, metavar=("NAME", "OP", "BOUND"))
    rebound.add_argument("--out", type=Path, required=True)
    drop = commands.add_parser("drop", help="remove claims a chapter no longer asserts from a partial or merged record")
    drop.add_argument("part", type=Path)
    drop.add_argument("--claim", action="append", required=True, metavar="NAME")
    drop.add_argument("--out", type=Path, required=True)
    merge = commands.add_parser("merge", help="partial records of one chapter -> its record")
    merge.add_argument("parts", nargs="+", type=Path)
    merge.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    if args.command == "list":
        print("\n".join(chapters_with_calibration()))
        return 0
    if args.command == "report":
        args.out.write_text(cost_report(), encoding="utf-8")
        print(f"wrote {args.out}")
        return 0
    if args.command == "rebound":
        part = json.loads(args.part.read_text(encoding="utf-8"))
        bounds = {name: (op, float(bound)) for name, op, bound in args.claim}
        args.out.write_text(json.dumps(rebound_part(part, bounds), indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
        return 0
    if args.command == "drop":
        part = json.loads(args.part.read_text(encoding="utf-8"))
        args.out.write_text(json.dumps(drop_claims(part, args.claim), indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
        return 0
    if args.command in ("run", "part") and args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if args.command == "part":
        wanted = "DEFAULT" if args.kernel_set == "default" else None
        if (os.environ.get("ATEN_CPU_CAPABILITY") is not None) != (wanted is not None) or (
                wanted and current_kernel_set() != wanted):
            # the kernel set is fixed when torch loads: run this part in a process that starts with it
            return subprocess.call([sys.executable, __file__, *sys.argv[1:]] if argv is None else
                                   [sys.executable, __file__, *argv], env=kernel_set_environment(args.kernel_set))
        record = run_part(args.chapter, args.base_seeds, args.out, args.jobs, directory=args.modules)
        return 0 if all(c["holds"] for r in record["runs"] for c in r["claims"]) else 1
    if args.command == "run":
        if args.seeds < 1:
            parser.error("--seeds must be at least 1")
        paths = []
        for kernel_set in KERNEL_SETS:
            path = args.parts / f"{args.chapter}.{kernel_set}.json"
            subprocess.run([sys.executable, __file__, "part", args.chapter, "--kernel-set", kernel_set,
                            "--base-seeds", f"0-{args.seeds - 1}", "--out", str(path), "--jobs", str(args.jobs)],
                           env=kernel_set_environment(kernel_set), check=False)  # a failed claim still merges
            if not path.is_file():
                print(f"calibrate: the {kernel_set} part of {args.chapter} wrote no record ({path}); see the error above",
                      file=sys.stderr)
                return 2
            paths.append(path)
        out = args.out or default_output(args.chapter, args.seeds)
    else:
        paths, out = args.parts, args.out
    record = merge_parts([json.loads(p.read_text(encoding="utf-8")) for p in paths])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    _summary(record)
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return 0 if all(c["failures"] == 0 for c in record["claims"]) else 1


if __name__ == "__main__":
    sys.exit(main())
