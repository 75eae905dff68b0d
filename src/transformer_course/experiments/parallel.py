"""Independent training runs side by side in worker processes, with the same results as one by one.

The course's toy models train on one CPU thread (``training.fit``), so a machine with two cores
can train two ensemble members at once. Each worker is a separate Python process that runs ``fn``
on its arguments; a run's numbers depend only on its own arguments and its single thread, so the
results are those of a plain loop, in the same order, whatever the number of workers.

How a worker starts depends on what forking would copy. On a Linux machine with no accelerator, a
worker is forked from the calling process: it starts in milliseconds, with torch and the package
already imported (PyTorch's own ``DataLoader`` workers start the same way). Where a GPU (or any
other accelerator PyTorch sees) is present, workers are spawned instead, even on Linux: a forked
child cannot use CUDA once its parent has initialized it ("CUDA error: initialization error"), and
autograd refuses to run in a child forked after the parent's first backward pass, which starts one
thread per accelerator device ("Unable to handle autograd's threading in combination with
fork-based multiprocessing"). On macOS (where forking a process that has loaded system frameworks
is unsafe) and Windows (which cannot fork) workers are always spawned. A spawned worker is a fresh
Python that imports torch and the package, about two seconds of CPU, and may use the GPU itself.
The results are the same either way (:func:`start_method` says which is used). The workers are
kept for the next call with the same number of workers (a chapter that trains three ensembles
starts its workers once), and shut down when the process exits.
"""

from __future__ import annotations

import atexit
import importlib
import multiprocessing
import signal
import sys
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from transformer_course._validation import check_int

Result = TypeVar("Result")
Item = TypeVar("Item")
_POOLS: dict[int, ProcessPoolExecutor] = {}  # workers -> the pool kept for the next call


def map_runs(fn: Callable[..., Result], arguments: Iterable[tuple], workers: int = 1) -> list[Result]:
    """``[fn(*args) for args in arguments]``, computed by up to ``workers`` processes.

    Args:
        fn: a module-level function (the workers import it by name) of one run; it must not depend
            on state a previous run left in its worker (seed everything it draws, as the course's
            runs do), since workers are reused from call to call.
        arguments: one tuple of positional arguments per run.
        workers: processes (1 = a plain loop in this process). Where workers are spawned (macOS,
            Windows), a script that passes more than 1 needs the ``if __name__ == "__main__":`` guard.

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
    try:
        return list(_pool(workers).map(_call, [fn] * len(arguments), arguments))
    except BrokenProcessPool:  # a worker died (e.g. killed): start fresh ones once
        _POOLS.pop(workers).shutdown(wait=False, cancel_futures=True)
        return list(_pool(workers).map(_call, [fn] * len(arguments), arguments))


def workers_for(workers: int, device: torch.device | str | None) -> int:
    """The worker processes for training on ``device``: ``workers`` on the CPU, 1 elsewhere.

    Worker processes share the CPU's cores; on an accelerator the runs train one after another in
    this process (one GPU gains nothing from two processes taking turns on it).

    Raises:
        TypeError, ValueError: if ``workers`` is not an int >= 1.
    """
    import torch

    workers = check_int("workers", workers, minimum=1)
    return workers if torch.device(device if device is not None else "cpu").type == "cpu" else 1


def split_evenly(items: Sequence[Item], parts: int) -> list[list[Item]]:
    """``items`` cut into ``min(parts, len(items))`` consecutive runs whose lengths differ by at most one.

    How an ensemble trained as one stacked model is shared among ``parts`` worker processes:
    ``split_evenly([0, 1, 2, 3, 4], 2) == [[0, 1, 2], [3, 4]]``. Empty ``items`` give no parts.

    Raises:
        TypeError, ValueError: if ``parts`` is not an int >= 1.
    """
    parts = check_int("parts", parts, minimum=1)
    items = list(items)
    parts = min(parts, len(items))
    if not parts:
        return []
    size, extra = divmod(len(items), parts)
    bounds = [k * size + min(k, extra) for k in range(parts + 1)]
    return [items[a:b] for a, b in zip(bounds, bounds[1:])]


def start_workers(workers: int, *modules: str) -> None:
    """Start ``workers`` kept worker processes now, each importing ``modules``, without waiting for them.

    A chapter calls this early, so that the workers start (where they are spawned, about two
    seconds of CPU each) while its first cells run, not when its first ensemble is due. Later ``map_runs`` calls with the same
    ``workers`` use them; nothing else changes (the results are the same with or without it).

    Raises:
        TypeError, ValueError: for ``workers`` < 2 or a module name that is not a string.
    """
    workers = check_int("workers", workers, minimum=2)
    for name in modules:
        if not isinstance(name, str):
            raise TypeError(f"modules must be module names (str), got {type(name).__name__}")
    pool = _pool(workers)
    for _ in range(workers):  # one task per worker: each submit starts a process while none is idle
        pool.submit(_import, modules)


def _import(modules: tuple[str, ...]) -> None:
    for name in modules:
        importlib.import_module(name)


def _pool(workers: int) -> ProcessPoolExecutor:
    if workers not in _POOLS:
        if start_method() == "fork":
            _import_before_forking()
        _POOLS[workers] = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(start_method()),
                                              initializer=_ignore_interrupts)
    return _POOLS[workers]


def _import_before_forking() -> None:
    """Import in this process what every training run imports on first use, so forked workers inherit it.

    The first ``torch.optim`` optimizer a process builds imports ``torch._dynamo`` (its step
    function is wrapped to disable compilation): about 1.4 s of CPU on the course's 2-core machine.
    A worker forked before that import pays it again at its first run, in every worker; imported
    here once, before the fork, it is shared. (The notebook pays it once anyway when it trains a
    model itself, as most chapters do.)
    """
    import torch._dynamo  # noqa: F401


ACCELERATOR_MODULES = ("cuda", "xpu", "mps", "mtia")
"""The ``torch.<name>`` device modules looked at, with the renamed ``PrivateUse1`` backend's (if any)."""


def accelerator_present() -> bool:
    """Whether PyTorch sees at least one accelerator device (a CUDA GPU, XPU, MPS, MTIA or custom backend).

    This is what decides whether forking is safe: autograd starts a thread per accelerator device
    at the first backward pass, and a CUDA context cannot cross a fork. Counting devices does not
    make forking unsafe on a machine without any (``torch.cuda.device_count()`` is 0 there).
    """
    import torch

    names = [*ACCELERATOR_MODULES, torch._C._get_privateuse1_backend_name()]
    for name in dict.fromkeys(names):
        count = getattr(getattr(torch, name, None), "device_count", None)
        try:
            if callable(count) and count() > 0:
                return True
        except (RuntimeError, AssertionError):  # a backend built in but unusable here has no device
            continue
    return False


def start_method() -> str:
    """How workers start: "fork" on Linux without an accelerator, "spawn" otherwise (see the module docstring)."""
    if not sys.platform.startswith("linux"):
        return "spawn"
    import torch

    if torch.cuda.is_initialized() or accelerator_present():
        return "spawn"
    return "fork"


def _ignore_interrupts() -> None:
    """Set up a worker: one thread, interrupts left to the parent, and the process's own output streams.

    Runs share the machine's cores between the workers, so each computes on one thread (as the
    course's runs do in the notebook: ``training.fit`` results are bit-for-bit those of one thread).
    Kept workers wait between calls: a Ctrl-C (or a Jupyter kernel's shutdown) is the parent's to
    handle. The parent stops them (``shutdown_workers``, at exit); without this, an interrupt sent
    to the process group would print a traceback from every idle worker. A forked worker inherits
    the parent's ``sys.stdout``; under Jupyter that object sends through a thread of the kernel
    that a forked process does not have, so the worker writes to its own streams instead.
    """
    import torch

    torch.set_num_threads(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.__stdout__ is not None and sys.__stderr__ is not None:
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__


@atexit.register
def shutdown_workers() -> None:
    """Shut down the kept worker processes (also run at exit)."""
    while _POOLS:
        _POOLS.popitem()[1].shutdown(wait=True, cancel_futures=True)


def _call(fn: Callable[..., Any], args: tuple) -> Any:
    return fn(*args)
