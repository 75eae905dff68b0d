"""A paged key/value cache: fixed-size blocks and a block table per sequence (Kwon et al., 2023).

A contiguous KV cache reserves, for every sequence, room for the longest output it might produce,
because its length is not known in advance; most of that room is never written. PagedAttention
(the vLLM paper) borrows virtual memory's answer: the cache is one pool of fixed-size *blocks* of
``block_size`` token slots, a sequence owns a list of blocks, its *block table*, and gets a new
block only when its last one is full. Its positions 0 .. L-1 live in blocks table[0], table[1],
... in order, which need not be adjacent in the pool. Attention gathers a sequence's keys and
values through its table; at most the last block is partly empty, so the memory a sequence holds
beyond its tokens is less than one block.

This is a sketch of the idea (one attention layer, Python bookkeeping, a gather before attention),
not vLLM's kernel, which reads the blocks in place.

Shape legend: N blocks in the pool, P block size, H heads, Dh head width, L sequence length,
T new positions.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from transformer_course._validation import check_int, check_tensor
from .masks import causal_mask


class PagedKVCache:
    """A pool of ``num_blocks`` blocks of ``block_size`` slots, shared by sequences through block tables.

    Args:
        num_blocks: blocks in the pool N.
        block_size: token slots per block P.
        num_heads: key/value heads H.
        head_dim: width of a head Dh.
        dtype: element type of the pool.

    Attributes:
        key_blocks, value_blocks: (N, H, P, Dh) the pool.
        block_tables: {sequence id: [physical block of positions 0..P-1, of P..2P-1, ...]}.
        lengths: {sequence id: tokens stored L}.
    """

    def __init__(self, num_blocks: int, block_size: int, num_heads: int, head_dim: int,
                 dtype: torch.dtype = torch.float32) -> None:
        self.num_blocks = check_int("num_blocks", num_blocks, minimum=1)
        self.block_size = check_int("block_size", block_size, minimum=1)
        num_heads, head_dim = check_int("num_heads", num_heads, minimum=1), check_int("head_dim", head_dim, minimum=1)
        self.key_blocks = torch.zeros(num_blocks, num_heads, block_size, head_dim, dtype=dtype)  # (N, H, P, Dh)
        self.value_blocks = torch.zeros_like(self.key_blocks)  # (N, H, P, Dh)
        self.free_blocks = list(range(num_blocks))  # the pool's unused blocks, handed out from the front
        self.block_tables: dict[int, list[int]] = {}
        self.lengths: dict[int, int] = {}

    def append(self, sequence: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Store the keys and values (H, T, Dh) of ``sequence``'s next T positions, allocating blocks on demand.

        All or nothing: the blocks the T positions need are counted first, so a pool too small for
        them raises before anything is stored, and the cache stays as it was (no orphan block, no
        half-written sequence).

        Raises:
            ValueError: for shapes that do not fit the pool.
            RuntimeError: when the pool has too few free blocks for the T positions.
        """
        check_tensor("keys", keys, ndim=3)
        if keys.shape != values.shape or keys.shape[0] != self.key_blocks.shape[1] or keys.shape[2] != self.key_blocks.shape[3]:
            raise ValueError(f"keys and values must both be (H, T, Dh) = ({self.key_blocks.shape[1]}, T, "
                             f"{self.key_blocks.shape[3]}), got {tuple(keys.shape)} and {tuple(values.shape)}")
        length = self.lengths.get(sequence, 0)
        held = len(self.block_tables.get(sequence, []))
        needed = -(-(length + keys.shape[1]) // self.block_size) - held  # ceil((L + T) / P) blocks in all
        if needed > len(self.free_blocks):
            raise RuntimeError(f"the pool has {len(self.free_blocks)} free blocks of its {self.num_blocks}; "
                               f"{needed} more are needed for {keys.shape[1]} positions: nothing was stored")
        table = self.block_tables.setdefault(sequence, [])
        for t in range(keys.shape[1]):
            slot = length % self.block_size
            if slot == 0:  # the last block is full (or there is none): take a new one from the pool
                table.append(self.free_blocks.pop(0))
            self.key_blocks[table[-1], :, slot] = keys[:, t]
            self.value_blocks[table[-1], :, slot] = values[:, t]
            length += 1
        self.lengths[sequence] = length

    def gather(self, sequence: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``sequence``'s keys and values as contiguous (H, L, Dh) tensors, read through its block table."""
        table = torch.tensor(self.block_tables[sequence])  # (n,): physical blocks, in position order
        length = self.lengths[sequence]
        keys = self.key_blocks[table].transpose(0, 1).flatten(1, 2)[:, :length]  # (n, H, P, Dh) -> (H, n*P, Dh) -> (H, L, Dh)
        values = self.value_blocks[table].transpose(0, 1).flatten(1, 2)[:, :length]  # (H, L, Dh)
        return keys, values

    def attend(self, sequence: int, queries: torch.Tensor) -> torch.Tensor:
        """Causal attention of the queries (H, T, Dh) of ``sequence``'s last T positions over its cached keys and values."""
        keys, values = self.gather(sequence)  # (H, L, Dh) each
        mask = causal_mask(queries.shape[1], keys.shape[1])  # (T, L): query i sits at position L - T + i
        return F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask)  # (H, T, Dh)

    def release(self, sequence: int) -> None:
        """Return ``sequence``'s blocks to the pool (it has finished)."""
        self.free_blocks.extend(self.block_tables.pop(sequence))
        del self.lengths[sequence]

    def allocated_slots(self, sequence: int) -> int:
        """Token slots held by ``sequence``: its blocks times the block size."""
        return len(self.block_tables[sequence]) * self.block_size


def paged_slots(length: int, block_size: int) -> int:
    """Token slots a sequence of ``length`` tokens holds in blocks of ``block_size``: ceil(L / P) * P."""
    length, block_size = check_int("length", length, minimum=0), check_int("block_size", block_size, minimum=1)
    return math.ceil(length / block_size) * block_size
