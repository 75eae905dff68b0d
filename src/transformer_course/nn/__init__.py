"""The Transformer itself, written out with torch and the standard library only (see the modules'
docstrings; ``transformer_course/__init__.py`` lists them). The main classes and functions are
re-exported here: ``from transformer_course.nn import Transformer, TransformerConfig``.
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

__all__ = ["Decoder", "DecoderLayer", "ElmanRNN", "Encoder", "EncoderLayer", "FeedForward", "KVCache", "LayerNorm",
           "LearnedPositionalEmbedding", "MultiHeadAttention", "SinusoidalPositionalEncoding", "Transformer",
           "TransformerConfig", "causal_mask", "dilated_mask", "padding_mask", "scaled_dot_product_attention",
           "sliding_window_mask"]
