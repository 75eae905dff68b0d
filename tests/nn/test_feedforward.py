"""The FFN helpers added for chapter DL0031: swiglu_matched_d_ff and parameter_groups."""

import math

import pytest
import torch
from torch import nn

from transformer_course.measure.cost import PARAMETER_GROUPS, count_parameters, ffn_parameters, parameter_groups
from transformer_course.nn.feedforward import FeedForward, swiglu_matched_d_ff
from transformer_course.nn.layers import EncoderLayer
from transformer_course.nn.model import Transformer, TransformerConfig


@pytest.mark.parametrize("d_model, d_ff", [(512, 2048), (64, 256), (1, 4), (768, 3072), (100, 300)])
def test_swiglu_matched_width_matches_parameter_count(d_model, d_ff):
    f = swiglu_matched_d_ff(d_model, d_ff)
    relu = count_parameters(FeedForward(d_model, d_ff))
    swiglu = count_parameters(FeedForward(d_model, f, activation="swiglu"))
    assert swiglu == ffn_parameters(d_model, f, "swiglu")
    # the closest width: one unit more or less is no closer to the ReLU count
    for other in (f - 1, f + 1):
        if other >= 1:
            assert abs(ffn_parameters(d_model, other, "swiglu") - relu) >= abs(swiglu - relu)
    assert abs(swiglu - relu) <= 3 * d_model + 2


def test_swiglu_matched_width_is_about_two_thirds():
    assert swiglu_matched_d_ff(512, 2048) == 1365
    assert math.isclose(swiglu_matched_d_ff(4096, 4 * 4096) / (4 * 4096), 2 / 3, rel_tol=1e-3)


def test_swiglu_matched_width_validation():
    with pytest.raises(ValueError, match="d_ff must be >= 1"):
        swiglu_matched_d_ff(8, 0)
    with pytest.raises(TypeError, match="d_model must be an int"):
        swiglu_matched_d_ff(8.0, 32)


def test_parameter_groups_add_up_and_read_the_module_tree():
    model = Transformer(TransformerConfig(50, 60, d_model=16, num_heads=2, num_encoder_layers=2, num_decoder_layers=1, d_ff=32))
    frame = parameter_groups(model)
    assert list(frame.index) == list(PARAMETER_GROUPS)
    assert frame["parameters"].sum() == count_parameters(model)
    assert frame.loc["feed-forward networks", "parameters"] == 3 * ffn_parameters(16, 32)
    assert frame.loc["attention", "parameters"] == 4 * (4 * 16 * 16 + 4 * 16)
    assert frame.loc["embeddings and output", "parameters"] == 50 * 16 + 60 * 16 + 16 * 60 + 60
    assert math.isclose(frame["share (%)"].sum(), 100)
    assert math.isclose(frame["share without embeddings (%)"].sum(), 100)
    assert math.isnan(frame.loc["embeddings and output", "share without embeddings (%)"])


def test_parameter_groups_counts_tied_embeddings_once_and_accepts_nn_layernorm():
    model = Transformer(TransformerConfig(40, 40, d_model=8, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=16,
                        share_embeddings=True))
    assert parameter_groups(model).loc["embeddings and output", "parameters"] == 40 * 8
    layer = nn.Sequential(nn.LayerNorm(8), EncoderLayer(8, 2, 16))
    frame = parameter_groups(layer)
    assert frame.loc["layer norms", "parameters"] == 3 * 16
    assert frame.loc["embeddings and output", "parameters"] == 0


def test_parameter_groups_on_the_meta_device_base_model():
    with torch.device("meta"):
        model = Transformer(TransformerConfig(37000, 37000, share_embeddings=True))
    frame = parameter_groups(model)
    assert frame.loc["feed-forward networks", "parameters"] == 12 * ffn_parameters(512, 2048)
    assert math.isclose(frame.loc["feed-forward networks", "share without embeddings (%)"], 100 * 4 / 7,
                        rel_tol=2e-3)


def test_parameter_groups_validation():
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        parameter_groups("model")


def test_ffn_is_token_wise(gen):
    ffn = FeedForward(8, 32, activation="gelu").double()
    x = torch.randn(5, 8, generator=gen, dtype=torch.float64)
    jacobian = torch.autograd.functional.jacobian(ffn, x)  # (T, D, T, D)
    for i in range(5):
        for j in range(5):
            if i != j:
                assert (jacobian[i, :, j, :] == 0).all()


def test_moe_matches_a_token_by_token_loop_and_uses_k_experts_per_token():
    from transformer_course.measure.cost import count_flops, count_parameters
    from transformer_course.nn.feedforward import MoEFeedForward, moe_parameters

    torch.manual_seed(0)
    moe = MoEFeedForward(8, 16, num_experts=4, top_k=2).double()
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    with torch.no_grad():
        y = moe(x)
        ref = []
        for token in x.reshape(-1, 8):
            scores, chosen = moe.router(token).topk(2)
            gates = torch.softmax(scores, dim=-1)
            ref.append(sum(g * moe.experts[int(e)](token) for g, e in zip(gates, chosen)))
    assert y.shape == x.shape and torch.allclose(y.reshape(-1, 8), torch.stack(ref), atol=1e-12)
    assert count_flops(lambda: moe(x)) == 2 * 15 * 8 * 4 + 2 * 15 * 2 * (2 * 8 * 16)
    counts = moe_parameters(8, 16, 4, 2)
    assert counts["total"] == count_parameters(moe) and counts["active"] == 8 * 4 + 2 * count_parameters(moe.experts[0])
    assert moe_parameters(8, 16, 4, 2, "swiglu", bias=False) == {"total": 8 * 4 + 4 * 3 * 8 * 16,
                                                                  "active": 8 * 4 + 2 * 3 * 8 * 16}
    single = MoEFeedForward(8, 16, num_experts=1, top_k=1).double()  # one expert, gate 1: a plain FFN
    with torch.no_grad():
        assert torch.allclose(single(x), single.experts[0](x), atol=1e-12)


def test_moe_load_balancing_loss_is_one_when_uniform_and_grows_when_one_expert_takes_all():
    from transformer_course.nn.feedforward import MoEFeedForward

    moe = MoEFeedForward(4, 8, num_experts=4, top_k=1)
    with pytest.raises(RuntimeError, match="forward pass"):
        moe.load_balancing_loss()
    with torch.no_grad():
        moe.router.weight.zero_()  # uniform probabilities; ties send every token to expert 0
        moe(torch.randn(10, 4))
        assert torch.isclose(moe.load_balancing_loss(), torch.tensor(1.0))  # P uniform: E * sum f_e / E = 1
        moe.router.weight.copy_(torch.tensor([[100.0, 0, 0, 0]] + [[0.0, 0, 0, 0]] * 3))
        moe(torch.rand(10, 4) + 1)  # positive first feature: expert 0 with probability ~1
        assert torch.isclose(moe.load_balancing_loss(), torch.tensor(4.0))  # the worst case, E
    with pytest.raises(ValueError, match="top_k"):
        MoEFeedForward(4, 8, num_experts=2, top_k=3)
