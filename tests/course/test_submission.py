"""Reading a submission: which cells are the course's, and which files are not notebooks at all (issue 37, item 6).

An invalid notebook of any kind (not UTF-8, not JSON, integers of thousands of digits, nesting
too deep, huge outputs) is reported as an invalid notebook, never as a grader error, and is read
in bounded time.
"""

import json
import time

import pytest

INSTALL = ('import subprocess\nCOURSE_REF = "{ref}"  # the commit whose package made the outputs below\n'
           'if "google.colab" in sys.modules:\n    subprocess.run(["pip", "install", COURSE_REF])\n')


def test_an_install_cell_pinned_to_another_commit_is_still_the_courses():
    from transformer_course.course.plans import course_cell_key

    released = course_cell_key(INSTALL.format(ref="30128e4afbe2b48c68b30f0f11867ce5156f123d"))
    assert course_cell_key(INSTALL.format(ref="v2026.12")) == released
    assert course_cell_key("\n" + INSTALL.format(ref="main") + "\n\n") == released


@pytest.mark.parametrize("pin", [
    'COURSE_REF = "main"; import gc',                 # code after the pin
    'COURSE_REF = "main"  # fine\rimport gc',         # a carriage return is a new line to Python
    'COURSE_REF = "ma\\"in"',                          # an escaped quote in the name
    'COURSE_REF = "main" if gc else "x"',             # an expression
    'COURSE_REF = ("main")',
])
def test_only_a_bare_pin_is_normalised_so_no_code_hides_in_it(pin):
    from transformer_course.course.plans import course_cell_key

    released = course_cell_key(INSTALL.format(ref="main"))
    changed = INSTALL.replace('COURSE_REF = "{ref}"  # the commit whose package made the outputs below', pin)
    assert course_cell_key(changed) != released


@pytest.mark.parametrize("text, reason", [
    ('{"cells": [], "x": ' + "9" * 5000 + "}", "invalid notebook: not readable JSON (Exceeds the limit"),
    ('{"cells": ' + "[" * 100_000 + "]" * 100_000 + "}", "invalid notebook: not readable JSON"),
    ("{not json", "invalid notebook: not valid JSON"),
])
def test_a_notebook_json_cannot_read_is_an_invalid_notebook_not_a_grader_error(text, reason):
    from transformer_course.course.plans import InvalidNotebook, read_submission

    with pytest.raises(InvalidNotebook) as caught:
        read_submission(text.encode())
    assert str(caught.value).startswith(reason), str(caught.value)


def test_huge_outputs_deep_metadata_and_a_huge_source_are_read_in_bounded_time():
    from transformer_course.course.plans import InvalidNotebook, read_submission

    outputs = [{"output_type": "stream", "name": "stdout", "text": "x" * 15_000_000}]
    cell = {"cell_type": "code", "source": "a = 1", "metadata": {}, "outputs": outputs, "execution_count": 1}
    start = time.monotonic()
    assert [c["source"] for c in read_submission(json.dumps({"cells": [cell]}).encode())] == ["a = 1"]
    deep = '{"cells": [{"cell_type": "code", "source": "a", "metadata": ' + "[" * 50_000 + "]" * 50_000 + "}]}"
    with pytest.raises(InvalidNotebook, match="invalid notebook: not readable JSON"):
        read_submission(deep.encode())
    assert time.monotonic() - start < 10


def test_an_invalid_notebook_is_a_row_saying_so_not_a_grader_error(tmp_path):
    import jupytext

    from transformer_course.course.grading import grade_notebook

    chapter = tmp_path / "dl9001_coursework_fixture.ipynb"
    fixture = __import__("pathlib").Path(__file__).resolve().parents[1] / "fixtures" / "coursework"
    jupytext.write(jupytext.read(fixture / "dl9001_coursework_fixture.myst.md"), chapter, fmt="ipynb")
    for data in [b'{"cells": [], "x": ' + b"9" * 5000 + b"}", b"[" * 100_000, b"\xff\xfe", b'{"cells": 3}']:
        result = grade_notebook(data, chapter, None)
        assert result.status.startswith("invalid notebook: "), result.status
        assert {e.result for e in result.exercises} == {"not graded"} and len(result.exercises) == 3
