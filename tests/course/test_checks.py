"""The exercise checks: quiet on a right answer, and a message that says what is wrong otherwise."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from transformer_course.course.checks import (
    ExerciseError, check_callable, check_equal, check_mask, check_number, check_raises, check_shape,
    check_tensor)
from transformer_course.nn.feedforward import FeedForward
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
    with pytest.raises(ExerciseError, match=r"^out: wrong shape \(3, 2\): the right sizes in the wrong order "):
        check_tensor("out", torch.zeros(3, 2), torch.zeros(2, 3))
    with pytest.raises(ExerciseError, match=r"^out: wrong shape \(2, 4\): dimension 1 has the wrong size$"):
        check_tensor("out", torch.zeros(2, 4), torch.zeros(2, 3))
    with pytest.raises(ExerciseError, match=r"^out: wrong shape \(6,\): it has 1 dimensions; the answer has more$"):
        check_tensor("out", torch.zeros(6), torch.zeros(2, 3))


def test_check_tensor_names_the_first_wrong_position_and_counts_the_wrong_entries():
    expected = torch.zeros(3, 4)
    got = expected.clone()
    got[1, 2], got[2, 0] = 0.5, -1.0
    with pytest.raises(ExerciseError, match=r"^y: wrong value at position \(1, 2\): got 0\.5, too large "
                                            r"\(2 of 12 entries wrong\)$"):
        check_tensor("y", got, expected)
    with pytest.raises(ExerciseError, match=r"^y: wrong value at position \(0,\): got 1\.5, too small by 10-50% "
                                            r"\(1 of 2 entries wrong\)$"):
        check_tensor("y", torch.tensor([1.5, 1.0]), torch.tensor([2.0, 1.0]))


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
    with pytest.raises(ExerciseError, match=r"^m: wrong value at position \(0, 2\): got True "
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
    with pytest.raises(ExerciseError, match=r"wrong shape \(4, 4\): dimensions 0, 1 have the wrong size"):
        check_mask("causal_mask(5)", causal_mask(4), mask)


def test_check_mask_refuses_a_non_bool_expected_value():
    with pytest.raises(ValueError, match="expected must be a bool tensor, got a tensor of shape"):
        check_mask("m", torch.zeros(2), torch.zeros(2))


def test_check_shape():
    check_shape("h", torch.zeros(2, 5, 8), (2, 5, 8))
    check_shape("h", torch.zeros(2, 5, 8), torch.Size([2, 5, 8]))
    with pytest.raises(ExerciseError, match=r"^h: wrong shape \(2, 8, 5\): the right sizes in the wrong order"):
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


def test_check_number_says_how_far_off_never_the_answer():
    with pytest.raises(ExerciseError, match=r"^params: got 1,048,576, too small by less than 1%$"):
        check_number("params", 1_048_576, 1_049_600)
    with pytest.raises(ExerciseError, match=r"^ratio: got 0\.3, too small by 10-50%$"):
        check_number("ratio", 0.3, 1 / 3)
    with pytest.raises(ExerciseError, match=r"^flops: got 1,999\.5, too small by less than 1%; the answer is a whole "
                                            r"number$"):
        check_number("flops", 1999.5, 2000.0)
    with pytest.raises(ExerciseError, match=r"^flops: got 4,000,000, too large by a factor of more than 10$"):
        check_number("flops", 4_000_000, 2000)
    with pytest.raises(ExerciseError, match=r"^rate: got -0\.5, of the wrong sign$"):
        check_number("rate", -0.5, 0.5)
    with pytest.raises(ExerciseError, match=r"^rate: got 0, but the answer is not zero$"):
        check_number("rate", 0, 0.5)


def test_check_number_rejects_non_numbers_and_nan():
    with pytest.raises(ExerciseError, match=r"^n: expected a number, got str '12'$"):
        check_number("n", "12", 12)
    with pytest.raises(ExerciseError, match=r"^n: expected a number, got bool True$"):
        check_number("n", True, 1)
    with pytest.raises(ExerciseError, match=r"^n: expected a number, got a tensor of shape \(2,\)"):
        check_number("n", torch.tensor([1, 2]), 1)
    with pytest.raises(ExerciseError, match=r"^n: got NaN$"):
        check_number("n", math.nan, 3)


# --- check_equal, check_callable, check_raises --------------------------------------------------

def test_check_equal():
    check_equal("answer", "sdpa", "sdpa")
    check_equal("shape", torch.Size([2, 3]), (2, 3))
    with pytest.raises(ExerciseError, match=r"^answer: wrong answer, got 'mha'$"):
        check_equal("answer", "mha", "sdpa")
    with pytest.raises(ExerciseError, match=r"^answer: expected a int, got str '12'$"):
        check_equal("answer", "12", 12)
    with pytest.raises(ExerciseError, match=r"^changed: wrong answer \[4, 5\]: 2 items, too many$"):
        check_equal("changed", [4, 5], [4])
    with pytest.raises(ExerciseError, match=r"^order: wrong answer \[2, 1\]: the right items in the wrong order$"):
        check_equal("order", [2, 1], [1, 2])
    with pytest.raises(ExerciseError, match=r"^order: wrong answer \(1, 3, 3\): 2 of 3 items wrong$"):
        check_equal("order", (1, 3, 3), [1, 2, 4])
    with pytest.raises(ExerciseError, match=r"^prediction: wrong answer, got True$"):
        check_equal("prediction", True, False)


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


def test_no_message_shows_the_expected_value():
    # a visible check's message (str) and a hidden one's (public): what is wrong, never the answer
    cases = [
        (lambda: check_number("window_scores", 2_000_000, 2_088_832), "2,088,832"),
        (lambda: check_number("slowest_wavelength", 58_000.0, 58_469.6), "58,469"),
        (lambda: check_equal("answer", "mha", "sdpa"), "sdpa"),
        (lambda: check_equal("changed_after_ffn", [4, 5], [4]), "[4]"),
        (lambda: check_equal("changed", [3], [7]), "7"),
        (lambda: check_tensor("x", torch.zeros(3), torch.tensor([0.0, 0.0, 7.5])), "7.5"),
        (lambda: check_tensor("x", torch.zeros(3), torch.zeros(4)), "4"),
        (lambda: check_shape("x", torch.zeros(3), (4,)), "4"),
        (lambda: check_tensor("m", torch.tensor([True, True]), torch.tensor([True, False])), "False"),
    ]
    for check, secret in cases:
        with pytest.raises(ExerciseError) as caught:
            check()
        assert secret not in str(caught.value) and secret not in caught.value.public, str(caught.value)
    with pytest.raises(ExerciseError) as caught:
        check_number("window_scores", 2_000_000, 2_088_832)
    assert caught.value.public == "window_scores: wrong value, got 2,000,000"


def _ffn_shortcut(x):
    return FeedForward(8, 32)(x)


def _ffn_by_hand(x, w):
    return torch.relu(x @ w)


def _ffn_imported_inside(x):
    from transformer_course.nn.feedforward import FeedForward as Ours

    return Ours(8, 32)(x)


def _ffn_method(self, x):
    return FeedForward.forward(self, x)


def _torch_sdpa(q, k, v):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v)


def test_check_no_shortcut_names_the_package_answer_a_function_calls():
    from transformer_course.course.checks import check_no_shortcut

    check_no_shortcut("my_ffn", _ffn_by_hand, FeedForward)
    with pytest.raises(ExerciseError, match=r"^my_ffn uses FeedForward, which this exercise asks you to write "
                                            r"yourself: it passes this check but scores 0 when graded$"):
        check_no_shortcut("my_ffn", _ffn_shortcut, FeedForward, causal_mask)
    for shortcut in (_ffn_imported_inside, _ffn_method):
        with pytest.raises(ExerciseError, match=r"^my_ffn uses FeedForward"):
            check_no_shortcut("my_ffn", shortcut, FeedForward)
    from transformer_course.nn.attention import scaled_dot_product_attention

    check_no_shortcut("attend", _torch_sdpa, scaled_dot_product_attention)  # PyTorch's own: not the package's
    with pytest.raises(ExerciseError, match=r"^attend uses scaled_dot_product_attention, which this exercise asks "
                                            r"you to write yourself from tensor operations$"):
        check_no_shortcut("attend", _torch_sdpa, torch.nn.functional.scaled_dot_product_attention)
    check_no_shortcut("my_ffn", object(), FeedForward)  # no source to read (the grader's stand-in): nothing to say
    check_no_shortcut("my_ffn", len, FeedForward)


def test_checks_passed_prints_one_clear_line(capsys):
    from transformer_course.course.checks import checks_passed

    checks_passed("dl0031-ex1")
    assert capsys.readouterr().out == "\u2713 dl0031-ex1: the visible checks pass (hidden tests run when it is graded)\n"
    with pytest.raises(TypeError, match="label"):
        checks_passed("")


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
