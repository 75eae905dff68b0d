"""Calibration of the capstone's claims: ``induction_heads.run_ensemble(b)`` with the chapter's settings."""

from __future__ import annotations

from dataclasses import replace

from transformer_course.experiments import induction_heads as ih
from transformer_course.experiments.claims import Claim


def claims(base_seed: int) -> list[Claim]:
    return ih.capstone_claims(ih.run_ensemble(base_seed, replace(ih.CAPSTONE, workers=1)))  # calibrate.py's jobs run base seeds side by side
