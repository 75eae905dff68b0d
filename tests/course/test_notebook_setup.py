"""setup_notebook takes the base seed from COURSE_SEED, prints it, and every draw follows it."""

import pytest
import torch

from transformer_course.course.notebook import course_seed, setup_notebook


def test_course_seed_defaults_to_zero_and_reads_the_environment(monkeypatch):
    monkeypatch.delenv("COURSE_SEED", raising=False)
    assert course_seed() == 0
    monkeypatch.setenv("COURSE_SEED", " 17 ")
    assert course_seed() == 17


@pytest.mark.parametrize("value", ["-1", "1.5", "one"])
def test_a_bad_course_seed_is_refused_with_the_variable_named(monkeypatch, value):
    monkeypatch.setenv("COURSE_SEED", value)
    with pytest.raises(ValueError, match="COURSE_SEED must be a non-negative integer"):
        course_seed()


def test_setup_notebook_seeds_with_the_base_seed_and_prints_it(monkeypatch, capsys):
    draws = {}
    for value in ("3", "4", "3"):
        monkeypatch.setenv("COURSE_SEED", value)
        setup_notebook()
        draws.setdefault(value, []).append(torch.rand(3))
        assert f"Base seed {value}" in capsys.readouterr().out
    assert torch.equal(draws["3"][0], draws["3"][1]) and not torch.equal(draws["3"][0], draws["4"][0])
    setup_notebook(seed=5)  # an explicit seed wins over the environment
    assert "Base seed 5" in capsys.readouterr().out


def test_the_run_time_summary_is_read_from_the_timing_csv(tmp_path):
    from transformer_course.course.notebook import course_timing_summary

    csv = tmp_path / "course_timing.csv"
    csv.write_text("chapter,seconds,budget_s,rounds\ndl0027_a,38.0,60,3\ndl0032_b,7.2,60,3\n"
                   "dl0037_c,46.0,90,3\nrunning_the_course,3.0,30,3\n")
    assert course_timing_summary(csv) == (
        "The ten chapters took 7 to 38 s each (median of 3 rounds; the slowest, dl0027_a, 38.0 s against a "
        "budget of 60 s), 45 s together; the capstone 46.0 s (budget 90 s).")
    (tmp_path / "bad.csv").write_text("page,time\nx,1\n")
    with pytest.raises(ValueError, match="has no column budget_s, chapter, seconds"):
        course_timing_summary(tmp_path / "bad.csv")
    with pytest.raises(ValueError, match="path must be the CSV"):
        course_timing_summary(tmp_path / "missing.csv")


def test_running_the_course_states_the_torch_bound_of_pyproject():
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    dependencies = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    (torch,) = [d for d in dependencies if d.startswith("torch>=")]
    page = (root / "chapters" / "running_the_course.myst.md").read_text()
    assert f"`{torch}`" in page and page.count("torch>=") == page.count(torch)
