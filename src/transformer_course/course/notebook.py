"""Helpers for the chapter notebooks: one call sets seeds, print precision and plot style."""

from __future__ import annotations

import inspect
import os
import platform
import random
from functools import partial
from typing import Any

import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure

from transformer_course import __version__
from transformer_course._exhibit import exhibit, made_by
from transformer_course._validation import check_int
from transformer_course.experiments.claims import CLAIMS_ATTR
from transformer_course.plotting.style import smallest_text_points, use_course_style

PROVENANCE_KEY = "transformer_course"  # the key of the output metadata that names an exhibit's maker
# The PNG text chunk that records the height, in image pixels, of a figure's smallest text, so a test
# can compute how tall that text is where the page shows the image (its displayed/natural width ratio).
TEXT_SIZE_KEY = "smallest-text-px"


def retina_png(fig: Any, **print_figure_kwargs: Any) -> tuple[str, dict] | None:
    """A figure as a base64 PNG at twice its dpi (IPython's ``retina`` format) that records its smallest text.

    The PNG carries a text chunk ``smallest-text-px``: the height in image pixels of the figure's
    smallest text (its font size in points x 2 dpi / 72). Returns IPython's (data, metadata) pair,
    with the 1x width and height in the metadata, or None for an empty figure.
    """
    from IPython.core.pylabtools import retina_figure

    text_px = smallest_text_points(fig) * 2 * fig.dpi / 72
    metadata = {**print_figure_kwargs.pop("metadata", {}), TEXT_SIZE_KEY: f"{text_px:.1f}"}
    return retina_figure(fig, base64=True, metadata=metadata, **print_figure_kwargs)


def seed_everything(seed: int = 0) -> None:
    """Seed Python, NumPy and PyTorch (CPU and every GPU)."""
    seed = check_int("seed", seed, minimum=0)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def best_device() -> torch.device:
    """CUDA if present, else Apple's MPS if present, else the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def enable_inline_figures() -> bool:
    """In IPython/Jupyter, show returned ``Figure`` objects as 2x PNG, and record who made each exhibit.

    The package builds figures without pyplot, so a notebook only shows them as images once the
    inline backend has registered its formatter (``%matplotlib inline``). The format is
    ``retina`` (``retina_png``): a PNG at twice the figure's dpi, stored with its 1x width and height,
    and the size of its smallest text, so pages show it at the intended size and sharp on HiDPI screens (a PNG, unlike an SVG, is not compared by
    nbval, so stored outputs stay portable across CPUs). Every output that shows a stamped figure or
    table (see ``transformer_course._exhibit``) also gets the stamp in its metadata,
    ``{"transformer_course": {"made_by": ...}}``, which ``course.provenance`` reads from the stored
    notebook; a table of checked conclusions (``experiments.claims.check_claims``) adds its
    statements, ``{"transformer_course": {"claims": [...]}}``, which ``tests/test_calibration.py``
    matches with the calibration records. Returns False outside IPython (nothing to do).
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    try:
        shell.run_line_magic("matplotlib", "inline")
    except NotImplementedError:
        pass  # a bare InteractiveShell (tests, the grading kernel) has no GUI loop; the formatter below still applies
    from matplotlib_inline.config import InlineBackend

    backend = InlineBackend.instance(parent=shell)
    backend.figure_formats = {"retina"}
    formatter = shell.display_formatter
    formatter.formatters["image/png"].for_type(Figure, partial(retina_png, **backend.print_figure_kwargs))
    if not getattr(formatter.format, "records_exhibits", False):
        original = formatter.format

        def format_and_record(obj: Any, *args: Any, **kwargs: Any) -> tuple[dict, dict]:
            data, metadata = original(obj, *args, **kwargs)
            record = {}
            maker = made_by(obj)
            if maker is not None:
                record["made_by"] = maker
            claims = getattr(getattr(obj, "data", obj), "attrs", {}).get(CLAIMS_ATTR) if not isinstance(obj, Figure) else None
            if claims:
                record["claims"] = list(claims)
            if record:
                metadata = {**metadata, PROVENANCE_KEY: record}
            return data, metadata

        format_and_record.records_exhibits = True
        formatter.format = format_and_record
    return True


SEED_VARIABLE = "COURSE_SEED"  # the environment variable that sets a chapter's base seed


def course_seed() -> int:
    """The chapter's base seed: the environment variable ``COURSE_SEED`` if set, else 0.

    Every random draw of a chapter derives from this one number, so re-running a chapter with
    ``COURSE_SEED=7`` shows another draw of every experiment in it: an experiment's ensemble takes
    its member seeds from :func:`~transformer_course.experiments.seeds.ensemble_seeds` (independent
    streams, so two base seeds' ensembles share no seed), a single illustrative draw (an example
    batch, a timing input) seeds from ``course_seed() + k``.
    """
    text = os.environ.get(SEED_VARIABLE, "").strip()
    if not text:
        return 0
    if not text.isdigit():
        raise ValueError(f"{SEED_VARIABLE} must be a non-negative integer, got {text!r}")
    return int(text)


def setup_notebook(seed: int | None = None) -> torch.device:
    """Seed everything, round printed numbers, show figures inline, set the plot style; return the device.

    ``seed`` defaults to the base seed ``course_seed()`` (the environment variable ``COURSE_SEED``,
    else 0), which it prints, so a reader sees which draw the outputs come from.
    """
    seed = course_seed() if seed is None else check_int("seed", seed, minimum=0)
    enable_inline_figures()
    seed_everything(seed)
    torch.set_printoptions(precision=4, sci_mode=False)
    np.set_printoptions(precision=4, suppress=True)
    pd.set_option("display.precision", 2)
    use_course_style()
    print(f"Base seed {seed} (set the environment variable {SEED_VARIABLE} to draw again).")
    return best_device()


@exhibit
def environment_report() -> pd.DataFrame:
    """The package, Python, PyTorch and device versions, as a one-column table."""
    device = best_device()
    name = torch.cuda.get_device_name(0) if device.type == "cuda" else platform.machine()
    rows = {
        "transformer_course": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": f"{device.type} ({name})",
        "CPU threads used by torch": str(torch.get_num_threads()),
    }
    return pd.DataFrame({"value": rows}).rename_axis("component")


def show_source(obj: Any) -> Any:
    """Display the package's own source of ``obj`` as highlighted code (the code that is tested)."""
    from IPython.display import Code

    return Code(inspect.getsource(obj), language="python")


def course_timing_summary(path: str | os.PathLike) -> str:
    """One paragraph of the chapters' measured run times, read from ``benchmarks/course_timing.py``'s CSV.

    The one source of the course's run-time figures: the pages that quote them print this instead of
    typing numbers that the next measurement would make stale.

    Raises:
        ValueError: if ``path`` is not a readable CSV with the columns ``chapter``, ``seconds`` and ``budget_s``.
    """
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError) as error:
        raise ValueError(f"path must be the CSV benchmarks/course_timing.py writes, got {str(path)!r} ({error})") from None
    missing = {"chapter", "seconds", "budget_s"} - set(frame.columns)
    if missing:
        raise ValueError(f"path: {str(path)!r} has no column {', '.join(sorted(missing))}")
    chapters = frame[frame.chapter.str.match(r"dl\d{4}_")]
    capstone = chapters[chapters.chapter.str.startswith("dl0037")]
    ten = chapters[~chapters.chapter.str.startswith("dl0037")]
    rounds = int(frame["rounds"].max()) if "rounds" in frame else 1
    how = f"median of {rounds} rounds" if rounds > 1 else "one round"
    slowest = ten.loc[ten.seconds.idxmax()]
    text = (f"The ten chapters took {ten.seconds.min():.0f} to {ten.seconds.max():.0f} s each ({how}; the slowest, "
            f"{slowest.chapter}, {slowest.seconds:.1f} s against a budget of {slowest.budget_s:.0f} s), "
            f"{ten.seconds.sum():.0f} s together")
    if len(capstone):
        row = capstone.iloc[0]
        text += f"; the capstone {row.seconds:.1f} s (budget {row.budget_s:.0f} s)"
    return text + "."
