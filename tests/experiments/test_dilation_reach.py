"""DL0029's trained experiment: which mask reads which token, and the claims on the ensemble."""

import pandas as pd
import pytest
import torch

from transformer_course.experiments import window_reach as wr
from transformer_course.experiments.dilation_reach import (DILATION_REACH, DilationReach, dilation_claims,
                                                           dilation_reach, dilation_reach_summary)
from transformer_course.nn.masks import dilated_sliding_window_mask, sliding_window_mask


def test_the_masks_decide_which_distances_one_layer_reads():
    s = DILATION_REACH
    assert [s.in_reach(1, d) for d in s.distances] == [True, True, False]  # offsets 2 and 3 of 0..3, not 9
    assert [s.in_reach(3, d) for d in s.distances] == [False, True, True]  # offsets 0, 3, 6, 9 only
    dilated = wr.reach_mask(12, 4, dilation=3)
    assert dilated[11].nonzero().flatten().tolist() == [2, 5, 8, 11]  # w = 4 keys, 3 apart, looking back
    assert torch.equal(dilated, dilated_sliding_window_mask(12, 4, 3, causal=True))
    assert torch.equal(wr.reach_mask(12, 4, dilation=1), sliding_window_mask(12, 4, causal=True))
    assert wr.stack_reach(12, 4, 1, dilation=3) == 4  # positions read, not the span: gaps do not count
    reader = wr.WindowedReader(num_symbols=8, seq_len=12, num_layers=1, window=4, dilation=3)
    assert torch.equal(reader.mask, dilated) and reader.reach == 4
    with pytest.raises(ValueError, match="dilation must be 1 with global_query"):
        wr.reach_mask(12, 4, global_query=True, dilation=2)
    with pytest.raises(ValueError, match="dilation"):
        wr.WindowedReader(dilation=0)


def test_training_separates_in_reach_from_out_of_reach_and_the_claims_read_it():
    settings = DilationReach(steps=120, num_examples=256)
    table = dilation_reach([0, 1], settings)
    assert len(table) == 2 * 3 * 2 and set(table.columns) >= {"keys spaced", "distance D", "in reach"}
    inside, outside = table[table["in reach"]], table[~table["in reach"]]
    assert inside["accuracy (%)"].min() > 80 and outside["accuracy (%)"].max() < 25  # chance is 12.5%
    assert outside["steps to threshold"].isna().all()
    summary = dilation_reach_summary(table, settings)
    assert summary.loc[("dilated, d = 3", 10), "in reach"] and not summary.loc[("plain window", 10), "in reach"]
    claims = {c.name: c for c in dilation_claims(table)}
    assert claims["out of reach, highest accuracy of any seed (%)"].value == outside["accuracy (%)"].max()
    assert all(c.holds for c in claims.values())
    again = dilation_reach([1], settings, workers=1)  # a seed's models do not depend on the others'
    pd.testing.assert_frame_equal(again.reset_index(drop=True),
                                  table[table["seed"] == 1].reset_index(drop=True), check_exact=True)


def test_bad_settings_and_tables_are_named():
    with pytest.raises(ValueError, match="distance"):
        DilationReach(distances=(13,))
    with pytest.raises(ValueError, match="dilation"):
        DilationReach(dilation=1)
    with pytest.raises(ValueError, match="seeds"):
        dilation_reach([])
    with pytest.raises(TypeError, match="table"):
        dilation_claims([1, 2])
    with pytest.raises(ValueError, match="in and out of reach"):
        dilation_claims(pd.DataFrame({"keys spaced": [1], "distance D": [3], "seed": [0], "in reach": [True],
                                      "accuracy (%)": [100.0], "steps to threshold": [40.0]}))
