"""The course's plot style, set once per notebook, readable on the light and the dark site theme."""

from __future__ import annotations

import matplotlib as mpl
from matplotlib.figure import Figure
from matplotlib.text import Text

COURSE_STYLE = {
    # An opaque white background keeps dark text readable when the site is in dark mode.
    "figure.facecolor": "white",
    "axes.facecolor": "white",
    "savefig.facecolor": "white",
    "savefig.transparent": False,
    "figure.dpi": 100,
    "savefig.dpi": 100,
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": False,
    "image.cmap": "viridis",
    "svg.hashsalt": "transformers-executed",
    "figure.max_open_warning": 0,
}

# Colours of the course's diagrams (colour-blind safe, from the Okabe-Ito palette).
PALETTE = {
    "attention": "#E69F00",
    "ffn": "#56B4E9",
    "norm": "#009E73",
    "embedding": "#F0E442",
    "projection": "#0072B2",
    "output": "#D55E00",
    "neutral": "#DDDDDD",
    "recurrent": "#CC79A7",
}


def use_course_style() -> None:
    """Apply the course style to matplotlib's global settings (call once, from a notebook)."""
    mpl.rcParams.update(COURSE_STYLE)


def new_figure(width: float = 6.4, height: float = 4.0) -> Figure:
    """A new figure outside pyplot: it is displayed only when a notebook returns it."""
    return Figure(figsize=(width, height), layout="constrained")


def smallest_text_points(fig: Figure) -> float:
    """The font size, in points, of the smallest visible non-empty text of ``fig`` (tick labels included).

    The figure is laid out first (``draw_without_rendering``), so tick labels exist. A text of
    ``s`` points is ``s * dpi / 72`` pixels tall in an image saved at ``dpi``. Returns ``inf``
    for a figure without text.

    Raises:
        TypeError: if ``fig`` is not a matplotlib ``Figure``.
    """
    if not isinstance(fig, Figure):
        raise TypeError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
    fig.draw_without_rendering()
    sizes = [text.get_fontsize() for text in fig.findobj(Text)
             if text.get_visible() and text.get_text().strip() and _drawn(text)]
    return min(sizes, default=float("inf"))


def _drawn(text: Text) -> bool:
    """Whether a text is drawn: tick labels outside their axis' view interval are laid out but not drawn."""
    axes = text.axes
    if axes is None:
        return True
    for axis in (axes.xaxis, axes.yaxis):
        for tick in axis.get_major_ticks() + axis.get_minor_ticks():
            if text in (tick.label1, tick.label2):
                low, high = sorted(axis.get_view_interval())
                return tick.get_visible() and low - 1e-9 * (abs(low) + 1) <= tick.get_loc() <= high + 1e-9 * (abs(high) + 1)
    return True
