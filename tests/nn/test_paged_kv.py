"""PagedKVCache: attention through block tables equals attention over the contiguous cache."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from transformer_course.nn.masks import causal_mask
from transformer_course.nn.paged_kv import PagedKVCache, paged_slots

H, DH, P = 2, 4, 3


def _contiguous_attention(queries, keys, values):
    return F.scaled_dot_product_attention(queries, keys, values, attn_mask=causal_mask(queries.shape[1], keys.shape[1]))


def test_interleaved_sequences_attend_as_over_contiguous_caches():
    generator = torch.Generator().manual_seed(0)
    cache = PagedKVCache(num_blocks=20, block_size=P, num_heads=H, head_dim=DH, dtype=torch.float64)
    contiguous = {0: [], 1: [], 2: []}
    chunks = [(0, 4), (1, 1), (2, 2), (0, 1), (1, 5), (0, 3), (2, 1), (1, 1)]  # appends interleave: blocks interleave
    for sequence, t in chunks:
        keys, values = (torch.randn(H, t, DH, generator=generator, dtype=torch.float64) for _ in range(2))
        cache.append(sequence, keys, values)
        contiguous[sequence].append((keys, values))
        all_keys = torch.cat([k for k, _ in contiguous[sequence]], dim=1)  # (H, L, Dh)
        all_values = torch.cat([v for _, v in contiguous[sequence]], dim=1)
        gathered_keys, gathered_values = cache.gather(sequence)
        assert torch.equal(gathered_keys, all_keys) and torch.equal(gathered_values, all_values)
        queries = torch.randn(H, t, DH, generator=generator, dtype=torch.float64)
        assert torch.allclose(cache.attend(sequence, queries), _contiguous_attention(queries, all_keys, all_values),
                              rtol=0, atol=1e-12)
    tables = cache.block_tables
    assert tables[0] != sorted(tables[0]) or any(b - a > 1 for a, b in zip(tables[0], tables[0][1:]))  # not adjacent


def test_blocks_are_allocated_on_demand_and_waste_less_than_one_block():
    cache = PagedKVCache(num_blocks=10, block_size=4, num_heads=1, head_dim=2)
    for length in range(1, 10):
        cache.append(0, torch.ones(1, 1, 2), torch.ones(1, 1, 2))
        assert len(cache.block_tables[0]) == -(-length // 4)
        assert 0 <= cache.allocated_slots(0) - length < 4
        assert cache.allocated_slots(0) == paged_slots(length, 4)


def test_a_full_pool_raises_and_a_released_sequence_returns_its_blocks():
    cache = PagedKVCache(num_blocks=2, block_size=2, num_heads=1, head_dim=1)
    cache.append(0, torch.ones(1, 4, 1), torch.ones(1, 4, 1))
    with pytest.raises(RuntimeError, match="blocks"):
        cache.append(1, torch.ones(1, 1, 1), torch.ones(1, 1, 1))
    cache.release(0)
    assert sorted(cache.free_blocks) == [0, 1]
    cache.append(1, torch.full((1, 3, 1), 2.0), torch.full((1, 3, 1), 2.0))
    assert torch.equal(cache.gather(1)[0], torch.full((1, 3, 1), 2.0))


def test_a_gather_in_the_wrong_order_would_differ():
    """The check can fail: reading the blocks in pool order instead of table order changes the keys."""
    cache = PagedKVCache(num_blocks=6, block_size=2, num_heads=1, head_dim=1)
    cache.append(0, torch.zeros(1, 1, 1), torch.zeros(1, 1, 1))
    cache.append(1, torch.arange(6.0).view(1, 6, 1), torch.arange(6.0).view(1, 6, 1))  # blocks 1, 2, 3
    cache.append(0, torch.ones(1, 2, 1), torch.ones(1, 2, 1))  # block 4
    keys, _ = cache.gather(0)
    assert keys.flatten().tolist() == [0.0, 1.0, 1.0]
    assert cache.key_blocks[:2].transpose(0, 1).flatten(1, 2)[:, :3].flatten().tolist() != [0.0, 1.0, 1.0]


@pytest.mark.parametrize("call, error, match", [
    (lambda c: c.append(0, torch.ones(2, 1, 2), torch.ones(2, 1, 2)), ValueError, "keys and values"),
    (lambda c: c.append(0, torch.ones(1, 1, 2), torch.ones(1, 2, 2)), ValueError, "keys and values"),
    (lambda c: c.append(0, [1.0], [1.0]), TypeError, "keys"),
])
def test_bad_arguments(call, error, match):
    with pytest.raises(error, match=match):
        call(PagedKVCache(4, 2, 1, 2))


def test_bad_sizes():
    with pytest.raises(ValueError, match="block_size"):
        PagedKVCache(4, 0, 1, 2)
    with pytest.raises(ValueError, match="length"):
        paged_slots(-1, 4)


def test_a_failed_append_leaves_the_cache_as_it_was():
    import copy

    cache = PagedKVCache(num_blocks=3, block_size=4, num_heads=2, head_dim=8, dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    first = torch.randn(2, 10, 8, generator=gen, dtype=torch.float64)  # 10 positions: 3 blocks of 4
    cache.append(0, first, 2 * first)
    before = (copy.deepcopy(cache.block_tables), dict(cache.lengths), list(cache.free_blocks),
              cache.key_blocks.clone(), cache.value_blocks.clone())
    more = torch.randn(2, 3, 8, generator=gen, dtype=torch.float64)
    for sequence in (0, 1):  # 0: its last block has 2 free slots, 3 positions need one more block; 1: new
        with pytest.raises(RuntimeError, match="nothing was stored"):
            cache.append(sequence, more, more)
        assert (cache.block_tables, cache.lengths, cache.free_blocks) == before[:3]
        assert torch.equal(cache.key_blocks, before[3]) and torch.equal(cache.value_blocks, before[4])
    keys, values = cache.gather(0)
    assert torch.equal(keys, first) and torch.equal(values, 2 * first)
    cache.append(0, more[:, :2], more[:, :2])  # two positions fit in the last block's free slots
    assert cache.lengths[0] == 12 and not cache.free_blocks
    cache.release(0)
    cache.append(1, more, more)  # after a release the blocks serve another sequence
    assert torch.equal(cache.gather(1)[0], more)
