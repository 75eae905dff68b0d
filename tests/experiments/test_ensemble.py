import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_course.experiments.ensemble import fit_ensemble
from transformer_course.experiments.training import fit, seeded


class TinyTagger(nn.Module):
    """Embedding, a ReLU layer and a read-out: tokens (B, T) -> logits (B, T, V)."""

    def __init__(self, vocab: int = 6, width: int = 8) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.hidden = nn.Linear(width, 4 * width)
        self.out = nn.Linear(4 * width, vocab)

    def forward(self, tokens):
        return self.out(F.relu(self.hidden(self.embed(tokens))))


def make_batch(generator):
    tokens = torch.randint(0, 6, (5, 7), generator=generator)  # (B, T)
    return tokens, (tokens + 1) % 6  # the next token id


def tagger_loss(model, batch):
    assert isinstance(model, TinyTagger)  # loss_fn is handed the member's own class
    tokens, targets = batch
    return F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())


def members(seeds):
    built = []
    for seed in seeds:
        with seeded(seed):
            built.append(TinyTagger())
    return built


def flat(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.mark.parametrize("clip, warmup", [(1.0, 0), (None, 3), (0.05, 2)])
def test_each_member_follows_its_own_fit_run_to_rounding(clip, warmup):
    seeds, steps = [4, 1, 7], 12
    ensemble = members(seeds)
    histories = fit_ensemble(ensemble, make_batch, tagger_loss, steps, seeds, lr=2e-2, warmup_steps=warmup,
                             clip_grad_norm=clip)
    assert len(histories) == 3 and all(len(h) == steps for h in histories)
    for seed, member, history in zip(seeds, ensemble, histories):
        single = members([seed])[0]
        reference = fit(single, make_batch, tagger_loss, steps, lr=2e-2, warmup_steps=warmup, seed=seed,
                        clip_grad_norm=clip)
        assert history == pytest.approx(reference, abs=1e-5)
        assert torch.allclose(flat(member), flat(single), atol=1e-5)
        assert not member.training
    assert histories[0] != pytest.approx(histories[1], abs=1e-3)  # the members are different runs


def test_clipping_is_per_member():
    """With a tight clip each member's update is clipped by its own norm, not by the ensemble's."""
    seeds = [0, 1]
    ensemble = members(seeds)
    fit_ensemble(ensemble, make_batch, tagger_loss, 3, seeds, lr=1e-1, clip_grad_norm=1e-3)
    single = members([1])[0]
    fit(single, make_batch, tagger_loss, 3, lr=1e-1, seed=1, clip_grad_norm=1e-3)
    assert torch.allclose(flat(ensemble[1]), flat(single), atol=1e-6)


def test_a_member_does_not_depend_on_the_other_members_bit_for_bit():
    steps = 6
    big = members([3, 5, 8, 9])
    fit_ensemble(big, make_batch, tagger_loss, steps, [3, 5, 8, 9], lr=2e-2)
    pair = members([9, 5])
    fit_ensemble(pair, make_batch, tagger_loss, steps, [9, 5], lr=2e-2)
    alone = members([5])
    fit_ensemble(alone, make_batch, tagger_loss, steps, [5], lr=2e-2)  # trained beside a twin
    assert torch.equal(flat(big[1]), flat(pair[1])) and torch.equal(flat(big[3]), flat(pair[0]))
    assert torch.equal(flat(big[1]), flat(alone[0]))


def test_observe_sees_each_member_as_its_own_run_at_that_step():
    seeds, steps = [4, 1], 7
    seen = []  # (step, member, weights)
    fit_ensemble(members(seeds), make_batch, tagger_loss, steps, seeds, lr=2e-2,
                 observe=lambda step, models: seen.extend((step, e, flat(m).clone()) for e, m in enumerate(models)),
                 observe_every=3)
    assert [(step, e) for step, e, _ in seen] == [(0, 0), (0, 1), (3, 0), (3, 1), (6, 0), (6, 1), (7, 0), (7, 1)]
    for step, e, weights in seen:  # the member's weights are those of its own fit run after `step` steps
        single = members([seeds[e]])[0]
        if step:
            fit(single, make_batch, tagger_loss, step, lr=2e-2, seed=seeds[e])
        assert torch.allclose(weights, flat(single), atol=1e-5)
    alone = []
    fit_ensemble(members([5]), make_batch, tagger_loss, 2, [5], observe=lambda step, models: alone.append(len(models)))
    assert alone == [1, 1, 1]  # the twin a lone member trains beside is never shown


def test_validation():
    two = members([0, 1])
    with pytest.raises(ValueError, match="models must hold at least one"):
        fit_ensemble([], make_batch, tagger_loss, 1, [])
    with pytest.raises(TypeError, match="models"):
        fit_ensemble([two[0], "not a model"], make_batch, tagger_loss, 1, [0, 1])
    with pytest.raises(ValueError, match="same parameter names, shapes"):
        fit_ensemble([two[0], TinyTagger(width=4)], make_batch, tagger_loss, 1, [0, 1])
    with pytest.raises(ValueError, match="distinct instances"):
        fit_ensemble([two[0], two[0]], make_batch, tagger_loss, 1, [0, 1])
    with pytest.raises(ValueError, match="seeds must hold 2 distinct ints"):
        fit_ensemble(two, make_batch, tagger_loss, 1, [0])
    with pytest.raises(ValueError, match="seeds must hold 2 distinct ints"):
        fit_ensemble(two, make_batch, tagger_loss, 1, [3, 3])
    with pytest.raises(ValueError, match="steps"):
        fit_ensemble(two, make_batch, tagger_loss, 0, [0, 1])
    with pytest.raises(TypeError, match="observe must be callable"):
        fit_ensemble(two, make_batch, tagger_loss, 1, [0, 1], observe="every step")
    with pytest.raises(ValueError, match="observe_every"):
        fit_ensemble(two, make_batch, tagger_loss, 1, [0, 1], observe=print, observe_every=0)
    with pytest.raises(ValueError, match="lr"):
        fit_ensemble(two, make_batch, tagger_loss, 1, [0, 1], lr=0.0)
    with pytest.raises(ValueError, match="clip_grad_norm"):
        fit_ensemble(two, make_batch, tagger_loss, 1, [0, 1], clip_grad_norm=-1.0)
    with pytest.raises(TypeError, match="callable"):
        fit_ensemble(two, None, tagger_loss, 1, [0, 1])
    assert all(torch.equal(flat(m), flat(fresh)) for m, fresh in zip(two, members([0, 1])))  # refused: untouched
