"""Calibration of DL0036's claims: exposure bias on the decoding ensemble (``decoding_ensemble(b)``), as in the chapter."""

from __future__ import annotations

from transformer_course.experiments.claims import Claim
from transformer_course.experiments.decoding import decoding_ensemble, exposure_claims


def claims(base_seed: int) -> list[Claim]:
    return exposure_claims(decoding_ensemble(base_seed))
