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


# --- the polynomial in n, growth, traffic and copies (DL0036, issues 23 and 24) ------------------

@pytest.mark.parametrize("overrides", [{}, {"activation": "swiglu"}, {"num_decoder_layers": 3, "d_model": 8}])
@pytest.mark.parametrize("use_cache", [False, True])
@pytest.mark.parametrize("batch_size", [1, 3])
def test_polynomial_equals_the_sum_of_steps(overrides, use_cache, batch_size):
    config = _model(**overrides).config
    terms = kc.decode_flops_polynomial(config, 5, use_cache, batch_size)
    for n in (1, 2, 3, 10, 37):
        assert kc.evaluate_polynomial(terms, n) == kc.decode_flops(config, 5, n, use_cache, batch_size)
    assert (terms["n^3"] == 0) == use_cache  # no cubic term with the cache, one without


def test_polynomial_by_hand_for_one_layer():
    """d = 2, F = 3, V = 5, S = 1, N = 1, no cache: step t costs 12 t 4 + 4 t^2 2 + 4 * 4 + 4 t 2 + 4 t 6 + 2 t 10."""
    config = TransformerConfig(7, 5, d_model=2, num_heads=1, num_encoder_layers=1, num_decoder_layers=1, d_ff=3)
    steps = [48 * t + 8 * t * t + 16 + 8 * t + 24 * t + 20 * t for t in (1, 2, 3)]
    terms = kc.decode_flops_polynomial(config, 1, use_cache=False)
    assert kc.evaluate_polynomial(terms, 3, one_off=False) == sum(steps)
    assert terms["one-off"] == kc.encoder_flops(config, 1)


def test_growth_ratios_lie_between_the_asymptotes_and_cross_over():
    config = _model().config
    table = kc.growth_table(config, 5, [2 ** k for k in range(1, 16)])
    cached = table["x per doubling, with cache"].dropna()
    plain = table["x per doubling, without cache"].dropna()
    assert ((cached > 2) & (cached < 4)).all() and cached.is_monotonic_increasing
    assert ((plain > 2) & (plain < 8)).all() and plain.is_monotonic_increasing
    n_star = kc.crossover_length(kc.decode_flops_polynomial(config, 5, True))
    x = 2 ** 14 / n_star  # from n = 2^14 to 2^15: the ratio of c1 n + c2 n^2 is 2 (1 + 2x) / (1 + x), x = n / n*
    assert cached.iloc[-1] == pytest.approx(2 * (1 + 2 * x) / (1 + x))
    with pytest.raises(ValueError):
        kc.growth_table(config, 5, [])


def test_cached_step_traffic_by_hand():
    config = TransformerConfig(7, 5, d_model=2, num_heads=1, num_encoder_layers=1, num_decoder_layers=1, d_ff=3)
    # decoder layer (self-attention, cross-attention without its K and V projections, FFN, 3 LayerNorms) + output layer
    weights = ((4 * 2 * 2 + 4 * 2) + (2 * 2 * 2 + 2 * 2) + (2 * 2 * 3 + 3 + 2) + 3 * 2 * 2) + 5 * 2 + 5
    assert kc.decoder_weight_count(config) == weights
    traffic = kc.cached_step_traffic(config, src_len=1, step=3, batch_size=2, bytes_per_number=2)
    assert traffic["weight bytes"] == 2 * weights
    assert traffic["cache bytes"] == 2 * 1 * 2 * (3 + 1) * 2 * 2
    assert traffic["FLOPs per byte"] == kc.decode_step_flops(config, 1, 3, True, 2) / (2 * weights + 64)
    with pytest.raises(ValueError):
        kc.cached_step_traffic(config, 1, step=1)  # step 1 also projects the cross-attention keys


@pytest.mark.parametrize("share_embeddings", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_weight_count_is_what_a_cached_step_reads_of_a_real_model(share_embeddings, norm_first):
    """Counted from the module: every decoder parameter except the cross-attention's K and V projections
    (their outputs are cached at step 1), plus the output layer; a tied output weight is counted once."""
    config = TransformerConfig(11, 11, d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=2, d_ff=24,
                               share_embeddings=share_embeddings, norm_first=norm_first)
    model = Transformer(config)
    read = {id(p): p for name, p in model.decoder.named_parameters()
            if ".cross_attn.k_proj." not in name and ".cross_attn.v_proj." not in name}
    read.update({id(p): p for p in model.generator.parameters()})
    assert kc.decoder_weight_count(config) == sum(p.numel() for p in read.values())
    # The cross-attention's K and V are read at step 1 only: with them the count is the whole decoder's.
    cross = sum(p.numel() for name, p in model.decoder.named_parameters()
                if ".cross_attn.k_proj." in name or ".cross_attn.v_proj." in name)
    assert cross == config.num_decoder_layers * 2 * (16 * 16 + 16) > 0


def test_concatenation_bytes_match_a_real_cache():
    model = _model()
    src = _source(batch=2)
    cache, written = kc.KVCache(len(model.decoder.layers)), 0
    tokens = torch.zeros(2, 6, dtype=torch.long)
    with torch.no_grad():
        memory = model.encode(src)
        for t in range(1, 7):
            before = [entry.self_attn.keys for entry in cache.layers]
            model.decode_step(tokens[:, :t], memory, cache)
            written += sum(e.self_attn.keys.nbytes + e.self_attn.values.nbytes
                           for old, e in zip(before, cache.layers) if old is not None)
    assert written == kc.concatenation_bytes(len(model.decoder.layers), 2, 6, model.config.d_model, 4)
    with pytest.raises(ValueError):
        kc.concatenation_bytes(0, 1, 4, 8)


def test_encoder_traffic_grows_with_the_positions_read_per_weight():
    config = TransformerConfig(37000, 37000)
    one = kc.encoder_traffic(config, src_len=1, batch_size=1)
    many = kc.encoder_traffic(config, src_len=1024, batch_size=8)
    assert one["weight bytes"] == many["weight bytes"] == 2 * 6 * (4 * 512 * 512 + 4 * 512 + 2 * 512 * 2048
                                                                    + 2048 + 512 + 4 * 512)
    assert one["FLOPs per byte"] < 1.1 < 100 < many["FLOPs per byte"]
    assert many["FLOPs"] == kc.encoder_flops(config, 1024, 8)


def test_grouped_cache_bytes_per_token_scale_with_the_key_value_heads():
    from transformer_course.experiments.kv_cache_cost import grouped_cache_table

    table = grouped_cache_table(32, 4, (4, 2, 1), num_tokens=5, dtype=torch.float64)
    assert table["bytes per token (measured)"].tolist() == [2 * 4 * 8 * 8, 2 * 2 * 8 * 8, 2 * 1 * 8 * 8]
    assert (table["bytes per token (measured)"] == table["bytes per token (2 G Dh x bytes)"]).all()
    assert table["share of multi-head"].tolist() == [1.0, 0.5, 0.25]
    assert table.loc[1, "cache shape"] == "(1, 1, 5, 8)"
    with pytest.raises(ValueError, match="num_kv_heads"):
        grouped_cache_table(32, 4, (3,))


def test_paged_memory_wastes_less_than_a_block_per_sequence():
    from transformer_course.experiments.kv_cache_cost import paged_memory_table

    lengths = [5, 16, 17, 1]
    table = paged_memory_table(lengths, block_size=8, max_length=40)
    assert table["slots, paged"].tolist()[:-1] == [8, 16, 24, 8]
    assert table.loc["total", "unused, preallocated"] == 4 * 40 - sum(lengths)
    assert table.loc["total", "unused, paged"] == 3 + 0 + 7 + 7
    assert (table["unused, paged"].iloc[:-1] < 8).all()
    with pytest.raises(ValueError, match="max_length"):
        paged_memory_table(lengths, 8, max_length=10)


def test_decoder_cache_table_counts_a_published_shape_from_real_modules():
    from transformer_course.experiments.kv_cache_cost import LLAMA_2_70B, DecoderShape, decoder_cache_table
    from transformer_course.nn.kv_cache import kv_cache_bytes

    table = decoder_cache_table(LLAMA_2_70B, (64, 8, 1))
    head_dim = LLAMA_2_70B.d_model // LLAMA_2_70B.num_heads
    for groups in (64, 8, 1):  # 2 (key, value) x N layers x G heads x Dh x 2 bytes
        assert table.loc[groups, "cache bytes per token"] == 2 * 80 * groups * head_dim * 2
        assert table.loc[groups, "cache bytes per token"] == kv_cache_bytes(80, 1, 1, groups * head_dim, 2)
    # Llama 2 70B as released (G = 8): 80 (q, k, v, o + SwiGLU + 2 gains) + 2 embeddings + final gain, by hand
    layer = 8192 * 8192 * 2 + 8192 * 1024 * 2 + 3 * 8192 * 28672 + (2 * 28672 + 8192) + 2 * 8192
    assert round(table.loc[8, "parameters (billions)"] * 1e9) == 80 * layer + 2 * 32000 * 8192 + 8192
    assert 68.9 < table.loc[8, "parameters (billions)"] < 69.1  # a "70B" model
    assert table["sequences whose cache equals the weights"].is_monotonic_increasing
    tiny = DecoderShape("tiny", 2, 16, 4, 2, 32, 10, 8)
    assert decoder_cache_table(tiny, (4, 2), bytes_per_number=4).loc[2, "cache bytes per token"] == 2 * 2 * 2 * 4 * 4
    with pytest.raises(ValueError, match="num_kv_heads"):
        decoder_cache_table(LLAMA_2_70B, (3,))
    with pytest.raises(ValueError, match="bytes_per_number"):
        decoder_cache_table(LLAMA_2_70B, (8,), bytes_per_number=3)
    with pytest.raises(TypeError, match="shape"):
        decoder_cache_table({"num_layers": 80}, (8,))
    with pytest.raises(ValueError, match="num_kv_heads"):
        DecoderShape("bad", 2, 16, 4, 3, 32, 10, 8)
