"""The Transformer itself, written out: torch and the standard library only.

    masks              boolean masks (True = may attend): causal, sliding window, dilated, padding
    attention          scaled dot-product attention and MultiHeadAttention
    sparse_attention   banded and dilated attention that never build the (T, T) scores
    positional         sinusoidal and learned encodings, RoPE, ALiBi
    feedforward        the position-wise FFN (ReLU, GELU, SwiGLU)
    normalization      LayerNorm, and the statistics of LayerNorm vs BatchNorm
    layers             EncoderLayer and DecoderLayer: residual sub-layers, Post-LN or Pre-LN
    model              Encoder, Decoder and the encoder-decoder Transformer
    kv_cache           the key/value cache of incremental decoding
    rnn                the Elman RNN baseline
    interop            our weights in PyTorch's own modules (the tests' references)

``from transformer_course.nn import Transformer`` works for the main classes listed in ``__all__``.
"""

from .attention import MultiHeadAttention, scaled_dot_product_attention
from .feedforward import FeedForward
from .kv_cache import KVCache
from .layers import DecoderLayer, EncoderLayer
from .masks import causal_mask, dilated_mask, padding_mask, sliding_window_mask
from .model import Decoder, Encoder, Transformer, TransformerConfig
from .normalization import LayerNorm
from .positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from .rnn import ElmanRNN

__all__ = [
    "Decoder", "DecoderLayer", "ElmanRNN", "Encoder", "EncoderLayer", "FeedForward", "KVCache", "LayerNorm",
    "LearnedPositionalEmbedding", "MultiHeadAttention", "SinusoidalPositionalEncoding", "Transformer",
    "TransformerConfig", "causal_mask", "dilated_mask", "padding_mask", "scaled_dot_product_attention",
    "sliding_window_mask",
]
