"""Post-LN vs Pre-LN, each with and without a learning-rate warm-up, over several seeds.

Xiong et al. (2020) show that a Post-LN Transformer trained with Adam at a learning rate that a
Pre-LN one tolerates can fail without a warm-up (its loss stays high), that a warm-up rescues it,
and that a Pre-LN Transformer trains with or without one. Liu et al. (2020) trace the failure to
Post-LN's strong dependence on its residual branches, which amplifies the first, large updates.
This module runs the 2 x 2 experiment on the sorting task of ``gradient_flow`` with a model small
enough to train a dozen times in seconds: same seeds, same data, same Xavier initialization, the
only differences being ``norm_first`` and ``warmup_steps``.

Shape legend: B batch, T length, V vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import pandas as pd
import torch

from transformer_course._exhibit import exhibit
from transformer_course._validation import check_int
from .gradient_flow import PLACEMENTS, SortingEncoder, sorting_loss, init_xavier_, sorting_batch
from .training import fit, seeded

NO_WARMUP, WARMUP = "no warm-up", "warm-up"


def chance_loss(vocab_size: int) -> float:
    """ln V: the cross-entropy of a uniform guess over ``vocab_size`` tokens, the loss of a model that learned nothing.

    Args:
        vocab_size: number of token ids V (>= 2).

    Returns:
        ln V in nats.

    Raises:
        TypeError, ValueError: if ``vocab_size`` is not an int >= 2.
    """
    return math.log(check_int("vocab_size", vocab_size, minimum=2))


@exhibit
def placement_warmup_runs(seeds: Iterable[int] = (0, 1, 2), steps: int = 100, lr: float = 7e-3,
                          warmup_steps: int = 50, num_layers: int = 6, d_model: int = 32, num_heads: int = 2,
                          d_ff: int = 64, vocab_size: int = 16, seq_len: int = 10, batch_size: int = 16,
                          progress: bool = False, device: torch.device | str = "cpu") -> pd.DataFrame:
    """Train a ``SortingEncoder`` for every (placement, warm-up, seed): 2 x 2 x len(seeds) runs.

    Every run uses Xavier initialization (``init_xavier_``), Adam at peak learning rate ``lr`` and
    no gradient clipping (``training.fit``); the runs of one seed share their initial weights
    (per placement) and their batches. "warm-up" ramps the learning rate linearly from
    lr / warmup_steps to ``lr`` over the first ``warmup_steps`` steps; "no warm-up" uses ``lr``
    from the first step.

    Args:
        seeds: one run per seed and condition; each seeds the weights and the data.
        steps: optimizer steps per run.
        lr: peak learning rate.
        warmup_steps: length of the warm-up of the "warm-up" runs (>= 1).
        num_layers, d_model, num_heads, d_ff: sizes of the encoder.
        vocab_size, seq_len, batch_size: shape of the sorting task.
        progress: one tqdm bar per run (off by default).
        device: where to train (weights are drawn on the CPU, then moved).

    Returns:
        A DataFrame indexed by step (1..steps) whose columns are a MultiIndex (placement,
        warm-up, seed): placement in ("Post-LN", "Pre-LN"), warm-up in ("no warm-up", "warm-up").

    Raises:
        TypeError, ValueError: if ``seeds`` is empty or holds a non-int, ``warmup_steps`` < 1,
            or on invalid sizes or training arguments.

    Xiong et al., 2020, "On Layer Normalization in the Transformer Architecture", section 4.
    """
    seeds = [check_int("seeds", seed, minimum=0) for seed in seeds]
    if not seeds:
        raise ValueError("seeds must hold at least one seed, got none")
    warmup_steps = check_int("warmup_steps", warmup_steps, minimum=1)
    columns = {}
    for placement, norm_first in PLACEMENTS.items():
        for warmup_label, warmup in ((NO_WARMUP, 0), (WARMUP, warmup_steps)):
            for seed in seeds:
                with seeded(seed):
                    model = init_xavier_(SortingEncoder(vocab_size, num_layers, d_model, num_heads, d_ff,
                                                        norm_first, max_len=max(seq_len, 1))).to(device)
                columns[(placement, warmup_label, seed)] = fit(
                    model, lambda g: sorting_batch(g, batch_size, seq_len, vocab_size), sorting_loss, steps,
                    lr=lr, warmup_steps=warmup, seed=seed, progress=progress, clip_grad_norm=None)
    table = pd.DataFrame(columns, index=pd.RangeIndex(1, steps + 1, name="step"))
    table.columns.names = ["placement", "warm-up", "seed"]
    return table


@exhibit
def final_losses(runs: pd.DataFrame, last: int = 10) -> pd.DataFrame:
    """Mean training loss of the ``last`` steps of every run: one row per condition, one column per seed.

    Args:
        runs: from ``placement_warmup_runs``.
        last: number of final steps averaged (a single step's loss is noisy).

    Returns:
        A DataFrame indexed by (placement, warm-up) with one column per seed.

    Raises:
        TypeError: if ``runs`` is not a DataFrame or ``last`` is not an int.
        ValueError: if ``runs`` lacks the (placement, warm-up, seed) columns or ``last`` is not in
            1..len(runs).
    """
    if not isinstance(runs, pd.DataFrame):
        raise TypeError(f"runs must be a pandas DataFrame, got {type(runs).__name__}")
    if list(runs.columns.names) != ["placement", "warm-up", "seed"]:
        raise ValueError(f"runs must have columns (placement, warm-up, seed), got names {list(runs.columns.names)}")
    last = check_int("last", last, minimum=1)
    if last > len(runs):
        raise ValueError(f"last must be <= the number of steps {len(runs)}, got {last}")
    return runs.iloc[-last:].mean().unstack("seed")  # (conditions, seeds)
