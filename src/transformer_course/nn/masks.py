"""Boolean attention masks. Convention: True = may attend; shapes broadcast to (B, H, T, S).

Every function returns a ``torch.bool`` tensor. A mask is combined with scores by
``scores.masked_fill(~mask, -inf)``, which is the additive mask M of the papers
(0 where allowed, -inf where blocked) written as a boolean.
"""

from __future__ import annotations

import torch

from transformer_course._validation import check_bool, check_int, check_tensor


def causal_mask(t: int, s: int | None = None, device: torch.device | str | None = None) -> torch.Tensor:
    """Causal mask M[i, j] = (j <= i + (s - t)): query i sees keys up to its own position.

    When ``s > t`` (the queries are the last ``t`` of ``s`` positions, as when decoding with a
    cache) the diagonal shifts so that query i sits at key position ``i + s - t``.

    Args:
        t: number of queries T (>= 1).
        s: number of keys S (>= t); defaults to ``t``.
        device: where to build the mask.

    Returns:
        (T, S) bool tensor, True on and below the (shifted) diagonal.

    Raises:
        TypeError, ValueError: if ``t`` or ``s`` is not an int >= 1, or ``s < t``.

    Vaswani et al., 2017, "Attention Is All You Need", section 3.2.3.
    """
    t = check_int("t", t, minimum=1)
    s = t if s is None else check_int("s", s, minimum=1)
    if s < t:
        raise ValueError(f"s must be >= t (every query needs a key), got t={t}, s={s}")
    i = torch.arange(t, device=device).unsqueeze(1) + (s - t)  # (T, 1)
    j = torch.arange(s, device=device).unsqueeze(0)  # (1, S)
    return j <= i  # (T, S)


def sliding_window_mask(t: int, window: int, causal: bool = False,
                        device: torch.device | str | None = None) -> torch.Tensor:
    """Band mask M[i, j] = |i - j| <= window // 2 (or 0 <= i - j < window when ``causal``).

    Symmetric windows follow the card (each token sees itself and ``window // 2`` neighbours on
    each side); causal windows see the last ``window`` positions including itself. Mistral 7B's
    paper counts its window W differently: position i attends to i - W .. i, W + 1 positions, so
    its W is ``window - 1`` here.

    Args:
        t: sequence length (queries and keys), >= 1.
        window: window width w, >= 1.
        causal: if True, only look back.
        device: where to build the mask.

    Returns:
        (T, T) bool tensor.

    Raises:
        TypeError, ValueError: if ``t`` or ``window`` is not an int >= 1.

    Beltagy et al., 2020, "Longformer: The Long-Document Transformer".
    """
    t = check_int("t", t, minimum=1)
    behind, ahead = band_limits(window, causal)
    # Broadcast comparisons build the (T, T) bool mask directly, with no (T, T) integer temporary.
    i = torch.arange(t, device=device).unsqueeze(1)  # (T, 1)
    j = torch.arange(t, device=device).unsqueeze(0)  # (1, T)
    return (j >= i - behind) & (j <= i + ahead)  # (T, T)


def dilated_mask(t: int, dilation: int, causal: bool = False,
                 device: torch.device | str | None = None) -> torch.Tensor:
    """Strided mask M[i, j] = ((j - i) mod dilation == 0); dilation 1 is full attention.

    Args:
        t: sequence length, >= 1.
        dilation: stride d between attended keys, >= 1.
        causal: if True, additionally require j <= i.
        device: where to build the mask.

    Returns:
        (T, T) bool tensor.

    Raises:
        TypeError, ValueError: if ``t`` or ``dilation`` is not an int >= 1.

    Child et al., 2019, "Generating Long Sequences with Sparse Transformers" (strided pattern).
    """
    t = check_int("t", t, minimum=1)
    dilation = check_int("dilation", dilation, minimum=1)
    position = torch.arange(t, device=device)  # (T,)
    residue = position % dilation  # (T,): j - i is a multiple of d iff i and j share the residue
    mask = residue.unsqueeze(1) == residue.unsqueeze(0)  # (T, T)
    return mask & (position.unsqueeze(0) <= position.unsqueeze(1)) if causal else mask


def band_limits(window: int, causal: bool = False) -> tuple[int, int]:
    """The band of :func:`sliding_window_mask` as (behind, ahead).

    Query i sees keys j with ``i - behind <= j <= i + ahead``: (w // 2, w // 2) for the symmetric
    window, (w - 1, 0) for the causal one.

    Args:
        window: window width w >= 1.
        causal: whether the window only looks back.

    Returns:
        (behind, ahead): how many keys before and after the query the band reaches.

    Raises:
        TypeError, ValueError: if ``window`` is not an int >= 1 or ``causal`` not a bool.
    """
    window = check_int("window", window, minimum=1)
    return (window - 1, 0) if check_bool("causal", causal) else (window // 2, window // 2)


def dilated_sliding_window_mask(t: int, window: int, dilation: int, causal: bool = False,
                                device: torch.device | str | None = None) -> torch.Tensor:
    """Dilated window M[i, j] = ((i - j) mod d == 0) and |i - j| <= d * (w // 2).

    The window of :func:`sliding_window_mask` with gaps of d - 1 between
    attended keys: the same number of keys reaches d times as far. Causal: (i - j) mod d == 0 and
    0 <= i - j <= d (w - 1). ``dilation=1`` is the plain window.

    Args:
        t: sequence length T >= 1.
        window: keys per query w >= 1 (counting the query itself).
        dilation: gap d >= 1 between attended keys.
        causal: if True, only look back.
        device: where to build the mask.

    Returns:
        (T, T) bool tensor, True = may attend.

    Raises:
        TypeError, ValueError: if an argument is not an int >= 1 (``causal``: not a bool).

    Beltagy et al., 2020, "Longformer", section 3.1 (dilated sliding window).
    """
    t = check_int("t", t, minimum=1)
    dilation = check_int("dilation", dilation, minimum=1)
    behind, ahead = band_limits(window, causal)
    offset = torch.arange(t, device=device).unsqueeze(1) - torch.arange(t, device=device)  # (T, T) i - j
    return (offset.remainder(dilation) == 0) & (offset <= behind * dilation) & (offset >= -ahead * dilation)


def padding_mask(lengths: torch.Tensor | list[int], t: int) -> torch.Tensor:
    """Key padding mask M[b, 0, 0, j] = (j < lengths[b]), broadcastable to (B, H, T, S).

    Args:
        lengths: (B,) number of real (non-pad) tokens per sequence, each in [1, t].
        t: padded length S.

    Returns:
        (B, 1, 1, S) bool tensor.

    Raises:
        TypeError, ValueError: if ``lengths`` is not 1-D integer data in [1, t].
    """
    t = check_int("t", t, minimum=1)
    if isinstance(lengths, (list, tuple)):
        lengths = torch.tensor(lengths)
    lengths = check_tensor("lengths", lengths, ndim=1)
    if lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise TypeError(f"lengths must hold integers, got dtype {lengths.dtype}")
    if lengths.numel() and (lengths.min() < 1 or lengths.max() > t):
        raise ValueError(f"lengths must lie in [1, t={t}], got {lengths.tolist()}")
    positions = torch.arange(t, device=lengths.device)  # (S,)
    return (positions.unsqueeze(0) < lengths.unsqueeze(1))[:, None, None, :]  # (B, 1, 1, S)


def check_mask(mask: object, t: int, s: int, name: str = "mask") -> torch.Tensor:
    """Check that ``mask`` is a bool tensor broadcastable to (..., T, S); reads only its metadata.

    Cheap enough for every forward pass: no value is read, so nothing waits for the device.

    Raises:
        TypeError: if ``mask`` is not a bool tensor.
        ValueError: if its shape does not broadcast to (..., T, S).
    """
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of dtype torch.bool, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(f"{name} must have dtype torch.bool (True = may attend), got {mask.dtype}; "
                        "pass additive float terms as bias instead")
    if mask.dim() < 2 or mask.shape[-2] not in (1, t) or mask.shape[-1] not in (1, s):
        raise ValueError(f"{name} must broadcast to (..., T={t}, S={s}), got shape {tuple(mask.shape)}")
    return mask


def validate_mask(mask: object, t: int, s: int, name: str = "mask") -> torch.Tensor:
    """:func:`check_mask`, and every query keeps at least one key (else its softmax row is NaN).

    Reading the values waits for the device, so public entry points call this once per call
    (``scaled_dot_product_attention``, ``Transformer.forward``); layers call :func:`check_mask`.

    Raises:
        TypeError, ValueError: as :func:`check_mask`, and ValueError if a query row has no key.
    """
    check_mask(mask, t, s, name)
    if not bool(mask.any(dim=-1).all()):
        raise ValueError(f"{name} leaves at least one query with no key to attend to "
                         "(a fully masked row would give NaN)")
    return mask
