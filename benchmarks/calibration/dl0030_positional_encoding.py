"""Calibration of DL0030's claims: the length-generalization ensembles, as the chapter runs them.

The chapter trains one model per task, scheme and seed of ``ensemble_seeds(SEED, EXPERIMENT, 8)``
(``length_generalization_ensembles`` with ``CHAPTER_SETTINGS``) and asserts ``chapter_claims``;
``claims(b)`` does the same for base seed b, on b's own ensemble.
"""

from __future__ import annotations

from transformer_course.experiments.length_generalization import (CHAPTER_SETTINGS, EXPERIMENT, chapter_claims,
                                                                   length_generalization_ensembles)
from transformer_course.experiments.seeds import ensemble_seeds


def claims(base_seed: int):
    s = CHAPTER_SETTINGS
    results = length_generalization_ensembles(s["tasks"], s["train_length"], s["test_lengths"], s["steps"],
                                              ensemble_seeds(base_seed, EXPERIMENT, s["num_seeds"]),
                                              s["rope_scalings"], eval_sequences=s["eval_sequences"])
    return chapter_claims(results)
