"""Conclusions as checked statements about an ensemble: a statistic, a comparison, a bound.

A chapter draws a conclusion from an experiment run over several seeds ("ALiBi keeps more than
80% accuracy at four times the training length on the median seed"). ``Claim`` holds one such
statement with the value the run measured; ``check_claims`` fails on any claim that does not hold
and returns a table of verdicts for the chapter to show. The same claims, computed by the same
package function for many base seeds, make the calibration record (``benchmarks/calibrate.py``)
that shows each bound holds with margin on every base seed, not only on the one a chapter ran.
"""

from __future__ import annotations

import json
import math
import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources

import pandas as pd

from transformer_course._exhibit import exhibit

_COMPARE = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}
CLAIMS_ATTR = "course_claims"  # DataFrame.attrs key: the statements of a claims table (see course.notebook)


@dataclass(frozen=True)
class Claim:
    """One conclusion: ``value`` (a statistic of an ensemble) ``op`` ``bound``.

    Args:
        name: what the value is, in words ("median accuracy at 4L, ALiBi").
        value: the measured statistic.
        op: one of ``>``, ``>=``, ``<``, ``<=``.
        bound: the threshold the conclusion asserts, chosen with margin from a calibration sweep.
    """

    name: str
    value: float
    op: str
    bound: float

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"name must be a non-empty string, got {self.name!r}")
        if self.op not in _COMPARE:
            raise ValueError(f"op must be one of {sorted(_COMPARE)}, got {self.op!r}")
        for field in ("value", "bound"):
            number = getattr(self, field)
            if isinstance(number, bool) or not isinstance(number, (int, float)):
                raise TypeError(f"{field} must be a real number, got {type(number).__name__}")
            if field == "bound" and not math.isfinite(number):
                raise ValueError(f"bound must be finite, got {number}")
            object.__setattr__(self, field, float(number))

    @property
    def statement(self) -> str:
        """The conclusion in words, with its bound: what the calibration record is keyed by."""
        return f"{self.name} {self.op} {self.bound:g}"

    @property
    def holds(self) -> bool:
        """Whether the measured value satisfies the bound (a NaN value never does)."""
        return not math.isnan(self.value) and _COMPARE[self.op](self.value, self.bound)

    @property
    def margin(self) -> float:
        """How far the value lies on the right side of the bound (negative when the claim fails)."""
        return self.value - self.bound if self.op.startswith(">") else self.bound - self.value


@exhibit
def check_claims(claims: Iterable[Claim]) -> pd.DataFrame:
    """Assert every claim; return a table of (conclusion, verdict) to show in the chapter.

    Raises ``AssertionError`` naming every claim that fails, with its measured value. The table
    prints only the statements and verdicts (stable on every CPU), not the values; its statements
    are also kept in ``table.attrs["course_claims"]``, which the notebook records in the output's
    metadata so the tests can match each asserted claim with its calibration record.
    """
    claims = list(claims)
    if not claims:
        raise ValueError("claims must hold at least one Claim, got none")
    for claim in claims:
        if not isinstance(claim, Claim):
            raise TypeError(f"claims must hold Claim objects, got {type(claim).__name__}")
    statements = [claim.statement for claim in claims]
    if len(set(statements)) != len(statements):
        raise ValueError("claims must be distinct statements; two claims say the same thing")
    failing = [f"{claim.statement} (measured {claim.value:.4g})" for claim in claims if not claim.holds]
    if failing:
        raise AssertionError("conclusion(s) not supported by this run: " + "; ".join(failing))
    table = pd.DataFrame({"conclusion": statements, "verdict": "holds"}).set_index("conclusion")
    table.attrs[CLAIMS_ATTR] = statements
    return table


def spread(values: Iterable[float]) -> dict[str, float]:
    """Median, minimum and maximum of an ensemble's values (NaN-free), for tables and claims."""
    series = pd.Series(list(values), dtype=float)
    if series.empty or series.isna().any():
        raise ValueError("values must be a non-empty collection of numbers without NaN")
    return {"median": float(series.median()), "min": float(series.min()), "max": float(series.max())}


CALIBRATION_DATA = ("_data", "calibration")  # the records of benchmarks/calibrate.py, inside the package


def calibration_record(chapter: str) -> dict:
    """The calibration record of ``chapter`` (``benchmarks/calibrate.py``), read from the installed package.

    Raises:
        ValueError: if ``chapter`` names no calibrated chapter (e.g. ``"dl0030_positional_encoding"``).
    """
    folder = resources.files("transformer_course").joinpath(*CALIBRATION_DATA)
    known = sorted(entry.name[:-5] for entry in folder.iterdir() if entry.name.endswith(".json"))
    if chapter not in known:
        raise ValueError(f"chapter must name a calibrated chapter, got {chapter!r} (known: {', '.join(known)})")
    return json.loads(folder.joinpath(f"{chapter}.json").read_text(encoding="utf-8"))


def calibration_summary(record: Mapping) -> str:
    """What a record checked, in one sentence: how many independent ensembles, of how many seeds, under which kernels."""
    ensembles = record["ensembles"]
    seeds = {seed for ensemble in ensembles for seed in ensemble}
    disjoint = len(seeds) == sum(len(ensemble) for ensemble in ensembles)
    sizes = sorted({len(ensemble) for ensemble in ensembles})
    size = f"{sizes[0]}" if len(sizes) == 1 else f"{sizes[0]} to {sizes[-1]}"
    failed = sum(claim["failures"] > 0 for claim in record["claims"])
    return (f"Calibration: {len(record['claims'])} claims, each computed on {len(ensembles)} "
            f"{'independent ' if disjoint else 'overlapping '}ensembles (base seeds {min(record['base_seeds'])} to "
            f"{max(record['base_seeds'])}, {size} member seeds each, {len(seeds)} distinct seeds in all), under "
            f"{len(record['kernel_sets'])} CPU kernel sets ({', '.join(record['kernel_sets'])}); "
            + (f"every claim held on every ensemble under every kernel set, so a fresh draw fails any one claim "
               f"with probability at most {max(c['failure_rate_upper_95'] for c in record['claims']):.0%} "
               f"(95% confidence, Clopper-Pearson)." if not failed else f"{failed} claim(s) failed on some ensemble."))


@exhibit
def calibration_table(record: Mapping) -> pd.DataFrame:
    """Per claim of a calibration record: median value, smallest margin, failures and the failure-rate bound.

    "failed" counts the ensembles on which the claim failed under some kernel set; "P(fail) <=" is the
    upper end of the Clopper-Pearson interval for the chance that a fresh ensemble (another base seed)
    fails the claim, from its failures among the record's ensembles (with none in 30 it is 0.116).
    "median" is over every ensemble under every kernel set, shown to three digits.
    """
    rows = {claim["statement"]: {"median": float(f"{claim['median_value']:.3g}"),
                                 "min margin": float(f"{claim['min_margin']:.2g}"),
                                 "failed": f"{claim['failures']}/{claim['ensembles']}",
                                 "P(fail) <=": round(claim["failure_rate_upper_95"], 3)}
            for claim in record["claims"]}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("claim (statistic, op, bound)")
