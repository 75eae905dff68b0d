"""Figures of the computation chapter (DL0033): where a block's FLOPs (and its time) go.

The functions take the DataFrames of ``transformer_course.measure.cost`` and ``transformer_course.measure.timing``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from transformer_course._exhibit import exhibit
from transformer_course.measure.cost import BLOCK_COMPONENTS
from .style import PALETTE, new_figure

COMPONENT_LABELS = {
    "qkvo_projections": "Q, K, V, O projections",
    "scores_qk": r"scores $QK^\top$",
    "weighted_values_av": r"weighted values $AV$",
    "softmax": "softmax",
    "ffn": "FFN",
}
COMPONENT_COLOURS = {
    "qkvo_projections": PALETTE["projection"],
    "scores_qk": PALETTE["attention"],
    "weighted_values_av": PALETTE["output"],
    "softmax": PALETTE["recurrent"],
    "ffn": PALETTE["ffn"],
}


def _check_frame(name: str, frame: object, columns: tuple[str, ...]) -> pd.DataFrame:
    if not isinstance(frame, pd.DataFrame) or frame.empty:
        raise ValueError(f"{name} must be a non-empty DataFrame")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{name} is missing columns {missing}")
    return frame


@exhibit
def plot_share_vs_length(shares: pd.DataFrame, crossover: float, d: int) -> Figure:
    """MHA and FFN share of a block's FLOPs against n (log axis), with the crossover marked.

    Args:
        shares: ``cost.flop_share_table`` output over many lengths.
        crossover: the length where the shares meet (``cost.crossover_length``).
        d: the model width, for the title and the n = 2d label.

    Returns:
        The figure.
    """
    shares = _check_frame("shares", shares, ("MHA Share (%)", "FFN Share (%)"))
    fig = new_figure(6.6, 4.0)
    ax = fig.subplots()
    lengths = shares.index.to_numpy()
    ax.semilogx(lengths, shares["MHA Share (%)"], color=PALETTE["attention"], lw=2, label="multi-head attention")
    ax.semilogx(lengths, shares["FFN Share (%)"], color=PALETTE["ffn"], lw=2, label="feed-forward network")
    ax.axvline(crossover, color="black", ls="--", lw=1)
    ax.annotate(f"crossover n = {crossover:g} = 2d", xy=(crossover, 50), xytext=(crossover / 12, 85),
                arrowprops={"arrowstyle": "->"}, fontsize=9)
    ax.fill_between(lengths, 0, 100, where=lengths <= crossover, color=PALETTE["ffn"], alpha=0.08)
    ax.fill_between(lengths, 0, 100, where=lengths >= crossover, color=PALETTE["attention"], alpha=0.08)
    ax.text(lengths[0] * 1.2, 5, "FFN dominates", fontsize=9)
    ax.text(lengths[-1] / 1.2, 5, "attention dominates", fontsize=9, ha="right")
    ax.set_ylim(0, 100)
    ax.set_xlabel("sequence length n (log scale)")
    ax.set_ylabel("share of the block's matrix-product FLOPs (%)")
    ax.set_title(f"d = {d}, FFN expansion 4")
    ax.legend(frameon=False, loc="center left")
    return fig


@exhibit
def plot_component_shares(shares: pd.DataFrame) -> Figure:
    """Stacked bars: share (%) of each block component (``BLOCK_COMPONENTS``) for each length n.

    Args:
        shares: ``cost.component_share_table`` output.

    Returns:
        The figure.
    """
    shares = _check_frame("shares", shares, BLOCK_COMPONENTS)
    fig = new_figure(7.4, 4.2)
    ax = fig.subplots()
    positions = np.arange(len(shares))
    bottom = np.zeros(len(shares))
    for component in ("ffn", "qkvo_projections", "softmax", "scores_qk", "weighted_values_av"):
        values = shares[component].to_numpy()
        ax.bar(positions, values, bottom=bottom, color=COMPONENT_COLOURS[component], edgecolor="white",
               label=COMPONENT_LABELS[component])
        for x, y0, v in zip(positions, bottom, values):
            if v >= 6:
                ax.text(x, y0 + v / 2, f"{v:.0f}%", ha="center", va="center", fontsize=8)
        bottom += values
    ax.set_xticks(positions, [str(n) for n in shares.index])
    ax.set_xlabel("sequence length n")
    ax.set_ylabel("share of the block's FLOPs (%)")
    ax.set_ylim(0, 100)
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], labels[::-1], frameon=False, bbox_to_anchor=(1.01, 1), loc="upper left",
              fontsize=8)  # top of the legend = top of the stack
    return fig


@exhibit
def plot_time_vs_flops(components: pd.DataFrame) -> Figure:
    """Side-by-side bars: each component's share of the FLOPs and of the measured time.

    Args:
        components: ``timing.time_block_components`` output. When it has the columns "lowest share (%)"
            and "highest share (%)", a black range marker on each time bar spans them (the spread of
            the share over repeated measurements).

    Returns:
        The figure.
    """
    components = _check_frame("components", components, ("time share (%)", "FLOP share (%)"))
    fig = new_figure(6.8, 3.8)
    ax = fig.subplots()
    positions = np.arange(len(components))
    ax.barh(positions + 0.2, components["FLOP share (%)"], height=0.4, color=PALETTE["neutral"],
            edgecolor="black", label="share of FLOPs")
    share = components["time share (%)"].to_numpy()
    ax.barh(positions - 0.2, share, height=0.4,
            color=[COMPONENT_COLOURS.get(c, PALETTE["neutral"]) for c in components.index], edgecolor="black",
            label="share of measured time")
    spread = {"lowest share (%)", "highest share (%)"} <= set(components.columns)
    if spread:
        ax.errorbar((components["lowest share (%)"] + components["highest share (%)"]) / 2, positions - 0.2,
                    xerr=(components["highest share (%)"] - components["lowest share (%)"]) / 2, fmt="none",
                    ecolor="black", capsize=4, lw=1.2, label="range over repeated measurements")
    ax.set_yticks(positions, [COMPONENT_LABELS.get(c, c) for c in components.index])
    ax.invert_yaxis()
    ax.set_xlabel("share (%)")
    ax.legend(frameon=False, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=3 if spread else 2, fontsize=9)
    return fig


ROOFLINE_LABEL_OFFSETS = {  # points of offset and alignment, so that neighbouring labels do not overlap
    "qkvo_projections": (0, -20, "center"),
    "ffn": (6, 8, "left"),
    "scores_qk": (8, 8, "left"),
    "weighted_values_av": (8, -36, "left"),
    "softmax": (6, 6, "left"),
}


@exhibit
def plot_roofline(traffic: pd.DataFrame, peaks: pd.Series, timed: pd.DataFrame | None = None) -> Figure:
    """A roofline: attainable FLOP/s against arithmetic intensity, with each block component on it.

    Args:
        traffic: ``cost.operation_traffic`` output (columns "FLOPs", "bytes", "FLOPs per byte").
        peaks: ``timing.machine_peaks`` output ("matmul FLOP/s", the measured matrix-product rate that
            is the flat roof, and "bandwidth (bytes/s)").
        timed: optional ``timing.time_block_components`` output for the same sizes: each component's
            achieved FLOP/s (its FLOPs over its time) is drawn as a dot under its roof.

    Returns:
        The figure, both axes logarithmic.
    """
    traffic = _check_frame("traffic", traffic, ("FLOPs", "FLOPs per byte"))
    if not isinstance(peaks, pd.Series) or not {"matmul FLOP/s", "bandwidth (bytes/s)"} <= set(peaks.index):
        raise ValueError("peaks must be a Series with 'matmul FLOP/s' and 'bandwidth (bytes/s)' (see machine_peaks)")
    matmul_rate, bandwidth = float(peaks["matmul FLOP/s"]), float(peaks["bandwidth (bytes/s)"])
    fig = new_figure(6.8, 4.4)
    ax = fig.subplots()
    intensity = traffic["FLOPs per byte"]
    grid = np.logspace(np.log10(min(intensity.min(), matmul_rate / bandwidth) / 4),
                       np.log10(max(intensity.max(), matmul_rate / bandwidth) * 4), 200)
    ax.loglog(grid, np.minimum(matmul_rate, grid * bandwidth), color="black", lw=2,
              label="roof: min(matmul rate, intensity x bandwidth)")
    ax.axvline(matmul_rate / bandwidth, color="black", ls=":", lw=1)
    ax.text(matmul_rate / bandwidth / 1.15, matmul_rate / 8, f"ridge: {matmul_rate / bandwidth:.1f}\nFLOPs per byte",
            fontsize=9, ha="right", va="top")
    for component, row in traffic.iterrows():
        colour = COMPONENT_COLOURS.get(component, PALETTE["neutral"])
        roof = min(matmul_rate, row["FLOPs per byte"] * bandwidth)
        ax.scatter([row["FLOPs per byte"]], [roof], marker="s", s=60, color=colour, edgecolor="black", zorder=3)
        if timed is not None and component in timed.index:
            achieved = row["FLOPs"] / (timed.loc[component, "time (ms)"] / 1e3)
            ax.scatter([row["FLOPs per byte"]], [achieved], marker="o", s=45, color=colour, edgecolor="black", zorder=3)
            ax.plot([row["FLOPs per byte"]] * 2, [achieved, roof], color=colour, lw=1)
        dx, dy, align = ROOFLINE_LABEL_OFFSETS.get(component, (6, 6, "left"))
        ax.annotate(COMPONENT_LABELS.get(component, component), (row["FLOPs per byte"], roof), xytext=(dx, dy),
                    textcoords="offset points", fontsize=9, ha=align)
    ax.set_xlabel("arithmetic intensity (FLOPs per byte moved)")
    ax.set_ylabel("FLOP/s")
    ax.set_title("squares: the roof over each component; dots: measured" if timed is not None
                 else "squares: the roof over each component", pad=14)
    ax.legend(frameon=False, loc="lower right", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    return fig
