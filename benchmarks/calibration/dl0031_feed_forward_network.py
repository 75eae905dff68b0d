"""Calibration of DL0031's claims: rank collapse at initialization, the trained FFN as a memory, and the MoE load study.

The chapter runs ``rank_collapse`` with ``CHAPTER_SETTINGS`` on ``ensemble_seeds(SEED, rank_collapse.EXPERIMENT, 16)``,
``memory_ensemble`` on ``ensemble_seeds(SEED, ffn_memory.EXPERIMENT, 8)`` and ``expert_load_ensemble`` on
``ensemble_seeds(SEED, moe_load.EXPERIMENT, 8)``, and asserts ``chapter_claims``, ``memory_claims`` and
``moe_claims``; ``claims(b)`` does the same for base seed b, on b's own ensembles.
"""

from __future__ import annotations

from transformer_course.experiments import ffn_memory as fmem
from transformer_course.experiments import moe_load as ml
from transformer_course.experiments import rank_collapse as rc
from transformer_course.experiments.seeds import ensemble_seeds


def claims(base_seed: int):
    s = rc.CHAPTER_SETTINGS
    collapse = rc.rank_collapse(depth=s["depth"], d_model=s["d_model"], num_heads=s["num_heads"], seq_len=s["seq_len"],
                                batch_size=s["batch_size"], seeds=ensemble_seeds(base_seed, rc.EXPERIMENT, s["num_seeds"]))
    memory = fmem.memory_ensemble(ensemble_seeds(base_seed, fmem.EXPERIMENT, fmem.MEMORY_SETTINGS["num_seeds"]))
    loads = ml.expert_load_ensemble(ensemble_seeds(base_seed, ml.EXPERIMENT, ml.MOE_SETTINGS["num_seeds"]))
    return rc.chapter_claims(collapse) + fmem.memory_claims(memory) + ml.moe_claims(loads)
