"""Beam search for an encoder-decoder ``Transformer``, batched over sources (Vaswani et al., 2017, §6.1).

Greedy decoding keeps one hypothesis and extends it by the single most probable token. Beam search
keeps the ``beam_width`` most probable partial outputs (by the sum of their tokens' log-probabilities),
extends every one by every token, and keeps the ``beam_width`` best of the extensions. A finished
hypothesis (it emitted ``eos_id``) can only be extended by ``eos_id`` at no cost, so its score stays
fixed while it competes with the unfinished ones. With ``beam_width=1`` this is greedy decoding,
step for step (``Transformer.greedy_decode``).

No length penalty: the paper's alpha = 0.6 matters when hypotheses of different lengths compete,
and the course's toy tasks have outputs of a fixed length.

Shape legend: B sources, W beam width, L tokens so far, S source length, D d_model, V vocabulary.
"""

from __future__ import annotations

import torch

from transformer_course._validation import check_instance, check_int, check_tensor
from .model import Transformer


@torch.no_grad()
def beam_search(model: Transformer, src: torch.Tensor, max_len: int, bos_id: int, eos_id: int,
                beam_width: int = 4) -> torch.Tensor:
    """The highest-scoring output of a beam search of width ``beam_width``, for every source.

    Args:
        model: the encoder-decoder (used as it is; put it in eval mode first).
        src: (B, S) source ids.
        max_len: most tokens generated after ``bos_id``.
        bos_id, eos_id: the start and end tokens.
        beam_width: hypotheses kept per source (1 = greedy decoding).

    Returns:
        (B, 1 + L) token ids starting with ``bos_id``, L <= ``max_len``, in the format of
        ``Transformer.greedy_decode``: once a sequence emits ``eos_id`` it is padded with ``eos_id``,
        and decoding stops early once every hypothesis has finished.

    Raises:
        TypeError, ValueError: for a model that is not a ``Transformer``, a non-2-D ``src`` or
            non-positive sizes.
    """
    check_instance("model", model, Transformer, "transformer_course.nn.model.Transformer")
    check_tensor("src", src, ndim=2)
    max_len = check_int("max_len", max_len, minimum=1)
    bos_id, eos_id = check_int("bos_id", bos_id, minimum=0), check_int("eos_id", eos_id, minimum=0)
    width = check_int("beam_width", beam_width, minimum=1)
    batch = src.shape[0]
    memory = model.encode(src).repeat_interleave(width, dim=0)  # (B*W, S, D): W copies of each source's memory
    out = torch.full((batch * width, 1), bos_id, dtype=torch.long, device=src.device)  # (B*W, 1)
    scores = torch.full((batch, width), float("-inf"), device=src.device)  # (B, W)
    scores[:, 0] = 0.0  # at the start the W beams are one hypothesis: expand only the first
    finished = torch.zeros(batch * width, dtype=torch.bool, device=src.device)  # (B*W,)
    for _ in range(max_len):
        log_p = model.decode(out, memory)[:, -1].log_softmax(dim=-1)  # (B*W, V)
        vocab = log_p.shape[-1]
        ended = torch.full_like(log_p, float("-inf"))
        ended[:, eos_id] = 0.0  # a finished hypothesis continues with <eos>, at no cost
        log_p = torch.where(finished.unsqueeze(1), ended, log_p)  # (B*W, V)
        candidates = scores.unsqueeze(-1) + log_p.view(batch, width, vocab)  # (B, W, V)
        scores, index = candidates.view(batch, width * vocab).topk(width, dim=-1)  # (B, W) each, best first
        parent = index // vocab + torch.arange(batch, device=src.device).unsqueeze(1) * width  # (B, W): rows of out
        token = (index % vocab).view(-1)  # (B*W,)
        out = torch.cat((out[parent.view(-1)], token.unsqueeze(1)), dim=1)  # (B*W, L + 1)
        finished = finished[parent.view(-1)] | (token == eos_id)
        if bool(finished.all()):
            break
    return out.view(batch, width, -1)[:, 0]  # (B, 1 + L): the best hypothesis of every source
