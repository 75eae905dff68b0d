"""A toy task on which the heads of one multi-head attention layer specialize, and tools to see it.

Shape legend: B batch, H heads, T sequence length (queries = keys), D = d_model, Dh = D / H,
R relations, V vocabulary size.

The task ("four lookups"). A sequence of ``seq_len`` random lower-case letters holds exactly one
*marker* (an upper-case letter) and one *digit*, each at a random position. At every position i
the model must report four tokens at once, one per relation:

* ``previous``: the token at i - 1 (a band just below the diagonal: a positional head);
* ``first``: the token at position 0 (a fixed column, like a BOS / [CLS] token);
* ``marker``: the marker, wherever it is (a column that moves with the content);
* ``digit``: the digit, wherever it is (another content column).

The model is deliberately minimal: token + learned position embeddings, one ``MultiHeadAttention``
layer, and one linear read-out per relation applied to the attention output alone (no residual
path), so every bit of information the read-outs need has to be fetched by some head. Which head
takes which lookup is left to training; :func:`head_relation_scores` measures it and
:func:`specialization_summary` classifies it (one head per lookup, a lookup done twice, a lookup
spread over heads). The task does not *require* one head per lookup: one softmax row can spread
its mass over several keys, and a single head of full width keeps improving on all four lookups,
only more slowly than several heads (see :mod:`.head_count`); how often training splits the lookups over the heads is a property
of the distribution over seeds, not of one run.

Also here: :func:`per_head_attention`, the formula MultiHead = Concat(head_1..head_H) W^O computed
literally head by head (a reference for the batched module), :func:`to_torch_multihead_attention`
(the same weights in ``nn.MultiheadAttention``) and :func:`ablate_heads` (remove heads by zeroing
their columns of W^O, as in Michel et al., 2019).
"""

from __future__ import annotations

import copy
import string
from typing import Callable, Iterable

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from transformer_course._exhibit import exhibit
from transformer_course._validation import check_instance, check_int, check_positive_float, check_tensor
from transformer_course.nn.attention import MultiHeadAttention, _attention
from transformer_course.nn.masks import validate_mask
from .training import fit, model_device, seeded

RELATIONS = ("previous", "first", "marker", "digit")
IGNORE_INDEX = -100


def _check_generator(generator: object) -> torch.Generator:
    check_instance("generator", generator, torch.Generator, "torch.Generator")
    return generator


def make_lookup_batch(
    batch_size: int,
    generator: torch.Generator,
    seq_len: int = 12,
    num_letters: int = 16,
    num_markers: int = 4,
    num_digits: int = 4,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw a batch of the four-lookups task: tokens and, per relation, the position to look up.

    Token ids: ``0 .. L - 1`` are letters (a, b, ...), ``L .. L + M - 1`` markers (A, B, ...),
    ``L + M .. L + M + N - 1`` digits (0, 1, ...), with L = ``num_letters``, M = ``num_markers``,
    N = ``num_digits``. Each sequence holds exactly one marker and one digit, at two different
    random positions; every other position holds a random letter.

    Args:
        batch_size: number of sequences B (>= 1).
        generator: a ``torch.Generator`` that makes the batch reproducible.
        seq_len: sequence length T (>= 3).
        num_letters: letters L (1 .. 26).
        num_markers: markers M (1 .. 26).
        num_digits: digits N (1 .. 10).

    Returns:
        tokens: (B, T) int64 token ids.
        sources: (B, R, T) int64 from :func:`relation_sources`.

    Raises:
        TypeError, ValueError: for a non-generator or sizes out of range.
    """
    batch_size = check_int("batch_size", batch_size, minimum=1)
    _check_generator(generator)
    seq_len = check_int("seq_len", seq_len, minimum=3)
    sizes = _check_sizes(num_letters, num_markers, num_digits)
    num_letters, num_markers, num_digits = sizes
    tokens = torch.randint(0, num_letters, (batch_size, seq_len), generator=generator)  # (B, T)
    places = torch.rand(batch_size, seq_len, generator=generator).argsort(dim=1)[:, :2]  # (B, 2)
    marker = torch.randint(num_letters, num_letters + num_markers, (batch_size,), generator=generator)  # (B,)
    digit = torch.randint(num_letters + num_markers, sum(sizes), (batch_size,), generator=generator)  # (B,)
    rows = torch.arange(batch_size)
    tokens[rows, places[:, 0]] = marker
    tokens[rows, places[:, 1]] = digit
    return tokens, relation_sources(tokens, num_letters, num_markers)


def _check_sizes(num_letters: object, num_markers: object, num_digits: object) -> tuple[int, int, int]:
    num_letters = check_int("num_letters", num_letters, minimum=1)
    num_markers = check_int("num_markers", num_markers, minimum=1)
    num_digits = check_int("num_digits", num_digits, minimum=1)
    if num_letters > 26 or num_markers > 26 or num_digits > 10:
        raise ValueError("num_letters and num_markers must be <= 26 and num_digits <= 10, got "
                         f"{num_letters}, {num_markers} and {num_digits}")
    return num_letters, num_markers, num_digits


def relation_sources(tokens: torch.Tensor, num_letters: int = 16, num_markers: int = 4) -> torch.Tensor:
    """For each relation and query position, the key position it points to (-1 if undefined).

    ``previous`` is undefined at i = 0 and ``first`` at i = 0 (it would be the query itself);
    ``marker`` and ``digit`` are defined everywhere.

    Args:
        tokens: (B, T) int64 token ids with exactly one marker and one digit per row.
        num_letters: L, number of letter ids (markers start at L).
        num_markers: M, number of marker ids (digits start at L + M).

    Returns:
        (B, R, T) int64 positions, in the order of ``RELATIONS``.

    Raises:
        TypeError, ValueError: if ``tokens`` is not a 2-D integer tensor with one marker and one
            digit per row.
    """
    check_tensor("tokens", tokens, ndim=2)
    if tokens.is_floating_point() or tokens.dtype == torch.bool:
        raise TypeError(f"tokens must hold integer ids, got dtype {tokens.dtype}")
    num_letters = check_int("num_letters", num_letters, minimum=1)
    num_markers = check_int("num_markers", num_markers, minimum=1)
    is_marker = (tokens >= num_letters) & (tokens < num_letters + num_markers)  # (B, T)
    is_digit = tokens >= num_letters + num_markers  # (B, T)
    for name, found in (("marker", is_marker), ("digit", is_digit)):
        if not bool((found.sum(dim=1) == 1).all()):
            raise ValueError(f"tokens must hold exactly one {name} per sequence, "
                             f"got counts {found.sum(dim=1).tolist()}")
    b, t = tokens.shape
    i = torch.arange(t, device=tokens.device).expand(b, t)  # (B, T)
    previous = torch.where(i > 0, i - 1, -1)  # (B, T)
    first = torch.where(i > 0, 0, -1)  # (B, T)
    marker = is_marker.long().argmax(dim=1, keepdim=True).expand(b, t)  # (B, T)
    digit = is_digit.long().argmax(dim=1, keepdim=True).expand(b, t)  # (B, T)
    return torch.stack([previous, first, marker, digit], dim=1)  # (B, R, T)


def lookup_targets(tokens: torch.Tensor, sources: torch.Tensor) -> torch.Tensor:
    """The token each relation must report: tokens[b, sources[b, r, i]], IGNORE_INDEX where undefined.

    Args:
        tokens: (B, T) token ids.
        sources: (B, R, T) positions from :func:`relation_sources` (-1 = undefined).

    Returns:
        (B, R, T) int64 targets.
    """
    check_tensor("tokens", tokens, ndim=2)
    check_tensor("sources", sources, ndim=3)
    if sources.shape[0] != tokens.shape[0] or sources.shape[2] != tokens.shape[1]:
        raise ValueError(f"sources must have shape (B, R, T) matching tokens {tuple(tokens.shape)}, "
                         f"got {tuple(sources.shape)}")
    r = sources.shape[1]
    expanded = tokens.unsqueeze(1).expand(-1, r, -1)  # (B, R, T)
    targets = expanded.gather(2, sources.clamp(min=0))  # (B, R, T)
    return targets.masked_fill(sources < 0, IGNORE_INDEX)


def token_names(tokens: torch.Tensor, num_letters: int = 16, num_markers: int = 4) -> list[str]:
    """Readable names of a 1-D sequence of ids: letters a, b, ..., markers A, B, ..., digits 0, 1, ..."""
    check_tensor("tokens", tokens, ndim=1)
    num_letters = check_int("num_letters", num_letters, minimum=1)
    num_markers = check_int("num_markers", num_markers, minimum=1)
    names = []
    for i in tokens.tolist():
        if i < num_letters:
            names.append(string.ascii_lowercase[i])
        elif i < num_letters + num_markers:
            names.append(string.ascii_uppercase[i - num_letters])
        else:
            names.append(str(i - num_letters - num_markers))
    return names


class LookupModel(nn.Module):
    """Embeddings -> one MultiHeadAttention -> one linear read-out per relation (no residual).

    Args:
        vocab_size: V, number of token ids (letters + markers).
        seq_len: T, the (fixed) sequence length, for the learned position embeddings.
        d_model: width D.
        num_heads: heads H of the attention layer.
        num_relations: R, how many read-outs (one per relation).
        num_kv_heads: key/value heads G of the attention layer (default H; G < H shares each
            key/value head among H / G query heads: grouped-query attention, multi-query at G = 1).

    Shape:
        tokens (B, T) -> logits (B, R, T, V), plus attention weights (B, H, T, T) when
        ``need_weights=True``.
    """

    def __init__(self, vocab_size: int = 24, seq_len: int = 12, d_model: int = 32, num_heads: int = 4,
                 num_relations: int = len(RELATIONS), num_kv_heads: int | None = None) -> None:
        super().__init__()
        self.vocab_size = check_int("vocab_size", vocab_size, minimum=2)
        self.seq_len = check_int("seq_len", seq_len, minimum=1)
        self.num_relations = check_int("num_relations", num_relations, minimum=1)
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(seq_len, d_model)
        self.attention = MultiHeadAttention(d_model, num_heads, num_kv_heads=num_kv_heads)
        self.readout = nn.Linear(d_model, num_relations * vocab_size)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token plus learned position embeddings, (B, T) ids -> (B, T, D): what the attention layer reads."""
        positions = torch.arange(tokens.shape[1], device=tokens.device)  # (T,)
        return self.token_embedding(tokens) + self.position_embedding(positions)  # (B, T, D)

    def forward(self, tokens: torch.Tensor, need_weights: bool = False
                ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Logits (B, R, T, V) for ``tokens`` (B, T); with the weights (B, H, T, T) if asked."""
        check_tensor("tokens", tokens, ndim=2)
        if tokens.is_floating_point():
            raise TypeError(f"tokens must hold integer ids, got dtype {tokens.dtype}")
        b, t = tokens.shape
        if t > self.seq_len:
            raise ValueError(f"tokens has length {t}, longer than seq_len={self.seq_len}")
        x = self.embed(tokens)  # (B, T, D)
        out, weights = self.attention(x, x, x, need_weights=True) if need_weights else (self.attention(x, x, x), None)
        logits = self.readout(out).view(b, t, self.num_relations, self.vocab_size)  # (B, T, R, V)
        logits = logits.transpose(1, 2)  # (B, R, T, V)
        return (logits, weights) if need_weights else logits


def lookup_loss(model: LookupModel, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Sum over relations of the mean cross-entropy of the reported tokens (undefined ones skipped)."""
    tokens, sources = batch
    logits = model(tokens)  # (B, R, T, V)
    targets = lookup_targets(tokens, sources)  # (B, R, T)
    per_relation = F.cross_entropy(logits.permute(0, 3, 1, 2), targets, ignore_index=IGNORE_INDEX,
                                   reduction="none")  # (B, R, T)
    valid = (targets != IGNORE_INDEX).float()  # (B, R, T)
    return ((per_relation * valid).sum(dim=(0, 2)) / valid.sum(dim=(0, 2))).sum()


def train_lookup_model(
    seed: int = 0,
    steps: int = 400,
    batch_size: int = 64,
    d_model: int = 32,
    num_heads: int = 4,
    lr: float = 5e-3,
    seq_len: int = 12,
    num_letters: int = 16,
    num_markers: int = 4,
    num_digits: int = 4,
    progress: bool = False,
    device: torch.device | str = "cpu",
    batch_hook: Callable[[LookupModel, int], None] | None = None,
    num_kv_heads: int | None = None,
) -> tuple[LookupModel, list[float]]:
    """Build a :class:`LookupModel` from ``seed`` and train it on the four-lookups task with ``fit``.

    The initial weights come from ``seed`` (drawn inside ``training.seeded``), the
    batches from a generator seeded with ``seed``, and ``fit`` trains on one CPU thread, so the
    same arguments give the same model.

    Args:
        seed: seeds the initial weights and the data.
        steps: Adam steps.
        batch_size: sequences per step.
        d_model: model width D.
        num_heads: heads H.
        lr: learning rate.
        seq_len, num_letters, num_markers, num_digits: the task's sizes (see :func:`make_lookup_batch`).
        progress: show a progress bar.
        device: where to train (the weights are drawn on the CPU, then moved).
        batch_hook: optional ``batch_hook(model, step)``, called before the batch of every step is
            drawn, i.e. after ``step`` updates (``step`` = 0 .. ``steps`` - 1); it may evaluate the
            model (under ``torch.no_grad``) or raise to end training early. It does not change
            the training: the weights and batches are those of a run without it.
        num_kv_heads: key/value heads G (default H, plain multi-head attention); with G = H the
            model and its training are those of the default.

    Returns:
        The trained model (in eval mode, on ``device``) and the loss at every step.
    """
    seed = check_int("seed", seed, minimum=0)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    check_positive_float("lr", lr)
    with seeded(seed):
        model = LookupModel(sum(_check_sizes(num_letters, num_markers, num_digits)), seq_len, d_model, num_heads,
                            num_kv_heads=num_kv_heads)

    calls = [0]

    def make_batch(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        if batch_hook is not None:
            batch_hook(model, calls[0])
            calls[0] += 1
        return make_lookup_batch(batch_size, generator, seq_len, num_letters, num_markers, num_digits)

    losses = fit(model.to(device), make_batch, lookup_loss, steps, lr=lr, seed=seed, progress=progress)
    return model, losses


@torch.no_grad()
def lookup_accuracy(model: LookupModel, tokens: torch.Tensor, sources: torch.Tensor) -> pd.Series:
    """Fraction of defined (query, relation) pairs where the model reports the right token.

    Returns:
        Series indexed by relation name.
    """
    tokens, sources = tokens.to(model_device(model)), sources.to(model_device(model))
    logits = model(tokens)  # (B, R, T, V)
    targets = lookup_targets(tokens, sources)  # (B, R, T)
    valid = targets != IGNORE_INDEX
    correct = (logits.argmax(dim=-1) == targets) & valid  # (B, R, T)
    accuracy = correct.sum(dim=(0, 2)).double() / valid.sum(dim=(0, 2))  # (R,)
    return pd.Series(accuracy.tolist(), index=list(RELATIONS[: len(accuracy)]), name="accuracy")


@exhibit
def head_relation_scores(weights: torch.Tensor, sources: torch.Tensor) -> pd.DataFrame:
    """Mean attention mass each head puts on the position each relation points to.

    score[h, r] = mean over sequences b and queries i where relation r is defined of
    weights[b, h, i, sources[b, r, i]]. A score near 1 means head h does relation r's lookup.

    Args:
        weights: (B, H, T, T) attention probabilities.
        sources: (B, R, T) positions (-1 = undefined), from :func:`relation_sources`.

    Returns:
        DataFrame (H rows "head 0" ..., R columns named after ``RELATIONS``) of scores in [0, 1].

    Raises:
        TypeError, ValueError: on wrong types or mismatched shapes.
    """
    check_tensor("weights", weights, ndim=4, floating=True)
    check_tensor("sources", sources, ndim=3)
    b, h, t, s = weights.shape
    if sources.shape[0] != b or sources.shape[2] != t:
        raise ValueError(f"sources must have shape (B={b}, R, T={t}), got {tuple(sources.shape)}")
    r = sources.shape[1]
    valid = (sources >= 0).to(weights.dtype)  # (B, R, T)
    index = sources.clamp(min=0).unsqueeze(1).expand(b, h, r, t)  # (B, H, R, T)
    mass = weights.unsqueeze(2).expand(b, h, r, t, s)  # (B, H, R, T, S)
    picked = mass.gather(4, index.unsqueeze(-1)).squeeze(-1)  # (B, H, R, T)
    scores = (picked * valid.unsqueeze(1)).sum(dim=(0, 3)) / valid.sum(dim=(0, 2))  # (H, R)
    names = list(RELATIONS) if r == len(RELATIONS) else [f"relation {k}" for k in range(r)]
    return pd.DataFrame(scores.double().numpy(), index=[f"head {k}" for k in range(h)], columns=names)


def assign_heads(scores: pd.DataFrame) -> dict[str, int]:
    """For each relation (column), the head (row index) with the highest score."""
    check_instance("scores", scores, pd.DataFrame, "pandas.DataFrame")
    return {str(relation): int(scores[relation].to_numpy().argmax()) for relation in scores.columns}


def score_ranks(model: LookupModel, tokens: torch.Tensor, energy: float = 0.99, rtol: float = 1e-4) -> pd.DataFrame:
    """How many dimensions each head's attention scores use, per head of a trained ``LookupModel``.

    For head i and one sequence, the scores S_i = Q_i K_i^T / sqrt(Dh) form a (T, T) matrix of rank
    at most Dh: the low-rank bottleneck of Bhojanapalli et al. (2020, "Low-Rank Bottleneck in
    Multi-head Attention Models"). Each row is first centred (the softmax ignores a constant added
    to a row, so only the centred scores shape the pattern). With singular values
    s_1 >= ... >= s_T of the centred matrix, the *effective rank* is the smallest k with
    s_1^2 + ... + s_k^2 >= energy * (s_1^2 + ... + s_T^2): how many dimensions the head's patterns
    need; the *numerical rank* counts the s_j > rtol * s_1 (never more than Dh, up to float32
    rounding).

    Args:
        model: a ``LookupModel``.
        tokens: (B, T) token ids.
        energy: share of the squared Frobenius norm the effective rank must hold, in (0, 1].
        rtol: relative threshold of the numerical rank, positive.

    Returns:
        DataFrame, one row per head ("head 0", ...), columns "d_head", "effective rank, median",
        "effective rank, max" (over the B sequences) and "numerical rank, max".

    Raises:
        TypeError: if ``model`` is not a ``LookupModel``.
        ValueError: if ``energy`` is not in (0, 1] or ``rtol`` is not positive.
    """
    check_instance("model", model, LookupModel, "LookupModel")
    check_tensor("tokens", tokens, ndim=2)
    energy = check_positive_float("energy", energy)
    if energy > 1:
        raise ValueError(f"energy must be in (0, 1], got {energy}")
    rtol = check_positive_float("rtol", rtol)
    attention = model.attention
    with torch.no_grad():
        x = model.embed(tokens)  # (B, T, D)
        scores = attention.attention_logits(x, x).double()  # (B, H, T, T)
    centred = scores - scores.mean(dim=-1, keepdim=True)  # (B, H, T, T): each row shifted to mean 0
    singular = torch.linalg.svdvals(centred)  # (B, H, T), descending
    squared = singular.square()  # (B, H, T)
    share = squared.cumsum(dim=-1) / squared.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(squared.dtype).tiny)
    effective = (share < energy - 1e-12).sum(dim=-1) + 1  # (B, H): first k whose share reaches energy
    numerical = (singular > rtol * singular[..., :1]).sum(dim=-1)  # (B, H)
    return pd.DataFrame({
        "d_head": [attention.d_head] * attention.num_heads,
        "effective rank, median": effective.double().quantile(0.5, dim=0).tolist(),
        "effective rank, max": effective.max(dim=0).values.tolist(),
        "numerical rank, max": numerical.max(dim=0).values.tolist(),
    }, index=[f"head {k}" for k in range(attention.num_heads)])


def head_map_distances(weights: torch.Tensor) -> torch.Tensor:
    """Mean total-variation distance between the attention rows of every pair of heads.

    d[g, h] = mean over b, i of 0.5 * sum_j |weights[b, g, i, j] - weights[b, h, i, j]|: 0 when two
    heads attend identically, 1 when they never look at the same key.

    Args:
        weights: (B, H, T, S) attention probabilities.

    Returns:
        (H, H) symmetric tensor with zeros on the diagonal.
    """
    check_tensor("weights", weights, ndim=4, floating=True)
    diff = weights.unsqueeze(2) - weights.unsqueeze(1)  # (B, H, H, T, S)
    return 0.5 * diff.abs().sum(dim=-1).mean(dim=(0, 3))  # (H, H)


def per_head_attention(module: MultiHeadAttention, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       mask: torch.Tensor | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_H) W^O, computed one head at a time.

    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V), where W_i^Q is the i-th block of Dh columns of
    the module's (D, D) matrix W^Q (``q_proj.weight`` is stored transposed, so its rows). A slow,
    literal reference for the batched ``MultiHeadAttention.forward``.

    Args:
        module: the attention module whose weights are used.
        query: (B, T, D); key, value: (B, S, D).
        mask: optional bool mask broadcastable to (B, T, S) (True = may attend).

    Returns:
        out: (B, T, D), equal to ``module(query, key, value, mask)``.
        heads: H tensors (B, T, Dh), the outputs head_1 ... head_H before concatenation.

    Vaswani et al., 2017, section 3.2.2.
    """
    check_instance("module", module, MultiHeadAttention)
    module._check_inputs(query, key, value)
    if mask is not None:
        validate_mask(mask, query.shape[1], key.shape[1])
    dh = module.d_head
    group = module.num_heads // module.num_kv_heads  # 1 unless key/value heads are shared (GQA)
    heads = []
    for i in range(module.num_heads):
        projected = []
        for x, proj, j in ((query, module.q_proj, i), (key, module.k_proj, i // group), (value, module.v_proj, i // group)):
            rows = slice(j * dh, (j + 1) * dh)  # query head i reads key/value head i // group
            w_i = proj.weight[rows].T  # (D, Dh): W_i
            b_i = proj.bias[rows] if proj.bias is not None else 0.0
            projected.append(x @ w_i + b_i)  # (B, L, Dh)
        head, _ = _attention(*projected, mask)  # (B, T, Dh)
        heads.append(head)
    concat = torch.cat(heads, dim=-1)  # (B, T, H * Dh) = (B, T, D)
    return module.out_proj(concat), heads  # (B, T, D)


def ablate_heads(model: nn.Module, heads: Iterable[int]) -> nn.Module:
    """A copy of ``model`` whose first ``MultiHeadAttention`` has ``heads`` removed.

    Head h contributes Concat(...) W^O through columns h*Dh ... (h+1)*Dh - 1 of ``out_proj.weight``;
    zeroing them removes the head exactly (Michel et al., 2019, "Are Sixteen Heads Really Better
    than One?"). The original model is not changed.

    Raises:
        ValueError: if ``model`` has no MultiHeadAttention or a head index is out of range.
    """
    check_instance("model", model, nn.Module, "torch.nn.Module")
    copied = copy.deepcopy(model)
    attention = next((m for m in copied.modules() if isinstance(m, MultiHeadAttention)), None)
    if attention is None:
        raise ValueError("model contains no MultiHeadAttention")
    heads = list(heads)
    for h in heads:
        check_int("heads", h, minimum=0)
        if h >= attention.num_heads:
            raise ValueError(f"heads must be in [0, {attention.num_heads - 1}], got {h}")
    with torch.no_grad():
        for h in heads:
            attention.out_proj.weight[:, h * attention.d_head:(h + 1) * attention.d_head] = 0.0
    return copied


@exhibit
def ablation_table(model: LookupModel, tokens: torch.Tensor, sources: torch.Tensor) -> pd.DataFrame:
    """Accuracy per relation with each single head removed (first row: no head removed).

    Returns:
        DataFrame indexed by "removed" ("none", "head 0", ...) with one column per relation.
    """
    rows = {"none": lookup_accuracy(model, tokens, sources)}
    for h in range(model.attention.num_heads):
        rows[f"head {h}"] = lookup_accuracy(ablate_heads(model, [h]), tokens, sources)
    return pd.DataFrame(rows).T.rename_axis("removed")


def specialization_summary(scores: pd.DataFrame, ablation: pd.DataFrame, owns: float = 0.5,
                           breaks: float = 0.5) -> dict[str, float]:
    """How one trained model divides the lookups among its heads, from its scores and ablation table.

    A head *owns* a lookup when it puts at least ``owns`` of its attention mass on that lookup's
    key (a score of :func:`head_relation_scores`); removing a head *breaks* a lookup when the
    accuracy on it falls below ``breaks`` (a row of :func:`ablation_table`).

    Returns:
        dict with
        ``owned``: lookups owned by at least one head;
        ``duplicated``: lookups owned by two heads or more (the same job done twice);
        ``shared``: lookups with no owner (the mass is spread over heads, or one head serves two);
        ``one_to_one``: 1.0 if every lookup has exactly one owner and no head owns two, else 0.0;
        ``necessary_share``: the share of heads whose removal alone breaks some lookup;
        ``heads``: the number of heads H.

    Raises:
        TypeError, ValueError: for tables that are not DataFrames, do not match, or bounds
            outside (0, 1].

    Michel et al., 2019, remove one head at a time in the same way.
    """
    check_instance("scores", scores, pd.DataFrame, "pandas.DataFrame")
    check_instance("ablation", ablation, pd.DataFrame, "pandas.DataFrame")
    for name, value in (("owns", owns), ("breaks", breaks)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
            raise ValueError(f"{name} must be a number in (0, 1], got {value!r}")
    heads = list(scores.index)
    if list(ablation.columns) != list(scores.columns) or [f"{h}" for h in heads] != [r for r in ablation.index if r != "none"]:
        raise ValueError("ablation must have the relations of scores as columns and one row per head of scores "
                         f"(plus 'none'), got columns {list(ablation.columns)} and rows {list(ablation.index)}")
    owners = scores.to_numpy() >= owns  # (H, R)
    per_lookup = owners.sum(axis=0)  # (R,)
    per_head = owners.sum(axis=1)  # (H,)
    necessary = (ablation.loc[heads].to_numpy() < breaks).any(axis=1)  # (H,)
    return {
        "owned": float((per_lookup >= 1).sum()),
        "duplicated": float((per_lookup >= 2).sum()),
        "shared": float((per_lookup == 0).sum()),
        "one_to_one": float(bool((per_lookup == 1).all() and (per_head <= 1).all())),
        "necessary_share": float(necessary.mean()),
        "heads": float(len(heads)),
    }
