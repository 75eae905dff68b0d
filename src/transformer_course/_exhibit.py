"""Figures and tables that say who made them: a maker stamps its dotted name on what it returns.

The course's figure index and its slide export list, for every figure and table of the chapters,
the package function that made it. Each such function is decorated with ``@exhibit``; the
``Figure`` or ``DataFrame`` it returns carries the stamp (a ``DataFrame`` in ``attrs``, which
pandas keeps through ``.round()``, ``.style`` and friends), and ``course.notebook`` copies the
stamp into the metadata of the notebook output that shows it, where ``course.provenance`` reads it.
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
