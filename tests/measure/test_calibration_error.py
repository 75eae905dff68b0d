"""expected_calibration_error against hand-computed bins."""

from __future__ import annotations

import pytest
import torch

from transformer_course.measure.calibration import expected_calibration_error


def test_a_calibrated_predictor_scores_zero():
    confidence = torch.tensor([0.75] * 4 + [0.5] * 2)
    correct = torch.tensor([True, True, True, False, True, False])
    assert expected_calibration_error(confidence, correct) == pytest.approx(0.0, abs=1e-15)


def test_hand_computed_bins():
    # bin (0.8, 0.9]: confidences 0.85, 0.9, accuracy 1/2 -> |0.5 - 0.875| * 2/5
    # bin (0.9, 1.0]: confidences 1.0, 0.95, 0.95, accuracy 1 -> |1 - 0.9667| * 3/5
    confidence = torch.tensor([0.85, 0.9, 1.0, 0.95, 0.95], dtype=torch.float64)
    correct = torch.tensor([True, False, True, True, True])
    expected = abs(0.5 - 0.875) * 2 / 5 + abs(1 - (1.0 + 0.95 + 0.95) / 3) * 3 / 5
    assert expected_calibration_error(confidence, correct) == pytest.approx(expected, abs=1e-12)


def test_overconfidence_and_underconfidence_both_count():
    over = expected_calibration_error(torch.tensor([0.95] * 10), torch.tensor([True] * 5 + [False] * 5))
    under = expected_calibration_error(torch.tensor([0.55] * 10), torch.tensor([True] * 10))
    assert over == pytest.approx(0.45) and under == pytest.approx(0.45)


@pytest.mark.parametrize("confidence, correct, error, match", [
    (torch.tensor([1.5]), torch.tensor([True]), ValueError, r"\[0, 1\]"),
    (torch.tensor([0.5, 0.5]), torch.tensor([True]), ValueError, "shape"),
    (torch.tensor([], dtype=torch.float32), torch.tensor([], dtype=torch.bool), ValueError, "non-empty"),
    (torch.tensor([1]), torch.tensor([True]), TypeError, "floating"),
])
def test_bad_arguments(confidence, correct, error, match):
    with pytest.raises(error, match=match):
        expected_calibration_error(confidence, correct)
