"""The encoder-decoder Transformer: embeddings + positions -> encoder stack -> decoder stack -> logits.

Shape legend: B batch, S source length, T target length, D = d_model, V vocabulary size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from transformer_course._validation import (check_bool, check_choice, check_features, check_instance, check_int,
                                            check_probability, check_tensor)
from .feedforward import ACTIVATIONS
from .kv_cache import KVCache
from .layers import DecoderLayer, DeepNormEncoderLayer, EncoderLayer
from .masks import causal_mask, validate_mask
from .normalization import LayerNorm
from .positional import SinusoidalPositionalEncoding


@dataclass(frozen=True)
class TransformerConfig:
    """Hyper-parameters of ``Transformer``, checked once here; the defaults are the paper's base model."""

    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 512
    num_heads: int = 8
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.1
    max_len: int = 5000
    norm_first: bool = False
    share_embeddings: bool = False
    activation: str = "relu"

    def __post_init__(self) -> None:
        for name in ("src_vocab_size", "tgt_vocab_size", "d_model", "num_heads", "num_encoder_layers",
                     "num_decoder_layers", "d_ff", "max_len"):
            check_int(name, getattr(self, name), minimum=1)
        check_probability("dropout", self.dropout)
        check_bool("norm_first", self.norm_first)
        check_bool("share_embeddings", self.share_embeddings)
        check_choice("activation", self.activation, ACTIVATIONS)
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model must be divisible by num_heads, got d_model={self.d_model}, "
                             f"num_heads={self.num_heads}")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError("share_embeddings=True needs src_vocab_size == tgt_vocab_size, got "
                             f"{self.src_vocab_size} and {self.tgt_vocab_size}")


class Encoder(nn.Module):
    """A stack of ``num_layers`` EncoderLayers (plus a final LayerNorm when Pre-LN).

    ``qk_norm`` (None, "layernorm" or "rmsnorm") turns on QK-norm in every layer's attention;
    ``deepnorm_alpha`` (None, or a float > 0 with ``norm_first=False``) builds
    ``DeepNormEncoderLayer``s, Post-LN with the residual weighted by alpha (DeepNorm's
    initialization is a separate step, ``layers.deepnorm_init_``).

    Shape: x (B, S, D), mask broadcastable to (B, H, S, S) -> (B, S, D).
    """

    def __init__(self, num_layers: int, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0,
                 norm_first: bool = False, activation: str = "relu", qk_norm: str | None = None,
                 deepnorm_alpha: float | None = None) -> None:
        super().__init__()
        check_int("num_layers", num_layers, minimum=1)
        if deepnorm_alpha is not None and norm_first:
            raise ValueError("deepnorm_alpha needs the Post-LN placement (norm_first=False), got norm_first=True")
        if deepnorm_alpha is None:
            self.layers = nn.ModuleList(EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first, activation,
                                                     qk_norm) for _ in range(num_layers))
        else:
            self.layers = nn.ModuleList(DeepNormEncoderLayer(d_model, num_heads, d_ff, dropout, activation, qk_norm,
                                                             alpha=deepnorm_alpha) for _ in range(num_layers))
        # Pre-LN leaves the residual stream un-normalized, so the stack ends with one more LayerNorm.
        self.norm = LayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, mask=mask)  # (B, S, D)
        return self.norm(x)


class Decoder(nn.Module):
    """A stack of ``num_layers`` DecoderLayers (plus a final LayerNorm when Pre-LN).

    Shape: x (B, T, D), memory (B, S, D) -> (B, T, D).
    """

    def __init__(self, num_layers: int, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0,
                 norm_first: bool = False, activation: str = "relu") -> None:
        super().__init__()
        check_int("num_layers", num_layers, minimum=1)
        self.layers = nn.ModuleList(
            DecoderLayer(d_model, num_heads, d_ff, dropout, norm_first, activation) for _ in range(num_layers))
        self.norm = LayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, x: torch.Tensor, memory: torch.Tensor, self_mask: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None, cache: KVCache | None = None) -> torch.Tensor:
        if cache is not None and (not isinstance(cache, KVCache) or len(cache) != len(self.layers)):
            raise ValueError(f"cache must be a KVCache with {len(self.layers)} layers, got {cache!r}")
        for index, layer in enumerate(self.layers):
            layer_cache = cache[index] if cache is not None else None
            x = layer(x, memory, self_mask=self_mask, memory_mask=memory_mask, cache=layer_cache)  # (B, T, D)
        return self.norm(x)


class Transformer(nn.Module):
    """The encoder-decoder of Vaswani et al. (2017): logits = W_out Decoder(Embed(tgt), Encoder(Embed(src))).

    Embeddings are scaled by sqrt(d_model) and summed with sinusoidal encodings. With
    ``config.share_embeddings`` the source embedding, target embedding and output projection share
    one matrix (the paper's setting, which needs one shared vocabulary).

    The public methods (``forward``, ``encode``, ``decode``, ``decode_step``, ``greedy_decode``)
    check their tokens and masks once, including that no query is left without a key; the layers
    inside only read shapes, so a forward pass never waits on a check.

    Args:
        config: the hyper-parameters (the defaults of ``TransformerConfig`` are the base model).

    Shape:
        src (B, S) and tgt (B, T) token ids; src_mask broadcastable to (B, 1, 1, S) (padding);
        tgt_mask broadcastable to (B, 1, T, T), default ``causal_mask(T)`` -> logits (B, T, V_tgt).

    Example:
        >>> model = Transformer(TransformerConfig(src_vocab_size=100, tgt_vocab_size=100, d_model=64))
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        check_instance("config", config, TransformerConfig)
        self.config = c = config
        self.src_embed = nn.Embedding(c.src_vocab_size, c.d_model)
        self.tgt_embed = self.src_embed if c.share_embeddings else nn.Embedding(c.tgt_vocab_size, c.d_model)
        self.positional = SinusoidalPositionalEncoding(c.d_model, c.max_len, c.dropout)
        layer = dict(d_model=c.d_model, num_heads=c.num_heads, d_ff=c.d_ff, dropout=c.dropout,
                     norm_first=c.norm_first, activation=c.activation)
        self.encoder = Encoder(c.num_encoder_layers, **layer)
        self.decoder = Decoder(c.num_decoder_layers, **layer)
        self.generator = nn.Linear(c.d_model, c.tgt_vocab_size, bias=not c.share_embeddings)
        if c.share_embeddings:
            self.generator.weight = self.src_embed.weight

    # --- The door: each public method checks its inputs once, then runs the unchecked helpers. ---

    def _check_tokens(self, name: str, tokens: object, embedding: nn.Embedding) -> torch.Tensor:
        check_tensor(name, tokens, ndim=2)
        if tokens.is_floating_point() or tokens.dtype == torch.bool:
            raise TypeError(f"{name} must hold integer token ids, got dtype {tokens.dtype}")
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= embedding.num_embeddings):
            raise ValueError(f"{name} ids must lie in [0, {embedding.num_embeddings}), "
                             f"got range [{int(tokens.min())}, {int(tokens.max())}]")
        if tokens.shape[1] > self.config.max_len:
            raise ValueError(f"{name} length {tokens.shape[1]} exceeds max_len={self.config.max_len}")
        return tokens

    def _check_memory(self, memory: object, src_mask: torch.Tensor | None, t: int) -> None:
        check_features("memory", memory, self.config.d_model, ndim=3)
        if src_mask is not None:
            validate_mask(src_mask, t, memory.shape[1], "src_mask")

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """src (B, S) -> memory (B, S, D)."""
        self._check_tokens("src", src, self.src_embed)
        if src_mask is not None:
            validate_mask(src_mask, src.shape[1], src.shape[1], "src_mask")
        return self._encode(src, src_mask)

    def _check_target(self, tgt: object, tgt_mask: torch.Tensor | None) -> None:
        self._check_tokens("tgt", tgt, self.tgt_embed)
        if tgt_mask is not None:
            validate_mask(tgt_mask, tgt.shape[1], tgt.shape[1], "tgt_mask")

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor | None = None,
               tgt_mask: torch.Tensor | None = None) -> torch.Tensor:
        """tgt (B, T), memory (B, S, D) -> logits (B, T, V_tgt); causal self-attention by default."""
        self._check_target(tgt, tgt_mask)
        self._check_memory(memory, src_mask, tgt.shape[1])
        return self._decode(tgt, memory, src_mask, tgt_mask)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor, src_mask: torch.Tensor | None = None,
                tgt_mask: torch.Tensor | None = None) -> torch.Tensor:
        memory = self.encode(src, src_mask)  # (B, S, D); checks src and src_mask, once
        self._check_target(tgt, tgt_mask)
        return self._decode(tgt, memory, src_mask, tgt_mask)  # (B, T, V)

    def decode_step(self, tgt: torch.Tensor, memory: torch.Tensor, cache: KVCache,
                    src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Incremental decoding: run only the positions of ``tgt`` (B, T) not yet in ``cache``.

        The cached positions' keys and values are reused, the new ones appended, so a loop that
        calls this with a growing prefix gives the same logits as ``decode`` on the full prefix.

        Returns:
            logits (B, T_new, V_tgt) for the new positions (usually T_new = 1).

        Raises:
            ValueError: if ``tgt`` has no position beyond the cached ones.

        Pope et al., 2022, "Efficiently Scaling Transformer Inference".
        """
        check_instance("cache", cache, KVCache)
        self._check_tokens("tgt", tgt, self.tgt_embed)
        if tgt.shape[1] <= cache.length:
            raise ValueError(f"tgt must be longer than the {cache.length} cached positions, got length {tgt.shape[1]}")
        self._check_memory(memory, src_mask, tgt.shape[1] - cache.length)
        return self._decode_step(tgt, memory, cache, src_mask)

    @torch.no_grad()
    def greedy_decode(self, src: torch.Tensor, max_len: int, bos_id: int, eos_id: int | None = None,
                      src_mask: torch.Tensor | None = None, use_cache: bool = False) -> torch.Tensor:
        """Generate up to ``max_len`` tokens after ``bos_id`` by repeatedly taking the argmax.

        With ``use_cache=True`` each step runs only the newest token through the decoder, reusing
        the keys and values of the earlier ones from a ``KVCache`` (same tokens, less work).

        Returns:
            (B, 1 + L) token ids starting with ``bos_id``; once a sequence emits ``eos_id`` it
            is padded with ``eos_id``.
        """
        max_len = check_int("max_len", max_len, minimum=1)
        check_int("bos_id", bos_id, minimum=0)
        check_bool("use_cache", use_cache)
        memory = self.encode(src, src_mask)  # (B, S, D)
        out = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
        finished = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)  # (B,)
        cache = KVCache(len(self.decoder.layers)) if use_cache else None
        for _ in range(max_len):
            if cache is not None:
                logits = self._decode_step(out, memory, cache, src_mask)  # (B, 1, V)
            else:
                logits = self._decode(out, memory, src_mask)  # (B, L, V)
            next_token = logits[:, -1].argmax(dim=-1)  # (B,)
            if eos_id is not None:
                next_token = next_token.masked_fill(finished, eos_id)
                finished |= next_token == eos_id
            out = torch.cat((out, next_token.unsqueeze(1)), dim=1)  # (B, L + 1)
            if eos_id is not None and bool(finished.all()):
                break
        return out

    # --- The computation, on checked inputs. ---

    def _embed(self, tokens: torch.Tensor, embedding: nn.Embedding) -> torch.Tensor:
        return self.positional(embedding(tokens) * math.sqrt(self.config.d_model))  # (B, L, D)

    def _encode(self, src: torch.Tensor, src_mask: torch.Tensor | None) -> torch.Tensor:
        return self.encoder(self._embed(src, self.src_embed), mask=src_mask)  # (B, S, D)

    def _decode(self, tgt: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor | None,
                tgt_mask: torch.Tensor | None = None) -> torch.Tensor:
        if tgt_mask is None:
            tgt_mask = causal_mask(tgt.shape[1], device=tgt.device)  # (T, T)
        hidden = self.decoder(self._embed(tgt, self.tgt_embed), memory, self_mask=tgt_mask,
                              memory_mask=src_mask)  # (B, T, D)
        return self.generator(hidden)  # (B, T, V)

    def _decode_step(self, tgt: torch.Tensor, memory: torch.Tensor, cache: KVCache,
                     src_mask: torch.Tensor | None) -> torch.Tensor:
        past, total = cache.length, tgt.shape[1]
        x = self._embed(tgt, self.tgt_embed)[:, past:]  # (B, T_new, D), positions past .. total-1
        self_mask = causal_mask(total - past, total, device=tgt.device)  # (T_new, T): shifted diagonal
        hidden = self.decoder(x, memory, self_mask=self_mask, memory_mask=src_mask, cache=cache)  # (B, T_new, D)
        return self.generator(hidden)  # (B, T_new, V)
