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
from dataclasses import dataclass

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from transformer_course._exhibit import exhibit
from transformer_course._validation import (check_bool, check_choice, check_instance, check_int,
                                            check_positive_float)
from transformer_course.measure.timing import threads
from transformer_course.nn.layers import deepnorm_constants, deepnorm_init_
from transformer_course.nn.model import Encoder
from .gradient_flow import (PLACEMENTS, SortingEncoder, init_xavier_, layer_gradient_norms, probe_batch, sorting_batch,
                            sorting_loss)
from .claims import Claim
from .parallel import map_runs, workers_for
from .stacked import StackedSortingEncoders, fit_stacked, stacked_sorting_loss
from .training import ADAM_BETAS, ADAM_EPS, fit, seeded

NO_WARMUP, WARMUP = "no warm-up", "warm-up"
DEEPNORM, QK_NORM = "DeepNorm", "Pre-LN + QK-norm"
SWEEP_PLACEMENTS = {"Post-LN": False, "Pre-LN": True, DEEPNORM: False}  # placement -> norm_first


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


# --- The redesigned experiment: final loss and accuracy against the learning rate -----------------


def position_only_baseline(vocab_size: int, seq_len: int) -> tuple[float, float]:
    """Best loss and accuracy on the sorting task of a model that ignores its input and sees only positions.

    The target at position i is the i-th smallest of ``seq_len`` tokens drawn uniformly from
    ``vocab_size``: its distribution is that of an order statistic,
    P(X_(i) <= k) = sum_{j >= i} C(n, j) p^j (1 - p)^(n - j) with p = (k + 1) / V. A model that
    cannot read the tokens does best by predicting exactly that distribution at each position; its
    cross-entropy is the distribution's entropy and its accuracy the probability of the mode, both
    averaged over the positions. Below ln V and above 1/V: the positions alone carry information.

    Args:
        vocab_size: number of token ids V (>= 2).
        seq_len: number of tokens n per sequence (>= 1).

    Returns:
        (loss in nats, accuracy), both exact up to float64 rounding.

    Raises:
        TypeError, ValueError: if ``vocab_size`` is not an int >= 2 or ``seq_len`` not an int >= 1.
    """
    v = check_int("vocab_size", vocab_size, minimum=2)
    n = check_int("seq_len", seq_len, minimum=1)
    loss = accuracy = 0.0
    for i in range(1, n + 1):
        cdf = [sum(math.comb(n, j) * ((k + 1) / v) ** j * (1 - (k + 1) / v) ** (n - j) for j in range(i, n + 1))
               for k in range(v)]
        pmf = [cdf[0]] + [cdf[k] - cdf[k - 1] for k in range(1, v)]
        loss -= sum(p * math.log(p) for p in pmf if p > 0)
        accuracy += max(pmf)
    return loss / n, accuracy / n


@dataclass(frozen=True)
class SweepSettings:
    """The placement x warm-up x learning-rate experiment: task, model, schedule and grid.

    Shared by the chapter and its calibration (``CHAPTER_SWEEP``), so both run the same experiment.
    """

    lrs: tuple[float, ...] = (3e-3, 1e-2, 3e-2)
    steps: int = 50
    warmup_steps: int = 15
    num_layers: int = 2
    d_model: int = 32
    num_heads: int = 2
    d_ff: int = 64
    vocab_size: int = 16
    seq_len: int = 10
    batch_size: int = 32
    eval_size: int = 512
    high_lr: float = 3e-2  # where the chapter compares the conditions; must be one of ``lrs``
    placements: tuple[str, ...] = ("Post-LN", "Pre-LN", DEEPNORM)

    def __post_init__(self) -> None:
        if (not isinstance(self.placements, tuple) or not self.placements
                or any(p not in SWEEP_PLACEMENTS for p in self.placements)
                or len(set(self.placements)) != len(self.placements)):
            raise ValueError(f"placements must be a non-empty tuple of distinct names from "
                             f"{tuple(SWEEP_PLACEMENTS)}, got {self.placements!r}")
        if not isinstance(self.lrs, tuple) or not self.lrs:
            raise ValueError(f"lrs must be a non-empty tuple of learning rates, got {self.lrs!r}")
        object.__setattr__(self, "lrs", tuple(check_positive_float("lrs", lr) for lr in self.lrs))
        if list(self.lrs) != sorted(set(self.lrs)):
            raise ValueError(f"lrs must be increasing and distinct, got {self.lrs}")
        for name in ("steps", "warmup_steps", "num_layers", "d_model", "num_heads", "d_ff", "seq_len",
                     "batch_size", "eval_size"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("vocab_size", self.vocab_size, minimum=2)
        if self.high_lr not in self.lrs:
            raise ValueError(f"high_lr must be one of lrs {self.lrs}, got {self.high_lr!r}")
        if self.warmup_steps > self.steps:
            raise ValueError(f"warmup_steps must be <= steps ({self.steps}), got {self.warmup_steps}")


CHAPTER_SWEEP = SweepSettings()
ENSEMBLE_SIZE = 8  # seeds per ensemble in the chapter and its calibration
# The names of DL0034's three ensembles for seeds.ensemble_seeds: independent draws for each experiment; the
# QK-norm runs share the sweep's seeds on purpose (same initial weights and batches, norms aside: paired).
GRADIENT_EXPERIMENT = "placement gradient profile"
FIRST_STEP_EXPERIMENT = "placement first adam step"
SWEEP_EXPERIMENT = "placement learning-rate sweep"
GRADIENT_DEPTH = 24  # layers of the stacks whose gradients the chapter measures at initialization
GRADIENT_ENSEMBLE_SIZE = 16  # seeds of the gradient profile: per seed, Post-LN's growth spreads widely (about 1 to 2
# on the median of 8 seeds), so its median needs more draws than the trained experiments' 8
CONDITIONS = tuple((placement, warmup) for placement in SWEEP_PLACEMENTS for warmup in (NO_WARMUP, WARMUP))


def sweep_model(placement: str, seed: int, settings: SweepSettings = CHAPTER_SWEEP,
                qk_norm: str | None = None) -> SortingEncoder:
    """The freshly initialized ``SortingEncoder`` of one run of the sweep: Xavier init, drawn from ``seed``.

    "Post-LN" and "Pre-LN" differ only in ``norm_first``. "DeepNorm" is the Post-LN model with
    every residual weighted by alpha and the FFN, value and output weights scaled by beta,
    (alpha, beta) = ``nn.layers.deepnorm_constants(num_layers)``: the same draws as the Post-LN
    model of the same seed, so the comparison isolates DeepNorm. ``qk_norm`` adds QK-norm without
    changing the other weights' draws (the norms start at gamma = 1, beta = 0).

    Args:
        placement: "Post-LN", "Pre-LN" or "DeepNorm".
        seed: seeds the weights.
        settings: the sizes.
        qk_norm: None or "layernorm".

    Returns:
        The model, on the CPU.

    Raises:
        TypeError, ValueError: on an unknown placement or a bad seed.

    Wang et al., 2022, "DeepNet: Scaling Transformers to 1,000 Layers", section 3.
    """
    check_choice("placement", placement, tuple(SWEEP_PLACEMENTS))
    check_int("seed", seed, minimum=0)
    s = settings
    alpha, beta = deepnorm_constants(s.num_layers)
    with seeded(seed):
        model = init_xavier_(SortingEncoder(s.vocab_size, s.num_layers, s.d_model, s.num_heads, s.d_ff,
                                            SWEEP_PLACEMENTS[placement], max_len=s.seq_len, qk_norm=qk_norm,
                                            deepnorm_alpha=alpha if placement == DEEPNORM else None))
    return deepnorm_init_(model, beta) if placement == DEEPNORM else model


@dataclass(frozen=True)
class PlacementSweep:
    """What ``placement_lr_sweep`` measured.

    Attributes:
        curves: training loss at every step (index 1..steps), columns (placement, warm-up, lr, seed).
        finals: one row per run, columns placement, warm-up, lr, seed, loss, accuracy: the
            cross-entropy and the per-token accuracy on the sorted tokens of a held-out batch,
            measured after the last step.
        settings: the ``SweepSettings`` that produced them.
        max_logits: the largest attention logit of every run at every step (over layers, heads,
            batch and positions, on that step's batch), laid out as ``curves``.
    """

    curves: pd.DataFrame
    finals: pd.DataFrame
    settings: SweepSettings
    max_logits: pd.DataFrame


def _held_out_batch(seed: int, settings: SweepSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """The held-out batch of ``seed``: (B, T) tokens and targets, from a generator no training stream uses."""
    generator = torch.Generator().manual_seed(2**40 + seed)
    return sorting_batch(generator, settings.eval_size, settings.seq_len, settings.vocab_size)


def placement_lr_sweep(seeds: Iterable[int], settings: SweepSettings = CHAPTER_SWEEP, progress: bool = False,
                       device: torch.device | str = "cpu", workers: int = 1) -> PlacementSweep:
    """Train a ``SortingEncoder`` once per (placement, warm-up, learning rate, seed).

    Every run uses Xavier initialization, Adam at peak learning rate ``lr`` and no gradient
    clipping, as ``training.fit``; "warm-up" ramps the learning rate linearly over the first
    ``settings.warmup_steps`` steps, "no warm-up" starts at ``lr``. The runs of one seed share
    their initial weights (per placement), their training batches and their held-out batch, so
    the four conditions and the learning rates are compared on the same draws. The runs of one
    (placement, seed) are trained side by side as one ``stacked.StackedSortingEncoders`` (the
    same runs as ``fit`` would make, one after another, at a fraction of the time).

    Args:
        seeds: the ensemble; each seed seeds the weights, the training batches and the held-out batch.
        settings: task, model, schedule and learning-rate grid (``CHAPTER_SWEEP`` in the chapter).
        progress: one tqdm bar over the (placement, seed) pairs (shown only with ``workers`` = 1).
        device: where to train (weights are drawn on the CPU, then moved).
        workers: on the CPU, the (placement, seed) stacks train in this many processes
            (``parallel.map_runs``; each stack trains on one thread, so the numbers are the same
            bit for bit); on another device they train one after another.

    Returns:
        A ``PlacementSweep`` (curves, finals, settings).

    Raises:
        TypeError, ValueError: if ``seeds`` is empty or holds a non-int or negative seed, or
            ``settings`` is not a ``SweepSettings``.

    Xiong et al., 2020, "On Layer Normalization in the Transformer Architecture", section 4.
    """
    seeds = [check_int("seeds", seed, minimum=0) for seed in seeds]
    if not seeds:
        raise ValueError("seeds must hold at least one seed, got none")
    check_instance("settings", settings, SweepSettings, "SweepSettings")
    workers = workers_for(workers, device)
    s = settings
    groups = [tuple(p for p in s.placements if SWEEP_PLACEMENTS[p] == norm_first) for norm_first in (False, True)]
    groups = [group for group in groups if group]  # Post-LN and DeepNorm share a stack (same norm_first)
    pairs = [(group, seed) for group in groups for seed in seeds]
    if workers > 1:
        results = map_runs(_sweep_stack, [(group, seed, s, device) for group, seed in pairs], workers)
    else:
        results = [_sweep_stack(group, seed, s, device)
                   for group, seed in tqdm(pairs, disable=not progress, desc="runs", leave=False)]
    curves, logits, rows = {}, {}, []
    for (group, seed), (members, losses, max_logits, held_out, accuracy) in zip(pairs, results):
        for index, (placement, warmup, lr) in enumerate(members):
            curves[(placement, warmup, lr, seed)] = losses[:, index].tolist()
            logits[(placement, warmup, lr, seed)] = max_logits[:, index].tolist()
            rows.append({"placement": placement, "warm-up": warmup, "lr": lr, "seed": seed,
                         "loss": float(held_out[index]), "accuracy": float(accuracy[index])})
    order = [(placement, warmup, lr, seed) for placement in s.placements for warmup in (NO_WARMUP, WARMUP)
             for lr in s.lrs for seed in seeds]
    return _sweep_result(curves, logits, rows, order, s)


def _sweep_stack(group: tuple[str, ...], seed: int, s: SweepSettings, device: torch.device | str) -> tuple:
    """Train the runs of one seed for the placements of ``group`` (which share ``norm_first``) as one stack.

    Returns:
        (members, losses, max_logits, held_out, accuracy): the (placement, warm-up, lr) of each
        member, its (steps, E) training losses and largest logits, and its (E,) held-out loss and accuracy.
    """
    schedules = [(warmup, lr) for warmup in (NO_WARMUP, WARMUP) for lr in s.lrs]  # the runs of one (placement, seed)
    members = [(placement, warmup, lr) for placement in group for warmup, lr in schedules]
    singles = {placement: sweep_model(placement, seed, s) for placement in group}
    model = StackedSortingEncoders([singles[placement] for placement, _, _ in members]).to(device)
    losses, max_logits = _fit_members(model, [seed] * len(members), s, [lr for _, _, lr in members],
                                      [s.warmup_steps if warmup == WARMUP else 0 for _, warmup, _ in members], device)
    held_out, accuracy = _held_out(model, [seed] * len(members), s, device)
    return members, losses.cpu(), max_logits.cpu(), held_out.cpu(), accuracy.cpu()


def _fit_members(model: StackedSortingEncoders, seeds: list[int], s: SweepSettings, lrs: list[float],
                 warmups: list[int], device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """Train the stacked members, member e on the batches ``fit(seed=seeds[e])`` would draw; (steps, E) losses and max logits."""
    generators = {seed: torch.Generator().manual_seed(seed) for seed in dict.fromkeys(seeds)}
    columns = {seed: [e for e, member_seed in enumerate(seeds) if member_seed == seed] for seed in generators}

    def make_batch() -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.empty(len(seeds), s.batch_size, s.seq_len, dtype=torch.long)  # (E, B, T)
        targets = torch.empty_like(tokens)  # (E, B, T)
        for seed, generator in generators.items():  # one draw per seed, shared by that seed's members
            tokens[columns[seed]], targets[columns[seed]] = sorting_batch(generator, s.batch_size, s.seq_len,
                                                                          s.vocab_size)
        return tokens.to(device), targets.to(device)

    return fit_stacked(model, make_batch, s.steps, lrs, warmups, record_max_logit=True)


def _held_out(model: StackedSortingEncoders, seeds: list[int], s: SweepSettings,
              device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """Each member's cross-entropy and accuracy on its seed's held-out batch: (E,) each."""
    batches = [_held_out_batch(seed, s) for seed in seeds]
    tokens, targets = torch.stack([b[0] for b in batches]), torch.stack([b[1] for b in batches])  # (E, B, T)
    with torch.no_grad():
        logits = model(tokens.to(device)).cpu()  # (E, B, T, V)
    accuracy = (logits.argmax(dim=-1) == targets).float().flatten(1).mean(dim=1)  # (E,)
    return stacked_sorting_loss(logits, targets), accuracy


def _sweep_result(curves: dict, logits: dict, rows: list[dict], order: list[tuple], s: SweepSettings) -> PlacementSweep:
    index = pd.RangeIndex(1, s.steps + 1, name="step")
    tables = []
    for values in (curves, logits):
        table = pd.DataFrame({key: values[key] for key in order}, index=index)
        table.columns.names = ["placement", "warm-up", "lr", "seed"]
        tables.append(table)
    finals = pd.DataFrame(rows).set_index(["placement", "warm-up", "lr", "seed"]).loc[order].reset_index()
    return PlacementSweep(tables[0], finals, s, tables[1])


def qk_norm_runs(seeds: Iterable[int], settings: SweepSettings = CHAPTER_SWEEP, progress: bool = False,
                 device: torch.device | str = "cpu") -> PlacementSweep:
    """The sweep's Pre-LN runs without warm-up at ``settings.high_lr``, with QK-norm ("layernorm").

    Each seed's run has the initial weights (QK-norm's norms aside), the training batches and the
    held-out batch of that seed's Pre-LN run of ``placement_lr_sweep``: the two differ only in
    QK-norm. The seeds are trained side by side as one stacked model.

    Args:
        seeds: the ensemble.
        settings: the sweep's settings.
        progress: unused (one stacked model); accepted for symmetry with ``placement_lr_sweep``.
        device: where to train.

    Returns:
        A ``PlacementSweep`` whose placement is "Pre-LN + QK-norm", warm-up "no warm-up", lr
        ``settings.high_lr``.

    Raises:
        TypeError, ValueError: as ``placement_lr_sweep``.

    Dehghani et al., 2023, "Scaling Vision Transformers to 22 Billion Parameters", section 2;
    Wortsman et al., 2023, "Small-scale proxies for large-scale Transformer training instabilities".
    """
    seeds = [check_int("seeds", seed, minimum=0) for seed in seeds]
    if not seeds:
        raise ValueError("seeds must hold at least one seed, got none")
    check_instance("settings", settings, SweepSettings, "SweepSettings")
    s = settings
    model = StackedSortingEncoders([sweep_model("Pre-LN", seed, s, qk_norm="layernorm") for seed in seeds]).to(device)
    losses, max_logits = _fit_members(model, seeds, s, [s.high_lr] * len(seeds), [0] * len(seeds), device)
    held_out, accuracy = _held_out(model, seeds, s, device)
    curves, logits, rows = {}, {}, []
    for index, seed in enumerate(seeds):
        key = (QK_NORM, NO_WARMUP, s.high_lr, seed)
        curves[key], logits[key] = losses[:, index].tolist(), max_logits[:, index].tolist()
        rows.append({"placement": QK_NORM, "warm-up": NO_WARMUP, "lr": s.high_lr, "seed": seed,
                     "loss": float(held_out[index]), "accuracy": float(accuracy[index])})
    return _sweep_result(curves, logits, rows, [(QK_NORM, NO_WARMUP, s.high_lr, seed) for seed in seeds], s)


def _check_finals(finals: object) -> pd.DataFrame:
    if not isinstance(finals, pd.DataFrame):
        raise TypeError(f"finals must be a pandas DataFrame, got {type(finals).__name__}")
    missing = {"placement", "warm-up", "lr", "seed", "loss", "accuracy"} - set(finals.columns)
    if missing or finals.empty:
        raise ValueError(f"finals must be the non-empty finals table of placement_lr_sweep, missing {sorted(missing)}")
    return finals


@exhibit
def sweep_table(finals: pd.DataFrame, metric: str = "loss") -> pd.DataFrame:
    """Median [min, max] of ``metric`` over the seeds, one row per condition, one column per learning rate.

    Args:
        finals: ``PlacementSweep.finals``.
        metric: "loss" or "accuracy".

    Returns:
        A DataFrame of strings "median [min, max]" (loss to 2 decimals, accuracy in whole percent),
        indexed by (placement, warm-up), columns the learning rates.

    Raises:
        TypeError, ValueError: on a malformed ``finals`` or an unknown ``metric``.
    """
    finals = _check_finals(finals)
    check_choice("metric", metric, ("loss", "accuracy"))
    form = "{:.2f}".format if metric == "loss" else (lambda value: f"{100 * value:.0f}%")
    grouped = finals.groupby(["placement", "warm-up", "lr"])[metric]
    cells = pd.Series([f"{form(median)} [{form(low)}, {form(high)}]" for median, low, high
                       in zip(grouped.median(), grouped.min(), grouped.max())], index=grouped.median().index)
    table = cells.unstack("lr")
    table.columns = [f"lr {lr:g}" for lr in table.columns]
    return table


def best_learning_rates(finals: pd.DataFrame) -> pd.DataFrame:
    """Per condition, the learning rate with the lowest median final loss, that loss and its accuracy.

    Args:
        finals: ``PlacementSweep.finals``.

    Returns:
        A DataFrame indexed by (placement, warm-up) with columns "best lr", "median loss" and
        "median accuracy" (at the best learning rate).

    Raises:
        TypeError, ValueError: on a malformed ``finals``.
    """
    medians = _check_finals(finals).groupby(["placement", "warm-up", "lr"])[["loss", "accuracy"]].median()
    best = medians["loss"].groupby(level=["placement", "warm-up"]).idxmin()
    return pd.DataFrame({"best lr": [index[2] for index in best],
                         "median loss": [medians.loc[index, "loss"] for index in best],
                         "median accuracy": [medians.loc[index, "accuracy"] for index in best]},
                        index=best.index)


# --- Adam's first step: equal-sized updates, unequal effects (Liu et al., 2020) --------------------


def first_adam_step(num_layers: int = 24, norm_first: bool = False, lr: float = 7e-3, seed: int = 0,
                    d_model: int = 64, num_heads: int = 4, d_ff: int = 256, batch_size: int = 8, seq_len: int = 16,
                    num_classes: int = 10, parameter: str = "feed_forward.linear2.weight") -> pd.DataFrame:
    """Gradient norm, first Adam update and the output change it causes, for every layer of a fresh stack.

    The stack and its loss are those of ``gradient_flow.layer_gradient_norms`` (Xavier init,
    standard-normal token vectors, a linear head, cross-entropy against random labels). One Adam
    step (betas (0.9, 0.98), eps 1e-9, as ``training.fit``) updates every parameter. Adam's first
    update of an entry is lr * m / (sqrt(v) + eps) with m = g and v = g^2 after bias correction,
    that is lr * sign(g): its size does not depend on the size of the gradient, only on how many
    entries have a non-zero gradient. What differs between placements is how much the same-sized
    update moves the output, which Liu et al. (2020) trace to Post-LN's heavy dependence on its
    residual branches.

    Args:
        num_layers, d_model, num_heads, d_ff: sizes of the ``Encoder``.
        norm_first: False for Post-LN, True for Pre-LN.
        lr: Adam's learning rate.
        seed: seeds the weights and the data.
        batch_size, seq_len, num_classes: shape of the random classification batch.
        parameter: which parameter of each layer the per-layer columns describe (default: the
            FFN's output matrix W^2).

    Returns:
        A DataFrame indexed by layer (1..L) with columns "gradient norm" and "update norm" (of
        ``parameter``), and "output change": ||f(x; W_1) - f(x; W_0)|| / ||f(x; W_0)|| of the
        stack's output on the same batch after the one step, the same for every row.

    Raises:
        TypeError, ValueError: as ``layer_gradient_norms``, or if ``lr`` is not positive.

    Liu et al., 2020, "Understanding the Difficulty of Training Transformers", sections 3-4.
    """
    for name, value in (("num_layers", num_layers), ("batch_size", batch_size), ("seq_len", seq_len),
                        ("num_classes", num_classes)):
        check_int(name, value, minimum=1)
    check_int("seed", seed, minimum=0)
    check_bool("norm_first", norm_first)
    lr = check_positive_float("lr", lr)
    with seeded(seed):
        encoder = init_xavier_(Encoder(num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=norm_first))
        head = init_xavier_(nn.Linear(d_model, num_classes))
    x, labels = probe_batch(encoder, parameter, seed, batch_size, seq_len, d_model, num_classes)  # (B, T, D), (B, T)
    before = [dict(layer.named_parameters())[parameter].detach().clone() for layer in encoder.layers]
    optimizer = torch.optim.Adam([*encoder.parameters(), *head.parameters()], lr=lr, betas=ADAM_BETAS, eps=ADAM_EPS)
    with threads(1):
        output = encoder(x)  # (B, T, D)
        F.cross_entropy(head(output).flatten(0, 1), labels.flatten()).backward()
        gradients = [float(dict(layer.named_parameters())[parameter].grad.norm()) for layer in encoder.layers]
        optimizer.step()
        with torch.no_grad():
            change = float((encoder(x) - output).norm() / output.norm())
    updates = [float((dict(layer.named_parameters())[parameter].detach() - old).norm())
               for layer, old in zip(encoder.layers, before)]
    return pd.DataFrame({"gradient norm": gradients, "update norm": updates, "output change": change},
                        index=pd.RangeIndex(1, num_layers + 1, name="layer"))


@exhibit
def gradient_norm_ensemble(num_layers: int, seeds: Iterable[int], **kwargs) -> pd.DataFrame:
    """Per-layer gradient norms at initialization for Post-LN and Pre-LN, one column per seed.

    ``gradient_flow.gradient_norm_profile`` gives the mean over seeds; this keeps every seed, so
    a chapter can show the spread and state its conclusions about the ensemble.

    Args:
        num_layers: depth L of both stacks.
        seeds: one stack per seed and placement.
        **kwargs: passed on to ``gradient_flow.layer_gradient_norms`` (sizes, ``init``, ``parameter``).

    Returns:
        A DataFrame indexed by layer (1..L) with columns (placement, seed).

    Raises:
        ValueError: if ``seeds`` is empty (and whatever ``layer_gradient_norms`` raises).
    """
    seeds = [check_int("seeds", seed, minimum=0) for seed in seeds]
    if not seeds:
        raise ValueError("seeds must hold at least one seed, got none")
    columns = {(label, seed): layer_gradient_norms(num_layers, norm_first, seed=seed, **kwargs).numpy()
               for label, norm_first in PLACEMENTS.items() for seed in seeds}
    table = pd.DataFrame(columns, index=pd.RangeIndex(1, num_layers + 1, name="layer"))
    table.columns.names = ["placement", "seed"]
    return table


FIRST_STEP_LR = 1e-5  # small enough that one step stays in the linear regime of both placements
FIRST_STEP_DEPTHS = (6, 24)


@exhibit
def first_step_ensemble(seeds: Iterable[int], depths: Iterable[int] = FIRST_STEP_DEPTHS,
                        lr: float = FIRST_STEP_LR) -> pd.DataFrame:
    """``first_adam_step`` for every depth, placement and seed, one row each, layers summarized.

    Args:
        seeds: the ensemble.
        depths: numbers of layers L of the stacks.
        lr: Adam's learning rate of the one step.

    Returns:
        A DataFrame with columns depth, placement, seed, "gradient norm" (mean over the layers of
        the FFN output matrix's), "update norm / lr" (mean over the layers) and "output change".

    Raises:
        TypeError, ValueError: if ``seeds`` or ``depths`` is empty or holds a non-int, or as
            ``first_adam_step``.
    """
    seeds = [check_int("seeds", seed, minimum=0) for seed in seeds]
    depths = [check_int("depths", depth, minimum=1) for depth in depths]
    if not seeds or not depths:
        raise ValueError(f"seeds and depths must each hold at least one value, got {seeds} and {depths}")
    rows = []
    for depth in depths:
        for placement, norm_first in PLACEMENTS.items():
            for seed in seeds:
                step = first_adam_step(depth, norm_first, lr=lr, seed=seed)
                rows.append({"depth": depth, "placement": placement, "seed": seed,
                             "gradient norm": float(step["gradient norm"].mean()),
                             "update norm / lr": float(step["update norm"].mean() / lr),
                             "output change": float(step["output change"].iloc[0])})
    return pd.DataFrame(rows)


def first_step_claims(ensemble: pd.DataFrame) -> list[Claim]:
    """The conclusions the chapter draws from ``first_step_ensemble``: equal updates, unequal effects.

    Args:
        ensemble: from ``first_step_ensemble`` (with the depths 6 and 24).

    Returns:
        Claims on the medians over the seeds: Adam's updates are about the same size in both
        placements while their gradients are not; the same-sized first step moves a 24-layer
        Post-LN stack's output several times more than a Pre-LN one's, and that ratio grows with
        depth.
    """
    check_instance("ensemble", ensemble, pd.DataFrame, "pandas DataFrame")
    by = ensemble.set_index(["depth", "placement", "seed"]).sort_index()

    def ratio(depth: int, column: str) -> float:
        return float((by.loc[(depth, "Post-LN"), column] / by.loc[(depth, "Pre-LN"), column]).median())

    deep, shallow = max(ensemble["depth"]), min(ensemble["depth"])
    return [
        Claim(f"{deep} layers: median Post-LN / Pre-LN mean gradient norm", ratio(deep, "gradient norm"), ">", 1.2),
        Claim(f"{deep} layers: median Post-LN / Pre-LN mean first-update norm", ratio(deep, "update norm / lr"),
              "<", 1.25),
        Claim(f"{deep} layers: median Post-LN / Pre-LN first-update norm (lower side)",
              ratio(deep, "update norm / lr"), ">", 0.8),
        Claim(f"{deep} layers: median Post-LN / Pre-LN output change after the first step",
              ratio(deep, "output change"), ">", 2.0),
        Claim(f"output-change ratio, {deep} layers minus {shallow} layers (medians)",
              ratio(deep, "output change") - ratio(shallow, "output change"), ">", 0.3),
    ]


def gradient_profile_claims(profile: pd.DataFrame, top: int = 6) -> list[Claim]:
    """The conclusions drawn from a Xavier-initialized ``gradient_norm_ensemble``, as claims on medians over seeds.

    Args:
        profile: from ``gradient_norm_ensemble`` (columns (placement, seed)).
        top: how many layers at each end of the stack are compared.

    Returns:
        Claims: at the last layer Post-LN's gradient is larger than Pre-LN's; Post-LN's gradients
        grow from the first ``top`` layers to the last ``top``, Pre-LN's shrink.
    """
    check_instance("profile", profile, pd.DataFrame, "pandas DataFrame")
    top = check_int("top", top, minimum=1)
    post, pre = profile["Post-LN"], profile["Pre-LN"]

    def growth(table: pd.DataFrame) -> pd.Series:  # per seed: mean of the last `top` layers / first `top`
        return table.iloc[-top:].mean() / table.iloc[:top].mean()

    return [
        Claim("last layer: median over seeds of Post-LN / Pre-LN gradient norm",
              float((post.iloc[-1] / pre.iloc[-1]).median()), ">", 2.0),
        Claim(f"Post-LN: median over seeds of (last {top} / first {top} layers) gradient norm",
              float(growth(post).median()), ">", 1.0),  # "grow": larger at the last layers than the first
        Claim(f"Pre-LN: median over seeds of (last {top} / first {top} layers) gradient norm",
              float(growth(pre).median()), "<", 0.8),
    ]


def sweep_claims(finals: pd.DataFrame, settings: SweepSettings = CHAPTER_SWEEP) -> list[Claim]:
    """The conclusions the chapter draws from ``placement_lr_sweep``, each a statistic over the seeds.

    Args:
        finals: ``PlacementSweep.finals`` of a run with ``settings``.
        settings: the sweep's settings; its learning rates must include ``settings.high_lr``.

    Returns:
        Claims on medians over the seeds, relative to the position-only baseline where it matters.
    """
    finals = _check_finals(finals)
    baseline = position_only_baseline(settings.vocab_size, settings.seq_len)[0]
    medians = finals.groupby(["placement", "warm-up", "lr"])[["loss", "accuracy"]].median()
    loss = medians["loss"]
    high, low = settings.high_lr, settings.lrs[0]

    def below_baseline(placement: str, warmup: str) -> float:
        return float(baseline - loss[(placement, warmup, high)])

    best = loss.groupby(level="placement").min()  # over schedules and learning rates
    warmup_cost = min(float(loss[(p, WARMUP, low)] - loss[(p, NO_WARMUP, low)]) for p in PLACEMENTS)
    return [
        Claim(f"Post-LN, no warm-up, lr {high:g}: median loss above the position-only baseline (nats)",
              -below_baseline("Post-LN", NO_WARMUP), ">", 0.2),
        Claim(f"Post-LN, warm-up, lr {high:g}: median loss below the position-only baseline (nats)",
              below_baseline("Post-LN", WARMUP), ">", -0.1),  # near the line or below: on a few draws just above it
        Claim(f"Pre-LN, no warm-up, lr {high:g}: median loss below the position-only baseline (nats)",
              below_baseline("Pre-LN", NO_WARMUP), ">", 0.2),
        Claim(f"Pre-LN, lr {high:g}: median loss without warm-up minus with (nats)",
              float(loss[("Pre-LN", NO_WARMUP, high)] - loss[("Pre-LN", WARMUP, high)]), ">", 0.05),
        Claim(f"lr {low:g}: smallest over placements of median loss with warm-up minus without (nats)",
              warmup_cost, ">", 0.05),
        Claim("best median loss over the sweep: Post-LN minus Pre-LN (nats)",
              float(best["Post-LN"] - best["Pre-LN"]), ">", 0.05),
    ]


def _final_max_logits(max_logits: pd.DataFrame, placement: str, warmup: str, lr: float) -> pd.Series:
    """The largest attention logit at the last step of every seed's run of one condition (indexed by seed)."""
    return max_logits.iloc[-1].xs((placement, warmup, lr), level=["placement", "warm-up", "lr"])


def qk_norm_claims(sweep: PlacementSweep, qk_norm: PlacementSweep) -> list[Claim]:
    """The conclusions drawn from attention-logit growth, without QK-norm (the sweep) and with it.

    Both at the sweep's largest learning rate, Pre-LN, no warm-up, on the same seeds.

    Args:
        sweep: ``placement_lr_sweep``'s result (with its ``max_logits``).
        qk_norm: ``qk_norm_runs``'s result on the same seeds and settings.

    Returns:
        Claims on medians over the seeds: without QK-norm the largest logit grows during training;
        with QK-norm it stays small; QK-norm's run ends with a lower held-out loss; Post-LN
        without warm-up at that rate ends with more than twice Pre-LN's largest logit.
    """
    check_instance("sweep", sweep, PlacementSweep, "PlacementSweep")
    check_instance("qk_norm", qk_norm, PlacementSweep, "PlacementSweep")
    high = sweep.settings.high_lr
    without = _final_max_logits(sweep.max_logits, "Pre-LN", NO_WARMUP, high)
    first = sweep.max_logits.iloc[0].xs(("Pre-LN", NO_WARMUP, high), level=["placement", "warm-up", "lr"])
    with_qk = _final_max_logits(qk_norm.max_logits, QK_NORM, NO_WARMUP, high)
    post = _final_max_logits(sweep.max_logits, "Post-LN", NO_WARMUP, high)
    loss = sweep.finals.set_index(["placement", "warm-up", "lr", "seed"])["loss"]
    qk_loss = qk_norm.finals.set_index("seed")["loss"]
    pre_loss = loss.xs(("Pre-LN", NO_WARMUP, high), level=["placement", "warm-up", "lr"])
    return [
        Claim(f"Pre-LN, lr {high:g}: median over seeds of (largest logit at the last step / at step 1)",
              float((without / first).median()), ">", 3.0),
        Claim(f"Pre-LN + QK-norm, lr {high:g}: median largest logit at the last step",
              float(with_qk.median()), "<", 6.0),
        Claim(f"lr {high:g}: median over seeds of largest logit without / with QK-norm, last step",
              float((without / with_qk).median()), ">", 3.0),
        Claim(f"Pre-LN, lr {high:g}: median held-out loss without QK-norm minus with (nats)",
              float((pre_loss - qk_loss).median()), ">", 0.15),
        Claim(f"no warm-up, lr {high:g}: median over seeds of largest logit Post-LN / Pre-LN, last step",
              float((post / without).median()), ">", 2.0),
    ]


def deepnorm_claims(finals: pd.DataFrame, settings: SweepSettings = CHAPTER_SWEEP) -> list[Claim]:
    """What the sweep shows about DeepNorm against plain Post-LN (and Pre-LN), as claims on medians over seeds.

    Args:
        finals: ``PlacementSweep.finals`` of a run with ``settings`` (DeepNorm among its placements).
        settings: the sweep's settings.

    Returns:
        Claims: without a warm-up at the largest rate DeepNorm ends far below Post-LN and below the
        position-only baseline; its best median loss over the sweep is below Post-LN's and above
        Pre-LN's.
    """
    finals = _check_finals(finals)
    baseline = position_only_baseline(settings.vocab_size, settings.seq_len)[0]
    loss = finals.groupby(["placement", "warm-up", "lr"])["loss"].median()
    high = settings.high_lr
    best = loss.groupby(level="placement").min()
    return [
        Claim(f"lr {high:g}, no warm-up: median loss Post-LN minus DeepNorm (nats)",
              float(loss[("Post-LN", NO_WARMUP, high)] - loss[(DEEPNORM, NO_WARMUP, high)]), ">", 0.6),
        Claim(f"DeepNorm, no warm-up, lr {high:g}: median loss below the position-only baseline (nats)",
              float(baseline - loss[(DEEPNORM, NO_WARMUP, high)]), ">", 0.15),
        Claim("best median loss over the sweep: Post-LN minus DeepNorm (nats)",
              float(best["Post-LN"] - best[DEEPNORM]), ">", 0.02),
        Claim("best median loss over the sweep: DeepNorm minus Pre-LN (nats)",
              float(best[DEEPNORM] - best["Pre-LN"]), ">", 0.0),
    ]
