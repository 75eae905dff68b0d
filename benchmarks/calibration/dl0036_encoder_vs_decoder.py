"""Calibration of DL0036's conclusions: exposure bias on the ensemble of seeds base .. base + 7.

The chapter runs ``decoding_ensemble(SEED)`` (no label smoothing) and asserts ``exposure_claims``
on it; this module returns the same claims for any base seed. The runs are cached per seed
(``_decoding_cache``, shared with DL0035's calibration, which trains the same runs).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from transformer_course.experiments.claims import Claim
from transformer_course.experiments.decoding import ENSEMBLE_SIZE, exposure_claims

_spec = importlib.util.spec_from_file_location("_decoding_cache", Path(__file__).with_name("_decoding_cache.py"))
_decoding_cache = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_decoding_cache)


def claims(base_seed: int) -> list[Claim]:
    return exposure_claims([_decoding_cache.cached_run(base_seed + k, 0.0) for k in range(ENSEMBLE_SIZE)])
