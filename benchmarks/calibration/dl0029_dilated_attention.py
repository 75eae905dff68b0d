"""Calibration of DL0029's claims: one layer of plain or dilated window keys, near and far tokens (``experiments.dilation_reach``).

The chapter trains ``dilation_reach(ensemble_seeds(SEED, EXPERIMENT, DILATION_ENSEMBLE))`` and asserts
``dilation_claims``; ``claims(b)`` does the same for base seed b, on b's own ensemble.
"""

from __future__ import annotations

from transformer_course.experiments.claims import Claim
from transformer_course.experiments.dilation_reach import DILATION_ENSEMBLE, EXPERIMENT, dilation_claims, dilation_reach
from transformer_course.experiments.seeds import ensemble_seeds


def claims(base_seed: int) -> list[Claim]:
    return dilation_claims(dilation_reach(ensemble_seeds(base_seed, EXPERIMENT, DILATION_ENSEMBLE)))
