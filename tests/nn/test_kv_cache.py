import pytest
import torch

from transformer_course.nn.attention import MultiHeadAttention
from transformer_course.nn.kv_cache import AttentionCache, KVCache, RollingAttentionCache, kv_cache_bytes
from transformer_course.nn.masks import causal_mask
from transformer_course.nn.model import Transformer, TransformerConfig


def _model(norm_first=False):
    torch.manual_seed(0)
    return Transformer(TransformerConfig(11, 13, d_model=16, num_heads=4, num_encoder_layers=2, num_decoder_layers=3, d_ff=32,
                       dropout=0.1, norm_first=norm_first)).double().eval()


@pytest.mark.parametrize("norm_first", [False, True])
def test_decode_step_by_step_equals_full_decode(gen, norm_first):
    model = _model(norm_first)
    src = torch.randint(0, 11, (2, 5), generator=gen)
    tgt = torch.randint(0, 13, (2, 6), generator=gen)
    memory = model.encode(src)
    full = model.decode(tgt, memory)  # (B, T, V)
    cache = KVCache(3)
    steps = [model.decode_step(tgt[:, : t + 1], memory, cache) for t in range(6)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full)
    assert cache.length == 6
    assert cache[0].self_attn.keys.shape == (2, 4, 6, 4)
    assert cache[0].cross_attn.keys.shape == (2, 4, 5, 4)  # static: the source length, stored once


def test_decode_step_accepts_chunks_with_the_shifted_causal_mask(gen):
    model = _model()
    src = torch.randint(0, 11, (1, 4), generator=gen)
    tgt = torch.randint(0, 13, (1, 7), generator=gen)
    memory = model.encode(src)
    cache = KVCache(3)
    chunks = [model.decode_step(tgt[:, :3], memory, cache), model.decode_step(tgt, memory, cache)]
    torch.testing.assert_close(torch.cat(chunks, dim=1), model.decode(tgt, memory))


def test_cross_attention_projects_memory_once(gen):
    attention = MultiHeadAttention(8, 2).double()
    memory = torch.randn(1, 5, 8, generator=gen, dtype=torch.float64)
    cache = AttentionCache(static=True)
    x = torch.randn(1, 1, 8, generator=gen, dtype=torch.float64)
    first = attention(x, memory, memory, cache=cache)
    keys = cache.keys
    second = attention(x, memory, memory, cache=cache)
    assert cache.keys is keys and cache.is_filled
    torch.testing.assert_close(first, second)


def test_self_attention_cache_grows_and_matches_masked_attention(gen):
    attention = MultiHeadAttention(8, 2).double()
    x = torch.randn(2, 4, 8, generator=gen, dtype=torch.float64)
    full = attention(x, x, x, mask=causal_mask(4))
    cache = AttentionCache()
    outs = [attention(x[:, t: t + 1], x[:, t: t + 1], x[:, t: t + 1], cache=cache) for t in range(4)]
    assert cache.length == 4
    torch.testing.assert_close(torch.cat(outs, dim=1), full)


def test_greedy_decode_with_cache_equals_without(gen):
    model = _model()
    src = torch.randint(0, 11, (3, 5), generator=gen)
    plain = model.greedy_decode(src, 7, bos_id=1, eos_id=2)
    cached = model.greedy_decode(src, 7, bos_id=1, eos_id=2, use_cache=True)
    assert torch.equal(plain, cached)


def test_cache_sizes():
    assert kv_cache_bytes(6, 1, 100, 512, 2) == 2 * 6 * 100 * 512 * 2
    model = _model()
    cache = KVCache(3)
    memory = model.encode(torch.zeros(1, 5, dtype=torch.long))
    model.decode_step(torch.zeros(1, 4, dtype=torch.long), memory, cache)
    assert cache.num_elements() == 2 * 3 * 1 * 4 * 16 + 2 * 3 * 1 * 5 * 16


@pytest.mark.parametrize("call, error, match", [
    (lambda m, mem: m.decode_step(torch.zeros(1, 2, dtype=torch.long), mem, None), TypeError, "cache must be a KVCache"),
    (lambda m, mem: m.decode_step(torch.zeros(1, 2, dtype=torch.long), mem, KVCache(1)), ValueError,
     "cache must be a KVCache with 3 layers"),
    (lambda m, mem: m.decoder.layers[0](mem, mem, cache="x"), TypeError, "cache must be a LayerKVCache"),
    (lambda m, mem: m.decoder.layers[0].self_attn(mem, mem, mem, cache=[]), TypeError, "cache must be an AttentionCache"),
    (lambda m, mem: KVCache(0), ValueError, "num_layers must be >= 1"),
    (lambda m, mem: AttentionCache(static=1), TypeError, "static must be a bool"),
    (lambda m, mem: kv_cache_bytes(6, 1, 0, 512), ValueError, "length must be >= 1"),
    (lambda m, mem: m.greedy_decode(torch.zeros(1, 2, dtype=torch.long), 3, 1, use_cache="yes"), TypeError,
     "use_cache must be a bool"),
])
def test_bad_cache_arguments(call, error, match):
    model = _model()
    memory = model.encode(torch.zeros(1, 2, dtype=torch.long))
    with pytest.raises(error, match=match):
        call(model, memory)


def test_decode_step_needs_a_new_position(gen):
    model = _model()
    memory = model.encode(torch.zeros(1, 2, dtype=torch.long))
    cache = KVCache(3)
    model.decode_step(torch.zeros(1, 2, dtype=torch.long), memory, cache)
    with pytest.raises(ValueError, match="tgt must be longer than the 2 cached positions"):
        model.decode_step(torch.zeros(1, 2, dtype=torch.long), memory, cache)


def test_mask_is_checked_against_the_cached_length(gen):
    attention = MultiHeadAttention(8, 2).double()
    cache = AttentionCache()
    x = torch.randn(1, 2, 8, generator=gen, dtype=torch.float64)
    attention(x, x, x, cache=cache)
    new = x[:, :1]
    with pytest.raises(ValueError, match="S=3"):
        attention(new, new, new, mask=causal_mask(1, 2), cache=cache)
    assert cache.length == 2  # a rejected call leaves the cache untouched
    attention(new, new, new, mask=causal_mask(1, 3), cache=cache)
    assert cache.length == 3


def test_rolling_cache_overwrites_the_oldest_slot():
    cache = RollingAttentionCache(3)
    for position in range(5):
        keys, values = cache.update(torch.full((1, 1, 1, 2), float(position)), torch.full((1, 1, 1, 2), -float(position)))
    assert keys[0, 0, :, 0].tolist() == [3.0, 4.0, 2.0]  # positions 3 and 4 overwrote 0 and 1
    assert values[0, 0, :, 0].tolist() == [-3.0, -4.0, -2.0]
    assert cache.length == 3 and cache.seen == 5 and cache.length_after(1) == 3
    assert cache.num_bytes() == 2 * 3 * 2 * 4
    with pytest.raises(ValueError, match="one new position"):
        cache.update(torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 2, 2))
    with pytest.raises(ValueError, match="window"):
        RollingAttentionCache(0)
    assert isinstance(cache, AttentionCache)
