"""Calibration of DL0028's claims: the grid of distance D x layers L (``experiments.window_reach``).

The chapter trains ``reach_grid(ensemble_seeds(SEED, EXPERIMENT, REACH_ENSEMBLE))`` and asserts
``reach_claims``; ``claims(b)`` does the same for base seed b, on b's own ensemble.
"""

from __future__ import annotations

from transformer_course.experiments.claims import Claim
from transformer_course.experiments.seeds import ensemble_seeds
from transformer_course.experiments.window_reach import EXPERIMENT, REACH_ENSEMBLE, reach_claims, reach_grid


def claims(base_seed: int) -> list[Claim]:
    return reach_claims(reach_grid(ensemble_seeds(base_seed, EXPERIMENT, REACH_ENSEMBLE)))
