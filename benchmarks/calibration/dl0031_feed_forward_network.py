"""Calibration of DL0031's claims: rank collapse with depth, over base seeds 0..29.

The chapter runs ``rank_collapse`` with ``CHAPTER_SETTINGS`` on seeds b .. b+15 for its base seed b
and asserts ``chapter_claims`` on the result; this module does the same for every base seed.

    python benchmarks/calibrate.py dl0031_feed_forward_network --seeds 30
"""

from __future__ import annotations

from transformer_course.experiments.rank_collapse import CHAPTER_SETTINGS, chapter_claims, rank_collapse


def claims(base_seed: int):
    s = CHAPTER_SETTINGS
    results = rank_collapse(depth=s["depth"], d_model=s["d_model"], num_heads=s["num_heads"], seq_len=s["seq_len"],
                            batch_size=s["batch_size"], seeds=range(base_seed, base_seed + s["num_seeds"]))
    return chapter_claims(results)
