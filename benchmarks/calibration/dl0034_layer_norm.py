"""Calibration of DL0034's claims: the chapter's three ensembles with the chapter's settings.

The gradient profile, the first Adam step and the learning-rate sweep each draw their own ensemble
(``ensemble_seeds`` with ``GRADIENT_EXPERIMENT``, ``FIRST_STEP_EXPERIMENT``, ``SWEEP_EXPERIMENT``); the
QK-norm runs share the sweep's seeds (paired with its Pre-LN runs). ``claims(b)`` runs them for base
seed b and returns the claims the chapter asserts, in the chapter's order.
"""

from transformer_course.experiments.placement_warmup import (ENSEMBLE_SIZE, FIRST_STEP_EXPERIMENT, GRADIENT_DEPTH,
                                                             GRADIENT_ENSEMBLE_SIZE, GRADIENT_EXPERIMENT, SWEEP_EXPERIMENT, deepnorm_claims,
                                                             first_step_claims, first_step_ensemble,
                                                             gradient_norm_ensemble, gradient_profile_claims,
                                                             placement_lr_sweep, qk_norm_claims, qk_norm_runs,
                                                             sweep_claims)
from transformer_course.experiments.seeds import ensemble_seeds


def claims(base_seed: int):
    gradients = gradient_norm_ensemble(GRADIENT_DEPTH, ensemble_seeds(base_seed, GRADIENT_EXPERIMENT, GRADIENT_ENSEMBLE_SIZE),
                                       init="xavier")
    first = first_step_ensemble(ensemble_seeds(base_seed, FIRST_STEP_EXPERIMENT, ENSEMBLE_SIZE))
    sweep_seeds = ensemble_seeds(base_seed, SWEEP_EXPERIMENT, ENSEMBLE_SIZE)
    sweep = placement_lr_sweep(sweep_seeds)
    return (gradient_profile_claims(gradients) + first_step_claims(first) + sweep_claims(sweep.finals)
            + qk_norm_claims(sweep, qk_norm_runs(sweep_seeds)) + deepnorm_claims(sweep.finals))
