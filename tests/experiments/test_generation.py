"""generate: greedy decoding is the argmax chain, sampling is reproducible from its generator, the window is kept."""

import dataclasses

import pytest
import torch

from transformer_course.experiments import induction_circuit as ic
from transformer_course.experiments.generation import generate
from transformer_course.experiments.training import seeded


def model(seed=0, vocab_size=11):
    with seeded(seed):
        return ic.build_model(vocab_size, dataclasses.replace(ic.CIRCUIT, d_model=16, num_heads=2, context=12)).eval()


def test_generate_greedy_and_sampled():
    m = model()
    prompt = torch.tensor([1, 2, 3])
    out = generate(m, prompt, 5)
    tokens = prompt.clone()
    with torch.no_grad():
        for _ in range(5):
            tokens = torch.cat((tokens, m(tokens.unsqueeze(0))[0, -1].argmax().view(1)))
    assert torch.equal(out, tokens)
    first = generate(m, prompt, 20, temperature=1.5, generator=torch.Generator().manual_seed(3))
    again = generate(m, prompt, 20, temperature=1.5, generator=torch.Generator().manual_seed(3))
    assert torch.equal(first, again) and not torch.equal(first, generate(m, prompt, 20))
    assert len(generate(m, prompt, 4, context=2)) == 7
    with pytest.raises(TypeError, match="Generator"):
        generate(m, prompt, 2, temperature=1.0)
    with pytest.raises(ValueError, match="temperature"):
        generate(m, prompt, 2, temperature=-1.0)


def test_the_gpt_generates_greedily_within_its_context():
    m = model()  # context 12
    out = generate(m, torch.tensor([1, 2, 3]), 15, context=12)  # reads only the last 12 tokens
    assert out.shape == (18,) and torch.equal(out[:3], torch.tensor([1, 2, 3]))
    with pytest.raises(TypeError, match="language model"):
        generate("not a model", torch.tensor([1]), 1)
