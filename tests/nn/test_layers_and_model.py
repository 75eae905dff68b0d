import pytest
import torch
from torch import nn

from transformer_course.measure.cost import count_parameters, decoder_layer_parameters, encoder_layer_parameters
from transformer_course.nn.feedforward import FeedForward
from transformer_course.nn.layers import DecoderLayer, EncoderLayer
from transformer_course.nn.masks import causal_mask, padding_mask
from transformer_course.nn.model import Transformer, TransformerConfig
from transformer_course.nn.normalization import LayerNorm
from transformer_course.nn.rnn import ElmanRNN


def _copy_attention(ours, ref):
    ref.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
    ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
    ref.out_proj.weight.copy_(ours.out_proj.weight)
    ref.out_proj.bias.copy_(ours.out_proj.bias)


def _copy_common(ours, ref, norms):
    ref.linear1.load_state_dict(ours.feed_forward.linear1.state_dict())
    ref.linear2.load_state_dict(ours.feed_forward.linear2.state_dict())
    for name in norms:
        getattr(ref, name).weight.copy_(getattr(ours, name).weight)
        getattr(ref, name).bias.copy_(getattr(ours, name).bias)


def _perturb(module):
    with torch.no_grad():  # non-trivial LayerNorm parameters so that a swapped norm would show
        for name, p in module.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_matches_torch(gen, norm_first):
    torch.manual_seed(0)
    ours = EncoderLayer(16, 4, 32, norm_first=norm_first).double().eval()
    _perturb(ours)
    ref = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True, norm_first=norm_first,
                                     dtype=torch.float64).eval()
    with torch.no_grad():
        _copy_attention(ours.self_attn, ref.self_attn)
        _copy_common(ours, ref, ["norm1", "norm2"])
    x = torch.randn(2, 7, 16, generator=gen, dtype=torch.float64)
    mask = padding_mask([5, 7], 7)
    torch.testing.assert_close(ours(x), ref(x))
    torch.testing.assert_close(ours(x, mask=mask), ref(x, src_key_padding_mask=~mask[:, 0, 0]))


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_torch(gen, norm_first):
    torch.manual_seed(1)
    ours = DecoderLayer(16, 2, 24, norm_first=norm_first).double().eval()
    _perturb(ours)
    ref = nn.TransformerDecoderLayer(16, 2, 24, dropout=0.0, batch_first=True, norm_first=norm_first,
                                     dtype=torch.float64).eval()
    with torch.no_grad():
        _copy_attention(ours.self_attn, ref.self_attn)
        _copy_attention(ours.cross_attn, ref.multihead_attn)
        _copy_common(ours, ref, ["norm1", "norm2", "norm3"])
    x = torch.randn(2, 5, 16, generator=gen, dtype=torch.float64)
    memory = torch.randn(2, 9, 16, generator=gen, dtype=torch.float64)
    mask = causal_mask(5)
    torch.testing.assert_close(ours(x, memory, self_mask=mask), ref(x, memory, tgt_mask=~mask))


def test_layer_norm_matches_torch_and_gradcheck(gen):
    x = torch.randn(3, 4, 10, generator=gen, dtype=torch.float64, requires_grad=True)
    ours = LayerNorm(10).double()
    ref = nn.LayerNorm(10, dtype=torch.float64)
    with torch.no_grad():
        for p in (ours.weight, ours.bias):
            p.add_(torch.randn(10, generator=gen, dtype=torch.float64))
        ref.weight.copy_(ours.weight)
        ref.bias.copy_(ours.bias)
    torch.testing.assert_close(ours(x), ref(x))
    assert torch.autograd.gradcheck(ours, (x,))


def test_layer_norm_uses_biased_variance(gen):
    x = torch.randn(5, 8, generator=gen, dtype=torch.float64)
    y = LayerNorm(8, eps=1e-12).double()(x)
    torch.testing.assert_close(y.pow(2).mean(-1), torch.ones(5, dtype=torch.float64))


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_feedforward_matches_torch_layer_ffn(gen, activation):
    """Our FFN against PyTorch's own: nn.TransformerEncoderLayer's feed-forward block, weights copied."""
    torch.manual_seed(0)
    ffn = FeedForward(8, 32, activation=activation).double().eval()
    ref = nn.TransformerEncoderLayer(8, 2, 32, dropout=0.0, activation=activation, batch_first=True,
                                     dtype=torch.float64).eval()
    with torch.no_grad():
        ref.linear1.load_state_dict(ffn.linear1.state_dict())
        ref.linear2.load_state_dict(ffn.linear2.state_dict())
    x = torch.randn(2, 3, 8, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(ffn(x), ref._ff_block(x))


@pytest.mark.parametrize("layer", [EncoderLayer(8, 2, 16), DecoderLayer(8, 2, 16, norm_first=True)],
                         ids=["encoder", "decoder"])
def test_forward_applies_the_sublayers_in_the_declared_order(gen, layer):
    """SUBLAYERS, which diagrams and tables read, lists the sub-layers and norms in forward's order."""
    called = []
    for name, module in layer.named_children():
        if not name.startswith("dropout"):
            module.register_forward_hook(lambda m, args, out, name=name: called.append(name))
    x = torch.randn(1, 3, 8, generator=gen)
    layer(x) if isinstance(layer, EncoderLayer) else layer(x, torch.randn(1, 4, 8, generator=gen))
    order = [name for s in layer.SUBLAYERS for name in ((s.norm, s.name) if layer.norm_first else (s.name, s.norm))]
    assert called == order


def test_swiglu_has_a_gate_and_three_matrices():
    ffn = FeedForward(8, 12, activation="swiglu")
    assert count_parameters(ffn) == 3 * 8 * 12 + 2 * 12 + 8


def test_analytic_layer_parameters():
    assert count_parameters(EncoderLayer(64, 8, 256)) == encoder_layer_parameters(64, 256)
    assert count_parameters(DecoderLayer(64, 8, 256)) == decoder_layer_parameters(64, 256)
    assert count_parameters(EncoderLayer(64, 8, 96, activation="swiglu")) == encoder_layer_parameters(64, 96, "swiglu")


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True:UserWarning")  # nn.Transformer's own notice
@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_parameter_count_matches_nn_transformer(norm_first):
    d, h, ff, layers, src_v, tgt_v = 32, 4, 64, 2, 17, 19
    ours = Transformer(TransformerConfig(src_v, tgt_v, d, h, layers, layers, ff, norm_first=norm_first))
    ref = nn.Transformer(d, h, layers, layers, ff, batch_first=True, norm_first=norm_first)
    embeddings = (src_v + tgt_v) * d + d * tgt_v + tgt_v  # two embeddings + output projection
    # nn.Transformer always ends each stack with a LayerNorm; the paper's Post-LN stacks do not.
    final_norms = 0 if norm_first else 2 * 2 * d
    assert count_parameters(ours) == count_parameters(ref) + embeddings - final_norms


def test_shared_embeddings_are_one_matrix():
    model = Transformer(TransformerConfig(50, 50, 16, 2, 1, 1, 32, share_embeddings=True))
    assert model.src_embed.weight is model.tgt_embed.weight is model.generator.weight
    assert count_parameters(model) == count_parameters(Transformer(TransformerConfig(50, 50, 16, 2, 1, 1, 32))) - 2 * 50 * 16 - 50


def test_decoder_is_causal(gen):
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(10, 10, 16, 2, 1, 2, 32, dropout=0.0)).double().eval()
    src = torch.randint(0, 10, (1, 6), generator=gen)
    tgt = torch.randint(0, 10, (1, 8), generator=gen)
    changed = tgt.clone()
    changed[0, 5:] = (changed[0, 5:] + 1) % 10
    before, after = model(src, tgt), model(src, changed)
    torch.testing.assert_close(before[:, :5], after[:, :5])
    assert not torch.allclose(before[:, 5:], after[:, 5:])


def test_greedy_decode_matches_argmax_of_forward(gen):
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(10, 10, 16, 2, 1, 1, 32, dropout=0.0)).eval()
    src = torch.randint(0, 10, (3, 5), generator=gen)
    out = model.greedy_decode(src, max_len=4, bos_id=1)
    assert out.shape == (3, 5) and (out[:, 0] == 1).all()
    logits = model(src, out[:, :-1])
    assert torch.equal(logits.argmax(-1), out[:, 1:])


def test_config_round_trip():
    config = TransformerConfig(11, 12, d_model=16, num_heads=2, d_ff=32)
    assert Transformer(config).config == config


def test_elman_rnn_matches_nn_rnn(gen):
    ours = ElmanRNN(6).double()
    ref = nn.RNN(6, 6, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        ref.weight_ih_l0.copy_(ours.input_proj.weight)
        ref.bias_ih_l0.copy_(ours.input_proj.bias)
        ref.weight_hh_l0.copy_(ours.hidden_proj.weight)
        ref.bias_hh_l0.copy_(ours.hidden_proj.bias)
    x = torch.randn(2, 9, 6, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(ours(x), ref(x)[0])
