"""Calibration of DL0027's conclusions: the head-count and specialization ensemble over base seeds.

The chapter runs ``head_count.run_ensemble(SEED)`` (heads 1, 2, 4, 8; seeds SEED .. SEED + 7) and
asserts ``head_count.study_claims``. Each run is a pure function of (seed, h) (``lookup_run``), so
the runs are cached per (h, seed) in ``artifacts/calibration_cache/dl0027`` (not committed): base
seeds 0..29 need the 37 seeds 0..36 once each, not 30 x 8.
"""

from __future__ import annotations

import pickle
from pathlib import Path

from transformer_course.experiments import head_count as hc
from transformer_course.experiments.claims import Claim

CACHE = Path(__file__).resolve().parents[2] / "artifacts" / "calibration_cache" / "dl0027"


def cached_run(seed: int, num_heads: int) -> hc.LookupRun:
    key = f"h{num_heads}_s{seed}_steps{hc.MAX_STEPS}_thr{hc.THRESHOLD}_every{hc.EVAL_EVERY}.pkl"
    path = CACHE / key
    if path.is_file():
        return pickle.loads(path.read_bytes())
    run = hc.lookup_run(seed, num_heads)
    run.model = None  # the claims read the curve, scores and ablation only
    CACHE.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(run))
    return run


def claims(base_seed: int) -> list[Claim]:
    return hc.study_claims(hc.run_ensemble(base_seed, run=cached_run))
