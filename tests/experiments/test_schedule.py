"""The paper's learning-rate schedule: LambdaLR against the closed form of Vaswani et al. (2017), §5.3."""

from __future__ import annotations

import pytest
import torch

from transformer_course.experiments.training import transformer_learning_rate, transformer_schedule


def _rates(d_model: int, warmup: int, steps: int) -> list[float]:
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    schedule = transformer_schedule(optimizer, d_model, warmup)
    rates = []
    for _ in range(steps):
        rates.append(optimizer.param_groups[0]["lr"])  # the rate the optimizer step would use
        optimizer.step()
        schedule.step()
    return rates


def test_lambdalr_follows_the_closed_form_from_step_one():
    rates = _rates(512, 4000, 12000)
    for step in (1, 2, 100, 3999, 4000, 4001, 8000, 12000):
        closed = 512 ** -0.5 * min(step ** -0.5, step * 4000 ** -1.5)
        assert rates[step - 1] == pytest.approx(closed, rel=1e-12)
        assert transformer_learning_rate(step, 512, 4000) == pytest.approx(closed, rel=1e-15)


def test_the_peak_is_at_the_warmup_step():
    rates = _rates(64, 50, 400)
    assert max(range(len(rates)), key=rates.__getitem__) + 1 == 50
    assert rates[49] == pytest.approx((64 * 50) ** -0.5, rel=1e-12)
    assert rates[99] == pytest.approx(rates[49] / 2 ** 0.5, rel=1e-12)  # inverse square root after the peak
    assert rates[24] == pytest.approx(rates[49] / 2, rel=1e-12)  # linear before it


@pytest.mark.parametrize("call, error, match", [
    (lambda: transformer_learning_rate(0), ValueError, "step"),
    (lambda: transformer_learning_rate(1, warmup_steps=0), ValueError, "warmup_steps"),
    (lambda: transformer_schedule("adam"), TypeError, "optimizer"),
])
def test_bad_arguments(call, error, match):
    with pytest.raises(error, match=match):
        call()
