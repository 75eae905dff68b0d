import math

import pytest
import torch

from transformer_course.experiments.gradient_flow import SortingEncoder, init_xavier_, sorting_batch, sorting_loss
from transformer_course.experiments.stacked import StackedSortingEncoders, fit_stacked, stacked_sorting_loss
from transformer_course.experiments.training import fit, seeded


def _model(seed, norm_first, num_layers=2):
    with seeded(seed):
        return init_xavier_(SortingEncoder(7, num_layers, 16, 2, 32, norm_first, max_len=6))


@pytest.mark.parametrize("norm_first", [False, True])
def test_stacked_forward_equals_each_member(norm_first):
    members = [_model(seed, norm_first) for seed in (0, 1, 2)]
    stacked = StackedSortingEncoders(members)
    tokens = torch.randint(0, 7, (3, 4, 6), generator=torch.Generator().manual_seed(5))  # (E, B, T)
    expected = torch.stack([m(tokens[i]) for i, m in enumerate(members)])  # (E, B, T, V)
    assert torch.allclose(stacked(tokens), expected, atol=1e-5)
    targets = tokens.sort(dim=-1).values
    losses = stacked_sorting_loss(stacked(tokens), targets)
    assert torch.allclose(losses, torch.stack([sorting_loss(m, (tokens[i], targets[i])) for i, m in enumerate(members)]),
                          atol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_fit_stacked_follows_fit_run_by_run(norm_first):
    lrs, warmups, steps = [1e-3, 3e-3, 3e-3], [0, 0, 4], 8
    stacked = StackedSortingEncoders([_model(3, norm_first)] * 3)
    generator = torch.Generator().manual_seed(3)

    def make_batch():
        tokens, targets = sorting_batch(generator, 5, 6, 7)
        return tokens.expand(3, -1, -1), targets.expand(3, -1, -1)

    losses = fit_stacked(stacked, make_batch, steps, lrs, warmups)
    assert losses.shape == (steps, 3)
    for i in range(3):
        single = _model(3, norm_first)
        reference = fit(single, lambda g: sorting_batch(g, 5, 6, 7), sorting_loss, steps, lr=lrs[i],
                        warmup_steps=warmups[i], seed=3, clip_grad_norm=None)
        assert losses[:, i].tolist() == pytest.approx(reference, abs=1e-4)
        assert torch.allclose(stacked.layers[1]["linear2_weight"][i], single.encoder.layers[1].feed_forward.linear2.weight,
                              atol=1e-5)
    assert not torch.allclose(losses[:, 0], losses[:, 1])  # the learning rates act


def test_validation():
    with pytest.raises(ValueError, match="models must hold at least one"):
        StackedSortingEncoders([])
    with pytest.raises(TypeError, match="models must hold SortingEncoder"):
        StackedSortingEncoders([torch.nn.Linear(2, 2)])
    with pytest.raises(ValueError, match="same sizes and the same placement"):
        StackedSortingEncoders([_model(0, False), _model(0, True)])
    with pytest.raises(ValueError, match="same sizes and the same placement"):
        StackedSortingEncoders([_model(0, False), _model(0, False, num_layers=1)])
    stacked = StackedSortingEncoders([_model(0, False)] * 2)
    with pytest.raises(ValueError, match="one value per member"):
        fit_stacked(stacked, lambda: None, 1, [1e-3], [0])
    with pytest.raises(ValueError, match="lrs must be"):
        fit_stacked(stacked, lambda: None, 1, [1e-3, -1.0], [0, 0])


def _variant(seed, placement):
    """A Post-LN, DeepNorm or QK-norm (Pre-LN) SortingEncoder drawn from ``seed``."""
    from transformer_course.nn.layers import deepnorm_init_

    with seeded(seed):
        if placement == "DeepNorm":
            return deepnorm_init_(init_xavier_(SortingEncoder(7, 2, 16, 2, 32, False, max_len=6, deepnorm_alpha=1.6)),
                                  0.6)
        qk_norm = "layernorm" if placement == "QK-norm" else None
        return init_xavier_(SortingEncoder(7, 2, 16, 2, 32, placement != "Post-LN", max_len=6, qk_norm=qk_norm))


@pytest.mark.parametrize("placements", [("Post-LN", "DeepNorm", "DeepNorm"), ("QK-norm", "QK-norm", "QK-norm")])
def test_stacked_deepnorm_and_qk_norm_members_equal_each_model(placements):
    members = [_variant(seed, placement) for seed, placement in enumerate(placements)]
    if placements[0] == "QK-norm":
        with torch.no_grad():  # non-trivial norms, so that copying them is checked
            for m in members:
                for layer in m.encoder.layers:
                    layer.self_attn.q_proj.norm.weight.normal_()
                    layer.self_attn.k_proj.norm.bias.normal_()
    stacked = StackedSortingEncoders(members)
    tokens = torch.randint(0, 7, (3, 4, 6), generator=torch.Generator().manual_seed(6))  # (E, B, T)
    expected = torch.stack([m(tokens[i]) for i, m in enumerate(members)])  # (E, B, T, V)
    assert torch.allclose(stacked(tokens), expected, atol=1e-5)
    # the recorded largest logit is the largest of each member's layers' attention_logits
    stacked.track_logits = True
    assert torch.allclose(stacked(tokens), expected, atol=1e-5)
    for i, m in enumerate(members):
        x = m.positional(m.embed(tokens[i]) * math.sqrt(m.d_model))  # (B, T, D)
        largest = -math.inf
        for layer in m.encoder.layers:
            h = layer.norm1(x) if layer.norm_first else x
            largest = max(largest, float(layer.self_attn.attention_logits(h, h).detach().max()))
            x = layer(x)
        assert float(stacked.max_logit[i]) == pytest.approx(largest, rel=1e-5)


def test_fit_stacked_records_max_logits_and_follows_fit_for_deepnorm():
    steps = 6
    stacked = StackedSortingEncoders([_variant(3, "DeepNorm")] * 2)
    generator = torch.Generator().manual_seed(3)

    def make_batch():
        tokens, targets = sorting_batch(generator, 5, 6, 7)
        return tokens.expand(2, -1, -1), targets.expand(2, -1, -1)

    losses, max_logits = fit_stacked(stacked, make_batch, steps, [3e-3, 1e-2], [0, 0], record_max_logit=True)
    assert losses.shape == max_logits.shape == (steps, 2) and not stacked.track_logits
    assert torch.equal(max_logits[0, 0], max_logits[0, 1])  # same weights and batch before the first update
    single = _variant(3, "DeepNorm")
    reference = fit(single, lambda g: sorting_batch(g, 5, 6, 7), sorting_loss, steps, lr=3e-3, seed=3,
                    clip_grad_norm=None)
    assert losses[:, 0].tolist() == pytest.approx(reference, abs=1e-4)
    with pytest.raises(TypeError, match="record_max_logit must be"):
        fit_stacked(stacked, make_batch, 1, [1e-3, 1e-3], [0, 0], record_max_logit="yes")


def test_stacked_refuses_mixed_qk_norm():
    with pytest.raises(ValueError, match="same sizes|qk_norm"):
        StackedSortingEncoders([_variant(0, "QK-norm"), _variant(0, "Pre-LN")])
    with pytest.raises(ValueError, match="qk_norm None or all 'layernorm'"):
        with seeded(0):
            StackedSortingEncoders([SortingEncoder(7, 1, 16, 2, 32, True, max_len=6, qk_norm="rmsnorm")])
