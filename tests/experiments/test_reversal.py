"""Tests for DL0035's reversal ensemble: activation patching, the per-run statistics, the claims."""

from __future__ import annotations

import pytest

from transformer_course.experiments.seeds import ensemble_seeds
from transformer_course.experiments.seeds import ensemble_seeds
import torch

from transformer_course.experiments import reversal as rv
from transformer_course.experiments.claims import Claim
from transformer_course.experiments.data import make_batch
from transformer_course.experiments.seq2seq import toy_transformer


def _batch(n: int = 40):
    return make_batch("reverse", n, 6, torch.Generator().manual_seed(3), split="heldout")


def test_patching_changes_nothing_when_the_decoder_ignores_the_memory():
    model = toy_transformer(d_model=16, num_heads=2, num_layers=1, d_ff=32, seed=1).eval()
    with torch.no_grad():
        for layer in model.decoder.layers:  # cut the only path from the memory to the outputs
            layer.cross_attn.out_proj.weight.zero_()
            layer.cross_attn.out_proj.bias.zero_()
    src, decoder_input, _ = _batch()
    changed, copied = rv.patch_memory_effect(model, src, decoder_input, src.roll(1, dims=0))
    assert changed.shape == (7, 6) and copied.shape == (6,)
    assert (changed == 0).all()


def test_patching_an_untouched_model_moves_some_output():
    model = toy_transformer(d_model=16, num_heads=2, num_layers=1, d_ff=32, seed=1).eval()
    src, decoder_input, _ = _batch()
    changed, copied = rv.patch_memory_effect(model, src, decoder_input, src.roll(1, dims=0))
    assert changed.max() > 0 and ((changed >= 0) & (changed <= 1)).all() and ((copied >= 0) & (copied <= 1)).all()


def test_patching_rejects_mismatched_shapes():
    model = toy_transformer(d_model=16, num_heads=2, num_layers=1, d_ff=32, seed=1)
    src, decoder_input, _ = _batch()
    with pytest.raises(ValueError, match="donor"):
        rv.patch_memory_effect(model, src, decoder_input, src[:, :3])
    with pytest.raises(TypeError, match="model"):
        rv.patch_memory_effect(torch.nn.Linear(2, 2), src, decoder_input, src)


def _run(changed: torch.Tensor, accuracy: float = 1.0, seed: int = 0) -> rv.ReversalRun:
    s = changed.shape[1]
    return rv.ReversalRun(seed, [2.5, 0.05], accuracy, torch.full((2, 4), 0.5, dtype=torch.float64),
                          torch.tensor([0.9, 0.8], dtype=torch.float64), changed,
                          torch.ones(s, dtype=torch.float64), 1e-5, 1.0)


def test_run_statistics_read_the_right_cells():
    s = 4
    changed = torch.zeros(s + 1, s, dtype=torch.float64)
    for j in range(s):
        changed[s - 1 - j, j] = 1.0  # the mirror
        changed[s - j, j] = 0.5  # the next output
    changed[0, 0] = 0.2  # a far cell: output 0 from source position 0
    run = _run(changed)
    assert run.mirror_changed == 1.0 and run.next_changed == 0.5 and run.far_changed == pytest.approx(0.2)
    assert run.steps_to_threshold == 2 and run.best_layer_alignment == 0.5 and run.copied == 1.0


def test_claims_are_grouped_and_fail_on_a_bad_ensemble():
    s = 4
    good = torch.zeros(s + 1, s, dtype=torch.float64)
    for j in range(s):
        good[s - 1 - j, j], good[s - j, j] = 1.0, 0.5
    groups = rv.reversal_claims([_run(good, seed=k) for k in range(8)])
    assert set(groups) == {"training", "attention", "patching", "placement"}
    assert all(isinstance(c, Claim) for group in groups.values() for c in group)
    bad = rv.reversal_claims([_run(torch.zeros(s + 1, s, dtype=torch.float64), accuracy=0.5)])
    assert not all(c.holds for c in bad["patching"]) and not all(c.holds for c in bad["training"])
    with pytest.raises(TypeError):
        rv.reversal_claims([])


def test_one_short_run_is_measured_end_to_end():
    settings = rv.ReversalSettings(d_model=16, num_heads=2, num_layers=1, d_ff=32, length=4, steps=3,
                                   batch_size=8, warmup_steps=1, num_heldout=20)
    (run,) = rv.reversal_ensemble(5, 1, settings, keep_models=True)
    assert run.seed == ensemble_seeds(5, rv.EXPERIMENT, 1)[0] and len(run.losses) == 3 and run.model is not None
    assert run.alignment.shape == (1, 2) and run.patch_changed.shape == (5, 4)
    assert run.post_ln_departure < 1e-3 < 0.05 < run.pre_ln_departure
