"""The capstone's figures: the phase change, the circuit's composition scores, the ablations."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from transformer_course._exhibit import exhibit
from transformer_course.experiments.induction_circuit import (CIRCUIT, CircuitRun, CircuitSettings, circuit_summary,
                                                              icl_scores, layer_top_score)
from .style import PALETTE, new_figure

_SEED = dict(color="#999999", linewidth=0.6, alpha=0.6)


def _check_runs(runs: object) -> list[CircuitRun]:
    runs = list(runs) if not isinstance(runs, (str, bytes)) else []
    if not runs or not all(isinstance(run, CircuitRun) for run in runs):
        raise TypeError("runs must be a non-empty sequence of CircuitRun")
    return runs


def _median_line(ax, steps: np.ndarray, curves: np.ndarray, color: str, label: str) -> None:
    for curve in curves:
        ax.plot(steps, curve, **_SEED)
    ax.plot(steps, np.median(curves, axis=0), color=color, linewidth=2, label=label)


def _smoothed(losses: Sequence[float], width: int) -> np.ndarray:
    values = np.asarray(losses, dtype=float)
    return np.convolve(values, np.ones(width) / width, mode="valid")



def _median_of_finite(values) -> float:
    """The median of the finite values (seeds with a phase), NaN when there are none, without numpy's warning."""
    finite = np.asarray(values, dtype=float)
    finite = finite[np.isfinite(finite)]
    return float(np.median(finite)) if finite.size else float("nan")

@exhibit
def plot_circuit_phase(runs: Sequence[CircuitRun], settings: CircuitSettings = CIRCUIT,
                       baselines: Mapping[str, float] | None = None) -> Figure:
    """Four panels against training step, every seed a thin grey line, the median a thick one.

    (a) training loss (moving average over ``eval_every`` steps) and held-out prose loss, with the
    held-out loss of each model in ``baselines`` (name -> nats, e.g. ``ngram_baselines``) dotted; (b) loss on
    the first and on the later copies of repeated random strings; (c) layer 0's best previous-token
    score and layer 1's best prefix-matching score, the induction threshold dotted; (d) the
    in-context learning score on held-out prose. The shaded band spans the medians of the steps at
    which layer 1's best prefix-matching score passes 10% and 90% of its rise.
    """
    runs = _check_runs(runs)
    steps = runs[0].record["step"].to_numpy()
    summary = circuit_summary(runs, settings)
    start, finish = (_median_of_finite(summary[column]) for column in ("phase 10%", "phase 90%"))  # NaN: no phase
    fig = new_figure(7.2, 5.6)
    (a, b), (c, d) = fig.subplots(2, 2, sharex=True)
    width = settings.eval_every
    train = np.stack([_smoothed(run.losses, width) for run in runs])
    _median_line(a, np.arange(width, len(runs[0].losses) + 1), train, PALETTE["projection"], "training (prose + repeats)")
    _median_line(a, steps, np.stack([run.record["held_out_loss"] for run in runs]), PALETTE["output"], "held-out prose")
    for name, loss in (baselines or {}).items():
        a.axhline(float(loss), color="#555555", linestyle=":", linewidth=1.2)
        a.text(steps[-1], float(loss), f"{name} model ", ha="right", va="bottom", fontsize="small", color="#555555")
    a.set_ylabel("loss (nats per character)")
    a.set_title("(a) loss", loc="left")
    _median_line(b, steps, np.stack([run.record["first_repeat_loss"] for run in runs]), PALETTE["recurrent"],
                 "first copy")
    _median_line(b, steps, np.stack([run.record["later_repeat_loss"] for run in runs]), PALETTE["norm"],
                 "second copy")
    b.set_ylabel("loss on repeated random strings")
    b.set_title("(b) a random string, then the same again", loc="left")
    _median_line(c, steps, np.stack([layer_top_score(run.record, "previous_token", 0) for run in runs]),
                 PALETTE["ffn"], "layer 0: previous token")
    _median_line(c, steps, np.stack([layer_top_score(run.record, "prefix_matching", 1) for run in runs]),
                 PALETTE["attention"], "layer 1: prefix matching")
    c.axhline(settings.induction_threshold, color="#555555", linestyle=":", linewidth=1.2)
    c.set_ylabel("best head's score")
    c.set_ylim(0, 1)
    c.set_title("(c) the two heads of the circuit", loc="left")
    late, early = settings.icl_late, settings.icl_early
    _median_line(d, steps, np.stack([icl_scores(run.record, settings) for run in runs]), PALETTE["projection"],
                 f"positions {late.start}–{late.stop - 1} minus {early.start}–{early.stop - 1}")
    d.axhline(0, color="#555555", linewidth=0.8)
    d.set_ylabel("in-context learning score (nats)")
    d.set_title("(d) late minus early position, held-out prose", loc="left")
    for ax in (a, b, c, d):
        if np.isfinite(start) and np.isfinite(finish):
            ax.axvspan(start, finish, color="#000000", alpha=0.08, linewidth=0)
        ax.legend(fontsize=9, frameon=False, loc="best")
    for ax in (c, d):
        ax.set_xlabel("training step")
    return fig


COMPOSITION_COLUMNS = ("K-composition", "Q-composition", "V-composition", "K-composition, other layer-0 heads",
                       "K-composition at init")


def _seed_points(ax, index: int, values: np.ndarray, formed: np.ndarray, color: str) -> None:
    """One column of a strip plot: a point per seed (hollow where the seed has no induction head, left
    out where its value is NaN) and a bar at the median over the seeds with an induction head."""
    jitter = np.linspace(-0.12, 0.12, len(values))
    shown = np.isfinite(values)
    ax.scatter((index + jitter)[shown & formed], values[shown & formed], s=20, color=color, alpha=0.8)
    ax.scatter((index + jitter)[shown & ~formed], values[shown & ~formed], s=20, facecolors="none",
               edgecolors=color, linewidths=1.2)
    if (shown & formed).any():
        ax.plot([index - 0.25, index + 0.25], [np.median(values[shown & formed])] * 2, color="black", linewidth=2)


@exhibit
def plot_composition(runs: Sequence[CircuitRun], settings: CircuitSettings = CIRCUIT) -> Figure:
    """Per seed (points) and median (bar): the composition scores of layer 1's best induction head with
    layer 0's best previous-token head (K, Q, V), its K-composition with the other layer-0 heads (the
    largest) and the same K-composition at initialization."""
    runs = _check_runs(runs)
    summary = circuit_summary(runs, settings)
    fig = new_figure(6.8, 3.4)
    ax = fig.subplots()
    colors = (PALETTE["attention"], PALETTE["projection"], PALETTE["output"], PALETTE["norm"], "#999999")
    labels = ("K", "Q", "V", "K, other\nlayer-0 heads", "K at\ninitialization")
    formed = (summary["induction heads, layer 1"] > 0).to_numpy()
    for index, column in enumerate(COMPOSITION_COLUMNS):
        _seed_points(ax, index, summary[column].to_numpy(dtype=float), formed, colors[index])
    ax.set_xticks(range(len(labels)), labels)
    ax.set_ylabel("composition score")
    ax.set_ylim(0, None)
    return fig


ABLATIONS = ("intact", "induction heads zeroed", "random other heads zeroed", "previous-token head zeroed")


@exhibit
def plot_circuit_ablation(runs: Sequence[CircuitRun], settings: CircuitSettings = CIRCUIT) -> Figure:
    """Repeat advantage (first-copy loss minus second-copy loss) intact and with heads zeroed: seeds as
    points (hollow: no induction head), medians over the seeds with an induction head as bars."""
    runs = _check_runs(runs)
    formed = (circuit_summary(runs, settings)["induction heads, layer 1"] > 0).to_numpy()
    fig = new_figure(6.8, 3.4)
    ax = fig.subplots()
    colors = (PALETTE["projection"], PALETTE["output"], PALETTE["norm"], PALETTE["ffn"])
    for index, condition in enumerate(ABLATIONS):
        _seed_points(ax, index, np.array([run.advantage[condition] for run in runs], dtype=float), formed,
                     colors[index])
    ax.axhline(0, color="#555555", linewidth=0.8)
    ax.set_xticks(range(len(ABLATIONS)), [a.replace(" zeroed", "\nzeroed") for a in ABLATIONS])
    ax.set_ylabel("repeat advantage (nats)")
    return fig
