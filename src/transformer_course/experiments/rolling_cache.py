"""Mistral's rolling-buffer KV cache: decoding under a causal sliding window in constant memory.

Shape legend: B batch, T sequence length, D = d_model, V vocabulary, w window.

A decoder-only model whose self-attention uses a causal window of w keys never reads a key more
than w - 1 positions back, so its KV cache need only hold the last w positions.
:func:`greedy_generate` decodes one token at a time three ways and returns the tokens and the
bytes each cache holds after every step:

* ``"recompute"``: no cache, the whole prefix through the model at every step (the reference);
* ``"full"``: an :class:`~transformer_course.nn.kv_cache.AttentionCache` per layer that keeps every
  position, with the window applied by the mask (memory grows with the length);
* ``"rolling"``: a :class:`~transformer_course.nn.kv_cache.RollingAttentionCache` of w slots per
  layer, no mask (memory stays flat once w positions are written).

Jiang et al., 2023, "Mistral 7B" (section 2, sliding window attention and the rolling buffer cache).
"""

from __future__ import annotations

import torch
from torch import nn

from transformer_course._validation import check_choice, check_int, check_tensor
from transformer_course.nn.kv_cache import AttentionCache, RollingAttentionCache
from transformer_course.nn.layers import EncoderLayer
from transformer_course.nn.masks import sliding_window_mask
from transformer_course.nn.normalization import LayerNorm

CACHE_KINDS = ("recompute", "full", "rolling")


class WindowLM(nn.Module):
    """Token + learned position embeddings, Pre-LN layers under a causal window of ``window`` keys, an LM head.

    Args:
        vocab_size: V.
        max_len: the longest sequence (learned positions).
        window: w, keys per query of the causal window (the query's own position included).
        num_layers, d_model, num_heads, d_ff: sizes.

    Shape:
        tokens (B, T) -> logits (B, T, V).
    """

    def __init__(self, vocab_size: int = 16, max_len: int = 128, window: int = 8, num_layers: int = 2,
                 d_model: int = 32, num_heads: int = 4, d_ff: int = 64) -> None:
        super().__init__()
        self.vocab_size = check_int("vocab_size", vocab_size, minimum=2)
        self.max_len = check_int("max_len", max_len, minimum=1)
        self.window = check_int("window", window, minimum=1)
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(max_len, d_model)
        self.layers = nn.ModuleList(EncoderLayer(d_model, num_heads, d_ff, norm_first=True) for _ in range(num_layers))
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        check_tensor("tokens", tokens, ndim=2)
        t = tokens.shape[1]
        if tokens.is_floating_point() or not 1 <= t <= self.max_len:
            raise ValueError(f"tokens must be (B, T) integer ids with 1 <= T <= {self.max_len}, "
                             f"got {tokens.dtype} {tuple(tokens.shape)}")
        x = self.token_embedding(tokens) + self.position_embedding(torch.arange(t, device=tokens.device))  # (B, T, D)
        mask = sliding_window_mask(t, self.window, causal=True, device=tokens.device)  # (T, T)
        for layer in self.layers:
            x = layer(x, mask=mask)  # (B, T, D)
        return self.head(self.norm(x))  # (B, T, V)

    def step(self, token: torch.Tensor, position: int, caches: list[AttentionCache]) -> torch.Tensor:
        """Logits (B, V) of one new token at ``position``, reading earlier positions from ``caches``.

        A full cache gets the window as a mask over its keys; a rolling cache holds only the window.
        """
        x = self.token_embedding(token) + self.position_embedding.weight[position]  # (B, 1, D)
        for layer, cache in zip(self.layers, caches):
            mask = None
            if not isinstance(cache, RollingAttentionCache):  # keys 0 .. position: keep the last w
                keys = torch.arange(position + 1, device=token.device)  # (S,)
                mask = (keys > position - self.window).unsqueeze(0)  # (1, S)
            h = layer.norm1(x)  # Pre-LN, as EncoderLayer(norm_first=True)
            x = x + layer.self_attn(h, h, h, mask=mask, cache=cache)  # (B, 1, D)
            x = x + layer.feed_forward(layer.norm2(x))  # (B, 1, D)
        return self.head(self.norm(x))[:, -1]  # (B, V)


def cache_bytes(caches: list[AttentionCache]) -> int:
    """Bytes held by the keys and values of every layer's cache."""
    total = 0
    for cache in caches:
        if cache.keys is not None:
            total += cache.keys.numel() * cache.keys.element_size() + cache.values.numel() * cache.values.element_size()
    return total


@torch.no_grad()
def greedy_generate(model: WindowLM, prompt: torch.Tensor, new_tokens: int,
                    cache: str = "rolling") -> tuple[torch.Tensor, list[int]]:
    """Greedy decoding of ``new_tokens`` tokens after ``prompt``, one token per step.

    Args:
        model: a :class:`WindowLM` (eval mode).
        prompt: (B, P) token ids, P >= 1.
        new_tokens: tokens to generate; P + new_tokens must not exceed ``model.max_len``.
        cache: ``"recompute"``, ``"full"`` or ``"rolling"`` (see the module docstring).

    Returns:
        tokens (B, P + new_tokens), and the bytes the caches hold after each position is fed
        (0 for ``"recompute"``), one entry per position fed (P + new_tokens - 1).
    """
    if not isinstance(model, WindowLM):
        raise TypeError(f"model must be a WindowLM, got {type(model).__name__}")
    check_tensor("prompt", prompt, ndim=2)
    new_tokens = check_int("new_tokens", new_tokens, minimum=1)
    cache = check_choice("cache", cache, CACHE_KINDS)
    if prompt.shape[1] + new_tokens > model.max_len:
        raise ValueError(f"new_tokens must keep the length within max_len={model.max_len}, "
                         f"got {prompt.shape[1]} + {new_tokens}")
    tokens, held = prompt, []
    if cache == "recompute":
        for _ in range(new_tokens):
            following = model(tokens)[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1)
            tokens = torch.cat((tokens, following), dim=1)
        return tokens, [0] * (tokens.shape[1] - 1)
    caches = [RollingAttentionCache(model.window) if cache == "rolling" else AttentionCache() for _ in model.layers]
    for position in range(prompt.shape[1] + new_tokens - 1):
        logits = model.step(tokens[:, position:position + 1], position, caches)  # (B, V)
        held.append(cache_bytes(caches))
        if position >= prompt.shape[1] - 1:  # past the prompt: the argmax is the next token
            tokens = torch.cat((tokens, logits.argmax(dim=-1, keepdim=True)), dim=1)
    return tokens, held
