"""Peak memory of a call, measured by tracking every tensor its operations create.

``MemoryTracker`` charges each tensor an operation returns to its storage and releases it when the
last reference dies, so the peak depends only on shapes and dtypes: the same on every machine,
which lets a notebook compare it exactly. ``measure_attention`` uses it (and the clock) to put a
sparse attention beside dense masked attention.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from transformer_course._exhibit import exhibit
from transformer_course._validation import check_int
from transformer_course.nn.attention import scaled_dot_product_attention
from .timing import median_times


class MemoryTracker(TorchDispatchMode):
    """Record the tensors that operations allocate while the mode is active.

    Every tensor an operation returns is charged to its storage (views and in-place results are
    charged once) and released when the last Python reference to a tensor of that storage dies.
    ``peak_bytes`` is the most memory held at once by tensors created inside the block and
    ``largest_numel`` the element count of the largest single tensor. The counts depend only on the
    shapes and dtypes, so they are the same on every run and every machine. Memory a fused kernel
    uses internally without returning it is not seen.

    Example:
        >>> with MemoryTracker() as tracker:
        ...     out = sliding_window_attention(q, k, v, window=64)
        >>> tracker.peak_bytes
    """

    def __init__(self) -> None:
        super().__init__()
        self.current_bytes = 0
        self.peak_bytes = 0
        self.largest_numel = 0
        self._live: dict[tuple[torch.device, int], list[int]] = {}  # storage -> [bytes, references]

    def _release(self, key: tuple[torch.device, int]) -> None:
        entry = self._live.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            self.current_bytes -= entry[0]
            del self._live[key]

    def _track(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        key = (tensor.device, storage.data_ptr())
        self.largest_numel = max(self.largest_numel, tensor.numel())
        entry = self._live.get(key)
        if entry is None:
            self._live[key] = [storage.nbytes(), 1]
            self.current_bytes += storage.nbytes()
            self.peak_bytes = max(self.peak_bytes, self.current_bytes)
        else:
            entry[1] += 1
        weakref.finalize(tensor, self._release, key)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        inputs = {id(x) for x in tree_flatten((args, kwargs))[0] if isinstance(x, torch.Tensor)}
        for tensor in tree_flatten(out)[0]:
            if isinstance(tensor, torch.Tensor) and id(tensor) not in inputs:
                self._track(tensor)
        return out


def peak_memory(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[int, int]:
    """Call ``fn(*args, **kwargs)`` under :class:`MemoryTracker`; return (peak bytes, largest numel).

    The result of the call is dropped inside the block, so the peak counts the intermediates and
    the output together.
    """
    with MemoryTracker() as tracker:
        out = fn(*args, **kwargs)
        del out
    return tracker.peak_bytes, tracker.largest_numel


@exhibit
def measure_attention(lengths: Sequence[int], sparse: Callable[..., torch.Tensor], mask_fn: Callable[[int], torch.Tensor],
                      d_head: int = 64, repeats: int = 3, seed: int = 0, dtype: torch.dtype = torch.float32,
                      time_it: bool = True) -> pd.DataFrame:
    """Time and measure a sparse attention ``sparse(q, k, v)`` against dense masked attention.

    The dense reference is the package's :func:`~transformer_course.nn.attention.scaled_dot_product_attention`
    with ``mask_fn(T)`` (its (T, T) mask built inside the measured call, as a dense model would).
    Both run on the same random q, k, v of shape (1, T, Dh).

    Args:
        lengths: sequence lengths T to measure.
        sparse: callable (q, k, v) -> out, e.g. ``lambda q, k, v: sliding_window_attention(q, k, v, 64)``.
        mask_fn: T -> (T, T) bool mask that ``sparse`` implements.
        d_head: head width Dh.
        repeats: timed rounds per point, dense and sparse interleaved (``timing.median_times``);
            the median is kept.
        seed: seed of the local generator for q, k, v.
        dtype: floating dtype of q, k, v.
        time_it: if False, only memory is measured (deterministic) and the time columns are NaN.

    Returns:
        DataFrame indexed by T with columns ``dense_ms``, ``sparse_ms``, ``dense_MiB``, ``sparse_MiB``
        (peak memory held by tensors created in the call), ``dense_largest``, ``sparse_largest``
        (elements of the largest tensor created).
    """
    repeats = check_int("repeats", repeats, minimum=1)
    gen = torch.Generator().manual_seed(check_int("seed", seed, minimum=0))
    rows = []
    for t in lengths:
        t = check_int("lengths", t, minimum=1)
        q, k, v = torch.randn(3, 1, t, check_int("d_head", d_head, minimum=1), generator=gen, dtype=dtype)

        def dense() -> torch.Tensor:
            return scaled_dot_product_attention(q, k, v, mask=mask_fn(t))[0]

        def sparse_call() -> torch.Tensor:
            return sparse(q, k, v)

        dense_peak, dense_largest = peak_memory(dense)
        sparse_peak, sparse_largest = peak_memory(sparse_call)
        row = {"T": t, "dense_MiB": dense_peak / 2**20, "sparse_MiB": sparse_peak / 2**20,
               "dense_largest": dense_largest, "sparse_largest": sparse_largest,
               "dense_ms": math.nan, "sparse_ms": math.nan}
        if time_it:
            with torch.inference_mode():
                seconds = median_times({"dense": dense, "sparse": sparse_call}, repeats)
            row["dense_ms"], row["sparse_ms"] = 1e3 * seconds["dense"], 1e3 * seconds["sparse"]
        rows.append(row)
    columns = ["dense_ms", "sparse_ms", "dense_MiB", "sparse_MiB", "dense_largest", "sparse_largest"]
    return pd.DataFrame(rows).set_index("T")[columns]
