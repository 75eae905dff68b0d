"""Diagrams of one encoder or decoder layer, read off a real ``EncoderLayer``/``DecoderLayer``.

The flow runs bottom to top, as in Vaswani et al. (2017), Figure 1. Each sub-layer (self-attention,
cross-attention, feed-forward) sits on the residual stream with its skip connection drawn on the
left; where its LayerNorm goes depends on ``layer.norm_first``:

* Post-LN (``norm_first=False``, the paper):  x <- LN(x + Sublayer(x)): sub-layer, add, then norm;
* Pre-LN (``norm_first=True``, modern LLMs):   x <- x + Sublayer(LN(x)): the norm sits inside the
  branch, and the skip path carries x from layer to layer untouched.

Widths, head counts, activation and dropout rates are read from the module, so the picture cannot
drift away from the code. ``describe_layer`` returns the same flow as a list of steps (what the
tests check); ``plot_layer`` draws it; ``plot_layer_placement`` puts a Post-LN and a Pre-LN layer
side by side.
"""

from __future__ import annotations

from dataclasses import dataclass

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyBboxPatch
from torch import nn

from transformer_course._exhibit import exhibit
from transformer_course.nn.layers import DecoderLayer, EncoderLayer
from .blocks import blank_axes, draw_arrow, draw_box
from .style import PALETTE, new_figure

# Geometry of the drawing, in data units (the axes use an equal aspect ratio).
_BOX_WIDTH = 3.8
_SUBLAYER_HEIGHT = 0.95
_NORM_HEIGHT = 0.5
_ADD_RADIUS = 0.2
_GAP = 0.38
_SKIP_X = -_BOX_WIDTH / 2 - 0.55
_LEFT, _RIGHT = -3.0, 3.6


@dataclass(frozen=True)
class SubLayer:
    """One residual sub-layer of a layer: what it computes and which norm/dropout wrap it.

    Attributes:
        kind: "self-attention", "masked self-attention", "cross-attention" or "feed-forward".
        label: the text of its box (names and widths read off the module).
        norm_label: the text of its LayerNorm box.
        dropout: the dropout rate applied to its output before the residual add.
        module: the sub-layer module itself (``self_attn``, ``cross_attn`` or ``feed_forward``).
    """

    kind: str
    label: str
    norm_label: str
    dropout: float
    module: nn.Module


def _check_layer(layer: object) -> EncoderLayer | DecoderLayer:
    if not isinstance(layer, (EncoderLayer, DecoderLayer)):
        raise TypeError(f"layer must be an EncoderLayer or a DecoderLayer, got {type(layer).__name__}")
    return layer


def _attention_label(title: str, attention: nn.Module) -> str:
    return f"{title}\n{attention.num_heads} heads × d_head={attention.d_head}"


def _norm_label(norm: nn.Module) -> str:
    name = type(norm).__name__
    width = getattr(norm, "d_model", None) or getattr(norm, "normalized_shape", ("?",))[0]
    return f"{name} (over d_model={width})"


_TITLES = {"self_attn": "Multi-head self-attention", "cross_attn": "Multi-head cross-attention"}
_KINDS = {"self_attn": "self-attention", "cross_attn": "cross-attention", "feed_forward": "feed-forward"}


def sublayers(layer: EncoderLayer | DecoderLayer) -> list[SubLayer]:
    """The residual sub-layers of ``layer``, read off ``layer.SUBLAYERS`` (the order ``forward`` applies them).

    Args:
        layer: an ``EncoderLayer`` (self-attention, FFN) or a ``DecoderLayer`` (masked
            self-attention, cross-attention, FFN).

    Returns:
        One ``SubLayer`` per residual block, bottom (first applied) to top.

    Raises:
        TypeError: if ``layer`` is not an ``EncoderLayer`` or ``DecoderLayer``.
    """
    layer = _check_layer(layer)
    masked = isinstance(layer, DecoderLayer)  # a decoder's self-attention is causally masked
    parts = []
    for sublayer in layer.SUBLAYERS:
        module = getattr(layer, sublayer.name)
        kind = _KINDS[sublayer.name]
        if sublayer.name == "feed_forward":
            label = (f"Feed-forward ({module.activation})\n"
                     f"d_model={module.d_model} → d_ff={module.d_ff} → {module.d_model}")
        elif sublayer.name == "self_attn" and masked:
            kind, label = "masked self-attention", _attention_label("Masked multi-head self-attention", module)
        else:
            label = _attention_label(_TITLES[sublayer.name], module)
        parts.append(SubLayer(kind, label, _norm_label(getattr(layer, sublayer.norm)),
                              float(getattr(layer, sublayer.dropout).p), module))
    return parts


def describe_layer(layer: EncoderLayer | DecoderLayer) -> list[str]:
    """The layer's forward pass as the ordered list of steps the diagram draws.

    Post-LN gives ``[kind, "add", "norm"]`` per sub-layer, Pre-LN ``["norm", kind, "add"]``.

    Args:
        layer: an ``EncoderLayer`` or ``DecoderLayer``.

    Returns:
        Step names, first applied first, e.g. ``["self-attention", "add", "norm", "feed-forward",
        "add", "norm"]`` for a Post-LN encoder layer.

    Raises:
        TypeError: if ``layer`` is not an ``EncoderLayer`` or ``DecoderLayer``.
    """
    steps: list[str] = []
    for part in sublayers(layer):
        steps += ["norm", part.kind, "add"] if layer.norm_first else [part.kind, "add", "norm"]
    return steps


def placement_formula(norm_first: bool) -> str:
    """The one-line residual rule of a placement: Pre-LN "x + Sublayer(LN(x))", Post-LN "LN(x + Sublayer(x))"."""
    return "x + Sublayer(LN(x))" if norm_first else "LN(x + Sublayer(x))"


def _draw_add(ax: Axes, y: float) -> None:
    ax.add_patch(Circle((0.0, y), _ADD_RADIUS, facecolor="white", edgecolor="black", linewidth=1.2, zorder=3))
    ax.text(0.0, y, "+", ha="center", va="center", fontsize=12, zorder=4)


def _height(layer: EncoderLayer | DecoderLayer) -> float:
    per_sublayer = _SUBLAYER_HEIGHT + _NORM_HEIGHT + 2 * _ADD_RADIUS + 4 * _GAP
    return len(sublayers(layer)) * per_sublayer


def _limits(layer: EncoderLayer | DecoderLayer) -> tuple[float, float]:
    return -1.2, _height(layer) + 0.75


@exhibit
def plot_layer(layer: EncoderLayer | DecoderLayer, ax: Axes | None = None, length: str = "T") -> Figure:
    """Draw one encoder or decoder layer as a bottom-to-top flow read off the module.

    Each sub-layer is a box on the residual stream, with its skip connection on the left, its
    dropout rate on the branch, and its LayerNorm placed as ``layer.norm_first`` says: after the
    residual add (Post-LN, ``LN(x + Sublayer(x))``) or at the start of the branch (Pre-LN,
    ``x + Sublayer(LN(x))``). A decoder layer's cross-attention gets the encoder memory from the
    right.

    Args:
        layer: an ``EncoderLayer`` or ``DecoderLayer`` instance.
        ax: an axes to draw into (its limits, aspect and title are set); None makes a new figure.
        length: the symbol of the sequence length in the shape labels, "(B, <length>, d_model)":
            "T" (the default) or "S" for an encoder layer that reads a source.

    Returns:
        The figure that holds the drawing (``ax.figure`` when ``ax`` is given).

    Raises:
        TypeError: if ``layer`` is not an ``EncoderLayer``/``DecoderLayer`` or ``ax`` is not an Axes.
    """
    layer = _check_layer(layer)
    if not isinstance(length, str) or not length.strip():
        raise ValueError(f"length must be a non-empty string such as 'S' or 'T', got {length!r}")
    if ax is not None and not isinstance(ax, Axes):
        raise TypeError(f"ax must be a matplotlib Axes or None, got {type(ax).__name__}")
    parts = sublayers(layer)
    bottom, top = _limits(layer)
    if ax is None:
        figure = new_figure(4.4, 4.4 * (top - bottom) / (_RIGHT - _LEFT) + 0.5)
        ax = figure.add_subplot()
    blank_axes(ax, (_LEFT, _RIGHT), (bottom, top))
    width = layer.norm1.d_model if hasattr(layer.norm1, "d_model") else layer.self_attn.d_model
    half = _BOX_WIDTH / 2

    ax.text(0.0, -0.95, f"x  (B, {length}, d_model={width})", ha="center", va="center", fontsize=9)
    y = -0.7  # the top of whatever was drawn last on the residual stream
    for part in parts:
        colour = PALETTE["ffn"] if part.kind == "feed-forward" else PALETTE["attention"]
        branch_y = y + _GAP
        ax.plot([0.0], [branch_y], marker="o", markersize=4, color="black", zorder=3)
        ax.plot([0.0, 0.0], [y, branch_y], color="black", linewidth=1.2)
        y = branch_y
        steps = ["norm", "sublayer", "add"] if layer.norm_first else ["sublayer", "add", "norm"]
        add_y = None
        for step in steps:
            if step == "add":
                add_y = y + _GAP + _ADD_RADIUS
                draw_arrow(ax, (0.0, y), (0.0, add_y - _ADD_RADIUS))
                _draw_add(ax, add_y)
                if part.dropout > 0:
                    ax.text(0.12, y + _GAP / 2, f"dropout p={part.dropout:g}", ha="left", va="center", fontsize=9)
                y = add_y + _ADD_RADIUS
            else:
                height = _NORM_HEIGHT if step == "norm" else _SUBLAYER_HEIGHT
                label = part.norm_label if step == "norm" else part.label
                box_colour = PALETTE["norm"] if step == "norm" else colour
                draw_arrow(ax, (0.0, y), (0.0, y + _GAP))
                draw_box(ax, -half, y + _GAP, _BOX_WIDTH, height, label, color=box_colour, fontsize=9)
                if step == "sublayer" and part.kind == "cross-attention":
                    mid = y + _GAP + height / 2
                    draw_arrow(ax, (_RIGHT - 0.05, mid), (half + 0.05, mid))
                    ax.text(_RIGHT - 0.05, mid + 0.12, "memory\n(encoder)", ha="right", va="bottom", fontsize=9)
                y += _GAP + height
        # the skip connection: from the branch point, up the left side, into the add node
        ax.plot([0.0, _SKIP_X, _SKIP_X], [branch_y, branch_y, add_y], color="black", linewidth=1.2)
        draw_arrow(ax, (_SKIP_X, add_y), (-_ADD_RADIUS, add_y))
        ax.text(_SKIP_X - 0.08, (branch_y + add_y) / 2, "residual", rotation=90, ha="right", va="center",
                fontsize=9)
    draw_arrow(ax, (0.0, y), (0.0, y + 0.5))
    ax.text(0.0, y + 0.7, f"output  (B, {length}, d_model={width})", ha="center", va="center", fontsize=9)
    if layer.norm_first:
        ax.text(0.0, y + 1.05, "(a Pre-LN stack ends with one more LayerNorm)", ha="center", va="center",
                fontsize=9, style="italic")
    frame = FancyBboxPatch((_SKIP_X - 0.3, -0.55), half - _SKIP_X + 0.6, y + 0.12 + 0.55,
                           boxstyle="round,pad=0.02,rounding_size=0.15", facecolor="none",
                           edgecolor="grey", linestyle="--", linewidth=1.0)
    ax.add_patch(frame)
    kind = "Decoder" if isinstance(layer, DecoderLayer) else "Encoder"
    placement = "Pre-LN" if layer.norm_first else "Post-LN"
    ax.set_title(f"{kind} layer, {placement}\nx ← {placement_formula(layer.norm_first)}", fontsize=10)
    return ax.figure


@exhibit
def plot_layer_placement(post_ln_layer: EncoderLayer | DecoderLayer,
                         pre_ln_layer: EncoderLayer | DecoderLayer) -> Figure:
    """Post-LN (left) and Pre-LN (right) versions of a layer, side by side.

    Args:
        post_ln_layer: a layer with ``norm_first=False``.
        pre_ln_layer: a layer with ``norm_first=True``.

    Returns:
        A figure with two panels drawn by ``plot_layer``.

    Raises:
        TypeError: if either argument is not an ``EncoderLayer``/``DecoderLayer``.
        ValueError: if ``post_ln_layer.norm_first`` is True or ``pre_ln_layer.norm_first`` is False.
    """
    _check_layer(post_ln_layer)
    _check_layer(pre_ln_layer)
    if post_ln_layer.norm_first:
        raise ValueError("post_ln_layer must have norm_first=False, got norm_first=True")
    if not pre_ln_layer.norm_first:
        raise ValueError("pre_ln_layer must have norm_first=True, got norm_first=False")
    bottom, top = _limits(max(post_ln_layer, pre_ln_layer, key=_height))
    figure = new_figure(8.4, 4.2 * (top - bottom) / (_RIGHT - _LEFT) + 0.5)
    left, right = figure.subplots(1, 2)
    plot_layer(post_ln_layer, left)
    plot_layer(pre_ln_layer, right)
    for ax in (left, right):  # the same vertical scale in both panels
        ax.set_ylim(bottom, top)
    return figure
