"""A key/value cache for autoregressive decoding: compute each token's keys and values once.

Without a cache, generating token t re-runs the decoder on the whole prefix, recomputing the
keys and values of positions 0 .. t-1 that did not change (a causal mask guarantees they cannot
change). With a cache, each step feeds only the new token: its query attends to the stored keys
and values plus its own, which are then appended. Cross-attention keys and values depend only on
the encoder output, so they are computed at the first step and reused ("static" entries).

Shape legend: B batch, H heads, S cached length, Dh head width, D = d_model, N decoder layers.

Pope et al., 2022, "Efficiently Scaling Transformer Inference" (section 2, the KV cache).
"""

from __future__ import annotations

import torch

from transformer_course._validation import check_bool, check_int


class AttentionCache:
    """The keys and values of one attention sub-layer, each (B, H, S, Dh).

    Args:
        static: False for self-attention (``update`` appends the new positions), True for
            cross-attention (the first ``update`` stores the encoder's keys and values for good).
    """

    def __init__(self, static: bool = False) -> None:
        self.static = check_bool("static", static)
        self.keys: torch.Tensor | None = None  # (B, H, S, Dh)
        self.values: torch.Tensor | None = None  # (B, H, S, Dh)

    @property
    def length(self) -> int:
        """Number of cached positions S (0 when empty)."""
        return 0 if self.keys is None else self.keys.shape[-2]

    @property
    def is_filled(self) -> bool:
        """True once a static (cross-attention) entry holds the encoder's keys and values."""
        return self.static and self.keys is not None

    def length_after(self, new_length: int) -> int:
        """Number of keys S once ``new_length`` new positions have been passed to ``update``."""
        if self.static:
            return self.length if self.is_filled else new_length
        return self.length + new_length

    def update(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append (self-attention) or store (cross-attention) new keys/values; return all of them.

        Args:
            keys, values: (B, H, S_new, Dh) for the new positions.

        Returns:
            keys, values: (B, H, S, Dh) every position cached so far.
        """
        if self.keys is None or self.static:
            self.keys, self.values = keys, values
        else:
            self.keys = torch.cat((self.keys, keys), dim=-2)  # (B, H, S + S_new, Dh)
            self.values = torch.cat((self.values, values), dim=-2)  # (B, H, S + S_new, Dh)
        return self.keys, self.values


class LayerKVCache:
    """The two caches of one decoder layer: ``self_attn`` (grows) and ``cross_attn`` (static)."""

    def __init__(self) -> None:
        self.self_attn = AttentionCache(static=False)
        self.cross_attn = AttentionCache(static=True)


class KVCache:
    """One ``LayerKVCache`` per decoder layer; pass it to ``Transformer.decode_step``.

    Args:
        num_layers: number of decoder layers N.

    Example:
        >>> cache = KVCache(len(model.decoder.layers))
        >>> logits = model.decode_step(tgt[:, :1], memory, cache)  # then tgt[:, :2], ...
    """

    def __init__(self, num_layers: int) -> None:
        num_layers = check_int("num_layers", num_layers, minimum=1)
        self.layers = [LayerKVCache() for _ in range(num_layers)]

    def __len__(self) -> int:
        return len(self.layers)

    def __getitem__(self, index: int) -> LayerKVCache:
        return self.layers[index]

    @property
    def length(self) -> int:
        """Number of target positions already cached (the same in every layer)."""
        return self.layers[0].self_attn.length

    def num_elements(self) -> int:
        """Cached numbers in all layers: 2 N B S D for self-attention plus 2 N B S_src D for cross."""
        total = 0
        for layer in self.layers:
            for entry in (layer.self_attn, layer.cross_attn):
                if entry.keys is not None:
                    total += entry.keys.numel() + entry.values.numel()
        return total


def kv_cache_bytes(num_layers: int, batch_size: int, length: int, d_model: int, bytes_per_number: int = 2) -> int:
    """Self-attention cache size 2 * N * B * S * D * bytes (keys and values, every layer).

    Args:
        num_layers: decoder layers N.
        batch_size: sequences B decoded together.
        length: cached positions S.
        d_model: width D (= H * Dh).
        bytes_per_number: 2 for float16/bfloat16, 4 for float32.

    Raises:
        TypeError, ValueError: if an argument is not a positive int.
    """
    sizes = [check_int(name, value, minimum=1) for name, value in (
        ("num_layers", num_layers), ("batch_size", batch_size), ("length", length), ("d_model", d_model),
        ("bytes_per_number", bytes_per_number))]
    n, b, s, d, nbytes = sizes
    return 2 * n * b * s * d * nbytes


class RollingAttentionCache(AttentionCache):
    """The keys and values of the last ``window`` positions only, in a fixed buffer of ``window`` slots.

    Mistral's rolling buffer cache: under a causal sliding window of w keys, a query at position p
    reads only positions p - w + 1 .. p, so older keys and values can never be read again. Position
    p is written to slot p mod w, overwriting position p - w. The buffer's memory is that of w
    positions however long the sequence grows, and because attention sums over its keys in any
    order (positions are already encoded in the keys and values), a decoder that feeds one token
    at a time through this cache, with no mask, computes what the full cache computes under the
    window mask.

    Args:
        window: w >= 1, the causal window (keys per query, the query's own position included).

    Jiang et al., 2023, "Mistral 7B" (section 2, rolling buffer cache).
    """

    def __init__(self, window: int) -> None:
        super().__init__(static=False)
        self.window = check_int("window", window, minimum=1)
        self.seen = 0  # positions written so far (the next one is position ``seen``)

    @property
    def length(self) -> int:
        """Keys held: min(positions seen, w)."""
        return min(self.seen, self.window)

    def length_after(self, new_length: int) -> int:
        return min(self.seen + new_length, self.window)

    def update(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write one new position into slot ``seen mod w``; return the keys/values of the last min(seen, w).

        Args:
            keys, values: (B, H, 1, Dh), one new position (decoding feeds one token at a time).

        Returns:
            keys, values: (B, H, min(seen, w), Dh), the positions in slot order (not time order).

        Raises:
            ValueError: if more than one position is passed.
        """
        if keys.shape[-2] != 1 or values.shape[-2] != 1:
            raise ValueError(f"keys and values must hold one new position (B, H, 1, Dh), got {tuple(keys.shape)}")
        if self.keys is None:
            shape = (*keys.shape[:-2], self.window, keys.shape[-1])
            self.keys = keys.new_zeros(shape)  # (B, H, w, Dh)
            self.values = values.new_zeros((*values.shape[:-2], self.window, values.shape[-1]))  # (B, H, w, Dh)
        slot = self.seen % self.window
        self.keys[..., slot:slot + 1, :] = keys
        self.values[..., slot:slot + 1, :] = values
        self.seen += 1
        held = self.length
        return self.keys[..., :held, :], self.values[..., :held, :]  # (B, H, min(seen, w), Dh)

    def num_bytes(self) -> int:
        """Bytes of the two buffers (0 before the first update)."""
        if self.keys is None:
            return 0
        return self.keys.numel() * self.keys.element_size() + self.values.numel() * self.values.element_size()
