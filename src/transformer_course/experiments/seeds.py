"""The seeds of an ensemble: independent draws for every (base seed, experiment, member), by construction.

A chapter's randomness flows from one base seed (``COURSE_SEED``). An ensemble of 8 members used
to be the seeds b .. b + 7, so base seeds 0 and 1 shared 7 of their 8 draws: 30 base seeds were
about four independent ensembles, and CI's "other seed" passes barely drew again. Here the member
seeds come from NumPy's ``SeedSequence``, a maintained generator of independent streams: the root
sequence is keyed by the base seed and the experiment's name, and member m is its m-th spawned
child. Two base seeds, two experiments or two members never share a stream, and the seeds they
hand PyTorch (48-bit integers, room for the ``seed + offset`` derivations the experiments use) are
distinct wherever the course looks (``tests/experiments/test_seeds.py`` checks every experiment
over base seeds 0..199). A reader still changes every draw of a chapter by setting ``COURSE_SEED``.

Arms of one comparison (Pre-LN and Post-LN, h = 1 and h = 4 heads) share their experiment's seeds
on purpose: paired draws make the difference between arms less noisy than independent ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from transformer_course._validation import check_int

SEED_BITS = 48  # a member seed is below 2**48: torch takes seeds below 2**64, with room for seed * k + offset
_recorders: list[list[tuple[str, int, list[int]]]] = []  # the open ``recorded_ensembles`` blocks of this process


def ensemble_seeds(base_seed: int, experiment: str, size: int) -> list[int]:
    """The ``size`` member seeds of ``experiment``'s ensemble under ``base_seed``.

    Args:
        base_seed: the chapter's base seed (``course_seed()``), an int >= 0.
        experiment: the experiment's name (each experiment module holds its own, e.g.
            ``head_count.EXPERIMENT``); two names give independent ensembles.
        size: the number of members, >= 1.

    Returns:
        ``size`` ints in [0, 2**48); the first k of a larger ensemble are the ensemble of size k.

    Raises:
        TypeError, ValueError: for a base seed or size that is not an int in range, or an empty name.
    """
    base_seed = check_int("base_seed", base_seed, minimum=0)
    if not isinstance(experiment, str) or not experiment.strip():
        raise ValueError(f"experiment must be a non-empty name, got {experiment!r}")
    size = check_int("size", size, minimum=1)
    root = np.random.SeedSequence(base_seed, spawn_key=tuple(experiment.encode("utf-8")))
    seeds = [int(child.generate_state(1, np.uint64)[0] >> np.uint64(64 - SEED_BITS)) for child in root.spawn(size)]
    for recorder in _recorders:
        recorder.append((experiment, base_seed, list(seeds)))
    return seeds


@contextmanager
def recorded_ensembles() -> Iterator[list[tuple[str, int, list[int]]]]:
    """Record the ensembles drawn inside the block: every ``ensemble_seeds`` call in this process appends
    ``(experiment, base_seed, seeds)`` to the list it yields (how ``benchmarks/calibrate.py`` learns the
    member seeds of the claims it calibrates, from the calls themselves)."""
    recorder: list[tuple[str, int, list[int]]] = []
    _recorders.append(recorder)
    try:
        yield recorder
    finally:
        _recorders.remove(recorder)
