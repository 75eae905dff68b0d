"""The package as an exercise's graded replay sees it: the reference absent by every route (issue 37).

class                                               test
a removed definition, its subclasses, its imports,
  import-time uses, ``__all__``                     test_strip_removes_a_definition_and_everything_that_needs_it_at_import
bad arguments                                       test_strip_names_its_bad_argument
every module still imports; no route left
  (import, module copy, unbound method, subclass)   test_a_view_without_attention_and_encoder_layers_still_imports
the package's own files, read inside the sandbox    test_inside_the_sandbox_the_package_files_are_the_views
course data of an absent class: data, no methods    test_an_object_of_an_absent_class_arrives_as_data_without_methods
no chapter's solution needs what its view lacks     test_no_solution_names_what_its_exercise_lacks
"""

from __future__ import annotations

import ast
import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from transformer_course.course.view import package_view, strip_modules

ROOT = Path(__file__).resolve().parents[2]


def test_strip_removes_a_definition_and_everything_that_needs_it_at_import():
    sources = {
        "transformer_course.a": ("from __future__ import annotations\n__all__ = ['Base', 'helper', 'keep']\n"
                                 "class Base:\n    def split(self, x):\n        return x\n"
                                 "class Child(Base):\n    pass\n"
                                 "def helper(fn=Base):\n    return fn\n"
                                 "ALIAS = Base\n"
                                 "def keep(x: Base) -> Base:\n    return Base()\n", False),
        "transformer_course.b": ("from .a import Base, keep\nfrom transformer_course.a import Child as Kid\n"
                                 "class Grandchild(Kid):\n    pass\n", False),
    }
    changed, removed = strip_modules(sources, [("transformer_course.a", "Base")])
    assert removed == {("transformer_course.a", n) for n in ("Base", "Child", "helper", "ALIAS")} | {
        ("transformer_course.b", n) for n in ("Base", "Kid", "Grandchild")}
    module_a = ast.parse(changed["transformer_course.a"])
    assert {getattr(n, "name", None) for n in module_a.body} >= {"keep"}
    assert "__all__ = ['keep']" in changed["transformer_course.a"]
    assert "Base" not in changed["transformer_course.a"].replace("return Base()", "").replace("x: Base", "")\
        .replace("-> Base", "")
    assert changed["transformer_course.b"].strip() == "from .a import keep"


def test_strip_names_its_bad_argument():
    with pytest.raises(TypeError, match="absent: expected \\(module, name\\) pairs of strings"):
        strip_modules({}, [("transformer_course.a", 3)])


PROBE = """
import importlib, json, pkgutil, sys
import transformer_course
found = {"failed": [], "bound": [], "copies": []}
for info in pkgutil.walk_packages(transformer_course.__path__, "transformer_course."):
    try:
        module = importlib.import_module(info.name)
    except Exception as error:
        found["failed"].append(f"{info.name}: {error}")
        continue
    found["bound"] += [f"{info.name}.{n}" for n in ("MultiHeadAttention", "EncoderLayer", "DeepNormEncoderLayer")
                       if hasattr(module, n)]
source = pkgutil.get_data("transformer_course.nn", "attention.py").decode()
found["copies"] += ["attention"] if "class MultiHeadAttention" in source else []
source = pkgutil.get_data("transformer_course.nn", "layers.py").decode()
found["copies"] += ["layers"] if "class DeepNormEncoderLayer" in source else []
found["file"] = importlib.import_module("transformer_course.nn.attention").__file__
print(json.dumps(found))
"""

ABSENT = [("transformer_course.nn.attention", "MultiHeadAttention"), ("transformer_course.nn.layers", "EncoderLayer")]


def test_a_view_without_attention_and_encoder_layers_still_imports(tmp_path):
    view, removed = package_view(ABSENT, tmp_path)
    assert ("transformer_course.nn.layers", "DeepNormEncoderLayer") in removed  # a subclass goes with its base
    assert not list(view.rglob("__pycache__")) and not list(view.rglob("*.pyc"))
    env = {"PYTHONPATH": str(tmp_path), "PATH": os.environ.get("PATH", "/usr/bin"), "PYTHONDONTWRITEBYTECODE": "1"}
    result = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=tmp_path, capture_output=True, text=True,
                            timeout=300)
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["failed"] == [] and found["bound"] == [] and found["copies"] == []
    assert found["file"].startswith(str(tmp_path))
    with pytest.raises(ValueError, match="already holds a view"):
        package_view(ABSENT, tmp_path)


needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None and not os.environ.get("CI"),
                                 reason="bubblewrap is not installed (CI installs it: apt-get install bubblewrap)")


@pytest.fixture
def viewed_kernel(tmp_path):
    from transformer_course.course.kernel import Kernel
    from transformer_course.course.sandbox import Limits, kernel_command, kernel_env, restrict

    view, _ = package_view(ABSENT + [("transformer_course.nn.masks", "causal_mask")], tmp_path / "view")
    workdir = tmp_path / "work"
    workdir.mkdir()
    limits = Limits(timeout=60.0)
    kernel = Kernel(kernel_command(limits, workdir, 0, [], view), workdir, kernel_env(workdir),
                    restrict(limits, 300, None))
    kernel.start(time.monotonic() + 120)
    kernel.deadline = time.monotonic() + 120
    yield kernel
    kernel.kill()


@needs_bwrap
def test_inside_the_sandbox_the_package_files_are_the_views(viewed_kernel):
    import transformer_course.nn.masks as masks

    real = str(Path(masks.__file__).resolve())  # the path the grader's own package lives at
    cell = (f"text = open({real!r}).read()\n"
            "import importlib.machinery\n"
            f"loaded = importlib.machinery.SourceFileLoader('copy', {real!r}).load_module()\n"
            "has = hasattr(loaded, 'causal_mask')\n"
            "import subprocess, sys\n"
            "child = subprocess.run([sys.executable, '-c', 'from transformer_course.nn.masks import causal_mask'],"
            " capture_output=True, text=True).stderr")
    assert viewed_kernel.run_cell(cell) is None
    values = viewed_kernel.request(("get", ["text", "has", "child"]))
    assert "def causal_mask" not in values["text"] and "def sliding_window_mask" in values["text"]
    assert values["has"] is False and "cannot import name 'causal_mask'" in values["child"]
    error = viewed_kernel.run_cell("from transformer_course.nn.attention import MultiHeadAttention")
    assert error.startswith("ImportError: cannot import name 'MultiHeadAttention'")


@needs_bwrap
def test_an_object_of_an_absent_class_arrives_as_data_without_methods(viewed_kernel):
    import torch

    from transformer_course.nn.attention import MultiHeadAttention

    module = MultiHeadAttention(d_model=8, num_heads=2)
    buffer = io.BytesIO()
    pickle.dump(module, buffer)
    import base64

    item = {"kind": "blob", "data": base64.b64encode(buffer.getvalue()).decode()}
    assert viewed_kernel.inject("mha", item) is None
    cell = ("weight = mha.q_proj.weight.detach().clone()\n"
            "try:\n    mha(torch.zeros(1, 3, 8))\n    called = 'ran'\nexcept NameError as error:\n"
            "    called = str(error)\n"
            "try:\n    type(mha).split_heads\n    unbound = 'found'\nexcept AttributeError:\n    unbound = 'absent'\n")
    assert viewed_kernel.run_cell("import torch\n" + cell) is None
    values = viewed_kernel.request(("get", ["weight", "called", "unbound"]))
    torch.testing.assert_close(values["weight"], module.q_proj.weight.detach())
    assert values["called"].startswith("MultiHeadAttention is not available while this exercise is graded")
    assert values["unbound"] == "absent"


def test_no_solution_names_what_its_exercise_lacks():
    """An honest answer never needs what its exercise's view lacks (read statically, every chapter)."""
    from transformer_course.course.coursework import nbgrader_metadata, read_chapter
    from transformer_course.course.plans import exercise_plans

    checked = 0
    for notebook in sorted((ROOT / "chapters").glob("dl00*.ipynb")):
        cells = {nbgrader_metadata(c).get("grade_id"): c for c in read_chapter(notebook).cells}
        for plan in exercise_plans(notebook):
            source = "".join(cells[f"{plan.label}-solution"]["source"])
            used = {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)} | \
                   {n.attr for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Attribute)}
            assert not used & {name for _, name in plan.absent}, (plan.label, used & {n for _, n in plan.absent})
            checked += 1
    assert checked >= 30
