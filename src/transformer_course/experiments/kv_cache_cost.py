"""The KV cache measured: FLOPs of greedy decoding with and without the cache, counted and in closed form.

Shape legend: B batch, S source length, T target length (cached positions), D = d_model,
F = d_ff, V target vocabulary, N_e / N_d encoder / decoder layers, n generated tokens.

FLOPs count a multiply-add as 2, as ``torch.utils.flop_counter.FlopCounterMode`` does, and only
matrix products (softmax, LayerNorm and additions are not counted). ``Transformer.greedy_decode``
generating n tokens runs the encoder once, then n decoder steps t = 1 .. n on a prefix of t tokens.

Step t without a cache re-runs the decoder on all t positions; per decoder layer (m = 2 weight
matrices in the FFN, 3 for SwiGLU):

    self-attention  8 t D^2 (Q, K, V, O projections) + 4 t^2 D (scores QK^T and weights x V)
    cross-attention 4 t D^2 (Q, O) + 4 S D^2 (K, V of the encoder output) + 4 t S D
    feed-forward    2 m t D F
    plus the output projection 2 t D V.

Step t with a cache runs only the newest position (t -> 1 above, except that its query still
reads all t cached keys, 4 t D, and the cross-attention keys and values are projected at step 1
only). So a cached step costs a constant plus a term proportional to t, an uncached step a
multiple of t plus a term in t^2: over n tokens the cache turns O(n^2 D^2 + n^3 D) into
O(n D^2 + n^2 D).

Pope et al., 2022, "Efficiently Scaling Transformer Inference" (section 2, the KV cache).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import pandas as pd
import torch

from transformer_course._exhibit import exhibit
from transformer_course._validation import check_bool, check_instance, check_int, check_sizes, check_tensor
from transformer_course.measure.cost import count_flops
from transformer_course.nn.attention import hand_written_attention
from transformer_course.nn.kv_cache import KVCache
from transformer_course.nn.model import Transformer, TransformerConfig


def _ffn_matrices(config: TransformerConfig) -> int:
    return 3 if config.activation == "swiglu" else 2


def encoder_flops(config: TransformerConfig, src_len: int, batch_size: int = 1) -> int:
    """FLOPs of encoding a (B, S) source: N_e B (8 S D^2 + 4 S^2 D + 2 m S D F)."""
    check_instance("config", config, TransformerConfig)
    s = check_int("src_len", src_len, minimum=1)
    b = check_int("batch_size", batch_size, minimum=1)
    d, f = config.d_model, config.d_ff
    per_layer = 8 * s * d * d + 4 * s * s * d + 2 * _ffn_matrices(config) * s * d * f
    return b * config.num_encoder_layers * per_layer


def decode_step_flops(config: TransformerConfig, src_len: int, step: int, use_cache: bool, batch_size: int = 1) -> int:
    """FLOPs of decoding step ``step`` (prefix of t = step tokens), with or without the KV cache.

    Args:
        config: the model's configuration.
        src_len: S, source positions (cross-attention keys).
        step: t >= 1, the length of the prefix fed at this step.
        use_cache: True: only the newest position runs (cross-attention K, V projected at t = 1 only);
            False: all t positions run again.
        batch_size: B.

    Returns:
        The matrix-product FLOPs of that step (decoder layers and output projection), an int.

    Raises:
        TypeError, ValueError: for a config that is not a ``TransformerConfig`` or a size < 1.
    """
    check_instance("config", config, TransformerConfig)
    s = check_int("src_len", src_len, minimum=1)
    t = check_int("step", step, minimum=1)
    check_bool("use_cache", use_cache)
    b = check_int("batch_size", batch_size, minimum=1)
    d, f, v = config.d_model, config.d_ff, config.tgt_vocab_size
    q = 1 if use_cache else t  # positions that run through the layers at this step
    cross_keys = 4 * s * d * d if (not use_cache or t == 1) else 0  # K, V of the encoder output
    per_layer = (8 * q * d * d + 4 * q * t * d  # self-attention: projections, QK^T and AV over t keys
                 + 4 * q * d * d + cross_keys + 4 * q * s * d  # cross-attention
                 + 2 * _ffn_matrices(config) * q * d * f)  # feed-forward
    return b * (config.num_decoder_layers * per_layer + 2 * q * d * v)


def decode_flops(config: TransformerConfig, src_len: int, num_tokens: int, use_cache: bool,
                 batch_size: int = 1) -> int:
    """Closed-form FLOPs of ``greedy_decode(src, max_len=num_tokens)``: encoder + steps t = 1 .. n."""
    n = check_int("num_tokens", num_tokens, minimum=1)
    return encoder_flops(config, src_len, batch_size) + sum(
        decode_step_flops(config, src_len, t, use_cache, batch_size) for t in range(1, n + 1))


def _check_decoding(model: object, src: object, num_tokens: object) -> tuple[Transformer, torch.Tensor, int]:
    check_instance("model", model, Transformer, "transformer_course.nn.model.Transformer")
    check_tensor("src", src, ndim=2)
    return model, src, check_int("num_tokens", num_tokens, minimum=1)


def measured_decode_flops(model: Transformer, src: torch.Tensor, num_tokens: int, bos_id: int,
                          use_cache: bool) -> int:
    """FLOPs of ``model.greedy_decode`` counted by ``FlopCounterMode`` (hand-written attention path)."""
    model, src, num_tokens = _check_decoding(model, src, num_tokens)
    with hand_written_attention(model):
        return count_flops(lambda: model.greedy_decode(src, max_len=num_tokens, bos_id=bos_id, use_cache=use_cache))


@dataclass
class TracedDecode:
    """What :func:`traced_greedy_decode` saw: the tokens, the encoder's and each step's counted FLOPs, the cache."""

    tokens: torch.Tensor  # (B, 1 + n)
    src_len: int  # S
    use_cache: bool
    encoder_flops: int
    step_flops: list[int]  # one count per step t = 1 .. n
    cache: KVCache | None

    def total_flops(self, num_tokens: int) -> int:
        """FLOPs of generating the first ``num_tokens`` tokens: the encoder plus steps 1 .. n.

        Step t reads only the prefix of t tokens, so the first n steps of a longer run are exactly
        a run of n tokens.
        """
        n = check_int("num_tokens", num_tokens, minimum=1)
        if n > len(self.step_flops):
            raise ValueError(f"num_tokens must be <= the {len(self.step_flops)} traced steps, got {n}")
        return self.encoder_flops + sum(self.step_flops[:n])


@torch.no_grad()
def traced_greedy_decode(model: Transformer, src: torch.Tensor, num_tokens: int, bos_id: int,
                         use_cache: bool) -> TracedDecode:
    """Greedy decoding step by step through the public API, counting the FLOPs of every step.

    The same loop as ``Transformer.greedy_decode`` without an end token: ``encode`` once, then per
    step ``decode_step`` on the growing prefix with a ``KVCache`` (``use_cache=True``) or ``decode``
    on the whole prefix. The cache is returned, so its tensors can be weighed.

    Args:
        model: an encoder-decoder ``Transformer`` (eval mode for deterministic tokens).
        src: (B, S) source token ids.
        num_tokens: n >= 1 tokens to generate.
        bos_id: the start token.
        use_cache: decode with a ``KVCache`` or by recomputing the prefix.

    Returns:
        A :class:`TracedDecode` (tokens (B, 1 + n), the encoder's and each step's FLOPs, the cache or None).

    Raises:
        TypeError, ValueError: for a model that is not a ``Transformer``, a src that is not a (B, S)
            tensor, or ``num_tokens``/``bos_id`` out of range.
    """
    model, src, num_tokens = _check_decoding(model, src, num_tokens)
    check_int("bos_id", bos_id, minimum=0)
    check_bool("use_cache", use_cache)
    with hand_written_attention(model):
        encoded: list[torch.Tensor] = []
        encoder_count = count_flops(lambda: encoded.append(model.encode(src)))
        memory = encoded[0]  # (B, S, D)
        out = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
        cache = KVCache(len(model.decoder.layers)) if use_cache else None
        steps: list[int] = []
        for _ in range(num_tokens):
            result: list[torch.Tensor] = []
            if cache is not None:
                steps.append(count_flops(lambda: result.append(model.decode_step(out, memory, cache))))
            else:
                steps.append(count_flops(lambda: result.append(model.decode(out, memory))))
            next_token = result[0][:, -1].argmax(dim=-1)  # (B,)
            out = torch.cat((out, next_token.unsqueeze(1)), dim=1)  # (B, t + 1)
    return TracedDecode(out, src.shape[1], use_cache, encoder_count, steps, cache)


def cache_nbytes(cache: KVCache) -> dict[str, int]:
    """Bytes the cache's tensors hold, by kind: sum of ``.nbytes`` of the keys and values of every layer.

    Returns:
        {"self-attention": ..., "cross-attention": ..., "total": ...}.
    """
    check_instance("cache", cache, KVCache)
    sizes = {"self-attention": 0, "cross-attention": 0}
    for layer in cache.layers:
        for kind, entry in (("self-attention", layer.self_attn), ("cross-attention", layer.cross_attn)):
            if entry.keys is not None:
                sizes[kind] += entry.keys.nbytes + entry.values.nbytes
    sizes["total"] = sizes["self-attention"] + sizes["cross-attention"]
    return sizes


@exhibit
def decode_cost_table(plain: TracedDecode, cached: TracedDecode, config: TransformerConfig,
                      lengths: Sequence[int]) -> pd.DataFrame:
    """Counted and closed-form FLOPs of greedy decoding n tokens, without and with the cache, per n.

    Args:
        plain, cached: traced runs (``traced_greedy_decode``) without and with the cache, of at
            least ``max(lengths)`` tokens, on the same source.
        config: the model's configuration (for the closed form).
        lengths: the numbers of generated tokens n to report.

    Returns:
        DataFrame indexed by "tokens generated n" with the int columns "FLOPs without cache",
        "formula without cache", "FLOPs with cache", "formula with cache" and the float column
        "without / with" (the saving).

    Raises:
        TypeError, ValueError: if a run is not a ``TracedDecode``, the runs' caching is swapped,
            or a length exceeds a run.
    """
    check_instance("plain", plain, TracedDecode)
    check_instance("cached", cached, TracedDecode)
    check_instance("config", config, TransformerConfig)
    if plain.use_cache or not cached.use_cache:
        raise ValueError("plain must be a run without the cache and cached one with it, got "
                         f"use_cache={plain.use_cache} and {cached.use_cache}")
    if (plain.src_len, plain.tokens.shape[0]) != (cached.src_len, cached.tokens.shape[0]):
        raise ValueError("plain and cached must decode sources of the same shape (B, S), got "
                         f"{(plain.tokens.shape[0], plain.src_len)} and {(cached.tokens.shape[0], cached.src_len)}")
    batch_size, src_len = plain.tokens.shape[0], plain.src_len
    rows = []
    for n in check_sizes("lengths", lengths):
        row = {"tokens generated n": n}
        for label, run in (("without cache", plain), ("with cache", cached)):
            row[f"FLOPs {label}"] = run.total_flops(n)
            row[f"formula {label}"] = decode_flops(config, src_len, n, run.use_cache, batch_size)
        row["without / with"] = row["FLOPs without cache"] / row["FLOPs with cache"]
        rows.append(row)
    return pd.DataFrame(rows).set_index("tokens generated n")


# --- The count as a polynomial in n: asymptotics and the one-off costs ------------------------


def decode_flops_polynomial(config: TransformerConfig, src_len: int, use_cache: bool,
                            batch_size: int = 1) -> dict[str, Fraction]:
    """The closed form of :func:`decode_flops` summed over the steps, as exact polynomial coefficients in n.

    Summing :func:`decode_step_flops` over t = 1 .. n with sum t = n(n+1)/2 and sum t^2 =
    n(n+1)(2n+1)/6 gives, with A = N (12 D^2 + 4 S D + 2 m D F) + 2 D V (one position through every
    decoder layer and the output projection, without its attention over the prefix):

        with the cache:    one-off + (A + 2 N D) n + 2 N D n^2                      (no n^3 term)
        without it:        one-off + (A/2 + 2 N D / 3 + 4 N S D^2) n + (A/2 + 2 N D) n^2 + (4/3) N D n^3

    times B. The one-off cost is the encoder, run once either way, plus, with the cache, the
    cross-attention keys and values of the encoder output (4 N S D^2), projected once at step 1
    (without the cache they are projected again at every step: the 4 N S D^2 n term).

    Returns:
        {"one-off": ..., "n": ..., "n^2": ..., "n^3": ...} as ``fractions.Fraction`` (exact).
    """
    check_instance("config", config, TransformerConfig)
    s = check_int("src_len", src_len, minimum=1)
    check_bool("use_cache", use_cache)
    b = check_int("batch_size", batch_size, minimum=1)
    n_layers, d, f, v = config.num_decoder_layers, config.d_model, config.d_ff, config.tgt_vocab_size
    a = n_layers * (12 * d * d + 4 * s * d + 2 * _ffn_matrices(config) * d * f) + 2 * d * v
    one_off = encoder_flops(config, s, b)
    if use_cache:
        terms = {"one-off": Fraction(one_off + b * 4 * n_layers * s * d * d), "n": Fraction(b * (a + 2 * n_layers * d)),
                 "n^2": Fraction(b * 2 * n_layers * d), "n^3": Fraction(0)}
    else:
        terms = {"one-off": Fraction(one_off),
                 "n": b * (Fraction(a, 2) + Fraction(2 * n_layers * d, 3) + 4 * n_layers * s * d * d),
                 "n^2": b * (Fraction(a, 2) + 2 * n_layers * d), "n^3": b * Fraction(4 * n_layers * d, 3)}
    return terms


def evaluate_polynomial(terms: dict[str, Fraction], num_tokens: int, one_off: bool = True) -> Fraction:
    """The value of :func:`decode_flops_polynomial`'s polynomial at n (with or without its one-off term)."""
    n = check_int("num_tokens", num_tokens, minimum=0)
    value = terms["n"] * n + terms["n^2"] * n ** 2 + terms["n^3"] * n ** 3
    return value + terms["one-off"] if one_off else value


def crossover_length(terms: dict[str, Fraction]) -> float:
    """n at which the highest-order term of the decoder's FLOPs equals the one below it.

    With the cache: n* = c_1 / c_2, where the n^2 D attention term catches up with the n D^2
    projections and FFN; without it: n* = c_2 / c_3, where the n^3 D term catches up with n^2 D^2.
    """
    if terms["n^3"]:
        return float(terms["n^2"] / terms["n^3"])
    return float(terms["n"] / terms["n^2"])


@exhibit
def growth_table(config: TransformerConfig, src_len: int, lengths: Sequence[int], batch_size: int = 1) -> pd.DataFrame:
    """Decoder FLOPs (one-off costs apart) and their growth per doubling of n, from the polynomial.

    Returns:
        DataFrame indexed by "tokens generated n" with the columns "decoder FLOPs with cache",
        "decoder FLOPs without cache" (ints) and "x per doubling, with cache", "x per doubling,
        without cache": P(n) / P(n / 2) (NaN for the first row), where P excludes the one-off terms.
    """
    check_instance("config", config, TransformerConfig)
    lengths = check_sizes("lengths", lengths)
    rows = []
    for n in lengths:
        row = {"tokens generated n": n}
        for label, use_cache in (("with cache", True), ("without cache", False)):
            terms = decode_flops_polynomial(config, src_len, use_cache, batch_size)
            value = evaluate_polynomial(terms, n, one_off=False)
            row[f"decoder FLOPs {label}"] = int(value)
            half = evaluate_polynomial(terms, n // 2, one_off=False) if n % 2 == 0 and n > 1 else None
            row[f"x per doubling, {label}"] = float(value / half) if half else float("nan")
        rows.append(row)
    return pd.DataFrame(rows).set_index("tokens generated n")


# --- What a cached step moves through memory ---------------------------------------------------


def decoder_weight_count(config: TransformerConfig) -> int:
    """Parameters a cached decoding step (t >= 2) reads: the decoder layers, the decoder's final
    LayerNorm (Pre-LN only) and the output projection (V x D, plus V biases unless it shares the
    embedding's weights, which the model builds without a bias).

    Of each layer's cross-attention it reads the query and output projections only: the keys and
    values of the encoder output were projected once, at step 1, and are read from the cache. The
    embedding lookup reads only B rows, and the encoder does not run, so neither is counted.
    """
    from transformer_course.measure.cost import decoder_layer_parameters

    check_instance("config", config, TransformerConfig)
    d, v = config.d_model, config.tgt_vocab_size
    cross_keys_values = 2 * (d * d + d)  # W^K, W^V of the cross-attention and their biases: not read
    per_layer = decoder_layer_parameters(d, config.d_ff, config.activation) - cross_keys_values
    final_norm = 2 * d if config.norm_first else 0  # Pre-LN closes the stack with a LayerNorm
    output_bias = 0 if config.share_embeddings else v
    return config.num_decoder_layers * per_layer + final_norm + v * d + output_bias


def cached_step_traffic(config: TransformerConfig, src_len: int, step: int, batch_size: int = 1,
                        bytes_per_number: int = 2) -> dict[str, float]:
    """FLOPs and bytes read from memory by one cached decoding step t (t >= 2), and their ratio.

    Every step reads all the decoder's weights once (shared by the B sequences) and, for every
    sequence, the whole cache: t self-attention and S cross-attention keys and values per layer,
    2 N B (t + S) D numbers. Activations of one position are negligible beside these and are not
    counted. Arithmetic intensity = FLOPs / bytes read: below the processor's ratio of peak
    FLOP/s to memory bandwidth, the step waits on memory (Pope et al., 2022; Williams et al., 2009).

    Returns:
        {"FLOPs", "weight bytes", "cache bytes", "bytes read", "FLOPs per byte"}.
    """
    t = check_int("step", step, minimum=2)
    b = check_int("batch_size", batch_size, minimum=1)
    size = check_int("bytes_per_number", bytes_per_number, minimum=1)
    flops = decode_step_flops(config, src_len, t, use_cache=True, batch_size=b)
    weights = decoder_weight_count(config) * size
    cache = 2 * config.num_decoder_layers * b * (t + src_len) * config.d_model * size
    return {"FLOPs": float(flops), "weight bytes": float(weights), "cache bytes": float(cache),
            "bytes read": float(weights + cache), "FLOPs per byte": flops / (weights + cache)}


def concatenation_bytes(num_layers: int, batch_size: int, num_tokens: int, d_model: int,
                        bytes_per_number: int = 4) -> int:
    """Bytes written by ``torch.cat`` growing a self-attention cache to n positions, one position a step.

    ``AttentionCache.update`` appends with ``torch.cat``, which writes a new (B, H, t, Dh) tensor
    for the keys and one for the values at every step t >= 2: 2 N B t D numbers. Summed over
    t = 2 .. n: N B D (n (n + 1) - 2) numbers, about (n + 1) / 2 times the final cache.
    """
    n = check_int("num_tokens", num_tokens, minimum=1)
    per_position = 2 * check_int("num_layers", num_layers, minimum=1) * check_int("batch_size", batch_size, minimum=1) \
        * check_int("d_model", d_model, minimum=1) * check_int("bytes_per_number", bytes_per_number, minimum=1)
    return per_position * sum(range(2, n + 1))


def encoder_traffic(config: TransformerConfig, src_len: int, batch_size: int = 1,
                    bytes_per_number: int = 2) -> dict[str, float]:
    """FLOPs and weight bytes of encoding a (B, S) source in one pass, the "prefill" of an encoder-decoder.

    The encoder reads each of its weights once for all B S positions, so its arithmetic intensity
    grows with B S, where a cached decoding step (:func:`cached_step_traffic`) reads every weight
    for one position per sequence. Activations (B S D numbers per sub-layer) are not counted, so
    the ratio is an upper bound on the intensity of the pass.

    Returns:
        {"FLOPs", "weight bytes", "FLOPs per byte"}.
    """
    from transformer_course.measure.cost import encoder_layer_parameters

    check_instance("config", config, TransformerConfig)
    size = check_int("bytes_per_number", bytes_per_number, minimum=1)
    flops = encoder_flops(config, src_len, batch_size)
    weights = config.num_encoder_layers * encoder_layer_parameters(config.d_model, config.d_ff, config.activation) * size
    return {"FLOPs": float(flops), "weight bytes": float(weights), "FLOPs per byte": flops / weights}


# --- Shrinking and paging the cache: grouped-query attention, blocks ---------------------------


@exhibit
def grouped_cache_table(d_model: int, num_heads: int, kv_heads: Sequence[int], num_tokens: int = 16,
                        dtype: torch.dtype = torch.float32, seed: int = 0) -> pd.DataFrame:
    """Self-attention cache bytes per token of one layer, measured from real tensors, per number of key/value heads.

    For each G in ``kv_heads`` a ``MultiHeadAttention(d_model, num_heads, num_kv_heads=G)`` decodes
    ``num_tokens`` random tokens one at a time with an ``AttentionCache``; the cache's keys and
    values, (1, G, num_tokens, Dh) each, are then measured with ``.nbytes``.

    Returns:
        DataFrame indexed by "kv heads" with columns "cache shape", "bytes per token (measured)",
        "bytes per token (2 G Dh x bytes)", "share of multi-head".
    """
    from transformer_course.nn.attention import MultiHeadAttention
    from transformer_course.nn.kv_cache import AttentionCache
    from transformer_course.nn.masks import causal_mask
    from .training import seeded

    d_model, num_heads = check_int("d_model", d_model, minimum=1), check_int("num_heads", num_heads, minimum=1)
    num_tokens = check_int("num_tokens", num_tokens, minimum=1)
    kv_heads = check_sizes("kv_heads", kv_heads)
    rows = {}
    with seeded(check_int("seed", seed, minimum=0)):
        tokens = torch.randn(1, num_tokens, d_model, dtype=dtype)  # (1, T, D)
        for groups in kv_heads:
            attention = MultiHeadAttention(d_model, num_heads, num_kv_heads=groups).to(dtype).eval()
            cache = AttentionCache()
            with torch.no_grad():
                for t in range(num_tokens):
                    x = tokens[:, t:t + 1]  # (1, 1, D): one new token
                    attention(x, x, x, mask=causal_mask(1, t + 1), cache=cache)
            measured = (cache.keys.nbytes + cache.values.nbytes) // num_tokens
            element = torch.empty(0, dtype=dtype).element_size()
            rows[groups] = {"cache shape": str(tuple(cache.keys.shape)), "bytes per token (measured)": measured,
                            "bytes per token (2 G Dh x bytes)": 2 * groups * (d_model // num_heads) * element}
    table = pd.DataFrame.from_dict(rows, orient="index").rename_axis("kv heads")
    table["share of multi-head"] = table["bytes per token (measured)"] / (2 * d_model * element)
    return table


@dataclass(frozen=True)
class DecoderShape:
    """The published shape of a decoder-only model: what its cache and weight memory depend on.

    Args:
        name: the model, for tables ("Llama 2 70B").
        num_layers, d_model, num_heads, num_kv_heads, d_ff, vocab_size: its hyperparameters (a SwiGLU
            feed-forward of width ``d_ff``, untied input and output embeddings).
        context: the longest sequence it was trained on.
    """

    name: str
    num_layers: int
    d_model: int
    num_heads: int
    num_kv_heads: int
    d_ff: int
    vocab_size: int
    context: int

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"name must be a non-empty string, got {self.name!r}")
        for field in ("num_layers", "d_model", "num_heads", "num_kv_heads", "d_ff", "vocab_size", "context"):
            check_int(field, getattr(self, field), minimum=1)
        if self.d_model % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads must divide d_model and num_kv_heads must divide num_heads, got d_model="
                             f"{self.d_model}, num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}")


# Touvron et al. (2023), "Llama 2: Open Foundation and Fine-Tuned Chat Models", Table 1 (grouped-query
# attention for the 34B and 70B models, 4k context); the sizes are those of the released model's
# configuration (meta-llama/Llama-2-70b-hf, config.json: 80 layers, hidden size 8192, 64 attention heads,
# 8 key/value heads, intermediate size 28672, vocabulary 32000, 4096 positions).
LLAMA_2_70B = DecoderShape("Llama 2 70B", num_layers=80, d_model=8192, num_heads=64, num_kv_heads=8,
                           d_ff=28672, vocab_size=32000, context=4096)


@exhibit
def decoder_cache_table(shape: DecoderShape, kv_heads: Sequence[int], bytes_per_number: int = 2) -> pd.DataFrame:
    """Self-attention cache against weights for a published decoder's shape, per number G of key/value heads.

    For each G the course's own layers are built at ``shape`` on PyTorch's meta device (shapes and
    dtypes, no memory): ``MultiHeadAttention`` without biases and with G key/value heads, a SwiGLU
    ``FeedForward`` and two RMSNorm gains per layer, plus input and output embeddings and a final
    gain. Their parameters are counted (the course's ``FeedForward`` keeps its biases, 2F + D per
    layer, which Llama does not have), and three tokens are fed through the attention with an
    ``AttentionCache``, whose keys and values give the bytes one token adds to one layer's cache.

    Returns:
        DataFrame indexed by "kv heads G" with columns "cache bytes per token" (all layers),
        "cache per sequence (GiB)" (``shape.context`` tokens), "parameters (billions)", "weights (GiB)"
        and "sequences whose cache equals the weights".
    """
    from transformer_course.nn.attention import MultiHeadAttention
    from transformer_course.nn.feedforward import FeedForward
    from transformer_course.nn.kv_cache import AttentionCache
    from transformer_course.nn.masks import causal_mask

    check_instance("shape", shape, DecoderShape)
    kv_heads = check_sizes("kv_heads", kv_heads)
    dtype = {2: torch.float16, 4: torch.float32}.get(check_int("bytes_per_number", bytes_per_number, minimum=1))
    if dtype is None:
        raise ValueError(f"bytes_per_number must be 2 (16-bit) or 4 (32-bit), got {bytes_per_number}")
    rows, probe = {}, 3
    with torch.device("meta"), torch.no_grad():
        for groups in kv_heads:
            attention = MultiHeadAttention(shape.d_model, shape.num_heads, bias=False, num_kv_heads=groups).to(dtype)
            feedforward = FeedForward(shape.d_model, shape.d_ff, activation="swiglu")
            cache = AttentionCache()
            x = torch.empty(1, probe, shape.d_model, dtype=dtype)  # (1, 3, D)
            attention(x, x, x, mask=causal_mask(probe), cache=cache)
            per_layer_token = (cache.keys.nbytes + cache.values.nbytes) // probe  # 2 G Dh bytes
            per_layer = (sum(p.numel() for p in attention.parameters())
                         + sum(p.numel() for p in feedforward.parameters()) + 2 * shape.d_model)
            parameters = shape.num_layers * per_layer + 2 * shape.vocab_size * shape.d_model + shape.d_model
            per_token = shape.num_layers * per_layer_token
            rows[groups] = {"cache bytes per token": per_token,
                            "cache per sequence (GiB)": per_token * shape.context / 2**30,
                            "parameters (billions)": parameters / 1e9,
                            "weights (GiB)": parameters * bytes_per_number / 2**30,
                            "sequences whose cache equals the weights": parameters * bytes_per_number
                            / (per_token * shape.context)}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("kv heads G")


@exhibit
def paged_memory_table(lengths: Sequence[int], block_size: int, max_length: int) -> pd.DataFrame:
    """Cache slots held by sequences of ``lengths``: preallocated to ``max_length`` against paged in blocks.

    The paged column is measured: the sequences are written into a ``nn.paged_kv.PagedKVCache``
    (one head of width 1, the bookkeeping is what counts) and its block tables are read.

    Returns:
        DataFrame indexed by "sequence" (plus a "total" row) with columns "tokens",
        "slots, preallocated", "slots, paged", "unused, preallocated", "unused, paged".
    """
    from transformer_course.nn.paged_kv import PagedKVCache

    lengths = check_sizes("lengths", lengths)
    block_size = check_int("block_size", block_size, minimum=1)
    max_length = check_int("max_length", max_length, minimum=max(lengths))
    pool = PagedKVCache(sum(-(-n // block_size) for n in lengths), block_size, num_heads=1, head_dim=1)
    for sequence, length in enumerate(lengths):
        pool.append(sequence, torch.zeros(1, length, 1), torch.zeros(1, length, 1))
    table = pd.DataFrame({"tokens": list(lengths), "slots, preallocated": [max_length] * len(lengths),
                          "slots, paged": [pool.allocated_slots(s) for s in range(len(lengths))]}).rename_axis("sequence")
    table.loc["total"] = table.sum()
    table["unused, preallocated"] = table["slots, preallocated"] - table["tokens"]
    table["unused, paged"] = table["slots, paged"] - table["tokens"]
    return table
