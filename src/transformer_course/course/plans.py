"""What is graded: each exercise's plan (from the instructor's notebook), and the student's cells.

An exercise's plan says which package names its graded replay must not reach
(:attr:`ExercisePlan.absent`, removed from the kernel's view of the package by
:mod:`~transformer_course.course.view`): the *references* (what the test imports and the solution
never names: the functions and classes the exercise asks students to write), and every other
public function of ``nn``, ``measure`` and ``experiments`` that neither the solution, nor the test,
nor the package's classes use (another function that would compute the answer). Copies of the
package's source are a separate, static question, answered for the instructor only:
:func:`copied_references` compares the normalised AST of each function a student wrote with those
of the references. Library calls an exercise puts off limits (PyTorch's ``F.layer_norm`` where the
student is to write a layer norm) cannot be taken out of reach, since the student's code needs
PyTorch: :func:`forbidden_library_names` reads them from the test cell's ``check_no_shortcut`` and
:func:`library_calls` finds them in the student's code, a flag for the instructor, not a score.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformer_course.course.coursework import bound_names, cell_source, free_names, nbgrader_metadata, read_chapter



@dataclass(frozen=True)
class ExercisePlan:
    """What the grader needs of one exercise.

    Attributes:
        parts: the test cell split into (code, hidden) pieces, in order.
        names: the names the test cell takes from the student's notebook.
        answers: the names the exercise asks for (read by the test, bound by the solution).
        references: package names the answers must not be computed with.
        targets: where those names live, ``(module, name)``: what the kernel guards.
        allowed: every identifier the solution and the test cell use.
        absent: what the exercise's graded replay cannot reach, ``(module, name)``: the targets,
            and the package functions nothing allowed needs (see :func:`absent_names`).
    """

    label: str
    title: str
    max_points: float
    parts: tuple[tuple[str, bool], ...]
    names: tuple[str, ...]
    answers: tuple[str, ...]
    references: tuple[str, ...]
    targets: tuple[tuple[str, str], ...] = ()
    allowed: tuple[str, ...] = ()
    absent: tuple[tuple[str, str], ...] = ()
    forbidden: tuple[str, ...] = ()  # library names off limits (flagged, not removed): "layer_norm", "LayerNorm"


_HIDDEN = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS[^\n]*\n(.*?)^[ \t]*### END HIDDEN TESTS[^\n]*(?:\n|$)",
                     re.DOTALL | re.MULTILINE)


def split_hidden(source: str) -> list[tuple[str, bool]]:
    """A test cell as [(code, is_hidden), ...]: visible code and hidden-test regions, in order."""
    parts, position = [], 0
    for match in _HIDDEN.finditer(source):
        parts.append((source[position:match.start()], False))
        parts.append((match.group(1), True))
        position = match.end()
    parts.append((source[position:], False))
    return [(code, hidden) for code, hidden in parts if code.strip()]


def _identifiers(node: ast.AST) -> set[str]:
    """Every name and attribute a node mentions (``a.b(c)`` -> {"a", "b", "c"})."""
    return {c.id if isinstance(c, ast.Name) else c.attr for c in ast.walk(node)
            if isinstance(c, (ast.Name, ast.Attribute))}


def _used_names(source: str) -> set[str]:
    """Every identifier a cell mentions: names, attributes and imported names."""
    try:
        tree = ast.parse(python_source(source))
    except SyntaxError:
        return set()
    imported = {part for node in ast.walk(tree) if isinstance(node, ast.alias) for part in node.name.split(".")}
    return _identifiers(tree) | imported


def python_source(source: str) -> str:
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(source)


def _reference_names(test_source: str, solution_source: str) -> set[tuple[str, str]]:
    """Package names the test imports (not modules, not the checks) that the reference solution avoids,
    as ``(module, name)``."""
    import importlib

    names = set()
    for node in ast.walk(ast.parse(test_source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("transformer_course") \
                and node.module.rsplit(".", 1)[-1] != "checks":
            try:
                module = importlib.import_module(node.module)
            except ImportError:
                continue
            for alias in node.names:
                try:
                    importlib.import_module(f"{node.module}.{alias.name}")
                except ImportError:
                    if not inspect.ismodule(getattr(module, alias.name, None)):
                        names.add((node.module, alias.name))
    used = _used_names(solution_source)
    return {(module, name) for module, name in names if name not in used}


def exercise_plans(instructor_notebook: Path) -> list[ExercisePlan]:
    """Read each exercise's title, points, test cell and reference names from the instructor notebook."""
    chapter = read_chapter(instructor_notebook)
    cells = {nbgrader_metadata(c).get("grade_id"): c for c in chapter.cells}
    plans = []
    for exercise in chapter.exercises:
        test = cell_source(cells.get(f"{exercise.label}-tests", {}))
        solution = cell_source(cells.get(f"{exercise.label}-solution", {}))
        parts = split_hidden(test)
        targets = tuple(sorted(_reference_names(test, solution)))
        allowed = tuple(sorted(_used_names(test) | _used_names(solution)))
        plans.append(ExercisePlan(
            label=exercise.label, title=exercise.title, max_points=float(exercise.test_points or 0),
            parts=tuple(parts), names=tuple(sorted(free_names(test))),
            answers=tuple(sorted(free_names(test) & bound_names(ast.parse(solution)))),
            references=tuple(sorted({name for _, name in targets})), targets=targets, allowed=allowed,
            absent=absent_names(targets, set(allowed)), forbidden=forbidden_library_names(test)))
    return plans


def forbidden_library_names(test_source: str) -> tuple[str, ...]:
    """The library callables a test cell's ``check_no_shortcut`` names, as their last attribute
    (``F.layer_norm`` -> ``"layer_norm"``): dotted names whose root is not imported from the package."""
    tree = ast.parse(test_source)
    package = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               and (node.module or "").startswith("transformer_course") for alias in node.names}
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "check_no_shortcut":
            for argument in node.args[2:]:
                root = argument
                while isinstance(root, ast.Attribute):
                    root = root.value
                if isinstance(argument, ast.Attribute) and isinstance(root, ast.Name) and root.id not in package:
                    names.add(argument.attr)
    return tuple(sorted(names))


def library_calls(sources: list[str], forbidden: tuple[str, ...]) -> list[str]:
    """Which of ``forbidden`` the student's code names: as an attribute (``F.layer_norm``), an imported
    name (``from torch.nn.functional import layer_norm``) or a string (``getattr(F, "layer_norm")``).

    A static reading, so a name assembled at run time escapes it: the grader reports what it finds
    for the instructor to review and does not change the score.
    """
    found = set()
    for source in sources:
        tree = _parse_cell(source)
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Attribute):
                name = node.attr
            elif isinstance(node, ast.alias):
                name = node.name.rsplit(".", 1)[-1]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                name = node.value
            else:
                continue
            if name in forbidden:
                found.add(name)
    return sorted(found)


WATCHED_PACKAGES = ("transformer_course.nn", "transformer_course.measure", "transformer_course.experiments")
"""Subpackages whose public functions an exercise's replay lacks unless something allowed needs them."""


@functools.lru_cache(maxsize=1)
def _package_definitions() -> dict[tuple[str, str], frozenset[str]]:
    """Every top-level function and class of the package, ``(module, name)``, with the identifiers
    its body uses (read from the source, not imported)."""
    from transformer_course.course.view import _module_name, package_folder

    root = package_folder()
    found = {}
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        module = _module_name(path, root)
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found[(module, node.name)] = frozenset(_identifiers(node))
    return found


def absent_names(targets: tuple[tuple[str, str], ...], allowed: set[str]) -> tuple[tuple[str, str], ...]:
    """What an exercise's replay lacks: ``targets``, and each public function of
    :data:`WATCHED_PACKAGES` that no allowed name, no class and no kept function uses (by name)."""
    definitions = _package_definitions()
    kept = {key for key in definitions if key[1] in allowed or (
        not key[0].startswith(WATCHED_PACKAGES) or key[1].startswith("_") or
        isinstance(key, tuple) and key[1][:1].isupper())} - set(targets)
    todo = list(kept)
    by_name: dict[str, list[tuple[str, str]]] = {}
    for key in definitions:
        by_name.setdefault(key[1], []).append(key)
    while todo:
        for name in definitions[todo.pop()]:
            for key in by_name.get(name, ()):
                if key not in kept and key not in targets:
                    kept.add(key)
                    todo.append(key)
    return tuple(sorted(set(targets) | (set(definitions) - kept)))


# --- the student's notebook ---------------------------------------------------------------------

class InvalidNotebook(Exception):
    """The submission is not a notebook the grader can run."""


def read_submission(data: bytes | Path) -> list[dict[str, Any]]:
    """The student's code cells ({source, grade_id, test}); raises InvalidNotebook with a reason."""
    try:
        text = (data.read_bytes() if isinstance(data, Path) else data).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidNotebook("invalid notebook: the file is not UTF-8 text") from None
    try:
        notebook = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidNotebook(f"invalid notebook: not valid JSON ({error.msg} at line {error.lineno}, "
                              f"column {error.colno})") from None
    except (ValueError, RecursionError) as error:  # an integer of thousands of digits, nesting too deep
        raise InvalidNotebook(f"invalid notebook: not readable JSON ({str(error).split(':')[0][:100]})") from None
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        raise InvalidNotebook("invalid notebook: no list of cells")
    code = []
    for index, cell in enumerate(notebook["cells"]):
        if not isinstance(cell, dict):
            raise InvalidNotebook(f"invalid notebook: cell {index} is not a cell")
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list) and all(isinstance(s, str) for s in source):
            source = "".join(source)
        if not isinstance(source, str):
            raise InvalidNotebook(f"invalid notebook: cell {index} has no readable source")
        meta = cell.get("metadata") if isinstance(cell.get("metadata"), dict) else {}
        grading = meta.get("nbgrader") if isinstance(meta.get("nbgrader"), dict) else {}
        grade_id = grading.get("grade_id") if isinstance(grading.get("grade_id"), str) else ""
        code.append({"source": source, "grade_id": grade_id, "index": index,
                     "test": bool(grading.get("grade")) or grade_id.endswith("-tests")})
    if not code:
        raise InvalidNotebook("invalid notebook: it has no code cells")
    return code


def anchors(cells: list[dict[str, Any]], plans: list[ExercisePlan]) -> list[tuple[ExercisePlan, int | None]]:
    """Where each exercise is checked: after its test cell, else its solution cell (cell positions)."""
    by_id = {c["grade_id"]: i for i, c in enumerate(cells) if c["grade_id"]}
    anchored = []
    for plan in plans:
        position = by_id.get(f"{plan.label}-tests", by_id.get(f"{plan.label}-solution"))
        anchored.append((plan, position))
    found = sorted((p for p in anchored if p[1] is not None), key=lambda p: p[1])
    return found + [p for p in anchored if p[1] is None]




# --- copies of the reference source -------------------------------------------------------------

PLAGIARISM_MIN_NODES = 40
"""Functions smaller than this (in AST nodes) are not compared: a one-liner has few ways to be written."""


class _Normalise(ast.NodeTransformer):
    """Rename every local name to its order of first appearance; drop docstrings and annotations."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def _name(self, name: str) -> str:
        return self.names.setdefault(name, f"v{len(self.names)}")

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.name = "f"
        node.returns = None
        node.decorator_list = []
        if node.body and isinstance(node.body[0], ast.Expr) and isinstance(getattr(node.body[0], "value", None),
                                                                            ast.Constant) \
                and isinstance(node.body[0].value.value, str):
            node.body = node.body[1:] or [ast.Pass()]
        self.generic_visit(node)
        return node

    def visit_arg(self, node: ast.arg) -> ast.AST:
        node.arg = self._name(node.arg)
        node.annotation = None
        return node

    def visit_Name(self, node: ast.Name) -> ast.AST:
        node.id = self._name(node.id)
        return node


def _fingerprint(function: ast.FunctionDef) -> tuple[str, int] | None:
    copy = ast.parse(ast.unparse(function)).body[0]
    normal = _Normalise().visit(copy)
    size = sum(1 for _ in ast.walk(normal))
    if size < PLAGIARISM_MIN_NODES:
        return None
    return hashlib.sha256(ast.dump(normal, annotate_fields=False).encode()).hexdigest(), size


def reference_fingerprints(targets: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """Normalised-AST fingerprint -> reference name, for each reference function and each method of a
    reference class."""
    import importlib
    import textwrap

    found = {}
    for module_name, name in targets:
        try:
            obj = getattr(importlib.import_module(module_name), name)
            tree = ast.parse(textwrap.dedent(inspect.getsource(obj)))
        except (ImportError, AttributeError, OSError, TypeError, SyntaxError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                fingerprint = _fingerprint(node)
                if fingerprint:
                    found[fingerprint[0]] = name
    return found


MAX_PARSED_CELL = 200_000
"""Characters: a longer cell is never parsed for copies (parsing is not free)."""


def _parse_cell(source: str) -> ast.Module | None:
    if len(source) > MAX_PARSED_CELL:
        return None
    try:
        return ast.parse(python_source(source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def copied_references(sources: list[str], fingerprints: dict[str, str]) -> dict[str, str]:
    """The student's functions that copy a reference's source (up to names, docstrings and
    annotations): {the student's function name: the reference's name}."""
    copied = {}
    for source in sources:
        tree = _parse_cell(source)
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                fingerprint = _fingerprint(node)
                if fingerprint and fingerprint[0] in fingerprints:
                    copied[node.name] = fingerprints[fingerprint[0]]
    return copied


PINNED_REF = re.compile(r'^COURSE_REF = "[0-9A-Za-z._/-]{1,100}"(?:[ \t]+#[^\r\n]*)?$', re.MULTILINE)
"""An install cell's pin: ``COURSE_REF = "<commit or tag>"``, an optional comment, nothing else on the line."""


def course_cell_key(source: str) -> str:
    """A code cell's source as the grader matches it against the released version's cells.

    Stripped, with the install cell's pinned package reference replaced by a placeholder: the student
    notebook a student opened (the site's student edition, or the instructor's release) may pin
    another commit of the package than the release the grader holds, and it is still the course's
    cell. Only a line that is exactly a pin (a name of letters, digits, ``._/-``, then at most a
    comment; a carriage return counts as a new line, as it does for Python) is replaced, so no
    code can hide in it; that value is only read in Colab, never in the grading sandbox.
    """
    return PINNED_REF.sub('COURSE_REF = "..."', source.strip())


def released_sources(released_notebook: Path | None) -> set[str]:
    """The code cells of the student version, as :func:`course_cell_key`: cells a student did not write."""
    if released_notebook is None or not released_notebook.is_file():
        return set()
    notebook = json.loads(released_notebook.read_text(encoding="utf-8"))
    sources = set()
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") == "code":
            source = cell.get("source", "")
            source = "".join(source) if isinstance(source, list) else source
            if "NotImplementedError" not in source:
                sources.add(course_cell_key(source))
    return sources
