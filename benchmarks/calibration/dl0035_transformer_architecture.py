"""Calibration of DL0035's conclusions: the reversal ensemble of seeds base .. base + 7.

The chapter runs ``reversal_ensemble(SEED)`` and asserts ``reversal_claims`` on it, and runs
``decoding_ensemble(SEED)`` without and with label smoothing and asserts
``label_smoothing_claims`` and ``beam_claims`` on them; this module returns the same claims for
any base seed. The ensemble members are independent, so each seed's
run is computed once and cached (30 base seeds need 37 seeds), in ``$DL0035_CALIBRATION_CACHE``
(default: a folder in the system's temporary directory).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
from pathlib import Path

from transformer_course.experiments.claims import Claim
from transformer_course.experiments.decoding import LABEL_SMOOTHING, beam_claims, label_smoothing_claims
from transformer_course.experiments.reversal import ENSEMBLE_SIZE, REVERSAL, reversal_claims, reversal_run
from _cache import cached  # benchmarks/calibration/_cache.py (calibrate.py puts this folder on sys.path)

_spec = importlib.util.spec_from_file_location("_decoding_cache", Path(__file__).with_name("_decoding_cache.py"))
_decoding_cache = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_decoding_cache)

CACHE = Path(os.environ.get("DL0035_CALIBRATION_CACHE", Path(tempfile.gettempdir()) / "dl0035_calibration"))


def _run(seed: int):
    settings = hashlib.sha1(repr(REVERSAL).encode()).hexdigest()[:12]  # a new setting, a new cache entry
    return cached(CACHE, f"{settings}_{seed}.pickle", lambda: reversal_run(seed, REVERSAL))


def claims(base_seed: int) -> list[Claim]:
    groups = reversal_claims([_run(base_seed + k) for k in range(ENSEMBLE_SIZE)])
    seeds = range(base_seed, base_seed + ENSEMBLE_SIZE)
    plain = [_decoding_cache.cached_run(seed, 0.0) for seed in seeds]
    smoothed = [_decoding_cache.cached_run(seed, LABEL_SMOOTHING) for seed in seeds]
    return ([claim for group in groups.values() for claim in group]
            + label_smoothing_claims(plain, smoothed) + beam_claims(plain))
