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

What it costs to use the reach (DL0028's grid, :func:`reach_grid`): within reach, the answer is
carried to the query by a relay of ceil((D - 1) / (w - 1)) hops, one layer each; the grid trains
every (depth L, distance D) cell and a global-query arm over an ensemble of seeds and records the
learning curves, so "steps to threshold" can be compared across relay lengths (:func:`reach_claims`).
The ensemble trains as one :class:`ReaderEnsemble` per depth, which computes the same numbers as
the separate :class:`WindowedReader` s at a fraction of the per-step overhead.

Beltagy et al., 2020, "Longformer: The Long-Document Transformer" (section 3.1, global attention).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from transformer_course._exhibit import exhibit
from transformer_course._validation import check_bool, check_instance, check_int, check_positive_float, check_tensor
from transformer_course.measure.receptive_field import global_token_mask, reachability, receptive_field
from transformer_course.nn.layers import EncoderLayer
from transformer_course.nn.masks import dilated_sliding_window_mask, sliding_window_mask
from transformer_course.nn.normalization import LayerNorm
from .claims import Claim
from .parallel import map_runs, split_evenly
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


def reach_mask(seq_len: int, window: int, global_query: bool = False, dilation: int = 1) -> torch.Tensor:
    """The causal sliding window of ``window`` keys, optionally dilated or with the last (query) position global.

    Args:
        seq_len: T.
        window: w >= 1 keys per query (itself and the w - 1 before it, or with ``dilation`` d the
            keys d, 2d, ..., (w - 1) d before it: DL0029's dilated window).
        global_query: make the last position global (its row reads every earlier position).
        dilation: d >= 1, the gap between the keys (1: the plain window); not with ``global_query``.

    Returns:
        (T, T) bool mask, True = may attend.
    """
    seq_len = check_int("seq_len", seq_len, minimum=2)
    check_bool("global_query", global_query)
    dilation = check_int("dilation", dilation, minimum=1)
    if global_query and dilation > 1:
        raise ValueError(f"dilation must be 1 with global_query=True, got {dilation}")
    if global_query:
        return global_token_mask(seq_len, window, [seq_len - 1], causal=True)  # (T, T)
    if dilation > 1:
        return dilated_sliding_window_mask(seq_len, window, dilation, causal=True)  # (T, T)
    return sliding_window_mask(seq_len, window, causal=True)  # (T, T)


def stack_reach(seq_len: int, window: int, num_layers: int, global_query: bool = False, dilation: int = 1) -> int:
    """Receptive field of the last position after ``num_layers`` layers, counted through the masks.

    It counts the positions the last one depends on: for the plain causal window min(L (w - 1) + 1, T),
    with a global query T; with a dilation the gaps are not counted (one layer of w keys reads w
    positions, spread over (w - 1) d + 1).
    """
    num_layers = check_int("num_layers", num_layers, minimum=1)
    mask = reach_mask(seq_len, window, global_query, dilation)
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
        dilation: d, the gap between the window's keys (1: the plain window; see :func:`reach_mask`).

    Shape:
        tokens (B, T) -> logits (B, K) for the answer.
    """

    def __init__(self, num_symbols: int = 8, seq_len: int = 12, num_layers: int = 1, window: int = 5,
                 global_query: bool = False, d_model: int = 32, num_heads: int = 4, d_ff: int = 64,
                 dilation: int = 1) -> None:
        super().__init__()
        self.num_symbols = check_int("num_symbols", num_symbols, minimum=2)
        self.seq_len = check_int("seq_len", seq_len, minimum=2)
        self.window = check_int("window", window, minimum=1)
        self.global_query = check_bool("global_query", global_query)
        self.dilation = check_int("dilation", dilation, minimum=1)
        num_layers = check_int("num_layers", num_layers, minimum=1)
        self.token_embedding = nn.Embedding(num_symbols + 1, d_model)
        self.position_embedding = nn.Embedding(seq_len, d_model)
        self.layers = nn.ModuleList(EncoderLayer(d_model, num_heads, d_ff, norm_first=True) for _ in range(num_layers))
        self.norm = LayerNorm(d_model)
        self.readout = nn.Linear(d_model, num_symbols)
        self.register_buffer("mask", reach_mask(seq_len, window, global_query, dilation), persistent=False)  # (T, T)

    @property
    def reach(self) -> int:
        """Receptive field of the last position, in positions (from the masks)."""
        return stack_reach(self.seq_len, self.window, len(self.layers), self.global_query, self.dilation)

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


# ---------------------------------------------------------------------------------------------
# Ensembles: many readers trained at once (DL0028's grid of distance D x layers L over seeds)
# ---------------------------------------------------------------------------------------------

class ReaderEnsemble(nn.Module):
    """E :class:`WindowedReader` s of one shape, their parameters stacked, computed with batched matmuls.

    The course's toy models are so small that a training step costs mostly fixed per-operation
    overhead, not arithmetic; stacking E models along a leading dimension runs them all with the
    operations of one. Member e computes exactly what ``readers[e]`` computes (Pre-LN encoder
    layers, ReLU FFN, the same mask), which the tests check in float64. Members do not interact:
    the loss is a sum of per-member losses and Adam is elementwise, so each member's parameters see
    only its own gradient (train without a global gradient-norm clip, which would couple them).

    Args:
        readers: E >= 1 readers with the same sizes, depth and window (their current weights are
            copied; each may come from its own seed, and each keeps its own mask, so plain,
            dilated and global-query readers can train together).

    Shape:
        tokens (E, B, T) -> logits (E, B, K).
    """

    def __init__(self, readers: Sequence[WindowedReader]) -> None:
        super().__init__()
        if isinstance(readers, WindowedReader) or not isinstance(readers, Sequence) or not readers:
            raise ValueError(f"readers must be a non-empty sequence of WindowedReader, got {readers!r}")
        for reader in readers:
            check_instance("readers", reader, WindowedReader, "WindowedReader")
        first = readers[0]
        shape = lambda r: (r.num_symbols, r.seq_len, r.window, len(r.layers),  # noqa: E731
                           r.token_embedding.embedding_dim, r.layers[0].self_attn.num_heads,
                           r.layers[0].feed_forward.linear1.out_features)
        if any(shape(r) != shape(first) for r in readers):
            raise ValueError("readers must all have the same num_symbols, seq_len, window, "
                             f"num_layers, d_model, num_heads and d_ff, got {sorted({shape(r) for r in readers})}")
        self.num_symbols, self.seq_len, self.window = first.num_symbols, first.seq_len, first.window
        self.global_query = tuple(r.global_query for r in readers)  # members may differ in their mask
        self.dilation = tuple(r.dilation for r in readers)
        self.num_layers = len(first.layers)
        self.num_heads = first.layers[0].self_attn.num_heads

        def stack(get, transpose: bool = False) -> nn.Parameter:
            tensors = [get(r).detach() for r in readers]
            return nn.Parameter(torch.stack([t.T if transpose else t for t in tensors]).clone())

        self.token_embedding = stack(lambda r: r.token_embedding.weight)  # (E, K + 1, D)
        self.position_embedding = stack(lambda r: r.position_embedding.weight)  # (E, T, D)
        self.layers = nn.ModuleList()
        for i in range(self.num_layers):
            layer = nn.ParameterDict()
            attn = lambda r, i=i: r.layers[i].self_attn  # noqa: E731
            for name, get in (("norm1", lambda r, i=i: r.layers[i].norm1), ("norm2", lambda r, i=i: r.layers[i].norm2)):
                layer[f"{name}_weight"] = stack(lambda r, get=get: get(r).weight)  # (E, D)
                layer[f"{name}_bias"] = stack(lambda r, get=get: get(r).bias)  # (E, D)
            layer["qkv_weight"] = stack(lambda r: torch.cat([attn(r).q_proj.weight, attn(r).k_proj.weight,
                                                             attn(r).v_proj.weight]), transpose=True)  # (E, D, 3D)
            layer["qkv_bias"] = stack(lambda r: torch.cat([attn(r).q_proj.bias, attn(r).k_proj.bias,
                                                           attn(r).v_proj.bias]))  # (E, 3D)
            layer["out_weight"] = stack(lambda r: attn(r).out_proj.weight, transpose=True)  # (E, D, D)
            layer["out_bias"] = stack(lambda r: attn(r).out_proj.bias)  # (E, D)
            ffn = lambda r, i=i: r.layers[i].feed_forward  # noqa: E731
            layer["ff1_weight"] = stack(lambda r: ffn(r).linear1.weight, transpose=True)  # (E, D, F)
            layer["ff1_bias"] = stack(lambda r: ffn(r).linear1.bias)  # (E, F)
            layer["ff2_weight"] = stack(lambda r: ffn(r).linear2.weight, transpose=True)  # (E, F, D)
            layer["ff2_bias"] = stack(lambda r: ffn(r).linear2.bias)  # (E, D)
            self.layers.append(layer)
        self.norm_weight = stack(lambda r: r.norm.weight)  # (E, D)
        self.norm_bias = stack(lambda r: r.norm.bias)  # (E, D)
        self.readout_weight = stack(lambda r: r.readout.weight, transpose=True)  # (E, D, K)
        self.readout_bias = stack(lambda r: r.readout.bias)  # (E, K)
        self.eps = first.norm.eps
        self.register_buffer("mask", torch.stack([r.mask for r in readers]).unsqueeze(1), persistent=False)  # (E, 1, T, T)

    @property
    def num_members(self) -> int:
        return self.token_embedding.shape[0]

    def _norm(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """LayerNorm of every member with its own gamma and beta; x (E, N, D)."""
        x = F.layer_norm(x, x.shape[-1:], eps=self.eps)  # (E, N, D)
        return x * weight.unsqueeze(1) + bias.unsqueeze(1)  # (E, N, D)

    def _linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(bias.unsqueeze(1), x, weight)  # (E, N, out)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        check_tensor("tokens", tokens, ndim=3)
        e, b, t = tokens.shape
        if tokens.is_floating_point() or e != self.num_members or t != self.seq_len:
            raise ValueError(f"tokens must be (E={self.num_members}, B, T={self.seq_len}) integer ids, "
                             f"got {tokens.dtype} {tuple(tokens.shape)}")
        members = torch.arange(e, device=tokens.device).view(e, 1, 1)  # (E, 1, 1)
        x = self.token_embedding[members, tokens] + self.position_embedding.unsqueeze(1)  # (E, B, T, D)
        d = x.shape[-1]
        x = x.reshape(e, b * t, d)  # (E, N, D), N = B T
        h, dh = self.num_heads, d // self.num_heads
        blocked = ~self.mask.unsqueeze(1)  # (E, 1, 1, T, T): True where member e's mask forbids
        scale = dh ** -0.5
        for layer in self.layers:
            qkv = self._linear(self._norm(x, layer["norm1_weight"], layer["norm1_bias"]),
                               layer["qkv_weight"], layer["qkv_bias"])  # (E, N, 3D)
            q, k, v = (part.reshape(e, b, t, h, dh).transpose(2, 3) for part in qkv.split(d, dim=-1))  # (E, B, H, T, Dh)
            # Plain matmuls: at T = 8 a fused kernel's tiling costs more than the arithmetic.
            scores = (q @ k.transpose(-2, -1) * scale).masked_fill(blocked, float("-inf"))  # (E, B, H, T, T)
            heads = scores.softmax(dim=-1) @ v  # (E, B, H, T, Dh)
            heads = heads.transpose(2, 3).reshape(e, b * t, d)  # (E, N, D)
            x = x + self._linear(heads, layer["out_weight"], layer["out_bias"])  # (E, N, D)
            hidden = F.relu(self._linear(self._norm(x, layer["norm2_weight"], layer["norm2_bias"]),
                                         layer["ff1_weight"], layer["ff1_bias"]))  # (E, N, F)
            x = x + self._linear(hidden, layer["ff2_weight"], layer["ff2_bias"])  # (E, N, D)
        last = x.view(e, b, t, d)[:, :, -1]  # (E, B, D)
        return self._linear(self._norm(last, self.norm_weight, self.norm_bias),
                            self.readout_weight, self.readout_bias)  # (E, B, K)


@dataclass(frozen=True)
class ReachGrid:
    """Settings of DL0028's grid of distance D x layers L (the chapter and its calibration share them).

    Attributes:
        window: w, keys per query of the causal window; an L-layer stack reaches L (w - 1) + 1.
        seq_len, num_symbols: the task (T positions, K symbols).
        depths: the numbers of layers L trained.
        distances: the distances D asked of every depth that reaches them (the default 3 and 5 are
            the reach of 1 and 2 layers of w = 3: relays of 1 and 2 hops); every depth is also asked
            the first distance beyond its reach, L (w - 1) + 2, the other side of its cliff (see
            :meth:`distances_for`).
        global_distance: D asked of the global-query arm, one model per depth with the same
            parameters as the window stack of that depth (only the last row of the mask differs).
        steps, batch_size, lr: training of every model (Adam, no gradient clipping).
        d_model, num_heads, d_ff: the readers' sizes.
        num_examples: held-out sequences per model for the final accuracy.
        threshold, smooth: "steps to threshold" is the first step at which the mean accuracy on
            the last ``smooth`` training batches (each fresh data, seen before its update) reaches
            ``threshold``.
    """

    window: int = 3
    seq_len: int = 8
    num_symbols: int = 8
    depths: tuple[int, ...] = (1, 2)
    distances: tuple[int, ...] = (3, 5)
    global_distance: int = 8
    steps: int = 400
    batch_size: int = 32
    lr: float = 3e-3
    d_model: int = 16
    num_heads: int = 2
    d_ff: int = 32
    num_examples: int = 512
    threshold: float = 0.9
    smooth: int = 25

    def __post_init__(self) -> None:
        check_int("window", self.window, minimum=2)
        for distance in (*self.distances, self.global_distance):
            _check_task(self.seq_len, distance, self.num_symbols)
        if not self.depths or not self.distances:
            raise ValueError(f"depths and distances must be non-empty, got {self.depths} and {self.distances}")
        for depth in self.depths:
            check_int("depths", depth, minimum=1)
        if not 0 < self.threshold <= 1:
            raise ValueError(f"threshold must be in (0, 1], got {self.threshold}")
        check_int("smooth", self.smooth, minimum=1)
        if self.smooth > self.steps:
            raise ValueError(f"smooth must be <= steps={self.steps}, got {self.smooth}")

    def reach(self, depth: int) -> int:
        """Receptive field of the last position of a ``depth``-layer window stack: min(L (w - 1) + 1, T)."""
        return min(depth * (self.window - 1) + 1, self.seq_len)

    def distances_for(self, depth: int) -> tuple[int, ...]:
        """The distances a ``depth``-layer stack is asked: those of ``distances`` in reach, then reach + 1.

        Distances further out are left out: beyond its reach a stack is at chance whatever D is.
        """
        inside = [d for d in self.distances if d <= self.reach(depth)]
        beyond = [self.reach(depth) + 1] if self.reach(depth) < self.seq_len else []
        return tuple(inside + beyond)

    def cells(self, depth: int) -> list[tuple[int, bool]]:
        """The (distance D, global query) cells a ``depth``-layer stack is trained on: ``distances_for``, then the global arm."""
        return [(distance, False) for distance in self.distances_for(depth)] + [(self.global_distance, True)]

    def hops(self, distance: int) -> int:
        """Window hops a relay needs to carry the answer D - 1 positions forward: ceil((D - 1) / (w - 1))."""
        return -(-(distance - 1) // (self.window - 1))


REACH_GRID = ReachGrid()
REACH_ENSEMBLE = 8  # seeds per cell: a chapter with base seed SEED trains ensemble_seeds(SEED, EXPERIMENT, 8)
EXPERIMENT = "window reach"  # the ensemble's name for seeds.ensemble_seeds
EVAL_SEED_OFFSET = 100_000  # held-out data of seed s come from s + EVAL_SEED_OFFSET


def steps_to_threshold(accuracy: torch.Tensor, threshold: float, smooth: int) -> torch.Tensor:
    """First step at which the running mean of ``smooth`` per-step accuracies reaches ``threshold``.

    Args:
        accuracy: (E, steps) accuracy of every member on each training batch.
        threshold: the level to reach, in [0, 1].
        smooth: length of the running mean.

    Returns:
        (E,) float: the step count (the last step of the first window that reaches the level,
        counted from 1), NaN for a member that never reaches it.
    """
    check_tensor("accuracy", accuracy, ndim=2)
    smooth = check_int("smooth", smooth, minimum=1)
    if smooth > accuracy.shape[1]:
        raise ValueError(f"smooth must be <= the number of steps {accuracy.shape[1]}, got {smooth}")
    running = accuracy.float().unfold(1, smooth, 1).mean(dim=-1)  # (E, steps - smooth + 1)
    reached = running >= threshold
    first = reached.float().argmax(dim=1).float() + smooth  # (E,) step of the window's last batch
    return torch.where(reached.any(dim=1), first, torch.full_like(first, float("nan")))


@dataclass
class ReachGridResult:
    """What :func:`reach_grid` measured: one row per trained model, and its learning curve.

    Attributes:
        table: one row per model: "layers L", "distance D", "global query", "seed", "reach",
            "in reach", "hops", "accuracy (%)" (held-out), "steps to threshold" (NaN if never).
        curves: (models, steps) accuracy on every training batch, rows in the table's order.
        settings: the :class:`ReachGrid` used.
    """

    table: pd.DataFrame
    curves: torch.Tensor
    settings: ReachGrid

    def select(self, seeds: Sequence[int]) -> ReachGridResult:
        """The models of the given seeds only (each model's training does not depend on the others')."""
        keep = self.table["seed"].isin(list(seeds)).to_numpy()
        missing = set(seeds) - set(self.table["seed"])
        if missing:
            raise ValueError(f"seeds must have been trained, got seeds without models: {sorted(missing)}")
        return ReachGridResult(self.table[keep].reset_index(drop=True), self.curves[torch.tensor(keep)], self.settings)


def reach_grid(seeds: Sequence[int], settings: ReachGrid = REACH_GRID, progress: bool = False,
               workers: int = 1) -> ReachGridResult:
    """Train one reader per (depth L, distance D, seed) and per (L, global query, seed); measure each.

    The models of one depth train together as one :class:`ReaderEnsemble` (they share the
    per-operation overhead; each still sees only its own loss). Seed s gives every model of a
    depth the same initial weights (drawn in ``seeded(s)``) and the same stream of training
    sequences; only the answer position D (and, for the global arm, the mask) differs, so the
    comparison between cells is paired.

    Args:
        seeds: the seeds of the ensemble (a chapter passes ``ensemble_seeds(SEED, EXPERIMENT, REACH_ENSEMBLE)``).
        settings: the grid and the training (default :data:`REACH_GRID`).
        progress: show a tqdm bar per depth (only with ``workers`` = 1).
        workers: processes (``parallel.map_runs``). With more than one, the seeds of each depth
            are split into ``workers`` ensembles, trained side by side; every member's numbers are
            the same bit for bit (a member sees only its own loss, on one thread), only faster.

    Returns:
        A :class:`ReachGridResult`.
    """
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence) or not seeds:
        raise ValueError(f"seeds must be a non-empty sequence of ints >= 0, got {seeds!r}")
    seeds = [check_int("seeds", seed, minimum=0) for seed in seeds]
    check_instance("settings", settings, ReachGrid, "ReachGrid")
    workers = check_int("workers", workers, minimum=1)
    chunks = split_evenly(seeds, workers)  # the seeds of each ensemble of a depth
    tasks = [(depth, chunk, settings, progress and workers == 1) for depth in settings.depths for chunk in chunks]
    trained = {}  # (depth, distance, global query, seed) -> (row, curve)
    for result in map_runs(_reach_ensemble, tasks, workers):
        trained.update(result)
    rows, curves = [], []
    for depth in settings.depths:  # the order of one ensemble per depth: cells, then seeds
        for distance, global_query in settings.cells(depth):
            for seed in seeds:
                row, curve = trained[(depth, distance, global_query, seed)]
                rows.append(row)
                curves.append(curve)
    return ReachGridResult(pd.DataFrame(rows), torch.stack(curves), settings)


def _reach_ensemble(depth: int, seeds: list[int], g: ReachGrid, progress: bool) -> dict[tuple, tuple[dict, torch.Tensor]]:
    """Train the readers of one depth for ``seeds`` as one ensemble: (depth, D, global, seed) -> (table row, (steps,) accuracy)."""
    members = [(distance, global_query, seed) for distance, global_query in g.cells(depth) for seed in seeds]
    plain, with_global = {}, {}
    for seed in seeds:
        with seeded(seed):
            plain[seed] = WindowedReader(g.num_symbols, g.seq_len, depth, g.window, False, g.d_model,
                                         g.num_heads, g.d_ff)
        with_global[seed] = WindowedReader(g.num_symbols, g.seq_len, depth, g.window, True, g.d_model,
                                           g.num_heads, g.d_ff)
        with_global[seed].load_state_dict(plain[seed].state_dict())  # same weights: only the mask differs
    readers = [(with_global if global_query else plain)[seed] for _, global_query, seed in members]
    accuracy, reached, held_out = train_readers(readers, [distance for distance, _, _ in members],
                                                [seed for _, _, seed in members], g, progress)
    result = {}
    for index, (distance, global_query, seed) in enumerate(members):
        reach = g.seq_len if global_query else g.reach(depth)
        row = {"layers L": depth, "distance D": distance, "global query": global_query, "seed": seed,
               "reach": reach, "in reach": reach >= distance,
               "hops": 1 if global_query else g.hops(distance),
               "accuracy (%)": 100 * float(held_out[index]),
               "steps to threshold": float(reached[index])}
        result[(depth, distance, global_query, seed)] = (row, accuracy[index])
    return result


def train_readers(readers: Sequence[WindowedReader], distances: Sequence[int], member_seeds: Sequence[int],
                  g: ReachGrid, progress: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Train readers together as one :class:`ReaderEnsemble` on the copy task, member e at ``distances[e]``.

    Every member of seed s reads the same stream of training sequences (from ``Generator(s)``; only
    the answer position differs) and is tested on ``g.num_examples`` sequences from seed
    s + ``EVAL_SEED_OFFSET``; ``g`` supplies the task (seq_len, num_symbols) and the training
    (steps, batch_size, lr, threshold, smooth). DL0028's grid and DL0029's dilation experiment
    (:mod:`.dilation_reach`) both train through here.

    Returns:
        accuracy (E, steps) on every training batch, steps to threshold (E,) (NaN: never), held-out
        accuracy (E,) in [0, 1].
    """
    seeds = list(dict.fromkeys(member_seeds))  # each seed once, in order of appearance
    ensemble = ReaderEnsemble(readers)
    generators = {seed: torch.Generator().manual_seed(seed) for seed in seeds}
    distances = torch.tensor(list(distances))  # (E,)
    seed_index = [seeds.index(seed) for seed in member_seeds]

    def make_batch(_generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.stack([make_reach_batch(g.batch_size, generators[seed], g.seq_len, g.seq_len,
                                               g.num_symbols)[0] for seed in seeds])  # (S, B, T)
        tokens = tokens[seed_index]  # (E, B, T): member e reads its seed's sequences
        answers = tokens.gather(2, (g.seq_len - distances).view(-1, 1, 1).expand(-1, g.batch_size, 1))  # (E, B, 1)
        return tokens, answers.squeeze(2)  # (E, B, T), (E, B)

    batch_accuracy = []

    def ensemble_loss(model: ReaderEnsemble, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        tokens, answers = batch
        logits = model(tokens)  # (E, B, K)
        batch_accuracy.append((logits.detach().argmax(dim=-1) == answers).float().mean(dim=1).cpu())  # (E,)
        per_member = F.cross_entropy(logits.flatten(0, 1), answers.flatten(), reduction="none")  # (E B,)
        return per_member.view(answers.shape).mean(dim=1).sum()  # each member's mean loss, summed

    fit(ensemble, make_batch, ensemble_loss, g.steps, lr=g.lr, seed=seeds[0], progress=progress,
        clip_grad_norm=None)  # the batch generator of fit is unused: every seed has its own stream
    accuracy = torch.stack(batch_accuracy, dim=1)  # (E, steps)
    reached = steps_to_threshold(accuracy, g.threshold, g.smooth)  # (E,)
    return accuracy, reached, _ensemble_accuracy(ensemble, distances, member_seeds, g)


@torch.no_grad()
def _ensemble_accuracy(ensemble: ReaderEnsemble, distances: torch.Tensor, member_seeds: Sequence[int],
                       g: ReachGrid) -> torch.Tensor:
    """(E,) held-out accuracy: member e (distance D, seed s) on ``g.num_examples`` sequences from seed s + EVAL_SEED_OFFSET."""
    tokens = torch.stack([make_reach_batch(g.num_examples, torch.Generator().manual_seed(seed + EVAL_SEED_OFFSET),
                                           g.seq_len, g.seq_len, g.num_symbols)[0]
                          for seed in member_seeds])  # (E, N, T)
    answers = tokens.gather(2, (g.seq_len - distances).view(-1, 1, 1).expand(-1, g.num_examples, 1)).squeeze(2)
    predictions = ensemble(tokens.to(ensemble.mask.device)).argmax(dim=-1).cpu()  # (E, N)
    return (predictions == answers).float().mean(dim=1)


def _cell_name(depth: int, distance: int, global_query: bool) -> str:
    return f"L = {depth}, D = {distance}" + (", global query" if global_query else "")


@exhibit
def reach_grid_summary(result: ReachGridResult) -> pd.DataFrame:
    """One row per cell (L, D, global): reach, hops, and the ensemble's held-out accuracy and steps to threshold.

    Steps to threshold are censored at the budget: a seed that never reaches the threshold counts
    as ``steps + 1`` in the median, and ``reached`` says how many seeds did.

    Returns:
        DataFrame indexed by cell name with columns "layers L", "distance D", "global query", "reach",
        "in reach", "hops", "accuracy median (%)", "accuracy min (%)", "accuracy max (%)",
        "steps to threshold (median)", "(min)", "(max)" and "reached" ("k / n").
    """
    check_instance("result", result, ReachGridResult, "ReachGridResult")
    budget = result.settings.steps + 1
    rows = []
    keys = ["layers L", "distance D", "global query"]
    for (depth, distance, global_query), cell in result.table.groupby(keys, sort=False):
        steps = cell["steps to threshold"].fillna(budget)
        rows.append({"cell": _cell_name(depth, distance, global_query), "layers L": depth, "distance D": distance,
                     "global query": bool(global_query), "reach": int(cell["reach"].iloc[0]),
                     "in reach": bool(cell["in reach"].iloc[0]), "hops": int(cell["hops"].iloc[0]),
                     "accuracy median (%)": float(cell["accuracy (%)"].median()),
                     "accuracy min (%)": float(cell["accuracy (%)"].min()),
                     "accuracy max (%)": float(cell["accuracy (%)"].max()),
                     "steps to threshold (median)": float(steps.median()),
                     "(min)": float(steps.min()), "(max)": float(steps.max()),
                     "reached": f"{int(cell['steps to threshold'].notna().sum())} / {len(cell)}"})
    return pd.DataFrame(rows).set_index("cell")


REACH_BOUNDS = {  # chosen with margin from the calibration over 30 base seeds (benchmarks/calibration/dl0028_...)
    "beyond reach, highest accuracy (%)": ("<", 20.0),
    "one hop, lowest accuracy (%)": (">=", 95.0),
    "in reach, lowest cell median accuracy (%)": (">=", 90.0),
    "2-hop (L = 2, D = 5) / 1-hop (L = 1, D = 3) median steps": (">", 1.5),
    "2 layers, D = 5 (2 hops) / D = 3 (1 hop) median steps": (">", 1.5),
    "2 layers, global query at D = 8 / window at D = 5 median steps": ("<", 0.75),
}


def reach_claims(result: ReachGridResult) -> list[Claim]:
    """DL0028's conclusions from the grid, as :class:`Claim` s over the ensemble (bounds: ``REACH_BOUNDS``).

    * beyond its reach no model beats chance (the highest held-out accuracy of any seed);
    * every model asked for a one-hop distance (D <= w, or a global query) solves it (the lowest seed);
    * every in-reach cell is solved on the median seed within the budget;
    * a relay of two hops learns more slowly than one hop: the median steps to threshold at the edge
      of reach of 2 layers (D = 5) against 1 layer (D = 3);
    * it is the relay, not the depth: 2 layers learn D = 3 sooner than D = 5;
    * a global query (same weights, one more row in the mask) learns sooner than the 2-hop relay.

    The names hold for the default :data:`REACH_GRID` (w = 3, depths 1 and 2).
    """
    check_instance("result", result, ReachGridResult, "ReachGridResult")
    g, table = result.settings, result.table
    summary = reach_grid_summary(result)
    window = table[~table["global query"]]
    median_steps = lambda depth, distance, global_query=False: float(  # noqa: E731
        summary.loc[_cell_name(depth, distance, global_query), "steps to threshold (median)"])
    edge = {depth: median_steps(depth, g.reach(depth)) for depth in (1, 2)}
    values = {
        "beyond reach, highest accuracy (%)": float(window.loc[~window["in reach"], "accuracy (%)"].max()),
        "one hop, lowest accuracy (%)": float(table.loc[table["hops"] == 1, "accuracy (%)"].min()),
        "in reach, lowest cell median accuracy (%)": float(summary.loc[summary["in reach"], "accuracy median (%)"].min()),
        "2-hop (L = 2, D = 5) / 1-hop (L = 1, D = 3) median steps": edge[2] / edge[1],
        "2 layers, D = 5 (2 hops) / D = 3 (1 hop) median steps": median_steps(2, 5) / median_steps(2, 3),
        "2 layers, global query at D = 8 / window at D = 5 median steps":
            median_steps(2, g.global_distance, True) / median_steps(2, 5),
    }
    return [Claim(name, values[name], op, bound) for name, (op, bound) in REACH_BOUNDS.items()]
