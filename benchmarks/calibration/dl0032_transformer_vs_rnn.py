"""Calibration of DL0032's claims: the gradient-reach ensemble, with the chapter's settings (see the module)."""

from transformer_course.experiments.gradient_reach import gradient_reach_claims, gradient_reach_ensemble


def claims(base_seed: int):
    return gradient_reach_claims(gradient_reach_ensemble(base_seed))
