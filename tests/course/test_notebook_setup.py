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
