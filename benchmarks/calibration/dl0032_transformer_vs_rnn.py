"""Calibration of DL0032's claims: ``gradient_reach_ensemble(b)``, as the chapter runs it for its base seed."""

from transformer_course.experiments.gradient_reach import gradient_reach_claims, gradient_reach_ensemble


def claims(base_seed: int):
    return gradient_reach_claims(gradient_reach_ensemble(base_seed))
