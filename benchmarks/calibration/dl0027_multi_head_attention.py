"""Calibration of DL0027's conclusions: the head-count, specialization and key/value-sharing ensembles.

The chapter runs ``head_count.run_ensemble(SEED)`` (heads 1, 2, 4, 8; seeds SEED .. SEED + 7) and
asserts ``head_count.study_claims``; then ``kv_heads.run_kv_ensemble(SEED, kv_heads=(2, 1))`` and,
with the four-head runs of the first ensemble as G = 4 (``kv_heads.from_lookup_run``), asserts
``kv_heads.kv_claims``. Each run is a pure function of (seed, h) (``lookup_run``) or (seed, G)
(``kv_run``), so the runs are cached in ``artifacts/calibration_cache/dl0027`` (not committed):
base seeds 0..29 need the 37 seeds 0..36 once each, not 30 x 8.
"""

from __future__ import annotations

from pathlib import Path

from transformer_course.experiments import head_count as hc
from transformer_course.experiments import kv_heads as kv
from transformer_course.experiments.claims import Claim
from _cache import cached  # benchmarks/calibration/_cache.py (calibrate.py puts this folder on sys.path)

CACHE = Path(__file__).resolve().parents[2] / "artifacts" / "calibration_cache" / "dl0027"


def cached_run(seed: int, num_heads: int) -> hc.LookupRun:
    def compute() -> hc.LookupRun:
        run = hc.lookup_run(seed, num_heads)
        run.model = None  # the claims read the curve, scores and ablation only
        return run

    return cached(CACHE, f"h{num_heads}_s{seed}_steps{hc.MAX_STEPS}_thr{hc.THRESHOLD}_every{hc.EVAL_EVERY}.pkl", compute)


def cached_kv_run(seed: int, num_kv_heads: int) -> kv.KVRun:
    return cached(CACHE, f"kv{num_kv_heads}_h{kv.NUM_HEADS}_s{seed}_steps{hc.MAX_STEPS}_thr{hc.THRESHOLD}_every{hc.EVAL_EVERY}.pkl",
                   lambda: kv.kv_run(seed, num_kv_heads))


def kv_ensemble(base_seed: int, runs: dict) -> dict:
    """The chapter's G = 4, 2, 1 runs: G = 4 read off the head-count study's four-head runs."""
    shared = {(kv.NUM_HEADS, seed): kv.from_lookup_run(runs[kv.NUM_HEADS, seed])
              for seed in range(base_seed, base_seed + hc.ENSEMBLE_SIZE)}
    return {**shared, **kv.run_kv_ensemble(base_seed, kv_heads=(2, 1), run=cached_kv_run)}


def claims(base_seed: int) -> list[Claim]:
    runs = hc.run_ensemble(base_seed, run=cached_run)
    return hc.study_claims(runs) + kv.kv_claims(kv_ensemble(base_seed, runs))
