"""Calibration of DL0028's claims: the grid of distance D x layers L (``experiments.window_reach``).

The chapter trains seeds SEED .. SEED + 7 with ``reach_grid(range(SEED, SEED + REACH_ENSEMBLE))``
and asserts ``reach_claims`` on them. Every model's training depends only on its own seed (its
weights, its data and its held-out set; the ensemble batching does not change a member's numbers,
which the unit tests check), so base seeds 0..29 need the 37 seeds 0..36 trained once: they are,
in one ``reach_grid`` call with the chapter's settings, cached in the temporary directory, and
each base seed's claims are computed on its window of 8 seeds.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

import torch

from transformer_course.experiments.claims import Claim
from transformer_course.experiments.window_reach import (REACH_ENSEMBLE, REACH_GRID, ReachGridResult,
                                                         reach_claims, reach_grid)

MIN_SEEDS = 30 + REACH_ENSEMBLE - 1  # base seeds 0..29


def _trained(num_seeds: int) -> ReachGridResult:
    key = hashlib.sha256(repr((REACH_GRID, num_seeds)).encode()).hexdigest()[:16]
    cache = Path(tempfile.gettempdir()) / f"dl0028_reach_grid_{key}.pt"
    if cache.exists():
        return torch.load(cache, weights_only=False)
    result = reach_grid(list(range(num_seeds)), REACH_GRID, progress=True)
    torch.save(result, cache)
    return result


def claims(base_seed: int) -> list[Claim]:
    result = _trained(max(MIN_SEEDS, base_seed + REACH_ENSEMBLE))
    return reach_claims(result.select(range(base_seed, base_seed + REACH_ENSEMBLE)))
