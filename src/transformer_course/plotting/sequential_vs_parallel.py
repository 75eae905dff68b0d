"""Figures of the Transformer-vs-RNN chapter (DL0032): the two dependency structures, measured.

``plot_rnn_vs_transformer`` reads what it draws off the module instances (widths, heads, the
sub-layers of the block and their order); the curves are drawn from the tables of
``transformer_course.measure.dependency``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from torch import nn

from transformer_course._exhibit import exhibit
from transformer_course._validation import check_int
from transformer_course.nn.attention import MultiHeadAttention
from transformer_course.nn.feedforward import FeedForward
from transformer_course.nn.normalization import LayerNorm
from .blocks import blank_axes, draw_arrow, draw_box
from .style import PALETTE, new_figure


def _block_rows(layer: nn.Module) -> list[tuple[str, str]]:
    """(label, colour) of each sub-layer of a Transformer block, bottom to top, read off ``layer``."""
    rows = []
    for name, child in layer.named_children():
        if isinstance(child, MultiHeadAttention):
            rows.append((f"{name}: multi-head attention\nH={child.num_heads}, all n x n scores", PALETTE["attention"]))
        elif isinstance(child, FeedForward):
            rows.append((f"{name}: FFN {child.d_model}->{child.d_ff}->{child.d_model}\nevery token at once",
                         PALETTE["ffn"]))
    norm_first = getattr(layer, "norm_first", False)
    labelled = []
    for label, colour in rows:  # each sub-layer is wrapped in residual + LayerNorm
        norm = ("LayerNorm", PALETTE["norm"])
        add = ("add residual", PALETTE["neutral"])
        labelled += [norm, (label, colour), add] if norm_first else [(label, colour), ("add & LayerNorm", PALETTE["norm"])]
    if not any(isinstance(c, LayerNorm) for c in layer.children()):
        labelled = [row for row in labelled if "LayerNorm" not in row[0]]
    return labelled


@exhibit
def plot_rnn_vs_transformer(rnn: nn.Module, layer: nn.Module, n: int = 5) -> Figure:
    """An unrolled RNN (a chain of n cells) beside a Transformer block that takes all n tokens at once.

    Args:
        rnn: the recurrent model; its ``d_model`` labels the hidden state.
        layer: a Transformer block (e.g. ``EncoderLayer``); its attention and FFN sub-layers, in
            order, become the block's rows.
        n: number of tokens drawn (2 to 8).

    Returns:
        The figure (two panels).
    """
    n = check_int("n", n, minimum=2)
    if n > 8:
        raise ValueError(f"n must be <= 8 to stay readable, got {n}")
    for name, module in (("rnn", rnn), ("layer", layer)):
        if not isinstance(module, nn.Module):
            raise TypeError(f"{name} must be a torch.nn.Module, got {type(module).__name__}")
    fig = new_figure(9.9, 4.6)
    left, right = fig.subplots(1, 2, width_ratios=[1.15, 1])
    width = n * 1.6 + 0.6
    blank_axes(left, (-0.3, width), (-1.4, 4.6))
    left.set_title(f"RNN ({type(rnn).__name__}, D={rnn.d_model}): n = {n} steps, one after another")
    for t in range(n):
        x0 = 0.2 + 1.6 * t
        draw_box(left, x0, 1.0, 1.0, 1.0, f"cell\nstep {t + 1}", color=PALETTE["recurrent"], fontsize=10)
        draw_box(left, x0 + 0.15, -0.9, 0.7, 0.6, f"$x_{{{t + 1}}}$", color=PALETTE["embedding"], fontsize=10)
        draw_arrow(left, (x0 + 0.5, -0.3), (x0 + 0.5, 1.0))
        draw_arrow(left, (x0 + 0.5, 2.0), (x0 + 0.5, 2.9))
        left.text(x0 + 0.5, 3.2, f"$h_{{{t + 1}}}$", ha="center", va="center")
        if t < n - 1:
            draw_arrow(left, (x0 + 1.0, 1.5), (x0 + 1.6, 1.5), color=PALETTE["output"])
            left.text(x0 + 1.3, 1.75, f"$h_{{{t + 1}}}$", ha="center", fontsize=10, color=PALETTE["output"])
    left.text(width / 2, 4.1, r"$h_t = \tanh(W_{ih}x_t + W_{hh}h_{t-1} + b)$: step t waits for step t-1",
              ha="center", fontsize=10)
    rows = _block_rows(layer)
    height = 0.75 * len(rows)
    blank_axes(right, (-0.3, width), (-1.4, height + 2.6))
    right.set_title(f"Transformer block ({type(layer).__name__}): all n = {n} tokens in one pass")
    for index, (label, colour) in enumerate(rows):
        draw_box(right, 0.2, 0.4 + 0.75 * index, width - 0.6, 0.6, label.replace("\n", "  "), color=colour,
                 fontsize=10)
    for t in range(n):
        x0 = 0.2 + 1.6 * t
        draw_box(right, x0 + 0.15, -0.9, 0.7, 0.6, f"$x_{{{t + 1}}}$", color=PALETTE["embedding"], fontsize=10)
        draw_arrow(right, (x0 + 0.5, -0.3), (x0 + 0.5, 0.4))
        draw_arrow(right, (x0 + 0.5, 0.4 + height - 0.15), (x0 + 0.5, 0.4 + height + 0.6))
        right.text(x0 + 0.5, 0.4 + height + 0.9, f"$y_{{{t + 1}}}$", ha="center", va="center")
    right.text(width / 2, height + 2.0, f"{len(rows)} stacked stages, the same for any n; tokens meet only\n"
               "inside attention, all pairs at once, with no chain from token to token", ha="center", fontsize=10)
    return fig


def _per_length_axes(name: str, table: object, maker: str) -> tuple[Figure, object, list]:
    """A new figure for a table indexed by n with one column per model: (figure, axes, lines)."""
    if not isinstance(table, pd.DataFrame) or table.empty:
        raise ValueError(f"{name} must be a non-empty DataFrame indexed by n (see {maker})")
    fig = new_figure(6.4, 4.0)
    ax = fig.subplots()
    ax.set_xlabel("sequence length n")
    colours = [PALETTE["recurrent"], PALETTE["attention"], PALETTE["projection"], PALETTE["ffn"]] * 2
    return fig, ax, [(column, values.to_numpy(), colour) for (column, values), colour in zip(table.items(), colours)]


@exhibit
def plot_dependency_depth(depths: pd.DataFrame) -> Figure:
    """Measured dependency depth (longest autograd path, token 1 -> output n) against n.

    Args:
        depths: ``dependency.depth_table`` output, indexed by n, one column per model.

    Returns:
        The figure. The legend gives each line's growth, read off the table: operations per extra
        token when the depth is a + b n exactly, operations per doubling of n when it is
        a + b ceil(log2 n) exactly, and nothing when it is neither.
    """
    fig, ax, lines = _per_length_axes("depths", depths, "depth_table")
    lengths = depths.index.to_numpy()
    for name, values, colour in lines:
        ax.plot(lengths, values, marker="o", color=colour, label=f"{name}: {depth_growth(lengths, values)}")
    ax.set_ylabel("longest autograd path, token 1 to output n\n(operations that must run in order)")
    ax.legend(frameon=False)
    ax.grid(alpha=0.3)
    return fig


def depth_growth(lengths: np.ndarray, values: np.ndarray) -> str:
    """How a depth grows with n, in words: constant, linear in n or linear in ceil(log2 n) (exact fits only)."""
    lengths, values = np.asarray(lengths), np.asarray(values, dtype=float)
    if len(lengths) < 2 or np.all(values == values[0]):
        return "the same for every n"
    for basis, unit in ((lengths.astype(float), "per extra token"),
                        (np.ceil(np.log2(lengths)), "per doubling of n")):
        slope, intercept = np.polyfit(basis, values, 1)
        if np.allclose(slope * basis + intercept, values, atol=1e-9, rtol=0):
            return f"{slope:+.3g} operations {unit}"
    return "grows with n"


@exhibit
def plot_gradient_reach(gradients: pd.DataFrame) -> Figure:
    """Gradient norm reaching token 1 from output n against n, on a log scale.

    Args:
        gradients: ``dependency.gradient_table`` output, indexed by n, one column per model.

    Returns:
        The figure.
    """
    fig, ax, lines = _per_length_axes("gradients", gradients, "gradient_table")
    for name, values, colour in lines:
        ax.semilogy(gradients.index, values, marker="o", color=colour, label=name)
    ax.set_ylabel(r"$\|\partial (u\cdot y_n) / \partial x_1\|$")
    ax.set_title("How much gradient from the last output reaches token 1")
    ax.legend(frameon=False)
    ax.grid(alpha=0.3, which="both")
    return fig


@exhibit
def plot_gradient_ensemble(ensemble: pd.DataFrame) -> Figure:
    """Gradient reaching token 1 against n for several models, each over an ensemble of initialisations.

    Args:
        ensemble: ``experiments.gradient_reach.gradient_reach_ensemble`` output: indexed by
            ("model", "seed"), one column per length n (int column names) holding gradient norms.

    Returns:
        The figure: per model, every seed as a faint line and the median as a bold line with
        markers, on a logarithmic vertical axis.
    """
    if not isinstance(ensemble, pd.DataFrame) or ensemble.empty or ensemble.index.nlevels != 2:
        raise ValueError("ensemble must be a non-empty DataFrame indexed by (model, seed), see gradient_reach_ensemble")
    lengths = [c for c in ensemble.columns if isinstance(c, (int, np.integer))]
    if len(lengths) < 2:
        raise ValueError("ensemble must have at least two integer length columns")
    fig = new_figure(7.2, 4.4)
    ax = fig.subplots()
    colours = [PALETTE["recurrent"], PALETTE["projection"], PALETTE["norm"], PALETTE["ffn"], PALETTE["attention"],
               PALETTE["output"]]
    models = list(dict.fromkeys(ensemble.index.get_level_values(0)))
    for model, colour in zip(models, colours * 2):
        curves = ensemble.loc[model, lengths].to_numpy(dtype=float)  # (seeds, lengths)
        for curve in curves:
            ax.semilogy(lengths, curve, color=colour, alpha=0.35, lw=0.8)
        ax.semilogy(lengths, np.median(curves, axis=0), color=colour, lw=2.2, marker="o",
                    label=f"{model} (median of {len(curves)} seeds)")
    ax.set_xlabel("sequence length n")
    ax.set_ylabel(r"$\|\partial (u\cdot y_n) / \partial x_1\|$")
    ax.set_title("Gradient from the last output reaching token 1 (thin lines: single seeds)")
    ax.legend(frameon=False, fontsize=9, loc="lower left")
    ax.grid(alpha=0.3, which="both")
    return fig
