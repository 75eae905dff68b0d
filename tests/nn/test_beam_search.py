"""beam_search: width 1 is greedy decoding exactly; wider beams find higher-scoring outputs."""

from __future__ import annotations

import pytest
import torch

from transformer_course.nn.decoding import beam_search
from transformer_course.nn.model import Transformer, TransformerConfig

BOS, EOS = 1, 2


def _model(seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(TransformerConfig(11, 11, d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=2,
                                         d_ff=32, dropout=0.0, max_len=32)).eval()


def _src(batch: int = 12, length: int = 5, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, 11, (batch, length), generator=torch.Generator().manual_seed(seed))


def _log_probability(model: Transformer, src: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """(B,) sum of log p(token | prefix) over the tokens of ``out`` up to and including the first <eos>."""
    with torch.no_grad():
        log_p = model(src, out[:, :-1]).log_softmax(-1).gather(2, out[:, 1:].unsqueeze(2)).squeeze(2)  # (B, L)
    after_eos = (out[:, 1:] == EOS).long().cumsum(1) - (out[:, 1:] == EOS).long() > 0  # tokens after the first <eos>
    return log_p.masked_fill(after_eos, 0.0).sum(1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_width_one_is_greedy_decoding_exactly(seed):
    model, src = _model(seed), _src(seed=seed)
    with torch.no_grad():
        greedy = model.greedy_decode(src, 7, BOS, EOS)
    beam = beam_search(model, src, 7, BOS, EOS, beam_width=1)
    assert beam.shape == greedy.shape and torch.equal(beam, greedy)


def test_width_one_is_greedy_when_eos_ends_sequences_early():
    model, src = _model(5), _src(40, seed=5)
    with torch.no_grad():
        model.generator.bias[EOS] += 0.5  # <eos> more likely: rows finish at different steps
        greedy = model.greedy_decode(src, 9, BOS, EOS)
    is_eos = greedy[:, 1:] == EOS
    first_eos = {int(row.nonzero()[0]) if row.any() else None for row in is_eos}
    assert len(first_eos) > 2
    assert torch.equal(beam_search(model, src, 9, BOS, EOS, beam_width=1), greedy)


def test_a_wider_beam_never_scores_below_greedy_and_sometimes_above():
    model, src = _model(4), _src(64, seed=4)
    with torch.no_grad():
        greedy = model.greedy_decode(src, 6, BOS, EOS)
    beam = beam_search(model, src, 6, BOS, EOS, beam_width=4)
    assert beam[:, 0].eq(BOS).all()
    greedy_score, beam_score = _log_probability(model, src, greedy), _log_probability(model, src, beam)
    assert (beam_score >= greedy_score - 1e-5).all()
    assert (beam_score > greedy_score + 1e-4).any()


def test_finished_hypotheses_are_padded_with_eos():
    model, src = _model(5), _src(30, seed=5)
    with torch.no_grad():
        model.generator.bias[EOS] += 0.5
    out = beam_search(model, src, 8, BOS, EOS, beam_width=3)
    after_first = (out[:, 1:] == EOS).long().cumsum(1) > 0
    assert (out[:, 1:][after_first] == EOS).all()


@pytest.mark.parametrize("kwargs, error, match", [
    ({"beam_width": 0}, ValueError, "beam_width"),
    ({"max_len": 0}, ValueError, "max_len"),
    ({"src": torch.zeros(3, dtype=torch.long)}, ValueError, "src"),
    ({"model": torch.nn.Linear(2, 2)}, TypeError, "model"),
])
def test_bad_arguments(kwargs, error, match):
    arguments = {"model": _model(), "src": _src(), "max_len": 4, "bos_id": BOS, "eos_id": EOS, "beam_width": 2}
    arguments.update(kwargs)
    with pytest.raises(error, match=match):
        beam_search(**arguments)
