"""The calibrations' cache: a result computed once per key, pickled, and read back on the next call.

A calibration over 30 base seeds b assembles ensembles b .. b + 7 from per-seed runs; each seed's run
is computed once and shared by the base seeds whose ensembles contain it. The cache is keyed by
file name (the callers put the settings that change a result in the key) and is never committed.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

Result = TypeVar("Result")


def cached(directory: Path, key: str, compute: Callable[[], Result]) -> Result:
    """``compute()``, or the result a previous call with the same ``directory`` and ``key`` pickled."""
    path = Path(directory) / key
    if path.is_file():
        return pickle.loads(path.read_bytes())
    result = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(result))
    return result
