"""Calibration of DL0027's claims: the head-count study and the KV-head study, as the chapter runs them.

The chapter trains ``head_count.run_ensemble(SEED)`` (h = 1, 2, 4, 8 on the lookup task) and
``kv_heads.run_kv_ensemble(SEED)`` (G = 2, 1 key/value heads; G = h = 4 is the head-count study's h = 4
run, so the two studies share their seeds and are paired) and asserts ``study_claims`` and
``kv_claims`` on them. ``claims(b)`` does the same for base seed b, on b's own ensemble
(``seeds.ensemble_seeds``: no two base seeds share a member).
"""

from __future__ import annotations

from transformer_course.experiments import head_count as hc
from transformer_course.experiments import kv_heads as kv
from transformer_course.experiments.claims import Claim


def claims(base_seed: int) -> list[Claim]:
    runs = hc.run_ensemble(base_seed)
    kv_runs = {(kv.NUM_HEADS, seed): kv.from_lookup_run(run) for (h, seed), run in runs.items() if h == kv.NUM_HEADS}
    kv_runs.update(kv.run_kv_ensemble(base_seed, kv_heads=(2, 1)))
    return hc.study_claims(runs) + kv.kv_claims(kv_runs)
