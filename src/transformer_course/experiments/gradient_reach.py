"""How fast does the gradient from the last output fade on its way back to token 1? An ensemble of initialisations.

The Transformer-vs-RNN chapter (DL0032) measures ``first_token_gradient_norm`` for sequence lengths n
and fits how it falls: for a recurrent model, by a factor per extra token (a geometric fit,
log g = c + n log r); for the Transformer layer, as a power of n (log g = c + s log n). One model is
one random draw, so the chapter draws ``NUM_SEEDS`` initialisations of every model and states its
conclusions about the spread (``gradient_reach_claims``), calibrated over many base seeds by
``benchmarks/calibration/dl0032_transformer_vs_rnn.py``, which calls the same functions.

The models, all of about the same size (the chapter's ``EncoderLayer(64, 4, 128)`` and recurrent
models of the width D whose ``ElmanRNN`` has the closest parameter count):

* "RNN, default init": ``ElmanRNN`` as PyTorch initialises ``nn.RNN`` (uniform weights of bound
  1/sqrt(D): spectral radius of W_hh about 1/sqrt(3) = 0.58, by the circular law);
* "RNN, orthogonal W_hh": the same, with an orthogonal hidden matrix (every singular value 1);
* "LSTM, default init": ``LSTM`` as PyTorch initialises ``nn.LSTM``;
* "LSTM, forget bias 1": the forget gate's bias raised by 1 (Gers et al., 2000; Jozefowicz et al., 2015);
* "Transformer": the encoder layer.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import pandas as pd
import torch
from torch import nn

from transformer_course._exhibit import exhibit
from transformer_course._validation import check_int
from transformer_course.measure.cost import count_parameters
from transformer_course.measure.dependency import first_token_gradient_norm
from transformer_course.nn.layers import EncoderLayer
from transformer_course.nn.rnn import LSTM, ElmanRNN, rnn_width_for_parameters
from .claims import Claim
from .seeds import ensemble_seeds
from .training import seeded

D_MODEL, NUM_HEADS, D_FF = 64, 4, 128  # the chapter's encoder layer
LENGTHS = (2, 4, 8, 16, 32)  # sequence lengths n of the fit
NUM_SEEDS = 8  # initialisations per model in one ensemble
EXPERIMENT = "gradient reach"  # the ensemble's name for seeds.ensemble_seeds
TRANSFORMER = "Transformer"
RECURRENT = ("RNN, default init", "RNN, orthogonal W_hh", "LSTM, default init", "LSTM, forget bias 1")
MODELS = RECURRENT + (TRANSFORMER,)


def transformer_layer() -> EncoderLayer:
    """The chapter's encoder layer (weights from the current global RNG)."""
    return EncoderLayer(d_model=D_MODEL, num_heads=NUM_HEADS, d_ff=D_FF)


def recurrent_width() -> int:
    """The width D of the ``ElmanRNN`` with the parameter count closest to the chapter's encoder layer."""
    return rnn_width_for_parameters(count_parameters(transformer_layer()))


def _orthogonal_rnn(d_model: int) -> ElmanRNN:
    rnn = ElmanRNN(d_model)
    nn.init.orthogonal_(rnn.hidden_proj.weight)
    return rnn


def model_factories() -> dict[str, Callable[[], nn.Module]]:
    """name -> a function building that model from the global RNG (call it inside ``seeded``)."""
    width = recurrent_width()
    return {
        "RNN, default init": lambda: ElmanRNN(width),
        "RNN, orthogonal W_hh": lambda: _orthogonal_rnn(width),
        "LSTM, default init": lambda: LSTM(width),
        "LSTM, forget bias 1": lambda: LSTM(width, forget_bias=1.0),
        TRANSFORMER: transformer_layer,
    }


def decay_fits(lengths: tuple[int, ...], gradients: np.ndarray) -> tuple[float, float]:
    """(factor per extra token, power of n) of a gradient curve, by least squares on log g.

    The factor is exp(slope) of log g against n (a geometric decay g ~ r^n gives r); the power is the
    slope of log g against log n (g ~ n^s gives s).
    """
    lengths_array = np.asarray(lengths, dtype=float)
    values = np.asarray(gradients, dtype=float)
    if lengths_array.size < 2 or values.shape != lengths_array.shape or not (np.isfinite(values) & (values > 0)).all():
        raise ValueError("gradients must hold one positive value per length, at least two")
    log_g = np.log(values)
    factor = float(np.exp(np.polyfit(lengths_array, log_g, 1)[0]))
    power = float(np.polyfit(np.log(lengths_array), log_g, 1)[0])
    return factor, power


@functools.lru_cache(maxsize=None)
def _one_seed(seed: int) -> tuple[tuple[str, tuple[float, ...], float, float], ...]:
    """Per model: (name, gradients at LENGTHS, ||W_hh||_2, spectral radius of W_hh (NaN if none))."""
    rows = []
    for index, (name, make) in enumerate(model_factories().items()):
        with seeded(seed * len(MODELS) + index):  # every (seed, model) pair its own draw
            model = make()
        inputs = [torch.Generator().manual_seed(seed) for _ in LENGTHS]  # the same inputs for every model
        gradients = tuple(first_token_gradient_norm(model, n, generator) for n, generator in zip(LENGTHS, inputs))
        norm = radius = float("nan")
        if isinstance(model, ElmanRNN):
            w_hh = model.hidden_proj.weight.detach().double()  # (D, D)
            norm = float(torch.linalg.matrix_norm(w_hh, ord=2))
            radius = float(torch.linalg.eigvals(w_hh).abs().max())
        rows.append((name, gradients, norm, radius))
    return tuple(rows)


@exhibit
def gradient_reach_ensemble(base_seed: int, num_seeds: int = NUM_SEEDS) -> pd.DataFrame:
    """Gradient reaching token 1, and its decay, for ``num_seeds`` draws of every model.

    Draw k (the k-th of ``ensemble_seeds(base_seed, EXPERIMENT, num_seeds)``) builds every model of ``MODELS`` from its own seed and measures
    ``first_token_gradient_norm`` at every n of ``LENGTHS`` (float64, one backward pass each).

    Args:
        base_seed: the chapter's base seed.
        num_seeds: draws per model (8 in the chapter).

    Returns:
        DataFrame indexed by ("model", "seed") with one column per length n (the gradient norms),
        "factor per token", "power of n" (``decay_fits``), "||W_hh||_2" and "spectral radius"
        (of the Elman models' hidden matrix; NaN for the others).
    """
    base_seed = check_int("base_seed", base_seed, minimum=0)
    num_seeds = check_int("num_seeds", num_seeds, minimum=1)
    records = []
    for seed in ensemble_seeds(base_seed, EXPERIMENT, num_seeds):
        for name, gradients, norm, radius in _one_seed(seed):
            factor, power = decay_fits(LENGTHS, np.array(gradients))
            records.append({"model": name, "seed": seed, **dict(zip(LENGTHS, gradients)),
                            "factor per token": factor, "power of n": power, "||W_hh||_2": norm,
                            "spectral radius": radius})
    frame = pd.DataFrame(records).set_index(["model", "seed"])
    return frame.loc[list(MODELS)]  # models in MODELS order


@exhibit
def gradient_reach_summary(ensemble: pd.DataFrame) -> pd.DataFrame:
    """Median, min and max over the seeds of each model's decay fits (from ``gradient_reach_ensemble``)."""
    columns = ["factor per token", "power of n"]
    summary = ensemble[columns].groupby(level="model", sort=False).agg(["median", "min", "max"])
    return summary


def gradient_reach_claims(ensemble: pd.DataFrame) -> list[Claim]:
    """The chapter's conclusions about the ensemble of ``gradient_reach_ensemble``, with calibrated bounds.

    * every recurrent model's gradient falls geometrically at initialisation (largest factor < 0.9);
    * how fast depends on the initialisation, not on recurrence as such: PyTorch's default Elman RNN
      loses about half per token (keeps between 0.4 and 0.55 of it), an orthogonal W_hh or an LSTM with
      forget bias 1 far less;
    * the default W_hh has ||W_hh||_2 > 1 yet a spectral radius well below 1 (the norm bound is loose);
    * the Transformer's gradient falls about as 1/n (a power between -1.4 and -0.6), not geometrically:
      a decay like n^-1.8 fails this claim.
    """
    by_model = {name: ensemble.loc[name] for name in MODELS}
    factor = {name: frame["factor per token"] for name, frame in by_model.items()}
    default = by_model["RNN, default init"]
    power = by_model[TRANSFORMER]["power of n"]
    return [
        Claim("largest per-token factor over seeds, RNN default init", factor["RNN, default init"].max(), "<", 0.55),
        Claim("smallest per-token factor over seeds, RNN default init", factor["RNN, default init"].min(), ">", 0.4),
        Claim("smallest per-token factor over seeds, RNN orthogonal W_hh", factor["RNN, orthogonal W_hh"].min(), ">", 0.65),
        Claim("smallest per-token factor over seeds, LSTM forget bias 1", factor["LSTM, forget bias 1"].min(), ">", 0.75),
        Claim("largest per-token factor over seeds and recurrent models",
              max(factor[name].max() for name in RECURRENT), "<", 0.9),
        Claim("smallest ||W_hh||_2 over seeds, RNN default init", default["||W_hh||_2"].min(), ">", 1.05),
        Claim("largest spectral radius over seeds, RNN default init", default["spectral radius"].max(), "<", 0.7),
        Claim("smallest power of n over seeds, Transformer", power.min(), ">", -1.4),
        Claim("largest power of n over seeds, Transformer", power.max(), "<", -0.6),
    ]
