"""The capstone's figures draw every seed and refuse what is not a run."""

import dataclasses

import pytest

from transformer_course.experiments import induction_circuit as ic
from transformer_course.plotting.circuit import plot_circuit_ablation, plot_circuit_phase, plot_composition

TINY = dataclasses.replace(ic.CIRCUIT, steps=12, eval_every=4, probe_sequences=4, probe_windows=4, ensemble=2,
                           workers=1, control_draws=2)


@pytest.fixture(scope="module")
def runs():
    return ic.train_circuits([3, 5], TINY)


def test_the_phase_figure_has_four_panels_with_a_line_per_seed(runs):
    fig = plot_circuit_phase(runs, TINY, baselines={"unigram": 3.3, "bigram": 2.6})
    axes = fig.axes
    assert len(axes) == 4
    assert [t.get_text() for t in axes[0].texts] == ["unigram model ", "bigram model "]
    assert len(axes[2].lines) >= 2 * (len(runs) + 1)  # two scores, a line per seed and a median each
    assert axes[3].get_title(loc="left").startswith("(d)")


def test_composition_and_ablation_figures_show_every_seed(runs):
    without = int((ic.circuit_summary(runs, TINY)["induction heads, layer 1"] == 0).sum())
    fig = plot_composition(runs, TINY)
    collections = fig.axes[0].collections
    assert sum(len(c.get_offsets()) for c in collections) == 5 * len(runs)
    hollow = sum(len(c.get_offsets()) for c in collections if len(c.get_facecolors()) == 0)
    assert hollow == 5 * without  # a seed without an induction head is drawn hollow, outside the median
    fig = plot_circuit_ablation(runs, TINY)
    assert len(fig.axes[0].get_xticklabels()) == 4


def test_figures_refuse_anything_but_runs():
    with pytest.raises(TypeError, match="CircuitRun"):
        plot_circuit_phase([], TINY)
    with pytest.raises(TypeError, match="CircuitRun"):
        plot_composition(["not a run"], TINY)
