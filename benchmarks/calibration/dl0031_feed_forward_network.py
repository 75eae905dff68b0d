"""Calibration of DL0031's claims: rank collapse with depth and the expert load of a trained MoE, base seeds 0..29.

The chapter runs ``rank_collapse`` with ``CHAPTER_SETTINGS`` on seeds b .. b+15 for its base seed b
and asserts ``chapter_claims``; then ``moe_load.expert_load_ensemble`` with ``MOE_SETTINGS`` on
seeds b .. b+7 and asserts ``moe_claims``. Both are made of independent per-seed parts (one seed's
layers and inputs; one (seed, alpha) training run), so this module computes each seed once with
the same functions and settings, caches it in ``artifacts/calibration_cache/dl0031`` (not committed)
and assembles every base seed's ensembles from the cache: 30 base seeds need 45 and 37 seeds.

    python benchmarks/calibrate.py dl0031_feed_forward_network --seeds 30
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from transformer_course.experiments import moe_load as ml
from transformer_course.experiments.rank_collapse import CHAPTER_SETTINGS, chapter_claims, rank_collapse
from _cache import cached  # benchmarks/calibration/_cache.py (calibrate.py puts this folder on sys.path)

CACHE = Path(__file__).resolve().parents[2] / "artifacts" / "calibration_cache" / "dl0031"


def collapse_seed(seed: int) -> pd.DataFrame:
    """``rank_collapse`` of one seed (its rows do not depend on the other seeds of the call)."""
    s = CHAPTER_SETTINGS
    key = f"collapse_s{seed}_d{s['depth']}_D{s['d_model']}_H{s['num_heads']}_T{s['seq_len']}_B{s['batch_size']}.pkl"
    return cached(CACHE, key, lambda: rank_collapse(depth=s["depth"], d_model=s["d_model"], num_heads=s["num_heads"],
                                              seq_len=s["seq_len"], batch_size=s["batch_size"], seeds=[seed]))


def moe_seed(seed: int, alpha: float) -> ml.MoERun:
    s = ml.MOE_SETTINGS
    key = (f"moe_s{seed}_a{alpha:g}_E{s['num_experts']}_k{s['top_k']}_steps{s['steps']}_bs{s['batch_size']}"
           f"_lr{s['lr']:g}_test{s['test_size']}.pkl")
    return cached(CACHE, key, lambda: ml.moe_run(seed, alpha))


def claims(base_seed: int):
    s = CHAPTER_SETTINGS
    collapse = pd.concat([collapse_seed(seed) for seed in range(base_seed, base_seed + s["num_seeds"])],
                         ignore_index=True)
    seeds = range(base_seed, base_seed + ml.MOE_SETTINGS["num_seeds"])
    moe = ml.runs_frame(moe_seed(seed, alpha) for alpha in ml.MOE_SETTINGS["balance_weights"] for seed in seeds)
    return chapter_claims(collapse) + ml.moe_claims(moe)
