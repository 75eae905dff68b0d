"""The static reading of a student's cells for code that could switch the grader's guards off."""

import json
from pathlib import Path

import pytest

from transformer_course.course.tampering import tampering

ROOT = Path(__file__).resolve().parents[2]

TAMPERING = {
    "a guard's closure": ("from transformer_course.nn.masks import causal_mask\n"
                          "f = causal_mask.__closure__[0].cell_contents", "__closure__"),
    "the arming hook rebound": ("import builtins\nbuiltins.__grading_arm__ = lambda s: None", "builtins"),
    "the arming hook shadowed": ("__grading_arm__ = lambda s: None", "__grading_arm__"),
    "a spelled dunder": ("f = getattr(g, '__clo' 'sure__')", "__closure__"),
    "a computed attribute name": ("n = ''.join(['__clo', 'sure__'])\nf = getattr(g, n)", "computed at run time"),
    "attrgetter": ("import operator\nf = operator.attrgetter(n)(g)", "computed at run time"),
    "gc under an alias": ("import gc as collector", "imports gc"),
    "gc by a computed import": ("m = __import__('g' + 'c')", "imports gc"),
    "a module name computed at run time": ("m = __import__(name)", "computed at run time"),
    "reload": ("import importlib as il\nil.reload(m)", "importlib.reload"),
    "reload imported": ("from importlib import reload", "importlib.reload"),
    "a frame": ("import sys\nf = sys._getframe(1).f_locals", "sys._getframe"),
    "inspect frames": ("import inspect\nf = inspect.currentframe()", "inspect.currentframe"),
    "a traceback's frame": ("try:\n    1 / 0\nexcept Exception as e:\n    f = e.__traceback__.tb_frame", "tb_frame"),
    "the shell's transformers": ("get_ipython().ast_transformers.clear()", "ast_transformers"),
    "another magic": ("%run other.py", "%run"),
    "a shell escape": ("!ls", "get_ipython"),
    "gc inside %timeit": ("%timeit import gc", "imports gc (in %timeit)"),
    "gc inside exec": ("exec('import gc')", "imports gc (in the code given to exec)"),
    "code built at run time": ("exec(open(path).read())", "runs code built at run time"),
    "sys.modules changed": ("import sys\ndel sys.modules['transformer_course.nn.masks']", "changes sys.modules"),
    "sys.modules popped": ("import sys\nsys.modules.pop('transformer_course.nn.masks')", "changes sys.modules"),
    "a pipe written": ("import os\nos.write(4, b'frame')", "os.write"),
    "a pipe opened by number": ("open(4, 'wb').write(b'frame')", "not a string literal"),
    "a pipe opened by path": ("open('/proc/self/fd/4', 'wb')", "/proc/"),
    "another process": ("import subprocess", "imports subprocess"),
    "a function rebuilt": ("import types\ng = types.FunctionType(c, {})", "types.FunctionType"),
    "a match on a closure": ("match f:\n    case object(__closure__=c):\n        pass", "__closure__"),
    "the grader's modules": ("from transformer_course.course import kernel", "transformer_course.course"),
}


@pytest.mark.parametrize("name", sorted(TAMPERING))
def test_each_route_into_the_grader_is_found_with_its_line(name):
    source, said = TAMPERING[name]
    found = tampering(source)
    assert found, name
    assert any(said in what for _, what in found), found
    assert all(1 <= line <= source.count("\n") + 1 for line, _ in found)


HONEST = [
    "import torch, math\nimport torch.nn.functional as F\n\ndef f(x):\n    return torch.stack([x]).softmax(-1) * math.sqrt(2)",
    "print('\\n'.join(In))",
    "from IPython.display import display\ndisplay(1)",
    "%%capture\nx = 1",
    "%timeit sum(range(10))",
    "%matplotlib inline",
    "exec('x = 1')",
    "import importlib\nm = importlib.import_module('transformer_course.nn.' + 'masks')",
    "import sys\nm = sys.modules['transformer_course.nn.masks']",
    "f = getattr(torch.nn, 'ReLU')",
    "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)",
    "from transformer_course.course.notebook import setup_notebook, show_source",
    "from transformer_course.course.checks import check_tensor",
    "with open('notes.txt', 'w') as handle:\n    handle.write('x')",
    "code = 'abc'\nprint(code.upper())",
    "this is not python (",
]


@pytest.mark.parametrize("source", HONEST)
def test_honest_cells_are_not_flagged(source):
    assert tampering(source) == []


def test_no_solution_of_the_course_is_flagged():
    """Every solution cell of every chapter (what an honest student writes) reads clean."""
    solutions = 0
    for notebook in sorted((ROOT / "chapters").glob("dl*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
            if cell["cell_type"] == "code" and grade_id.endswith("-solution"):
                solutions += 1
                source = "".join(cell["source"])
                assert tampering(source) == [], (notebook.stem, grade_id)
    assert solutions >= 30


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
