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


def seed_results(seed: int):
    """The three experiments for one seed: sweep finals, gradient profile, first Adam step (cached)."""
    key = hashlib.sha1(repr(CHAPTER_SWEEP).encode()).hexdigest()[:10]  # a new cache when the settings change
    return (_cached(f"sweep{key}", seed, lambda: placement_lr_sweep([seed]).finals),
            _cached("gradients", seed, lambda: gradient_norm_ensemble(GRADIENT_DEPTH, [seed])),
            _cached("first_step", seed, lambda: first_step_ensemble([seed])))


def claims(base_seed: int):
    results = [seed_results(seed) for seed in range(base_seed, base_seed + ENSEMBLE_SIZE)]
    finals = pd.concat([r[0] for r in results], ignore_index=True)
    gradients = pd.concat([r[1] for r in results], axis=1).sort_index(axis=1)
    first = pd.concat([r[2] for r in results], ignore_index=True)
    return gradient_profile_claims(gradients) + first_step_claims(first) + sweep_claims(finals)
