"""Figures of the position-wise feed-forward network: its shape, activations, token-wise Jacobian, rank collapse.

``plot_ffn_diagram`` reads every width and the activation off a real ``FeedForward`` instance, so
the picture cannot drift from the module. All functions return a ``Figure`` made by ``new_figure``.
"""

from __future__ import annotations

from typing import Mapping

import pandas as pd
import torch
import torch.nn.functional as F
from matplotlib.figure import Figure

from transformer_course._exhibit import exhibit
from transformer_course._validation import check_int, check_tensor
from transformer_course.experiments.ffn_memory import width_table
from transformer_course.nn.feedforward import FeedForward
from .blocks import blank_axes, draw_arrow, draw_box
from .style import PALETTE, new_figure

_ACTIVATION_TEXT = {"relu": "ReLU", "gelu": "GELU", "swiglu": "SiLU(a) * g"}


def ffn_diagram_labels(ffn: FeedForward) -> dict[str, str]:
    """The texts ``plot_ffn_diagram`` writes, read off the module (exposed so tests can compare).

    Returns:
        dict with keys "input", "expand", "pre_activation", "activate", "hidden", "compress", "output".

    Raises:
        TypeError: if ``ffn`` is not a ``FeedForward``.
    """
    if not isinstance(ffn, FeedForward):
        raise TypeError(f"ffn must be a FeedForward module, got {type(ffn).__name__}")
    d_in, d_hidden = ffn.linear1.in_features, ffn.linear1.out_features
    d_out = ffn.linear2.out_features
    ratio = d_hidden / d_in
    ratio_text = f"{ratio:g}" if ratio == int(ratio) else f"{ratio:.2f}"
    expand = f"linear1:\nW1 ({d_in} x {d_hidden}) + b1"  # two lines: the name, then the shape
    if ffn.gate is not None:
        expand += f"\ngate:\nW3 ({ffn.gate.in_features} x {ffn.gate.out_features}) + b3"
    hidden = f"{d_hidden}\n= {ratio_text} d"
    pre_activation = f"a and g\n2 x {hidden}" if ffn.gate is not None else f"pre-activation\n{hidden}"
    return {
        "input": f"x\none token\nd = {d_in}",
        "expand": expand,
        "pre_activation": pre_activation,
        "hidden": f"hidden\n{hidden}",
        "activate": _ACTIVATION_TEXT[ffn.activation],
        "compress": f"linear2:\nW2 ({ffn.linear2.in_features} x {d_out}) + b2",
        "output": f"FFN(x)\nd = {d_out}",
    }


@exhibit
def plot_ffn_diagram(ffn: FeedForward) -> Figure:
    """d -> d_ff -> d: expand, activate, compress, drawn with box heights proportional to the widths.

    Args:
        ffn: the module to draw; its ``linear1``, ``gate``, ``linear2`` and ``activation`` give
            every label.

    Returns:
        The figure (one axes; its texts are ``ffn_diagram_labels(ffn)`` plus the three step names).

    Raises:
        TypeError: if ``ffn`` is not a ``FeedForward``.
    """
    labels = ffn_diagram_labels(ffn)
    d_in, d_hidden, d_out = ffn.linear1.in_features, ffn.linear1.out_features, ffn.linear2.out_features
    scale = 4.4 / max(d_in, d_hidden, d_out)  # the tallest vector is 4.4 units high
    heights = [max(0.9, n * scale) for n in (d_in, d_hidden, d_hidden, d_out)]
    xs = [0.3, 4.0, 7.0, 10.7]
    width, mid = 1.3, 3.0
    fig = new_figure(9.0, 4.0)
    ax = blank_axes(fig.add_subplot(), (0, 12.4), (0, 5.6))
    colors = [PALETTE["embedding"], PALETTE["ffn"], PALETTE["ffn"], PALETTE["output"]]
    texts = [labels["input"], labels["pre_activation"], labels["hidden"], labels["output"]]
    for x, h, color, text in zip(xs, heights, colors, texts):
        draw_box(ax, x, mid - h / 2, width, h, text, color=color, fontsize=9)
    steps = (("expand", labels["expand"]), ("activate", labels["activate"]), ("compress", labels["compress"]))
    for (step, text), x0, x1 in zip(steps, xs[:-1], xs[1:]):
        start, end = (x0 + width + 0.08, mid), (x1 - 0.08, mid)
        draw_arrow(ax, start, end)
        centre = (start[0] + end[0]) / 2
        ax.text(centre, mid + 0.25, step, ha="center", va="bottom", fontsize=10, fontweight="bold")
        ax.text(centre, mid - 0.25, text, ha="center", va="top", fontsize=9)
    ax.text(6.2, 0.05, "the same weights for every position t = 1 ... T: no mixing between tokens",
            ha="center", va="bottom", fontsize=9, style="italic")
    return fig


@exhibit
def plot_activations(low: float = -4.0, high: float = 4.0, points: int = 401) -> Figure:
    """ReLU, GELU and SiLU (the gate of SwiGLU) and their derivatives, side by side.

    Raises:
        ValueError: if ``low`` >= ``high`` or ``points`` < 2.
    """
    if not low < high:
        raise ValueError(f"low must be < high, got low={low}, high={high}")
    if points < 2:
        raise ValueError(f"points must be >= 2, got {points}")
    x = torch.linspace(low, high, points, dtype=torch.float64, requires_grad=True)  # (N,)
    curves = {"ReLU  max(0, x)": F.relu, "GELU  x Phi(x)": F.gelu, "SiLU  x sigmoid(x) (SwiGLU's gate)": F.silu}
    colors = [PALETTE["projection"], PALETTE["output"], PALETTE["norm"]]
    styles = ["-", "--", "-."]
    fig = new_figure(9.0, 3.6)
    left, right = fig.subplots(1, 2)
    for (name, f), color, style in zip(curves.items(), colors, styles):
        y = f(x)  # (N,)
        (slope,) = torch.autograd.grad(y.sum(), x)  # (N,), elementwise derivative
        left.plot(x.detach().numpy(), y.detach().numpy(), style, color=color, linewidth=1.8, label=name)
        right.plot(x.detach().numpy(), slope.numpy(), style, color=color, linewidth=1.8, label=name)
    for ax, title in ((left, "activation f(x)"), (right, "derivative f'(x)")):
        ax.axhline(0, color="grey", linewidth=0.5)
        ax.axvline(0, color="grey", linewidth=0.5)
        ax.set_xlabel("pre-activation x")
        ax.set_title(title)
    left.legend(fontsize=9, loc="upper left")
    return fig


@exhibit
def plot_position_jacobians(blocks: Mapping[str, torch.Tensor]) -> Figure:
    """Heatmaps of ||d out_i / d in_j|| between positions, one panel per named module.

    Args:
        blocks: name -> (T, T) tensor of Jacobian block norms (row i output, column j input).

    Raises:
        TypeError, ValueError: if ``blocks`` is empty or a value is not a square 2-D float tensor.
    """
    if not blocks:
        raise ValueError("blocks must hold at least one (T, T) tensor, got none")
    for name, block in blocks.items():
        check_tensor(f"blocks[{name!r}]", block, ndim=2, floating=True)
        if block.shape[0] != block.shape[1]:
            raise ValueError(f"blocks[{name!r}] must be square (T, T), got shape {tuple(block.shape)}")
    fig = new_figure(3.4 * len(blocks) + 0.6, 3.4)
    axes = fig.subplots(1, len(blocks), squeeze=False)[0]
    for ax, (name, block) in zip(axes, blocks.items()):
        values = block.detach().cpu().float()
        image = ax.imshow(values.numpy(), cmap="viridis", vmin=0, interpolation="nearest")
        t = values.shape[0]
        ax.set_xticks(range(t))
        ax.set_yticks(range(t))
        ax.set_xlabel("input position j")
        ax.set_ylabel("output position i")
        ax.set_title(name, fontsize=10)
        fig.colorbar(image, ax=ax, shrink=0.8, label="||d out_i / d x_j||")
    return fig


RANK_STYLES = {  # colour and line style per stack of ``experiments.rank_collapse``
    "attention": (PALETTE["attention"], "-"),
    "attention + FFN": (PALETTE["ffn"], "--"),
    "attention + skip": (PALETTE["norm"], "-."),
    "attention + FFN + skip": (PALETTE["projection"], "-"),
}


@exhibit
def plot_rank_collapse(results: pd.DataFrame, floor: float = 1e-17) -> Figure:
    """Relative residual r(X) against depth, log scale: every seed a thin line, the median a thick one.

    Args:
        results: the table of ``experiments.rank_collapse.rank_collapse`` (columns architecture, seed,
            depth, residual).
        floor: values below it are drawn at it (float64 rounding leaves about 1e-16).

    Raises:
        TypeError, ValueError: if ``results`` is not a non-empty table with those columns or ``floor`` <= 0.
    """
    if not isinstance(results, pd.DataFrame) or results.empty:
        raise TypeError(f"results must be a non-empty pandas DataFrame, got {type(results).__name__}")
    missing = {"architecture", "seed", "depth", "residual"} - set(results.columns)
    if missing:
        raise ValueError(f"results needs the columns architecture, seed, depth, residual; missing {sorted(missing)}")
    if not floor > 0:
        raise ValueError(f"floor must be > 0, got {floor}")
    fig = new_figure(7.4, 4.4)
    ax = fig.add_subplot()
    for architecture, rows in results.groupby("architecture", sort=False):
        color, style = RANK_STYLES.get(architecture, ("grey", "-"))
        for _, seed_rows in rows.groupby("seed"):
            ax.plot(seed_rows["depth"], seed_rows["residual"].clip(lower=floor), color=color, linestyle=style,
                    linewidth=0.6, alpha=0.35)
        median = rows.groupby("depth")["residual"].median().clip(lower=floor)
        ax.plot(median.index, median.to_numpy(), color=color, linestyle=style, linewidth=2.4,
                label=f"{architecture} ({rows['seed'].nunique()} seeds)")
    ax.set_yscale("log")
    ax.set_ylim(floor / 3, 2)
    ax.set_xlabel("depth (layers applied)", fontsize=10)
    ax.set_ylabel("relative residual r(X)", fontsize=10)
    ax.set_title("Distance of the tokens from all-identical, by depth", fontsize=11)
    ax.legend(fontsize=9.5, loc="center right")
    return fig


@exhibit
def plot_expert_load(frame: pd.DataFrame) -> Figure:
    """Each expert's share of the token-slots after training, experts ranked by load, with and without balancing.

    Args:
        frame: the long table of ``experiments.moe_load.expert_load_ensemble`` (columns "balance
            weight", "seed", "expert rank", "load before", "load after").

    Returns:
        A ``Figure`` with one panel per balancing weight alpha: every run's loads as points (x = rank,
        1 = the busiest expert), their median as a line, the initial router's median loads as a
        grey line, and the uniform load 1/E dashed.

    Raises:
        TypeError, ValueError: for a frame without those columns.
    """
    import numpy as np

    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"frame must be a pandas DataFrame, got {type(frame).__name__}")
    needed = {"balance weight", "seed", "expert rank", "load before", "load after"}
    if frame.empty or needed - set(frame.columns):
        raise ValueError(f"frame must be a non-empty table with columns {sorted(needed)}")
    weights = sorted(frame["balance weight"].unique())
    experts = int(frame["expert rank"].max())
    top = 100 * max(frame["load after"].max(), frame["load before"].max())
    fig = new_figure(9.0, 3.6)
    axes = fig.subplots(1, len(weights), sharey=True, squeeze=False)[0]
    rng = np.random.default_rng(len(frame))  # jitter only: a function of the data, not a seed of the course
    for ax, w, colour in zip(axes, weights, (PALETTE["output"], PALETTE["projection"], PALETTE["ffn"])):
        part = frame[frame["balance weight"] == w]
        x = part["expert rank"].to_numpy() + rng.uniform(-0.15, 0.15, size=len(part))
        ax.scatter(x, 100 * part["load after"], s=14, color=colour, alpha=0.6, zorder=3, label="one run (seed)")
        median = part.groupby("expert rank")["load after"].median()
        ax.plot(median.index, 100 * median.to_numpy(), color=colour, linewidth=2.0, label="median after training")
        before = part.groupby("expert rank")["load before"].median()
        ax.plot(before.index, 100 * before.to_numpy(), color="grey", linewidth=1.2, linestyle="-.",
                label="median, initial router")
        ax.axhline(100 / experts, color="black", linestyle="--", linewidth=1.0)
        ax.text(experts, 100 / experts + 0.4, f"uniform 1/{experts}", fontsize=10, ha="right", va="bottom")
        ax.set_xticks(range(1, experts + 1))
        ax.set_xlabel("expert, ranked by load (1 = busiest)")
        ax.set_title("without the balancing loss" if w == 0 else f"with the balancing loss, alpha = {w:g}")
        ax.set_ylim(0, top * 1.1)
    axes[0].set_ylabel("share of token-slots (%)")
    axes[-1].legend(frameon=False, loc="upper right")
    return fig


@exhibit
def plot_ffn_memory(frame: pd.DataFrame, num_labels: int) -> Figure:
    """DL0031's width sweep: accuracy against the FFN's width, and the key-value agreement of its neurons.

    Args:
        frame: the table of ``experiments.ffn_memory.memory_ensemble`` (columns "d_ff", "seed",
            "FFN parameters", "accuracy (%)", "agreement", "agreement at init").
        num_labels: K, for the chance level 1 / K of the agreement.

    Returns:
        A ``Figure`` with two panels against d_ff (log scale): (a) every seed's accuracy as a point
        and the median as a line; (b) the median agreement after training and at initialization,
        every seed's as points, and chance dashed (in the legend).

    Raises:
        TypeError, ValueError: for a frame without those columns, or ``num_labels`` < 2.
    """
    import numpy as np

    medians = width_table(frame)  # validates the frame; one row per width, in order
    num_labels = check_int("num_labels", num_labels, minimum=2)
    widths = list(medians.index)
    rng = np.random.default_rng(len(frame))  # jitter only: a function of the data, not a seed of the course
    jitter = np.exp(rng.uniform(-0.06, 0.06, size=len(frame)))
    fig = new_figure(9.0, 3.6)
    accuracy, agreement = fig.subplots(1, 2)
    accuracy.scatter(frame["d_ff"] * jitter, frame["accuracy (%)"], s=14, color=PALETTE["ffn"], alpha=0.6, zorder=3,
                     label="one seed")
    accuracy.plot(widths, medians["accuracy (%), median"], color=PALETTE["ffn"], linewidth=2.0, label="median")
    accuracy.set_ylim(0, 105)
    accuracy.set_ylabel("facts stored (% of labels right)")
    accuracy.set_title("(a) a wider FFN stores more facts")
    accuracy.legend(frameon=False, loc="lower right")
    for column, colour, style, label in (("agreement", PALETTE["output"], "-", "after training"),
                                          ("agreement at init", "grey", "-.", "at initialization")):
        agreement.scatter(frame["d_ff"] * jitter, frame[column], s=12, color=colour, alpha=0.5, zorder=3)
        agreement.plot(widths, medians[f"{column}, median"], style, color=colour, linewidth=2.0, label=label)
    agreement.axhline(1 / num_labels, color="black", linestyle="--", linewidth=1.0, label=f"chance 1/{num_labels}")
    agreement.set_ylim(0, None)
    agreement.set_ylabel("share of top triggers with the value's label")
    agreement.set_title("(b) keys and values agree (Geva et al.)")
    agreement.legend(frameon=False, loc="upper right")
    for ax in (accuracy, agreement):
        ax.set_xscale("log", base=2)
        ax.set_xticks(widths, [str(w) for w in widths])
        ax.minorticks_off()
        ax.set_xlabel("FFN width d_ff")
    return fig
