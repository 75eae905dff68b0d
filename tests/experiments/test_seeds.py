"""Member seeds: independent by construction across base seeds, experiments and members."""

import importlib
import pkgutil

import pytest
import torch

import transformer_course.experiments as experiments
from transformer_course.experiments.seeds import SEED_BITS, ensemble_seeds, recorded_ensembles


def course_experiments() -> dict[str, int]:
    """Every experiment name a package module declares (``EXPERIMENT`` or ``*_EXPERIMENT``), with the largest size used."""
    names = {}
    for info in pkgutil.iter_modules(experiments.__path__):
        module = importlib.import_module(f"{experiments.__name__}.{info.name}")
        for attribute, value in vars(module).items():
            if (attribute == "EXPERIMENT" or attribute.endswith("_EXPERIMENT")) and isinstance(value, str):
                names[value] = 16
    return names


def test_every_experiment_of_the_course_is_found():
    names = course_experiments()
    assert len(names) >= 12, sorted(names)
    assert {"multi-head lookup", "decoding", "placement learning-rate sweep"} <= set(names)


def test_no_seed_is_shared_between_base_seeds_experiments_or_members():
    """Base seeds 0..199 (calibration uses 0..29, CI 1, the weekly check 2; 7919 lies outside, a far check), every experiment, 16 members."""
    seen = {}
    for base_seed in range(200):
        for experiment, size in course_experiments().items():
            for member, seed in enumerate(ensemble_seeds(base_seed, experiment, size)):
                assert 0 <= seed < 2 ** SEED_BITS
                key = (base_seed, experiment, member)
                assert seen.setdefault(seed, key) == key, f"seed {seed} drawn by {seen[seed]} and {key}"


def test_overlapping_windows_are_gone():
    """The old ensembles b..b+7 shared 7 of 8 seeds with b+1's; these share none, and nearby base seeds differ."""
    first, second = ensemble_seeds(0, "decoding", 8), ensemble_seeds(1, "decoding", 8)
    assert not set(first) & set(second)
    assert len(set(ensemble_seeds(0, "decoding", 8) + ensemble_seeds(0, "reversal", 8))) == 16


def test_seeds_are_a_function_of_their_arguments_and_prefixes_agree():
    assert ensemble_seeds(7, "decoding", 8) == ensemble_seeds(7, "decoding", 8)
    assert ensemble_seeds(7, "decoding", 3) == ensemble_seeds(7, "decoding", 8)[:3]
    torch.Generator().manual_seed(max(ensemble_seeds(7, "decoding", 8)) * 5 + 50_000)  # the experiments' derivations fit


def test_the_recorder_sees_every_call_and_only_inside_its_block():
    ensemble_seeds(0, "outside", 2)
    with recorded_ensembles() as calls:
        seeds = ensemble_seeds(3, "inside", 2)
    ensemble_seeds(0, "after", 2)
    assert calls == [("inside", 3, seeds)]


@pytest.mark.parametrize("args, error, name", [((-1, "x", 2), ValueError, "base_seed"), ((0.5, "x", 2), TypeError, "base_seed"),
                                               ((0, "", 2), ValueError, "experiment"), ((0, 3, 2), ValueError, "experiment"),
                                               ((0, "x", 0), ValueError, "size")])
def test_bad_arguments_name_themselves(args, error, name):
    with pytest.raises(error, match=name):
        ensemble_seeds(*args)
