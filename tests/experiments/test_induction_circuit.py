"""The capstone's GPT: its attention patterns, head circuits, ablation, baselines and run record."""

import dataclasses

import pandas as pd
import pytest
import torch

from transformer_course.experiments import induction_circuit as ic
from transformer_course.experiments.training import seeded

TINY = dataclasses.replace(ic.CIRCUIT, steps=12, eval_every=4, probe_sequences=4, probe_windows=4, ensemble=2,
                           workers=1, control_draws=2, snapshot_steps=(4,))


def model(seed=0, vocab_size=11):
    with seeded(seed):
        return ic.build_model(vocab_size, dataclasses.replace(ic.CIRCUIT, d_model=16, num_heads=2, context=12)).eval()


def test_attention_patterns_are_causal_distributions_of_the_model_that_predicts():
    m = model()
    tokens = torch.randint(0, 11, (3, 9), generator=torch.Generator().manual_seed(1))
    patterns = ic.attention_patterns(m, tokens)
    assert len(patterns) == 2 and all(p.shape == (3, 2, 9, 9) for p in patterns)
    for p in patterns:
        assert torch.allclose(p.sum(dim=-1), torch.ones(3, 2, 9))
        assert float(p.triu(diagonal=1).abs().max()) == 0.0  # no weight on later keys
    block = m.blocks[0]
    x = m.positional(m.embed(tokens))
    out, weights = block.self_attn(block.norm1(x), need_weights=True)
    assert torch.equal(out, block.self_attn(block.norm1(x))) and torch.equal(weights, patterns[0])


def test_head_circuits_are_the_products_of_each_heads_projections():
    m = model()
    with torch.no_grad():
        m.blocks[1].norm1.weight.uniform_(0.5, 1.5)  # the gain is folded into W_Q, W_K, W_V
    qk, ov = ic.head_circuits(m)
    assert qk.shape == ov.shape == (2, 2, 16, 16) and qk.dtype == torch.float64
    mha, gain = m.blocks[1].self_attn.attention, m.blocks[1].norm1.weight.double()
    w_q, w_k = mha.q_proj.weight[8:].double() * gain, mha.k_proj.weight[8:].double() * gain  # head 1
    w_v, w_o = mha.v_proj.weight[8:].double() * gain, mha.out_proj.weight[:, 8:].double()
    assert torch.allclose(qk[1, 1], w_q.T @ w_k) and torch.allclose(ov[1, 1], w_o @ w_v)
    scores = ic.layer_composition(m)
    assert sorted(scores) == ["K", "Q", "V"] and all(s.shape == (2, 2) for s in scores.values())


def test_ablating_a_head_zeroes_its_ov_circuit_and_nothing_else():
    m = model()
    _, before = ic.head_circuits(m)
    cut = ic.ablate_heads(m, [(0, 1)])
    _, after = ic.head_circuits(cut)
    assert float(after[0, 1].abs().max()) == 0.0
    assert torch.equal(after[0, 0], before[0, 0]) and torch.equal(after[1], before[1])
    assert torch.equal(ic.head_circuits(m)[1], before)  # the original is untouched
    with pytest.raises(ValueError, match="heads must be"):
        ic.ablate_heads(m, [(2, 0)])
    with pytest.raises(TypeError, match="model"):
        ic.ablate_heads(torch.nn.Linear(2, 2), [])


def test_ngram_baselines_see_the_structure_a_bigram_can_predict():
    text = torch.tensor([0, 1, 2, 3] * 50)  # each character fixes the next one
    losses = ic.ngram_baselines(text[:150], text[150:], 4)
    assert losses["unigram"] == pytest.approx(torch.log(torch.tensor(4.0)).item(), abs=0.01)
    assert losses["bigram"] < 0.1 < losses["unigram"]


def test_transition_and_steepest_drop_read_the_record():
    record = pd.DataFrame({
        "step": [0, 100, 200, 300, 400],
        "prefix_matching": [[[0.0], [0.0]], [[0.0], [0.05]], [[0.0], [0.5]], [[0.0], [0.95]], [[0.0], [1.0]]],
        "later_repeat_loss": [4.0, 3.9, 2.0, 0.5, 0.4],
    })
    assert ic.transition(record) == (200.0, 300.0)  # 10% reached at 200 (0.5), 90% at 300 (0.95)
    noisy = record.assign(prefix_matching=[[[0.0], [0.0]], [[0.0], [0.2]], [[0.0], [0.05]], [[0.0], [0.95]],
                                           [[0.0], [1.0]]])
    assert ic.transition(noisy) == (300.0, 300.0)  # the blip at step 100 is not the phase: it falls back
    assert ic.steepest_drop(record, "later_repeat_loss") == 200.0  # 3.9 -> 2.0 is the largest fall
    flat = record.assign(prefix_matching=[[[0.0], [0.2]]] * 5)
    assert all(v != v for v in ic.transition(flat))  # NaN: nothing rose


def test_a_tiny_run_records_every_probe_and_its_circuit():
    run = ic.run_circuit(3, TINY)
    assert list(run.record["step"]) == [0, 4, 8, 12] and len(run.losses) == 12
    assert sorted(run.composition) == ["K", "Q", "V"] and len(run.composition["K"]) == TINY.num_heads
    assert run.composition_at_init != run.composition  # training moved the weights
    assert set(run.advantage) == {"intact", "induction heads zeroed", "random other heads zeroed",
                                  "previous-token head zeroed"}
    assert sorted(run.snapshots) == [4]  # the weights at step 4, to sample from
    vocab_size = ic.capstone_corpus()[0].size
    early, trained = run.model(vocab_size, TINY, step=4), run.model(vocab_size, TINY)
    assert not torch.equal(early.head.weight, trained.head.weight)
    with pytest.raises(ValueError, match="snapshot steps"):
        run.model(vocab_size, TINY, step=5)
    pair = ic.train_circuits([5, 3], TINY)  # seed 3 trained beside another seed: the same run
    assert pair[1].seed == 3 and pair[1].losses == run.losses
    assert pd.Series(pair[1].advantage).equals(pd.Series(run.advantage))  # NaN == NaN here
    assert pair[1].record["held_out_loss"].tolist() == run.record["held_out_loss"].tolist()
    summary = ic.circuit_summary(pair, TINY)
    assert len(summary) == 2 and summary["K-composition"].between(0, 1).all()


def test_periodic_strings_repeat_with_their_own_period_and_batches_mix():
    tokens = ic.periodic_random_tokens(64, 33, 8, 16, 50, torch.Generator().manual_seed(4))
    periods = set()
    for row in tokens:
        period = next(p for p in range(8, 17) if torch.equal(row[p:], row[:-p]))
        periods.add(period)
    assert len(periods) > 3  # no single offset predicts the repeats
    train = torch.arange(1000) % 50
    inputs, targets = ic.mixture_batches(train, 50, TINY)(torch.Generator().manual_seed(5))
    rows, t = TINY.batch_size, TINY.context
    assert inputs.shape == targets.shape == (rows, t) and torch.equal(inputs[:, 1:], targets[:, :-1])
    prose_rows = rows - round(rows * TINY.repeated_fraction)
    text = inputs[:prose_rows]
    assert torch.equal((text[:, 1:] - text[:, :-1]) % 50, torch.ones(prose_rows, t - 1, dtype=torch.long))  # the text windows
    repeated = inputs[prose_rows:]
    assert all(any(torch.equal(row[p:], row[:-p]) for p in range(TINY.min_period, t // 2 + 1)) for row in repeated)
    with pytest.raises(ValueError, match="max_period"):
        ic.periodic_random_tokens(2, 10, 8, 10, 5, torch.Generator())


def test_circuit_claims_are_statements_about_the_ensemble():
    runs = ic.train_circuits([3, 5], TINY)
    claims = ic.circuit_claims(runs, TINY)
    assert len(claims) == 16 and len({c.statement for c in claims}) == 16
    counted = [c for c in claims if c.statement.startswith("seeds (of 2)")]
    assert len(counted) == 1 and all(0 <= c.value <= 2 for c in counted)
