"""Train short, test long: one small causal model, five ways to give it position, tested past its training length.

Shape legend: B batch, T sequence length, D = d_model, H heads, Dh = D / H, V vocabulary size.

The task ("last value"). A sequence mixes *noise* tokens with occasional *value* tokens (each
position is a value with probability ``value_rate``). At every position t the model must output
the most recent value token at a position <= t (positions before the first value have no target).
The rule looks back a short, random distance (geometric, mean 1 / ``value_rate``) and never
mentions absolute position or the sequence length, so a model that learned the rule could apply it
at any length: what it needs is "which value is the most recent", i.e. *relative* order. It is the
"flip-flop" memory task of Liu et al. (2023) in its simplest form: writes only, every position reads.

A second task ("offset"): uniform random tokens, and at every position t >= k the model must
output the token at t - k (k = ``OFFSET``). The rule is fixed in *relative* position too, but it
asks for one exact distance instead of "the nearest", so a bias that prefers recent tokens (ALiBi)
does not point at the answer.

The model. Token embeddings, an optional added encoding, ``num_layers`` Pre-LN causal blocks and a
linear read-out. The five schemes differ in one place each:

* ``"sinusoidal"``: z = x + PE (Vaswani et al., 2017), defined at every position;
* ``"learned"``: z = x + E[pos], with a table of ``max_len`` rows; rows at or past the training
  length never receive a gradient (Adam leaves them at their random initialization), so at test
  time positions past the training length read untrained vectors;
* ``"rope"``: queries and keys rotated by ``rotary_embedding`` (Su et al., 2021);
* ``"alibi"``: the bias ``alibi_bias`` added to the scores (Press et al., 2022);
* ``"none"``: nothing but the causal mask (NoPE; Haviv et al., 2022; Kazemnejad et al., 2023).

The measurement. :func:`far_end_accuracy` scores only the last ``train_length`` positions of a test
sequence, so at test length 4L every scored position is one the model never saw in training.
:func:`length_generalization_ensemble` repeats the experiment over seeds (one model per scheme and
seed, the seeds of a scheme trained together by ``ensemble.fit_ensemble``) and evaluates each
trained RoPE model once more with its positions rescaled (:func:`rope_scaling`: position
interpolation or "NTK-aware" scaling), with no retraining.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from transformer_course._exhibit import exhibit
from transformer_course._validation import (check_choice, check_instance, check_int, check_positive_float,
                                            check_probability, check_tensor)
from transformer_course.nn.attention import MultiHeadAttention, _attention
from transformer_course.nn.feedforward import FeedForward
from transformer_course.nn.masks import causal_mask
from transformer_course.nn.normalization import LayerNorm
from transformer_course.nn.positional import (LearnedPositionalEmbedding, SinusoidalPositionalEncoding, alibi_bias,
                                              interpolated_positions, ntk_scaled_base, rotary_embedding)
from transformer_course.measure.timing import threads
from .claims import Claim
from .ensemble import fit_ensemble
from .parallel import map_runs, split_evenly
from .training import fit, model_device, seeded

SCHEMES = ("sinusoidal", "learned", "rope", "alibi", "none")
TASKS = ("last_value", "offset")
ROPE_SCALINGS = {"interpolation": "rope + PI", "ntk": "rope + NTK"}  # method -> row label in the results
IGNORE_INDEX = -100
OFFSET = 3  # the offset task asks for the token OFFSET positions back
NUM_NOISE = 8  # noise token ids 0 .. 7
NUM_VALUES = 8  # value token ids 8 .. 15; a blind guess among them is right 1 time in 8


def make_last_value_batch(
    batch_size: int,
    length: int,
    generator: torch.Generator,
    num_noise: int = NUM_NOISE,
    num_values: int = NUM_VALUES,
    value_rate: float = 0.2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw a batch of the last-value task: target[t] = the most recent value token at a position <= t.

    Token ids ``0 .. num_noise - 1`` are noise, ``num_noise .. num_noise + num_values - 1`` values.

    Args:
        batch_size: number of sequences B (>= 1).
        length: sequence length T (>= 1).
        generator: a CPU ``torch.Generator`` that makes the batch reproducible.
        num_noise: number of noise tokens (>= 1).
        num_values: number of value tokens (>= 2).
        value_rate: probability that a position holds a value, in (0, 1).

    Returns:
        tokens: (B, T) int64 token ids.
        targets: (B, T) int64 value ids, ``IGNORE_INDEX`` before the first value of a row.

    Raises:
        TypeError, ValueError: for a missing generator or sizes and rates out of range.
    """
    batch_size = check_int("batch_size", batch_size, minimum=1)
    length = check_int("length", length, minimum=1)
    check_instance("generator", generator, torch.Generator, "torch.Generator")
    num_noise = check_int("num_noise", num_noise, minimum=1)
    num_values = check_int("num_values", num_values, minimum=2)
    value_rate = check_probability("value_rate", value_rate)
    if value_rate == 0.0:
        raise ValueError("value_rate must be in (0, 1), got 0.0")
    noise = torch.randint(0, num_noise, (batch_size, length), generator=generator)  # (B, T)
    values = torch.randint(num_noise, num_noise + num_values, (batch_size, length), generator=generator)  # (B, T)
    is_value = torch.rand(batch_size, length, generator=generator) < value_rate  # (B, T)
    tokens = torch.where(is_value, values, noise)  # (B, T)
    position = torch.arange(length).expand(batch_size, length)  # (B, T)
    latest = torch.where(is_value, position, -1).cummax(dim=1).values  # (B, T): last value position <= t
    targets = tokens.gather(1, latest.clamp(min=0)).masked_fill(latest < 0, IGNORE_INDEX)  # (B, T)
    return tokens, targets


def make_offset_batch(batch_size: int, length: int, generator: torch.Generator, offset: int = OFFSET,
                      vocab_size: int = NUM_NOISE + NUM_VALUES) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw a batch of the offset task: uniform random tokens, target[t] = token[t - offset].

    Args:
        batch_size: number of sequences B (>= 1).
        length: sequence length T (>= 1).
        generator: a CPU ``torch.Generator`` that makes the batch reproducible.
        offset: how far back the answer lies (>= 1).
        vocab_size: number of token ids (>= 2); a blind guess is right 1 time in ``vocab_size``.

    Returns:
        tokens: (B, T) int64 token ids.
        targets: (B, T) int64, ``IGNORE_INDEX`` at the first ``offset`` positions.

    Raises:
        TypeError, ValueError: for a missing generator or sizes out of range.
    """
    batch_size = check_int("batch_size", batch_size, minimum=1)
    length = check_int("length", length, minimum=1)
    check_instance("generator", generator, torch.Generator, "torch.Generator")
    offset = check_int("offset", offset, minimum=1)
    vocab_size = check_int("vocab_size", vocab_size, minimum=2)
    tokens = torch.randint(0, vocab_size, (batch_size, length), generator=generator)  # (B, T)
    targets = torch.full_like(tokens, IGNORE_INDEX)  # (B, T)
    if offset < length:
        targets[:, offset:] = tokens[:, :-offset]
    return tokens, targets


def make_task_batch(task: str, batch_size: int, length: int,
                    generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of ``task`` (one of ``TASKS``): :func:`make_last_value_batch` or :func:`make_offset_batch`."""
    check_choice("task", task, TASKS)
    maker = make_last_value_batch if task == "last_value" else make_offset_batch
    return maker(batch_size, length, generator)


def task_chance(task: str) -> float:
    """Accuracy in percent of a blind guess: 1 / 8 value tokens (last value), 1 / 16 tokens (offset)."""
    check_choice("task", task, TASKS)
    return 100 / (NUM_VALUES if task == "last_value" else NUM_NOISE + NUM_VALUES)


class PositionalSelfAttention(nn.Module):
    """Causal multi-head self-attention whose scores carry position the way ``scheme`` says.

    softmax(q_i . k_j / sqrt(Dh) + bias_ij) over j <= i, with q, k rotated by RoPE for ``"rope"``
    and bias = ALiBi's -m_h (i - j) for ``"alibi"`` (no rotation, no bias otherwise). The four
    projections are those of a :class:`MultiHeadAttention` (``self.attention``).

    Args:
        d_model: width D.
        num_heads: heads H (must divide D; for RoPE, Dh must be even).
        scheme: one of ``SCHEMES``; only ``"rope"`` and ``"alibi"`` change this layer.

    Shape:
        x (B, T, D) -> (B, T, D), plus the weights (B, H, T, T) when ``need_weights=True``.
    """

    def __init__(self, d_model: int, num_heads: int, scheme: str = "none") -> None:
        super().__init__()
        self.scheme = check_choice("scheme", scheme, SCHEMES)
        self.attention = MultiHeadAttention(d_model, num_heads)
        if scheme == "rope" and self.attention.d_head % 2:
            raise ValueError(f"RoPE needs an even head width, got d_model={d_model}, num_heads={num_heads}")
        self.rope_scaling: tuple[str, int] | None = None  # (method, L): set by ``rope_scaling``, None = plain RoPE

    def forward(self, x: torch.Tensor, need_weights: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        mha, t = self.attention, x.shape[1]
        q = mha.split_heads(mha.q_proj(x))  # (B, H, T, Dh)
        k = mha.split_heads(mha.k_proj(x))  # (B, H, T, Dh)
        v = mha.split_heads(mha.v_proj(x))  # (B, H, T, Dh)
        bias = None
        if self.scheme == "rope":
            positions, base = None, 10000.0  # plain RoPE: positions 0 .. T-1
            if self.rope_scaling is not None and t > self.rope_scaling[1]:
                method, train_length = self.rope_scaling
                if method == "interpolation":
                    positions = interpolated_positions(t, train_length, device=x.device)  # (T,) in [0, L)
                else:
                    base = ntk_scaled_base(base, t / train_length, mha.d_head)
            q = rotary_embedding(q, positions, base)  # (B, H, T, Dh), rotated by position
            k = rotary_embedding(k, positions, base)  # (B, H, T, Dh)
        elif self.scheme == "alibi":
            bias = alibi_bias(mha.num_heads, t).to(device=x.device, dtype=x.dtype)  # (H, T, T)
        heads, weights = _attention(q, k, v, causal_mask(t, device=x.device), bias)  # (B, H, T, Dh), (B, H, T, T)
        out = mha.out_proj(mha.merge_heads(heads))  # (B, T, D)
        return (out, weights) if need_weights else out


class CausalBlock(nn.Module):
    """A Pre-LN decoder block without cross-attention: x + SA(norm1(x)), then x + FFN(norm2(x)).

    Shape:
        x (B, T, D) -> (B, T, D).
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, scheme: str = "none") -> None:
        super().__init__()
        self.norm1 = LayerNorm(d_model)
        self.self_attn = PositionalSelfAttention(d_model, num_heads, scheme)
        self.norm2 = LayerNorm(d_model)
        self.feed_forward = FeedForward(d_model, d_ff)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.norm1(x))  # (B, T, D)
        return x + self.feed_forward(self.norm2(x))  # (B, T, D)


class LengthGeneralizationModel(nn.Module):
    """A decoder-only language model whose only difference between runs is its position scheme.

    logits = W_out norm(Block_N(... Block_1(P(Embed(tokens))))), with P = + PE (``"sinusoidal"``),
    + E[pos] (``"learned"``) or the identity (``"rope"``, ``"alibi"``, ``"none"``, which act inside
    attention or not at all).

    Args:
        scheme: one of ``SCHEMES``.
        vocab_size: V.
        d_model: width D.
        num_heads: heads H.
        num_layers: number of blocks.
        max_len: rows of the learned table (and the sinusoidal cache); the longest input allowed
            for ``"learned"``. Train shorter than this to leave rows untrained.

    Shape:
        tokens (B, T) -> logits (B, T, V).

    Raises:
        TypeError, ValueError: for an unknown scheme or sizes out of range.
    """

    def __init__(self, scheme: str, vocab_size: int = NUM_NOISE + NUM_VALUES, d_model: int = 32, num_heads: int = 4,
                 num_layers: int = 2, max_len: int = 64) -> None:
        super().__init__()
        self.scheme = check_choice("scheme", scheme, SCHEMES)
        vocab_size = check_int("vocab_size", vocab_size, minimum=1)
        self.d_model = d_model = check_int("d_model", d_model, minimum=2)
        num_heads = check_int("num_heads", num_heads, minimum=1)
        num_layers = check_int("num_layers", num_layers, minimum=1)
        self.max_len = max_len = check_int("max_len", max_len, minimum=1)
        if d_model % num_heads:
            raise ValueError(f"d_model must be divisible by num_heads, got d_model={d_model}, num_heads={num_heads}")
        self.embed = nn.Embedding(vocab_size, d_model)
        if scheme == "sinusoidal":
            self.positional: nn.Module = SinusoidalPositionalEncoding(d_model, max_len)
        elif scheme == "learned":
            self.positional = LearnedPositionalEmbedding(max_len, d_model)
        else:
            self.positional = nn.Identity()
        self.blocks = nn.ModuleList(CausalBlock(d_model, num_heads, 4 * d_model, scheme) for _ in range(num_layers))
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        check_tensor("tokens", tokens, ndim=2)
        if self.scheme == "learned" and tokens.shape[1] > self.max_len:
            raise ValueError(f"tokens length {tokens.shape[1]} exceeds max_len={self.max_len} of the learned table")
        x = self.positional(self.embed(tokens))  # (B, T, D)
        for block in self.blocks:
            x = block(x)  # (B, T, D)
        return self.head(self.norm(x))  # (B, T, V)


@contextmanager
def rope_scaling(model: nn.Module, method: str, train_length: int) -> Iterator[nn.Module]:
    """Inside the ``with`` block, every RoPE attention of ``model`` rescales inputs longer than ``train_length``.

    ``method="interpolation"``: positions m -> m L / T (Chen et al., 2023); ``"ntk"``: the RoPE base
    raised to 10000 (T / L)^(Dh / (Dh - 2)) (:func:`~transformer_course.nn.positional.ntk_scaled_base`).
    Inputs of length <= L are unchanged. No weight changes: this is the zero-shot use of both fixes.

    Args:
        model: a module holding :class:`PositionalSelfAttention` layers with ``scheme="rope"``.
        method: ``"interpolation"`` or ``"ntk"``.
        train_length: L (>= 1).

    Yields:
        ``model``.

    Raises:
        TypeError, ValueError: for an unknown method, a bad length, or a model without RoPE attention.
    """
    check_instance("model", model, nn.Module, "torch.nn.Module")
    method = check_choice("method", method, tuple(ROPE_SCALINGS))
    train_length = check_int("train_length", train_length, minimum=1)
    layers = [m for m in model.modules() if isinstance(m, PositionalSelfAttention) and m.scheme == "rope"]
    if not layers:
        raise ValueError("model must contain RoPE attention (PositionalSelfAttention with scheme='rope')")
    previous = [layer.rope_scaling for layer in layers]
    for layer in layers:
        layer.rope_scaling = (method, train_length)
    try:
        yield model
    finally:
        for layer, old in zip(layers, previous):
            layer.rope_scaling = old


def _last_value_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    tokens, targets = batch
    logits = model(tokens)  # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX)


def _check_training(scheme: str, task: str, train_length: int, batch_size: int, max_len: int) -> tuple[int, int, int]:
    check_choice("scheme", scheme, SCHEMES)
    check_choice("task", task, TASKS)
    train_length = check_int("train_length", train_length, minimum=2)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    max_len = check_int("max_len", max_len, minimum=1)
    if max_len < train_length:
        raise ValueError(f"max_len must be >= train_length={train_length}, got {max_len}")
    return train_length, batch_size, max_len


def train_last_value(scheme: str, train_length: int = 16, steps: int = 200, seed: int = 0, batch_size: int = 32,
                     lr: float = 3e-3, max_len: int = 64, task: str = "last_value",
                     ) -> tuple[LengthGeneralizationModel, list[float]]:
    """Train a :class:`LengthGeneralizationModel` with ``scheme`` on ``task`` sequences of length ``train_length``.

    Causal attention means every prefix of a training sequence is itself a training example, so
    the model is trained at every length <= ``train_length`` and at none longer.

    Args:
        scheme: one of ``SCHEMES``.
        train_length: L, the length of the training sequences.
        steps: Adam steps (one fresh batch each, via ``fit``).
        seed: seeds the initial weights and the batches.
        batch_size: sequences per batch.
        lr: learning rate (constant).
        max_len: the learned table's rows (the longest test length for ``"learned"``), >= ``train_length``.
        task: one of ``TASKS`` (the last-value task by default).

    Returns:
        The trained model (in eval mode) and the loss of every step.

    Raises:
        TypeError, ValueError: for an unknown scheme or sizes out of range.
    """
    train_length, batch_size, max_len = _check_training(scheme, task, train_length, batch_size, max_len)
    with seeded(check_int("seed", seed, minimum=0)):
        model = LengthGeneralizationModel(scheme, max_len=max_len)
    losses = fit(model, partial(make_task_batch, task, batch_size, train_length), _last_value_loss, steps,
                 lr=check_positive_float("lr", lr), seed=seed)
    return model, losses


def train_last_value_ensemble(scheme: str, seeds: Iterable[int], train_length: int = 16, steps: int = 200,
                              batch_size: int = 32, lr: float = 3e-3, max_len: int = 64, task: str = "last_value",
                              ) -> tuple[list[LengthGeneralizationModel], list[list[float]]]:
    """:func:`train_last_value` for every seed of ``seeds``, trained together (``ensemble.fit_ensemble``).

    Member k is ``train_last_value(scheme, ..., seed=seeds[k])`` to rounding: the same initial
    weights and batches, its sums taken in a batched order. It does not depend on the other seeds.

    Returns:
        The trained models (eval mode) and their losses, in the order of ``seeds``.

    Raises:
        TypeError, ValueError: as :func:`train_last_value`, or for empty or repeated seeds.
    """
    train_length, batch_size, max_len = _check_training(scheme, task, train_length, batch_size, max_len)
    seeds = _check_seeds(seeds)
    models = []
    for seed in seeds:
        with seeded(seed):
            models.append(LengthGeneralizationModel(scheme, max_len=max_len))
    losses = fit_ensemble(models, partial(make_task_batch, task, batch_size, train_length), _last_value_loss, steps,
                          seeds, lr=check_positive_float("lr", lr))
    return models, losses


@torch.no_grad()
def far_end_accuracy(model: nn.Module, length: int, scored: int, num_sequences: int = 256,
                     seed: int = 1000, task: str = "last_value") -> float:
    """Accuracy of ``model`` on the last ``scored`` positions of fresh ``task`` sequences of ``length``.

    Scoring only the far end (positions ``length - scored`` .. ``length - 1``) keeps the positions a
    model trained at length ``scored`` has seen out of the average: at ``length`` = 4 * ``scored``
    every scored position is new to it.

    Args:
        model: maps tokens (B, T) to logits (B, T, V).
        length: test length T (>= ``scored``).
        scored: how many final positions to score (>= 1).
        num_sequences: test sequences.
        seed: seeds the test data (the same sequences for every model).
        task: one of ``TASKS``.

    Returns:
        The fraction of scored positions (with a target) whose argmax is the target, in [0, 1].

    Raises:
        TypeError, ValueError: for a non-module or sizes out of range.
    """
    check_instance("model", model, nn.Module, "torch.nn.Module")
    length = check_int("length", length, minimum=1)
    scored = check_int("scored", scored, minimum=1)
    if scored > length:
        raise ValueError(f"scored must be <= length={length}, got {scored}")
    num_sequences = check_int("num_sequences", num_sequences, minimum=1)
    generator = torch.Generator().manual_seed(check_int("seed", seed, minimum=0))
    tokens, targets = make_task_batch(task, num_sequences, length, generator)  # (B, T) each
    device = model_device(model)
    model.eval()
    with threads(1 if device.type == "cpu" else None):  # one thread, as in training: the same sums everywhere
        predictions = model(tokens.to(device)).argmax(dim=-1).cpu()  # (B, T)
    keep = targets[:, length - scored:] != IGNORE_INDEX  # (B, scored)
    correct = predictions[:, length - scored:] == targets[:, length - scored:]  # (B, scored)
    return float(correct[keep].float().mean())


@exhibit
def length_generalization(schemes: Sequence[str] = SCHEMES, train_length: int = 16,
                          test_lengths: Sequence[int] = (16, 24, 32, 48, 64), steps: int = 200,
                          seed: int = 0) -> pd.DataFrame:
    """Train one model per scheme at ``train_length`` and test each at every length of ``test_lengths``.

    Args:
        schemes: the position schemes to compare (each one of ``SCHEMES``).
        train_length: L.
        test_lengths: test lengths, each >= L; the learned table gets ``max(test_lengths)`` rows.
        steps: training steps per model.
        seed: seeds weights and training batches (test data use a fixed seed of their own).

    Returns:
        DataFrame, one row per scheme, one column per test length: far-end accuracy in percent.
        ``attrs`` holds ``train_length`` and ``chance`` (percent: one guess among the value tokens).

    Raises:
        TypeError, ValueError: for an unknown scheme, an empty list, or a test length < L.

    Press et al., 2022, "Train Short, Test Long" (the protocol); Liu et al., 2023 (the flip-flop task).
    """
    schemes = list(schemes)
    if not schemes:
        raise ValueError("schemes must name at least one scheme, got an empty sequence")
    for scheme in schemes:
        check_choice("schemes", scheme, SCHEMES)
    train_length = check_int("train_length", train_length, minimum=2)
    test_lengths = [check_int("test_lengths", t, minimum=1) for t in test_lengths]
    if not test_lengths or min(test_lengths) < train_length:
        raise ValueError(f"test_lengths must be non-empty and each >= train_length={train_length}, got {test_lengths}")
    rows = {}
    for scheme in schemes:
        model, _ = train_last_value(scheme, train_length, steps, seed, max_len=max(test_lengths))
        rows[scheme] = [100 * far_end_accuracy(model, t, train_length) for t in test_lengths]
    table = pd.DataFrame.from_dict(rows, orient="index", columns=test_lengths)
    table.index.name = "scheme"
    table.columns.name = "test length"
    table.attrs.update(train_length=train_length, chance=100 / NUM_VALUES)
    return table


EXPERIMENT = "length generalization"  # the ensemble's name for seeds.ensemble_seeds (both tasks, every scheme: paired)
CHAPTER_SETTINGS = {  # DL0030's ensemble, shared by the chapter and benchmarks/calibration/dl0030_positional_encoding.py
    "train_length": 16,
    "test_lengths": (16, 32, 64),
    "steps": 100,
    "num_seeds": 8,
    "tasks": {"last_value": SCHEMES, "offset": ("rope", "alibi")},
    "rope_scalings": ("interpolation", "ntk"),
    "eval_sequences": 128,  # test sequences per model and length (far_end_accuracy's num_sequences)
}


def _check_seeds(seeds: Iterable[int]) -> list[int]:
    seeds = [check_int("seeds", s, minimum=0) for s in seeds]
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be a non-empty collection of distinct ints >= 0, got {seeds}")
    return seeds


def evaluate_length_model(model: nn.Module, task: str, scheme: str, train_length: int, test_lengths: Sequence[int],
                          rope_scalings: Sequence[str] = (), num_sequences: int = 256) -> dict[str, list[float]]:
    """Far-end accuracy (percent) of one trained model at every test length, plus its rescaled-RoPE variants.

    Returns:
        ``{label: [accuracy at each test length]}``: ``scheme`` itself and, for ``"rope"``, one label
        per method of ``rope_scalings`` (``ROPE_SCALINGS[method]``), evaluated without retraining, each on
        the same ``num_sequences`` test sequences per length (see :func:`far_end_accuracy`).
    """
    rows = {scheme: [100 * far_end_accuracy(model, t, train_length, num_sequences, task=task) for t in test_lengths]}
    if scheme == "rope":
        for method in rope_scalings:
            with rope_scaling(model, method, train_length):
                rows[ROPE_SCALINGS[method]] = [100 * far_end_accuracy(model, t, train_length, num_sequences, task=task)
                                               for t in test_lengths]
    return rows


@exhibit
def length_generalization_ensemble(task: str = "last_value", schemes: Sequence[str] = SCHEMES, train_length: int = 16,
                                   test_lengths: Sequence[int] = (16, 32, 48, 64), steps: int = 100,
                                   seeds: Iterable[int] = range(8),
                                   rope_scalings: Sequence[str] = ("interpolation",),
                                   workers: int = 1, eval_sequences: int = 256) -> pd.DataFrame:
    """Train one model per scheme and seed at ``train_length``; test each at every length, zero-shot.

    Each trained RoPE model is also tested with every method of ``rope_scalings`` (see
    :func:`rope_scaling`), without retraining: its rows are labelled ``ROPE_SCALINGS[method]``.

    Args:
        task: one of ``TASKS``.
        schemes: the position schemes (each one of ``SCHEMES``).
        train_length: L.
        test_lengths: test lengths, each >= L; the learned table gets ``max(test_lengths)`` rows.
        steps: training steps per model.
        seeds: the ensemble: one model per scheme and seed (weights and training batches); the test
            sequences are the same for every model.
        rope_scalings: methods among ``ROPE_SCALINGS`` to evaluate the RoPE models with.
        workers: processes that train side by side (``parallel.map_runs``; where they are
            spawned, a script that passes more than 1 needs the ``if __name__ == "__main__":``
            guard). The seeds of each scheme train together as one stacked ensemble
            (:func:`train_last_value_ensemble`), split into ``workers`` parts; a member's numbers
            depend neither on the other members nor on the worker, so the results do not depend
            on ``workers``; only the wall time does (the chapter passes 2, the cores the course
            budgets for).
        eval_sequences: test sequences per model and test length (the same for every model).

    Returns:
        Long DataFrame with columns task, scheme, seed, test_length, accuracy (percent), one row per
        (scheme label, seed, test length). ``attrs`` holds ``train_length``, ``chance`` and ``task``.

    Raises:
        TypeError, ValueError: for an unknown task, scheme or scaling, empty or repeated seeds, or a
            test length < L.
    """
    return length_generalization_ensembles({task: schemes}, train_length, test_lengths, steps, seeds, rope_scalings,
                                           workers, eval_sequences)[task]


def length_generalization_ensembles(tasks: Mapping[str, Sequence[str]], train_length: int = 16,
                                    test_lengths: Sequence[int] = (16, 32, 48, 64), steps: int = 100,
                                    seeds: Iterable[int] = range(8), rope_scalings: Sequence[str] = ("interpolation",),
                                    workers: int = 1, eval_sequences: int = 256) -> dict[str, pd.DataFrame]:
    """:func:`length_generalization_ensemble` for several tasks at once: ``{task: its table}``.

    The tables are exactly those of one call per task (``tasks`` maps each task to its schemes);
    the ensembles of all tasks share one set of worker processes (started once, not once per
    task), and the costliest (RoPE, tested once more per rescaling) are started first, so that no
    worker is left alone with a long one at the end.

    Raises:
        TypeError, ValueError: as :func:`length_generalization_ensemble`, or for an empty ``tasks``.
    """
    check_instance("tasks", tasks, Mapping, "a mapping task -> schemes")
    if not tasks:
        raise ValueError("tasks must name at least one task, got an empty mapping")
    for method in rope_scalings:
        check_choice("rope_scalings", method, tuple(ROPE_SCALINGS))
    train_length = check_int("train_length", train_length, minimum=2)
    test_lengths = [check_int("test_lengths", t, minimum=1) for t in test_lengths]
    if not test_lengths or min(test_lengths) < train_length:
        raise ValueError(f"test_lengths must be non-empty and each >= train_length={train_length}, got {test_lengths}")
    seeds = _check_seeds(seeds)
    eval_sequences = check_int("eval_sequences", eval_sequences, minimum=1)
    workers = check_int("workers", workers, minimum=1)
    groups = []  # (task, scheme, seeds): one ensemble trained together, split into ``workers`` parts
    for task, schemes in tasks.items():
        check_choice("task", task, TASKS)
        schemes = list(schemes)
        if not schemes:
            raise ValueError("schemes must name at least one scheme, got an empty sequence")
        for scheme in schemes:
            check_choice("schemes", scheme, SCHEMES)
        groups += [(task, scheme, tuple(part), train_length, tuple(test_lengths), steps, tuple(rope_scalings),
                    eval_sequences) for scheme in schemes for part in split_evenly(seeds, workers)]
    order = sorted(range(len(groups)), key=lambda i: (groups[i][1] != "rope", i))  # RoPE groups first
    records_in_order = map_runs(_ensemble_group, [groups[i] for i in order], workers)
    group_records = [None] * len(groups)
    for i, records in zip(order, records_in_order):
        group_records[i] = records
    results = {}
    for task in tasks:
        rows = [record for group, records in zip(groups, group_records) if group[0] == task for record in records]
        results[task] = pd.DataFrame.from_records(rows)  # scheme, seed, label, length order: parts are consecutive
        results[task].attrs.update(train_length=train_length, chance=task_chance(task), task=task)
    return results


def _ensemble_group(task: str, scheme: str, seeds: tuple[int, ...], train_length: int, test_lengths: tuple[int, ...],
                    steps: int, rope_scalings: tuple[str, ...], eval_sequences: int) -> list[dict]:
    """The rows of :func:`length_generalization_ensemble` for one scheme and ``seeds``, trained as one stack."""
    models, _ = train_last_value_ensemble(scheme, seeds, train_length, steps, max_len=max(test_lengths), task=task)
    records = []
    for seed, model in zip(seeds, models):
        rows = evaluate_length_model(model, task, scheme, train_length, test_lengths, rope_scalings, eval_sequences)
        records += [{"task": task, "scheme": label, "seed": seed, "test_length": t, "accuracy": a}
                    for label, accuracies in rows.items() for t, a in zip(test_lengths, accuracies)]
    return records


@exhibit
def ensemble_medians(results: pd.DataFrame) -> pd.DataFrame:
    """Median accuracy over seeds: one row per scheme label (in order of appearance), one column per test length.

    Raises:
        TypeError, ValueError: if ``results`` lacks the columns of :func:`length_generalization_ensemble`.
    """
    check_instance("results", results, pd.DataFrame, "pandas DataFrame")
    missing = {"scheme", "seed", "test_length", "accuracy"} - set(results.columns)
    if results.empty or missing:
        raise ValueError(f"results must be a non-empty table with columns scheme, seed, test_length, accuracy; "
                         f"missing {sorted(missing)}")
    order = list(dict.fromkeys(results["scheme"]))
    table = results.pivot_table(index="scheme", columns="test_length", values="accuracy", aggfunc="median")
    table = table.loc[order]
    table.columns.name = "test length"
    table.attrs.update(results.attrs)
    return table


def median_accuracy(results: pd.DataFrame, scheme: str, length: int) -> float:
    """Median over seeds of the accuracy (percent) of ``scheme`` at test length ``length``.

    Raises:
        ValueError: if ``results`` has no row for that scheme and length.
    """
    rows = results[(results["scheme"] == scheme) & (results["test_length"] == length)]
    if rows.empty:
        raise ValueError(f"results has no row for scheme={scheme!r} at test length {length}")
    return float(rows["accuracy"].median())


def chapter_claims(results: dict[str, pd.DataFrame]) -> list[Claim]:
    """DL0030's conclusions, as statements about the medians over seeds of the two ensembles.

    Args:
        results: ``{"last_value": ..., "offset": ...}``, tables of :func:`length_generalization_ensemble`
            run with ``CHAPTER_SETTINGS`` (train length L = 16).

    Returns:
        The claims the chapter asserts with ``check_claims``; ``benchmarks/calibration/
        dl0030_positional_encoding.py`` computes the same ones for 30 base seeds.
    """
    L = CHAPTER_SETTINGS["train_length"]
    lv, off = results["last_value"], results["offset"]

    def med(table: pd.DataFrame, scheme: str, multiple: int) -> float:
        return median_accuracy(table, scheme, multiple * L)

    absolute_4L = max(med(lv, "sinusoidal", 4), med(lv, "learned", 4))
    return [
        Claim("last value: lowest median accuracy at L over the five schemes (%)",
              min(med(lv, s, 1) for s in SCHEMES), ">=", 85),
        Claim("last value: higher median accuracy at 4L of sinusoidal and learned (%)", absolute_4L, "<", 55),
        Claim("last value: median accuracy at 2L, RoPE (%)", med(lv, "rope", 2), ">=", 85),
        Claim("last value: median accuracy at 4L, RoPE (%)", med(lv, "rope", 4), "<", 60),
        Claim("last value: median accuracy at 4L, RoPE + PI, zero-shot (%)", med(lv, "rope + PI", 4), ">=", 75),
        Claim("last value: median accuracy at 4L, RoPE + NTK, zero-shot (%)", med(lv, "rope + NTK", 4), ">=", 80),
        Claim("last value: median accuracy at 4L, ALiBi (%)", med(lv, "alibi", 4), ">=", 80),
        Claim("last value: NoPE minus the better absolute scheme, medians at 4L (points)",
              med(lv, "none", 4) - absolute_4L, ">", 0),
        Claim("last value: ALiBi minus NoPE, medians at 4L (points)", med(lv, "alibi", 4) - med(lv, "none", 4), ">", 20),
        Claim("last value: RoPE minus NoPE, medians at 2L (points)", med(lv, "rope", 2) - med(lv, "none", 2), ">", 0),
        Claim("offset 3: median accuracy at L, RoPE (%)", med(off, "rope", 1), ">=", 90),
        Claim("offset 3: median accuracy at L, ALiBi (%)", med(off, "alibi", 1), "<", 50),
        Claim("offset 3: median accuracy at 2L, RoPE (%)", med(off, "rope", 2), ">=", 85),
        Claim("offset 3: median accuracy at 4L, RoPE (%)", med(off, "rope", 4), "<", 30),
        Claim("offset 3: higher median accuracy at 2L and 4L, RoPE + PI, zero-shot (%)",
              max(med(off, "rope + PI", m) for m in (2, 4)), "<", 30),
        Claim("offset 3: median accuracy at 4L, RoPE + NTK, zero-shot (%)", med(off, "rope + NTK", 4), ">=", 80),
    ]


@exhibit
def accuracy_bands(table: pd.DataFrame, thresholds: Sequence[float] = (50.0, 80.0)) -> pd.DataFrame:
    """Each accuracy (percent) replaced by the band it falls in, e.g. "< 50", "50-80", ">= 80".

    Trained accuracies differ by a point or two between CPU kernel sets (their float32 sums round
    differently, and training amplifies it); a band with a few points of margin is the precision
    that holds on every CPU.

    Args:
        table: accuracies in percent, e.g. from :func:`length_generalization`.
        thresholds: increasing band edges.

    Returns:
        DataFrame of strings with the index and columns of ``table``.

    Raises:
        TypeError, ValueError: if ``table`` is not a DataFrame or ``thresholds`` is empty or not increasing.
    """
    check_instance("table", table, pd.DataFrame, "pandas DataFrame")
    edges = [float(t) for t in thresholds]
    if not edges or any(b <= a for a, b in zip(edges, edges[1:])):
        raise ValueError(f"thresholds must be a non-empty increasing sequence, got {list(thresholds)}")

    def band(value: float) -> str:
        if value < edges[0]:
            return f"< {edges[0]:g}"
        for low, high in zip(edges, edges[1:]):
            if value < high:
                return f"{low:g}-{high:g}"
        return f">= {edges[-1]:g}"

    return table.apply(lambda column: column.map(band))
