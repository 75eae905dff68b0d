"""A per-seed cache of ``experiments.decoding.decoding_run``, shared by the calibrations of DL0035 and DL0036.

The runs of an ensemble are independent, so each (seed, label smoothing) is trained once and
pickled in ``$DECODING_CALIBRATION_CACHE`` (default: a folder in the system's temporary directory),
under a key that changes with the settings.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from transformer_course.experiments.decoding import DECODING, decoding_run
from _cache import cached  # benchmarks/calibration/_cache.py (calibrate.py puts this folder on sys.path)

CACHE = Path(os.environ.get("DECODING_CALIBRATION_CACHE", Path(tempfile.gettempdir()) / "decoding_calibration"))


def cached_run(seed: int, label_smoothing: float):
    settings = hashlib.sha1(repr((DECODING, "v1")).encode()).hexdigest()[:12]  # a new setting, a new cache entry
    return cached(CACHE, f"{settings}_{label_smoothing:g}_{seed}.pickle",
                  lambda: decoding_run(seed, label_smoothing, DECODING))
