"""How well a classifier's confidence matches its accuracy (Guo et al., 2017).

A model is *calibrated* when, among the predictions it makes with confidence (top probability)
about c, a fraction about c is right. ``expected_calibration_error`` bins the predictions by
confidence into equal-width bins and averages |accuracy - mean confidence| over the bins,
weighted by the share of predictions in each:

    ECE = sum_b (n_b / n) * |acc_b - conf_b|.

Shape legend: N predictions.
"""

from __future__ import annotations

import torch

from transformer_course._validation import check_int, check_tensor


def expected_calibration_error(confidence: torch.Tensor, correct: torch.Tensor, num_bins: int = 10) -> float:
    """ECE of N predictions with ``confidence`` in [0, 1] and ``correct`` (bool), over equal-width bins.

    A confidence of exactly 1 falls in the last bin; bin b holds (b / num_bins, (b + 1) / num_bins]
    (the first bin includes 0).

    Raises:
        TypeError, ValueError: for non-tensors, mismatched or empty shapes, confidences outside
            [0, 1] or a non-positive number of bins.
    """
    check_tensor("confidence", confidence, ndim=1, floating=True)
    check_tensor("correct", correct, ndim=1)
    num_bins = check_int("num_bins", num_bins, minimum=1)
    if correct.shape != confidence.shape or confidence.numel() == 0:
        raise ValueError(f"confidence and correct must be non-empty and of one shape, got "
                         f"{tuple(confidence.shape)} and {tuple(correct.shape)}")
    if bool((confidence < 0).any() or (confidence > 1).any()):
        raise ValueError("confidence must lie in [0, 1]")
    confidence, correct = confidence.double(), correct.double()
    bins = (confidence * num_bins).ceil().clamp(1, num_bins).long() - 1  # (N,): bin of each prediction
    gap = (torch.zeros(num_bins, dtype=torch.float64).index_add_(0, bins, correct)
           - torch.zeros(num_bins, dtype=torch.float64).index_add_(0, bins, confidence))  # (num_bins,): n_b (acc_b - conf_b)
    return float(gap.abs().sum() / confidence.numel())
