"""Calibration of DL0034's claims: the chapter's four ensembles with the chapter's settings.

The ensemble of base seed b is seeds b..b+7; its members are independent, so each seed's results
are computed once and cached (in the system's temporary directory) for the base seeds that share it.
"""

import hashlib
import tempfile
from pathlib import Path

import pandas as pd

from transformer_course.experiments.placement_warmup import (CHAPTER_SWEEP, ENSEMBLE_SIZE, PlacementSweep,
                                                             deepnorm_claims, first_step_claims, first_step_ensemble,
                                                             gradient_norm_ensemble, gradient_profile_claims,
                                                             placement_lr_sweep, qk_norm_claims, qk_norm_runs,
                                                             sweep_claims, GRADIENT_DEPTH)
from _cache import cached  # benchmarks/calibration/_cache.py (calibrate.py puts this folder on sys.path)

CACHE = Path(tempfile.gettempdir()) / "transformer_course_calibration" / "dl0034_layer_norm"


def seed_results(seed: int):
    """The four experiments for one seed: the sweep, QK-norm's runs, gradient profile, first Adam step (cached)."""
    key = hashlib.sha1(repr(CHAPTER_SWEEP).encode()).hexdigest()[:10]  # a new cache when the settings change
    return (cached(CACHE, f"sweep-logits{key}-{seed}.pkl", lambda: placement_lr_sweep([seed])),
            cached(CACHE, f"qk-norm{key}-{seed}.pkl", lambda: qk_norm_runs([seed])),
            cached(CACHE, f"gradients-{seed}.pkl", lambda: gradient_norm_ensemble(GRADIENT_DEPTH, [seed])),
            cached(CACHE, f"first_step-{seed}.pkl", lambda: first_step_ensemble([seed])))


def _merge(sweeps: list[PlacementSweep]) -> PlacementSweep:
    """One ``PlacementSweep`` from single-seed ones, columns in the order the chapter's run has them."""
    curves = pd.concat([s.curves for s in sweeps], axis=1)
    max_logits = pd.concat([s.max_logits for s in sweeps], axis=1)
    finals = pd.concat([s.finals for s in sweeps], ignore_index=True)
    return PlacementSweep(curves, finals, sweeps[0].settings, max_logits)


def claims(base_seed: int):
    results = [seed_results(seed) for seed in range(base_seed, base_seed + ENSEMBLE_SIZE)]
    sweep = _merge([r[0] for r in results])
    qk = _merge([r[1] for r in results])
    gradients = pd.concat([r[2] for r in results], axis=1).sort_index(axis=1)
    first = pd.concat([r[3] for r in results], ignore_index=True)
    return (gradient_profile_claims(gradients) + first_step_claims(first) + sweep_claims(sweep.finals)
            + qk_norm_claims(sweep, qk) + deepnorm_claims(sweep.finals))
