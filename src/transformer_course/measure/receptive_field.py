"""What a stack of sparse attention layers can see: reachability through masks, receptive fields, gaps.

Shape legend: T sequence length; masks are (T, T) bool, True = query i may attend to key j.

One attention layer with mask M lets output position i read input position j exactly when
M[i, j]. Two layers compose: i reads j if some k has M2[i, k] and M1[k, j], which is the boolean
matrix product M2 M1. So the set of inputs that output i depends on after L layers is row i of

    R_L = M_L M_{L-1} ... M_1   (boolean products),

its size is i's receptive field, and a False entry of R_L is a pair (i, j) that no path connects:
no amount of training lets information from j reach i. Every mask of the course keeps the diagonal
(a token sees itself), which plays the role of the residual connection here: what a position
reached at layer l stays reachable at layer l + 1.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from transformer_course._validation import check_int
from transformer_course.nn.masks import dilated_mask, dilated_sliding_window_mask, sliding_window_mask

def _check_square_mask(name: str, mask: object, t: int | None = None) -> torch.Tensor:
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise TypeError(f"{name} must be a bool torch.Tensor (True = may attend), got {got}")
    if mask.dim() != 2 or mask.shape[0] != mask.shape[1]:
        raise ValueError(f"{name} must be a square (T, T) mask, got shape {tuple(mask.shape)}")
    if t is not None and mask.shape[0] != t:
        raise ValueError(f"{name} must have shape ({t}, {t}) like the other masks, got {tuple(mask.shape)}")
    return mask


def _check_masks(masks: object) -> list[torch.Tensor]:
    if isinstance(masks, torch.Tensor):
        masks = [masks]
    if not isinstance(masks, Sequence) or len(masks) == 0:
        raise ValueError(f"masks must be a non-empty sequence of (T, T) bool masks, got {masks!r}")
    first = _check_square_mask("masks[0]", masks[0])
    return [first] + [_check_square_mask(f"masks[{i}]", m, first.shape[0]) for i, m in enumerate(masks[1:], 1)]


def bool_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Boolean matrix product (a b)[i, j] = OR_k (a[i, k] AND b[k, j]).

    Computed as an integer-valued float matmul (exact: the counts stay below 2^24 for T < 16M).

    Args:
        a: (T, K) bool.
        b: (K, S) bool.

    Returns:
        (T, S) bool.
    """
    return (a.float() @ b.float()) > 0  # (T, S)


def reachability_by_depth(masks: Sequence[torch.Tensor] | torch.Tensor) -> list[torch.Tensor]:
    """R_1, R_2, ..., R_L for layers applied in order: R_l = M_l R_{l-1}, R_1 = M_1.

    Args:
        masks: the (T, T) bool masks of layers 1 ... L (first layer first), or one mask.

    Returns:
        L bool (T, T) tensors; R_l[i, j] is True when output i of layer l depends on input j.

    Raises:
        TypeError, ValueError: if a mask is not a square bool tensor, or the sizes differ.
    """
    masks = _check_masks(masks)
    reach = [masks[0]]
    for mask in masks[1:]:
        reach.append(bool_matmul(mask, reach[-1]))  # (T, T)
    return reach


def reachability(masks: Sequence[torch.Tensor] | torch.Tensor) -> torch.Tensor:
    """R = M_L ... M_2 M_1 (boolean products): which inputs each output of the stack can read.

    Args:
        masks: the (T, T) bool masks of layers 1 ... L (first layer first), or one mask.

    Returns:
        (T, T) bool; R[i, j] is True when some path j -> ... -> i runs through the allowed pairs.
    """
    return reachability_by_depth(masks)[-1]


def unreachable_pairs(masks: Sequence[torch.Tensor] | torch.Tensor) -> int:
    """Number of (query, key) pairs that no path through the stacked masks connects."""
    return int((~reachability(masks)).sum())


def coverage_gaps(reach: torch.Tensor) -> int:
    """Holes inside receptive fields: pairs (i, j) not reached although i reaches past j on that side.

    For each output i, the positions strictly between i and its farthest reached input on each side
    that it does not reach. A contiguous receptive field has none; one dilation repeated (a
    gridding pattern) has many. Pairs beyond the farthest reach are not counted: they are out of
    range, not holes.

    Args:
        reach: (T, T) bool reachability.

    Returns:
        The number of holes, summed over all outputs.
    """
    reach = _check_square_mask("reach", reach)
    t = reach.shape[0]
    offset = torch.arange(t).unsqueeze(1) - torch.arange(t)  # (T, T) i - j
    far_behind = torch.where(reach & (offset >= 0), offset, 0).amax(dim=1, keepdim=True)  # (T, 1)
    far_ahead = torch.where(reach & (offset <= 0), -offset, 0).amax(dim=1, keepdim=True)  # (T, 1)
    inside = (offset <= far_behind) & (-offset <= far_ahead)  # (T, T)
    return int((inside & ~reach).sum())


def receptive_field(reach: torch.Tensor, query: int | None = None) -> int:
    """How many input positions one output position reads: the True count of row ``query``.

    Args:
        reach: (T, T) bool reachability (or a single mask).
        query: the output position; defaults to the middle one, T // 2, away from the edges.

    Returns:
        The receptive field of ``query`` in positions.

    Raises:
        TypeError, ValueError: if ``reach`` is not a square bool tensor or ``query`` is out of range.
    """
    reach = _check_square_mask("reach", reach)
    t = reach.shape[0]
    query = t // 2 if query is None else check_int("query", query, minimum=0)
    if query >= t:
        raise ValueError(f"query must be < T={t}, got {query}")
    return int(reach[query].sum())


def layers_to_cover(mask: torch.Tensor, max_layers: int = 64) -> int | None:
    """Fewest identical layers with ``mask`` after which every output reads every input.

    Args:
        mask: (T, T) bool mask of one layer (repeated).
        max_layers: give up after this many layers.

    Returns:
        The number of layers, or None if ``max_layers`` layers do not connect every pair (as when the
        pattern never links some positions, like one fixed dilation).
    """
    mask = _check_square_mask("mask", mask)
    max_layers = check_int("max_layers", max_layers, minimum=1)
    reach = mask
    for layers in range(1, max_layers + 1):
        if bool(reach.all()):
            return layers
        reach = bool_matmul(mask, reach)  # (T, T)
    return None


def dilation_schedule_masks(t: int, dilations: Sequence[int], window: int | None = None,
                            causal: bool = False) -> list[torch.Tensor]:
    """One mask per layer of a dilation schedule such as (1, 2, 4, 8).

    Args:
        t: sequence length T.
        dilations: the dilation of each layer, first layer first.
        window: if given, each layer is a dilated sliding window of ``window`` keys
            (:func:`~transformer_course.nn.masks.dilated_sliding_window_mask`, Longformer,
            like a dilated convolution of kernel ``window``); if None the plain dilated mask
            (:func:`~transformer_course.nn.masks.dilated_mask`, every d-th key of the whole sequence).
        causal: causal variant of the masks.

    Returns:
        List of (T, T) bool masks.

    Raises:
        TypeError, ValueError: on an empty schedule or an invalid length, window or dilation.
    """
    if isinstance(dilations, (str, bytes)) or not isinstance(dilations, Sequence) or len(dilations) == 0:
        raise ValueError(f"dilations must be a non-empty sequence of ints >= 1, got {dilations!r}")
    if window is None:
        return [dilated_mask(t, d, causal) for d in dilations]
    return [dilated_sliding_window_mask(t, window, d, causal) for d in dilations]


def schedule_reach(window: int, dilations: Sequence[int]) -> int:
    """Farthest offset a stack of symmetric dilated windows reaches: sum over layers of d_l * (w // 2).

    Each layer moves information at most d (w // 2) positions, and offsets add along a path. With
    w = 3 and dilations 1, 2, 4, ..., 2^(L-1) this is 2^L - 1, so the receptive field 2^(L+1) - 1
    doubles with every layer: WaveNet's exponential growth.

    Args:
        window: keys per query w >= 1.
        dilations: the dilation of each layer.

    Returns:
        The reach to each side, in positions.
    """
    window = check_int("window", window, minimum=1)
    return sum(check_int("dilations", d, minimum=1) * (window // 2) for d in dilations)


def global_token_mask(t: int, window: int, global_positions: Sequence[int], causal: bool = False,
                      device: torch.device | str | None = None) -> torch.Tensor:
    """Sliding window plus global tokens: M = window | G rows | G columns (Longformer).

    A global position (such as [CLS] or the question tokens) attends to every position and every
    position attends to it; the rest keep their local window. Causal: global columns only for keys
    j <= i, and global rows only look back.

    Args:
        t: sequence length T.
        window: window width w of the local part.
        global_positions: indices in [0, T) of the global tokens.
        causal: causal variant.
        device: where to build the mask.

    Returns:
        (T, T) bool mask, True = may attend.

    Raises:
        TypeError, ValueError: on invalid sizes or a position outside [0, T).

    Beltagy et al., 2020, "Longformer", section 3.1 (global attention).
    """
    mask = sliding_window_mask(t, window, causal, device=device)  # (T, T)
    positions = [check_int("global_positions", p, minimum=0) for p in global_positions]
    if any(p >= t for p in positions):
        raise ValueError(f"global_positions must lie in [0, T={t}), got {list(global_positions)}")
    index = torch.tensor(positions, dtype=torch.long, device=mask.device)
    mask[index, :] = True
    mask[:, index] = True
    if causal:
        mask &= torch.ones(t, t, dtype=torch.bool, device=mask.device).tril()
    return mask
