"""Repository-wide pytest setup, loaded before any notebook kernel starts."""

import os

# nbval kernels must pick matplotlib's inline backend; an inherited MPLBACKEND (e.g. Agg) would
# make figures vanish from the outputs being compared.
os.environ.pop("MPLBACKEND", None)
os.environ.setdefault("PYTHONHASHSEED", "0")

collect_ignore_glob = ["_build/*", ".venv/*", "course/*", "exports/*", "artifacts/*"]


def pytest_collection_modifyitems(config, items):
    """Mark every nbval cell (an item collected from a ``.ipynb``) with ``notebooks``."""
    import pytest

    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.notebooks)
