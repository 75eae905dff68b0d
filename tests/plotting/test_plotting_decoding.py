"""The figures of DL0035's training recipe and DL0036's exposure bias."""

from __future__ import annotations

import pytest
import torch
from matplotlib.figure import Figure

from transformer_course.experiments.decoding import DecodingRun
from transformer_course.plotting.decoding import plot_exposure_bias, plot_label_smoothing, plot_learning_rate_schedule
from transformer_course.plotting.style import smallest_text_points


def _run(seed, eps=0.0, accuracy=0.8, confidence=0.7):
    forced = torch.linspace(0.9, 0.7, 9, dtype=torch.float64)
    return DecodingRun(seed, eps, [1.0], accuracy, confidence, 0.1, 0.2, 0.3, forced, forced - 0.1)


def test_schedule_figure_marks_the_peak_of_each_width():
    figure = plot_learning_rate_schedule((512, 1024), warmup_steps=100, steps=1000)
    assert isinstance(figure, Figure) and smallest_text_points(figure) >= 9
    ax = figure.axes[0]
    curve = ax.lines[0]
    assert max(curve.get_ydata()) == pytest.approx((512 * 100) ** -0.5)
    assert curve.get_xdata()[list(curve.get_ydata()).index(max(curve.get_ydata()))] == 100
    assert any("peak" in text.get_text() for text in ax.texts)


def test_label_smoothing_figure_draws_both_arms():
    plain = [_run(k) for k in range(3)]
    smoothed = [_run(k, 0.1, 0.82, 0.65) for k in range(3)]
    figure = plot_label_smoothing(plain, smoothed)
    assert len(figure.axes[0].collections) == 2 and smallest_text_points(figure) >= 9
    with pytest.raises(ValueError, match="one length"):
        plot_label_smoothing(plain, smoothed[:2])


def test_exposure_figure_draws_median_lines_and_bands():
    figure = plot_exposure_bias([_run(k) for k in range(4)])
    ax = figure.axes[0]
    assert len(ax.lines) == 2 and len(ax.collections) == 2 and smallest_text_points(figure) >= 9
    assert ax.lines[0].get_ydata()[0] == pytest.approx(0.9)
    with pytest.raises(ValueError, match="runs"):
        plot_exposure_bias([])
