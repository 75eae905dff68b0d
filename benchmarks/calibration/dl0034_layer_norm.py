"""Calibration of DL0034's claims: the chapter's three ensembles with the chapter's settings.

The ensemble of base seed b is seeds b..b+7; its members are independent, so each seed's results
are computed once and cached (in the system's temporary directory) for the base seeds that share it.
"""

import hashlib
import pickle
import tempfile
from pathlib import Path

import pandas as pd

from transformer_course.experiments.placement_warmup import (CHAPTER_SWEEP, ENSEMBLE_SIZE, first_step_claims,
                                                             first_step_ensemble, gradient_norm_ensemble,
                                                             gradient_profile_claims, placement_lr_sweep,
                                                             sweep_claims, GRADIENT_DEPTH)

CACHE = Path(tempfile.gettempdir()) / "transformer_course_calibration" / "dl0034_layer_norm"


def _cached(name: str, seed: int, compute):
    path = CACHE / f"{name}-{seed}.pkl"
    if path.is_file():
        return pickle.loads(path.read_bytes())
    value = compute()
    CACHE.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(value))
    return value


def claims(base_seed: int):
    seeds = range(base_seed, base_seed + ENSEMBLE_SIZE)
    key = hashlib.sha1(repr(CHAPTER_SWEEP).encode()).hexdigest()[:10]  # a new cache when the settings change
    finals = pd.concat([_cached(f"sweep{key}", s, lambda s=s: placement_lr_sweep([s]).finals) for s in seeds],
                       ignore_index=True)
    gradients = pd.concat([_cached("gradients", s, lambda s=s: gradient_norm_ensemble(GRADIENT_DEPTH, [s]))
                           for s in seeds], axis=1).sort_index(axis=1)
    first = pd.concat([_cached("first_step", s, lambda s=s: first_step_ensemble([s])) for s in seeds],
                      ignore_index=True)
    return gradient_profile_claims(gradients) + first_step_claims(first) + sweep_claims(finals)
