"""Repository-wide pytest setup, loaded before any notebook kernel starts."""

import os

# nbval kernels must pick matplotlib's inline backend; an inherited MPLBACKEND (e.g. Agg) would
# make figures vanish from the outputs being compared.
os.environ.pop("MPLBACKEND", None)
os.environ.setdefault("PYTHONHASHSEED", "0")

collect_ignore_glob = ["_build/*", ".venv/*", "course/*", "exports/*", "artifacts/*"]
