"""Sharing keys and values (GQA, MQA) on the four-lookups task: what it costs in learning, over seeds.

Shape legend: B batch, T sequence length, R relations, H query heads, G key/value heads.

Multi-query attention (Shazeer, 2019) gives all H query heads one shared key head and one value
head; grouped-query attention (Ainslie et al., 2023) keeps G key/value heads, each shared by H / G
query heads. Both shrink the KV cache by H / G and, the papers report, cost some quality at scale
(Ainslie et al.: MQA loses quality against MHA, GQA with an intermediate G recovers most of it).
This module measures the cost on the toy task of :mod:`.head_specialization`: the chapter's
``LookupModel`` with H = 4 query heads at d_model = 32 and G = 4 (MHA), 2 (GQA), 1 (MQA) key/value
heads, trained exactly as in :mod:`.head_count` (same data, seeds, stopping rule and budget), over
an ensemble of seeds. Quality is read as learning speed (steps until every lookup reaches 95% on
held-out sequences, within the budget) and as the held-out accuracy at the end of each run.

* :func:`kv_run`: one run for (seed, G), a pure function of both;
  :func:`from_lookup_run`: the same record from a :class:`.head_count.LookupRun` with G = H, which
  the chapter has already trained (it is not retrained).
* :func:`run_kv_ensemble`: G in ``KV_HEADS`` x ``ENSEMBLE_SIZE`` seeds, in worker processes.
* :func:`cached_numbers_per_token`: the KV cache of one layer per token, 2 G d_k.
* :func:`kv_table`, :func:`kv_claims`: the ensemble's table and its calibrated conclusions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pandas as pd
import torch

from transformer_course._exhibit import exhibit
from transformer_course._validation import check_instance, check_int
from .claims import Claim
from .head_count import (D_MODEL, ENSEMBLE_SIZE, EXPERIMENT, EVAL_EVERY, EVAL_SEED_OFFSET, EVAL_SIZE, MAX_STEPS, TEST_SEED_OFFSET,
                         TEST_SIZE, THRESHOLD, LookupRun, held_out_batch, steps_to_threshold, train_with_curve)
from .head_specialization import lookup_accuracy
from .parallel import map_runs
from .seeds import ensemble_seeds

NUM_HEADS = 4  # the chapter's model: MultiHeadAttention(32, 4)
KV_HEADS = (4, 2, 1)  # MHA, GQA, MQA


@dataclass
class KVRun:
    """One run of the study: G, its learning curve, steps to threshold and held-out accuracy at the end."""

    seed: int
    num_kv_heads: int
    curve: pd.DataFrame
    steps: float
    accuracy: pd.Series  # per relation, on the run's TEST_SIZE test sequences, at the end of training


def _check_kv_heads(num_kv_heads: object, num_heads: int = NUM_HEADS) -> int:
    g = check_int("num_kv_heads", num_kv_heads, minimum=1)
    if num_heads % g:
        raise ValueError(f"num_kv_heads must divide num_heads={num_heads}, got {g}")
    return g


def kv_run(seed: int, num_kv_heads: int, max_steps: int = MAX_STEPS) -> KVRun:
    """Train ``LookupModel(num_heads=4, num_kv_heads=G)`` as :func:`.head_count.lookup_run` does; record it.

    The same held-out batches, stopping rule (every lookup at ``THRESHOLD``, checked every
    ``EVAL_EVERY`` steps) and budget as the head-count study; with G = 4 the run is the study's
    four-head run (:func:`from_lookup_run` gives the same record).

    Raises:
        ValueError: for a G that does not divide the 4 query heads, or a negative seed.
    """
    g = _check_kv_heads(num_kv_heads)
    eval_tokens, eval_sources = held_out_batch(seed, EVAL_SIZE, EVAL_SEED_OFFSET)
    model, curve = train_with_curve(seed, NUM_HEADS, eval_tokens, eval_sources, max_steps=max_steps,
                                    eval_every=EVAL_EVERY, threshold=THRESHOLD, d_model=D_MODEL, num_kv_heads=g)
    tokens, sources = held_out_batch(seed, TEST_SIZE, TEST_SEED_OFFSET)
    return KVRun(seed, g, curve, steps_to_threshold(curve, THRESHOLD), lookup_accuracy(model, tokens, sources))


def from_lookup_run(run: LookupRun) -> KVRun:
    """The record of :func:`kv_run` for G = H, read off a four-head run of the head-count study.

    Its curve and steps are the run's own; its accuracy at the end is the first row ("none"
    removed) of its ablation table, measured on the same test batch.

    Raises:
        TypeError, ValueError: for a run that is not a ``LookupRun`` with 4 heads.
    """
    check_instance("run", run, LookupRun)
    if run.num_heads != NUM_HEADS:
        raise ValueError(f"run must have num_heads={NUM_HEADS}, got {run.num_heads}")
    return KVRun(run.seed, NUM_HEADS, run.curve, run.steps, run.ablation.loc["none"].rename("accuracy"))


def run_kv_ensemble(base_seed: int, kv_heads: Sequence[int] = KV_HEADS, size: int = ENSEMBLE_SIZE,
                    run: Callable[[int, int], KVRun] = kv_run, workers: int = 1) -> dict[tuple[int, int], KVRun]:
    """``run(seed, G)`` for every G in ``kv_heads`` and seed of the head-count study's ensemble
    (``ensemble_seeds(base_seed, head_count.EXPERIMENT, size)``: G = h shares its runs, so the arms are paired).

    ``workers`` processes train runs side by side (``parallel.map_runs``); each run is a function of
    (seed, G) alone, so the result does not depend on the number of workers.

    Returns:
        dict (G, seed) -> KVRun, G-major.
    """
    base_seed = check_int("base_seed", base_seed, minimum=0)
    size = check_int("size", size, minimum=1)
    if isinstance(kv_heads, (str, bytes)) or not isinstance(kv_heads, Sequence) or not kv_heads:
        raise TypeError(f"kv_heads must be a non-empty sequence of ints, got {kv_heads!r}")
    counts = tuple(_check_kv_heads(g) for g in kv_heads)
    keys = [(g, seed) for g in counts for seed in ensemble_seeds(base_seed, EXPERIMENT, size)]
    return dict(zip(keys, map_runs(run, [(seed, g) for g, seed in keys], workers)))


def cached_numbers_per_token(num_kv_heads: int, num_heads: int = NUM_HEADS, d_model: int = D_MODEL) -> int:
    """Numbers one attention layer caches per token: a key and a value of width d_k for each of G heads, 2 G d_k."""
    num_heads = check_int("num_heads", num_heads, minimum=1)
    d_model = check_int("d_model", d_model, minimum=1)
    if d_model % num_heads:
        raise ValueError(f"num_heads must divide d_model={d_model}, got {num_heads}")
    return 2 * _check_kv_heads(num_kv_heads, num_heads) * (d_model // num_heads)


@exhibit
def kv_table(runs: Mapping[tuple[int, int], KVRun], max_steps: int = MAX_STEPS) -> pd.DataFrame:
    """Per G: the cache per token beside the ensemble's quality (median and range over the runs).

    Steps to threshold: a run that did not reach it counts as ``max_steps`` in the median and is
    left out of the range. Accuracy at the end: the worst lookup of each run on its test batch.

    Returns:
        DataFrame indexed by "key/value heads G", one row per G (largest first).
    """
    check_instance("runs", runs, Mapping, "a mapping (G, seed) -> KVRun")
    if not runs:
        raise ValueError("runs must hold at least one run, got an empty mapping")
    rows = {}
    for g in sorted({g for g, _ in runs}, reverse=True):
        group = [r for (k, _), r in runs.items() if k == g]
        steps = pd.Series([r.steps for r in group], dtype=float)
        reached = steps.dropna()
        worst = pd.Series([float(r.accuracy.min()) for r in group])
        rows[g] = {"query heads per key/value head": NUM_HEADS // g,
                   "cached numbers per token": cached_numbers_per_token(g), "runs": len(group),
                   "reached": int(reached.size), "median steps": float(steps.fillna(max_steps).median()),
                   "min steps": float(reached.min()) if reached.size else float("nan"),
                   "max steps": float(reached.max()) if reached.size else float("nan"),
                   "worst lookup at the end, median": float(worst.median()),
                   "worst lookup at the end, min": float(worst.min())}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("key/value heads G")


def kv_claims(runs: Mapping[tuple[int, int], KVRun], max_steps: int = MAX_STEPS) -> list[Claim]:
    """The chapter's conclusions about G = 4, 2, 1 (the bounds come from the calibration record).

    Counts of runs are compared strictly (``> 6`` rather than ``>= 7``), so that a bound the
    ensemble meets exactly still leaves the calibration a positive margin.
    """
    table = kv_table(runs, max_steps)
    mha = table.loc[NUM_HEADS, "median steps"]
    return [
        Claim(f"G = 4, 2, 1: fewest runs reaching {THRESHOLD:.0%} on every lookup within {max_steps} steps (of {ENSEMBLE_SIZE})",
              float(table["reached"].min()), ">", 6),
        Claim("|median steps to threshold, G = 1 (MQA) minus G = 4 (MHA)|", abs(float(table.loc[1, "median steps"] - mha)),
              "<", 4 * EVAL_EVERY),  # MQA: within four checks (two failed 8 of 30 calibration ensembles)
        Claim("|median steps to threshold, G = 2 (GQA) minus G = 4 (MHA)|", abs(float(table.loc[2, "median steps"] - mha)),
              "<", 2 * EVAL_EVERY),
    ]  # no claim on the accuracy at the end: every run stops once it reaches THRESHOLD, so that would be the stopping rule
