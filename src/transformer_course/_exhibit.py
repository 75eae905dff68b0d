"""Figures and tables that say who made them: ``@exhibit`` stamps a maker's dotted name on its result.

A ``DataFrame`` keeps the stamp in ``attrs`` (through ``.round()``, ``.style``...), a ``Figure`` as an
attribute; ``course.notebook`` copies it into the metadata of the output that shows it, where
``course.provenance`` (the figure index) and ``tools/export_figures.py`` read it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

STAMP = "transformer_course_made_by"
Maker = TypeVar("Maker", bound=Callable[..., Any])


def exhibit(maker: Maker) -> Maker:
    """Decorate a figure or table maker so that its result carries ``module.qualname`` of ``maker``."""
    name = f"{maker.__module__}.{maker.__qualname__}"

    @functools.wraps(maker)
    def stamped(*args: Any, **kwargs: Any) -> Any:
        result = maker(*args, **kwargs)
        if isinstance(getattr(result, "attrs", None), dict):  # pandas DataFrame or Series
            result.attrs[STAMP] = name
        else:  # matplotlib Figure
            setattr(result, STAMP, name)
        return result

    return stamped  # type: ignore[return-value]


def made_by(obj: object) -> str | None:
    """The stamp of a displayed object (a Figure, a DataFrame, or a pandas Styler of one), if any."""
    data = getattr(obj, "data", obj)  # a Styler displays its .data
    attrs = getattr(data, "attrs", None)
    if isinstance(attrs, dict) and STAMP in attrs:
        return attrs[STAMP]
    return getattr(obj, STAMP, None)
