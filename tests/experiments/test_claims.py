"""Claims: a statistic, a comparison and a bound; check_claims fails on any claim that does not hold."""

import math

import pytest

from transformer_course.experiments.claims import CLAIMS_ATTR, Claim, check_claims, spread


def test_a_claim_holds_or_not_by_its_comparison_and_reports_its_margin():
    assert Claim("median accuracy", 0.93, ">=", 0.8).holds
    assert Claim("median accuracy", 0.8, ">=", 0.8).holds and not Claim("median accuracy", 0.8, ">", 0.8).holds
    assert not Claim("loss", 2.1, "<", 2.0).holds
    assert Claim("loss", 1.5, "<", 2.0).margin == pytest.approx(0.5)
    assert Claim("accuracy", 0.7, ">", 0.8).margin == pytest.approx(-0.1)
    assert not Claim("accuracy", math.nan, ">", 0.0).holds  # a NaN never supports a conclusion
    assert Claim("median accuracy at 4L, ALiBi", 0.9, ">=", 0.8).statement == "median accuracy at 4L, ALiBi >= 0.8"


def test_check_claims_returns_verdicts_and_records_the_statements():
    table = check_claims([Claim("a", 1.0, ">", 0.5), Claim("b", 0.1, "<=", 0.2)])
    assert list(table.index) == ["a > 0.5", "b <= 0.2"] and set(table.verdict) == {"holds"}
    assert table.attrs[CLAIMS_ATTR] == ["a > 0.5", "b <= 0.2"]


def test_check_claims_names_every_failing_claim_with_its_value():
    with pytest.raises(AssertionError, match=r"a > 0\.5 \(measured 0\.4\).*b <= 0\.2 \(measured 0\.3\)"):
        check_claims([Claim("a", 0.4, ">", 0.5), Claim("c", 1.0, ">", 0.0), Claim("b", 0.3, "<=", 0.2)])


@pytest.mark.parametrize("kwargs, error, message", [
    ({"name": "", "value": 1.0, "op": ">", "bound": 0.0}, ValueError, "name"),
    ({"name": "x", "value": 1.0, "op": "=>", "bound": 0.0}, ValueError, "op"),
    ({"name": "x", "value": "1", "op": ">", "bound": 0.0}, TypeError, "value"),
    ({"name": "x", "value": 1.0, "op": ">", "bound": math.inf}, ValueError, "bound"),
])
def test_bad_claims_are_refused_with_the_argument_named(kwargs, error, message):
    with pytest.raises(error, match=message):
        Claim(**kwargs)


def test_check_claims_refuses_an_empty_list_duplicates_and_non_claims():
    with pytest.raises(ValueError, match="at least one"):
        check_claims([])
    with pytest.raises(ValueError, match="distinct"):
        check_claims([Claim("a", 1.0, ">", 0.0), Claim("a", 2.0, ">", 0.0)])
    with pytest.raises(TypeError, match="Claim"):
        check_claims([("a", 1.0, ">", 0.0)])


def test_spread_gives_median_and_range_and_refuses_nan():
    assert spread([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0}
    with pytest.raises(ValueError, match="NaN"):
        spread([1.0, math.nan])
