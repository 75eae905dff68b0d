import pytest
import torch

from transformer_course.measure.cost import (block_flops, count_parameters, flop_share_table, measure_flops,
                                     mha_parameters, parameter_breakdown)
from transformer_course.nn.attention import MultiHeadAttention
from transformer_course.nn.feedforward import FeedForward
from transformer_course.nn.layers import EncoderLayer
from transformer_course.nn.model import Transformer, TransformerConfig

CARD_TABLE = {64: (34.69, 65.31, "FFN"), 256: (38.46, 61.54, "FFN"), 1024: (50.00, 50.00, "Tie"),
              4096: (71.43, 28.57, "MHA")}


def test_card_share_table():
    table = flop_share_table(512, tuple(CARD_TABLE))
    for n, (mha, ffn, dominant) in CARD_TABLE.items():
        assert round(table.loc[n, "MHA Share (%)"], 2) == mha
        assert round(table.loc[n, "FFN Share (%)"], 2) == ffn
        assert table.loc[n, "Dominant Component"] == dominant


@pytest.mark.parametrize("n,d", [(8, 16), (32, 64), (100, 32)])
def test_analytic_flops_equal_flop_counter(n, d):
    parts = block_flops(n, d, expansion=4, num_heads=4)
    x = torch.randn(1, n, d)
    mha = MultiHeadAttention(d, 4)
    assert measure_flops(mha, x, x, x) == parts["attention"]
    assert measure_flops(FeedForward(d, 4 * d), x) == parts["ffn"]
    assert measure_flops(EncoderLayer(d, 4, 4 * d), x) == parts["total"]
    assert mha.fused  # measuring restored the fused path


def test_expansion_one_makes_projections_largest_at_short_n():
    parts = block_flops(64, 512, expansion=1)
    assert parts["qkvo_projections"] > parts["ffn"]


def test_parameter_breakdown_adds_up():
    model = Transformer(TransformerConfig(100, 100, 32, 4, 2, 2, 64, share_embeddings=True))
    table = parameter_breakdown(model)
    assert table["parameters"].sum() == count_parameters(model)
    assert table["share (%)"].sum() == pytest.approx(100)
    assert count_parameters(MultiHeadAttention(32, 4)) == mha_parameters(32)
