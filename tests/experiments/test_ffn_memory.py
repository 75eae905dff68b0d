"""DL0031's width sweep and key-value reading (experiments.ffn_memory)."""

import pandas as pd
import pytest
import torch

from transformer_course.experiments import ffn_memory as fm


def test_the_task_comes_from_the_seed_and_the_weights_apart_from_it():
    a, b, c = fm.FactMemory(8, seed=3), fm.FactMemory(8, seed=3), fm.FactMemory(8, seed=4)
    assert torch.equal(a.facts, b.facts) and torch.equal(a.labels, b.labels)
    assert torch.equal(a.ffn.linear1.weight, b.ffn.linear1.weight)
    assert not torch.equal(a.facts, c.facts) and not torch.equal(a.ffn.linear1.weight, c.ffn.linear1.weight)
    wide = fm.FactMemory(64, seed=3)
    assert torch.equal(wide.facts, a.facts)  # the width changes the model, not the facts it must store
    assert a(torch.arange(5)).shape == (5, fm.MEMORY_SETTINGS["num_labels"])
    assert 0.0 <= a.accuracy() <= 1.0


@pytest.mark.parametrize("kwargs, error, name", [({"d_ff": 0, "seed": 0}, ValueError, "d_ff"),
                                                 ({"d_ff": 4, "seed": -1}, ValueError, "seed"),
                                                 ({"d_ff": 4.0, "seed": 0}, TypeError, "d_ff"),
                                                 ({"d_ff": 4, "seed": 0, "num_labels": 1}, ValueError, "num_labels")])
def test_fact_memory_rejects_bad_arguments_by_name(kwargs, error, name):
    with pytest.raises(error, match=name):
        fm.FactMemory(**kwargs)


def _hand_built(promote_own_label: bool) -> fm.FactMemory:
    """Two facts, two neurons: neuron j fires on fact j only, and its value raises label j's logit or the other's."""
    model = fm.FactMemory(2, seed=0, num_facts=2, num_labels=2, d_model=2)
    with torch.no_grad():
        model.facts.copy_(torch.eye(2))
        model.labels.copy_(torch.tensor([0, 1]))
        model.ffn.linear1.weight.copy_(torch.eye(2))
        model.ffn.linear1.bias.zero_()
        model.ffn.linear2.weight.copy_(torch.eye(2) if promote_own_label else torch.eye(2).flip(0))
        model.readout.weight.copy_(torch.eye(2))
    return model


def test_agreement_reads_a_built_memory_and_its_opposite():
    assert fm.value_label_agreement(_hand_built(True), triggers=1) == 1.0
    assert fm.value_label_agreement(_hand_built(False), triggers=1) == 0.0
    # with two triggers each neuron's second "trigger" does not fire (activation 0) and is not counted
    assert fm.value_label_agreement(_hand_built(True), triggers=2) == 1.0


def test_agreement_rejects_what_it_cannot_read():
    model = _hand_built(True)
    with pytest.raises(ValueError, match="triggers"):
        fm.value_label_agreement(model, triggers=3)
    with pytest.raises(TypeError, match="model"):
        fm.value_label_agreement(torch.nn.Linear(2, 2))
    with torch.no_grad():
        model.ffn.linear1.weight.fill_(-1.0)
    with pytest.raises(ValueError, match="no neuron"):
        fm.value_label_agreement(model, triggers=1)


def test_a_member_of_the_sweep_is_its_seed_trained_alone_and_wider_stores_more():
    together = fm.memory_ensemble([5, 6], widths=(4, 32), steps=150)
    alone = fm.memory_ensemble([6], widths=(4, 32), steps=150)
    both = together[together.seed == 6].reset_index(drop=True)
    pd.testing.assert_frame_equal(both[["d_ff", "seed", "FFN parameters"]], alone[["d_ff", "seed", "FFN parameters"]])
    assert (both["accuracy (%)"] - alone["accuracy (%)"]).abs().max() <= 100 / fm.MEMORY_SETTINGS["num_facts"]
    narrow, wide = (together[together.d_ff == w]["accuracy (%)"].median() for w in (4, 32))
    assert wide > narrow + 20
    assert list(together["FFN parameters"].unique()) == [2 * 16 * 4 + 4 + 16, 2 * 16 * 32 + 32 + 16]


def test_claims_need_three_widths_and_read_the_table():
    frame = pd.DataFrame({"d_ff": [4, 8, 16, 64], "seed": [0] * 4, "FFN parameters": [1, 2, 3, 4],
                          "accuracy (%)": [50.0, 75.0, 100.0, 100.0], "agreement": [0.1, 0.1, 0.1, 0.2],
                          "agreement at init": [0.06] * 4})
    claims = {c.name: c for c in fm.memory_claims(frame)}
    rise = next(c for name, c in claims.items() if name.startswith("smallest rise"))
    assert rise.value == 25.0  # 50 -> 75 -> 100; the flat 100 -> 100 past saturation is not a rise asked for
    assert claims["d_ff = 64: median agreement over chance (1/16)"].value == pytest.approx(3.2)
    with pytest.raises(ValueError, match="three widths"):
        fm.memory_claims(frame[frame.d_ff < 16])
    with pytest.raises(ValueError, match="columns"):
        fm.width_table(frame.drop(columns="agreement"))
