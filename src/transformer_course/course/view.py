"""The package as one exercise's graded replay sees it: without what the exercise asks students to write.

When an exercise asks for a re-implementation of a package function or class (its *references*, read
off the test cell: what the test imports and the solution never names), the exercise is graded in a
kernel whose package is a copy of ``transformer_course`` with those definitions removed from the
source (:func:`package_view`), bound over the package's own folder in the sandbox. Every route to a
removed definition ends there: an import, a module reloaded or loaded again from its file
(``importlib``, ``imp.load_source``, ``pkgutil.get_data``, ``runpy``), a child process, an unbound
method called with a stand-in ``self``, a subclass (a class whose bases need a removed name is
removed too, and so is any top-level statement of the package that needs one when its module is
imported). What the chapter's own cells computed with a removed name reaches the student as data
(see :mod:`~transformer_course.course.grading`): an object of a removed class keeps its parameters
and attributes and loses its methods (:class:`~transformer_course.course.kernel.Absent`).
"""

from __future__ import annotations

import ast
import shutil
from collections.abc import Iterable
from pathlib import Path

PACKAGE = "transformer_course"


def package_folder() -> Path:
    """The folder of the installed package (``.../transformer_course``)."""
    import transformer_course

    return Path(transformer_course.__file__).resolve().parent


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
    return ".".join(base + ([node.module] if node.module else []))


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _import_time_names(node: ast.stmt, lazy_annotations: bool) -> set[str]:
    """The names a top-level statement needs when its module is imported (not inside function bodies)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        parts: list[ast.AST] = [*node.decorator_list, *node.args.defaults,
                                *[d for d in node.args.kw_defaults if d is not None]]
        if not lazy_annotations:
            parts += [a.annotation for a in [*node.args.args, *node.args.kwonlyargs] if a.annotation]
            parts += [node.returns] if node.returns else []
        return set().union(*map(_names, parts)) if parts else set()
    if isinstance(node, ast.ClassDef):
        found = set().union(*map(_names, [*node.bases, *node.keywords, *node.decorator_list]))
        for item in node.body:
            found |= _import_time_names(item, lazy_annotations)
        return found
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return set()
    return _names(node) - {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _bound(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def strip_modules(sources: dict[str, tuple[str, bool]],
                  absent: Iterable[tuple[str, str]]) -> tuple[dict[str, str], set[tuple[str, str]]]:
    """Remove ``absent`` definitions, and every top-level statement that needs one at import time,
    from module sources ``{module: (source, is_package)}``; returns the changed sources and every
    ``(module, name)`` removed (the requested ones, their subclasses, the imports of them)."""
    removed: set[tuple[str, str]] = set()
    for module, name in absent:
        if not isinstance(module, str) or not isinstance(name, str):
            raise TypeError(f"absent: expected (module, name) pairs of strings, got {(module, name)!r}")
        removed.add((module, name))
    trees = {m: ast.parse(s) for m, (s, _) in sources.items()}
    changed: set[str] = set()
    while True:
        grew = False
        for module, tree in trees.items():
            lazy = any(isinstance(n, ast.ImportFrom) and n.module == "__future__" and
                       any(a.name == "annotations" for a in n.names) for n in tree.body)
            gone = {name for m, name in removed if m == module}
            body = []
            for node in tree.body:
                if isinstance(node, ast.ImportFrom):
                    source = _resolve(module, node, sources[module][1])
                    if source.split(".")[0] == PACKAGE:
                        kept = [a for a in node.names if (source, a.name) not in removed]
                        for alias in node.names:
                            if (source, alias.name) in removed and (module, alias.asname or alias.name) not in removed:
                                removed.add((module, alias.asname or alias.name))
                                grew = True
                        if len(kept) != len(node.names):
                            changed.add(module)
                            if not kept:
                                continue
                            node.names = kept
                    body.append(node)
                    continue
                if isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == ["__all__"] \
                        and isinstance(node.value, (ast.List, ast.Tuple)):
                    items = [e for e in node.value.elts if not (isinstance(e, ast.Constant) and e.value in gone)]
                    if len(items) != len(node.value.elts):
                        node.value.elts = items
                        changed.add(module)
                    body.append(node)
                    continue
                names = _bound(node)
                if names & gone or _import_time_names(node, lazy) & gone:
                    for name in names - gone:
                        removed.add((module, name))
                        grew = True
                    gone |= names
                    changed.add(module)
                    continue
                body.append(node)
            tree.body = body or [ast.Pass()]
        if not grew:
            break
    return {m: ast.unparse(trees[m]) for m in changed}, removed


def package_view(absent: Iterable[tuple[str, str]], out: Path) -> tuple[Path, set[tuple[str, str]]]:
    """Write ``out/transformer_course``: the package's files, with ``absent`` removed from its sources
    (see :func:`strip_modules`); returns the folder and what was removed. No bytecode is copied."""
    absent = list(absent)
    root = package_folder()
    target = Path(out) / PACKAGE
    if target.exists():
        raise ValueError(f"out: {out} already holds a view of the package")
    shutil.copytree(root, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    if not absent:
        return target, set()
    sources = {_module_name(p, root): (p.read_text(encoding="utf-8"), p.name == "__init__.py")
               for p in root.rglob("*.py") if "__pycache__" not in p.parts}
    changed, removed = strip_modules(sources, absent)
    for module, text in changed.items():
        parts = module.split(".")[1:]
        path = target.joinpath(*parts, "__init__.py") if sources[module][1] else target.joinpath(*parts[:-1],
                                                                                                  parts[-1] + ".py")
        path.write_text(text + "\n", encoding="utf-8")
    return target, removed
