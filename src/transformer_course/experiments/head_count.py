"""Heads at a fixed width: the four-lookups task trained with h heads of width d_model / h, for several h.

Shape legend: B batch, T sequence length, R relations, D = d_model, Dh = D / h.

Vaswani et al. (2017, Table 3, rows A) vary the number of heads h of the base model while keeping
the computation constant (d_k = d_v = d_model / h): one head is 0.9 BLEU worse than the best
setting (h = 8), and too many heads (h = 32, d_k = 16) also lose quality. This module runs the same
ablation on the toy task of :mod:`.head_specialization`: the same ``LookupModel`` at the same
``d_model``, the same steps, data and seed, only ``num_heads`` (and so ``d_head``) changes. The
parameter count does not depend on h (the projections are D x D whatever the split), which
:func:`head_count_table` reports beside the accuracy of every relation.

* :func:`train_head_counts`: one trained ``LookupModel`` per head count (already trained models can
  be passed in and are reused, not retrained).
* :func:`head_count_table`: accuracy per relation, d_head and parameters, one row per head count.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd
import torch

from transformer_course._exhibit import exhibit
from transformer_course._validation import check_instance, check_int, check_tensor
from .head_specialization import LookupModel, lookup_accuracy, train_lookup_model

HEAD_COUNTS = (1, 2, 4, 8)


def _check_head_counts(heads: object, d_model: int) -> tuple[int, ...]:
    if isinstance(heads, (str, bytes)) or not isinstance(heads, Sequence):
        raise TypeError(f"heads must be a sequence of ints, got {type(heads).__name__} ({heads!r})")
    counts = tuple(check_int("heads", h, minimum=1) for h in heads)
    if not counts:
        raise ValueError("heads must hold at least one head count, got an empty sequence")
    if len(set(counts)) != len(counts):
        raise ValueError(f"heads must not repeat a head count, got {list(counts)}")
    bad = [h for h in counts if d_model % h]
    if bad:
        raise ValueError(f"heads must divide d_model={d_model} (so that d_head = d_model / h), got {bad}")
    return counts


def train_head_counts(
    heads: Sequence[int] = HEAD_COUNTS,
    d_model: int = 32,
    seed: int = 0,
    steps: int = 400,
    trained: Mapping[int, LookupModel] | None = None,
    **train_kwargs: object,
) -> dict[int, LookupModel]:
    """Train one :class:`LookupModel` per head count h, all at width ``d_model`` (so d_head = d_model / h).

    Every model gets the same ``seed`` (initial weights and batches), ``steps`` and other training
    arguments; only ``num_heads`` differs. A model in ``trained`` (keyed by h) is used as it is,
    after checking that its width and head count match, which saves retraining the model a chapter
    has already trained with the same settings.

    Args:
        heads: the head counts h to compare, each dividing ``d_model``.
        d_model: the width D shared by all models.
        seed: seeds every model's initial weights and data.
        steps: Adam steps per model.
        trained: optional already trained models, keyed by head count.
        **train_kwargs: further arguments of :func:`.head_specialization.train_lookup_model`
            (``batch_size``, ``lr``, ``device``, ...).

    Returns:
        dict h -> trained model (eval mode), in the order of ``heads``.

    Raises:
        TypeError, ValueError: for head counts that are not distinct positive divisors of
            ``d_model``, or a model in ``trained`` whose width or head count does not match.

    Vaswani et al., 2017, Table 3, rows (A).
    """
    d_model = check_int("d_model", d_model, minimum=1)
    counts = _check_head_counts(heads, d_model)
    trained = {} if trained is None else dict(check_instance("trained", trained, Mapping, "a mapping h -> model"))
    for h, model in trained.items():
        check_instance(f"trained[{h!r}]", model, LookupModel)
        attention = model.attention
        if attention.num_heads != h or attention.d_model != d_model:
            raise ValueError(f"trained[{h!r}] must have num_heads={h} and d_model={d_model}, got "
                             f"num_heads={attention.num_heads} and d_model={attention.d_model}")
    models = {}
    for h in counts:
        if h in trained:
            models[h] = trained[h]
        else:
            models[h], _ = train_lookup_model(seed=seed, steps=steps, d_model=d_model, num_heads=h, **train_kwargs)
    return models


@exhibit
def head_count_table(models: Mapping[int, LookupModel], tokens: torch.Tensor, sources: torch.Tensor) -> pd.DataFrame:
    """Accuracy per relation of each model of :func:`train_head_counts`, with its d_head and parameters.

    Args:
        models: dict h -> trained ``LookupModel`` with h heads.
        tokens: (B, T) test token ids.
        sources: (B, R, T) their relation sources (from ``make_lookup_batch``).

    Returns:
        DataFrame indexed by "heads h", with columns "d_head", "parameters" and one accuracy column
        (a fraction in [0, 1]) per relation.

    Raises:
        TypeError, ValueError: for an empty mapping, a value that is not a ``LookupModel`` or a
            key that is not its head count.
    """
    check_instance("models", models, Mapping, "a mapping h -> model")
    if not models:
        raise ValueError("models must hold at least one model, got an empty mapping")
    check_tensor("tokens", tokens, ndim=2)
    check_tensor("sources", sources, ndim=3)
    rows = {}
    for h, model in models.items():
        check_instance(f"models[{h!r}]", model, LookupModel)
        if model.attention.num_heads != h:
            raise ValueError(f"models[{h!r}] must have {h} heads, got {model.attention.num_heads}")
        accuracy = lookup_accuracy(model, tokens, sources)  # (R,)
        rows[h] = {"d_head": model.attention.d_head,
                   "parameters": sum(p.numel() for p in model.parameters()), **accuracy.to_dict()}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("heads h")
