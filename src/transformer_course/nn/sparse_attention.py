"""Sparse attention that never builds the n x n score matrix: banded (sliding window) and dilated.

Shape legend: ... any leading batch/head dims (B, H), N their product, T sequence length
(queries = keys), Dh head width, Dv value width, nb number of blocks, b block size, L keys per
block window, E edge blocks.

Each function here equals dense attention with the matching mask of :mod:`transformer_course.nn.masks`
(the tests check it in float64), but computes only the scores the mask keeps:

* :func:`sliding_window_attention` cuts the sequence into query blocks of ``b`` positions and
  compares each block with the ``L = b + w - 1`` keys its rows can see: memory and compute
  O(T * (b + w)) instead of O(T^2). Three interchangeable paths compute it:

  - ``"blocked"``, the readable one the chapter explains: all blocks in one batched matmul over a
    strided view of the keys, then one softmax; it supports autograd.
  - ``"fused"``, the fast CPU path for inference: the same blocks, handed as a batch of small
    attention problems (each block's queries against its window of keys, under the shared band
    pattern) to PyTorch's fused ``F.scaled_dot_product_attention``, whose kernel keeps each tile
    of scores in the cache while it takes the softmax and the weighted sum: the scores never
    travel to main memory, and the keys are read through a strided view, never gathered.
  - ``"flex"``: PyTorch's FlexAttention with a block mask built once per (T, band, device); on
    CUDA it is compiled into one fused kernel (the score tiles never leave on-chip memory).

  ``implementation="auto"`` takes FlexAttention on CUDA, the fused path on other devices when no
  gradient is needed, and the blocked path otherwise.
* :func:`dilated_attention` regroups the sequence into the ``d`` interleaved subsequences
  ``r, r + d, r + 2d, ...`` and runs full attention inside each: ``d * (T / d)^2 = T^2 / d`` scores.
* :func:`dilated_sliding_window_attention` does both (Longformer's dilated window).

Measuring what these calls allocate and how long they take lives in :mod:`transformer_course.measure.memory`
and :mod:`transformer_course.measure.timing`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from transformer_course._validation import check_bool, check_choice, check_int
from .attention import _attention, _check_qkv
from .masks import band_limits, causal_mask


def _check_self_attention(q: object, k: object, v: object) -> int:
    """Validate q, k, v for self-attention over one sequence; return its length T."""
    _check_qkv(q, k, v)
    if q.shape[-2] != k.shape[-2]:
        raise ValueError(f"q and k must have the same length T (self-attention over one sequence), "
                         f"got q {tuple(q.shape)} and k {tuple(k.shape)}")
    if not (q.shape[:-2] == k.shape[:-2] == v.shape[:-2]):
        raise ValueError(f"q, k and v must share their leading dims, got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    return q.shape[-2]


def score_counts(t: int, window: int | None = None, dilation: int | None = None,
                 causal: bool = False) -> dict[str, int]:
    """Count query-key scores: dense T^2, the pairs the mask keeps, and what our blocked code computes.

    With ``window`` alone the pattern is the sliding window, with ``dilation`` alone the dilated
    one, with both the dilated sliding window. Nothing of size (T, T) is built, so the counts work
    at T = 16,384 and beyond.

    Args:
        t: sequence length T >= 1.
        window: window width w (optional).
        dilation: dilation d (optional).
        causal: causal variant of the pattern.

    Returns:
        {"dense": T^2, "kept": number of True entries of the mask, "computed": scores that
        :func:`sliding_window_attention` / :func:`dilated_attention` /
        :func:`dilated_sliding_window_attention` actually compute (kept plus the masked corners of
        the blocks)}.

    Raises:
        TypeError, ValueError: on non-int or non-positive arguments, or if neither pattern is given.
    """
    t = check_int("t", t, minimum=1)
    check_bool("causal", causal)
    if window is None and dilation is None:
        raise ValueError("score_counts needs a window, a dilation or both, got neither")
    d = 1 if dilation is None else check_int("dilation", dilation, minimum=1)
    if window is None:
        behind, ahead = t - 1, (0 if causal else t - 1)
    else:
        behind, ahead = band_limits(window, causal)
        behind, ahead = min(behind * d, t - 1), min(ahead * d, t - 1)
    offsets = torch.arange(-ahead, behind + 1, dtype=torch.int64)  # k = i - j, occurring T - |k| times
    offsets = offsets[offsets.remainder(d) == 0]
    kept = int((t - offsets.abs()).sum())
    m, extra = divmod(t, d)
    sizes = [m + 1] * extra + ([m] * (d - extra) if m else [])  # lengths of the residue classes
    if window is None:
        computed = sum(size * size for size in sizes)
    else:
        class_behind, class_ahead = band_limits(window, causal)
        block = _default_block(class_behind, class_ahead)
        computed = 0
        for size in sizes:
            lo, hi = min(class_behind, size - 1), min(class_ahead, size - 1)
            b = min(block, size)
            computed += -(-size // b) * b * (b + lo + hi)
    return {"dense": t * t, "kept": kept, "computed": computed}


def _default_block(behind: int, ahead: int) -> int:
    # A block computes b x (b + behind + ahead) scores to keep about b x (behind + ahead + 1), so it
    # wastes about b / (b + band): an eighth of the band wastes about 11 %, and 32 to 128 query rows
    # keep each (b, Dh) x (Dh, L) product large enough for the matmul kernels to run at full speed.
    return max(32, min(128, (behind + ahead + 1) // 8))


@functools.lru_cache(maxsize=64)
def _band_bias(b: int, width: int, dtype: torch.dtype, device: torch.device,
               inference: bool = False) -> torch.Tensor:
    """(b, b + width) additive pattern shared by every block: 0 where r <= c <= r + width, else -inf.

    Row r of a block is query m b + r and column c is key m b - behind + c, so i - j = r - c + behind
    and the band -ahead <= i - j <= behind becomes r <= c <= r + behind + ahead. Cached: it depends
    only on the block and the window, and building it is a handful of small operations (the key
    ``inference`` keeps tensors made under ``torch.inference_mode`` away from autograd).
    """
    r = torch.arange(b, device=device).unsqueeze(1)  # (b, 1)
    c = torch.arange(b + width, device=device)  # (L,)
    in_band = (c >= r) & (c <= r + width)  # (b, L)
    return torch.zeros(b, b + width, dtype=dtype, device=device).masked_fill_(~in_band, float("-inf"))


@functools.lru_cache(maxsize=64)
def _padding_keys(start: int, stop: int, b: int, behind: int, span: int, t: int,
                  device: torch.device, inference: bool = False) -> torch.Tensor:
    """(stop - start, 1, L) True where block m's column c is a padded key (position < 0 or >= T)."""
    key_pos = torch.arange(start, stop, device=device).unsqueeze(1) * b - behind + torch.arange(span, device=device)
    return ((key_pos < 0) | (key_pos >= t)).unsqueeze(1)  # (E, 1, L)


def _banded_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, behind: int, ahead: int,
                      block: int) -> torch.Tensor:
    """softmax(q k^T / sqrt(Dh)) v restricted to i - behind <= j <= i + ahead, computed blockwise."""
    lead, (t, d_head), d_value = q.shape[:-2], q.shape[-2:], v.shape[-1]
    behind, ahead = min(behind, t - 1), min(ahead, t - 1)  # a band wider than the sequence is full
    b = min(block, t)
    nb = -(-t // b)  # number of query blocks, ceil(T / b)
    pad = nb * b - t
    span = b + behind + ahead  # L: the keys that a block of b queries can see
    q, k, v = (x.reshape(-1, t, x.shape[-1]) for x in (q, k, v))  # (N, T, Dh): N = prod(leading dims)
    n = q.shape[0]
    q_blocks = (F.pad(q, (0, 0, 0, pad)) if pad else q).reshape(n * nb, b, d_head)  # (N nb, b, Dh)
    # Pad the keys so that block m's window starts at padded position m b (true position m b - behind).
    k_pad = F.pad(k, (0, 0, behind, pad + ahead))  # (N, nb b + behind + ahead, Dh)
    v_pad = F.pad(v, (0, 0, behind, pad + ahead))  # (N, nb b + behind + ahead, Dv)
    k_windows = k_pad.unfold(1, span, b).reshape(n * nb, d_head, span)  # (N nb, Dh, L): keys^T of each block
    v_windows = v_pad.unfold(1, span, b).transpose(-2, -1).reshape(n * nb, span, d_value)  # (N nb, L, Dv)
    band_bias = _band_bias(b, behind + ahead, q.dtype, q.device, torch.is_inference_mode_enabled())  # (b, L): 0 in the band, -inf outside
    scores = torch.baddbmm(band_bias, q_blocks, k_windows, alpha=1 / math.sqrt(d_head))  # (N nb, b, L)
    scores = scores.view(n, nb, b, span)  # (N, nb, b, L)
    # Only the first blocks (keys before position 0) and the last ones (keys past T) see padding. The
    # finite minimum, not -inf, keeps padded query rows, which may see no real key, free of NaN; a real
    # row always keeps its own key, so exp(min - max) underflows to exactly 0 there.
    first = -(-behind // b)  # blocks 0 ... first - 1 reach before position 0
    last = max(0, (t - b - ahead) // b + 1)  # blocks last ... nb - 1 reach past position T - 1
    for start, stop in ((0, min(first, nb)), (min(max(last, first), nb), nb)):
        if start < stop:
            padding = _padding_keys(start, stop, b, behind, span, t, q.device,
                                    torch.is_inference_mode_enabled())  # (E, 1, L)
            scores[:, start:stop].masked_fill_(padding, torch.finfo(q.dtype).min)
    # The softmax, in place to spare a second (N nb, b, L) buffer: exp(s - max) then one division of
    # the (b, Dv) outputs instead of the (b, L) weights. The max is a constant shift that cancels in
    # the ratio, so it is taken without gradient (and the gradient stays exact).
    scores = scores.view(n * nb, b, span)  # (N nb, b, L)
    unnormalized = scores.sub_(scores.detach().amax(dim=-1, keepdim=True)).exp_()  # (N nb, b, L)
    out = torch.bmm(unnormalized, v_windows) / unnormalized.sum(dim=-1, keepdim=True)  # (N nb, b, Dv)
    return out.view(n, nb * b, d_value)[:, :t].reshape(*lead, t, d_value)  # (..., T, Dv)


def _banded_attention_fused(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, behind: int, ahead: int,
                            block: int) -> torch.Tensor:
    """:func:`_banded_attention` with the blocks handed to PyTorch's fused attention kernel.

    The blocks are the same; what changes is where their scores live. The blocked path writes all
    N nb (b, L) score blocks to main memory and reads them back for the max, the exponential, the
    sum and the second matmul. Here every block is one small attention problem, its b queries
    against its L keys under the shared band pattern, and all of them go to
    ``F.scaled_dot_product_attention`` in one call, as a batch of (N, nb) problems. On the CPU its
    flash-attention kernel scores a tile of a few dozen queries against a few hundred keys, takes
    the softmax with a running maximum and adds the weighted values while the tile is in the core's
    cache, then moves on: the scores never reach main memory, and one parallel loop covers every
    block of every head.

    Nothing is copied or padded: the blocks whose window lies inside the sequence read their keys
    and values through a strided view (``unfold``), and the few blocks at each end, whose windows
    would run off the sequence, are one small attention problem per end with the exact band mask.
    No autograd (the blocked path is the one to train through).
    """
    lead, (t, d_head), d_value = q.shape[:-2], q.shape[-2:], v.shape[-1]
    behind, ahead = min(behind, t - 1), min(ahead, t - 1)
    b = min(block, t)
    span = b + behind + ahead  # L
    q, k, v = (x.reshape(-1, t, x.shape[-1]) for x in (q, k, v))  # (N, T, Dh): N = prod(leading dims)
    first = -(-behind // b)  # blocks before it see keys before position 0
    last = max(first, (t - b - ahead) // b + 1) if t >= b + ahead else first  # from it on, keys past T - 1
    parts = []
    if first * b > 0:
        parts.append(_band_rectangle(q, k, v, 0, min(first * b, t), behind, ahead))  # (N, first b, Dv)
    if first < last:  # the interior: every block's window lies inside the sequence
        keys = slice(first * b - behind, (last - 1) * b + b + ahead)  # the keys the interior blocks see
        q_blocks = q[:, first * b:last * b].unflatten(1, (last - first, b))  # (N, nb', b, Dh), a view
        k_windows = k[:, keys].unfold(1, span, b).transpose(-2, -1)  # (N, nb', L, Dh), a view
        v_windows = v[:, keys].unfold(1, span, b).transpose(-2, -1)  # (N, nb', L, Dv), a view
        band_bias = _band_bias(b, behind + ahead, q.dtype, q.device, torch.is_inference_mode_enabled())  # (b, L)
        out = F.scaled_dot_product_attention(q_blocks, k_windows, v_windows, attn_mask=band_bias)  # (N, nb', b, Dv)
        parts.append(out.flatten(1, 2))  # (N, nb' b, Dv)
    if max(first, last) * b < t:
        parts.append(_band_rectangle(q, k, v, max(first, last) * b, t, behind, ahead))  # (N, T - last b, Dv)
    return torch.cat(parts, dim=1).reshape(*lead, t, d_value)  # (..., T, Dv)


def _band_rectangle(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int, stop: int, behind: int,
                    ahead: int) -> torch.Tensor:
    """Queries start ... stop - 1 against every key their band reaches, with the exact band mask."""
    key_start, key_stop = max(0, start - behind), min(q.shape[1], stop + ahead)
    bias = _rectangle_bias(stop - start, key_stop - key_start, start - key_start, behind, ahead, q.dtype,
                           q.device, torch.is_inference_mode_enabled())  # (Tq, Tk)
    q, k, v = q[:, None, start:stop], k[:, None, key_start:key_stop], v[:, None, key_start:key_stop]  # (N, 1, ., D)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)[:, 0]  # (N, Tq, Dv): 4-D for the fused kernel


@functools.lru_cache(maxsize=64)
def _rectangle_bias(rows: int, cols: int, shift: int, behind: int, ahead: int, dtype: torch.dtype,
                    device: torch.device, inference: bool = False) -> torch.Tensor:
    """(rows, cols) additive band pattern: row r is query shift + r of the key range, 0 where it may attend."""
    offset = torch.arange(shift, shift + rows, device=device).unsqueeze(1) - torch.arange(cols, device=device)  # i - j
    in_band = (offset <= behind) & (offset >= -ahead)  # (rows, cols)
    return torch.zeros(rows, cols, dtype=dtype, device=device).masked_fill_(~in_band, float("-inf"))


@functools.lru_cache(maxsize=32)
def _band_block_mask(t: int, behind: int, ahead: int, device: torch.device) -> object:
    """FlexAttention's ``BlockMask`` for the band -ahead <= i - j <= behind, built once per (T, band, device).

    Building it evaluates the band on every (128, 128) tile to list the tiles that hold any kept
    pair; the cache makes that a one-time cost per sequence length, as FlexAttention's docs advise.
    """
    from torch.nn.attention.flex_attention import create_block_mask

    def band(batch, head, i, j):
        return (i - j <= behind) & (j - i <= ahead)

    return create_block_mask(band, None, None, t, t, device=str(device))


@functools.lru_cache(maxsize=1)
def _compiled_flex_attention() -> Callable[..., torch.Tensor]:
    """``torch.compile(flex_attention)``, made once; the compilation itself happens on the first call.

    A new sequence length recompiles once, then torch.compile switches to a kernel for any length.
    """
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention)


def _banded_attention_flex(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, behind: int,
                           ahead: int) -> torch.Tensor:
    """The band through FlexAttention: compiled (fused) on CUDA, its unfused reference elsewhere.

    Off CUDA this path exists for the tests (it checks the mask and the reshaping on any machine);
    FlexAttention's eager fallback materialises the (T, T) scores, so it is not for long sequences.
    """
    lead, t, d_value = q.shape[:-2], q.shape[-2], v.shape[-1]
    behind, ahead = min(behind, t - 1), min(ahead, t - 1)
    q, k, v = (x.reshape(-1, 1, t, x.shape[-1]) for x in (q, k, v))  # (N, 1, T, Dh): heads as batch
    block_mask = _band_block_mask(t, behind, ahead, q.device)
    if q.device.type == "cuda":
        out = _compiled_flex_attention()(q, k, v, block_mask=block_mask)  # (N, 1, T, Dv)
    else:
        import warnings

        from torch.nn.attention.flex_attention import flex_attention

        with warnings.catch_warnings():  # its "unfused implementation" notice: known, and intended here
            warnings.simplefilter("ignore", UserWarning)
            out = flex_attention(q, k, v, block_mask=block_mask)  # (N, 1, T, Dv)
    return out.reshape(*lead, t, d_value)  # (..., T, Dv)


IMPLEMENTATIONS = ("auto", "blocked", "fused", "flex")


def _needs_grad(*tensors: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(x.requires_grad for x in tensors)


@functools.lru_cache(maxsize=16)
def flex_runs_on(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether compiled FlexAttention runs on this CUDA device in this dtype (tried once, on a tiny input).

    FlexAttention compiles a Triton kernel, which needs a card and a dtype Triton supports (an older
    card, such as Colab's T4, has no bfloat16 tensor cores). Any failure to compile or run counts as
    "no": "auto" then takes the band's own paths, which run wherever PyTorch does.
    """
    try:
        x = torch.zeros(1, 1, 128, 16, device=device, dtype=dtype)  # (N, 1, T, Dh): one block
        _compiled_flex_attention()(x, x, x, block_mask=_band_block_mask(128, 1, 1, x.device))
        return True
    except Exception as error:  # noqa: BLE001  (compilation fails with many types: Triton's, inductor's, CUDA's)
        import warnings

        warnings.warn(f"FlexAttention does not run on {device} in {dtype} ({type(error).__name__}: "
                      f"{str(error).splitlines()[0][:200] if str(error) else ''}); sliding_window_attention's "
                      f"'auto' uses the blocked paths there instead", RuntimeWarning, stacklevel=2)
        return False


def _choose_implementation(device: torch.device, needs_grad: bool, dtype: torch.dtype = torch.float32) -> str:
    """What ``implementation="auto"`` runs: FlexAttention on CUDA where it compiles, else fused unless autograd needs the blocked path."""
    if device.type == "cuda" and flex_runs_on(device, dtype):
        return "flex"
    return "blocked" if needs_grad else "fused"


def _check_implementation(implementation: object, *tensors: torch.Tensor) -> str:
    """Validate ``implementation`` and resolve "auto" for these inputs."""
    if not isinstance(implementation, str):
        raise TypeError(f"implementation must be a str, got {type(implementation).__name__} ({implementation!r})")
    check_choice("implementation", implementation, IMPLEMENTATIONS)
    needs_grad = _needs_grad(*tensors)
    if implementation == "auto":
        return _choose_implementation(tensors[0].device, needs_grad, tensors[0].dtype)
    if implementation == "fused" and needs_grad:
        raise ValueError("implementation 'fused' is for inference and cannot backpropagate; got inputs that "
                         "require grad: use 'blocked' (or 'auto'), or call it under torch.no_grad()")
    return implementation


def _banded(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, behind: int, ahead: int, block: int,
            implementation: str) -> torch.Tensor:
    """Run the band with the (resolved) implementation."""
    if implementation == "flex":
        return _banded_attention_flex(q, k, v, behind, ahead)
    if implementation == "fused":
        return _banded_attention_fused(q, k, v, behind, ahead, block)
    return _banded_attention(q, k, v, behind, ahead, block)


def sliding_window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int,
                             causal: bool = False, *, block_size: int | None = None,
                             implementation: str = "auto") -> torch.Tensor:
    """softmax(q k^T / sqrt(Dh), masked to |i - j| <= w // 2) v, without the (T, T) matrix.

    Equal to dense attention with ``sliding_window_mask(T, window, causal)`` (causal: the last
    ``window`` positions, 0 <= i - j < w). The sequence is cut into blocks of ``b`` queries; block m
    is scored against the ``L = b + w - 1`` keys (``b + 2 * (w // 2)`` symmetric) that its rows can
    see, all blocks at once in one batched matmul over a strided view of the keys, then the corners
    of each block outside the band and the keys beyond the sequence are masked before the softmax.
    Memory and compute are O(T * (b + w) * Dh), linear in T for a fixed window. That is the
    readable "blocked" path; the "fused" path hands the same blocks to PyTorch's fused attention
    kernel, which keeps the scores in the cache, and "flex" runs the band through FlexAttention.

    Args:
        q: (..., T, Dh) queries.
        k: (..., T, Dh) keys (self-attention: same length as ``q``).
        v: (..., T, Dv) values.
        window: window width w >= 1; w >= 2T - 1 (w >= T causal) is full attention.
        causal: if True, query i sees keys i - w + 1 ... i.
        block_size: queries per block b (default: w / 8, clipped to [32, 128]).
        implementation: "blocked" (the readable path, autograd), "fused" (the blocks through
            PyTorch's fused attention kernel; inference only), "flex" (FlexAttention, compiled on
            CUDA) or "auto" (flex on CUDA where FlexAttention compiles for this card and dtype,
            :func:`flex_runs_on`; else fused when no gradient is needed, else blocked).

    Returns:
        (..., T, Dv) the attention outputs.

    Raises:
        TypeError: if an input is not a floating tensor, dtypes differ, or an option has the wrong type.
        ValueError: on mismatched shapes, ``window < 1``, ``block_size < 1``, an unknown
            ``implementation``, or "fused" for inputs that require grad.

    Beltagy et al., 2020, "Longformer: The Long-Document Transformer", section 3.1.
    """
    _check_self_attention(q, k, v)
    behind, ahead = band_limits(window, causal)
    block = _default_block(behind, ahead) if block_size is None else check_int("block_size", block_size, minimum=1)
    return _banded(q, k, v, behind, ahead, block, _check_implementation(implementation, q, k, v))


def _regroup(x: torch.Tensor, dilation: int) -> tuple[torch.Tensor | None, torch.Tensor]:
    """Split (..., T, D) into residue classes r = 0 ... d-1 (positions r, r + d, ...), no padding.

    With T = M d + e, classes r < e hold M + 1 positions and the others M. Returns
    (long, short): (..., e, M + 1, D) and (..., d - e, M, D) (``long`` is None when e = 0).
    """
    t = x.shape[-2]
    m, extra = divmod(t, dilation)
    grid = x[..., : m * dilation, :].unflatten(-2, (m, dilation)).transpose(-3, -2)  # (..., d, M, D)
    short = grid[..., extra:, :, :]  # (..., d - e, M, D)
    if extra == 0:
        return None, short
    tail = x[..., m * dilation:, :].unsqueeze(-2)  # (..., e, 1, D): positions M d + r, r < e
    long = torch.cat([grid[..., :extra, :, :], tail], dim=-2)  # (..., e, M + 1, D)
    return long, short


def _ungroup(long: torch.Tensor | None, short: torch.Tensor, t: int, dilation: int) -> torch.Tensor:
    """Inverse of :func:`_regroup`: (..., e, M + 1, D), (..., d - e, M, D) -> (..., T, D)."""
    m, extra = divmod(t, dilation)
    grid = short if long is None else torch.cat([long[..., :m, :], short], dim=-3)  # (..., d, M, D)
    out = grid.transpose(-3, -2).flatten(-3, -2)  # (..., M d, D)
    if long is not None:
        out = torch.cat([out, long[..., m, :]], dim=-2)  # (..., T, D)
    return out


def _full_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """Dense attention inside each residue class (the classes are batch dims here).

    Without autograd the same formula runs in place: the scale goes onto q (T / d x Dh numbers,
    not (T / d)^2), and the mask and the softmax overwrite the one (M, M) score tensor per class
    (``torch.softmax(..., out=)``) instead of allocating two more.
    """
    mask = causal_mask(q.shape[-2], device=q.device) if causal else None  # (M, M)
    if _needs_grad(q, k, v):
        return _attention(q, k, v, mask)[0]  # (..., M, Dv)
    scores = (q / math.sqrt(q.shape[-1])) @ k.transpose(-2, -1)  # (..., M, M), the only one
    if mask is not None:
        scores.masked_fill_(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1, out=scores) @ v  # (..., M, Dv)


def _per_class(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dilation: int,
               attend: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """Run ``attend`` inside every residue class mod ``dilation`` and put the outputs back in order."""
    t = q.shape[-2]
    (q_long, q_short), (k_long, k_short), (v_long, v_short) = (_regroup(x, dilation) for x in (q, k, v))
    out_long = None if q_long is None else attend(q_long, k_long, v_long)  # (..., e, M + 1, Dv)
    if q_short.shape[-2] == 0:  # T < d: every class holds at most one position
        out_short = v_short  # (..., d - e, 0, Dv), empty
    else:
        out_short = attend(q_short, k_short, v_short)  # (..., d - e, M, Dv)
    return _ungroup(out_long, out_short, t, dilation)  # (..., T, Dv)


def dilated_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dilation: int,
                      causal: bool = False) -> torch.Tensor:
    """softmax(q K_d^T / sqrt(Dh)) V_d, where K_d, V_d are the keys at i + multiples of d.

    Equal to dense attention with ``dilated_mask(T, dilation, causal)``: query i attends to key j
    iff (j - i) mod d == 0 (and j <= i when causal). Those keys are exactly the positions in i's
    residue class mod d, so the sequence is regrouped into d interleaved subsequences of about T / d
    positions and each runs ordinary (causal) attention on its own: d (T / d)^2 = T^2 / d scores.
    A length T = M d + e not divisible by d gives e classes of M + 1 positions and d - e of M; the
    two groups are run as two batches, so nothing is padded or masked.

    Args:
        q: (..., T, Dh) queries.
        k: (..., T, Dh) keys.
        v: (..., T, Dv) values.
        dilation: stride d >= 1 between attended keys; d = 1 is full attention.
        causal: if True, query i sees only keys j <= i of its class.

    Returns:
        (..., T, Dv) the attention outputs.

    Raises:
        TypeError: if an input is not a floating tensor, dtypes differ, or an option has the wrong type.
        ValueError: on mismatched shapes or ``dilation < 1``.

    Child et al., 2019, "Generating Long Sequences with Sparse Transformers" (strided pattern);
    Ding et al., 2023, "LongNet: Scaling Transformers to 1,000,000,000 Tokens".
    """
    _check_self_attention(q, k, v)
    dilation = check_int("dilation", dilation, minimum=1)
    causal = check_bool("causal", causal)
    return _per_class(q, k, v, dilation, lambda qc, kc, vc: _full_attention(qc, kc, vc, causal))


def dilated_sliding_window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int,
                                     dilation: int, causal: bool = False, *,
                                     implementation: str = "auto") -> torch.Tensor:
    """Attention under :func:`~transformer_course.nn.masks.dilated_sliding_window_mask`: a sliding window inside each residue class.

    Positions i and j = i - k d of one class mod d are k apart inside the class, so the dilated
    window is an ordinary window of width w on each regrouped subsequence: O(T w) scores, reaching
    d (w // 2) positions to each side.

    Args:
        q: (..., T, Dh) queries.
        k: (..., T, Dh) keys.
        v: (..., T, Dv) values.
        window: keys per query w >= 1.
        dilation: gap d >= 1 between attended keys.
        causal: if True, only look back.
        implementation: the window's implementation inside each class, as in
            :func:`sliding_window_attention`.

    Returns:
        (..., T, Dv) the attention outputs.

    Raises:
        TypeError, ValueError: as :func:`sliding_window_attention` and :func:`dilated_attention`.

    Beltagy et al., 2020, "Longformer", section 3.1.
    """
    _check_self_attention(q, k, v)
    dilation = check_int("dilation", dilation, minimum=1)
    behind, ahead = band_limits(window, causal)
    block = _default_block(behind, ahead)
    path = _check_implementation(implementation, q, k, v)
    return _per_class(q, k, v, dilation, lambda qc, kc, vc: _banded(qc, kc, vc, behind, ahead, block, path))

