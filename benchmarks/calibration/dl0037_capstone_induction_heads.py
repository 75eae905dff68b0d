"""Calibration of DL0037's conclusions: the induction-head ensemble over base seeds 0..29.

The chapter runs ``induction_heads.run_ensemble(SEED)`` (seeds SEED .. SEED + 7, settings
``CAPSTONE``) and asserts ``capstone_claims``. Each run is a pure function of its seed
(``run_induction``), so runs are cached per seed in ``artifacts/calibration_cache/dl0037`` (not
committed): base seeds 0..29 need the 37 seeds 0..36 once each, not 30 x 8.

    python benchmarks/calibration/dl0037_capstone_induction_heads.py 37   # fill the cache, 2 workers
    python benchmarks/calibrate.py dl0037_capstone_induction_heads --seeds 30
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from transformer_course.experiments import induction_heads as ih
from transformer_course.experiments.claims import Claim
from transformer_course.experiments.parallel import map_runs
from _cache import cached  # benchmarks/calibration/_cache.py (this folder is on sys.path: a script's own, or calibrate.py's)

CACHE = Path(__file__).resolve().parents[2] / "artifacts" / "calibration_cache" / "dl0037"
KEY = hashlib.sha256(repr(ih.training_key()).encode()).hexdigest()[:12]  # the analysis may change; training may not


def cached_run(seed: int, settings: ih.CapstoneSettings = ih.CAPSTONE) -> ih.InductionRun:
    if ih.training_key(settings) != ih.training_key():
        raise ValueError("the calibration caches the chapter's settings only")
    return cached(CACHE, f"s{seed}_{KEY}.pkl", lambda: ih.run_induction(seed, settings))


def claims(base_seed: int) -> list[Claim]:
    runs = [cached_run(seed) for seed in range(base_seed, base_seed + ih.CAPSTONE.ensemble)]
    return ih.capstone_claims(runs)


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 37
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import dl0037_capstone_induction_heads as me  # importable by the spawned workers

    map_runs(me.cached_run, [(seed,) for seed in range(count)], workers=2)
    print(f"cached {count} seeds in {CACHE}")
