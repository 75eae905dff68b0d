"""Drawing primitives for diagrams: labelled boxes and arrows on an axes in data coordinates.

The chapters' diagrams read what to draw (layer counts, widths, sub-layers) off real module
instances; this module only knows how to draw a box and an arrow.
"""

from __future__ import annotations

from matplotlib.axes import Axes
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch


def draw_box(ax: Axes, x: float, y: float, width: float, height: float, label: str,
             color: str = "#DDDDDD", fontsize: float = 9, **text_kwargs) -> FancyBboxPatch:
    """A rounded box with its lower-left corner at (x, y) and a centred label; returns the patch."""
    box = FancyBboxPatch((x, y), width, height, boxstyle="round,pad=0.02,rounding_size=0.08",
                         facecolor=color, edgecolor="black", linewidth=1.0)
    ax.add_patch(box)
    ax.text(x + width / 2, y + height / 2, label, ha="center", va="center", fontsize=fontsize,
            color="black", **text_kwargs)
    return box


def draw_arrow(ax: Axes, start: tuple[float, float], end: tuple[float, float], color: str = "black",
               style: str = "-|>", linestyle: str = "-", connectionstyle: str = "arc3") -> FancyArrowPatch:
    """An arrow from ``start`` to ``end`` (data coordinates); returns the patch."""
    arrow = FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=12, color=color,
                            linestyle=linestyle, linewidth=1.2, connectionstyle=connectionstyle)
    ax.add_patch(arrow)
    return arrow


def blank_axes(ax: Axes, xlim: tuple[float, float], ylim: tuple[float, float]) -> Axes:
    """Prepare an axes for a diagram: fixed limits, equal aspect, no ticks or spines."""
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_aspect("equal")
    ax.axis("off")
    return ax
