"""Grade one submitted chapter exercise by exercise, with the student's code in a sandbox.

Two processes take part in grading one notebook:

* the **kernel** runs the student's cells, in order, in an IPython shell. With bubblewrap (the
  default) it runs in a fresh temporary folder holding only the notebook and the chapter's released
  files, as an unprivileged user, without network, with a read-only view of the system, Python and
  this package and nothing else (no course folder, gradebook, hidden tests or other submissions),
  and with limits on memory, CPU time and file size. It never receives a hidden test.
* the **grader** (the calling process) reads the instructor's notebook and runs each exercise's
  test cell itself, after the kernel has run the cells up to that exercise. It asks the kernel
  only for the names the test cell uses: plain values (numbers, strings, lists, dicts, tensors)
  come back through PyTorch's safe loader (``torch.load(weights_only=True)``); anything else (a
  function, a module) stays in the kernel and is called there, its result coming back as plain
  values again. Student code therefore cannot patch the checks or ``torch.testing``, rewrite the
  test cells, decide a comparison, or read an expected value.

Each exercise has a time budget (``timeout``, 60 s by default) for its cells, and the same again
for its checks (a kernel's start-up is not counted). A cell that overruns it, even one that
ignores SIGINT, is killed with its whole kernel; the exercise scores 0 as "timed out", a fresh
kernel replays the earlier cells without the runaway one, and grading goes on with the next
exercise.

An exercise whose answer is computed with the package function the exercise asks the student to
write (a ``transformer_course`` name that its test cell imports and the reference solution does not
use) scores 0 as "flagged", with a message saying so; using it elsewhere, to check an answer, is fine.

``tools/coursework.py grade`` calls :func:`grade_notebook` for every submission and writes the
grade tables; :func:`sandbox_problem` says whether bubblewrap works on this machine.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import html
import io
import os
import pickle
import re
import resource
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import types
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformer_course.course.coursework import bound_names, cell_source, free_names, nbgrader_metadata, read_chapter

GRADER_MODULE = "__grader__"
"""``__name__`` of the namespace in which test cells run (their lambdas are called back, not sent)."""

MAX_FRAME = 256 * 2**20
"""Largest reply the grader reads from a kernel, in bytes."""

SANDBOX_UID = 65534
"""The identity (nobody) that runs student code when the grader itself runs as root."""


# --- results ------------------------------------------------------------------------------------

@dataclass
class ExerciseResult:
    """One exercise's grade and the message shown to the student.

    Attributes:
        label: ``dlNNNN-exK``.
        title: the exercise's title.
        points, max_points: the score.
        result: ``"passed"``, ``"failed"``, ``"timed out"``, ``"flagged"`` (used the reference
            answer from the package) or ``"not graded"``.
        message: for the student; never a hidden test's source or expected value.
    """

    label: str
    title: str
    points: float
    max_points: float
    result: str
    message: str = ""


@dataclass
class NotebookResult:
    """The exercises of one graded notebook, a one-line status, and the time grading took."""

    exercises: list[ExerciseResult]
    status: str
    seconds: float = 0.0
    cpu_seconds: float = 0.0


@dataclass(frozen=True)
class Limits:
    """What one notebook may use.

    Attributes:
        timeout: seconds of wall time for an exercise's cells, and again for its checks.
        memory_mb: address-space limit of the kernel.
        file_mb: largest file the kernel may write. (As root, the sandboxes' user may also run
            at most 512 processes and threads in all: no fork bombs.)
        sandbox: ``"bwrap"`` (bubblewrap) or ``"none"`` (only for trusted submissions).
    """

    timeout: float = 60.0
    memory_mb: int = 6144
    file_mb: int = 64
    sandbox: str = "bwrap"


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


def _handle(value: Any, handles: dict[int, Any]) -> dict[str, Any]:
    key = len(handles)
    handles[key] = value
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 (a student's __repr__ may raise)
        text = f"<{type(value).__name__}>"
    return {"__remote__": key, "type": type(value).__name__, "callable": callable(value),
            "repr": text[:200]}


def _kernel_main() -> None:
    """The kernel: read requests on stdin, answer on stdout (both then point to /dev/null)."""
    import torch  # noqa: F401 (imported before the first cell, outside any exercise's budget)

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

    def send(message: Any) -> None:
        buffer = io.BytesIO()
        try:
            torch.save(message, buffer)
        except Exception as error:  # noqa: BLE001
            buffer = io.BytesIO()
            torch.save(("raised", "UnreadableAnswer", f"could not send the value: {error}"[:300]), buffer)
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
        return Unpickler(io.BytesIO(_read_frame(proto_in, None))).load()

    send(("ready",))
    while True:
        request = receive()
        kind = request[0]
        if kind == "quit":
            return
        if kind == "run":
            _, _, source = request
            start = time.monotonic()
            result = shell.run_cell(source, store_history=True)
            error = result.error_before_exec or result.error_in_exec
            text = None if error is None else f"{type(error).__name__}: {error}"[:500]
            send(("done", text, time.monotonic() - start, time.process_time()))
            continue
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
            send(("value", _encode(value, handles)))
        except Exception as error:  # noqa: BLE001 (the student's code raised: report it)
            send(("raised", type(error).__name__, str(error)[:300]))


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


def _safe_load(payload: bytes) -> Any:
    import torch

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(io.BytesIO(payload), weights_only=True)
    except Exception as error:  # noqa: BLE001 (anything but plain data is refused)
        raise KernelGone(f"the notebook's process sent a reply that is not plain data ({type(error).__name__})")


class Kernel:
    """The kernel process seen from the grader: run cells, fetch names, call student functions."""

    def __init__(self, command: list[str], cwd: Path, env: dict[str, str], limits: Limits,
                 cpu_seconds: int) -> None:
        def restrict() -> None:  # in the child, before exec: limits inherited by the sandbox
            memory = limits.memory_mb * 2**20
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
            resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 5))
            resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_mb * 2**20,) * 2)
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            if os.geteuid() == 0 and limits.sandbox != "none":  # counts the processes of uid nobody
                resource.setrlimit(resource.RLIMIT_NPROC, (512, 512))

        self.process = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                        start_new_session=True, preexec_fn=restrict)
        self.deadline: float | None = None
        self.callbacks: list[Any] = []
        self.cpu_seconds = 0.0

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
        Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(message)
        try:
            _write_frame(self.process.stdin.fileno(), buffer.getvalue())
        except OSError as error:
            raise KernelGone("the notebook's process stopped") from error

    def _receive(self) -> Any:
        return _safe_load(_read_frame(self.process.stdout.fileno(), self.deadline))

    def run_cell(self, source: str) -> str | None:
        """Run one cell; return its error ("ZeroDivisionError: division by zero") or None."""
        self._send(("run", 0, source))
        reply = self._receive()
        if not (isinstance(reply, tuple) and len(reply) == 4 and reply[0] == "done"):
            raise KernelGone("the notebook's process answered out of turn")
        if type(reply[3]) is float:
            self.cpu_seconds = reply[3]  # as the kernel reports it: for the summary only
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
                if reply[0] == "value" and len(reply) == 2:
                    return self.decode(reply[1])
                if reply[0] == "raised" and len(reply) == 3:
                    raise RemoteError(str(reply[1])[:80], str(reply[2])[:300])
                raise KernelGone("the notebook's process answered out of turn")
        except KernelGone as gone:
            if gone.timed_out:
                raise KernelTimeout() from None
            raise

    def decode(self, value: Any) -> Any:
        """Plain data from ``_encode`` with handles turned into :class:`RemoteObject`."""
        import torch

        if isinstance(value, list):
            return [self.decode(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self.decode(v) for v in value)
        if isinstance(value, dict):
            if "__remote__" in value and type(value.get("__remote__")) is int:
                cls = RemoteCallable if value.get("callable") is True else RemoteObject
                return cls(self, value["__remote__"], str(value.get("type", "object"))[:80],
                           str(value.get("repr", ""))[:200])
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


# --- the sandbox --------------------------------------------------------------------------------

def _package_root() -> Path:
    import transformer_course

    return Path(transformer_course.__file__).resolve().parent.parent


def _python_paths() -> list[Path]:
    """Folders the kernel's Python needs: the interpreter's prefixes, site-packages, this package."""
    import site

    paths = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix), _package_root(),
             Path(sys.executable).resolve().parent.parent}
    paths.update(Path(p) for p in site.getsitepackages() if Path(p).exists())
    paths.update(Path(p) for p in sys.path if p and Path(p).is_dir() and "site-packages" in p)
    return sorted(p.resolve() for p in paths if p.exists())


def bwrap_command(workdir: Path, inner: list[str], as_root: bool) -> list[str]:
    """The bubblewrap command line that runs ``inner`` in ``workdir`` (mounted at the same path).

    Read-only: /usr (and the /bin, /lib links), /etc/fonts, Python and its packages, this package.
    Writable: ``workdir`` only (and an empty /tmp of its own). No network, own process, IPC and
    host-name namespaces; dies with the grader. As root, the kernel drops to uid ``nobody``.
    """
    bwrap = shutil.which("bwrap") or "bwrap"
    command = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
               "--unshare-cgroup-try", "--die-with-parent", "--new-session",
               "--ro-bind", "/usr", "/usr", "--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp"]
    if not as_root:
        command.insert(1, "--unshare-user")
    for link in ("bin", "lib", "lib64", "sbin"):
        path = Path("/") / link
        if path.is_symlink():
            command += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            command += ["--ro-bind", str(path), str(path)]
    if Path("/etc/fonts").is_dir():
        command += ["--ro-bind", "/etc/fonts", "/etc/fonts"]
    made: set[Path] = {Path("/"), Path("/usr"), Path("/etc"), Path("/tmp")}
    binds = [p for p in _python_paths() if not str(p).startswith("/usr/")]
    for path in binds + [workdir]:
        for parent in reversed(path.parents):
            if parent not in made:
                command += ["--perms", "0755", "--dir", str(parent)]
                made.add(parent)
        made.add(path)
    for path in binds:
        command += ["--ro-bind", str(path), str(path)]
    command += ["--bind", str(workdir), str(workdir), "--remount-ro", "/", "--chdir", str(workdir)]
    if as_root:
        setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
        command += [setpriv, f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}", "--clear-groups",
                    "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all"]
    return command + inner


def sandbox_problem() -> str | None:
    """Why the bubblewrap sandbox cannot run here (None when it works)."""
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    as_root = os.geteuid() == 0
    if as_root and shutil.which("setpriv") is None:
        return "setpriv (util-linux) is needed to drop root inside the sandbox"
    with tempfile.TemporaryDirectory(prefix="sandbox-check-") as folder:
        workdir = Path(folder)
        if as_root:
            os.chown(workdir, SANDBOX_UID, SANDBOX_UID)
        probe = ("import os, socket; open('probe', 'w').write(str(os.getuid()));\n"
                 "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=1); print('network')\n"
                 "except OSError:\n    pass")
        command = bwrap_command(workdir, [sys.executable, "-I", "-c", probe], as_root)
        try:
            result = subprocess.run(command, cwd=workdir, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"bubblewrap failed to start: {error}"
        if result.returncode != 0 or not (workdir / "probe").exists():
            return f"bubblewrap failed: {(result.stderr or result.stdout).strip()[:300]}"
        if "network" in result.stdout:
            return "the sandbox could reach the network"
        if as_root and (workdir / "probe").read_text() != str(SANDBOX_UID):
            return "the sandbox did not drop root"
    return None


def _kernel_command(limits: Limits, workdir: Path) -> list[str]:
    inner = [sys.executable, "-c", f"from {__name__} import _kernel_main; _kernel_main()"]
    if limits.sandbox == "none":
        return inner
    return bwrap_command(workdir, inner, os.geteuid() == 0)


def _kernel_env(workdir: Path) -> dict[str, str]:
    keep = ("PATH", "LANG", "LC_ALL", "PYTHONHASHSEED")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update(HOME=str(workdir), TMPDIR=str(workdir / ".tmp"), MPLBACKEND="Agg",
               MPLCONFIGDIR=str(workdir / ".tmp"), IPYTHONDIR=str(workdir / ".tmp" / "ipython"),
               PYTHONPATH=str(_package_root()), PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1",
               MKL_NUM_THREADS="1", PYTHONHASHSEED=os.environ.get("PYTHONHASHSEED", "0"),
               TORCH_HOME=str(workdir / ".tmp"), XDG_CACHE_HOME=str(workdir / ".tmp"))
    return env


# --- the exercises of a chapter, read from the instructor's notebook ---------------------------

@dataclass(frozen=True)
class ExercisePlan:
    """What the grader needs of one exercise.

    Attributes:
        parts: the test cell split into (code, hidden) pieces, in order.
        names: the names the test cell takes from the student's notebook.
        answers: the names the exercise asks for (read by the test, bound by the solution).
        references: package names the answers must not be computed with.
    """

    label: str
    title: str
    max_points: float
    parts: tuple[tuple[str, bool], ...]
    names: tuple[str, ...]
    answers: tuple[str, ...]
    references: tuple[str, ...]


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


def _used_names(source: str) -> set[str]:
    """Every identifier a cell mentions: names, attributes and imported names."""
    try:
        tree = ast.parse(_python_source(source))
    except SyntaxError:
        return set()
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            used.add(node.id)
        elif isinstance(node, ast.Attribute):
            used.add(node.attr)
        elif isinstance(node, ast.alias):
            used.update(node.name.split("."))
    return used


def references_in_answers(source: str, answers: tuple[str, ...], references: tuple[str, ...]) -> set[str]:
    """The reference names a solution cell computes its answers with.

    Follows what each answer is made of within the cell: the body of a function the exercise asks
    for, the right-hand side of an assignment to an answer, an import under an answer's name, and
    (transitively) the helpers and variables those use. A reference used only to check an answer
    (``print(score_counts(8192, window=256))``) does not count.
    """
    try:
        tree = ast.parse(_python_source(source))
    except SyntaxError:
        return set()
    made_of: dict[str, set[str]] = {}  # a name bound in the cell -> the identifiers its definition uses

    def identifiers(node: ast.AST) -> set[str]:
        found = set()
        for child in ast.walk(node):
            if isinstance(child, ast.Name):
                found.add(child.id)
            elif isinstance(child, ast.Attribute):
                found.add(child.attr)
        return found

    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            made_of.setdefault(node.name, set()).update(identifiers(node))
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        made_of.setdefault(name.id, set()).update(identifiers(node.value))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                bound = (alias.asname or alias.name).split(".")[0]
                made_of.setdefault(bound, set()).update(alias.name.split("."))
    seen, todo = set(), list(answers)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(made_of.get(name, ()))
    return seen & set(references)


def _python_source(source: str) -> str:
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(source)


def _reference_names(test_source: str, solution_source: str) -> set[str]:
    """Package names the test imports (not modules, not the checks) that the reference solution avoids."""
    import importlib
    import inspect

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
                        names.add(alias.name)
    return names - _used_names(solution_source)


def exercise_plans(instructor_notebook: Path) -> list[ExercisePlan]:
    """Read each exercise's title, points, test cell and reference names from the instructor notebook."""
    chapter = read_chapter(instructor_notebook)
    cells = {nbgrader_metadata(c).get("grade_id"): c for c in chapter.cells}
    plans = []
    for exercise in chapter.exercises:
        test = cell_source(cells.get(f"{exercise.label}-tests", {}))
        solution = cell_source(cells.get(f"{exercise.label}-solution", {}))
        parts = split_hidden(test)
        plans.append(ExercisePlan(
            label=exercise.label, title=exercise.title, max_points=float(exercise.test_points or 0),
            parts=tuple(parts), names=tuple(sorted(free_names(test))),
            answers=tuple(sorted(free_names(test) & bound_names(ast.parse(solution)))),
            references=tuple(sorted(_reference_names(test, solution)))))
    return plans


# --- the student's notebook ---------------------------------------------------------------------

class InvalidNotebook(Exception):
    """The submission is not a notebook the grader can run."""


def read_submission(path: Path) -> list[dict[str, Any]]:
    """The student's code cells ({source, grade_id, test}); raises InvalidNotebook with a reason."""
    import json

    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InvalidNotebook("invalid notebook: the file is not UTF-8 text") from None
    try:
        notebook = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidNotebook(f"invalid notebook: not valid JSON ({error.msg} at line {error.lineno}, "
                              f"column {error.colno})") from None
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


def _anchors(cells: list[dict[str, Any]], plans: list[ExercisePlan]) -> list[tuple[ExercisePlan, int | None]]:
    """Where each exercise is checked: after its test cell, else its solution cell (cell positions)."""
    by_id = {c["grade_id"]: i for i, c in enumerate(cells) if c["grade_id"]}
    anchored = []
    for plan in plans:
        position = by_id.get(f"{plan.label}-tests", by_id.get(f"{plan.label}-solution"))
        anchored.append((plan, position))
    found = sorted((p for p in anchored if p[1] is not None), key=lambda p: p[1])
    return found + [p for p in anchored if p[1] is None]


# --- grading one notebook -----------------------------------------------------------------------

def _describe_error(error: BaseException, hidden: bool) -> str:
    from transformer_course.course.checks import ExerciseError

    if isinstance(error, ExerciseError):
        return error.public if hidden else str(error)
    if isinstance(error, NameError):
        return f"{error} (keep the name the exercise asks for, and run your solution cell without errors)"
    if isinstance(error, RemoteError):
        if error.type_name == "NotImplementedError":
            return "not answered: your function still raises NotImplementedError"
        if hidden:
            return f"your code raised {error.type_name} on a hidden test"
        return f"your code raised {error}"
    if hidden:
        return f"a hidden test could not use your answer ({type(error).__name__})"
    return f"the test could not use your answer: {type(error).__name__}: {error}"[:400]


class _Runner:
    """Runs one notebook's cells in a kernel, restarting it (without the runaway cell) when needed."""

    def __init__(self, cells: list[dict[str, Any]], workdir: Path, limits: Limits, cpu_limit: int) -> None:
        self.cells, self.workdir, self.limits, self.cpu_limit = cells, workdir, limits, cpu_limit
        self.kernel: Kernel | None = None
        self.position = 0  # the next cell to run in the current kernel
        self.reached = 0  # cells before this one have run (or been skipped) once
        self.cpu_seconds = 0.0  # of the kernels so far, as they reported it
        self.skipped: set[int] = set()
        self.errors: dict[int, str] = {}

    def _start(self, deadline: float) -> Kernel:
        kernel = Kernel(_kernel_command(self.limits, self.workdir), self.workdir, _kernel_env(self.workdir),
                        self.limits, self.cpu_limit)
        try:
            kernel.start(deadline)
        except KernelGone:
            kernel.kill()
            raise
        return kernel

    def stop(self) -> None:
        if self.kernel is not None:
            self.kernel.kill()
            self.cpu_seconds += self.kernel.cpu_seconds
            self.kernel = None

    def run_until(self, end: int, budget: float) -> tuple[str, int | None]:
        """Run cells up to (excluding) ``end``: ("ok", None) or ("timed out"/"stopped", cell).

        The new cells share ``budget`` seconds, counted from the first of them (a kernel's start
        is not counted). After a restart the cells that ran before are replayed first, each with
        a budget of its own; a cell that overruns in a replay is skipped too, and the replay
        starts again.
        """
        deadline = None
        while True:
            if self.kernel is None:
                self.position = 0
                try:
                    self.kernel = self._start(time.monotonic() + self.limits.timeout)
                except KernelGone as gone:
                    return ("timed out" if gone.timed_out else "stopped"), None
            current = None
            try:
                while self.position < end:
                    index = self.position
                    cell = self.cells[index]
                    if index in self.skipped or cell["test"] or not cell["source"].strip():
                        self.position += 1
                        continue
                    current = index
                    replay = index < self.reached
                    if not replay and deadline is None:
                        deadline = time.monotonic() + budget
                    self.kernel.deadline = time.monotonic() + self.limits.timeout if replay else deadline
                    error = self.kernel.run_cell(cell["source"])
                    if error:
                        self.errors[index] = error
                    self.position += 1
                    self.reached = max(self.reached, self.position)
                return "ok", None
            except KernelGone as gone:
                self.stop()
                if current is None:
                    return ("timed out" if gone.timed_out else "stopped"), None
                self.skipped.add(current)
                if current < self.reached:
                    continue
                self.reached = current + 1
                return ("timed out" if gone.timed_out else "stopped"), current


def _check_exercise(runner: _Runner, plan: ExercisePlan, cells: list[dict[str, Any]], limits: Limits,
                    segment_errors: list[str]) -> ExerciseResult:
    """Run one exercise's test cell here, on the names fetched from the kernel; grade it."""
    import torch

    def result(points: float, outcome: str, message: str) -> ExerciseResult:
        return ExerciseResult(plan.label, plan.title, points, plan.max_points, outcome, message)

    solution = next((c for c in cells if c["grade_id"] == f"{plan.label}-solution"), None)
    used = sorted(references_in_answers(solution["source"], plan.answers, plan.references)) if solution else []
    if used:
        return result(0.0, "flagged", f"your answer is computed with {', '.join(used)} from transformer_course, "
                      "which this exercise asks you to do yourself; it scores 0 (checking your answer "
                      "against it in a separate line is fine)")
    torch.manual_seed(0)  # the same random test inputs for every student and every run
    kernel = runner.kernel
    kernel.deadline = time.monotonic() + limits.timeout
    kernel.callbacks = []
    hidden = False
    namespace: dict[str, Any] = {"__name__": GRADER_MODULE, "__builtins__": builtins}
    try:
        fetched = kernel.request(("get", list(plan.names)))
        if isinstance(fetched, dict):
            namespace.update({k: v for k, v in fetched.items() if k in plan.names})
        for code, hidden in plan.parts:
            with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()):
                warnings.simplefilter("ignore")
                exec(compile(code, f"<{plan.label} tests>", "exec"), namespace)  # noqa: S102
        return result(plan.max_points, "passed", "")
    except KernelTimeout:
        runner.stop()
        return result(0.0, "timed out", f"timed out: your code ran longer than {limits.timeout:g} s during the "
                      "tests and was stopped; the other exercises were graded without it")
    except KernelGone as gone:
        runner.stop()
        message = f"your code stopped the notebook's process during the tests ({gone})"
    except Exception as error:  # noqa: BLE001 (any failure of the tests is the student's to read)
        message = _describe_error(error, hidden)
    position = next((i for i, c in enumerate(cells) if c is solution), None)
    if runner.errors.get(position, "").startswith("NotImplementedError"):
        return result(0.0, "failed", "not answered: the solution cell still raises NotImplementedError")
    if segment_errors:
        message += " (" + "; ".join(segment_errors)[:400] + ")"
    return result(0.0, "failed", message)


def grade_notebook(submission: Path, instructor_notebook: Path, released_folder: Path | None,
                   limits: Limits = Limits()) -> NotebookResult:
    """Grade one student's notebook against the instructor's test cells.

    Args:
        submission: the student's ``.ipynb``.
        instructor_notebook: ``course/source/<chapter>/<chapter>.ipynb`` (read here, never shown
            to the kernel).
        released_folder: ``course/release/<chapter>/``; its other files are copied next to the
            notebook in the sandbox.
        limits: time, memory and sandbox settings.

    Returns:
        The exercises' results and a status line ("graded", "graded; timed out in dl0028-ex2",
        "invalid notebook: ...").
    """
    start, cpu_start = time.monotonic(), _cpu_time()
    plans = exercise_plans(instructor_notebook)
    try:
        cells = read_submission(submission)
    except InvalidNotebook as error:
        return NotebookResult([ExerciseResult(p.label, p.title, 0.0, p.max_points, "not graded", str(error))
                               for p in plans], str(error), time.monotonic() - start)
    anchored = _anchors(cells, plans)
    results: dict[str, ExerciseResult] = {}
    timed_out: list[str] = []
    cpu_limit = int(limits.timeout * (len(plans) + 2) + 60)
    with tempfile.TemporaryDirectory(prefix="grading-") as folder:
        workdir = Path(folder) / "work"
        workdir.mkdir()
        (workdir / ".tmp").mkdir()
        if released_folder is not None and released_folder.is_dir():
            for item in released_folder.iterdir():
                if item.suffix != ".ipynb" and item.is_file():
                    shutil.copyfile(item, workdir / item.name)
        shutil.copyfile(submission, workdir / f"{instructor_notebook.stem}.ipynb")
        if limits.sandbox != "none" and os.geteuid() == 0:
            for path in [workdir, *workdir.rglob("*")]:
                os.chown(path, SANDBOX_UID, SANDBOX_UID)
        runner = _Runner(cells, workdir, limits, cpu_limit)
        previous_end = 0
        try:
            for plan, anchor in anchored:
                end = len(cells) if anchor is None else anchor + 1
                state, cell = runner.run_until(end, limits.timeout)
                segment_errors = [f"cell {cells[i]['index']} raised {runner.errors[i]}"
                                  for i in sorted(runner.errors) if previous_end <= i < end]
                previous_end = max(previous_end, end)
                if state != "ok":
                    where = f"cell {cells[cell]['index']}" if cell is not None else "starting the notebook"
                    what = (f"timed out: {where} ran longer than {limits.timeout:g} s and was stopped"
                            if state == "timed out" else
                            f"stopped: the notebook's process ended in {where} (crash, memory or CPU limit)")
                    results[plan.label] = ExerciseResult(plan.label, plan.title, 0.0, plan.max_points,
                                                         "timed out" if state == "timed out" else "failed",
                                                         what + "; the other exercises were graded without it")
                    if state == "timed out":
                        timed_out.append(plan.label)
                    continue
                results[plan.label] = _check_exercise(runner, plan, cells, limits, segment_errors)
                if results[plan.label].result == "timed out":
                    timed_out.append(plan.label)
        finally:
            runner.stop()
    ordered = [results[p.label] for p in plans]
    status = "graded" if not timed_out else f"graded; timed out in {', '.join(sorted(timed_out))}"
    return NotebookResult(ordered, status, time.monotonic() - start,
                          _cpu_time() - cpu_start + runner.cpu_seconds)


def _cpu_time() -> float:
    """CPU seconds used by this process (the kernels report their own)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


# --- feedback -----------------------------------------------------------------------------------

def feedback_html(student: str, chapter: str, result: NotebookResult) -> str:
    """A student's feedback page: per exercise the result, the points and a message. Nothing else."""
    rows = "\n".join(
        f"<tr><td>{html.escape(e.label)}</td><td>{html.escape(e.title)}</td>"
        f"<td>{html.escape(e.result)}</td><td>{e.points:g} / {e.max_points:g}</td>"
        f"<td>{html.escape(e.message)}</td></tr>" for e in result.exercises)
    total = sum(e.points for e in result.exercises)
    maximum = sum(e.max_points for e in result.exercises)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Feedback: {html.escape(chapter)}</title>
<style>body{{font-family:sans-serif;max-width:60rem;margin:2rem auto}}td,th{{border:1px solid #999;
padding:.3rem .5rem;text-align:left;vertical-align:top}}table{{border-collapse:collapse}}</style></head>
<body><h1>{html.escape(chapter)}</h1>
<p>Student: {html.escape(student)}. Score: <strong>{total:g} / {maximum:g}</strong>. Status: {html.escape(result.status)}.</p>
<table><thead><tr><th>exercise</th><th>title</th><th>result</th><th>points</th><th>message</th></tr></thead>
<tbody>
{rows}
</tbody></table>
<p>Each exercise was checked with the visible tests of your notebook and further hidden tests.</p>
</body></html>
"""
