"""The kernel protocol: the student's process (the kernel) and the grader's view of it.

Trust runs one way. The grader's requests are pickles of its own objects (test inputs, package
objects a test hands over, handles, the test's callbacks), which the kernel unpickles. The kernel
runs the student's code and is untrusted from its first cell, so its replies are JSON of at most
:data:`MAX_REPLY` bytes, parsed by :func:`json.loads` and then decoded by :meth:`Kernel.decode`
against a closed list of shapes: no pickle, no references between parts (a reply's decoded size is
proportional to its bytes), integers of at most :data:`MAX_DIGITS` digits, nesting of at most
:data:`MAX_DEPTH`, tensors whose bytes match their dtype and shape. Nothing in a reply is believed
beyond being the student's answer: it carries no token and no record of what the student's code
called, so a reply forged by a cell (which can reach the kernel's loop and its ``send``) gains the
student nothing they could not return from their own function. A reply that is oversized,
malformed or out of turn ends the kernel (:class:`KernelGone`), which costs the exercise being
graded.

A value that is not plain data stays in the kernel as a handle (:class:`RemoteObject`); calling it
runs it there. The package the kernel imports is the exercise's view of it
(:mod:`~transformer_course.course.view`): when a pickle names a package class or function that the
view lacks, the kernel's unpickler puts a stand-in in its place (:class:`Absent`): an object of it
keeps its data (parameters, buffers, attributes) and none of its methods.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import pickle
import select
import signal
import struct
import subprocess
import time
import types
from pathlib import Path
from typing import Any

GRADER_MODULE = "__grader__"
"""``__name__`` of the namespace in which test cells run (their lambdas are called back, not sent)."""

MAX_REPLY = 64 * 2**20
"""Largest reply the grader reads from a kernel, in bytes (a larger one ends the kernel)."""

MAX_DIGITS = 400
"""Longest integer (in decimal digits) a reply may hold."""

MAX_DEPTH = 40
"""Deepest nesting of lists, tuples, dicts and sets a reply may hold."""

DTYPES = ("float64", "float32", "float16", "bfloat16", "complex64", "complex128", "int64", "int32", "int16",
          "int8", "uint8", "bool")
"""Tensor element types a reply may hold."""


# --- framing: 8-byte length, then the payload ---------------------------------------------------

class KernelGone(Exception):
    """The kernel died, overran its deadline, or sent something unreadable."""

    def __init__(self, reason: str, timed_out: bool = False) -> None:
        super().__init__(reason)
        self.timed_out = timed_out


class KernelTimeout(BaseException):
    """Raised through test code (which may catch ``Exception``) when the kernel overruns."""


def _write_frame(fd: int, payload: bytes) -> None:
    view = memoryview(struct.pack("<Q", len(payload)) + payload)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd: int, size: int, deadline: float | None) -> bytes:
    chunks, remaining = [], size
    while remaining:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise KernelGone("deadline", timed_out=True)
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise KernelGone("the notebook's process stopped")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _read_frame(fd: int, deadline: float | None, limit: int | None = None) -> bytes:
    (size,) = struct.unpack("<Q", _read_exact(fd, 8, deadline))
    if limit is not None and size > limit:
        raise KernelGone(f"the notebook's process sent {size:,} bytes (more than {limit:,})")
    return _read_exact(fd, size, deadline)


def _no_big_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise ValueError(f"an integer of more than {MAX_DIGITS} digits")
    return int(text)


def parse_reply(payload: bytes) -> dict[str, Any]:
    """A kernel's reply as a dict, parsed without pickle and within bounds; KernelGone if it is not one."""
    if len(payload) > MAX_REPLY:
        raise KernelGone(f"the notebook's process sent {len(payload):,} bytes (more than {MAX_REPLY:,})")
    try:
        reply = json.loads(payload.decode("utf-8"), parse_int=_no_big_int)
    except (ValueError, RecursionError, UnicodeDecodeError) as error:
        raise KernelGone(f"the notebook's process sent a reply that is not readable "
                         f"({type(error).__name__}: {str(error)[:80]})") from None
    if not isinstance(reply, dict) or not isinstance(reply.get("kind"), str):
        raise KernelGone("the notebook's process answered out of turn")
    return reply


# --- the kernel side (runs the student's code; everything here is untrusted once a cell ran) ---

def _tensor_payload(tensor: Any) -> list[Any]:
    import torch

    flat = tensor.detach().cpu().as_subclass(torch.Tensor).contiguous().reshape(-1)
    data = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    return [str(tensor.dtype).removeprefix("torch."), list(tensor.shape), base64.b64encode(data).decode("ascii")]


def encode(value: Any, handles: dict[int, Any], depth: int = 0) -> Any:
    """A value as JSON-ready plain data; objects that are not data become handles."""
    import torch

    if value is None or type(value) in (bool, float, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value) if len(str(abs(int(value)))) <= MAX_DIGITS else _handle(value, handles)
    if depth > MAX_DEPTH // 2:
        return _handle(value, handles)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, torch.Tensor) and value.layout == torch.strided and value.device.type != "meta" \
            and str(value.dtype).removeprefix("torch.") in DTYPES:
        return {"__tensor__": _tensor_payload(value)}
    if type(value).__module__ == "numpy":
        import numpy as np

        if isinstance(value, np.ndarray) and value.dtype != object:
            with contextlib.suppress(TypeError):
                return {"__numpy__": _tensor_payload(torch.from_numpy(np.array(value)))}
        if isinstance(value, np.generic):
            return encode(value.item(), handles, depth + 1)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, list) and len(value) <= 100_000:
        return [encode(v, handles, depth + 1) for v in value]
    if isinstance(value, tuple) and len(value) <= 100_000:
        return {"__tuple__": [encode(v, handles, depth + 1) for v in value]}
    if isinstance(value, dict) and len(value) <= 100_000 and \
            all(k is None or type(k) in (str, int, float, bool) for k in value):
        return {"__dict__": [[encode(k, handles, depth + 1), encode(v, handles, depth + 1)] for k, v in value.items()]}
    if isinstance(value, (set, frozenset)) and len(value) <= 100_000:
        return {"__set__": [encode(v, handles, depth + 1) for v in value]}
    if isinstance(value, range):
        return {"__range__": [value.start, value.stop, value.step]}
    if isinstance(value, torch.dtype):
        return {"__dtype__": str(value).removeprefix("torch.")}
    return _handle(value, handles)


def _handle(value: Any, handles: dict[int, Any]) -> dict[str, Any]:
    key = len(handles)
    handles[key] = value
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 (a student's __repr__ may raise)
        text = f"<{type(value).__name__}>"
    return {"__remote__": key, "type": type(value).__name__, "callable": callable(value), "repr": text[:200]}


class Absent:
    """Marks the stand-ins for package classes and functions absent from an exercise's view."""


def stand_in(module: str, name: str) -> type:
    """A stand-in for ``module.name``, absent from this view: calling it raises NameError; an object
    of it (unpickled from the course's data) keeps its data and has none of the original's methods."""
    import torch

    def refuse(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise NameError(f"{name} is not available while this exercise is graded: the exercise asks you to write it")

    return type(name, (torch.nn.Module, Absent), {"__init__": refuse, "forward": refuse, "__module__": module,
                                                  "__qualname__": name})


class ViewUnpickler(pickle.Unpickler):
    """Unpickles the grader's data in the kernel: a package name the view lacks becomes a stand-in."""

    def __init__(self, data: bytes, persistent: Any = None) -> None:
        super().__init__(io.BytesIO(data))
        self._persistent = persistent

    def persistent_load(self, pid: Any) -> Any:
        if self._persistent is None:
            raise pickle.UnpicklingError("no persistent ids here")
        return self._persistent(pid)

    def find_class(self, module: str, name: str) -> Any:
        try:
            return super().find_class(module, name)
        except (ImportError, AttributeError):
            if module.split(".")[0] != "transformer_course":
                raise
            return stand_in(module, name)


def _dump(value: Any) -> dict[str, Any]:
    """A course value for another kernel: a module by name, else a pickle (none of a cell's own functions)."""
    if isinstance(value, types.ModuleType):
        return {"kind": "module", "name": value.__name__}

    class Pickler(pickle.Pickler):
        def reducer_override(self, obj: Any) -> Any:
            if isinstance(obj, (types.FunctionType, type)) and getattr(obj, "__module__", "") in ("__main__", None):
                raise pickle.PicklingError("defined in the notebook")
            return NotImplemented

    buffer = io.BytesIO()
    Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    if buffer.tell() > MAX_REPLY // 2:
        raise pickle.PicklingError("too large")
    return {"kind": "blob", "data": base64.b64encode(buffer.getvalue()).decode("ascii")}


def kernel_main() -> None:
    """The kernel: read requests on stdin, answer on stdout (both then point to /dev/null)."""
    import importlib

    import torch

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

    def send(message: dict[str, Any]) -> None:
        try:
            payload = json.dumps(message, ensure_ascii=True).encode("ascii")
        except (TypeError, ValueError) as error:
            payload = json.dumps({"kind": "raised", "type": "UnreadableAnswer",
                                  "message": f"could not send the value: {error}"[:300]}).encode("ascii")
        if len(payload) > MAX_REPLY:
            payload = json.dumps({"kind": "raised", "type": "UnreadableAnswer",
                                  "message": f"the value is larger than {MAX_REPLY // 2**20} MiB"}).encode("ascii")
        _write_frame(proto_out, payload)

    class Callback:
        """A function of the grader's test code, called back in the grader."""

        def __init__(self, key: int) -> None:
            self.key = key

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            send({"kind": "callback", "key": self.key, "args": encode(list(args), handles),
                  "kwargs": encode(kwargs, handles)})
            reply = receive()
            if reply[0] == "callback_raised":
                raise RuntimeError(reply[1])
            return reply[1]

    def persistent(pid: Any) -> Any:
        kind, key = pid
        return handles[key] if kind == "remote" else Callback(key)

    def receive() -> Any:
        return ViewUnpickler(_read_frame(proto_in, None), persistent).load()

    send({"kind": "ready"})
    while True:
        request = receive()
        kind = request[0]
        if kind == "quit":
            return
        if kind == "run":
            result = shell.run_cell(request[1], store_history=True)
            error = result.error_before_exec or result.error_in_exec
            send({"kind": "done", "error": None if error is None else f"{type(error).__name__}: {error}"[:500]})
            continue
        if kind == "inject":  # a course cell's value, supplied as data
            _, name, item = request
            try:
                if item["kind"] == "module":
                    shell.user_ns[name] = importlib.import_module(item["name"])
                else:
                    shell.user_ns[name] = ViewUnpickler(base64.b64decode(item["data"])).load()
                error = None
            except Exception as failure:  # noqa: BLE001 (absent from this view: the name stays unbound)
                error = f"{type(failure).__name__}: {failure}"[:300]
            send({"kind": "done", "error": error})
            continue
        if kind == "dump":  # the course's own run: a value for the graded kernels
            try:
                send(_dump(shell.user_ns[request[1]]))
            except Exception as failure:  # noqa: BLE001
                send({"kind": "raised", "type": type(failure).__name__, "message": str(failure)[:300]})
            continue
        try:
            if kind == "get":
                value = {name: shell.user_ns[name] for name in request[1] if name in shell.user_ns}
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
            send({"kind": "value", "value": encode(value, handles)})
        except Exception as error:  # noqa: BLE001 (the student's code raised: report it)
            send({"kind": "raised", "type": type(error).__name__, "message": str(error)[:300]})


# --- the grader side ----------------------------------------------------------------------------

class RemoteError(Exception):
    """The student's code raised while a test called it (type name and message)."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name


class RemoteObject:
    """A student object that is not plain data; it stays in the kernel. Comparisons never go there."""

    __slots__ = ("_kernel", "_key", "_type", "_repr")

    def __init__(self, kernel: Kernel, key: int, type_name: str, text: str) -> None:
        self._kernel, self._key, self._type, self._repr = kernel, key, type_name, text

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


def _malformed(what: str) -> KernelGone:
    return KernelGone(f"the notebook's process sent a malformed reply ({what})")


class Kernel:
    """The kernel process seen from the grader: run cells, supply course data, fetch names, call
    student functions."""

    def __init__(self, command: list[str], cwd: Path, env: dict[str, str], preexec: Any) -> None:
        self.process = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                        start_new_session=True, preexec_fn=preexec)
        self.deadline: float | None = None
        self.callbacks: list[Any] = []

    def start(self, deadline: float) -> None:
        self.deadline = deadline
        if self._receive().get("kind") != "ready":
            raise KernelGone("the notebook's process did not start")

    def cpu_seconds(self) -> float:
        """CPU seconds the kernel's process and its descendants have used so far (read from /proc)."""
        total, todo, seen = 0.0, [self.process.pid], set()
        while todo:
            pid = todo.pop()
            if pid in seen:
                continue
            seen.add(pid)
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
                for task in Path(f"/proc/{pid}/task").iterdir():
                    todo += [int(c) for c in (task / "children").read_text().split()]
        return total

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
        Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(message)
        try:
            _write_frame(self.process.stdin.fileno(), buffer.getvalue())
        except OSError as error:
            raise KernelGone("the notebook's process stopped") from error

    def _receive(self) -> dict[str, Any]:
        return parse_reply(_read_frame(self.process.stdout.fileno(), self.deadline, MAX_REPLY))

    def _done(self) -> str | None:
        reply = self._receive()
        if reply["kind"] != "done":
            raise KernelGone("the notebook's process answered out of turn")
        error = reply.get("error")
        return error[:500] if isinstance(error, str) else None

    def run_cell(self, source: str) -> str | None:
        """Run one cell; return its error ("ZeroDivisionError: division by zero") or None."""
        self._send(("run", source))
        return self._done()

    def inject(self, name: str, item: dict[str, Any]) -> str | None:
        """Bind ``name`` in the notebook to a course value (from :meth:`dump`); its error or None."""
        self._send(("inject", name, item))
        return self._done()

    def dump(self, name: str) -> dict[str, Any] | None:
        """A course value as data another kernel can load (None if it cannot travel)."""
        self._send(("dump", name))
        reply = self._receive()
        if reply["kind"] == "module" and isinstance(reply.get("name"), str):
            return {"kind": "module", "name": reply["name"]}
        if reply["kind"] == "blob" and isinstance(reply.get("data"), str):
            return {"kind": "blob", "data": reply["data"]}
        return None

    def request(self, message: tuple) -> Any:
        """Ask the kernel for a value; decode the reply (student errors become RemoteError)."""
        try:
            self._send(message)
            while True:
                reply = self._receive()
                if reply["kind"] == "callback":
                    key = reply.get("key")
                    if type(key) is not int or not 0 <= key < len(self.callbacks):
                        raise _malformed("a callback that was never sent")
                    args, kwargs = self.decode(reply.get("args")), self.decode(reply.get("kwargs"))
                    if not isinstance(args, list) or not isinstance(kwargs, dict) or \
                            not all(isinstance(k, str) for k in kwargs):
                        raise _malformed("a callback's arguments")
                    try:
                        result = self.callbacks[key](*args, **kwargs)
                        self._send(("callback_result", result))
                    except KernelGone:
                        raise
                    except Exception as error:  # noqa: BLE001
                        self._send(("callback_raised", type(error).__name__))
                    continue
                if reply["kind"] == "value" and "value" in reply:
                    return self.decode(reply["value"])
                if reply["kind"] == "raised":
                    raise RemoteError(str(reply.get("type"))[:80], str(reply.get("message"))[:300])
                raise KernelGone("the notebook's process answered out of turn")
        except KernelGone as gone:
            if gone.timed_out:
                raise KernelTimeout() from None
            raise

    def decode(self, value: Any, depth: int = 0) -> Any:
        """Plain data from a reply (see :func:`encode`), checked shape by shape; handles become
        :class:`RemoteObject`. Anything else ends the kernel (KernelGone)."""
        import torch

        if value is None or type(value) in (bool, int, float, str):
            return value
        if depth > MAX_DEPTH:
            raise _malformed("nested too deep")
        if type(value) is list:
            return [self.decode(v, depth + 1) for v in value]
        if type(value) is dict and type(value.get("__remote__")) is int:
            cls = RemoteCallable if value.get("callable") is True else RemoteObject
            return cls(self, value["__remote__"], str(value.get("type", "object"))[:80],
                       str(value.get("repr", ""))[:200])
        if type(value) is not dict or len(value) != 1:
            raise _malformed("an unknown shape")
        (key, inner), = value.items()
        if key in ("__tensor__", "__numpy__"):
            tensor = _tensor(inner)
            return tensor.numpy() if key == "__numpy__" else tensor
        if key == "__tuple__" and type(inner) is list:
            return tuple(self.decode(v, depth + 1) for v in inner)
        if key == "__dict__" and type(inner) is list and all(type(p) is list and len(p) == 2 for p in inner):
            keys = [self.decode(k, depth + 1) for k, _ in inner]
            if not all(k is None or type(k) in (bool, int, float, str) for k in keys):
                raise _malformed("a dict key")
            return dict(zip(keys, (self.decode(v, depth + 1) for _, v in inner)))
        if key == "__set__" and type(inner) is list:
            try:
                return set(self.decode(inner, depth + 1))
            except TypeError:
                raise _malformed("a set of unhashable items") from None
        if key == "__range__" and type(inner) is list and len(inner) == 3 and \
                all(type(v) is int for v in inner) and inner[2] != 0:
            return range(*inner)
        if key == "__dtype__" and inner in DTYPES:
            return getattr(torch, inner)
        raise _malformed(f"an unknown shape {key[:20]!r}")


def _tensor(payload: Any) -> Any:
    """A fresh tensor from [dtype, shape, base64 bytes], its size checked against its bytes."""
    import math

    import torch

    if not (type(payload) is list and len(payload) == 3 and payload[0] in DTYPES and type(payload[1]) is list
            and all(type(d) is int and 0 <= d for d in payload[1]) and len(payload[1]) <= 16
            and type(payload[2]) is str):
        raise _malformed("a tensor")
    dtype, shape = getattr(torch, payload[0]), tuple(payload[1])
    try:
        data = base64.b64decode(payload[2], validate=True)
    except ValueError:
        raise _malformed("a tensor's bytes") from None
    if math.prod(shape) * torch.empty((), dtype=dtype).element_size() != len(data):
        raise _malformed("a tensor whose bytes do not match its shape")
    if not data:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype).reshape(shape).clone()
