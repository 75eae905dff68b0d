"""Static detection of code that reaches into the grader's machinery.

The reference guards (:mod:`~transformer_course.course.kernel`) live in the student's own process, as
every Python-level hook must: a cell that reaches a guard's closure, the kernel's frames, the
garbage collector's view of objects, the arming hook or IPython's transformers can switch them off
without calling the reference. No exercise of the course needs any of that, so the grader reads every
cell the student wrote before running anything, and :func:`tampering` lists the constructs that could
(with the line they are on). Grading flags every exercise from such a cell on, with the reason.

What counts (by class; each entry says why):

* names and attributes that open a function's or a frame's insides (``__closure__``, ``cell_contents``,
  ``__code__``, ``__globals__``, ``f_back``, ``tb_frame``, ...), the grader's own names
  (``__grading_*``), ``__builtins__``;
* modules that see or change other objects behind their names (``gc``, ``ctypes``, ``builtins``,
  ``runpy``, ``IPython`` but its ``display``, the grader's ``transformer_course.course`` but
  its ``notebook`` and ``checks``) or start other processes
  (``subprocess``, ``multiprocessing``, ``os.system``, ``os.fork``, ...), and the frame, tracing and
  import-system hooks of ``sys``, ``inspect`` and ``importlib`` (``importlib.reload`` included);
* changes to ``sys.modules``;
* ``get_ipython()``, except the transforms IPython itself writes for the harmless magics
  (``%time``, ``%timeit``, ``%%capture``, ``%matplotlib``), whose code is checked in turn, and the
  shell escapes (``!cmd``) and every other magic;
* a file opened by a name that is not a literal (a number would be one of the kernel's pipes) or
  under ``/proc`` or ``/dev/fd``;
* code built at run time: ``exec``/``eval``/``compile`` of anything but a string literal (whose code
  is checked in turn), and an attribute or module name that is not a literal (``getattr(f, name)``);
  a literal string that spells one of the names above counts too (``getattr(f, "__clo" "sure__")``).

A static reading cannot be complete in a language as dynamic as Python; together with the kernel's
own check that its hooks are still in place after every cell, it closes every route the course's
attack tests know (``tests/course/test_grading_attacks.py``).
"""

from __future__ import annotations

import ast

INSIDES = frozenset({
    "__closure__", "cell_contents", "__code__", "__globals__", "__builtins__", "__wrapped__", "__subclasses__",
    "__getattribute__", "__defaults__", "__kwdefaults__", "__self__", "__func__", "__loader__", "__spec__",
    "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "f_trace", "tb_frame", "gi_frame", "cr_frame",
    "ag_frame", "gi_code", "cr_code", "ag_code",
    "ast_transformers", "input_transformers_cleanup", "input_transformers_post", "input_transformer_manager",
    "set_custom_exc", "register_magic_function", "register_magics", "user_ns", "user_global_ns",
})
"""Attribute (and name) spellings that open a function, a frame or the IPython shell."""

MODULES = frozenset({"gc", "ctypes", "_ctypes", "builtins", "runpy", "subprocess", "multiprocessing",
                     "concurrent", "pty", "IPython", "traitlets", "ipykernel", "code", "codeop", "marshal",
                     "_thread", "sys.monitoring", "transformer_course.course"})
"""Modules (and their submodules) a graded notebook has no reason to import."""

MEMBERS = frozenset({
    "sys._getframe", "sys.settrace", "sys.setprofile", "sys.addaudithook", "sys.meta_path", "sys.path_hooks",
    "sys.path_importer_cache", "sys.monitoring", "sys._current_frames", "sys.exc_info", "sys.exception",
    "sys.last_traceback", "sys.last_value",
    "inspect.currentframe", "inspect.stack", "inspect.trace", "inspect.getouterframes", "inspect.getinnerframes",
    "inspect.getclosurevars", "inspect.unwrap", "inspect.getsource", "inspect.getsourcelines",
    "inspect.getsourcefile", "inspect.getfile", "inspect.getmodule", "inspect.getmembers",
    "importlib.reload", "importlib.util", "importlib.machinery", "importlib.abc", "importlib.resources",
    "os.system", "os.popen", "os.fork", "os.forkpty", "os.execv", "os.execve", "os.execl", "os.execle",
    "os.execlp", "os.execlpe", "os.execvp", "os.execvpe", "os.spawnl", "os.spawnle", "os.spawnlp", "os.spawnlpe",
    "os.spawnv", "os.spawnve", "os.spawnvp", "os.spawnvpe", "os.posix_spawn", "os.posix_spawnp", "os.kill",
    "os.killpg", "os.dup2", "os.close", "os.closerange", "os.write",
    "types.FunctionType", "types.CodeType", "types.CellType", "types.LambdaType", "types.FrameType",
})
"""Dotted members (through any alias of the module) that reach frames, hooks, sources or processes."""

MAGICS = frozenset({"time", "timeit", "capture", "matplotlib"})
"""IPython magics a graded cell may use; the code they run is checked too."""

CODE_BUILDERS = frozenset({"exec", "eval", "compile"})
ATTRIBUTE_TAKERS = frozenset({"getattr", "setattr", "delattr", "attrgetter", "methodcaller"})
OPENERS = frozenset({"open", "io.open", "io.FileIO", "os.open", "os.fdopen", "pathlib.Path", "Path"})
"""Callables that open a file: its name must be a literal (a number would be one of the kernel's pipes)."""
ALLOWED_MODULES = frozenset({"IPython.display", "IPython.core.display", "transformer_course.course.notebook",
                             "transformer_course.course.checks"})
"""Submodules of the above that are harmless: showing things, the chapter's set-up, the checks' own helpers."""
PLACES = ("/proc/", "/dev/fd")
"""Paths that lead to the kernel's own pipes and memory."""
MODULE_TAKERS = frozenset({"__import__", "import_module"})
SYS_MODULES_CHANGES = frozenset({"pop", "popitem", "clear", "update", "setdefault", "__setitem__", "__delitem__"})


def _literal(node: ast.AST) -> str | None:
    """The string a node always evaluates to (a literal, a sum or f-string of literals), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _literal(node.left), _literal(node.right)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.JoinedStr):
        parts = [_literal(v) for v in node.values]
        return None if any(p is None for p in parts) else "".join(parts)
    return None


def _denied_module(name: str) -> bool:
    if any(name == m or name.startswith(m + ".") for m in ALLOWED_MODULES):
        return False
    return any(name == m or name.startswith(m + ".") for m in MODULES)


def _spells_a_secret(text: str) -> str | None:
    if "__grading" in text:
        return "__grading"
    for place in PLACES:
        if place in text:
            return place
    for word in INSIDES:
        if word in text:
            return word
    for member in MEMBERS:
        if member.split(".", 1)[1] in text and member.split(".", 1)[1].startswith("_"):
            return member
    return None


class _Reader(ast.NodeVisitor):
    """Walks one cell's (IPython-transformed) tree and collects the findings with their lines."""

    def __init__(self) -> None:
        self.aliases: dict[str, str] = {}  # local name -> the module or member it stands for
        self.found: list[tuple[int, str]] = []

    def say(self, node: ast.AST, what: str) -> None:
        self.found.append((getattr(node, "lineno", 0), what))

    def dotted(self, node: ast.AST) -> str | None:
        """``a.b.c`` with ``a`` resolved through the cell's imports, else None."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = self.dotted(node.value)
            return None if base is None else f"{base}.{node.attr}"
        return None

    def imported(self, node: ast.AST, module: str) -> None:
        if _denied_module(module):
            self.say(node, f"imports {module}")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.imported(node, alias.name)
            self.aliases[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else \
                alias.name.split(".")[0]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        self.imported(node, module)
        for alias in node.names:
            full = f"{module}.{alias.name}"
            self.imported(node, full)
            if full in MEMBERS or alias.name in INSIDES:
                self.say(node, f"imports {full}")
            self.aliases[alias.asname or alias.name] = full

    def visit_Name(self, node: ast.Name) -> None:
        if node.id.startswith("__grading") or node.id in INSIDES:
            self.say(node, f"uses {node.id}")
        elif node.id == "get_ipython":
            self.say(node, "uses get_ipython() (the shell that runs the grader's checks)")
        resolved = self.aliases.get(node.id)
        if resolved and resolved in MEMBERS:
            self.say(node, f"uses {resolved}")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr.startswith("__grading") or node.attr in INSIDES:
            self.say(node, f"uses .{node.attr}")
        dotted = self.dotted(node)
        if dotted is not None and dotted in MEMBERS:
            self.say(node, f"uses {dotted}")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            secret = _spells_a_secret(node.value)
            if secret:
                self.say(node, f"spells {secret} in a string")

    def visit_MatchClass(self, node: ast.MatchClass) -> None:
        for attribute in node.kwd_attrs:
            if attribute in INSIDES:
                self.say(node, f"matches on .{attribute}")
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if self.dotted(node.value) == "sys.modules":
            key = _literal(node.slice)
            if not isinstance(node.ctx, ast.Load):
                self.say(node, "changes sys.modules")
            elif key is None:
                self.say(node, "looks up sys.modules with a name computed at run time")
            elif _denied_module(key):
                self.say(node, f"takes {key} from sys.modules")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        function = self.dotted(node.func)
        name = function.rsplit(".", 1)[-1] if function else None
        if self._magic(node):
            return
        if name in CODE_BUILDERS and function in (name, f"builtins.{name}"):
            source = _literal(node.args[0]) if node.args else None
            if source is None:
                self.say(node, f"runs code built at run time ({name} of something that is not a string literal)")
            else:
                for line, what in tampering(source):
                    self.say(node, f"{what} (in the code given to {name})")
        if name in ATTRIBUTE_TAKERS and len(node.args) >= (1 if name in ("attrgetter", "methodcaller") else 2):
            argument = node.args[0] if name in ("attrgetter", "methodcaller") else node.args[1]
            if _literal(argument) is None:
                self.say(node, f"takes an attribute whose name is computed at run time ({name})")
        if function in OPENERS and node.args and _literal(node.args[0]) is None:
            self.say(node, f"opens a file whose name is not a string literal ({function})")
        if name in MODULE_TAKERS and node.args:
            module = _literal(node.args[0])
            if module is None:
                self.say(node, f"imports a module whose name is computed at run time ({name})")
            else:
                self.imported(node, module)
        if isinstance(node.func, ast.Attribute) and node.func.attr in SYS_MODULES_CHANGES \
                and self.dotted(node.func.value) == "sys.modules":
            self.say(node, "changes sys.modules")
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            if isinstance(target, ast.Subscript) and self.dotted(target.value) == "sys.modules":
                self.say(node, "changes sys.modules")
        self.generic_visit(node)

    def _magic(self, node: ast.Call) -> bool:
        """A call IPython wrote for an allowed magic: check its code, and say it was handled."""
        func = node.func
        if not (isinstance(func, ast.Attribute) and func.attr in ("run_line_magic", "run_cell_magic")
                and isinstance(func.value, ast.Call) and isinstance(func.value.func, ast.Name)
                and func.value.func.id == "get_ipython" and node.args):
            return False
        magic = _literal(node.args[0])
        if magic not in MAGICS:
            self.say(node, f"uses the magic %{magic}" if magic else "uses a magic")
            return True
        code = [_literal(a) for a in node.args[1:]]
        if any(c is None for c in code):
            self.say(node, f"passes code built at run time to %{magic}")
            return True
        for text in code:
            for line, what in tampering(text):
                self.say(node, f"{what} (in %{magic})")
        return True


def tampering(source: str) -> list[tuple[int, str]]:
    """What in one cell could switch off the grader's guards: ``[(line, what), ...]``, empty if nothing.

    The cell is read as IPython runs it (magics and shell escapes transformed first). A cell that does
    not parse finds nothing here: it raises ``SyntaxError`` in the kernel before it runs.
    """
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        tree = ast.parse(TransformerManager().transform_cell(source))
    except (SyntaxError, ValueError):
        try:  # a plain-Python reading, in case IPython's transforms choke on it
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            return []
    reader = _Reader()
    reader.visit(tree)
    return sorted(set(reader.found))
