"""Calibration of DL0035's claims: the reversal ensemble and the decoding ensembles, as the chapter runs them.

The chapter trains ``reversal_ensemble(SEED)`` and ``decoding_ensemble(SEED)`` with and without label
smoothing (the two arms share the decoding experiment's seeds: paired) and asserts
``reversal_claims``, ``label_smoothing_claims`` and ``beam_claims``; ``claims(b)`` does the same for
base seed b, on b's own ensembles.
"""

from __future__ import annotations

from transformer_course.experiments.claims import Claim
from transformer_course.experiments.decoding import (LABEL_SMOOTHING, beam_claims, decoding_ensemble,
                                                     label_smoothing_claims)
from transformer_course.experiments.reversal import REVERSAL, reversal_claims, reversal_ensemble


def claims(base_seed: int) -> list[Claim]:
    groups = reversal_claims(reversal_ensemble(base_seed, settings=REVERSAL))
    plain = decoding_ensemble(base_seed)
    smoothed = decoding_ensemble(base_seed, LABEL_SMOOTHING)
    return ([claim for group in groups.values() for claim in group]
            + label_smoothing_claims(plain, smoothed) + beam_claims(plain))
