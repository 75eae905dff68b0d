"""Where a trained decoder looks in the source: its cross-attention maps, and how anti-diagonal they are.

Shape legend: N decoder layers, B batch, H heads, T decoder length, S source length.

* :func:`cross_attention_weights`: the cross-attention probabilities of every decoder layer of a
  ``Transformer`` under teacher forcing, read with hooks on the layers' ``cross_attn`` modules
  (the model's code is not changed, and the model is run once).
* :func:`antidiagonal_mass`: the attention mass that decoder position t puts on source position
  S - 1 - t, averaged over positions and examples; 1 for a perfect reversal alignment, 1 / S for
  uniform attention.
* :func:`antidiagonal_table`: that score per decoder layer and head, plus the mean of the heads.

For the reversal task of ``data`` (source x_0 .. x_{S-1}, no <bos>/<eos> in the source; decoder
input <bos>, y_0 .. y_{S-1}; labels y_0 .. y_{S-1}, <eos>, with y_t = x_{S-1-t}), the query at
decoder position t predicts y_t, so the source position it needs is S - 1 - t; the last query
(t = S, predicting <eos>) has no such position and is left out. Bahdanau et al. (2015) showed such
alignments in the attention of a translation model; for reversal the alignment is the anti-diagonal.
"""

from __future__ import annotations

import pandas as pd
import torch

from transformer_course._exhibit import exhibit
from transformer_course._validation import check_instance, check_int, check_tensor
from transformer_course.nn.masks import validate_mask
from transformer_course.nn.model import Transformer
from .training import model_device


@torch.no_grad()
def cross_attention_weights(model: Transformer, src: torch.Tensor, tgt: torch.Tensor,
                            src_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Cross-attention probabilities softmax(Q_i K_i^T / sqrt(Dh)) of every decoder layer and head.

    The model runs once on (``src``, ``tgt``) (teacher forcing: ``tgt`` is the decoder input, e.g.
    <bos> followed by the reference target). A forward pre-hook on each decoder layer's
    ``cross_attn`` asks it for its weights (``need_weights=True``), and a forward hook records them
    and hands the layer the output alone, so the layer computes exactly what it normally does.

    Args:
        model: a trained encoder-decoder ``Transformer`` (put in eval mode here).
        src: (B, S) source token ids.
        tgt: (B, T) decoder input token ids.
        src_mask: optional bool mask broadcastable to (B, T, S) (True = may attend), as in ``model``.

    Returns:
        (N, B, H, T, S) float tensor on the CPU; each row over S sums to 1.

    Raises:
        TypeError, ValueError: for a model that is not a ``Transformer`` or malformed inputs.
    """
    check_instance("model", model, Transformer, "transformer_course.nn.model.Transformer")
    check_tensor("src", src, ndim=2)
    check_tensor("tgt", tgt, ndim=2)
    if src.shape[0] != tgt.shape[0]:
        raise ValueError(f"src and tgt must have the same batch size, got {src.shape[0]} and {tgt.shape[0]}")
    if src_mask is not None:
        validate_mask(src_mask, tgt.shape[1], src.shape[1], "src_mask")
    model.eval()
    device = model_device(model)
    recorded: list[torch.Tensor] = []

    def ask_for_weights(module, args, kwargs):
        return args, {**kwargs, "need_weights": True}

    def keep_weights(module, args, kwargs, output):
        out, weights = output  # (B, T, D), (B, H, T, S)
        recorded.append(weights.detach().cpu())
        return out

    handles = []
    try:
        for layer in model.decoder.layers:
            handles.append(layer.cross_attn.register_forward_pre_hook(ask_for_weights, with_kwargs=True))
            handles.append(layer.cross_attn.register_forward_hook(keep_weights, with_kwargs=True))
        model(src.to(device), tgt.to(device), src_mask=None if src_mask is None else src_mask.to(device))
    finally:
        for handle in handles:
            handle.remove()
    return torch.stack(recorded)  # (N, B, H, T, S)


def antidiagonal_mass(weights: torch.Tensor, width: int = 0) -> torch.Tensor:
    """Mean mass near the anti-diagonal: mean over b and t < min(T, S) of sum_{|s - (S-1-t)| <= width} weights[..., t, s].

    Args:
        weights: (..., B, H, T, S) attention probabilities, e.g. (N, B, H, T, S) from
            :func:`cross_attention_weights`. Queries t >= S (for reversal, the <eos> step) are
            left out.
        width: how many neighbours on each side of the mirrored position S - 1 - t also count
            (0 = the mirrored position alone).

    Returns:
        (..., H) tensor of scores in [0, 1]: 1 when every query reads only its mirrored source
        position (or its neighbours), about (2 width + 1) / S for uniform attention.

    Raises:
        TypeError, ValueError: if ``weights`` is not a floating tensor with at least 4 dimensions,
            or ``width`` is not an int >= 0.
    """
    check_tensor("weights", weights, floating=True)
    if weights.ndim < 4:
        raise ValueError(f"weights must have shape (..., B, H, T, S), got {tuple(weights.shape)}")
    width = check_int("width", width, minimum=0)
    t, s = weights.shape[-2:]
    queries = torch.arange(min(t, s), device=weights.device)  # (T',)
    keys = torch.arange(s, device=weights.device)  # (S,)
    near = (keys - (s - 1 - queries)[:, None]).abs() <= width  # (T', S)
    mirrored = (weights[..., : len(queries), :] * near).sum(dim=-1)  # (..., B, H, T')
    return mirrored.mean(dim=-1).mean(dim=-2)  # (..., B, H) -> (..., H)


@exhibit
def antidiagonal_table(weights: torch.Tensor, width: int = 0) -> pd.DataFrame:
    """:func:`antidiagonal_mass` of each decoder layer and head, and the mean over the heads.

    Args:
        weights: (N, B, H, T, S) cross-attention probabilities from :func:`cross_attention_weights`.
        width: neighbours of the mirrored position that also count (see :func:`antidiagonal_mass`).

    Returns:
        DataFrame with one row per decoder layer ("decoder layer 1", ...) and columns "head 1" ...
        "head H" and "mean of heads" (the score of the head-averaged map, since the score is linear).

    Raises:
        TypeError, ValueError: if ``weights`` is not a floating 5-D tensor.
    """
    check_tensor("weights", weights, ndim=5, floating=True)
    scores = antidiagonal_mass(weights, width).double()  # (N, H)
    n, h = scores.shape
    table = pd.DataFrame(scores.cpu().numpy(), index=[f"decoder layer {i + 1}" for i in range(n)],
                         columns=[f"head {k + 1}" for k in range(h)])
    table["mean of heads"] = scores.mean(dim=1).cpu().numpy()
    return table
