"""Readable feedback for exercises: each check raises ``ExerciseError`` saying what is wrong.

A bare ``AssertionError`` tells a student nothing; these checks say "wrong shape", "mask polarity
reversed" or "wrong value at position (i, j)", and return quietly when the answer is right.
"""

from __future__ import annotations

import math
from typing import Any

import torch


class ExerciseError(AssertionError):
    """An exercise answer is wrong; the message says how."""


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    return f"{type(value).__name__} {value!r}"


def check_tensor(name: str, got: Any, expected: torch.Tensor, atol: float = 1e-6, rtol: float = 1e-5) -> None:
    """Check a tensor answer: type, shape, dtype kind, then values; name the first wrong entry.

    For boolean tensors (masks) it recognizes a reversed polarity (True and False swapped) and
    says so.

    Raises:
        ExerciseError: describing the first problem found.
    """
    if not isinstance(got, torch.Tensor):
        raise ExerciseError(f"{name}: expected a torch.Tensor, got {_describe(got)}")
    if tuple(got.shape) != tuple(expected.shape):
        raise ExerciseError(f"{name}: wrong shape, expected {tuple(expected.shape)}, got {tuple(got.shape)}")
    if expected.dtype == torch.bool:
        if got.dtype != torch.bool:
            raise ExerciseError(f"{name}: expected a bool mask (True = may attend), got dtype {got.dtype}")
        if bool((got == ~expected).all()) and got.numel() > 0:
            raise ExerciseError(f"{name}: mask polarity reversed: True must mean 'may attend' "
                                "(the convention of F.scaled_dot_product_attention)")
        wrong = (got != expected).nonzero()
        if len(wrong):
            index = tuple(int(i) for i in wrong[0])
            raise ExerciseError(f"{name}: wrong value at position {index}: expected {bool(expected[index])}, "
                                f"got {bool(got[index])} ({len(wrong)} of {got.numel()} entries wrong)")
        return
    if got.is_floating_point() != expected.is_floating_point():
        raise ExerciseError(f"{name}: expected dtype like {expected.dtype}, got {got.dtype}")
    got_cmp, expected_cmp = got.detach().double().cpu(), expected.detach().double().cpu()
    if torch.isnan(got_cmp).any():
        index = tuple(int(i) for i in torch.isnan(got_cmp).nonzero()[0])
        raise ExerciseError(f"{name}: NaN at position {index}")
    close = torch.isclose(got_cmp, expected_cmp, atol=atol, rtol=rtol)
    if not bool(close.all()):
        wrong = (~close).nonzero()
        index = tuple(int(i) for i in wrong[0])
        raise ExerciseError(f"{name}: wrong value at position {index}: expected {float(expected_cmp[index]):.6g}, "
                            f"got {float(got_cmp[index]):.6g} ({len(wrong)} of {got.numel()} entries wrong)")


def check_number(name: str, got: Any, expected: float, rel_tol: float = 1e-6, abs_tol: float = 0.0) -> None:
    """Check a numeric answer (int or float) against the expected value.

    Raises:
        ExerciseError: if ``got`` is not a number or differs from ``expected``.
    """
    if isinstance(got, torch.Tensor) and got.numel() == 1:
        got = got.item()
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        raise ExerciseError(f"{name}: expected a number, got {_describe(got)}")
    if not math.isclose(got, expected, rel_tol=rel_tol, abs_tol=abs_tol):
        raise ExerciseError(f"{name}: expected {expected:,.6g}, got {got:,.6g}")


def check_equal(name: str, got: Any, expected: Any) -> None:
    """Check an exact answer (a string, a tuple, a choice); say what was expected."""
    if got != expected:
        raise ExerciseError(f"{name}: expected {expected!r}, got {got!r}")
