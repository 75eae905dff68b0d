"""The capstone's model, decoding, ablation, data mixture and experiment record."""

import dataclasses

import pytest
import torch

from transformer_course.experiments import induction_heads as ih
from transformer_course.experiments.training import seeded

TINY = dataclasses.replace(ih.CAPSTONE, steps=12, eval_every=4, probe_sequences=4, probe_windows=4, ensemble=2,
                           workers=1)


def model(smeared_key=False, seed=0):
    with seeded(seed):
        return ih.AttentionOnlyLM(11, d_model=16, num_heads=2, num_layers=2, smeared_key=smeared_key).eval()


def test_the_model_is_causal_and_its_weights_are_attention():
    m = model(smeared_key=True)
    tokens = torch.randint(0, 11, (3, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits, weights = m(tokens, need_weights=True)
        changed = tokens.clone()
        changed[:, 5] = (changed[:, 5] + 1) % 11
        moved = (m(changed) - logits).abs().amax(dim=(0, 2)) > 1e-6  # (T,)
        assert torch.allclose(m(tokens), logits, atol=1e-5)  # fused path == hand-written path
    assert logits.shape == (3, 9, 11) and len(weights) == 2 and weights[0].shape == (3, 2, 9, 9)
    assert not moved[:5].any() and moved[5:].all()
    assert torch.allclose(weights[1].sum(-1), torch.ones(3, 2, 9)) and (weights[1].triu(1) == 0).all()


def test_a_fully_smeared_key_is_the_previous_positions_key():
    layer = ih.InductionAttention(8, 2, smeared_key=True)
    plain = ih.InductionAttention(8, 2)
    plain.load_state_dict({k: v for k, v in layer.state_dict().items() if k != "smear"})
    x = torch.randn(1, 6, 8, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        layer.smear.fill_(-60.0)  # sigma(-60) = 0: the key at j is k_{j-1}
        _, smeared = layer(x, need_weights=True)
        shifted = torch.cat((torch.zeros(1, 1, 8), x[:, :-1]), dim=1)  # keys from the previous position
        q_only = plain.attention.split_heads(plain.attention.q_proj(x))
        k_prev = plain.attention.split_heads(plain.attention.k_proj(shifted))
        k_prev[:, :, 0] = 0.0  # position 0 has no predecessor: a zero key
        from transformer_course.nn.positional import rotary_embedding
        scores = rotary_embedding(q_only) @ rotary_embedding(k_prev).transpose(-2, -1) / 2.0
        expected = scores.masked_fill(~torch.ones(6, 6, dtype=torch.bool).tril(), float("-inf")).softmax(-1)
    assert torch.allclose(smeared, expected, atol=1e-6)


def test_ablating_every_head_leaves_only_the_direct_path():
    m = model()
    tokens = torch.tensor([[1, 2, 3, 4], [5, 2, 3, 4]])  # same last three tokens, different first
    ablated = ih.ablate_heads(m, [(0, 0), (0, 1), (1, 0), (1, 1)])
    with torch.no_grad():
        assert not torch.allclose(m(tokens)[0, -1], m(tokens)[1, -1])  # the intact model reads the context
        assert torch.allclose(ablated(tokens)[0, 1:], ablated(tokens)[1, 1:], atol=1e-6)  # no context left
    assert m.layers[0].attention.out_proj.weight.abs().sum() > 0  # the original is unchanged
    with pytest.raises(ValueError, match="heads"):
        ih.ablate_heads(m, [(2, 0)])


def test_generate_greedy_and_sampled():
    m = model()
    prompt = torch.tensor([1, 2, 3])
    out = ih.generate(m, prompt, 5)
    tokens = prompt.clone()
    with torch.no_grad():
        for _ in range(5):
            tokens = torch.cat((tokens, m(tokens.unsqueeze(0))[0, -1].argmax().view(1)))
    assert torch.equal(out, tokens)
    first = ih.generate(m, prompt, 20, temperature=1.5, generator=torch.Generator().manual_seed(3))
    again = ih.generate(m, prompt, 20, temperature=1.5, generator=torch.Generator().manual_seed(3))
    assert torch.equal(first, again) and not torch.equal(first, ih.generate(m, prompt, 20))
    assert len(ih.generate(m, prompt, 4, context=2)) == 7
    with pytest.raises(TypeError, match="Generator"):
        ih.generate(m, prompt, 2, temperature=1.0)
    with pytest.raises(ValueError, match="temperature"):
        ih.generate(m, prompt, 2, temperature=-1.0)


def test_periodic_strings_repeat_with_their_own_period_and_batches_mix():
    tokens = ih.periodic_random_tokens(64, 33, 8, 16, 50, torch.Generator().manual_seed(4))
    periods = set()
    for row in tokens:
        period = next(p for p in range(8, 17) if torch.equal(row[p:], row[:-p]))
        periods.add(period)
    assert len(periods) > 3  # no single offset predicts the repeats
    train = torch.arange(1000) % 50
    inputs, targets = ih.mixture_batches(train, 50, TINY)(torch.Generator().manual_seed(5))
    assert inputs.shape == targets.shape == (16, 64) and torch.equal(inputs[:, 1:], targets[:, :-1])
    text = inputs[:8]
    assert torch.equal((text[:, 1:] - text[:, :-1]) % 50, torch.ones(8, 63, dtype=torch.long))  # the text windows
    with pytest.raises(ValueError, match="max_period"):
        ih.periodic_random_tokens(2, 10, 8, 10, 5, torch.Generator())


def test_induction_and_control_heads():
    scores = [[0.6, 0.05, 0.1, 0.35], [0.02, 0.2, 0.01, 0.04]]
    chosen = ih.induction_heads(scores, 0.3)
    assert chosen == [(0, 0), (0, 3)]
    assert ih.control_heads(scores, chosen) == [(1, 2), (1, 0)]
    assert ih.induction_heads(scores, 0.9) == [(0, 0)]  # none reaches it: the best head


def test_a_run_records_every_probe_and_its_claims_are_computed():
    run = ih.run_induction(0, TINY)
    assert run.record["step"].tolist() == [0, 4, 8, 12] and len(run.losses) == 12
    assert len(run.record["prefix_matching"].iloc[-1]) == 2 and len(run.record["prefix_matching"].iloc[-1][0]) == 4
    assert set(run.advantage) == {"intact", "induction heads zeroed", "other heads zeroed"}
    assert len(run.copying) == 2 and all(-1 <= c <= 1 for row in run.copying for c in row)
    again = ih.run_induction(0, TINY)
    assert again.losses == run.losses  # a run is a function of its seed
    claims = ih.capstone_claims([run, again], TINY)
    assert len(claims) == len({c.statement for c in claims}) >= 6
    assert claims[0].value == 0.0 and claims[1].value == float("inf")  # 12 steps: no head forms, no phase step
    assert not claims[0].holds and not claims[1].holds
    assert ih.training_key(TINY) != ih.training_key() and ih.training_key(
        dataclasses.replace(ih.CAPSTONE, induction_threshold=0.5)) == ih.training_key()


def test_copies_from_prompt_reads_the_greedy_continuation():
    vocabulary = ih.CharVocabulary.of("abcdefghijk")
    m = model()  # untrained, 11 tokens: a continuation of 'ab' that equals 'cd' would be chance
    out = ih.generate(m, vocabulary.encode("ab"), 2)
    continuation = vocabulary.decode(out[2:])
    assert ih.copies_from_prompt(m, vocabulary, ("ab", continuation), context=8)
    other = "a" if continuation[0] != "a" else "b"
    assert not ih.copies_from_prompt(m, vocabulary, ("ab", other + continuation[1]), context=8)
