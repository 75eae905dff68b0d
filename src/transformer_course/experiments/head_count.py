"""Heads at a fixed width: the four-lookups task trained with h heads of width d_model / h, for several h.

Shape legend: B batch, T sequence length, R relations, D = d_model, Dh = D / h.

Vaswani et al. (2017, Table 3, rows A) vary the number of heads h of the base model while keeping
the computation constant (d_k = d_v = d_model / h): one head is 0.9 BLEU worse than the best
setting (h = 8), and too many heads (h = 32, d_k = 16) also lose quality. This module runs the same
ablation on the toy task of :mod:`.head_specialization`: the same ``LookupModel`` at the same
``d_model``, the same steps, data and seed, only ``num_heads`` (and so ``d_head``) changes. The
parameter count does not depend on h (the projections are D x D whatever the split), which
:func:`head_count_table` reports beside the accuracy of every relation.

An endpoint at a fixed budget mixes "cannot" with "has not yet": one head still improves when
several heads have long finished. So the study measures *steps to threshold* (the first step at
which every lookup reaches 95% on held-out sequences) over an ensemble of seeds, and reads the
single head's learning curve at the end of the budget.

* :func:`train_head_counts`: one trained ``LookupModel`` per head count (already trained models can
  be passed in and are reused, not retrained).
* :func:`head_count_table`: accuracy per relation, d_head and parameters, one row per head count.
* :func:`train_with_curve`, :func:`steps_to_threshold`: a run with its learning curve.
* :func:`lookup_run`, :func:`run_ensemble`: the chapter's study (``STUDY_HEADS`` x ``ENSEMBLE_SIZE``
  seeds, on the CPU), :func:`steps_table`, :func:`specialization_table` and :func:`study_claims`
  its tables and calibrated conclusions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pandas as pd
import torch

from transformer_course._exhibit import exhibit
from transformer_course._validation import check_instance, check_int, check_tensor
from .claims import Claim
from .parallel import map_runs
from .seeds import ensemble_seeds
from .head_specialization import (LookupModel, ablation_table, head_relation_scores, lookup_accuracy,
                                  make_lookup_batch, specialization_summary, train_lookup_model)

HEAD_COUNTS = (1, 2, 4, 8)


def _check_head_counts(heads: object, d_model: int) -> tuple[int, ...]:
    if isinstance(heads, (str, bytes)) or not isinstance(heads, Sequence):
        raise TypeError(f"heads must be a sequence of ints, got {type(heads).__name__} ({heads!r})")
    counts = tuple(check_int("heads", h, minimum=1) for h in heads)
    if not counts:
        raise ValueError("heads must hold at least one head count, got an empty sequence")
    if len(set(counts)) != len(counts):
        raise ValueError(f"heads must not repeat a head count, got {list(counts)}")
    bad = [h for h in counts if d_model % h]
    if bad:
        raise ValueError(f"heads must divide d_model={d_model} (so that d_head = d_model / h), got {bad}")
    return counts


def train_head_counts(
    heads: Sequence[int] = HEAD_COUNTS,
    d_model: int = 32,
    seed: int = 0,
    steps: int = 400,
    trained: Mapping[int, LookupModel] | None = None,
    **train_kwargs: object,
) -> dict[int, LookupModel]:
    """Train one :class:`LookupModel` per head count h, all at width ``d_model`` (so d_head = d_model / h).

    Every model gets the same ``seed`` (initial weights and batches), ``steps`` and other training
    arguments; only ``num_heads`` differs. A model in ``trained`` (keyed by h) is used as it is,
    after checking that its width and head count match, which saves retraining the model a chapter
    has already trained with the same settings.

    Args:
        heads: the head counts h to compare, each dividing ``d_model``.
        d_model: the width D shared by all models.
        seed: seeds every model's initial weights and data.
        steps: Adam steps per model.
        trained: optional already trained models, keyed by head count.
        **train_kwargs: further arguments of :func:`.head_specialization.train_lookup_model`
            (``batch_size``, ``lr``, ``device``, ...).

    Returns:
        dict h -> trained model (eval mode), in the order of ``heads``.

    Raises:
        TypeError, ValueError: for head counts that are not distinct positive divisors of
            ``d_model``, or a model in ``trained`` whose width or head count does not match.

    Vaswani et al., 2017, Table 3, rows (A).
    """
    d_model = check_int("d_model", d_model, minimum=1)
    counts = _check_head_counts(heads, d_model)
    trained = {} if trained is None else dict(check_instance("trained", trained, Mapping, "a mapping h -> model"))
    for h, model in trained.items():
        check_instance(f"trained[{h!r}]", model, LookupModel)
        attention = model.attention
        if attention.num_heads != h or attention.d_model != d_model:
            raise ValueError(f"trained[{h!r}] must have num_heads={h} and d_model={d_model}, got "
                             f"num_heads={attention.num_heads} and d_model={attention.d_model}")
    models = {}
    for h in counts:
        if h in trained:
            models[h] = trained[h]
        else:
            models[h], _ = train_lookup_model(seed=seed, steps=steps, d_model=d_model, num_heads=h, **train_kwargs)
    return models


@exhibit
def head_count_table(models: Mapping[int, LookupModel], tokens: torch.Tensor, sources: torch.Tensor) -> pd.DataFrame:
    """Accuracy per relation of each model of :func:`train_head_counts`, with its d_head and parameters.

    Args:
        models: dict h -> trained ``LookupModel`` with h heads.
        tokens: (B, T) test token ids.
        sources: (B, R, T) their relation sources (from ``make_lookup_batch``).

    Returns:
        DataFrame indexed by "heads h", with columns "d_head", "parameters" and one accuracy column
        (a fraction in [0, 1]) per relation.

    Raises:
        TypeError, ValueError: for an empty mapping, a value that is not a ``LookupModel`` or a
            key that is not its head count.
    """
    check_instance("models", models, Mapping, "a mapping h -> model")
    if not models:
        raise ValueError("models must hold at least one model, got an empty mapping")
    check_tensor("tokens", tokens, ndim=2)
    check_tensor("sources", sources, ndim=3)
    rows = {}
    for h, model in models.items():
        check_instance(f"models[{h!r}]", model, LookupModel)
        if model.attention.num_heads != h:
            raise ValueError(f"models[{h!r}] must have {h} heads, got {model.attention.num_heads}")
        accuracy = lookup_accuracy(model, tokens, sources)  # (R,)
        rows[h] = {"d_head": model.attention.d_head,
                   "parameters": sum(p.numel() for p in model.parameters()), **accuracy.to_dict()}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("heads h")


class _ThresholdReached(Exception):
    """Raised from inside ``fit``'s batch hook to stop training once the threshold is met."""


def train_with_curve(
    seed: int,
    num_heads: int,
    eval_tokens: torch.Tensor,
    eval_sources: torch.Tensor,
    max_steps: int,
    eval_every: int = 25,
    threshold: float = 0.95,
    stop_at_threshold: bool = True,
    d_model: int = 32,
    **train_kwargs: object,
) -> tuple[LookupModel, pd.DataFrame]:
    """Train one :class:`LookupModel` with ``fit`` and record its learning curve on a held-out batch.

    Every ``eval_every`` steps (and at step 0 and at the end) the model's accuracy on
    ``eval_tokens`` is measured for every relation; the row's "worst" column is the lowest of them.
    The curve is what "steps to threshold" is read from (:func:`steps_to_threshold`): the first
    evaluated step at which every lookup reaches ``threshold``. With ``stop_at_threshold``
    training ends there (the rest of the budget would only polish a model that has learned the
    task), so a fast configuration costs few steps and a slow one runs to ``max_steps``.

    The hook runs inside ``fit``'s batch function, before the batch of the next step is drawn, so
    it sees the model after exactly ``step`` updates and does not change the training: the same
    seed gives the same weights at every step as :func:`.head_specialization.train_lookup_model`.

    Args:
        seed: seeds the initial weights and the training batches.
        num_heads: heads h (dividing ``d_model``).
        eval_tokens, eval_sources: the held-out batch (from ``make_lookup_batch``).
        max_steps: the training budget (Adam steps).
        eval_every: steps between two evaluations.
        threshold: accuracy every lookup must reach, in (0, 1].
        stop_at_threshold: end training at the first evaluation that meets ``threshold``.
        d_model: width D.
        **train_kwargs: further arguments of ``train_lookup_model`` (``batch_size``, ``lr``, ...).

    Returns:
        The trained model (eval mode) and the curve: a DataFrame indexed by "step" with one
        accuracy column per relation and "worst".

    Raises:
        TypeError, ValueError: for arguments of the wrong type or out of range.
    """
    max_steps = check_int("max_steps", max_steps, minimum=1)
    eval_every = check_int("eval_every", eval_every, minimum=1)
    check_instance("threshold", threshold, (int, float), "a number")
    if isinstance(threshold, bool) or not 0.0 < float(threshold) <= 1.0:
        raise ValueError(f"threshold must be in (0, 1], got {threshold!r}")
    check_tensor("eval_tokens", eval_tokens, ndim=2)
    check_tensor("eval_sources", eval_sources, ndim=3)
    for name in ("steps", "progress"):
        if name in train_kwargs:
            raise TypeError(f"train_with_curve takes max_steps, not {name}")
    rows: dict[int, dict[str, float]] = {}
    trained: list[LookupModel] = []

    def record(model: LookupModel, step: int) -> bool:
        accuracy = lookup_accuracy(model, eval_tokens, eval_sources)  # (R,); the model has no dropout
        rows[step] = {**accuracy.to_dict(), "worst": float(accuracy.min())}
        return rows[step]["worst"] >= threshold

    def hook(model: LookupModel, step: int) -> None:
        if not trained:
            trained.append(model)
        if step % eval_every == 0 and record(model, step) and stop_at_threshold:
            raise _ThresholdReached

    try:
        model, _ = train_lookup_model(seed=seed, steps=max_steps, d_model=d_model, num_heads=num_heads,
                                      batch_hook=hook, **train_kwargs)
        if max_steps not in rows:
            record(model, max_steps)
    except _ThresholdReached:
        model = trained[0]
    model.eval()
    curve = pd.DataFrame.from_dict(rows, orient="index").rename_axis("step")
    return model, curve


def steps_to_threshold(curve: pd.DataFrame, threshold: float = 0.95) -> float:
    """The first step of a learning curve at which every lookup reaches ``threshold`` (NaN if none).

    Args:
        curve: from :func:`train_with_curve` (indexed by step, with a "worst" column).
        threshold: in (0, 1].
    """
    check_instance("curve", curve, pd.DataFrame, "pandas.DataFrame")
    if "worst" not in curve.columns or curve.empty:
        raise ValueError(f"curve must be a non-empty learning curve with a 'worst' column, got {list(curve.columns)}")
    reached = curve.index[curve["worst"].to_numpy() >= threshold]
    return float(reached[0]) if len(reached) else float("nan")


# The chapter's ensemble study (DL0027), shared with benchmarks/calibration/dl0027_multi_head_attention.py.
STUDY_HEADS = (1, 2, 4, 8)
D_MODEL = 32
ENSEMBLE_SIZE = 8
EXPERIMENT = "multi-head lookup"  # the ensemble's name for seeds.ensemble_seeds (the KV-head study shares it: paired)
MAX_STEPS = 400  # the budget; a run stops earlier once every lookup reaches THRESHOLD
EVAL_EVERY = 25
THRESHOLD = 0.95
EVAL_SIZE = 256  # held-out sequences that decide when a run has reached THRESHOLD
TEST_SIZE = 512  # other held-out sequences for the scores and the ablation
EVAL_SEED_OFFSET = 10_000  # run seed + offset seeds its held-out batches, apart from its training data
TEST_SEED_OFFSET = 20_000


@dataclass
class LookupRun:
    """One trained run of the study: its settings, learning curve, steps to threshold and analysis.

    ``model`` is None for a run loaded from a cache (the analysis does not need it).
    """

    seed: int
    num_heads: int
    curve: pd.DataFrame
    steps: float
    scores: pd.DataFrame
    ablation: pd.DataFrame
    model: LookupModel | None = None


def held_out_batch(seed: int, size: int, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of the task drawn from ``seed + offset``, apart from the run's training batches."""
    return make_lookup_batch(size, torch.Generator().manual_seed(check_int("seed", seed, minimum=0) + offset))


def lookup_run(seed: int, num_heads: int, max_steps: int = MAX_STEPS, threshold: float = THRESHOLD,
               eval_every: int = EVAL_EVERY) -> LookupRun:
    """Train one run of the study and analyse it: a pure function of ``seed`` and ``num_heads``.

    The run trains on the CPU (``fit``: one thread, the same numbers on a given machine and kernel set) until every
    lookup reaches ``threshold`` on a held-out batch, or for ``max_steps``; its head scores and
    single-head ablation are measured on a second held-out batch of ``TEST_SIZE`` sequences.
    """
    eval_tokens, eval_sources = held_out_batch(seed, EVAL_SIZE, EVAL_SEED_OFFSET)
    model, curve = train_with_curve(seed, num_heads, eval_tokens, eval_sources, max_steps=max_steps,
                                    eval_every=eval_every, threshold=threshold, d_model=D_MODEL)
    tokens, sources = held_out_batch(seed, TEST_SIZE, TEST_SEED_OFFSET)
    with torch.no_grad():
        _, weights = model(tokens, need_weights=True)  # (B, H, T, T)
    return LookupRun(seed, num_heads, curve, steps_to_threshold(curve, threshold),
                     head_relation_scores(weights, sources), ablation_table(model, tokens, sources), model)


def run_ensemble(base_seed: int, heads: Sequence[int] = STUDY_HEADS, size: int = ENSEMBLE_SIZE,
                 run: Callable[[int, int], LookupRun] = lookup_run, workers: int = 1) -> dict[tuple[int, int], LookupRun]:
    """``run(seed, h)`` for every h in ``heads`` and seed in ``ensemble_seeds(base_seed, EXPERIMENT, size)``.

    ``workers`` processes train runs side by side (``parallel.map_runs``; ``run`` must then be a
    module-level function); each run is a function of (seed, h) alone, so the result does not
    depend on the number of workers.

    Returns:
        dict (h, seed) -> LookupRun, h-major.
    """
    base_seed = check_int("base_seed", base_seed, minimum=0)
    size = check_int("size", size, minimum=1)
    counts = _check_head_counts(heads, D_MODEL)
    keys = [(h, seed) for h in counts for seed in ensemble_seeds(base_seed, EXPERIMENT, size)]
    return dict(zip(keys, map_runs(run, [(seed, h) for h, seed in keys], workers)))


@exhibit
def steps_table(runs: Mapping[tuple[int, int], LookupRun], max_steps: int = MAX_STEPS) -> pd.DataFrame:
    """Steps to threshold per head count over the ensemble: runs that reached it, median, min, max.

    A run that did not reach the threshold within ``max_steps`` counts as ``max_steps`` in the
    median (so the median is a lower bound when fewer than half reached it) and not in min/max.
    Also the median worst-lookup accuracy at the end of training and halfway through the budget.
    """
    check_instance("runs", runs, Mapping, "a mapping (h, seed) -> LookupRun")
    if not runs:
        raise ValueError("runs must hold at least one run, got an empty mapping")
    rows = {}
    for h in sorted({h for h, _ in runs}):
        group = [r for (g, _), r in runs.items() if g == h]
        steps = pd.Series([r.steps for r in group], dtype=float)
        reached = steps.dropna()
        half = [r.curve["worst"].loc[:max_steps // 2].iloc[-1] for r in group]
        rows[h] = {"d_head": D_MODEL // h, "runs": len(group), "reached": int(reached.size),
                   "median steps": float(steps.fillna(max_steps).median()),
                   "min steps": float(reached.min()) if reached.size else float("nan"),
                   "max steps": float(reached.max()) if reached.size else float("nan"),
                   f"worst lookup at step {max_steps // 2}": float(pd.Series(half).median()),
                   "worst lookup at the end": float(pd.Series([r.curve["worst"].iloc[-1] for r in group]).median())}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("heads h")


@exhibit
def specialization_table(runs: Mapping[tuple[int, int], LookupRun]) -> pd.DataFrame:
    """One row per run: :func:`.head_specialization.specialization_summary` of its scores and ablation."""
    check_instance("runs", runs, Mapping, "a mapping (h, seed) -> LookupRun")
    rows = {key: specialization_summary(run.scores, run.ablation) for key, run in runs.items()}
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index = pd.MultiIndex.from_tuples(table.index, names=["heads h", "seed"])
    return table


def owned_lookups(runs: Mapping[tuple[int, int], LookupRun], num_heads: int, owns: float = 0.5) -> pd.DataFrame:
    """For each run with ``num_heads`` heads (rows, by seed) and relation: does some head own it?

    A head owns a lookup when it puts at least ``owns`` of its attention mass on the lookup's key
    (as in :func:`.head_specialization.specialization_summary`).
    """
    check_instance("runs", runs, Mapping, "a mapping (h, seed) -> LookupRun")
    rows = {seed: (run.scores >= owns).any() for (h, seed), run in runs.items() if h == num_heads}
    if not rows:
        raise ValueError(f"runs must hold a run with num_heads={num_heads}, got head counts {sorted({h for h, _ in runs})}")
    return pd.DataFrame(rows).T.rename_axis("seed")


def final_accuracy(runs: Mapping[tuple[int, int], LookupRun], num_heads: int) -> pd.DataFrame:
    """Held-out accuracy of every lookup at the end of each run with ``num_heads`` heads (rows, by seed)."""
    check_instance("runs", runs, Mapping, "a mapping (h, seed) -> LookupRun")
    rows = {seed: run.curve.iloc[-1].drop("worst") for (h, seed), run in runs.items() if h == num_heads}
    if not rows:
        raise ValueError(f"runs must hold a run with num_heads={num_heads}, got head counts {sorted({h for h, _ in runs})}")
    return pd.DataFrame(rows).T.rename_axis("seed")


def study_claims(runs: Mapping[tuple[int, int], LookupRun], max_steps: int = MAX_STEPS) -> list[Claim]:
    """The chapter's conclusions from the ensemble (the bounds come from the calibration record).

    Counts of runs are compared strictly (``> 5`` rather than ``>= 6``), so that a bound the
    ensemble meets exactly still leaves the calibration a positive margin.
    """
    steps = steps_table(runs, max_steps)
    special = specialization_table(runs)
    four, eight = special.xs(4, level="heads h"), special.xs(8, level="heads h")
    half = f"worst lookup at step {max_steps // 2}"
    one_head_mass = [r.scores.loc["head 0"].max() for (h, _), r in runs.items() if h == 1]
    one_head_end = final_accuracy(runs, 1)
    content_lead = one_head_end[["marker", "digit"]].min(axis=1) - one_head_end[["previous", "first"]].min(axis=1)
    return [
        Claim(f"h = 1: runs reaching {THRESHOLD:.0%} on every lookup within {max_steps} steps (of {ENSEMBLE_SIZE})",
              float(steps.loc[1, "reached"]), "<=", 2),
        Claim(f"h = 1: median gain of the worst lookup from step {max_steps // 2} to {max_steps}",
              float(steps.loc[1, "worst lookup at the end"] - steps.loc[1, half]), ">=", 0.1),
        Claim("h = 1: largest attention mass on one lookup's key, median over runs",
              float(pd.Series(one_head_mass, dtype=float).median()), "<=", 0.5),
        Claim("h = 1: worst content lookup minus worst positional lookup at the end, median over runs",
              float(content_lead.median()), ">=", 0.05),
        Claim(f"h = 2, 4, 8: fewest runs reaching {THRESHOLD:.0%} within {max_steps} steps (of {ENSEMBLE_SIZE})",
              float(steps.loc[[2, 4, 8], "reached"].min()), ">", 5),
        Claim("median steps to threshold, h = 2 minus h = 4",
              float(steps.loc[2, "median steps"] - steps.loc[4, "median steps"]), ">", 0),
        Claim("|median steps to threshold, h = 8 minus h = 4|",  # two-sided: "within two checks", either way
              abs(float(steps.loc[8, "median steps"] - steps.loc[4, "median steps"])), "<", 2 * EVAL_EVERY),
        Claim("h = 4: runs in which both positional lookups have a head of their own (of 8)",
              float(owned_lookups(runs, 4)[["previous", "first"]].all(axis=1).sum()), ">", 5),
        Claim("h = 4: median share of heads whose removal breaks a lookup", float(four["necessary_share"].median()), ">", 0.4),
        Claim("h = 8: median share of heads whose removal breaks a lookup", float(eight["necessary_share"].median()), "<", 0.4),
        Claim("h = 8: runs with a lookup owned by two heads or more (of 8)", float((eight["duplicated"] > 0).sum()), ">", 5),
    ]
