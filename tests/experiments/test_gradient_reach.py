import numpy as np
import pandas as pd
import pytest

from transformer_course.experiments.seeds import ensemble_seeds
from transformer_course.experiments.seeds import ensemble_seeds

from transformer_course.experiments import gradient_reach
from transformer_course.experiments.gradient_reach import (EXPERIMENT, LENGTHS, MODELS, decay_fits, gradient_reach_claims,
                                                           gradient_reach_ensemble, gradient_reach_summary)


def test_decay_fits_recover_a_geometric_and_a_power_law():
    lengths = (2, 4, 8, 16, 32)
    factor, _ = decay_fits(lengths, 3.0 * 0.6 ** np.array(lengths))
    _, power = decay_fits(lengths, 2.0 * np.array(lengths, dtype=float) ** -1.8)
    assert factor == pytest.approx(0.6) and power == pytest.approx(-1.8)
    with pytest.raises(ValueError, match="one positive value per length"):
        decay_fits(lengths, [1.0, 0.5])
    with pytest.raises(ValueError, match="one positive value per length"):
        decay_fits((1, 2), [1.0, 0.0])


def test_ensemble_shape_and_summary():
    ensemble = gradient_reach_ensemble(3, num_seeds=2)
    assert list(ensemble.index.get_level_values("model").unique()) == list(MODELS)
    assert sorted(ensemble.index.get_level_values("seed").unique()) == sorted(ensemble_seeds(3, EXPERIMENT, 2))
    assert all(n in ensemble.columns for n in LENGTHS)
    assert (ensemble.loc["RNN, orthogonal W_hh", "spectral radius"] - 1).abs().max() < 1e-6
    assert ensemble.loc["Transformer", "spectral radius"].isna().all()
    summary = gradient_reach_summary(ensemble)
    assert list(summary.index) == list(MODELS)
    assert (summary["factor per token"]["min"] <= summary["factor per token"]["max"]).all()
    again = gradient_reach_ensemble(3, num_seeds=2)
    pd.testing.assert_frame_equal(ensemble, again)  # a function of the seeds only


def _fake_ensemble(transformer_power: float) -> pd.DataFrame:
    """A made-up ensemble: the real claims must reject a Transformer gradient falling as n^power."""
    rows = []
    factors = {"RNN, default init": 0.45, "RNN, orthogonal W_hh": 0.73, "LSTM, default init": 0.6,
               "LSTM, forget bias 1": 0.8}
    for model in MODELS:
        for seed in range(8):
            lengths = np.array(LENGTHS, dtype=float)
            curve = lengths ** transformer_power if model == "Transformer" else factors[model] ** lengths
            factor, power = decay_fits(LENGTHS, curve)
            elman = model.startswith("RNN, default")
            rows.append({"model": model, "seed": seed, **dict(zip(LENGTHS, curve)), "factor per token": factor,
                         "power of n": power, "||W_hh||_2": 1.15 if elman else np.nan,
                         "spectral radius": 0.58 if elman else np.nan})
    return pd.DataFrame(rows).set_index(["model", "seed"])


def test_the_transformer_claim_fails_on_a_decay_as_steep_as_n_to_the_minus_1_8():
    assert all(claim.holds for claim in gradient_reach_claims(_fake_ensemble(-1.0)))
    failing = [claim.name for claim in gradient_reach_claims(_fake_ensemble(-1.8)) if not claim.holds]
    assert failing == ["smallest power of n over seeds, Transformer"]


def test_per_seed_results_are_cached():
    gradient_reach._one_seed.cache_clear()
    gradient_reach_ensemble(0, num_seeds=1)
    gradient_reach_ensemble(0, num_seeds=1)
    assert gradient_reach._one_seed.cache_info().hits == 1
