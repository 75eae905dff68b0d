"""Tests for the rolling-buffer KV cache (Mistral) and the windowed decoder that uses it (DL0028)."""

from __future__ import annotations

import pytest
import torch

from transformer_course.experiments.rolling_cache import WindowLM, greedy_generate
from transformer_course.experiments.training import seeded
from transformer_course.nn.kv_cache import RollingAttentionCache


def _model(window, seed=0, dtype=torch.float32):
    with seeded(seed):
        return WindowLM(vocab_size=11, max_len=48, window=window, num_layers=2, d_model=16, num_heads=2,
                        d_ff=24).to(dtype).eval()


@pytest.mark.parametrize("window", [1, 3, 8, 40])
def test_rolling_full_and_recomputed_decoding_give_the_same_tokens(window):
    model = _model(window, seed=window)
    prompt = torch.randint(0, 11, (3, 5), generator=torch.Generator().manual_seed(window))
    reference, _ = greedy_generate(model, prompt, 30, "recompute")
    for kind in ("full", "rolling"):
        tokens, _ = greedy_generate(model, prompt, 30, kind)
        assert torch.equal(tokens, reference), kind


def test_rolling_step_logits_equal_the_full_forward_in_float64():
    model = _model(4, dtype=torch.float64)
    tokens = torch.randint(0, 11, (2, 20), generator=torch.Generator().manual_seed(1))
    full = model(tokens)  # (B, T, V) with the window mask
    caches = [RollingAttentionCache(4) for _ in model.layers]
    with torch.no_grad():
        for position in range(tokens.shape[1]):
            step = model.step(tokens[:, position:position + 1], position, caches)
            torch.testing.assert_close(step, full[:, position], rtol=0, atol=1e-12)


def test_rolling_memory_is_flat_and_the_full_cache_grows():
    model = _model(6)
    prompt = torch.zeros(2, 1, dtype=torch.long)
    _, rolling = greedy_generate(model, prompt, 40, "rolling")
    _, full = greedy_generate(model, prompt, 40, "full")
    per_position = 2 * len(model.layers) * 2 * 16 * 4  # keys and values, every layer, B = 2, D = 16, float32
    assert rolling == [6 * per_position] * 40  # w slots from the first step on
    assert full == [(p + 1) * per_position for p in range(40)]


@pytest.mark.parametrize("call, match", [
    (lambda: WindowLM(window=0), "window"),
    (lambda: greedy_generate(torch.nn.Linear(2, 2), torch.zeros(1, 1, dtype=torch.long), 2), "model"),
    (lambda: greedy_generate(_model(2), torch.zeros(1, 1, dtype=torch.long), 2, "paged"), "cache"),
    (lambda: greedy_generate(_model(2), torch.zeros(1, 40, dtype=torch.long), 20), "new_tokens"),
    (lambda: _model(2)(torch.zeros(1, 49, dtype=torch.long)), "tokens"),
])
def test_bad_inputs_name_the_argument(call, match):
    with pytest.raises((TypeError, ValueError), match=match):
        call()
