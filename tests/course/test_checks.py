"""The exercise checks: quiet on a right answer, and a message that says what is wrong otherwise."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from transformer_course.course.checks import (
    ExerciseError, check_callable, check_equal, check_mask, check_number, check_raises, check_shape,
    check_tensor)
from transformer_course.nn.masks import causal_mask


def test_exercise_error_is_an_assertion_error():
    # nbgrader and pytest both treat it as a failed test
    assert issubclass(ExerciseError, AssertionError)


# --- check_tensor -------------------------------------------------------------------------------

def test_check_tensor_accepts_a_right_answer_within_tolerance(gen):
    expected = torch.randn(3, 4, generator=gen)
    check_tensor("x", expected + 1e-8, expected)
    check_tensor("x", expected.float(), expected.double())  # dtype width does not matter
    check_tensor("x", expected + 0.05, expected, atol=0.1)
    check_tensor("m", causal_mask(4).clone(), causal_mask(4))


def test_check_tensor_says_wrong_type():
    with pytest.raises(ExerciseError, match=r"^x: expected a torch.Tensor, got list \[1, 2\]$"):
        check_tensor("x", [1, 2], torch.tensor([1, 2]))
    with pytest.raises(ExerciseError, match=r"got ndarray .*\(convert it with torch.as_tensor\)"):
        check_tensor("x", np.zeros(2), torch.zeros(2))
    with pytest.raises(ExerciseError, match=r"expected a torch.Tensor, got NoneType None"):
        check_tensor("x", None, torch.zeros(2))


def test_check_tensor_says_wrong_shape():
    with pytest.raises(ExerciseError, match=r"^out: wrong shape, expected \(2, 3\), got \(3, 2\)$"):
        check_tensor("out", torch.zeros(3, 2), torch.zeros(2, 3))


def test_check_tensor_names_the_first_wrong_position_and_counts_the_wrong_entries():
    expected = torch.zeros(3, 4)
    got = expected.clone()
    got[1, 2], got[2, 0] = 0.5, -1.0
    with pytest.raises(ExerciseError, match=r"^y: wrong value at position \(1, 2\): expected 0, got 0\.5 "
                                            r"\(2 of 12 entries wrong\)$"):
        check_tensor("y", got, expected)


def test_check_tensor_reports_nan_with_its_position():
    got = torch.ones(2, 3)
    got[1, 1] = math.nan
    with pytest.raises(ExerciseError, match=r"^y: NaN at position \(1, 1\)$"):
        check_tensor("y", got, torch.ones(2, 3))


def test_check_tensor_says_wrong_dtype_kind():
    with pytest.raises(ExerciseError, match=r"expected dtype like torch.float32, got torch.int64"):
        check_tensor("y", torch.zeros(2, dtype=torch.long), torch.zeros(2))


def test_check_tensor_detects_reversed_mask_polarity():
    mask = causal_mask(4)
    with pytest.raises(ExerciseError, match=r"^m: mask polarity reversed: True must mean 'may attend'"):
        check_tensor("m", ~mask, mask)


def test_check_tensor_names_the_wrong_entry_of_a_mask():
    mask = causal_mask(3)
    got = mask.clone()
    got[0, 2] = True
    with pytest.raises(ExerciseError, match=r"^m: wrong value at position \(0, 2\): expected False, got True "
                                            r"\(1 of 9 entries wrong\)$"):
        check_tensor("m", got, mask)


def test_check_tensor_wants_a_bool_mask():
    mask = causal_mask(3)
    with pytest.raises(ExerciseError, match=r"expected a bool mask \(True = may attend\), got dtype torch.int64"):
        check_tensor("m", mask.long(), mask)
    additive = torch.zeros(3, 3).masked_fill(~mask, -math.inf)
    with pytest.raises(ExerciseError, match=r"^m: this is an additive mask \(0 / -inf\); return a bool mask"):
        check_tensor("m", additive, mask)


# --- check_mask and check_shape -----------------------------------------------------------------

def test_check_mask_accepts_the_right_mask_and_explains_wrong_ones():
    mask = causal_mask(5)
    check_mask("causal_mask(5)", causal_mask(5), mask)
    with pytest.raises(ExerciseError, match="polarity reversed"):
        check_mask("causal_mask(5)", ~mask, mask)
    with pytest.raises(ExerciseError, match=r"wrong shape, expected \(5, 5\), got \(4, 4\)"):
        check_mask("causal_mask(5)", causal_mask(4), mask)


def test_check_mask_refuses_a_non_bool_expected_value():
    with pytest.raises(ValueError, match="expected must be a bool tensor, got a tensor of shape"):
        check_mask("m", torch.zeros(2), torch.zeros(2))


def test_check_shape():
    check_shape("h", torch.zeros(2, 5, 8), (2, 5, 8))
    check_shape("h", torch.zeros(2, 5, 8), torch.Size([2, 5, 8]))
    with pytest.raises(ExerciseError, match=r"^h: wrong shape, expected \(2, 5, 8\), got \(2, 8, 5\)$"):
        check_shape("h", torch.zeros(2, 8, 5), (2, 5, 8))
    with pytest.raises(ExerciseError, match="expected a torch.Tensor, got tuple"):
        check_shape("h", (2, 5, 8), (2, 5, 8))


# --- check_number -------------------------------------------------------------------------------

def test_check_number_accepts_ints_floats_one_element_tensors_and_numpy_scalars():
    check_number("n", 12, 12)
    check_number("n", 12.0000001, 12)
    check_number("n", torch.tensor(12), 12)
    check_number("n", np.int64(12), 12)
    check_number("n", np.float32(0.5), 0.5)
    check_number("n", 0.104, 0.1, abs_tol=0.01)


def test_check_number_says_what_was_expected():
    with pytest.raises(ExerciseError, match=r"^params: expected 1,049,600, got 1,048,576$"):
        check_number("params", 1_048_576, 1_049_600)
    with pytest.raises(ExerciseError, match=r"^ratio: expected 0\.333333, got 0\.3$"):
        check_number("ratio", 0.3, 1 / 3)
    with pytest.raises(ExerciseError, match=r"^flops: expected 2,000, got 1,999\.5$"):
        check_number("flops", 1999.5, 2000.0)


def test_check_number_rejects_non_numbers_and_nan():
    with pytest.raises(ExerciseError, match=r"^n: expected a number, got str '12'$"):
        check_number("n", "12", 12)
    with pytest.raises(ExerciseError, match=r"^n: expected a number, got bool True$"):
        check_number("n", True, 1)
    with pytest.raises(ExerciseError, match=r"^n: expected a number, got a tensor of shape \(2,\)"):
        check_number("n", torch.tensor([1, 2]), 1)
    with pytest.raises(ExerciseError, match=r"^n: got NaN, expected 3$"):
        check_number("n", math.nan, 3)


# --- check_equal, check_callable, check_raises --------------------------------------------------

def test_check_equal():
    check_equal("answer", "sdpa", "sdpa")
    check_equal("shape", torch.Size([2, 3]), (2, 3))
    with pytest.raises(ExerciseError, match=r"^answer: expected 'sdpa', got 'mha'$"):
        check_equal("answer", "mha", "sdpa")
    with pytest.raises(ExerciseError, match=r"^answer: expected 12 \(int\), got '12' \(str\)$"):
        check_equal("answer", "12", 12)


def test_check_callable():
    check_callable("f", lambda x: x)
    check_callable("f", torch.nn.Linear)
    with pytest.raises(ExerciseError, match=r"^f: expected a function, got NoneType None$"):
        check_callable("f", None)


def _positive(x):
    if x <= 0:
        raise ValueError(f"x must be positive, got {x}")
    return x


def test_check_raises():
    check_raises("_positive", _positive, (0,), ValueError, match="must be positive")
    with pytest.raises(ExerciseError, match=r"^_positive\(3\): expected ValueError, but nothing was raised$"):
        check_raises("_positive", _positive, (3,))
    with pytest.raises(ExerciseError, match=r"^_positive\('a'\): expected ValueError, got TypeError: "):
        check_raises("_positive", _positive, ("a",))
    with pytest.raises(ExerciseError, match=r"^_positive\(-1\): raised ValueError as expected, but its message "
                                            r"'x must be positive, got -1' should mention 'x must be > 0'$"):
        check_raises("_positive", _positive, (-1,), match="x must be > 0")


def test_public_messages_never_show_the_expected_value():
    # the grader shows `public` when a hidden check fails: what is wrong, but not the answer
    cases = [
        (lambda: check_number("window_scores", 2_000_000, 2_088_832), "2,088,832"),
        (lambda: check_equal("answer", "mha", "sdpa"), "sdpa"),
        (lambda: check_tensor("x", torch.zeros(3), torch.tensor([0.0, 0.0, 7.5])), "7.5"),
        (lambda: check_tensor("x", torch.zeros(3), torch.zeros(4)), "(4,)"),
        (lambda: check_shape("x", torch.zeros(3), (4,)), "(4,)"),
    ]
    for check, secret in cases:
        with pytest.raises(ExerciseError) as caught:
            check()
        assert secret in str(caught.value) and secret not in caught.value.public, caught.value.public
    with pytest.raises(ExerciseError) as caught:
        check_number("window_scores", 2_000_000, 2_088_832)
    assert caught.value.public == "window_scores: wrong value, got 2,000,000"


def test_module_parts_expose_the_parts_and_refuse_to_be_called():
    import pickle

    from transformer_course.course.checks import ExerciseError, ModuleParts

    norm = torch.nn.LayerNorm(4)
    parts = ModuleParts("layer", norm1=norm)
    assert parts.norm1 is norm
    with pytest.raises(ExerciseError, match=r"compute the output from layer\.norm1, not with layer\(x\)"):
        parts(torch.zeros(1, 4))
    again = pickle.loads(pickle.dumps(parts))  # the grader sends it into the sandbox
    assert torch.equal(again.norm1.weight, norm.weight)
    with pytest.raises(TypeError, match="parts must be"):
        ModuleParts("layer", norm1="not a module")
