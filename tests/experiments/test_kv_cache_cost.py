"""Tests for the KV-cache cost experiment: closed-form FLOPs against FlopCounterMode, cache bytes (DL0036)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from transformer_course.experiments import kv_cache_cost as kc
from transformer_course.experiments.training import seeded
from transformer_course.nn.kv_cache import kv_cache_bytes
from transformer_course.nn.model import Transformer, TransformerConfig


def _model(**overrides) -> Transformer:
    settings = dict(src_vocab_size=11, tgt_vocab_size=9, d_model=16, num_heads=2, num_encoder_layers=1,
                    num_decoder_layers=2, d_ff=24, dropout=0.0, max_len=32)
    settings.update(overrides)
    with seeded(0):
        return Transformer(TransformerConfig(**settings)).eval()


def _source(batch: int = 2, length: int = 5) -> torch.Tensor:
    return torch.randint(0, 11, (batch, length), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("overrides", [{}, {"activation": "swiglu"}, {"norm_first": True},
                                       {"share_embeddings": True, "tgt_vocab_size": 11}])
@pytest.mark.parametrize("use_cache", [False, True])
def test_closed_form_equals_flop_counter_on_greedy_decode(overrides, use_cache):
    model, src = _model(**overrides), _source()
    counted = kc.measured_decode_flops(model, src, 6, bos_id=1, use_cache=use_cache)
    assert counted == kc.decode_flops(model.config, src.shape[1], 6, use_cache, batch_size=2)


def test_traced_steps_match_the_per_step_formula_and_greedy_decode():
    model, src = _model(), _source()
    plain = kc.traced_greedy_decode(model, src, 7, bos_id=1, use_cache=False)
    cached = kc.traced_greedy_decode(model, src, 7, bos_id=1, use_cache=True)
    assert torch.equal(plain.tokens, cached.tokens)
    assert torch.equal(cached.tokens, model.greedy_decode(src, max_len=7, bos_id=1))
    for run in (plain, cached):
        assert run.step_flops == [kc.decode_step_flops(model.config, 5, t, run.use_cache, 2) for t in range(1, 8)]
        assert run.encoder_flops == kc.encoder_flops(model.config, 5, 2)
        assert run.total_flops(4) == kc.measured_decode_flops(model, src, 4, 1, run.use_cache)
    assert (np.diff(cached.step_flops[1:], n=2) == 0).all()  # constant + attention proportional to t
    assert (np.diff(plain.step_flops, n=2) > 0).all()  # the t^2 of re-running attention


def test_cache_bytes_match_the_formula_for_both_parts():
    model, src = _model(), _source(batch=3, length=4)
    cache = kc.traced_greedy_decode(model, src, 5, bos_id=1, use_cache=True).cache
    sizes = kc.cache_nbytes(cache)
    assert sizes["self-attention"] == kv_cache_bytes(2, 3, 5, 16, 4)
    assert sizes["cross-attention"] == kv_cache_bytes(2, 3, 4, 16, 4)
    assert sizes["total"] == sizes["self-attention"] + sizes["cross-attention"]


def test_cost_table_columns_and_saving():
    model, src = _model(), _source(batch=1)
    plain = kc.traced_greedy_decode(model, src, 8, 1, use_cache=False)
    cached = kc.traced_greedy_decode(model, src, 8, 1, use_cache=True)
    table = kc.decode_cost_table(plain, cached, model.config, (2, 4, 8))
    assert list(table.index) == [2, 4, 8]
    assert (table["FLOPs without cache"] == table["formula without cache"]).all()
    assert (table["FLOPs with cache"] == table["formula with cache"]).all()
    assert table["without / with"].is_monotonic_increasing and table["without / with"].iloc[0] > 1


def test_one_step_costs_the_same_both_ways():
    config = _model().config
    assert kc.decode_step_flops(config, 5, 1, True) == kc.decode_step_flops(config, 5, 1, False)
    assert kc.decode_step_flops(config, 5, 3, True) < kc.decode_step_flops(config, 5, 3, False)


@pytest.mark.parametrize("call, match", [
    (lambda: kc.decode_flops("config", 4, 3, True), "config"),
    (lambda: kc.decode_flops(_model().config, 0, 3, True), "src_len"),
    (lambda: kc.decode_flops(_model().config, 4, 0, True), "num_tokens"),
    (lambda: kc.decode_step_flops(_model().config, 4, 0, True), "step"),
    (lambda: kc.decode_step_flops(_model().config, 4, 1, 1), "use_cache"),
    (lambda: kc.encoder_flops(_model().config, 4, batch_size=0), "batch_size"),
    (lambda: kc.traced_greedy_decode(torch.nn.Linear(2, 2), _source(), 3, 1, True), "model"),
    (lambda: kc.traced_greedy_decode(_model(), _source()[0], 3, 1, True), "src"),
    (lambda: kc.traced_greedy_decode(_model(), _source(), 3, -1, True), "bos_id"),
    (lambda: kc.measured_decode_flops(_model(), _source(), 0, 1, True), "num_tokens"),
    (lambda: kc.cache_nbytes(None), "cache"),
])
def test_bad_inputs_name_the_argument(call, match):
    with pytest.raises((TypeError, ValueError), match=match):
        call()


def test_cost_table_refuses_swapped_or_short_runs():
    model, src = _model(), _source(batch=1)
    plain = kc.traced_greedy_decode(model, src, 3, 1, use_cache=False)
    cached = kc.traced_greedy_decode(model, src, 3, 1, use_cache=True)
    with pytest.raises(ValueError, match="plain"):
        kc.decode_cost_table(cached, plain, model.config, (2,))
    with pytest.raises(ValueError, match="num_tokens"):
        kc.decode_cost_table(plain, cached, model.config, (4,))
    with pytest.raises(ValueError, match="lengths"):
        kc.decode_cost_table(plain, cached, model.config, ())
