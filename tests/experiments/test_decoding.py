"""DL0035/DL0036's decoding experiment: the measurements of one run and the claims of an ensemble."""

from __future__ import annotations

import dataclasses

import pytest

from transformer_course.experiments.seeds import ensemble_seeds
from transformer_course.experiments.seeds import ensemble_seeds
import torch

from transformer_course.experiments import decoding as dc
from transformer_course.experiments.data import make_batch
from transformer_course.experiments.seq2seq import seq2seq_loss, toy_transformer, train_seq2seq


def _batch(n: int = 30):
    return make_batch("reverse", n, 5, torch.Generator().manual_seed(3), split="heldout")


def test_measurements_of_a_model_that_copies_the_labels_perfectly_and_one_untrained():
    model = toy_transformer(d_model=16, num_heads=2, num_layers=1, d_ff=32, seed=0)
    train_seq2seq(model, "reverse", length=5, steps=120, batch_size=32, lr=3e-3, warmup_steps=10, seed=0)
    src, decoder_input, labels = _batch()
    measured = dc.measure_decoding(model, src, decoder_input, labels, beam_width=2)
    untrained = dc.measure_decoding(toy_transformer(d_model=16, num_heads=2, num_layers=1, d_ff=32, seed=0),
                                    src, decoder_input, labels, beam_width=2)
    assert measured["forced_by_position"].shape == measured["free_by_position"].shape == (labels.shape[1],)
    assert measured["token_accuracy"] == pytest.approx(float(measured["forced_by_position"].mean()))
    assert measured["greedy"] <= float(measured["free_by_position"].min()) + 1e-12  # a whole row right: every position
    assert measured["token_accuracy"] > untrained["token_accuracy"] + 0.2
    assert 0 <= measured["calibration_error"] <= 1 and 0 < measured["confidence"] <= 1


def test_label_smoothing_changes_the_training_loss_and_zero_keeps_the_old_path():
    model = toy_transformer(d_model=16, num_heads=2, num_layers=1, d_ff=32, seed=0)
    batch = _batch()
    plain = seq2seq_loss(model, batch)
    assert torch.equal(seq2seq_loss(model, batch, label_smoothing=0.0), plain)
    assert not torch.allclose(seq2seq_loss(model, batch, label_smoothing=0.1), plain)


def _run(seed, eps=0.0, accuracy=0.8, confidence=0.7, greedy=0.3, beam=0.35, gap=0.1):
    forced = torch.full((9,), accuracy, dtype=torch.float64)
    free = forced - gap
    free[0] = forced[0]
    return dc.DecodingRun(seed, eps, [1.0], accuracy, confidence, abs(confidence - accuracy), greedy, beam, forced, free)


def test_claims_hold_on_runs_that_show_the_effects_and_fail_on_runs_that_do_not():
    plain = [_run(k) for k in range(8)]
    smoothed = [_run(k, 0.1, accuracy=0.82, confidence=0.65) for k in range(8)]
    assert all(claim.holds for claim in dc.label_smoothing_claims(plain, smoothed))
    assert all(claim.holds for claim in dc.beam_claims(plain))
    assert all(claim.holds for claim in dc.exposure_claims(plain))
    assert not all(claim.holds for claim in dc.label_smoothing_claims(plain, plain))  # no effect: the claims fail
    assert not all(claim.holds for claim in dc.beam_claims([_run(k, beam=0.3) for k in range(8)]))
    assert not all(claim.holds for claim in dc.exposure_claims([_run(k, gap=0.0) for k in range(8)]))


def test_claims_reject_unpaired_or_empty_runs():
    plain = [_run(k) for k in range(3)]
    with pytest.raises(ValueError, match="same seeds"):
        dc.label_smoothing_claims(plain, [_run(k + 1) for k in range(3)])
    with pytest.raises(TypeError, match="runs"):
        dc.beam_claims([])
    with pytest.raises(TypeError, match="runs"):
        dc.exposure_claims([dataclasses.asdict(plain[0])])


def test_an_ensemble_in_two_workers_is_the_plain_loop_bit_for_bit():
    from transformer_course.experiments.decoding import decoding_ensemble

    loop = decoding_ensemble(3, num_seeds=2)
    parallel = decoding_ensemble(3, num_seeds=2, workers=2)
    assert [run.seed for run in parallel] == ensemble_seeds(3, dc.EXPERIMENT, 2)
    for a, b in zip(loop, parallel):
        assert a.losses == b.losses and a.token_accuracy == b.token_accuracy and a.confidence == b.confidence
