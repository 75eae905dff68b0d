"""Calibration of DL0030's claims: the length-generalization ensembles over base seeds 0..29.

The chapter trains, for base seed b, one model per scheme and seed b .. b+7 on each task
(``length_generalization_ensemble`` with ``CHAPTER_SETTINGS``) and asserts ``chapter_claims`` on the
results. The members of an ensemble are independent (each seed trains its own model), so this
module trains every (task, scheme, seed) once with the same function and settings, caches its rows
on disk, and assembles the ensemble of every base seed from the cache: 30 base seeds need 37 seeds.

    python benchmarks/calibrate.py dl0030_positional_encoding --seeds 30
    python benchmarks/calibration/dl0030_positional_encoding.py 0 37   # fill the cache (seeds 0..36)
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pandas as pd

from transformer_course.experiments.length_generalization import CHAPTER_SETTINGS, length_generalization_ensemble

CACHE = Path(os.environ.get("DL0030_CALIBRATION_CACHE", "/tmp/transformer_course_calibration/dl0030")) / (
    f"stacked-eval{CHAPTER_SETTINGS['eval_sequences']}")  # a member's rows depend on the number of test sequences
BLOCK = CHAPTER_SETTINGS["num_seeds"]  # seeds trained together when the cache lacks one


def member(task: str, scheme: str, seed: int) -> pd.DataFrame:
    """The rows of one ensemble member (one scheme, one seed), trained once and cached."""
    path = CACHE / f"{task}-{scheme}-{seed}.json"
    if path.is_file():  # a member's accuracy at a length does not depend on the other lengths tested
        cached = pd.DataFrame.from_records(json.loads(path.read_text()))
        return cached[cached["test_length"].isin(CHAPTER_SETTINGS["test_lengths"])].reset_index(drop=True)
    s, first = CHAPTER_SETTINGS, seed - seed % BLOCK
    results = length_generalization_ensemble(task, [scheme], s["train_length"], s["test_lengths"], s["steps"],
                                             range(first, first + BLOCK), s["rope_scalings"],
                                             eval_sequences=s["eval_sequences"])
    CACHE.mkdir(parents=True, exist_ok=True)
    for block_seed, rows in results.groupby("seed"):
        (CACHE / f"{task}-{scheme}-{block_seed}.json").write_text(json.dumps(rows.to_dict(orient="records")))
    return results[results["seed"] == seed].reset_index(drop=True)


def ensemble(task: str, base_seed: int) -> pd.DataFrame:
    """What the chapter's ``length_generalization_ensemble`` call returns for ``base_seed``."""
    schemes = CHAPTER_SETTINGS["tasks"][task]
    seeds = range(base_seed, base_seed + CHAPTER_SETTINGS["num_seeds"])
    results = pd.concat([member(task, scheme, seed) for scheme in schemes for seed in seeds], ignore_index=True)
    results.attrs.update(train_length=CHAPTER_SETTINGS["train_length"], task=task)
    return results


def claims(base_seed: int):
    from transformer_course.experiments.length_generalization import chapter_claims

    return chapter_claims({task: ensemble(task, base_seed) for task in CHAPTER_SETTINGS["tasks"]})


if __name__ == "__main__":  # fill the cache for seeds [first, stop), e.g. in two processes
    first, stop = int(sys.argv[1]), int(sys.argv[2])
    step = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    for seed in range(first, stop, step):
        for task, schemes in CHAPTER_SETTINGS["tasks"].items():
            for scheme in schemes:
                member(task, scheme, seed)
        print("seed", seed, "done", flush=True)  # a block's first seed trains the whole block
