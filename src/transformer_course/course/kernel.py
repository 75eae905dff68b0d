"""The kernel protocol: the student's process (the kernel) and the grader's view of it.

The kernel runs the student's cells in an IPython shell inside the sandbox and answers requests on
its stdin/stdout (8-byte length, then a payload). Replies are plain data read with PyTorch's safe
loader; a value that is not plain data stays in the kernel as a handle (:class:`RemoteObject`), and
calling it runs it there. Everything on the kernel side is untrusted as soon as a student cell ran.

**Guards.** Before the first cell, the kernel replaces the package functions that the chapter's
exercises ask students to write (the *references*) by guards, in every loaded ``transformer_course``
module, and patches the references that are classes in place (``__init__``, ``forward``). A guard
calls the original and, while *armed*, records its name. The grader arms the statements of the
student's cells that make an answer (and every statement that binds names dynamically), and the kernel
arms itself while the grader's checks call into the student's code. Every reply carries the names
recorded since the last one, however the student reached the function (``importlib``, ``__import__``,
``sys.modules``, ``exec``, ``globals()``, another cell, a package object handed over by a test).
Every other public function and class of the package's ``nn``, ``measure`` and ``experiments`` is
watched too: a function called, or a class built, from outside the package while armed is recorded
as ``"<package>module:qualname"``, and the grader flags an answer computed with a package function
or class that the exercise's solution and tests never name (another function that computes the same
thing). Methods of those classes are not watched, so an object a test hands over can be used.

**Integrity.** Every request carries a fresh random token and every reply must echo it, so a frame a
student's cell writes into the pipe is refused as out of turn. Before every reply the kernel checks
that its hooks are still in place (the arming hook, the shell's transformer, every guard) and reports
what changed; the grader flags the exercises from there on. Both back up the static reading of the
student's cells (:mod:`~transformer_course.course.tampering`), which flags such cells before they run.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import functools
import io
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import time
import types
import warnings
from pathlib import Path
from typing import Any

GRADER_MODULE = "__grader__"
"""``__name__`` of the namespace in which test cells run (their lambdas are called back, not sent)."""

MAX_FRAME = 256 * 2**20
"""Largest reply the grader reads from a kernel, in bytes."""


# --- framing: 8-byte length, then the payload ---------------------------------------------------

class KernelGone(Exception):
    """The kernel died, overran its deadline, or sent something unreadable."""

    def __init__(self, reason: str, timed_out: bool = False) -> None:
        super().__init__(reason)
        self.timed_out = timed_out


class KernelTimeout(BaseException):
    """Raised through test code (which may catch ``Exception``) when the kernel overruns."""


def _write_frame(fd: int, payload: bytes) -> None:
    data = struct.pack("<Q", len(payload)) + payload
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _read_exact(fd: int, size: int, deadline: float | None) -> bytes:
    chunks, remaining = [], size
    while remaining:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise KernelGone("deadline", timed_out=True)
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                raise KernelGone("deadline", timed_out=True)
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise KernelGone("the notebook's process stopped")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _read_frame(fd: int, deadline: float | None) -> bytes:
    (size,) = struct.unpack("<Q", _read_exact(fd, 8, deadline))
    if size > MAX_FRAME:
        raise KernelGone(f"the notebook's process sent {size:,} bytes (more than {MAX_FRAME:,})")
    return _read_exact(fd, size, deadline)


# --- the kernel side (runs the student's code; everything here is untrusted once a cell ran) ---

def _encode(value: Any, handles: dict[int, Any], depth: int = 0) -> Any:
    """A value as plain data for ``torch.save``; objects that are not data become handles."""
    import torch

    if value is None or type(value) in (bool, int, float, str):
        return value
    if depth > 20:
        return _handle(value, handles)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, torch.Tensor) and value.layout == torch.strided and value.device.type != "meta":
        return value.detach().cpu().as_subclass(torch.Tensor).clone()
    if type(value).__module__ == "numpy":
        import numpy as np

        if isinstance(value, np.ndarray) and value.dtype != object:
            return {"__numpy__": torch.from_numpy(np.array(value))}
        if isinstance(value, np.generic):
            return _encode(value.item(), handles, depth + 1)
    if isinstance(value, int):
        return int(value)  # a subclass (an IntEnum, a NumPy-like int) becomes a plain int
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, (list, tuple)) and len(value) <= 100_000:
        items = [_encode(v, handles, depth + 1) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict) and len(value) <= 100_000 and \
            all(type(k) in (str, int, float, bool) or k is None for k in value):
        return {k: _encode(v, handles, depth + 1) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return {"__set__": [_encode(v, handles, depth + 1) for v in value]}
    if isinstance(value, range):
        return {"__range__": [value.start, value.stop, value.step]}
    if isinstance(value, torch.dtype):
        return {"__dtype__": str(value).removeprefix("torch.")}
    return _handle(value, handles)


def code_print(function: Any) -> str | None:
    """A hash of a function's bytecode and the names it uses (not its own name, variable names,
    docstring or line numbers), nested functions included: equal for a copy of the source."""
    import hashlib

    code = getattr(function, "__code__", None)
    if not isinstance(code, types.CodeType):
        return None
    digest = hashlib.sha256()
    todo = [code]
    while todo:
        current = todo.pop()
        digest.update(current.co_code)
        digest.update(repr(current.co_names).encode())
        todo.extend(c for c in current.co_consts if isinstance(c, types.CodeType))
    return digest.hexdigest()


def _handle(value: Any, handles: dict[int, Any]) -> dict[str, Any]:
    key = len(handles)
    handles[key] = value
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 (a student's __repr__ may raise)
        text = f"<{type(value).__name__}>"
    try:
        printed = code_print(value) if isinstance(value, types.FunctionType) else None
    except Exception:  # noqa: BLE001
        printed = None
    return {"__remote__": key, "type": type(value).__name__, "callable": callable(value),
            "repr": text[:200], "code": printed}


WATCHED_PACKAGES = ("transformer_course.nn", "transformer_course.measure", "transformer_course.experiments")
"""Subpackages whose every public function and method the kernel watches (imported whole at its start)."""

PACKAGE_HIT = "<package>"
"""Prefix of a hit that names a watched function reached from outside the package:
``"<package>module:qualname"`` (a reference's hit is its bare name)."""


def _install_guards(targets: list[tuple[str, str]], state: dict[str, Any]) -> list[tuple[Any, str, Any]]:
    """Replace each reference ``module.name`` by a guard that records its name while armed, and every
    other public function (and class ``__init__``) of :data:`WATCHED_PACKAGES` by one that records
    ``"<package>module:qualname"`` when it is entered from outside the package (not from another
    watched function) while armed. Return where each guard went, ``(module or class, attribute, guard)``,
    for :func:`_broken_hooks`."""
    import importlib
    import pkgutil

    def wrap(original: Any, name: str, always: bool) -> Any:
        @functools.wraps(original)
        def guard(*args: Any, **kwargs: Any) -> Any:
            if state["armed"] and (always or not state["depth"]):
                state["hits"].add(name)
            state["depth"] += 1
            try:
                return original(*args, **kwargs)
            finally:
                state["depth"] -= 1

        del guard.__wrapped__
        return guard

    for package in WATCHED_PACKAGES:
        with contextlib.suppress(Exception):
            root = importlib.import_module(package)
            for info in pkgutil.walk_packages(root.__path__, package + "."):
                with contextlib.suppress(Exception):  # a module that does not import is not watched
                    importlib.import_module(info.name)
    modules = [(n, m) for n, m in list(sys.modules.items()) if n.split(".")[0] == "transformer_course" and m is not None]
    where: dict[int, list[tuple[Any, str]]] = {}  # id(object) -> every (module, name) bound to it
    for _, module in modules:
        for key, value in list(vars(module).items()):
            if callable(value):
                where.setdefault(id(value), []).append((module, key))
    installed: list[tuple[Any, str, Any]] = []
    done: set[tuple[int, str]] = set()

    def patch_class(cls: type, attributes: Any, name: str | None) -> None:
        for attribute in attributes:
            member = vars(cls).get(attribute)
            if not isinstance(member, types.FunctionType) or (id(cls), attribute) in done:
                continue
            label = name or f"{PACKAGE_HIT}{cls.__module__}:{cls.__qualname__}.{attribute}"
            setattr(cls, attribute, wrap(member, label, always=name is not None))
            installed.append((cls, attribute, vars(cls)[attribute]))
            done.add((id(cls), attribute))

    def patch_function(function: Any, label: str, always: bool) -> None:
        if (id(function), "") in done:
            return
        guard = wrap(function, label, always)
        done.add((id(function), ""))
        for module, key in where.get(id(function), ()):
            setattr(module, key, guard)
            installed.append((module, key, guard))

    for module_name, name in targets:  # the references first: recorded however deep the call
        try:
            obj = getattr(importlib.import_module(module_name), name)
        except Exception:  # noqa: BLE001 (a reference that does not import is simply not guarded)
            continue
        if isinstance(obj, type):  # a class: patched in place, so that every path to it is guarded
            patch_class(obj, ("__init__", "forward", "__call__"), name)
        elif callable(obj):
            patch_function(obj, name, always=True)
    for module_name, module in modules:
        if not module_name.startswith(WATCHED_PACKAGES):
            continue
        for key, value in list(vars(module).items()):
            if key.startswith("_") or getattr(value, "__module__", None) != module_name:
                continue
            if isinstance(value, type):  # built by the student's answer (an object a test hands over is not)
                patch_class(value, ("__init__",), None)
            elif isinstance(value, types.FunctionType):
                patch_function(value, f"{PACKAGE_HIT}{module_name}:{value.__qualname__}", always=False)
    return installed


TAMPERED = "<tampered>"
"""Prefix of the name a reply's hits carry when the kernel's hooks were found changed."""


def _broken_hooks(shell: Any, arm: Any, transformer: Any, installed: list[tuple[Any, str, Any]]) -> str:
    """Which of the kernel's hooks a cell changed ("" if none): the arming hook, the shell's
    transformer, a guard. Checked before every reply; the grader flags what follows (see
    :mod:`~transformer_course.course.tampering` for the static reading that catches it before it runs)."""
    if vars(builtins).get("__grading_arm__") is not arm or "__grading_arm__" in shell.user_ns:
        return "the arming hook was replaced"
    if not any(t is transformer for t in shell.ast_transformers):
        return "the shell's transformer was removed"
    for owner, attribute, guard in installed:
        if vars(owner).get(attribute) is not guard:
            return f"the guard of {getattr(owner, '__name__', '?')}.{attribute} was replaced"
    return ""


class _ArmStatements(ast.NodeTransformer):
    """IPython AST transformer: arms the guards around the chosen top-level statements of one cell."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state

    def visit(self, node: ast.AST) -> ast.AST:
        chosen, self.state["arm_next"] = self.state["arm_next"], ()
        if not chosen or not isinstance(node, ast.Module):
            return node
        body = []
        for index, statement in enumerate(node.body):
            if (index not in chosen and -1 not in chosen) or (isinstance(statement, ast.ImportFrom) and statement.module == "__future__"):
                body.append(statement)
                continue
            arm = ast.parse("__grading_arm__(1)").body[0]
            disarm = ast.parse("__grading_arm__(-1)").body[0]
            body.append(ast.Try(body=[arm, statement], handlers=[], orelse=[], finalbody=[disarm]))
        node.body = body
        return ast.fix_missing_locations(node)


def kernel_main() -> None:
    """The kernel: read requests on stdin, answer on stdout (both then point to /dev/null)."""
    import torch  # noqa: F401 (imported before the first cell, outside any exercise's budget)

    torch.set_num_threads(1)
    with contextlib.suppress(OSError):
        os.makedirs(os.environ.get("TMPDIR", ".tmp"), exist_ok=True)
    proto_in, proto_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False
    shell = InteractiveShell.instance(config=config)
    shell.enable_matplotlib = lambda gui=None: (gui, "agg")  # figures are never drawn while grading
    shell.display_formatter.active_types = ["text/plain"]
    handles: dict[int, Any] = {}
    state: dict[str, Any] = {"armed": 0, "hits": set(), "arm_next": (), "installed": [], "depth": 0}
    token = [""]  # the token of the request being answered: every reply carries it

    def arm(step: int) -> None:
        state["armed"] = max(0, state["armed"] + step)

    builtins.__grading_arm__ = arm
    transformer = _ArmStatements(state)
    shell.ast_transformers.append(transformer)

    def hits() -> list[str]:
        found, state["hits"] = sorted(state["hits"], key=lambda n: (n.startswith(PACKAGE_HIT), n)), set()
        broken = _broken_hooks(shell, arm, transformer, state["installed"])
        return found + ([f"{TAMPERED}{broken}"] if broken else [])

    def send(message: Any) -> None:
        buffer = io.BytesIO()
        try:
            torch.save((token[0], message), buffer)
        except Exception as error:  # noqa: BLE001
            buffer = io.BytesIO()
            torch.save((token[0], ("raised", "UnreadableAnswer", f"could not send the value: {error}"[:300], hits())),
                       buffer)
        _write_frame(proto_out, buffer.getvalue())

    class Callback:
        """A function of the grader's test code, called back in the grader."""

        def __init__(self, key: int) -> None:
            self.key = key

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            send(("callback", self.key, _encode(args, handles), _encode(kwargs, handles)))
            reply = receive()
            if reply[0] == "callback_raised":
                raise RuntimeError(reply[1])
            return reply[1]

    class Unpickler(pickle.Unpickler):
        def persistent_load(self, pid: Any) -> Any:
            kind, key = pid
            return handles[key] if kind == "remote" else Callback(key)

    def receive() -> Any:
        token[0], request = Unpickler(io.BytesIO(_read_frame(proto_in, None))).load()
        return request

    send(("ready",))
    while True:
        request = receive()
        kind = request[0]
        if kind == "quit":
            return
        if kind == "guard":
            state["installed"] = _install_guards(request[1], state)
            send(("done", None, 0.0, time.process_time(), []))
            continue
        if kind == "run":
            _, chosen, source = request
            start = time.monotonic()
            state["arm_next"], state["armed"], state["depth"] = frozenset(chosen), 0, 0
            result = shell.run_cell(source, store_history=True)
            state["armed"] = 0
            error = result.error_before_exec or result.error_in_exec
            text = None if error is None else f"{type(error).__name__}: {error}"[:500]
            send(("done", text, time.monotonic() - start, time.process_time(), hits()))
            continue
        state["armed"], state["depth"] = 1, 0  # the checks evaluate the student's answer
        try:
            if kind == "get":
                namespace = shell.user_ns
                value = {name: namespace[name] for name in request[1] if name in namespace}
            elif kind == "call":
                value = handles[request[1]](*request[2], **request[3])
            elif kind == "getattr":
                value = getattr(handles[request[1]], request[2])
            elif kind == "getitem":
                value = handles[request[1]][request[2]]
            elif kind == "list":
                value = list(handles[request[1]])
            elif kind == "len":
                value = len(handles[request[1]])
            else:
                raise ValueError(f"unknown request {kind!r}")
            encoded = _encode(value, handles)
            state["armed"] = 0
            send(("value", encoded, hits()))
        except Exception as error:  # noqa: BLE001 (the student's code raised: report it)
            state["armed"] = 0
            send(("raised", type(error).__name__, str(error)[:300], hits()))


# --- the grader side ----------------------------------------------------------------------------

class RemoteError(Exception):
    """The student's code raised while a test called it (type name and message)."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name


class RemoteObject:
    """A student object that is not plain data; it stays in the kernel. Comparisons never go there."""

    __slots__ = ("_kernel", "_key", "_type", "_repr", "_code")

    def __init__(self, kernel: Kernel, key: int, type_name: str, text: str, code: str | None = None) -> None:
        self._kernel, self._key, self._type, self._repr, self._code = kernel, key, type_name, text, code

    def __repr__(self) -> str:
        return self._repr

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._kernel.request(("getattr", self._key, name))

    def __getitem__(self, key: Any) -> Any:
        return self._kernel.request(("getitem", self._key, key))

    def __iter__(self):
        return iter(self._kernel.request(("list", self._key)))

    def __len__(self) -> int:
        value = self._kernel.request(("len", self._key))
        if type(value) is not int:
            raise TypeError("len() of the answer is not an int")
        return value


class RemoteCallable(RemoteObject):
    """A student function (or module, or class): calling it runs it in the kernel."""

    __slots__ = ()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._kernel.request(("call", self._key, args, kwargs))


def _safe_load(payload: bytes) -> Any:
    import torch

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(io.BytesIO(payload), weights_only=True)
    except Exception as error:  # noqa: BLE001 (anything but plain data is refused)
        raise KernelGone(f"the notebook's process sent a reply that is not plain data ({type(error).__name__})")


class Kernel:
    """The kernel process seen from the grader: run cells, fetch names, call student functions.

    ``hits`` collects the guarded reference names the kernel reported (see the module's docstring).
    """

    def __init__(self, command: list[str], cwd: Path, env: dict[str, str], preexec: Any) -> None:
        self.process = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                        start_new_session=True, preexec_fn=preexec)
        self.deadline: float | None = None
        self.callbacks: list[Any] = []
        self.cpu_seconds = 0.0
        self.hits: set[str] = set()
        self.tampered = ""  # what the kernel found changed in its hooks, once it reported it
        self.token = ""  # the last request's token: a reply that does not carry it is forged

    def start(self, deadline: float) -> None:
        self.deadline = deadline
        reply = self._receive()
        if reply != ("ready",):
            raise KernelGone("the notebook's process did not start")

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            with contextlib.suppress(Exception):
                stream.close()

    def _send(self, message: Any) -> None:
        kernel = self

        class Pickler(pickle.Pickler):
            def persistent_id(self, obj: Any) -> Any:
                if isinstance(obj, RemoteObject):
                    return ("remote", obj._key)
                if isinstance(obj, (types.FunctionType, types.MethodType)) and \
                        getattr(obj, "__module__", None) == GRADER_MODULE:
                    kernel.callbacks.append(obj)
                    return ("callback", len(kernel.callbacks) - 1)
                return None

        buffer = io.BytesIO()
        self.token = os.urandom(16).hex()
        Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump((self.token, message))
        try:
            _write_frame(self.process.stdin.fileno(), buffer.getvalue())
        except OSError as error:
            raise KernelGone("the notebook's process stopped") from error

    def _receive(self) -> Any:
        frame = _safe_load(_read_frame(self.process.stdout.fileno(), self.deadline))
        if not (isinstance(frame, tuple) and len(frame) == 2 and frame[0] == self.token):
            raise KernelGone("the notebook's process answered out of turn (a reply without the request's token)")
        return frame[1]

    def _record(self, names: Any) -> None:
        if isinstance(names, list):
            names = [str(n)[:300] for n in names[:2000]]
            for name in names:
                if name.startswith(TAMPERED) and not self.tampered:
                    self.tampered = name[len(TAMPERED):]
            self.hits.update(n for n in names if not n.startswith(TAMPERED))

    def guard(self, targets: list[tuple[str, str]]) -> None:
        """Install the guards (before the first cell)."""
        self.run_cell("", (), kind="guard", payload=targets)

    def run_cell(self, source: str, armed: tuple[int, ...] = (), kind: str = "run", payload: Any = None) -> str | None:
        """Run one cell, arming the guards around its top-level statements ``armed``; return its
        error ("ZeroDivisionError: division by zero") or None."""
        self._send(("run", tuple(armed), source) if kind == "run" else (kind, payload))
        reply = self._receive()
        if not (isinstance(reply, tuple) and len(reply) == 5 and reply[0] == "done"):
            raise KernelGone("the notebook's process answered out of turn")
        if type(reply[3]) is float:
            self.cpu_seconds = reply[3]  # as the kernel reports it: for the summary only
        self._record(reply[4])
        return reply[1] if isinstance(reply[1], str) else None

    def request(self, message: tuple) -> Any:
        """Ask the kernel for a value; decode the reply (student errors become RemoteError)."""
        try:
            self._send(message)
            while True:
                reply = self._receive()
                if not isinstance(reply, tuple) or not reply:
                    raise KernelGone("the notebook's process answered out of turn")
                if reply[0] == "callback" and len(reply) == 4 and type(reply[1]) is int \
                        and 0 <= reply[1] < len(self.callbacks):
                    try:
                        result = self.callbacks[reply[1]](*self.decode(reply[2]), **self.decode(reply[3]))
                        self._send(("callback_result", result))
                    except KernelGone:
                        raise
                    except Exception as error:  # noqa: BLE001
                        self._send(("callback_raised", type(error).__name__))
                    continue
                if reply[0] == "value" and len(reply) == 3:
                    self._record(reply[2])
                    return self.decode(reply[1])
                if reply[0] == "raised" and len(reply) == 4:
                    self._record(reply[3])
                    raise RemoteError(str(reply[1])[:80], str(reply[2])[:300])
                raise KernelGone("the notebook's process answered out of turn")
        except KernelGone as gone:
            if gone.timed_out:
                raise KernelTimeout() from None
            raise

    def decode(self, value: Any) -> Any:
        """Plain data from ``_encode`` with handles turned into :class:`RemoteObject`."""
        import torch

        if isinstance(value, torch.Tensor):  # a fresh tensor: no Python state, no overridden methods
            plain = torch.empty(tuple(value.shape), dtype=value.dtype)
            plain.copy_(value.as_subclass(torch.Tensor).data if type(value) is not torch.Tensor else value)
            return plain
        if isinstance(value, list):
            return [self.decode(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self.decode(v) for v in value)
        if isinstance(value, dict):
            if "__remote__" in value and type(value.get("__remote__")) is int:
                cls = RemoteCallable if value.get("callable") is True else RemoteObject
                code = value.get("code")
                return cls(self, value["__remote__"], str(value.get("type", "object"))[:80],
                           str(value.get("repr", ""))[:200], code if isinstance(code, str) else None)
            if "__numpy__" in value and isinstance(value["__numpy__"], torch.Tensor):
                return value["__numpy__"].numpy()
            if "__set__" in value and isinstance(value["__set__"], list):
                return set(self.decode(value["__set__"]))
            if "__range__" in value and isinstance(value["__range__"], list):
                return range(*[int(v) for v in value["__range__"][:3]])
            if "__dtype__" in value and isinstance(value["__dtype__"], str):
                dtype = getattr(torch, value["__dtype__"], None)
                return dtype if isinstance(dtype, torch.dtype) else value
            return {k: self.decode(v) for k, v in value.items()}
        return value


