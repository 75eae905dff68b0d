"""Reach in training: a stack of sliding-window layers cannot copy a token beyond its receptive field.

Shape legend: B batch, T sequence length, D = d_model, K number of symbols.

The task ("copy from D back"). A sequence of ``seq_len`` random symbols ends with a query token;
the model must output, at that last position, the symbol that sits ``distance`` positions from the
end (counting the query as 1, so the answer is token ``T - distance``). Every other symbol is a
distractor drawn independently of the answer.

The model: token + learned position embeddings, ``num_layers`` Pre-LN encoder layers whose
self-attention uses one fixed mask, and a linear read-out of the last position. The mask is a
causal sliding window of ``window`` keys (each position reads itself and the ``window - 1`` before
it), optionally with the query position made global (its row reads every position, as Longformer's
question tokens do).

Why it is provable. Output i of a stack depends on input j only if a chain of allowed pairs links
them (``measure.receptive_field.reachability``). For L causal window layers the last position reads
the last L (w - 1) + 1 positions. If that receptive field is smaller than ``distance``, the logits
at the last position are a function of inputs that are independent of the answer, so no weights
can beat chance (1 / K) in expectation; with one more layer, or a global query, the answer is in
reach and training can find it.

Beltagy et al., 2020, "Longformer: The Long-Document Transformer" (section 3.1, global attention).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from transformer_course._exhibit import exhibit
from transformer_course._validation import check_bool, check_instance, check_int, check_positive_float, check_tensor
from transformer_course.measure.receptive_field import global_token_mask, reachability, receptive_field
from transformer_course.nn.layers import EncoderLayer
from transformer_course.nn.masks import sliding_window_mask
from transformer_course.nn.normalization import LayerNorm
from .training import fit, model_device, seeded


def _check_task(seq_len: object, distance: object, num_symbols: object) -> tuple[int, int, int]:
    seq_len = check_int("seq_len", seq_len, minimum=2)
    distance = check_int("distance", distance, minimum=2)
    num_symbols = check_int("num_symbols", num_symbols, minimum=2)
    if distance > seq_len:
        raise ValueError(f"distance must be <= seq_len={seq_len} (the answer must lie in the sequence), "
                         f"got {distance}")
    return seq_len, distance, num_symbols


def make_reach_batch(batch_size: int, generator: torch.Generator, seq_len: int = 12, distance: int = 8,
                     num_symbols: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Random symbols ending in a query token; the answer is the symbol ``distance`` positions from the end.

    Args:
        batch_size: B.
        generator: a CPU ``torch.Generator`` (the data are reproducible from its seed).
        seq_len: T, including the final query token.
        distance: D in [2, T]: the answer is ``tokens[:, T - D]`` (the query itself is position 1 from the end).
        num_symbols: K; symbols are ids 0 .. K - 1 and the query token is id K.

    Returns:
        tokens (B, T) long, answers (B,) long in [0, K).

    Raises:
        TypeError, ValueError: on a non-generator or invalid sizes (``distance`` > ``seq_len``).
    """
    batch_size = check_int("batch_size", batch_size, minimum=1)
    check_instance("generator", generator, torch.Generator, "torch.Generator")
    seq_len, distance, num_symbols = _check_task(seq_len, distance, num_symbols)
    tokens = torch.randint(0, num_symbols, (batch_size, seq_len), generator=generator)  # (B, T)
    tokens[:, -1] = num_symbols  # the query token
    return tokens, tokens[:, seq_len - distance].clone()  # (B, T), (B,)


def reach_mask(seq_len: int, window: int, global_query: bool = False) -> torch.Tensor:
    """The causal sliding window of ``window`` keys, optionally with the last (query) position global.

    Args:
        seq_len: T.
        window: w >= 1 keys per query (itself and the w - 1 before it).
        global_query: make the last position global (its row reads every earlier position).

    Returns:
        (T, T) bool mask, True = may attend.
    """
    seq_len = check_int("seq_len", seq_len, minimum=2)
    check_bool("global_query", global_query)
    if global_query:
        return global_token_mask(seq_len, window, [seq_len - 1], causal=True)  # (T, T)
    return sliding_window_mask(seq_len, window, causal=True)  # (T, T)


def stack_reach(seq_len: int, window: int, num_layers: int, global_query: bool = False) -> int:
    """Receptive field of the last position after ``num_layers`` layers, counted through the masks.

    For the plain causal window this is min(L (w - 1) + 1, T); with a global query it is T.
    """
    num_layers = check_int("num_layers", num_layers, minimum=1)
    mask = reach_mask(seq_len, window, global_query)
    return receptive_field(reachability([mask] * num_layers), query=mask.shape[0] - 1)


class WindowedReader(nn.Module):
    """Embeddings -> ``num_layers`` Pre-LN encoder layers under one fixed mask -> read-out of the last position.

    Args:
        num_symbols: K; the vocabulary is the K symbols plus the query token.
        seq_len: T (fixed; learned position embeddings).
        num_layers: L.
        window: w, keys per query of the causal sliding window.
        global_query: make the last position global.
        d_model, num_heads, d_ff: the layers' sizes.

    Shape:
        tokens (B, T) -> logits (B, K) for the answer.
    """

    def __init__(self, num_symbols: int = 8, seq_len: int = 12, num_layers: int = 1, window: int = 5,
                 global_query: bool = False, d_model: int = 32, num_heads: int = 4, d_ff: int = 64) -> None:
        super().__init__()
        self.num_symbols = check_int("num_symbols", num_symbols, minimum=2)
        self.seq_len = check_int("seq_len", seq_len, minimum=2)
        self.window = check_int("window", window, minimum=1)
        self.global_query = check_bool("global_query", global_query)
        num_layers = check_int("num_layers", num_layers, minimum=1)
        self.token_embedding = nn.Embedding(num_symbols + 1, d_model)
        self.position_embedding = nn.Embedding(seq_len, d_model)
        self.layers = nn.ModuleList(EncoderLayer(d_model, num_heads, d_ff, norm_first=True) for _ in range(num_layers))
        self.norm = LayerNorm(d_model)
        self.readout = nn.Linear(d_model, num_symbols)
        self.register_buffer("mask", reach_mask(seq_len, window, global_query), persistent=False)  # (T, T)

    @property
    def reach(self) -> int:
        """Receptive field of the last position, in positions (from the masks)."""
        return stack_reach(self.seq_len, self.window, len(self.layers), self.global_query)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        check_tensor("tokens", tokens, ndim=2)
        if tokens.is_floating_point() or tokens.shape[1] != self.seq_len:
            raise ValueError(f"tokens must be (B, {self.seq_len}) integer ids, "
                             f"got {tokens.dtype} {tuple(tokens.shape)}")
        positions = torch.arange(self.seq_len, device=tokens.device)  # (T,)
        x = self.token_embedding(tokens) + self.position_embedding(positions)  # (B, T, D)
        for layer in self.layers:
            x = layer(x, mask=self.mask)  # (B, T, D)
        return self.readout(self.norm(x[:, -1]))  # (B, K)


def reach_loss(model: WindowedReader, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Cross-entropy of the answer read at the last position."""
    tokens, answers = batch
    return F.cross_entropy(model(tokens), answers)


def train_reach_model(num_layers: int, window: int = 5, global_query: bool = False, distance: int = 8,
                      seq_len: int = 12, num_symbols: int = 8, steps: int = 200, batch_size: int = 64,
                      lr: float = 3e-3, seed: int = 0) -> tuple[WindowedReader, list[float]]:
    """Build a :class:`WindowedReader` from ``seed`` and train it with ``fit`` on the copy-from-D task.

    Returns:
        The trained model (eval mode) and the loss of every step.
    """
    _check_task(seq_len, distance, num_symbols)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    check_positive_float("lr", lr)
    with seeded(check_int("seed", seed, minimum=0)):
        model = WindowedReader(num_symbols, seq_len, num_layers, window, global_query)

    def make_batch(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        return make_reach_batch(batch_size, generator, seq_len, distance, num_symbols)

    losses = fit(model, make_batch, reach_loss, steps, lr=lr, seed=seed)
    return model, losses


@torch.no_grad()
def reach_accuracy(model: WindowedReader, distance: int, num_examples: int = 512, seed: int = 1234) -> float:
    """Fraction of ``num_examples`` fresh sequences (generator seeded ``seed``) whose answer is the argmax."""
    check_instance("model", model, WindowedReader, "WindowedReader")
    num_examples = check_int("num_examples", num_examples, minimum=1)
    tokens, answers = make_reach_batch(num_examples, torch.Generator().manual_seed(check_int("seed", seed, minimum=0)),
                                       model.seq_len, distance, model.num_symbols)
    predictions = model(tokens.to(model_device(model))).argmax(dim=-1).cpu()  # (B,)
    return float((predictions == answers).float().mean())


REACH_CONFIGS = (("short window stack", 1, False), ("deeper window stack", 2, False),
                 ("window + global query", 1, True))  # (name, num_layers, global_query)


@exhibit
def reach_experiment(configs: Sequence[tuple[str, int, bool]] = REACH_CONFIGS, window: int = 5, distance: int = 8,
                     seq_len: int = 12, num_symbols: int = 8, steps: int = 200, num_examples: int = 512,
                     seed: int = 0) -> pd.DataFrame:
    """Train one model per configuration and report its reach against ``distance`` and its accuracy.

    Args:
        configs: (name, num_layers, global_query) per model.
        window, distance, seq_len, num_symbols: the window and the task.
        steps: training steps per model (same seed, same data for every model).
        num_examples: held-out sequences for the accuracy.
        seed: weights and training data.

    Returns:
        DataFrame indexed by "model" with columns "layers L", "global query", "reach (positions)",
        "distance D", "in reach" (reach >= D), "accuracy (%)" and "chance (%)" (100 / K).

    Raises:
        ValueError: on an empty ``configs`` or an invalid task.
    """
    if isinstance(configs, (str, bytes)) or not isinstance(configs, Sequence) or not configs:
        raise ValueError(f"configs must be a non-empty sequence of (name, num_layers, global_query), got {configs!r}")
    _check_task(seq_len, distance, num_symbols)
    rows = []
    for name, num_layers, global_query in configs:
        model, _ = train_reach_model(num_layers, window, global_query, distance, seq_len, num_symbols, steps, seed=seed)
        reach = model.reach
        rows.append({"model": name, "layers L": num_layers, "global query": global_query,
                     "reach (positions)": reach, "distance D": distance, "in reach": reach >= distance,
                     "accuracy (%)": 100 * reach_accuracy(model, distance, num_examples),
                     "chance (%)": 100 / num_symbols})
    return pd.DataFrame(rows).set_index("model")
