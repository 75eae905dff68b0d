"""Tests for the Table 3 parameter counts and the vocabulary they imply (DL0035, issue 24)."""

from __future__ import annotations

import pytest
import torch

from transformer_course.experiments import paper_parameters as pp
from transformer_course.measure.cost import count_parameters
from transformer_course.nn.model import Transformer, TransformerConfig


@pytest.mark.parametrize("row", [r for r in pp.TABLE3 if r.d_k == r.d_v == r.d_model // r.num_heads],
                         ids=lambda r: r.name)
def test_count_equals_a_real_model_where_the_package_can_build_it(row):
    config = TransformerConfig(37000, 37000, d_model=row.d_model, num_heads=row.num_heads, d_ff=row.d_ff,
                               num_encoder_layers=row.num_layers, num_decoder_layers=row.num_layers,
                               share_embeddings=True)
    with torch.device("meta"):  # shapes only: no memory, no time
        model = Transformer(config)
    assert pp.transformer_parameters(row.num_layers, row.d_model, row.d_ff, row.num_heads, row.d_k, row.d_v,
                                     37000) == count_parameters(model)


def test_narrow_keys_shrink_only_the_query_and_key_projections():
    full = pp.attention_parameters(512, 8, 64, 64)
    narrow = pp.attention_parameters(512, 8, 16, 64)
    assert full - narrow == 2 * (512 * 8 * 48 + 8 * 48)


def test_implied_vocabulary_solves_the_count():
    base = pp.TABLE3[0]
    low, central, high = pp.implied_vocabulary(base)
    for vocabulary, millions in ((low, 64.5), (central, 65.0), (high, 65.5)):
        layers = pp.transformer_parameters(6, 512, 2048, 8, 64, 64, 1) - 512
        assert layers + vocabulary * 512 == pytest.approx(millions * 1e6)
    table = pp.implied_vocabulary_table()
    assert list(table.index) == [r.name for r in pp.TABLE3]
    assert (table["implied V, low"] < table["implied V"]).all() and (table["implied V"] < table["implied V, high"]).all()


def test_bad_sizes_are_rejected():
    with pytest.raises(ValueError, match="vocabulary"):
        pp.transformer_parameters(6, 512, 2048, 8, 64, 64, 0)
    with pytest.raises(ValueError, match="num_heads"):
        pp.attention_parameters(512, 0, 64, 64)
