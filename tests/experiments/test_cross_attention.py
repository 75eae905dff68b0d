"""Tests for reading a decoder's cross-attention maps and scoring their anti-diagonal."""

from __future__ import annotations

import pytest
import torch

from transformer_course.experiments.cross_attention import (antidiagonal_mass, antidiagonal_table,
                                                            cross_attention_weights)
from transformer_course.experiments.data import make_batch
from transformer_course.experiments.seq2seq import toy_transformer, train_seq2seq


def _model():
    return toy_transformer(d_model=16, num_heads=2, num_layers=2, d_ff=32).eval()


def test_weights_match_the_modules_own_weights_and_the_model_is_unchanged(gen):
    model = _model()
    src, decoder_input, _ = make_batch("reverse", 3, 5, gen)
    with torch.no_grad():
        expected_logits = model(src, decoder_input)
    weights = cross_attention_weights(model, src, decoder_input)
    assert weights.shape == (2, 3, 2, 6, 5)  # (N, B, H, T, S)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 2, 6))
    with torch.no_grad():  # recompute layer by layer: the hooks record what each cross_attn computes
        memory = model.encode(src)
        x = model._embed(decoder_input, model.tgt_embed)
        mask = torch.ones(6, 6).tril().bool()
        for i, layer in enumerate(model.decoder.layers):
            y = layer.norm1(x + layer.self_attn(x, x, x, mask=mask))
            _, reference = layer.cross_attn(y, memory, memory, need_weights=True)
            torch.testing.assert_close(weights[i], reference)
            x = layer(x, memory, self_mask=mask)
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())  # hooks removed
    with torch.no_grad():
        torch.testing.assert_close(model(src, decoder_input), expected_logits)


def test_a_source_mask_is_respected(gen):
    model = _model()
    src, decoder_input, _ = make_batch("reverse", 2, 4, gen)
    src_mask = torch.tensor([[True, True, True, False]])  # (1, S): the last source position is hidden
    weights = cross_attention_weights(model, src, decoder_input, src_mask=src_mask)
    assert (weights[..., 3] == 0).all()


def test_antidiagonal_mass_is_one_on_the_mirror_and_one_over_s_when_uniform():
    s = 5
    mirror = torch.zeros(2, 3, s + 1, s)  # (B, H, T, S), T = S + 1 as in reversal (last query: <eos>)
    mirror[:, :, torch.arange(s), s - 1 - torch.arange(s)] = 1.0
    mirror[:, :, s, 0] = 1.0  # the <eos> query is left out whatever it does
    torch.testing.assert_close(antidiagonal_mass(mirror), torch.ones(3))
    torch.testing.assert_close(antidiagonal_mass(torch.full((2, 3, s + 1, s), 1 / s)), torch.full((3,), 1 / s))
    diagonal = torch.eye(s).expand(2, 3, s, s)  # copying, not reversing
    assert antidiagonal_mass(diagonal).max() <= 1 / s + 1e-6  # only the middle cell (odd S) is on both
    # extra leading dims (layers) are kept, and the batch is averaged
    stacked = torch.stack([mirror, torch.full_like(mirror, 1 / s)])  # (N, B, H, T, S)
    assert antidiagonal_mass(stacked).shape == (2, 3)


def test_a_width_counts_the_neighbours_of_the_mirrored_position():
    s = 6
    shifted = torch.zeros(1, 1, s, s)  # every query reads the source position next to its mirror
    shifted[0, 0, torch.arange(1, s), s - torch.arange(1, s)] = 1.0  # t -> S - t, one right of S - 1 - t
    shifted[0, 0, 0, 0] = 1.0  # t = 0 (mirror S - 1) reads the far end instead
    assert antidiagonal_mass(shifted).item() == 0.0
    assert antidiagonal_mass(shifted, width=1).item() == pytest.approx((s - 1) / s)
    assert antidiagonal_mass(shifted, width=s).item() == pytest.approx(1.0)
    uniform = torch.full((1, 1, s, s), 1 / s)
    assert antidiagonal_mass(uniform, width=1).item() == pytest.approx((3 * s - 2) / s / s)  # two ends lose one


def test_table_has_one_row_per_layer_and_the_mean_of_heads():
    s = 4
    w = torch.full((2, 1, 2, s, s), 1 / s)  # (N, B, H, T, S)
    w[1, :, 0] = 0.0
    w[1, :, 0, torch.arange(s), s - 1 - torch.arange(s)] = 1.0
    table = antidiagonal_table(w)
    assert list(table.index) == ["decoder layer 1", "decoder layer 2"]
    assert list(table.columns) == ["head 1", "head 2", "mean of heads"]
    assert table.loc["decoder layer 2", "head 1"] == pytest.approx(1.0)
    assert table.loc["decoder layer 2", "mean of heads"] == pytest.approx((1.0 + 1 / s) / 2)


@pytest.mark.slow
def test_a_model_trained_to_reverse_attends_along_the_antidiagonal():
    model = toy_transformer(d_model=32, num_heads=4, num_layers=1, d_ff=64)
    train_seq2seq(model, "reverse", length=4, steps=150, batch_size=32, lr=3e-3, warmup_steps=20)
    src, decoder_input, _ = make_batch("reverse", 64, 4, torch.Generator().manual_seed(1), split="heldout")
    table = antidiagonal_table(cross_attention_weights(model, src, decoder_input))
    assert table["mean of heads"].max() > 0.5  # uniform attention would give 1/4


@pytest.mark.parametrize("call, error, match", [
    (lambda: cross_attention_weights("model", torch.zeros(1, 3, dtype=torch.long), torch.zeros(1, 4, dtype=torch.long)),
     TypeError, "model must be"),
    (lambda: cross_attention_weights(_model(), torch.zeros(3, dtype=torch.long), torch.zeros(1, 4, dtype=torch.long)),
     ValueError, "src must have 2 dimensions"),
    (lambda: cross_attention_weights(_model(), torch.zeros(2, 3, dtype=torch.long), torch.zeros(1, 4, dtype=torch.long)),
     ValueError, "same batch size"),
    (lambda: antidiagonal_mass(torch.zeros(3, 3, 3)), ValueError, r"weights must have shape \(\.\.\., B, H, T, S\)"),
    (lambda: antidiagonal_mass(torch.zeros(1, 1, 3, 3, dtype=torch.long)), TypeError, "weights must be a floating"),
    (lambda: antidiagonal_table(torch.zeros(1, 1, 3, 3)), ValueError, "weights must have 5 dimensions"),
    (lambda: antidiagonal_mass(torch.zeros(1, 1, 3, 3), width=-1), ValueError, "width must be >= 0"),
    (lambda: antidiagonal_table(torch.zeros(1, 1, 1, 3, 3), width=0.5), TypeError, "width must be an int"),
])
def test_bad_arguments(call, error, match):
    with pytest.raises(error, match=match):
        call()
