"""Every conclusion a chapter asserts is calibrated: recorded over >= 30 base seeds, all passing.

A chapter asserts its conclusions with ``check_claims``, which records the claims' statements (each
with its bound) in the output's metadata. ``benchmarks/calibrate.py`` runs the same claims for base
seeds 0..29 and writes ``benchmarks/results/calibration/<chapter>.json``. A chapter whose bound was
fitted to the one run its author saw has no such record, or a record that fails on some base seed.
"""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("benchmarks_calibrate", ROOT / "benchmarks" / "calibrate.py")
calibrate = importlib.util.module_from_spec(spec)
sys.modules["benchmarks_calibrate"] = calibrate
spec.loader.exec_module(calibrate)

CHAPTERS = sorted((ROOT / "chapters").glob("dl*.ipynb"))


def asserted_claims(path: Path) -> list[str]:
    """The statements of every claims table a stored notebook shows."""
    statements = []
    for cell in nbformat.read(path, as_version=4).cells:
        for output in cell.get("outputs", []):
            statements += output.get("metadata", {}).get("transformer_course", {}).get("claims", [])
    return statements


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_asserted_claim_has_a_passing_calibration_record(path):
    statements = asserted_claims(path)
    record_path = calibrate.RESULTS_DIR / f"{path.stem}.json"
    if not statements:
        assert not record_path.exists(), f"{record_path.name} records claims that {path.name} no longer asserts"
        return
    assert (calibrate.CALIBRATION_DIR / f"{path.stem}.py").is_file(), f"{path.stem} asserts claims without a calibration module"
    assert record_path.is_file(), f"{path.stem} asserts claims with no calibration record: run benchmarks/calibrate.py {path.stem}"
    record = json.loads(record_path.read_text(encoding="utf-8"))
    assert len(set(record["base_seeds"])) >= calibrate.MIN_BASE_SEEDS
    recorded = {claim["statement"]: claim for claim in record["claims"]}
    assert sorted(recorded) == sorted(set(statements)), (
        "the chapter's claims and the calibration record differ (re-run the calibration): "
        f"only in the chapter {sorted(set(statements) - set(recorded))}, only in the record {sorted(set(recorded) - set(statements))}")
    for statement, claim in recorded.items():
        assert len(claim["values"]) == len(record["base_seeds"])
        assert claim["pass_rate"] == 1.0 and claim["min_margin"] > 0, f"{statement!r} failed on some base seed"


FAKE_MODULE = '''
from transformer_course.experiments.claims import Claim

def claims(base_seed):
    return [Claim("seed plus one", base_seed + 1.0, ">", 0.5), Claim("seed", float(base_seed), "<", 3.0)]
'''


def test_calibrate_records_values_pass_rates_and_margins(tmp_path):
    (tmp_path / "dl9999_fake.py").write_text(FAKE_MODULE)
    assert calibrate.chapters_with_calibration(tmp_path) == ["dl9999_fake"]
    record = calibrate.calibrate("dl9999_fake", [0, 1, 2, 3, 4], directory=tmp_path)
    first, second = record["claims"]
    assert first["statement"] == "seed plus one > 0.5" and first["values"] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert first["pass_rate"] == 1.0 and first["min_margin"] == pytest.approx(0.5)
    assert second["pass_rate"] == pytest.approx(3 / 5) and second["min_margin"] == pytest.approx(-1.0)


def test_calibrate_refuses_an_unknown_chapter(tmp_path):
    with pytest.raises(ValueError, match="chapter must name a module"):
        calibrate.calibrate("dl0000_missing", [0], directory=tmp_path)


def test_a_trial_below_thirty_base_seeds_never_replaces_the_record():
    assert calibrate.default_output("dl0030_positional_encoding", calibrate.MIN_BASE_SEEDS) == (
        calibrate.RESULTS_DIR / "dl0030_positional_encoding.json")
    trial = calibrate.default_output("dl0030_positional_encoding", 2)
    assert trial.parent == calibrate.RESULTS_DIR / "trials" and trial.name == "dl0030_positional_encoding.json"
    assert subprocess.run(["git", "check-ignore", "-q", str(trial)], cwd=ROOT).returncode == 0  # never committed
