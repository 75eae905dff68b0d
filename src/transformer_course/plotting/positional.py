"""Figures of positional information: the sinusoidal matrix, its waves, similarities, ALiBi biases, length tests.

Every function takes data (tensors made by ``transformer_course.nn.positional``) and returns a
``Figure`` built with ``new_figure``; nothing is shown and no global state changes.
"""

from __future__ import annotations

from typing import Sequence

import pandas as pd
import torch
from matplotlib.figure import Figure

from transformer_course._exhibit import exhibit
from transformer_course._validation import check_tensor
from .style import PALETTE, new_figure


def _check_pe(pe: object) -> torch.Tensor:
    check_tensor("pe", pe, ndim=2, floating=True)
    return pe.detach().cpu().float()


@exhibit
def plot_pe_matrix(pe: torch.Tensor, title: str = "Sinusoidal positional encoding") -> Figure:
    """Heatmap of a (P, D) encoding: positions down the rows, dimensions along the columns.

    Args:
        pe: (P, D) encoding, e.g. ``sinusoidal_encoding(P, D)``.
        title: axes title.

    Returns:
        The figure (one axes and a colour bar, values in [-1, 1]).

    Raises:
        TypeError, ValueError: if ``pe`` is not a 2-D floating tensor.
    """
    pe = _check_pe(pe)
    fig = new_figure(7.0, 4.2)
    ax = fig.add_subplot()
    image = ax.imshow(pe.numpy(), aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
    ax.set_xlabel(f"encoding dimension (0 ... {pe.shape[1] - 1}); wavelength grows to the right")
    ax.set_ylabel(f"position pos (0 ... {pe.shape[0] - 1})")
    ax.set_title(title)
    fig.colorbar(image, ax=ax, label="PE[pos, dim]")
    return fig


@exhibit
def plot_pe_dimensions(pe: torch.Tensor, dims: Sequence[int],
                       labels: Sequence[str] | None = None) -> Figure:
    """Selected columns of a (P, D) encoding as functions of position, one stacked panel each.

    Args:
        pe: (P, D) encoding.
        dims: the dimensions (columns) to draw, e.g. one fast, one medium and one slow wave.
        labels: optional panel title per dimension (default "dimension d").

    Returns:
        The figure, one panel per dimension sharing the position axis.

    Raises:
        TypeError, ValueError: if ``pe`` is not 2-D, ``dims`` is empty or out of range, or
            ``labels`` has a different length.
    """
    pe = _check_pe(pe)
    dims = list(dims)
    if not dims:
        raise ValueError("dims must name at least one dimension, got an empty sequence")
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int) or not 0 <= d < pe.shape[1]:
            raise ValueError(f"dims must hold ints in [0, {pe.shape[1]}), got {d!r}")
    labels = [f"dimension {d}" for d in dims] if labels is None else list(labels)
    if len(labels) != len(dims):
        raise ValueError(f"labels must have one entry per dimension ({len(dims)}), got {len(labels)}")
    colors = [PALETTE["output"], PALETTE["attention"], PALETTE["projection"], PALETTE["norm"], PALETTE["recurrent"]]
    fig = new_figure(7.0, 1.4 + 1.2 * len(dims))
    axes = fig.subplots(len(dims), 1, sharex=True, squeeze=False)[:, 0]
    positions = torch.arange(pe.shape[0]).numpy()
    for ax, d, label, color in zip(axes, dims, labels, colors * len(dims)):
        ax.plot(positions, pe[:, d].numpy(), color=color, linewidth=1.4, marker=".", markersize=3)
        ax.axhline(0, color="grey", linewidth=0.5)
        ax.set_ylim(-1.15, 1.15)
        ax.set_ylabel(f"PE[:, {d}]")
        ax.set_title(label, loc="left", fontsize=9)
    axes[-1].set_xlabel("position pos")
    fig.suptitle("Dimensions of the encoding as functions of position", fontsize=11)
    return fig


@exhibit
def plot_position_similarity(similarity: torch.Tensor, title: str = "Cosine similarity of encodings") -> Figure:
    """Heatmap of a (P, P) similarity between positions (e.g. ``position_similarity(pe)``).

    Raises:
        TypeError, ValueError: if ``similarity`` is not a square 2-D floating tensor.
    """
    check_tensor("similarity", similarity, ndim=2, floating=True)
    if similarity.shape[0] != similarity.shape[1]:
        raise ValueError(f"similarity must be square (P, P), got shape {tuple(similarity.shape)}")
    fig = new_figure(5.4, 4.4)
    ax = fig.add_subplot()
    image = ax.imshow(similarity.detach().cpu().float().numpy(), cmap="viridis", interpolation="nearest")
    ax.set_xlabel("position q")
    ax.set_ylabel("position p")
    ax.set_title(title)
    fig.colorbar(image, ax=ax, label="cos(PE[p], PE[q])")
    return fig


@exhibit
def plot_alibi_bias(bias: torch.Tensor, slopes: torch.Tensor | None = None, causal: bool = True) -> Figure:
    """One heatmap per head of an ALiBi bias (H, T, T); with ``causal`` the future is left blank.

    Args:
        bias: (H, T, T) additive bias, e.g. ``alibi_bias(H, T)``.
        slopes: optional (H,) slopes, written in the panel titles.
        causal: hide keys j > i (a decoder never scores them), as in the ALiBi paper's figure.

    Raises:
        TypeError, ValueError: if ``bias`` is not (H, T, T) or ``slopes`` has the wrong length.
    """
    check_tensor("bias", bias, ndim=3, floating=True)
    if bias.shape[1] != bias.shape[2]:
        raise ValueError(f"bias must have shape (H, T, T), got {tuple(bias.shape)}")
    h, t, _ = bias.shape
    if slopes is not None and tuple(slopes.shape) != (h,):
        raise ValueError(f"slopes must have shape (H,) = ({h},), got {tuple(slopes.shape)}")
    values = bias.detach().cpu().float().clone()  # (H, T, T)
    if causal:
        future = torch.ones(t, t, dtype=torch.bool).triu(1)  # (T, T), True above the diagonal
        values[:, future] = float("nan")
    vmin = float(torch.nan_to_num(values, nan=0.0).min())
    fig = new_figure(2.0 * h + 0.7, 2.8)
    axes = fig.subplots(1, h, squeeze=False)[0]
    image = None
    for head, ax in enumerate(axes):
        image = ax.imshow(values[head].numpy(), cmap="magma", vmin=vmin, vmax=0, interpolation="nearest")
        title = f"head {head + 1}"
        if slopes is not None:
            title += f", m = {float(slopes[head]):.3g}"
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("key j")
        if head == 0:
            ax.set_ylabel("query i")
        ax.set_xticks(range(t))
        ax.set_yticks(range(t))
        ax.tick_params(labelsize=9)
    fig.colorbar(image, ax=list(axes), label="bias  -m (i - j)", shrink=0.9)
    return fig


SCHEME_STYLES = {  # colour, marker and line style per position scheme (colour-blind safe, distinct in grey)
    "sinusoidal": (PALETTE["projection"], "o", "-"),
    "learned": (PALETTE["output"], "s", "--"),
    "rope": (PALETTE["attention"], "^", "-."),
    "alibi": (PALETTE["norm"], "D", "-"),
    "none": (PALETTE["recurrent"], "v", ":"),
}


@exhibit
def plot_length_generalization(table: pd.DataFrame, train_length: int, chance: float | None = None) -> Figure:
    """Accuracy against test length, one line per position scheme, with the training length marked.

    Args:
        table: one row per scheme (index), one column per test length, accuracy in percent, e.g.
            ``experiments.length_generalization.length_generalization()``.
        train_length: L, drawn as a vertical line.
        chance: optional chance accuracy in percent, drawn as a horizontal line.

    Returns:
        The figure (one axes).

    Raises:
        TypeError, ValueError: if ``table`` is not a non-empty DataFrame with numeric column labels,
            or ``train_length`` is not a positive int.
    """
    if not isinstance(table, pd.DataFrame) or table.empty:
        raise TypeError(f"table must be a non-empty pandas DataFrame, got {type(table).__name__}")
    lengths = [float(c) for c in table.columns]
    if isinstance(train_length, bool) or not isinstance(train_length, int) or train_length < 1:
        raise ValueError(f"train_length must be a positive int, got {train_length!r}")
    fig = new_figure(6.6, 4.0)
    ax = fig.add_subplot()
    for scheme, row in table.iterrows():
        color, marker, style = SCHEME_STYLES.get(str(scheme), ("black", "x", "-"))
        ax.plot(lengths, row.to_numpy(dtype=float), color=color, marker=marker, linestyle=style,
                linewidth=1.8, markersize=6, label=str(scheme))
    ax.axvline(train_length, color="grey", linewidth=1.0, linestyle="--")
    ax.text(train_length, 3, f"  training length L = {train_length}", color="dimgrey", fontsize=9,
            va="bottom", ha="left")
    if chance is not None:
        ax.axhline(chance, color="grey", linewidth=1.0, linestyle=":")
        ax.text(lengths[-1], chance + 1.5, f"chance {chance:.1f} %", color="dimgrey", fontsize=9,
                va="bottom", ha="right")
    ax.set_xticks(lengths)
    multiples = [t / train_length for t in lengths]
    ax.set_xticklabels([f"{int(t)}\n({'' if m == 1 else f'{m:g}'}L)" for t, m in zip(lengths, multiples)])
    ax.set_ylim(0, 105)
    ax.set_xlabel("test length T (the last L positions are scored)")
    ax.set_ylabel("accuracy on the last L positions (%)")
    ax.set_title("Train short, test long: the last-value task")
    ax.legend(title="position scheme", fontsize=9, title_fontsize=9, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return fig


ENSEMBLE_STYLES = dict(SCHEME_STYLES, **{  # the rescaled RoPE rows share RoPE's colour family
    "rope + PI": ("#56B4E9", "P", "-"),
    "rope + NTK": ("black", "X", "--"),
})
TASK_TITLES = {"last_value": "last value (the nearest value token)", "offset": "offset 3 (the token 3 back)"}


@exhibit
def plot_length_generalization_ensemble(results: Sequence[pd.DataFrame], train_length: int) -> Figure:
    """Accuracy against test length for every seed (points) and the median over seeds (line), one panel per task.

    Args:
        results: tables of ``experiments.length_generalization.length_generalization_ensemble`` (one
            per task: columns scheme, seed, test_length, accuracy; ``attrs`` with ``task`` and ``chance``).
        train_length: L, drawn as a vertical line.

    Returns:
        The figure (one axes per table, a shared legend below).

    Raises:
        TypeError, ValueError: if ``results`` is empty, a table lacks the columns, or ``train_length``
            is not a positive int.
    """
    tables = list(results) if not isinstance(results, pd.DataFrame) else [results]
    if not tables:
        raise ValueError("results must hold at least one table, got none")
    for table in tables:
        if not isinstance(table, pd.DataFrame) or table.empty:
            raise TypeError(f"results must hold non-empty pandas DataFrames, got {type(table).__name__}")
        missing = {"scheme", "seed", "test_length", "accuracy"} - set(table.columns)
        if missing:
            raise ValueError(f"each table needs the columns scheme, seed, test_length, accuracy; missing {sorted(missing)}")
    if isinstance(train_length, bool) or not isinstance(train_length, int) or train_length < 1:
        raise ValueError(f"train_length must be a positive int, got {train_length!r}")
    fig = new_figure(10.0, 4.6)
    axes = fig.subplots(1, len(tables), sharey=True, squeeze=False)[0]
    handles = {}
    for ax, table in zip(axes, tables):
        lengths = sorted(table["test_length"].unique())
        labels = list(dict.fromkeys(table["scheme"]))
        width = 0.6 * min(b - a for a, b in zip(lengths, lengths[1:])) if len(lengths) > 1 else 1.0
        for index, label in enumerate(labels):
            color, marker, style = ENSEMBLE_STYLES.get(label, ("grey", "x", "-"))
            shift = width * ((index + 0.5) / len(labels) - 0.5)  # schemes side by side at each length
            rows = table[table["scheme"] == label]
            ax.scatter(rows["test_length"] + shift, rows["accuracy"], s=12, color=color, marker=marker, alpha=0.55,
                       linewidths=0)
            median = rows.groupby("test_length")["accuracy"].median()
            (line,) = ax.plot(median.index + shift, median.to_numpy(), color=color, marker=marker, linestyle=style,
                              linewidth=1.8, markersize=6, markeredgecolor="white", markeredgewidth=0.6)
            handles.setdefault(label, line)
        ax.axvline(train_length, color="grey", linewidth=1.0, linestyle="--")
        chance = table.attrs.get("chance")
        if chance is not None:
            ax.axhline(chance, color="grey", linewidth=1.0, linestyle=":")
            ax.text(lengths[-1] + width / 2, chance + 1.5, f"chance {chance:.1f} %", color="dimgrey", fontsize=10,
                    va="bottom", ha="right")
        ax.set_xticks(lengths)
        ax.set_xticklabels([f"{int(t)} ({t / train_length:g}L)" for t in lengths], fontsize=10)
        ax.set_ylim(0, 105)
        ax.set_xlabel("test length T (last L positions scored)", fontsize=10)
        task = table.attrs.get("task", "")
        seeds = table["seed"].nunique()
        ax.set_title(f"{TASK_TITLES.get(task, task)}: {seeds} seeds", fontsize=11)
    axes[0].set_ylabel("accuracy on the last L positions (%)", fontsize=10)
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncols=min(7, len(handles)),
               fontsize=10, title="position scheme: line = median over seeds, points = every seed", title_fontsize=10)
    return fig


@exhibit
def plot_rope_decay(distances: torch.Tensor, curves: dict[str, torch.Tensor]) -> Figure:
    """RoFormer's long-term decay factor against relative distance, one line per head width, each divided by its value at 0.

    Args:
        distances: (R,) relative distances, starting at 0.
        curves: label -> (R,) values of ``nn.positional.rope_decay_bound`` at ``distances``.

    Raises:
        TypeError, ValueError: if ``curves`` is empty or a curve does not match ``distances``.
    """
    check_tensor("distances", distances, ndim=1)
    if not curves:
        raise ValueError("curves must hold at least one (R,) tensor, got none")
    fig = new_figure(7.0, 3.8)
    ax = fig.add_subplot()
    colors = [PALETTE["projection"], PALETTE["output"], PALETTE["norm"], PALETTE["attention"]]
    for index, (label, values) in enumerate(curves.items()):
        check_tensor(f"curves[{label!r}]", values, ndim=1, floating=True)
        if values.shape != distances.shape:
            raise ValueError(f"curves[{label!r}] must have the shape of distances {tuple(distances.shape)}, "
                             f"got {tuple(values.shape)}")
        values = values.detach().cpu().double()
        ax.plot(distances.cpu().numpy(), (values / values[0]).numpy(), color=colors[index % len(colors)],
                linewidth=1.6, label=label)
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("relative distance m - n (symmetric log scale)", fontsize=10)
    ax.set_ylabel("decay factor / its value at 0", fontsize=10)
    ax.set_title("RoPE's long-term decay depends on the head width", fontsize=11)
    ax.legend(fontsize=10)
    return fig
