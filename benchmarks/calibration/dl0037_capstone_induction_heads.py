"""Calibration of DL0037's claims: the capstone's GPT trained on the course's prose, as the chapter runs it.

The chapter trains ``induction_circuit.run_ensemble(SEED)`` (the seeds of ``ensemble_seeds(SEED,
EXPERIMENT, 8)``, trained together with ``fit_ensemble``) and asserts ``circuit_claims``;
``claims(b)`` does the same for base seed b, on b's own ensemble, in one process (the calibration's
own jobs run base seeds side by side).
"""

from __future__ import annotations

import dataclasses

from transformer_course.experiments.induction_circuit import CIRCUIT, circuit_claims, run_ensemble


def claims(base_seed: int):
    settings = dataclasses.replace(CIRCUIT, workers=1)  # same runs: a member does not depend on its neighbours
    return circuit_claims(run_ensemble(base_seed, settings), settings)
