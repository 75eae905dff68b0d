"""DL0035 exercise 2 hands the student only the parts of an encoder layer (issue 22).

The visible test used to pass the package's ``EncoderLayer`` itself, so ``return layer(x)`` passed.
It now passes the parts in a `ModuleParts` (course.checks), whose forward refuses to compute the answer. This test runs the
stored notebook's test cell against that shortcut (the visible check must fail it with an
``ExerciseError``) and against the reference solution (every check, hidden ones included, passes).
The fixture of typical wrong answers holds one answer per exercise (a Pre-LN mix-up for this one),
so the shortcut is checked here.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = ROOT / "chapters" / "dl0035_transformer_architecture.ipynb"

SHORTCUT = '''
def post_ln_encoder_layer(layer, x):
    return layer(x)  # let the layer compute its own output
'''
REFERENCE = '''
def post_ln_encoder_layer(layer, x):
    z = layer.norm1(x + layer.self_attn(x, x, x))
    return layer.norm2(z + layer.feed_forward(z))
'''


def _test_cell() -> str:
    notebook = nbformat.read(CHAPTER, as_version=4)
    (cell,) = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "dl0035-ex2-tests"]
    return cell.source


def _run(answer: str, hidden: bool) -> None:
    from transformer_course.course.grading import split_hidden

    namespace: dict = {}
    exec("import math\nimport torch\nfrom torch import nn\n" + answer, namespace)  # noqa: S102
    for code, is_hidden in split_hidden(_test_cell()):
        if hidden or not is_hidden:
            exec(code, namespace)  # noqa: S102


def test_the_visible_check_fails_the_layer_calling_itself():
    from transformer_course.course.checks import ExerciseError

    with pytest.raises(ExerciseError, match="not with layer"):
        _run(SHORTCUT, hidden=False)


def test_the_reference_answer_passes_every_check():
    _run(REFERENCE, hidden=True)


def test_the_test_hands_over_no_encoder_layer():
    source = _test_cell()
    assert "post_ln_encoder_layer(_parts," in source and "post_ln_encoder_layer(_layer" not in source
