"""Induction-head measurements (Olsson et al., 2022; Elhage et al., 2021), from attention patterns and losses.

An induction head completes ``[A][B] ... [A] -> [B]``: at the second ``[A]`` it attends to the token
*after* the earlier ``[A]`` (prefix matching) and raises that token's logit (copying). On a random
token sequence of period P repeated, query i >= P finds its earlier occurrence at i - P, so an
induction head puts its weight on key i - P + 1. These functions turn that into numbers:

* ``prefix_matching_score``: per head, the mean attention from each query of the repeats to key
  i - P + 1 (1 = a perfect induction head; a head spread evenly over i + 1 keys scores 1 / (i + 1));
* ``previous_token_score``: per head, the mean attention to key i - 1;
* ``copying_score``: of a head's OV circuit (a V x V matrix), sum(eigenvalues) / sum(|eigenvalues|):
  +1 when the head adds to the logit of the token it reads, -1 when it subtracts;
* ``in_context_learning_score``: loss at a late position minus loss at an early one (negative when
  the context helps);
* ``repeat_losses``: the loss on the first copy of a repeated sequence and on the later copies;
* ``composition_scores``: how much a later head's query, key or value reads what an earlier head
  writes (Q-, K- and V-composition, from the weights alone).

Shape legend: B batch, H heads, T positions, V vocabulary.
"""

from __future__ import annotations

import torch

from transformer_course._validation import check_int, check_tensor


def repeated_random_tokens(batch_size: int, period: int, vocab_size: int, generator: torch.Generator,
                           repeats: int = 2) -> torch.Tensor:
    """(B, repeats * P) tokens: a uniform random sequence of length ``period`` written ``repeats`` times.

    Nothing but the earlier copy predicts a token of the later ones: a model's loss on the later
    copies falls below its loss on the first only if it copies from context.
    """
    batch_size = check_int("batch_size", batch_size, minimum=1)
    period = check_int("period", period, minimum=2)
    vocab_size = check_int("vocab_size", vocab_size, minimum=2)
    repeats = check_int("repeats", repeats, minimum=2)
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    pattern = torch.randint(0, vocab_size, (batch_size, period), generator=generator)  # (B, P)
    return pattern.repeat(1, repeats)  # (B, repeats * P)


def induction_guess_accuracy(tokens: torch.Tensor) -> tuple[float, float]:
    """How often the literal induction rule would be right on ``tokens`` (B, T): (accuracy, coverage).

    At each position i that has an earlier occurrence of its token (the most recent, j < i), the
    rule predicts token i + 1 to be token j + 1, what followed it last time. ``coverage`` is the
    share of positions 1 .. T - 2 that have such an occurrence, ``accuracy`` the share of those at
    which the guess is right (NaN if none has). On a random string repeated it is 1 on the second
    copy; on prose it says how much there is for an induction head to copy.
    """
    check_tensor("tokens", tokens, ndim=2)
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.shape[1] < 3:
        raise ValueError(f"tokens must be integer ids (B, T) with T >= 3, got {tokens.dtype} {tuple(tokens.shape)}")
    right = covered = positions = 0
    for i in range(1, tokens.shape[1] - 1):
        earlier = tokens[:, :i] == tokens[:, i:i + 1]  # (B, i)
        has = earlier.any(dim=1)  # (B,)
        last = i - 1 - earlier.flip(1).int().argmax(dim=1)  # (B,) the most recent earlier occurrence
        guess = tokens.gather(1, (last + 1).unsqueeze(1)).squeeze(1)  # (B,)
        right += int(((guess == tokens[:, i + 1]) & has).sum())
        covered += int(has.sum())
        positions += tokens.shape[0]
    return (right / covered if covered else float("nan")), covered / positions


def _check_weights(weights: object) -> torch.Tensor:
    check_tensor("weights", weights, ndim=4, floating=True)
    if weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"weights must be self-attention (B, H, T, T), got {tuple(weights.shape)}")
    return weights


def prefix_matching_score(weights: torch.Tensor, period: int) -> torch.Tensor:
    """Per head, the mean attention from query i to key i - P + 1, over the queries i >= P of the repeats.

    Args:
        weights: (B, H, T, T) attention probabilities on sequences of period ``period`` (see
            :func:`repeated_random_tokens`).
        period: P, with 2 <= P < T.

    Returns:
        (H,) scores in [0, 1].

    Olsson et al., 2022, "In-context Learning and Induction Heads", section 2 (prefix matching).
    """
    weights = _check_weights(weights)
    t = weights.shape[-1]
    period = check_int("period", period, minimum=2)
    if period >= t:
        raise ValueError(f"period must be shorter than the sequence (T={t}), got {period}")
    queries = torch.arange(period, t, device=weights.device)  # (T - P,)
    return weights[:, :, queries, queries - period + 1].mean(dim=(0, 2))  # (H,)


def previous_token_score(weights: torch.Tensor) -> torch.Tensor:
    """Per head, the mean attention from query i to key i - 1, over queries 1 .. T-1: (B, H, T, T) -> (H,)."""
    weights = _check_weights(weights)
    t = weights.shape[-1]
    if t < 2:
        raise ValueError(f"weights must cover at least two positions, got T={t}")
    queries = torch.arange(1, t, device=weights.device)  # (T - 1,)
    return weights[:, :, queries, queries - 1].mean(dim=(0, 2))  # (H,)


def copying_score(ov_circuit: torch.Tensor) -> torch.Tensor:
    """sum(lambda) / sum(|lambda|) over the eigenvalues lambda of each (V, V) OV circuit.

    The OV circuit maps a token the head attends to (one-hot, V) to what the head adds to the
    logits (V). A copying head has mostly positive eigenvalues: reading token a raises the logit of
    token a. The score is real (complex eigenvalues come in conjugate pairs) and lies in [-1, 1].

    Args:
        ov_circuit: (..., V, V) matrices, rows = the token read, columns = the logit written.

    Returns:
        (...) scores.

    Elhage et al., 2021, "A Mathematical Framework for Transformer Circuits" (the eigenvalue
    summary of copying); Olsson et al., 2022, use it for induction heads.
    """
    check_tensor("ov_circuit", ov_circuit, floating=True)
    if ov_circuit.dim() < 2 or ov_circuit.shape[-1] != ov_circuit.shape[-2]:
        raise ValueError(f"ov_circuit must be square (..., V, V), got {tuple(ov_circuit.shape)}")
    eigenvalues = torch.linalg.eigvals(ov_circuit.double())  # (..., V) complex
    total = eigenvalues.abs().sum(dim=-1)  # (...)
    if bool((total == 0).any()):
        raise ValueError("ov_circuit must not be the zero matrix (its copying score is undefined)")
    return (eigenvalues.sum(dim=-1).real / total).to(ov_circuit.dtype)  # (...)


def _check_token_losses(token_losses: object) -> torch.Tensor:
    check_tensor("token_losses", token_losses, ndim=2, floating=True)
    return token_losses


def in_context_learning_score(token_losses: torch.Tensor, early: int | range, late: int | range) -> float:
    """Mean loss at the ``late`` position(s) minus mean loss at the ``early`` position(s), over the batch.

    Olsson et al. (2022) use the 500th and the 50th token of 512-token contexts; negative means that
    a token predicted with more context before it is predicted better. A short context has few
    positions to average, so ``early`` and ``late`` may each be a ``range`` of positions (a band).

    Args:
        token_losses: (B, T) per-token losses (position t = the loss of predicting token t + 1).
        early, late: a position or a range of positions, all early ones before all late ones, < T.
    """
    token_losses = _check_token_losses(token_losses)
    t = token_losses.shape[1]
    bands = []
    for name, band in (("early", early), ("late", late)):
        band = range(check_int(name, band, minimum=0), band + 1) if not isinstance(band, range) else band
        if len(band) == 0 or band.step != 1 or band.start < 0:
            raise ValueError(f"{name} must be a position or a non-empty range of positions, got {band!r}")
        bands.append(band)
    early, late = bands
    if not early.stop <= late.start or late.stop > t:
        raise ValueError(f"early and late must satisfy early < late < T={t}, got {early} and {late}")
    return float(token_losses[:, late.start:late.stop].mean() - token_losses[:, early.start:early.stop].mean())


def repeat_losses(token_losses: torch.Tensor, period: int) -> tuple[float, float]:
    """Mean loss on the first copy and on the later copies of sequences of period ``period``.

    Position t predicts token t + 1. The first copy's tokens 1 .. P-1 are predicted at positions
    0 .. P-2; the later copies' tokens P + 1, P + 2, ... at positions P, P + 1, ..., where the current
    token has occurred before and the token after its earlier occurrence is the answer. Position
    P - 1 (predicting token P, whose predecessor occurred only once) belongs to neither.

    Args:
        token_losses: (B, T - 1) or (B, T) per-token losses on repeated sequences.
        period: P >= 2, shorter than the positions given.

    Returns:
        (first, later) mean losses.
    """
    token_losses = _check_token_losses(token_losses)
    period = check_int("period", period, minimum=2)
    if period + 1 >= token_losses.shape[1]:
        raise ValueError(f"period must leave a later copy in the {token_losses.shape[1]} positions, got {period}")
    return float(token_losses[:, :period - 1].mean()), float(token_losses[:, period:].mean())



def composition_score(reader: torch.Tensor, writer: torch.Tensor) -> torch.Tensor:
    """||reader @ writer||_F / (||reader||_F ||writer||_F): how much of ``writer``'s output ``reader`` reads.

    1 when the reader reads exactly the subspace the writer writes to, with aligned singular
    directions; small (about 1/sqrt(D) for random D x D matrices) when they are unrelated.

    Args:
        reader, writer: (..., D, D) matrices acting on residual-stream vectors (column convention:
            the writer maps x to ``writer @ x``, the reader reads ``reader @ (writer @ x)``).

    Returns:
        (...) scores in [0, 1].

    Elhage et al., 2021, "A Mathematical Framework for Transformer Circuits", section on composition.
    """
    check_tensor("reader", reader, floating=True)
    check_tensor("writer", writer, floating=True)
    if reader.dim() < 2 or writer.dim() < 2 or reader.shape[-1] != writer.shape[-2]:
        raise ValueError(f"reader (..., D, D) and writer (..., D, D) must chain, got {tuple(reader.shape)} "
                         f"and {tuple(writer.shape)}")
    norms = torch.linalg.matrix_norm(reader) * torch.linalg.matrix_norm(writer)  # (...)
    if bool((norms == 0).any()):
        raise ValueError("reader and writer must not be zero matrices (their composition score is undefined)")
    return torch.linalg.matrix_norm(reader @ writer) / norms  # (...)


def composition_scores(qk: torch.Tensor, ov_later: torch.Tensor, ov_earlier: torch.Tensor) -> dict[str, torch.Tensor]:
    """Q-, K- and V-composition of every later head with every earlier head.

    A later head's attention score between a query vector x_q and a key vector x_k is the bilinear
    form x_q^T W_QK x_k; its output is W_OV x_k. An earlier head adds W_OV' x to the residual
    stream, so the later head's key reads it through W_QK W_OV' (K-composition), its query through
    W_QK^T W_OV' (Q-composition) and its value through W_OV W_OV' (V-composition).

    Args:
        qk: (H2, D, D) the later layer's W_QK = W_Q^T W_K per head.
        ov_later: (H2, D, D) the later layer's W_OV = W_O W_V per head.
        ov_earlier: (H1, D, D) the earlier layer's W_OV per head.

    Returns:
        {"Q": (H2, H1), "K": (H2, H1), "V": (H2, H1)}: row = later head, column = earlier head.

    Elhage et al., 2021 (composition scores); Olsson et al., 2022, use K-composition to find the
    previous-token head an induction head reads.
    """
    for name, matrices in (("qk", qk), ("ov_later", ov_later), ("ov_earlier", ov_earlier)):
        check_tensor(name, matrices, ndim=3, floating=True)
        if matrices.shape[-1] != matrices.shape[-2] or matrices.shape[-1] != qk.shape[-1]:
            raise ValueError(f"{name} must be (heads, D, D) with the D of qk, got {tuple(matrices.shape)}")
    if qk.shape[0] != ov_later.shape[0]:
        raise ValueError(f"qk and ov_later must have one matrix per later head, got {qk.shape[0]} and {ov_later.shape[0]}")
    later = {"Q": qk.transpose(-2, -1), "K": qk, "V": ov_later}
    return {kind: composition_score(reader.unsqueeze(1), ov_earlier.unsqueeze(0))  # (H2, H1)
            for kind, reader in later.items()}
