"""How the original model was trained and decoded, measured on a small reversal model over seeds.

DL0035 (label smoothing, beam search) and DL0036 (exposure bias) share one cheap setting,
:data:`DECODING`: a 1 + 1 layer ``toy_transformer`` trained briefly on reversal, so that it is
good but not perfect (its mistakes are what the three measurements look at). One run
(:func:`decoding_run`) trains it from one seed, with or without label smoothing, and measures on
held-out sources:

* per-token accuracy and confidence under teacher forcing, and the expected calibration error
  (``measure.calibration``) of the next-token predictions;
* exact match of greedy decoding and of beam search (``nn.decoding.beam_search``, width
  :data:`BEAM_WIDTH`);
* per-position accuracy with teacher forcing (the decoder reads the reference prefix) and free
  running (it reads its own greedy output): the gap is *exposure bias*, the model is trained
  only on reference prefixes and meets its own mistakes only at inference.

Shape legend: B sources, T decoder length (S + 1), V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from transformer_course._validation import check_int, check_probability
from transformer_course.measure.calibration import expected_calibration_error
from transformer_course.nn.decoding import beam_search
from transformer_course.nn.model import Transformer
from .claims import Claim
from .parallel import map_runs
from .seeds import ensemble_seeds
from .data import BOS_ID, EOS_ID
from .reversal import ENSEMBLE_SIZE, ReversalSettings, heldout_reversal_batch, train_reversal_model

EXPERIMENT = "decoding"  # the ensemble's name for seeds.ensemble_seeds (DL0035 and DL0036 read the same runs)
DECODING = ReversalSettings(d_model=32, num_heads=2, num_layers=1, d_ff=64, length=8, steps=80, batch_size=32,
                            lr=3e-3, warmup_steps=10, num_heldout=250)
LABEL_SMOOTHING = 0.1  # the paper's epsilon_ls (Vaswani et al., 2017, §5.4)
BEAM_WIDTH = 4  # the paper's beam size (§6.1)


@dataclass
class DecodingRun:
    """What one seed's run measured (see the module docstring)."""

    seed: int
    label_smoothing: float
    losses: list[float]
    token_accuracy: float  # teacher forcing, all T positions of the held-out sources
    confidence: float  # mean top probability over the same predictions
    calibration_error: float  # their expected calibration error (10 bins)
    greedy: float  # exact match of greedy decoding
    beam: float  # exact match of beam search, width BEAM_WIDTH
    forced_by_position: torch.Tensor  # (T,) accuracy at each position, teacher forcing
    free_by_position: torch.Tensor  # (T,) accuracy at each position, free-running (greedy) decoding


def _pad_to(tokens: torch.Tensor, length: int) -> torch.Tensor:
    """(B, L) generated ids (without <bos>) padded with <eos> to (B, length), as ``greedy_decode`` pads."""
    fill = torch.full((tokens.shape[0], length - tokens.shape[1]), EOS_ID, dtype=tokens.dtype)
    return torch.cat((tokens, fill), dim=1)


@torch.no_grad()
def measure_decoding(model: Transformer, src: torch.Tensor, decoder_input: torch.Tensor, labels: torch.Tensor,
                     beam_width: int = BEAM_WIDTH) -> dict:
    """The measurements of :class:`DecodingRun` for a trained model on (src, decoder_input, labels).

    Returns:
        {"token_accuracy", "confidence", "calibration_error", "greedy", "beam" (floats),
        "forced_by_position", "free_by_position" ((T,) float64 tensors)}.
    """
    model.eval()
    probs = model(src, decoder_input).softmax(dim=-1)  # (B, T, V), teacher forcing
    confidence, predicted = probs.max(dim=-1)  # (B, T) each
    forced = predicted == labels  # (B, T)
    t_len = labels.shape[1]
    greedy = _pad_to(model.greedy_decode(src, t_len, BOS_ID, EOS_ID)[:, 1:], t_len)  # (B, T)
    beam = _pad_to(beam_search(model, src, t_len, BOS_ID, EOS_ID, beam_width)[:, 1:], t_len)  # (B, T)
    free = greedy == labels  # (B, T): position t right, after the model read its own t earlier tokens
    return {"token_accuracy": float(forced.double().mean()), "confidence": float(confidence.double().mean()),
            "calibration_error": expected_calibration_error(confidence.flatten(), forced.flatten()),
            "greedy": float(free.all(dim=1).double().mean()), "beam": float((beam == labels).all(dim=1).double().mean()),
            "forced_by_position": forced.double().mean(dim=0), "free_by_position": free.double().mean(dim=0)}


def decoding_run(seed: int, label_smoothing: float = 0.0, settings: ReversalSettings = DECODING) -> DecodingRun:
    """Train the :data:`DECODING` model from ``seed`` (with ``label_smoothing``) and measure it on its held-out sources."""
    seed = check_int("seed", seed, minimum=0)
    label_smoothing = check_probability("label_smoothing", label_smoothing)
    model, losses = train_reversal_model(seed, settings, label_smoothing=label_smoothing)
    src, decoder_input, labels = heldout_reversal_batch(seed, settings)
    return DecodingRun(seed, label_smoothing, losses, **measure_decoding(model, src, decoder_input, labels))


def decoding_ensemble(base_seed: int, label_smoothing: float = 0.0, num_seeds: int = ENSEMBLE_SIZE,
                      settings: ReversalSettings = DECODING, workers: int = 1) -> list[DecodingRun]:
    """:func:`decoding_run` for the seeds ``ensemble_seeds(base_seed, EXPERIMENT, num_seeds)``, in ``workers``
    processes (:func:`~transformer_course.experiments.parallel.map_runs`: the same runs bit for bit)."""
    base_seed = check_int("base_seed", base_seed, minimum=0)
    num_seeds = check_int("num_seeds", num_seeds, minimum=1)
    workers = check_int("workers", workers, minimum=1)
    return map_runs(decoding_run, [(seed, label_smoothing, settings) for seed in ensemble_seeds(base_seed, EXPERIMENT, num_seeds)],
                    workers=workers)


def _median(values) -> float:
    return float(torch.tensor(list(values), dtype=torch.float64).median())


def _check_runs(runs: object, name: str = "runs") -> list[DecodingRun]:
    if not isinstance(runs, list) or not runs or not all(isinstance(run, DecodingRun) for run in runs):
        raise TypeError(f"{name} must be a non-empty list of DecodingRun")
    return runs


def _paired(plain: list[DecodingRun], smoothed: list[DecodingRun]) -> list[tuple[DecodingRun, DecodingRun]]:
    _check_runs(plain, "plain")
    _check_runs(smoothed, "smoothed")
    if [run.seed for run in plain] != [run.seed for run in smoothed]:
        raise ValueError("plain and smoothed must hold runs of the same seeds, in the same order")
    return list(zip(plain, smoothed))


def label_smoothing_claims(plain: list[DecodingRun], smoothed: list[DecodingRun]) -> list[Claim]:
    """DL0035's conclusions on label smoothing: the runs of one seed, without and with it, compared.

    The two runs of a seed start from the same weights and see the same batches, so the
    difference of a measurement between them is the effect of the loss alone.
    """
    pairs = _paired(plain, smoothed)
    return [
        Claim("median change of per-token accuracy with label smoothing (paired by seed)",
              _median(s.token_accuracy - p.token_accuracy for p, s in pairs), ">=", 0.005),
        Claim("median change of mean confidence with label smoothing (paired by seed)",
              _median(s.confidence - p.confidence for p, s in pairs), "<=", -0.01),
        Claim("lowest change of expected calibration error with label smoothing (paired by seed)",
              min(s.calibration_error - p.calibration_error for p, s in pairs), ">=", 0.01),
        Claim("largest mean confidence minus per-token accuracy, over both arms (all underconfident)",
              max(r.confidence - r.token_accuracy for r in plain + smoothed), "<=", 0.0),
    ]


def beam_claims(runs: list[DecodingRun]) -> list[Claim]:
    """DL0035's conclusions on beam search against greedy decoding (exact match, same models)."""
    _check_runs(runs)
    return [
        Claim(f"seeds whose exact match is higher with beam search (width {BEAM_WIDTH}) than greedy",
              sum(r.beam > r.greedy for r in runs), ">", len(runs) / 2),  # "in most seeds": a majority
        Claim(f"mean over seeds of the exact-match gain of beam search (width {BEAM_WIDTH}) over greedy",
              sum(r.beam - r.greedy for r in runs) / len(runs), ">=", 0.005),
        Claim(f"lowest exact-match gain of beam search (width {BEAM_WIDTH}) over greedy",
              min(r.beam - r.greedy for r in runs), ">=", -0.03),  # "never 3 in 100 fewer": one draw of 30 lost 0.016
    ]


def exposure_gap(run: DecodingRun) -> torch.Tensor:
    """(T,) per-position accuracy lost by free running: teacher-forced minus free-running accuracy."""
    return run.forced_by_position - run.free_by_position


def exposure_claims(runs: list[DecodingRun]) -> list[Claim]:
    """DL0036's conclusions on exposure bias, from the runs without label smoothing."""
    _check_runs(runs)
    return [
        Claim("median over seeds of the mean accuracy gap over the other digit positions",
              _median(float(exposure_gap(r)[1:-1].mean()) for r in runs), ">=", 0.05),
        Claim("smallest mean accuracy gap over the other digit positions, over seeds",
              min(float(exposure_gap(r)[1:-1].mean()) for r in runs), ">", 0.0),  # "in every seed": a gap, however small
    ]
