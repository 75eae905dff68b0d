"""The course's plot style, set once per notebook, readable on the light and the dark site theme."""

from __future__ import annotations

import matplotlib as mpl
from matplotlib.figure import Figure

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
