"""Training and evaluating an encoder-decoder on the toy tasks, and reading its wiring off the modules.

* ``toy_transformer``: a small encoder-decoder for the toy vocabulary (with ``init_embeddings_``).
* ``seq2seq_loss``: teacher forcing, cross-entropy of the logits at every decoder position
  against the shifted-right labels (``data.shift_right``).
* ``train_seq2seq``: ``training.fit`` on fresh batches of a toy task.
* ``exact_match``: greedy decoding of held-out sources, scored by whole-sequence equality.
* ``encoder_decoder_table``: what an encoder and a decoder layer contain (their ``SUBLAYERS``)
  and which positions they may look at (``measure.dependency.sees_future``), read off instances.

Shape legend: B batch, S source length, T decoder length, V vocabulary size, D = d_model.
"""

from __future__ import annotations

import inspect
from functools import partial

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from transformer_course._exhibit import exhibit
from transformer_course._validation import check_choice, check_instance, check_int, check_probability, check_tensor
from transformer_course.measure.dependency import sees_future
from transformer_course.nn.losses import label_smoothed_cross_entropy
from transformer_course.nn.model import Transformer, TransformerConfig
from .data import BOS_ID, EOS_ID, PAD_ID, TASKS, VOCAB_SIZE, make_batch
from .training import fit, model_device, seeded


def _check_model(model: object) -> Transformer:
    check_instance("model", model, Transformer, "transformer_course.nn.model.Transformer")
    return model


def init_embeddings_(model: Transformer) -> Transformer:
    """Re-draw the embedding matrices from N(0, 1 / d_model), in place, so sqrt(d_model) * E has unit scale.

    ``nn.Embedding`` starts from N(0, 1); multiplied by sqrt(d_model) (as the paper does), a token
    vector then has norm about d_model and drowns the sinusoidal encodings (entries in [-1, 1]),
    so the model is slow to learn where a token sits. Starting from std d_model^-1/2 (the
    initialization of the paper's tensor2tensor code) puts tokens and positions on the same scale.

    Returns:
        ``model`` (for chaining).
    """
    _check_model(model)
    std = model.config.d_model ** -0.5
    with torch.no_grad():
        for embedding in {id(m): m for m in (model.src_embed, model.tgt_embed)}.values():  # shared: once
            embedding.weight.normal_(0.0, std)
    return model


def toy_transformer(d_model: int = 64, num_heads: int = 4, num_layers: int = 2, d_ff: int = 128,
                    dropout: float = 0.0, seed: int = 0) -> Transformer:
    """A small Post-LN encoder-decoder over the toy vocabulary (``data.VOCAB_SIZE``), seeded.

    The paper's architecture at toy size (the base model has d_model=512, 8 heads, 6 + 6 layers,
    d_ff=2048), with ``init_embeddings_`` applied.
    """
    config = TransformerConfig(VOCAB_SIZE, VOCAB_SIZE, d_model=d_model, num_heads=num_heads,
                               num_encoder_layers=num_layers, num_decoder_layers=num_layers, d_ff=d_ff,
                               dropout=dropout, max_len=64)
    with seeded(seed):
        return init_embeddings_(Transformer(config))


def seq2seq_loss(model: Transformer, batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
                 pad_id: int = PAD_ID, label_smoothing: float = 0.0) -> torch.Tensor:
    """Mean cross-entropy -log p(y_t | y_<t, x) over all non-pad label positions (teacher forcing).

    Args:
        model: the encoder-decoder.
        batch: (src (B, S), decoder_input (B, T), labels (B, T)), as made by ``data.make_batch``.
        pad_id: label id ignored by the loss.
        label_smoothing: epsilon of ``nn.losses.label_smoothed_cross_entropy`` (0: the plain
            cross-entropy, computed by ``F.cross_entropy``).

    Returns:
        The scalar loss.
    """
    src, decoder_input, labels = batch
    logits = _check_model(model)(src, decoder_input)  # (B, T, V), all positions in parallel
    if label_smoothing:
        return label_smoothed_cross_entropy(logits.flatten(0, 1), labels.flatten(), label_smoothing, pad_id)  # ()
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=pad_id)  # ()


def train_seq2seq(model: Transformer, task: str = "reverse", length: int = 8, steps: int = 200,
                  batch_size: int = 64, lr: float = 1e-3, warmup_steps: int = 30, seed: int = 0,
                  progress: bool = False, label_smoothing: float = 0.0) -> list[float]:
    """Train ``model`` on fresh training-split batches of a toy task with ``training.fit``.

    Args:
        model: the encoder-decoder (its vocabularies must cover ``data.VOCAB_SIZE``).
        task: "copy", "reverse" or "sort".
        length: source digits per example.
        steps, lr, warmup_steps, seed, progress: as in ``training.fit``.
        batch_size: examples per step.
        label_smoothing: epsilon of the loss (``seq2seq_loss``); 0 = plain cross-entropy.

    Returns:
        The loss of every step (label-smoothed when ``label_smoothing`` > 0).

    Raises:
        TypeError, ValueError: for a model that is not a ``Transformer``, an unknown task, or
            non-positive sizes.
    """
    _check_model(model)
    check_choice("task", task, TASKS)
    length = check_int("length", length, minimum=1)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    batches = partial(_train_batch, task, batch_size, length)
    label_smoothing = check_probability("label_smoothing", label_smoothing)
    loss_fn = partial(seq2seq_loss, label_smoothing=label_smoothing) if label_smoothing else seq2seq_loss
    return fit(model, batches, loss_fn, steps=steps, lr=lr, warmup_steps=warmup_steps, seed=seed,
               progress=progress)


def _train_batch(task: str, batch_size: int, length: int, generator: torch.Generator):
    return make_batch(task, batch_size, length, generator, split="train")


@torch.no_grad()
def exact_match(model: Transformer, src: torch.Tensor, labels: torch.Tensor, bos_id: int = BOS_ID,
                eos_id: int = EOS_ID, use_cache: bool = False) -> float:
    """Fraction of sources whose greedy decoding equals the whole label row (tokens and <eos>).

    Args:
        model: the encoder-decoder (put in eval mode here).
        src: (B, S) source ids.
        labels: (B, T) reference target ids ending with ``eos_id`` (as from ``data.shift_right``).
        bos_id, eos_id: the special tokens.
        use_cache: decode with a key/value cache (same result, less work).

    Returns:
        Exact-match accuracy in [0, 1].
    """
    _check_model(model).eval()
    check_tensor("labels", labels, ndim=2)
    if labels.shape[0] != src.shape[0]:
        raise ValueError(f"src and labels must have the same batch size, got {src.shape[0]} and {labels.shape[0]}")
    src, labels = src.to(model_device(model)), labels.to(model_device(model))
    generated = model.greedy_decode(src, labels.shape[1], bos_id, eos_id, use_cache=use_cache)[:, 1:]  # (B, <= T)
    if generated.shape[1] < labels.shape[1]:  # every row stopped early: pad with <eos> as greedy_decode does
        fill = torch.full((src.shape[0], labels.shape[1] - generated.shape[1]), eos_id, dtype=generated.dtype,
                          device=generated.device)
        generated = torch.cat((generated, fill), dim=1)  # (B, T)
    return float((generated == labels).all(dim=1).float().mean())


def heldout_exact_match(model: Transformer, task: str = "reverse", length: int = 8, num_examples: int = 500,
                        seed: int = 1234) -> float:
    """Exact-match accuracy on ``num_examples`` held-out examples (a split training never draws)."""
    generator = torch.Generator().manual_seed(check_int("seed", seed, minimum=0))
    src, _, labels = make_batch(task, num_examples, length, generator, split="heldout")
    return exact_match(model, src, labels)


# --- Reading the architecture off the modules -----------------------------------------------


def reads_memory(layer: nn.Module) -> bool:
    """True when the layer's ``forward`` takes the encoder output (``memory``) as an input."""
    return "memory" in inspect.signature(layer.forward).parameters


@exhibit
def encoder_decoder_table(model: Transformer) -> pd.DataFrame:
    """Card DL0036's Table 1, with each cell derived from ``model``'s modules or measured on it.

    Rows: self-attention (measured with ``sees_future``), cross-attention (``SUBLAYERS``), positional
    encoding, input (``forward`` signatures), function, sub-layers per layer, add & norm steps
    per layer, parameters per layer.

    Returns:
        DataFrame indexed by "Aspect" with columns "Encoder" and "Decoder".
    """
    _check_model(model)
    enc_layer, dec_layer = model.encoder.layers[0], model.decoder.layers[0]
    columns = {}
    for stack, layer in (("Encoder", enc_layer), ("Decoder", dec_layer)):
        names = [sublayer.name for sublayer in layer.SUBLAYERS]
        future = sees_future(model, stack.lower())
        cross = "cross_attn" in names
        side = "source" if stack == "Encoder" else "target"
        columns[stack] = {
            "Self-attention": ("Unmasked: all positions" if future else "Masked: past positions only (causal)"),
            "Cross-attention": ("Present: attends to encoder outputs" if cross else "Not present"),
            "Positional encoding": f"Added to {side} embeddings" + (" (shifted right)" if stack == "Decoder" else ""),
            "Input": ("Shifted target + encoder outputs" if reads_memory(layer) else "Source sequence"),
            "Function": ("Generate target autoregressively with source context" if not future
                         else "Encode source into contextual representations"),
            "Sub-layers per layer": f"{len(names)}: " + ", ".join(names),
            "Add & norm per layer": str(len(layer.SUBLAYERS)),
            "Parameters per layer": f"{sum(p.numel() for p in layer.parameters()):,}",
        }
    return pd.DataFrame(columns).rename_axis("Aspect")


# --- What each sub-layer hands on: the residual stream, standardized ---------------------------


@torch.no_grad()
def residual_stream_table(model: Transformer, src: torch.Tensor, decoder_input: torch.Tensor) -> pd.DataFrame:
    """Row statistics of the residual stream after every sub-layer, with that sub-layer's LayerNorm undone.

    Hooks record what each residual block of every encoder and decoder layer hands on (the next
    sub-layer's input, or the layer's output after the last block) while ``model`` runs once on
    (``src``, ``decoder_input``). Each recorded stream is mapped through the inverse of the affine
    part of the block's LayerNorm, (z - beta) / gamma, and the mean and standard deviation of
    every row (token vector) are taken. In Post-LN the stream *is* the LayerNorm's output, so the
    rows are standardized (mean 0, std 1 up to the epsilon); in Pre-LN the block hands on
    x + Sublayer(LN(x)), which nothing renormalizes, and the same statistics depart from 0 and 1.

    Args:
        model: an encoder-decoder ``Transformer`` (put in eval mode here).
        src: (B, S) source ids; decoder_input: (B, T) decoder input ids.

    Returns:
        DataFrame indexed by "sub-layer" ("encoder.layers.0, after self_attn", ...) with columns
        "rows", "max |row mean|", "min row std", "max row std" (floats, unrounded).
    """
    from transformer_course.nn.layers import DecoderLayer, EncoderLayer

    _check_model(model).eval()
    records: list[dict] = []

    def recorder(name: str, norm: nn.Module, what: str):
        def record(stream: torch.Tensor) -> None:  # (B, L, D)
            standardized = (stream - norm.bias) / norm.weight  # (B, L, D), before gamma and beta
            mean = standardized.mean(-1)  # (B, L)
            std = standardized.var(-1, unbiased=False).sqrt()  # (B, L)
            records.append({"sub-layer": f"{name}, {what}", "rows": mean.numel(),
                            "max |row mean|": float(mean.abs().max()), "min row std": float(std.min()),
                            "max row std": float(std.max())})
        return record

    handles = []
    try:
        for name, layer in model.named_modules():
            if not isinstance(layer, (EncoderLayer, DecoderLayer)):
                continue
            blocks = layer.SUBLAYERS  # (sub-layer, its LayerNorm, its dropout), in order
            for block, following in zip(blocks, blocks[1:]):  # the stream after `block` enters `following`
                on_stream = recorder(name, getattr(layer, block.norm), f"after {block.name}")
                handles.append(getattr(layer, following.name).register_forward_pre_hook(
                    lambda module, args, on_stream=on_stream: on_stream(args[0])))
            on_output = recorder(name, getattr(layer, blocks[-1].norm), f"after {blocks[-1].name}")
            handles.append(layer.register_forward_hook(
                lambda module, args, output, on_output=on_output: on_output(output)))
        device = next(model.parameters()).device
        model(src.to(device), decoder_input.to(device))
    finally:
        for handle in handles:
            handle.remove()
    return pd.DataFrame(records).set_index("sub-layer")


def with_placement(model: Transformer, norm_first: bool) -> Transformer:
    """A copy of ``model`` with the same weights and the LayerNorms placed Pre-LN (True) or Post-LN (False).

    A Pre-LN stack ends with one more LayerNorm per stack (``encoder.norm``, ``decoder.norm``),
    which a Post-LN model does not have: it keeps its initial gamma = 1, beta = 0 (or is dropped).
    """
    from dataclasses import replace

    _check_model(model)
    check_instance("norm_first", norm_first, bool)
    other = Transformer(replace(model.config, norm_first=norm_first))
    missing, unexpected = other.load_state_dict(model.state_dict(), strict=False)
    final_norms = {f"{stack}.norm.{p}" for stack in ("encoder", "decoder") for p in ("weight", "bias")}
    if not set(missing) | set(unexpected) <= final_norms:
        raise RuntimeError(f"weights do not carry over: missing {missing}, unexpected {unexpected}")
    return other.to(next(model.parameters()).device).eval()


def stream_departure(table: pd.DataFrame) -> float:
    """Largest departure from standardized rows in a :func:`residual_stream_table`: max |mean| or |std - 1|."""
    return float(max(table["max |row mean|"].max(), (table["min row std"] - 1).abs().max(),
                     (table["max row std"] - 1).abs().max()))
