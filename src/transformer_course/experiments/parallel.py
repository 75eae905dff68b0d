"""Independent training runs side by side in worker processes, with the same results as one by one.

The course's toy models train on one CPU thread (``training.fit``), so a machine with two cores
can train two ensemble members at once. Each worker is a fresh (spawned) Python process that runs
``fn`` on its arguments; a run's numbers depend only on its own arguments and its single thread,
so the results are those of a plain loop, in the same order, whatever the number of workers.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

from transformer_course._validation import check_int

Result = TypeVar("Result")


def map_runs(fn: Callable[..., Result], arguments: Iterable[tuple], workers: int = 1) -> list[Result]:
    """``[fn(*args) for args in arguments]``, computed by up to ``workers`` processes.

    Args:
        fn: a module-level function (the workers import it by name) of one run.
        arguments: one tuple of positional arguments per run.
        workers: processes (1 = a plain loop in this process). Workers are spawned, so a script
            that passes more than 1 needs the ``if __name__ == "__main__":`` guard.

    Returns:
        The runs' results, in the order of ``arguments``.
    """
    workers = check_int("workers", workers, minimum=1)
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    arguments = [tuple(args) for args in arguments]
    workers = min(workers, len(arguments))
    if workers <= 1:
        return [fn(*args) for args in arguments]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(_call, [fn] * len(arguments), arguments))


def _call(fn: Callable[..., Any], args: tuple) -> Any:
    return fn(*args)
