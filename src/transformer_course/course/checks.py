"""Readable feedback for exercises: each check raises ``ExerciseError`` saying what is wrong.

A bare ``AssertionError`` tells a student nothing; these checks say "wrong shape", "mask polarity
reversed" or "wrong value at position (i, j)", and return quietly when the answer is right. They
never print the expected value: one wrong guess must not give a "predict, then verify" answer away.
Instead they say what is wrong with the answer that was given: its type, which dimension of its
shape, its sign, whether it is too small or too large and by how much in coarse bands ("by 1-10%",
"by more than 10 times"), how many entries or items are wrong, or that the right items are in the
wrong order. A test cell ends its visible checks with :func:`checks_passed`, which prints one line
saying they passed.

Each chapter's nbgrader test cells call them (see CONTRIBUTING.md, "Exercises"):

    check_tensor   a tensor answer: type, shape, dtype kind, NaN, then values; bool masks get
                   polarity detection and a hint for additive (0 / -inf) masks
    check_mask     a bool attention mask (True = may attend), with those hints
    check_shape    only the shape of a tensor answer
    check_number   an int or float answer (a one-element tensor or a NumPy scalar is fine)
    check_equal    an exact answer: a string, a tuple, a choice
    check_callable that the student defined a function (and did not leave the stub)
    check_raises   that a function rejects a bad input with the right exception
    check_no_shortcut  that a function written for an exercise does not call what the exercise
                   asks the student to write (the package's own answer)
    checks_passed  the pass line a test cell prints when its visible checks hold

and ``ModuleParts`` hands a student's function the sub-modules of a layer without the layer's own
forward (calling it raises an ``ExerciseError`` naming the parts to use).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import torch


class ExerciseError(AssertionError):
    """An exercise answer is wrong; the message says how.

    Attributes:
        public: the same diagnosis without the expected value (e.g. "window_scores: wrong value,
            got 2,000,000"). The grader shows it when a *hidden* check fails, so that feedback
            never reveals a hidden test's expected value; the full message is for visible checks.
    """

    def __init__(self, message: str, public: str | None = None) -> None:
        super().__init__(message)
        self.public = message if public is None else public


def _short(value: Any, limit: int = 120) -> str:
    """``repr(value)``, cut to ``limit`` characters (a student's answer may be huge)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


BANDS = ((0.01, "by less than 1%"), (0.1, "by 1-10%"), (0.5, "by 10-50%"), (1.0, "by 50-100%"),
         (9.0, "by a factor of 2 to 10"), (math.inf, "by a factor of more than 10"))
"""How far a wrong number is from the answer (the larger over the smaller, minus 1), in bands coarse
enough not to give the answer away."""


def how_far(got: float, expected: float) -> str:
    """"too small by 1-10%", "too large by a factor of more than 10", "of the wrong sign": never the answer."""
    if expected == 0:
        return "too large" if got > 0 else "too small"
    if got == 0:
        return "but the answer is not zero"
    if (got > 0) != (expected > 0):
        return "of the wrong sign"
    ratio = abs(got) / abs(expected)
    apart = max(ratio, 1 / ratio) - 1  # symmetric: half and double are equally far
    band = next(text for limit, text in BANDS if apart < limit)
    return f"{'too large' if ratio > 1 else 'too small'} {band}"


def _shape_difference(got: Sequence[int], expected: Sequence[int]) -> str:
    """Which part of a shape is wrong, without the expected sizes."""
    if len(got) != len(expected):
        return f"it has {len(got)} dimensions; the answer has {'more' if len(expected) > len(got) else 'fewer'}"
    wrong = [i for i, (a, b) in enumerate(zip(got, expected)) if a != b]
    if sorted(got) == sorted(expected):
        return "the right sizes in the wrong order (a transpose or permute?)"
    return f"dimension{'s' if len(wrong) > 1 else ''} {', '.join(map(str, wrong))} {'have' if len(wrong) > 1 else 'has'} the wrong size"


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    return f"{type(value).__name__} {_short(value)}"


def check_tensor(name: str, got: Any, expected: torch.Tensor, atol: float = 1e-6, rtol: float = 1e-5) -> None:
    """Check a tensor answer: type, shape, dtype kind, then values; name the first wrong entry.

    For boolean tensors (masks) it recognizes a reversed polarity (True and False swapped) and
    says so.

    Raises:
        ExerciseError: describing the first problem found.
    """
    _check_is_tensor(name, got)
    if tuple(got.shape) != tuple(expected.shape):
        raise ExerciseError(f"{name}: wrong shape {tuple(got.shape)}: "
                            f"{_shape_difference(tuple(got.shape), tuple(expected.shape))}",
                            f"{name}: wrong shape, got {tuple(got.shape)}")
    if expected.dtype == torch.bool:
        if got.is_floating_point() and got.numel() > 0 and bool(((got == 0) | (got == -math.inf)).all()):
            raise ExerciseError(f"{name}: this is an additive mask (0 / -inf); return a bool mask with "
                                "True = may attend")
        if got.dtype != torch.bool:
            raise ExerciseError(f"{name}: expected a bool mask (True = may attend), got dtype {got.dtype}")
        if bool((got == ~expected).all()) and got.numel() > 0:
            raise ExerciseError(f"{name}: mask polarity reversed: True must mean 'may attend' "
                                "(the convention of F.scaled_dot_product_attention)")
        wrong = (got != expected).nonzero()
        if len(wrong):
            index = tuple(int(i) for i in wrong[0])
            raise ExerciseError(f"{name}: wrong value at position {index}: got {bool(got[index])} "
                                f"({len(wrong)} of {got.numel()} entries wrong)",
                                f"{name}: wrong values ({len(wrong)} of {got.numel()} entries wrong)")
        return
    if got.is_floating_point() != expected.is_floating_point():
        raise ExerciseError(f"{name}: expected dtype like {expected.dtype}, got {got.dtype}",
                            f"{name}: wrong kind of dtype, got {got.dtype}")
    got_cmp, expected_cmp = got.detach().double().cpu(), expected.detach().double().cpu()
    if torch.isnan(got_cmp).any():
        index = tuple(int(i) for i in torch.isnan(got_cmp).nonzero()[0])
        raise ExerciseError(f"{name}: NaN at position {index}")
    close = torch.isclose(got_cmp, expected_cmp, atol=atol, rtol=rtol)
    if not bool(close.all()):
        wrong = (~close).nonzero()
        index = tuple(int(i) for i in wrong[0])
        raise ExerciseError(f"{name}: wrong value at position {index}: got {float(got_cmp[index]):.6g}, "
                            f"{how_far(float(got_cmp[index]), float(expected_cmp[index]))} "
                            f"({len(wrong)} of {got.numel()} entries wrong)",
                            f"{name}: wrong values ({len(wrong)} of {got.numel()} entries wrong)")


def _check_is_tensor(name: str, got: Any) -> None:
    if not isinstance(got, torch.Tensor):
        hint = " (convert it with torch.as_tensor)" if type(got).__module__ == "numpy" else ""
        raise ExerciseError(f"{name}: expected a torch.Tensor, got {_describe(got)}{hint}")


def check_shape(name: str, got: Any, expected_shape: Sequence[int]) -> None:
    """Check only that ``got`` is a tensor of shape ``expected_shape`` (e.g. before its values).

    Raises:
        ExerciseError: "expected a torch.Tensor" or "wrong shape (...): dimension 1 has the wrong size".
    """
    _check_is_tensor(name, got)
    if tuple(got.shape) != tuple(expected_shape):
        raise ExerciseError(f"{name}: wrong shape {tuple(got.shape)}: "
                            f"{_shape_difference(tuple(got.shape), tuple(expected_shape))}",
                            f"{name}: wrong shape, got {tuple(got.shape)}")


def check_mask(name: str, got: Any, expected: torch.Tensor) -> None:
    """Check a boolean attention mask, True = may attend (the convention of SDPA).

    Like :func:`check_tensor` on a bool tensor: it says "mask polarity reversed" when True and
    False are swapped, "additive mask" for a 0 / -inf float mask, and otherwise names the first
    wrong position.

    Raises:
        ValueError: if ``expected`` is not a bool tensor (a bug in the test, not the answer).
        ExerciseError: describing the first problem found.
    """
    if not isinstance(expected, torch.Tensor) or expected.dtype != torch.bool:
        raise ValueError(f"check_mask: expected must be a bool tensor, got {_describe(expected)}")
    check_tensor(name, got, expected)


def _format_number(value: float) -> str:
    """Whole numbers in full with thousands separators (parameter counts), others to 6 digits."""
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 1e15):
        return f"{int(value):,}"
    return f"{value:,.6g}"


def _is_whole(value: float) -> bool:
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value) and value.is_integer())


def check_number(name: str, got: Any, expected: float, rel_tol: float = 1e-6, abs_tol: float = 0.0) -> None:
    """Check a numeric answer (int or float) against the expected value.

    A one-element tensor and a NumPy scalar count as numbers; a bool does not.

    Raises:
        ExerciseError: if ``got`` is not a number, is NaN, or differs from ``expected`` (the message
            says too small or too large, and by how much in coarse bands, never ``expected``).
    """
    if isinstance(got, torch.Tensor) and got.numel() == 1:
        got = got.item()
    if isinstance(got, numbers.Real) and not isinstance(got, (bool, int, float)) and type(got).__module__ == "numpy":
        got = got.item()  # a NumPy scalar
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        raise ExerciseError(f"{name}: expected a number, got {_describe(got)}")
    if math.isnan(got):
        raise ExerciseError(f"{name}: got NaN", f"{name}: got NaN")
    if not math.isclose(got, expected, rel_tol=rel_tol, abs_tol=abs_tol):
        whole = "; the answer is a whole number" if _is_whole(expected) and not _is_whole(got) else ""
        raise ExerciseError(f"{name}: got {_format_number(got)}, {how_far(got, expected)}{whole}",
                            f"{name}: wrong value, got {_format_number(got)}")


def check_equal(name: str, got: Any, expected: Any) -> None:
    """Check an exact answer (a string, a tuple, a choice); say what is wrong, never what was expected.

    A wrong type is named ("expected a list, got tuple"); for a list or tuple it says whether the
    number of items is wrong, whether the items are right but in the wrong order, or how many are
    wrong; for a yes/no (bool) answer only that it is wrong.
    """
    if got == expected:
        return
    sequence = (list, tuple)
    if type(got) is not type(expected) and not (isinstance(got, sequence) and isinstance(expected, sequence)):
        raise ExerciseError(f"{name}: expected a {type(expected).__name__}, got {_describe(got)}",
                            f"{name}: wrong answer, got {_short(got)} ({type(got).__name__})")
    if isinstance(expected, sequence) and isinstance(got, sequence):
        if len(got) != len(expected):
            detail = f"{len(got)} items, {'too many' if len(got) > len(expected) else 'too few'}"
        elif sorted(map(repr, got)) == sorted(map(repr, expected)):
            detail = "the right items in the wrong order"
        else:
            wrong = sum(a != b for a, b in zip(got, expected))
            detail = f"{wrong} of {len(expected)} items wrong"
        raise ExerciseError(f"{name}: wrong answer {_short(got)}: {detail}", f"{name}: wrong answer, got {_short(got)}")
    raise ExerciseError(f"{name}: wrong answer, got {_short(got)}", f"{name}: wrong answer, got {_short(got)}")


def check_callable(name: str, got: Any) -> None:
    """Check that the student defined ``name`` as a function (a class or lambda counts too).

    Raises:
        ExerciseError: "expected a function, got ..." (e.g. None when a ``return`` is missing).
    """
    if not callable(got):
        raise ExerciseError(f"{name}: expected a function, got {_describe(got)}")


def check_raises(name: str, function: Callable[..., Any], args: Sequence[Any] = (),
                 exception: type[BaseException] = ValueError, match: str | None = None) -> None:
    """Check that ``function(*args)`` raises ``exception`` (whose message contains ``match``).

    Raises:
        ExerciseError: if nothing is raised, another exception is raised, or the message lacks
            ``match``.
    """
    call = f"{name}({', '.join(repr(a) for a in args)})"
    try:
        function(*args)
    except exception as error:
        if match is not None and match not in str(error):
            raise ExerciseError(f"{call}: raised {type(error).__name__} as expected, but its message "
                                f"{str(error)!r} should mention {match!r}",
                                f"{call}: raised {type(error).__name__} as expected, but with the wrong message") from None
        return
    except Exception as error:  # noqa: BLE001 (any other exception is the student's answer to report)
        raise ExerciseError(f"{call}: expected {exception.__name__}, got {type(error).__name__}: {error}") from None
    raise ExerciseError(f"{call}: expected {exception.__name__}, but nothing was raised")


class ModuleParts(torch.nn.Module):
    """Named sub-modules handed to a student's function, with no forward of their own.

    ``ModuleParts("layer", self_attn=..., norm1=...)`` exposes ``parts.self_attn`` and ``parts.norm1``;
    calling ``parts(x)`` raises an :class:`ExerciseError` that names the parts to compute with. It is a
    package class, not one of the test cell, so the grader can send it into the student's sandbox.
    """

    def __init__(self, what: str, **parts: torch.nn.Module) -> None:
        super().__init__()
        if not isinstance(what, str) or not what:
            raise TypeError(f"what must be a non-empty str, got {what!r}")
        if not parts or not all(isinstance(part, torch.nn.Module) for part in parts.values()):
            raise TypeError("parts must be one or more torch.nn.Module keyword arguments")
        self.what = what
        for name, part in parts.items():
            self.add_module(name, part)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        names = ", ".join(f"{self.what}.{name}" for name, _ in self.named_children())
        raise ExerciseError(f"{self.what} holds only its parts: compute the output from {names}, "
                            f"not with {self.what}(x)")



def check_no_shortcut(name: str, function: Any, *off_limits: Any) -> None:
    """Check that the student's ``function`` does not call what the exercise asks them to write.

    ``off_limits`` are the package's own answers (functions or classes, e.g. ``FeedForward``); the
    exercise text names them. The check reads the function's source and fails at once, naming the
    call, when a name in it (``FeedForward``, ``nn.FeedForward.forward``, or a name imported inside
    the function) is one of them: the visible check would pass with the package's answer, but
    grading gives such an answer 0. Names are compared by what they refer to, so PyTorch's own
    ``F.scaled_dot_product_attention`` is not the package's function of the same name. It reads only
    the function's own body (a helper it calls is not read; grading follows every call). Where there
    is no source to read (a function the grader handed over from the sandbox) it does nothing: the
    grader checks calls itself.

    Raises:
        ExerciseError: if the source of ``function`` refers to one of ``off_limits``.
    """
    import ast
    import builtins
    import importlib
    import inspect
    import textwrap

    if not callable(function) or not hasattr(function, "__code__"):
        return
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return
    scope = dict(vars(builtins))
    scope.update(getattr(function, "__globals__", {}))
    for node in ast.walk(tree):  # imports inside the function
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                try:
                    scope[alias.asname or alias.name] = getattr(importlib.import_module(node.module), alias.name)
                except (ImportError, AttributeError):
                    continue
    banned = {id(item): getattr(item, "__name__", repr(item)) for item in off_limits}
    graded = {id(item) for item in off_limits if str(getattr(item, "__module__", "")).startswith("transformer_course")}

    def resolve(node: ast.AST) -> Any:
        """The object a name or a chain of attributes of modules and classes refers to (None if unknown)."""
        if isinstance(node, ast.Name):
            return scope.get(node.id)
        if isinstance(node, ast.Attribute):
            base = resolve(node.value)
            if inspect.ismodule(base) or inspect.isclass(base):
                return inspect.getattr_static(base, node.attr, None)
        return None

    objects = {id(obj) for node in ast.walk(tree) if isinstance(node, (ast.Name, ast.Attribute))
               and id(obj := resolve(node)) in banned}
    if objects:
        found = ", ".join(sorted({banned[i] for i in objects}))
        consequence = (": it passes this check but scores 0 when graded" if objects & graded
                       else " from tensor operations")
        raise ExerciseError(f"{name} uses {found}, which this exercise asks you to write yourself{consequence}")


def checks_passed(label: str) -> None:
    """Print the line that says a test cell's visible checks passed (the hidden ones run at grading)."""
    if not isinstance(label, str) or not label:
        raise TypeError(f"label must be a non-empty str, got {label!r}")
    print(f"\u2713 {label}: the visible checks pass (hidden tests run when it is graded)")
