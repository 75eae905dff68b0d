"""Bad input gets a clear TypeError/ValueError naming the argument, never a deep torch trace."""

import pytest
import torch

from transformer_course.experiments.training import fit
from transformer_course.measure.cost import block_flops, count_parameters, measure_flops, parameter_breakdown
from transformer_course.nn.attention import MultiHeadAttention, scaled_dot_product_attention
from transformer_course.nn.feedforward import FeedForward
from transformer_course.nn.layers import DecoderLayer, EncoderLayer
from transformer_course.nn.masks import causal_mask, dilated_mask, padding_mask, sliding_window_mask
from transformer_course.nn.model import Transformer, TransformerConfig
from transformer_course.nn.normalization import LayerNorm
from transformer_course.nn.positional import (LearnedPositionalEmbedding, SinusoidalPositionalEncoding, alibi_bias,
                                           rotary_embedding, sinusoidal_encoding)
from transformer_course.nn.rnn import ElmanRNN

q = torch.randn(1, 2, 4, 8)
x = torch.randn(2, 5, 16)
tiny_model = Transformer(TransformerConfig(10, 10, 16, 2, 1, 1, 32, max_len=8))

CASES = [
    (lambda: MultiHeadAttention(10, 3), ValueError, "d_model must be divisible by num_heads"),
    (lambda: MultiHeadAttention(0, 1), ValueError, "d_model must be >= 1"),
    (lambda: MultiHeadAttention(16, 2.0), TypeError, "num_heads must be an int"),
    (lambda: MultiHeadAttention(16, 2, dropout=-0.1), ValueError, "dropout must be in"),
    (lambda: MultiHeadAttention(16, 2, dropout="high"), TypeError, "dropout must be a float"),
    (lambda: sliding_window_mask(8, 0), ValueError, "window must be >= 1"),
    (lambda: sliding_window_mask(8, 2.5), TypeError, "window must be an int"),
    (lambda: dilated_mask(8, 0), ValueError, "dilation must be >= 1"),
    (lambda: causal_mask(0), ValueError, "t must be >= 1"),
    (lambda: causal_mask(5, 3), ValueError, "s must be >= t"),
    (lambda: padding_mask([0, 3], 4), ValueError, "lengths must lie in"),
    (lambda: padding_mask(torch.tensor([1.5]), 4), TypeError, "lengths must hold integers"),
    (lambda: scaled_dot_product_attention(q, q, q, mask=torch.ones(4, 4)), TypeError, "mask must have dtype torch.bool"),
    (lambda: scaled_dot_product_attention(q, q, q, mask=torch.ones(3, 4, dtype=torch.bool)), ValueError,
     r"mask must broadcast to \(\.\.\., T=4, S=4\)"),
    (lambda: scaled_dot_product_attention(q, q, q, mask=torch.zeros(4, 4, dtype=torch.bool)), ValueError,
     "no key to attend to"),
    (lambda: scaled_dot_product_attention(q, q[..., :4], q), ValueError, "q and k must have the same last dimension"),
    (lambda: scaled_dot_product_attention(q, q, q[..., :3, :]), ValueError, "k and v must have the same length"),
    (lambda: scaled_dot_product_attention(q.long(), q, q), TypeError, "q must be a floating-point tensor"),
    (lambda: scaled_dot_product_attention(q, q, q, bias=torch.zeros(3, 3)), ValueError, "bias must broadcast"),
    (lambda: MultiHeadAttention(16, 2)(x, x, x[:, :, :8]), ValueError, "value must have last dimension d_model=16"),
    (lambda: MultiHeadAttention(16, 2)(x[0], x[0], x[0]), ValueError, "query must have 3 dimensions"),
    (lambda: MultiHeadAttention(16, 2)(x, x, x, mask=causal_mask(4)), ValueError, "mask must broadcast"),
    (lambda: FeedForward(16, 64, activation="tanh"), ValueError, "activation must be one of"),
    (lambda: FeedForward(16, 0), ValueError, "d_ff must be >= 1"),
    (lambda: FeedForward(16, 64)(torch.randn(2, 8)), ValueError, "x must have last dimension d_model=16"),
    (lambda: LayerNorm(16, eps=0), ValueError, "eps must be > 0"),
    (lambda: LayerNorm(16)(torch.randn(2, 8)), ValueError, "x must have last dimension d_model=16"),
    (lambda: LayerNorm(16)(torch.ones(2, 16, dtype=torch.long)), TypeError, "x must be a floating-point tensor"),
    (lambda: sinusoidal_encoding(10, 7), ValueError, "d_model must be even"),
    (lambda: sinusoidal_encoding(0, 8), ValueError, "num_positions must be >= 1"),
    (lambda: SinusoidalPositionalEncoding(16)(torch.randn(2, 5, 8)), ValueError, "x must have last dimension"),
    (lambda: LearnedPositionalEmbedding(4, 16)(x), ValueError, "exceeds max_len=4"),
    (lambda: rotary_embedding(torch.randn(3, 5)), ValueError, "Dh even"),
    (lambda: rotary_embedding(torch.randn(3, 4), positions=torch.arange(2)), ValueError, "positions must have shape"),
    (lambda: alibi_bias(0, 4), ValueError, "num_heads must be >= 1"),
    (lambda: EncoderLayer(16, 2, 32, dropout=1.0), ValueError, "dropout must be in"),
    (lambda: EncoderLayer(16, 2, 32, norm_first="yes"), TypeError, "norm_first must be a bool"),
    (lambda: EncoderLayer(16, 2, 32)(torch.randn(2, 5, 8)), ValueError, "x must have last dimension d_model=16"),
    (lambda: DecoderLayer(16, 2, 32)(x, torch.randn(2, 3, 8)), ValueError, "memory must have last dimension"),
    (lambda: TransformerConfig(10, 10, d_model=30, num_heads=4), ValueError, "d_model must be divisible by num_heads"),
    (lambda: TransformerConfig(10, 12, share_embeddings=True), ValueError, "share_embeddings=True needs"),
    (lambda: TransformerConfig(10, 10, num_encoder_layers=0), ValueError, "num_encoder_layers must be >= 1"),
    (lambda: tiny_model(torch.randint(0, 10, (1, 9)), torch.zeros(1, 2, dtype=torch.long)), ValueError,
     "src length 9 exceeds max_len=8"),
    (lambda: tiny_model(torch.full((1, 3), 10), torch.zeros(1, 2, dtype=torch.long)), ValueError,
     r"src ids must lie in \[0, 10\)"),
    (lambda: tiny_model(torch.zeros(1, 3), torch.zeros(1, 2, dtype=torch.long)), TypeError,
     "src must hold integer token ids"),
    (lambda: tiny_model.greedy_decode(torch.zeros(1, 3, dtype=torch.long), 0, 1), ValueError, "max_len must be >= 1"),
    (lambda: ElmanRNN(8)(torch.randn(2, 3, 4)), ValueError, "x must have last dimension d_model=8"),
    (lambda: block_flops(0, 512), ValueError, "n must be >= 1"),
    (lambda: block_flops(64, 512, expansion=1.001), ValueError, "expansion \\* d must be an integer"),
    (lambda: count_parameters("model"), TypeError, "module must be a torch.nn.Module"),
    (lambda: parameter_breakdown(tiny_model, depth=0), ValueError, "depth must be >= 1"),
    (lambda: measure_flops(lambda: None), TypeError, "module must be a torch.nn.Module"),
    (lambda: fit(tiny_model, None, None, steps=0), ValueError, "steps must be >= 1"),
]


@pytest.mark.parametrize("call,error,message", CASES, ids=[c[2][:40] for c in CASES])
def test_bad_input_raises_clear_error(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_a_fully_masked_row_is_refused_once_at_the_door_and_layers_never_sync(monkeypatch):
    """The NaN check reads mask values (a device sync), so only public entry points run it."""
    src, tgt = torch.randint(0, 10, (2, 3)), torch.randint(0, 10, (2, 4))
    blocked = torch.zeros(2, 1, 1, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="src_mask leaves at least one query with no key"):
        tiny_model(src, tgt, src_mask=blocked)
    reads = []
    monkeypatch.setattr(torch.Tensor, "__bool__", lambda self: reads.append(self.shape) or True)
    EncoderLayer(16, 2, 32)(x, mask=torch.ones(5, 5, dtype=torch.bool))
    MultiHeadAttention(16, 2)(x, x, x, mask=torch.ones(5, 5, dtype=torch.bool))
    assert reads == []  # no bool(tensor) in a layer's forward
