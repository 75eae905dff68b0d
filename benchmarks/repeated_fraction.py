"""How many repeated random strings the capstone's circuit needs: the chapter's ensemble at several shares.

    python benchmarks/repeated_fraction.py                       # shares 0.5 and 0.75, base seed 0
    python benchmarks/repeated_fraction.py --shares 0.5 0.75 0.875 --base-seed 1

DL0037 trains its GPT on batches in which ``repeated_fraction`` of the rows are random strings
repeated at a random period, the rest windows of the course's prose (``induction_circuit.CIRCUIT``).
This script trains the chapter's ensemble (same seeds, same steps, same everything) at each share
and writes ``benchmarks/results/repeated_fraction.md``: per share, how many seeds have an induction
head in layer 1 at the end, the median of layer 1's best prefix-matching score, the held-out prose
loss and the median step at which the phase change ends. The chapter cites the table for its
choice of share: the smallest one here at which the circuit forms in most seeds within the budget.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import torch

from transformer_course.experiments.claims import spread
from transformer_course.experiments.induction_circuit import CIRCUIT, circuit_summary, run_ensemble

OUT = Path(__file__).resolve().parent / "results" / "repeated_fraction.md"


def share_row(share: float, base_seed: int) -> str:
    """One table row: the chapter's ensemble trained with ``share`` of each batch repeated strings."""
    settings = dataclasses.replace(CIRCUIT, repeated_fraction=share)
    start = time.perf_counter()
    summary = circuit_summary(run_ensemble(base_seed, settings), settings)
    seconds = time.perf_counter() - start
    formed = int((summary["induction heads, layer 1"] > 0).sum())
    top = spread(summary["top prefix matching, layer 1"])
    loss = spread(summary["held-out loss"])
    finish = summary["phase 90%"][summary["induction heads, layer 1"] > 0]
    phase = f"{spread(finish)['median']:.0f}" if len(finish) else "none"
    return (f"| {share:g} | {formed} of {len(summary)} | {top['median']:.2f} ({top['min']:.2f}-{top['max']:.2f}) "
            f"| {loss['median']:.2f} ({loss['min']:.2f}-{loss['max']:.2f}) | {phase} | {seconds:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shares", type=float, nargs="+", default=[0.5, 0.75])
    parser.add_argument("--base-seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    if not all(0.0 < share < 1.0 for share in args.shares):
        parser.error("--shares must lie strictly between 0 and 1")
    torch.set_num_threads(1)
    rows = [share_row(share, args.base_seed) for share in args.shares]
    args.out.write_text("\n".join([
        "# The capstone's circuit and the share of repeated random strings",
        "",
        f"`python benchmarks/repeated_fraction.py --shares {' '.join(f'{s:g}' for s in args.shares)} "
        f"--base-seed {args.base_seed}`: DL0037's ensemble of {CIRCUIT.ensemble} seeds "
        f"(`ensemble_seeds({args.base_seed}, ...)`), {CIRCUIT.steps} steps each, every other setting as in "
        "`induction_circuit.CIRCUIT`. Medians over the seeds, range in brackets; the phase column is the median "
        "step at which layer 1's best prefix-matching score has risen 90% of the way (seeds with an induction "
        f"head only). An induction head: a layer-1 head with prefix-matching score >= {CIRCUIT.induction_threshold:g}. "
        "Seconds: wall time on the machine that ran it (2 worker processes), for scale only.",
        "",
        "| share of rows repeated | seeds with an induction head in layer 1 | best prefix matching, layer 1 "
        "| held-out prose loss (nats) | phase 90% (step) | seconds |",
        "|--:|--:|--:|--:|--:|--:|",
        *rows, ""]), encoding="utf-8")
    print(args.out.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
