"""Diagrams of the whole encoder-decoder, read off a real ``Transformer`` and its layers.

* ``plot_transformer``: the architecture of Vaswani et al. (2017), Figure 1 (card DL0035, Figure 1):
  embeddings + positions, the N x encoder layer and N x decoder layer blocks, the cross-attention
  bridge and the linear + softmax head. Layer counts, widths, heads and the sub-layers inside
  each block come from the module.
* ``plot_encoder_and_decoder_layers``: one encoder layer beside one decoder layer (card DL0035,
  Figure 2), each drawn by ``plotting.layer_diagram.plot_layer``.
* ``plot_stacks``: every layer of both stacks side by side with the cross-attention bridge into
  each decoder layer (card DL0036, Figure 1).
* ``plot_attention_sources``: where Q, K and V come from in the three attention types, each with
  its real boolean mask (card DL0036, Figure 2).
* ``plot_loss_curve``: a training loss curve.
"""

from __future__ import annotations

import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

from transformer_course._validation import check_instance
from transformer_course._exhibit import exhibit
from transformer_course.measure.dependency import sees_future
from transformer_course.nn.layers import DecoderLayer, EncoderLayer
from transformer_course.nn.model import Transformer
from .blocks import blank_axes, draw_arrow, draw_box
from .style import PALETTE, new_figure


def _check_model(model: object) -> Transformer:
    check_instance("model", model, Transformer, "transformer_course.nn.model.Transformer")
    return model


def sublayer_label(layer: EncoderLayer | DecoderLayer, name: str, causal: bool = False, short: bool = False) -> str:
    """The text of a sub-layer's box, with heads and widths read off the module.

    Args:
        layer: the layer that owns the sub-layer.
        name: "self_attn", "cross_attn" or "feed_forward" (a name in ``layer.SUBLAYERS``).
        causal: whether this self-attention is causally masked (prefix "Masked").
        short: one line, no sizes (for the small boxes of ``plot_stacks``).
    """
    module = getattr(layer, name)
    if name == "feed_forward":
        if short:
            return "Feed-forward"
        return f"Feed-forward ({module.activation})\n{module.d_model} → {module.d_ff} → {module.d_model}"
    title = "Cross-attention" if name == "cross_attn" else ("Masked self-attention" if causal else "Self-attention")
    if short:
        return title
    return f"Multi-head {title[0].lower() + title[1:]}\n{module.num_heads} heads × d_head={module.d_head}"


def _colour(name: str) -> str:
    return PALETTE["ffn"] if name == "feed_forward" else PALETTE["attention"]


def _draw_layer_block(ax: Axes, layer: EncoderLayer | DecoderLayer, x: float, y: float, width: float,
                      causal: bool) -> tuple[float, dict[str, tuple[float, float]]]:
    """Draw a layer's sub-layers and norms bottom to top from ``y``; return the top y and box centres."""
    box_h, norm_h, gap = 0.75, 0.38, 0.22
    centres: dict[str, tuple[float, float]] = {}
    for name in (sublayer.name for sublayer in layer.SUBLAYERS):
        steps = ["norm", name] if layer.norm_first else [name, "norm"]
        for step in steps:
            y += gap
            if step == "norm":
                label = "LayerNorm" if layer.norm_first else "Add & Norm"
                draw_box(ax, x, y, width, norm_h, label, color=PALETTE["norm"], fontsize=9)
                y += norm_h
            else:
                draw_box(ax, x, y, width, box_h, sublayer_label(layer, name, causal), color=_colour(name), fontsize=9)
                centres[name] = (x, y + box_h / 2)
                y += box_h
        if layer.norm_first:
            y += gap
            draw_box(ax, x + width / 2 - 0.4, y, 0.8, norm_h, "Add", color="white", fontsize=9)
            y += norm_h
    return y, centres


@exhibit
def plot_transformer(model: Transformer) -> Figure:
    """The encoder-decoder architecture, bottom to top, drawn from a ``Transformer`` instance.

    What is read off ``model``: the number of encoder and decoder layers (the "N×" labels), the
    sub-layers of ``model.encoder.layers[0]`` and ``model.decoder.layers[0]`` with their heads and
    widths, whether each stack's self-attention sees the future (``measure.dependency.sees_future``, measured),
    the vocabulary sizes, d_model, and whether the embeddings are shared.

    Args:
        model: the encoder-decoder to draw.

    Returns:
        The figure.

    Raises:
        TypeError: if ``model`` is not a ``Transformer``.
    """
    model = _check_model(model)
    config = model.config
    enc_layer, dec_layer = model.encoder.layers[0], model.decoder.layers[0]
    enc_n, dec_n = len(model.encoder.layers), len(model.decoder.layers)
    figure = new_figure(9.0, 9.0)  # resized below, once the height of the drawing is known
    ax = figure.add_subplot()
    width = 3.8
    columns = {"encoder": 0.4, "decoder": 7.0}
    bridge_x = 6.3
    tops: dict[str, float] = {}
    for stack, x in columns.items():
        is_decoder = stack == "decoder"
        vocab = config.tgt_vocab_size if is_decoder else config.src_vocab_size
        inputs = "Target tokens, shifted right\n(<bos>, y₁, …, y_{T−1})" if is_decoder else "Source tokens (x₁, …, x_S)"
        ax.text(x + width / 2, -0.85, inputs, ha="center", va="center", fontsize=9)
        draw_arrow(ax, (x + width / 2, -0.5), (x + width / 2, 0.0))
        embed = "Output embedding" if is_decoder else "Input embedding"
        draw_box(ax, x, 0.0, width, 0.7, f"{embed}\n{vocab:,} × d_model={config.d_model}, × √d_model",
                 color=PALETTE["embedding"], fontsize=9)
        draw_arrow(ax, (x + width / 2, 0.7), (x + width / 2, 1.1))
        draw_box(ax, x, 1.1, width, 0.5, "+ sinusoidal positional encoding", color="white", fontsize=9)
        draw_arrow(ax, (x + width / 2, 1.6), (x + width / 2, 2.05))
        layer = dec_layer if is_decoder else enc_layer
        causal = not sees_future(model, stack)
        start = 2.05
        top, centres = _draw_layer_block(ax, layer, x + 0.25, start, width - 0.5, causal)
        frame = FancyBboxPatch((x, start), width, top - start + 0.22, boxstyle="round,pad=0.02,rounding_size=0.15",
                               facecolor="#F4F4F4", edgecolor="black", linewidth=1.2, zorder=0)
        ax.add_patch(frame)
        count = dec_n if is_decoder else enc_n
        side = x + width + 0.15 if is_decoder else x - 0.15
        ax.text(side, (start + top) / 2, f"{count}×", ha="left" if is_decoder else "right", va="center",
                fontsize=15, fontweight="bold")
        ax.text(x + width / 2, top + 0.45, f"{stack.capitalize()} layer (one of {count})", ha="center",
                va="center", fontsize=9, style="italic")
        tops[stack] = top + 0.22
        if is_decoder:
            cross_y = centres["cross_attn"][1]
    # the bridge: the encoder's final output feeds every decoder layer's cross-attention (K and V)
    enc_x = columns["encoder"] + width / 2
    bridge_y = tops["encoder"] + 0.9
    ax.plot([enc_x, enc_x, bridge_x, bridge_x], [tops["encoder"], bridge_y, bridge_y, cross_y],
            color=PALETTE["output"], linewidth=1.6)
    draw_arrow(ax, (bridge_x, cross_y), (columns["decoder"] + 0.25, cross_y), color=PALETTE["output"])
    ax.text((columns["encoder"] + width + bridge_x) / 2, (bridge_y + cross_y) / 2,
            "memory =\nkeys & values\nof every\ncross-attention", ha="center", va="center", fontsize=9)
    ax.text(enc_x, bridge_y + 0.3, f"encoder output (B, S, d_model={config.d_model})", ha="center",
            va="center", fontsize=9)
    # the head: linear + softmax on top of the decoder
    dec_x = columns["decoder"]
    y = tops["decoder"] + 0.75
    draw_arrow(ax, (dec_x + width / 2, tops["decoder"]), (dec_x + width / 2, y))
    tied = "\n(weights tied to the embeddings)" if config.share_embeddings else ""
    draw_box(ax, dec_x, y, width, 0.7, f"Linear d_model → {config.tgt_vocab_size:,}{tied}",
             color=PALETTE["projection"], fontsize=9)
    draw_arrow(ax, (dec_x + width / 2, y + 0.7), (dec_x + width / 2, y + 1.05))
    draw_box(ax, dec_x, y + 1.05, width, 0.5, "Softmax", color=PALETTE["output"], fontsize=9)
    draw_arrow(ax, (dec_x + width / 2, y + 1.55), (dec_x + width / 2, y + 1.9))
    ax.text(dec_x + width / 2, y + 2.1, "next-token probabilities", ha="center", va="center", fontsize=9)
    xlim, ylim = (-0.8, 11.9), (-1.3, y + 2.4)
    blank_axes(ax, xlim, ylim)
    figure.set_size_inches(9.0, 9.0 * (ylim[1] - ylim[0]) / (xlim[1] - xlim[0]) + 0.4)
    placement = "Pre-LN" if config.norm_first else "Post-LN"
    ax.set_title(f"Transformer: {enc_n} encoder + {dec_n} decoder layers, d_model={config.d_model}, "
                 f"h={config.num_heads}, d_ff={config.d_ff}, {placement}", fontsize=11)
    return figure


@exhibit
def plot_encoder_and_decoder_layers(encoder_layer: EncoderLayer, decoder_layer: DecoderLayer) -> Figure:
    """One encoder layer (left) beside one decoder layer (right), each drawn by ``plot_layer``.

    Raises:
        TypeError: if the layers are not an ``EncoderLayer`` and a ``DecoderLayer``.
    """
    from .layer_diagram import plot_layer  # written alongside; imported here to keep this module light

    check_instance("encoder_layer", encoder_layer, EncoderLayer)
    check_instance("decoder_layer", decoder_layer, DecoderLayer)
    figure = new_figure(9.0, 8.0)
    left, right = figure.subplots(1, 2)
    plot_layer(encoder_layer, ax=left, length="S")  # the encoder reads the source: (B, S, d_model)
    plot_layer(decoder_layer, ax=right, length="T")
    return figure


@exhibit
def plot_stacks(model: Transformer) -> Figure:
    """Both stacks layer by layer, a dashed line between them, and the cross-attention bridge.

    Each layer is a column of its sub-layer boxes (2 in an encoder layer, 3 in a decoder layer,
    read off the module). The encoder's final output is drawn entering the cross-attention box of
    every decoder layer.

    Raises:
        TypeError: if ``model`` is not a ``Transformer``.
    """
    model = _check_model(model)
    enc_layers, dec_layers = list(model.encoder.layers), list(model.decoder.layers)
    enc_causal, dec_causal = not sees_future(model, "encoder"), not sees_future(model, "decoder")
    box_w, box_h, gap, layer_gap = 2.6, 0.5, 0.12, 0.45
    enc_x, dec_x, mid_x = 0.3, 5.4, 4.15

    def layer_height(layer):
        return len(layer.SUBLAYERS) * (box_h + gap) + gap

    total = max(sum(layer_height(l) + layer_gap for l in enc_layers),
                sum(layer_height(l) + layer_gap for l in dec_layers))
    figure = new_figure(7.2, 1.2 + 0.62 * total)
    ax = figure.add_subplot()
    blank_axes(ax, (-0.4, 8.6), (-1.0, total + 1.3))
    ax.plot([mid_x, mid_x], [-0.8, total + 0.6], color="grey", linestyle="--", linewidth=1.2)
    enc_top = 0.0
    for stack, layers, x, causal in (("Encoder", enc_layers, enc_x, enc_causal),
                                     ("Decoder", dec_layers, dec_x, dec_causal)):
        y = 0.0
        feed = "source embeddings + positions" if stack == "Encoder" else "shifted-right target + positions"
        ax.text(x + box_w / 2, -0.55, feed, ha="center", va="center", fontsize=9)
        cross_targets = []
        for index, layer in enumerate(layers):
            height = layer_height(layer)
            frame = FancyBboxPatch((x - 0.15, y), box_w + 0.3, height, boxstyle="round,pad=0.02,rounding_size=0.1",
                                   facecolor="#F4F4F4", edgecolor="black", linewidth=1.0, zorder=0)
            ax.add_patch(frame)
            ax.text(x - 0.25 if stack == "Encoder" else x + box_w + 0.25, y + height / 2, f"{index + 1}",
                    ha="right" if stack == "Encoder" else "left", va="center", fontsize=9, fontweight="bold")
            yy = y + gap
            for name in (sublayer.name for sublayer in layer.SUBLAYERS):
                draw_box(ax, x, yy, box_w, box_h, sublayer_label(layer, name, causal, short=True),
                         color=_colour(name), fontsize=9)
                if name == "cross_attn":
                    cross_targets.append(yy + box_h / 2)
                yy += box_h + gap
            if index + 1 < len(layers):
                draw_arrow(ax, (x + box_w / 2, y + height), (x + box_w / 2, y + height + layer_gap))
            y += height + layer_gap
        n_sub = len(layers[0].SUBLAYERS)
        ax.text(x + box_w / 2, total + 0.35, f"{stack}: {len(layers)} layers × {n_sub} sub-layers", ha="center",
                va="center", fontsize=10, fontweight="bold")
        if stack == "Encoder":
            enc_top = y - layer_gap
            ax.plot([x + box_w + 0.15, mid_x - 0.3], [enc_top - 0.1, enc_top - 0.1], color=PALETTE["output"],
                    linewidth=1.6)
            bus_x = mid_x - 0.3
        else:
            ax.plot([bus_x, bus_x], [min(cross_targets), max(cross_targets + [enc_top - 0.1])],
                    color=PALETTE["output"], linewidth=1.6)
            for target in cross_targets:
                draw_arrow(ax, (bus_x, target), (x, target), color=PALETTE["output"])
            ax.text(bus_x - 0.1, (min(cross_targets) + enc_top) / 2, "encoder output: K, V of every cross-attention",
                    rotation=90, ha="right", va="center", fontsize=9, color=PALETTE["output"])
    return figure


def _mask_panel(ax: Axes, mask: torch.Tensor, row_label: str, column_label: str, title: str) -> None:
    values = mask.to(torch.float32).cpu().numpy()
    ax.imshow(values, cmap="Greys", vmin=-0.25, vmax=1.25)
    t, s = values.shape
    for i in range(t):
        for j in range(s):
            ax.text(j, i, "✓" if values[i, j] else "·", ha="center", va="center", fontsize=9,
                    color="white" if values[i, j] else "black")
    ax.set_xticks(range(s))
    ax.set_yticks(range(t))
    ax.tick_params(labelsize=9, length=0)
    ax.set_xlabel(column_label, fontsize=9)
    ax.set_ylabel(row_label, fontsize=9)
    ax.set_title(title, fontsize=9)


@exhibit
def plot_attention_sources(encoder_mask: torch.Tensor, decoder_mask: torch.Tensor,
                           cross_mask: torch.Tensor) -> Figure:
    """Where Q, K and V come from in the three attention types, each above its boolean mask.

    Args:
        encoder_mask: (S, S) bool mask of encoder self-attention (True = may attend).
        decoder_mask: (T, T) bool mask of decoder self-attention (``causal_mask(T)``).
        cross_mask: (T, S) bool mask of cross-attention.

    Returns:
        A figure with three columns: a small Q/K/V diagram on top, the mask below.

    Raises:
        TypeError, ValueError: if a mask is not a 2-D bool tensor or the shapes disagree.
    """
    masks = {"encoder_mask": encoder_mask, "decoder_mask": decoder_mask, "cross_mask": cross_mask}
    for name, mask in masks.items():
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.dim() != 2:
            raise TypeError(f"{name} must be a 2-D bool tensor (True = may attend), got "
                            f"{getattr(mask, 'dtype', type(mask).__name__)} with shape {tuple(getattr(mask, 'shape', ()))}")
    s, t = encoder_mask.shape[0], decoder_mask.shape[0]
    if encoder_mask.shape != (s, s) or decoder_mask.shape != (t, t) or cross_mask.shape != (t, s):
        raise ValueError(f"expected encoder_mask (S, S), decoder_mask (T, T), cross_mask (T, S); got "
                         f"{tuple(encoder_mask.shape)}, {tuple(decoder_mask.shape)}, {tuple(cross_mask.shape)}")
    figure = new_figure(9.0, 6.6)
    grid = figure.add_gridspec(2, 3, height_ratios=[1.0, 1.25])
    panels = [
        # Q, K, V come from the stack's current state: the embedded input only in layer 1.
        ("Encoder self-attention", "encoder\nstate", "encoder\nstate", "encoder\nstate", PALETTE["embedding"],
         PALETTE["embedding"],
         encoder_mask, f"S × S = {s} × {s}: every key\n(padding columns blocked)", "query (source)", "key (source)"),
        ("Masked decoder self-attention", "decoder\nstate", "decoder\nstate", "decoder\nstate", PALETTE["ffn"],
         PALETTE["ffn"],
         decoder_mask, f"T × T = {t} × {t}: causal,\nkey j ≤ query i", "query (target)", "key (target)"),
        ("Cross-attention", "decoder\nstate", "encoder\noutput", "encoder\noutput", PALETTE["ffn"],
         PALETTE["embedding"], cross_mask, f"T × S = {t} × {s}: every source key\nfor every target query",
         "query (target)", "key (source)"),
    ]
    for column, (title, q_src, k_src, v_src, q_col, kv_col, mask, mask_title, rows, cols) in enumerate(panels):
        ax = figure.add_subplot(grid[0, column])
        blank_axes(ax, (0, 6), (0, 4.2))
        ax.set_title(title, fontsize=10)
        draw_box(ax, 0.8, 3.0, 4.4, 0.7, "softmax(QKᵀ/√d_k + M) V", color=PALETTE["attention"], fontsize=9)
        for x, role, source, colour in ((0.3, "Q", q_src, q_col), (2.3, "K", k_src, kv_col),
                                        (4.3, "V", v_src, kv_col)):
            draw_box(ax, x, 0.2, 1.4, 0.9, source, color=colour, fontsize=9)
            draw_arrow(ax, (x + 0.7, 1.1), (min(max(x + 0.7, 1.9), 4.1), 3.0))
            ax.text(x + 0.7 + (0.25 if role != "K" else 0.2), 1.75, role, ha="left", va="center", fontsize=10,
                    fontweight="bold")
        _mask_panel(figure.add_subplot(grid[1, column]), mask, rows, cols, mask_title)
    return figure


@exhibit
def plot_loss_curve(losses: list[float], title: str = "Training loss") -> Figure:
    """Per-step training loss (log scale) with a moving average.

    Raises:
        ValueError: if ``losses`` is empty.
    """
    if len(losses) == 0:
        raise ValueError("losses must hold at least one value, got an empty sequence")
    values = torch.tensor(list(losses), dtype=torch.float64)
    window = max(1, len(values) // 20)
    smooth = values.unfold(0, window, 1).mean(-1) if len(values) >= window else values
    figure = new_figure(6.4, 3.4)
    ax = figure.add_subplot()
    ax.plot(range(1, len(values) + 1), values.numpy(), color="#999999", linewidth=1.0, label="per step")
    ax.plot(range(window, len(values) + 1), smooth.numpy(), color=PALETTE["projection"], linewidth=2.0,
            label=f"mean of {window} steps")
    ax.set_yscale("log")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy (nats / token)")
    ax.set_title(title)
    ax.legend(frameon=False)
    return figure


@exhibit
def plot_loss_curves(losses_by_seed: dict[int, list[float]], threshold: float | None = None,
                     title: str = "Training loss") -> Figure:
    """The per-step training loss (log scale) of every seed of an ensemble, one line each.

    Args:
        losses_by_seed: {seed: losses of every step}, all of the same length.
        threshold: optional loss level drawn as a dashed line, each seed's first step below it
            marked with a dot.
        title: the axes title.

    Raises:
        ValueError: if ``losses_by_seed`` is empty, a curve is empty, or the curves differ in length.
    """
    if not losses_by_seed:
        raise ValueError("losses_by_seed must hold at least one seed, got none")
    lengths = {len(losses) for losses in losses_by_seed.values()}
    if len(lengths) != 1 or 0 in lengths:
        raise ValueError(f"losses_by_seed must hold non-empty curves of one length, got lengths {sorted(lengths)}")
    figure = new_figure(6.4, 3.6)
    ax = figure.add_subplot()
    steps = range(1, lengths.pop() + 1)
    for index, (seed, losses) in enumerate(losses_by_seed.items()):
        ax.plot(steps, losses, color=PALETTE["projection"], alpha=0.55, linewidth=1.0,
                label=f"{len(losses_by_seed)} seeds" if index == 0 else None)
        if threshold is not None:
            first = next((i for i, loss in enumerate(losses) if loss < threshold), None)
            if first is not None:
                ax.plot([first + 1], [losses[first]], marker="o", markersize=4, color=PALETTE["output"],
                        label="first step below" if index == 0 else None)
    if threshold is not None:
        ax.axhline(threshold, color="black", linestyle="--", linewidth=1.0, label=f"loss {threshold:g}")
    ax.set_yscale("log")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy (nats / token)")
    ax.set_title(title)
    ax.legend(frameon=False, fontsize=9)
    return figure
