"""The sandbox a student's code runs in: the bubblewrap command, its limits, cgroups, files.

One notebook is graded in one *job slot* (``0 .. jobs - 1``). Everything a slot's sandbox may use
is its own:

* a distinct unprivileged uid (``SANDBOX_UID_BASE + slot`` when grading as root), so the process
  cap (``RLIMIT_NPROC``) counts only that slot's processes;
* a working folder that is a tmpfs of ``Limits.work_mb`` MiB mounted by bubblewrap (it vanishes
  with the sandbox; nothing lands in the host's temporary folder);
* where the host lets us, a cgroup per slot bounding the memory of all its processes together
  (tmpfs pages included), their number, and giving each slot the same CPU share.
  :func:`cgroup_problem` says why not when it cannot.

Per-process limits (address space, CPU time, file size, no core dumps) apply in any case.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

SANDBOX_UID_BASE = 61000
"""As root, job slot k runs student code as uid/gid ``SANDBOX_UID_BASE + k`` (no such user exists)."""

SANDBOX_PIDS = 256
"""Processes and threads one sandbox may have (its uid's ``RLIMIT_NPROC``; the cgroup's pids.max)."""

CGROUP_PARENT = "transformer-course-grading"


@dataclass(frozen=True)
class Limits:
    """What one notebook may use.

    Attributes:
        timeout: seconds of wall time for an exercise's cells, and again for its checks; replays
            of earlier cells after a restart share one more such budget per exercise.
        memory_mb: memory of the student's sandbox (its cgroup, or else each process's address space).
        file_mb: largest file the sandbox may write.
        work_mb: size of the sandbox's working folder (a tmpfs).
        check_mb: memory the checks (the test cells, run outside the sandbox) may use on top of
            what the grader had when they started.
        notebook_mb: largest submission that is read at all.
        sandbox: ``"bwrap"`` (bubblewrap); ``"user"`` (as root where bubblewrap cannot run, e.g. in
            a container without user namespaces: the kernel runs as the slot's unprivileged uid, with
            no capabilities, in a copy of the files it owns; it sees what any user may read, so
            keep the hidden tests readable by root only); or ``"none"`` (only for trusted submissions).
    """

    timeout: float = 60.0
    memory_mb: int = 6144
    file_mb: int = 64
    work_mb: int = 256
    check_mb: int = 2048
    notebook_mb: int = 20
    sandbox: str = "bwrap"


def sandbox_uid(slot: int) -> int:
    return SANDBOX_UID_BASE + slot


# --- files: regular ones only, read once ---------------------------------------------------------

class RefusedFile(Exception):
    """A submitted path that is not graded: a link, not a regular file, too large, unreadable."""


def read_regular_file(path: Path, max_bytes: int) -> bytes:
    """The bytes of ``path``, read once through one descriptor, if it is a regular file of at most
    ``max_bytes``; a symbolic link, FIFO, device, socket or folder is refused (never opened for reading
    data, never followed)."""
    try:
        info = os.lstat(path)
    except OSError as error:
        raise RefusedFile(f"refused: cannot read the file ({error.strerror})") from None
    if stat.S_ISLNK(info.st_mode):
        raise RefusedFile("refused: a symbolic link (links are never followed)")
    if not stat.S_ISREG(info.st_mode):
        raise RefusedFile("refused: not a regular file (a pipe, device or socket)")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as error:
        raise RefusedFile(f"refused: cannot open the file ({error.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RefusedFile("refused: not a regular file (a pipe, device or socket)")
        if info.st_size > max_bytes:
            raise RefusedFile(f"refused: larger than {max_bytes / 2**20:g} MB ({info.st_size / 2**20:.1f} MB)")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            total += len(chunk)
            if total > max_bytes:
                raise RefusedFile(f"refused: larger than {max_bytes / 2**20:g} MB")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def remove_tree(path: Path) -> None:
    """Delete a folder however deep it goes (no recursion, no path-length limit); links are not followed."""
    with contextlib.suppress(FileNotFoundError):
        if not os.path.isdir(path) or os.path.islink(path):
            os.unlink(path)
            return
    parent_fd = os.open(os.path.dirname(os.path.abspath(path)) or "/", os.O_RDONLY | os.O_DIRECTORY)
    name = os.path.basename(os.path.abspath(path))
    try:
        # a stack of (directory fd, its name in the parent, parent fd); children first
        stack = [(os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd), name, parent_fd)]
        while stack:
            fd, entry_name, parent = stack[-1]
            descended = False
            with os.scandir(fd) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        try:
                            child = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                        except OSError:
                            os.unlink(entry.name, dir_fd=fd)
                            continue
                        stack.append((child, entry.name, fd))
                        descended = True
                        break
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry.name, dir_fd=fd)
            if descended:
                continue
            stack.pop()
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(entry_name, dir_fd=parent)
    finally:
        os.close(parent_fd)


def walk_files(folder: Path, limit: int = 1000) -> list[str]:
    """Relative paths of the regular files and links under ``folder``, without recursion or following
    links (at most ``limit``; a tree of any depth is fine)."""
    found: list[str] = []
    stack = [(os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW), "")]
    try:
        while stack and len(found) < limit:
            fd, prefix = stack.pop()
            try:
                with os.scandir(fd) as entries:
                    for entry in sorted(entries, key=lambda e: e.name):
                        if entry.is_dir(follow_symlinks=False):
                            try:
                                stack.append((os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
                                                      dir_fd=fd), f"{prefix}{entry.name}/"))
                            except OSError:
                                continue
                        else:
                            found.append(prefix + entry.name)
            finally:
                os.close(fd)
    finally:
        for fd, _ in stack:
            os.close(fd)
    return found[:limit]


# --- cgroups ------------------------------------------------------------------------------------

def _cgroup_roots() -> dict[str, Path] | str:
    """Where to make per-slot cgroups: {"v2": path} or {"memory": .., "pids": .., "cpu": ..}; or why not."""
    if os.geteuid() != 0:
        return "grading does not run as root (cgroups need a delegated hierarchy)"
    base = Path("/sys/fs/cgroup")
    if (base / "cgroup.controllers").exists():
        controllers = (base / "cgroup.controllers").read_text().split()
        if not {"memory", "pids", "cpu"} <= set(controllers):
            return f"cgroup v2 lacks controllers ({' '.join(controllers)})"
        return {"v2": base / CGROUP_PARENT}
    roots = {name: base / name for name in ("memory", "pids", "cpu")}
    if all((root / "cgroup.procs").exists() for root in roots.values()):
        return {name: root / CGROUP_PARENT for name, root in roots.items()}
    return "no writable cgroup hierarchy with memory, pids and cpu controllers"


class CgroupSlot:
    """The cgroup(s) of one job slot; ``enter()`` runs in the sandbox's first process before exec."""

    def __init__(self, paths: dict[str, Path]) -> None:
        self.paths = paths

    def enter(self) -> None:
        pid = str(os.getpid())
        for path in self.paths.values():
            (path / "cgroup.procs").write_text(pid)

    def kill(self) -> None:
        """Kill every process left in the slot (a sandbox that outlived its kernel)."""
        for path in self.paths.values():
            with contextlib.suppress(OSError):
                for line in (path / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        os.kill(int(line), 9)


def make_cgroup(slot: int, limits: Limits, jobs: int = 1) -> CgroupSlot | str:
    """The cgroup of ``slot`` with ``limits`` (memory incl. tmpfs, pids, an equal CPU share); or why not.

    The slots' parent group gets ``jobs`` shares of CPU, so that ``jobs`` sandboxes together compete
    with the host's other processes as ``jobs`` processes would, and each sandbox, however many
    processes it starts, as one."""
    roots = _cgroup_roots()
    if isinstance(roots, str):
        return roots
    memory = str(limits.memory_mb * 2**20)
    paths = {}
    try:
        for kind, parent in roots.items():
            path = parent / f"slot{slot}-{os.getpid()}"
            path.mkdir(parents=True, exist_ok=True)
            paths[kind] = path
            with contextlib.suppress(OSError):
                if kind == "v2":
                    (parent / "cpu.weight").write_text(str(min(10000, 100 * jobs)))
                elif kind == "cpu":
                    (parent / "cpu.shares").write_text(str(1024 * jobs))
            if kind == "v2":
                with contextlib.suppress(OSError):
                    (parent / "cgroup.subtree_control").write_text("+memory +pids +cpu")
                (path / "memory.max").write_text(memory)
                with contextlib.suppress(OSError):
                    (path / "memory.swap.max").write_text("0")
                (path / "pids.max").write_text(str(SANDBOX_PIDS))
                (path / "cpu.weight").write_text("100")
            elif kind == "memory":
                (path / "memory.limit_in_bytes").write_text(memory)
            elif kind == "pids":
                (path / "pids.max").write_text(str(SANDBOX_PIDS))
            elif kind == "cpu":
                (path / "cpu.shares").write_text("1024")
    except OSError as error:
        remove_cgroup(CgroupSlot(paths))
        return f"cannot configure a cgroup ({error.strerror or error})"
    return CgroupSlot(paths)


def remove_cgroup(group: CgroupSlot) -> None:
    """Kill what is left in the slot's cgroups and remove them (waiting briefly for the dying)."""
    import time

    for attempt in range(50):
        group.kill()
        left = []
        for path in group.paths.values():
            try:
                path.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                left.append(path)
        if not left:
            return
        time.sleep(0.1)


def cgroup_problem() -> str | None:
    """Why sandboxes get no cgroup here (None when they do): probed by making, filling and removing one."""
    group = make_cgroup(999, Limits())
    if isinstance(group, str):
        return group
    try:
        probe = subprocess.run([sys.executable, "-c", "pass"], preexec_fn=group.enter, capture_output=True,
                               timeout=60)
        if probe.returncode != 0:
            return "cannot move a process into a cgroup"
    except (OSError, subprocess.SubprocessError) as error:
        return f"cannot move a process into a cgroup ({error})"
    finally:
        remove_cgroup(group)
    return None


# --- the bubblewrap command ---------------------------------------------------------------------

def package_root() -> Path:
    import transformer_course

    return Path(transformer_course.__file__).resolve().parent.parent


def _python_paths() -> list[Path]:
    """Folders the kernel's Python needs: the interpreter's prefixes, site-packages, this package."""
    import site

    paths = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix), package_root(),
             Path(sys.executable).resolve().parent.parent}
    paths.update(Path(p) for p in site.getsitepackages() if Path(p).exists())
    paths.update(Path(p) for p in sys.path if p and Path(p).is_dir() and "site-packages" in p)
    return sorted(p.resolve() for p in paths if p.exists())


def bwrap_command(workdir: Path, inner: list[str], as_root: bool, uid: int = SANDBOX_UID_BASE,
                  files: list[Path] = (), work_mb: int = 256, view: Path | None = None) -> list[str]:
    """The bubblewrap command line that runs ``inner`` in ``workdir``.

    Read-only: /usr (and the /bin, /lib links), /etc/fonts, Python and its packages, this package,
    and ``files`` (bound read-only into the working folder under their names). Writable: the
    working folder, a tmpfs of ``work_mb`` MiB at ``workdir``'s path, and a small /tmp. No network,
    own process, IPC and host-name namespaces; dies with the grader. As root, the kernel drops to
    ``uid`` (one per job slot) with no capabilities. ``view`` (a folder ``transformer_course`` made
    by :func:`~transformer_course.course.view.package_view`) is bound over every copy of the package
    the sandbox could otherwise read, so the package's own files are out of reach.
    """
    bwrap = shutil.which("bwrap") or "bwrap"
    command = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
               "--unshare-cgroup-try", "--die-with-parent", "--new-session",
               "--ro-bind", "/usr", "/usr", "--proc", "/proc", "--dev", "/dev",
               "--perms", "1777", "--size", str(16 * 2**20), "--tmpfs", "/tmp"]
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
    if view is not None:
        for path in binds:
            if (path / "transformer_course").is_dir():
                command += ["--ro-bind", str(view), str(path / "transformer_course")]
    command += ["--perms", "1777", "--size", str(work_mb * 2**20), "--tmpfs", str(workdir)]
    for path in files:
        command += ["--ro-bind", str(path), str(workdir / path.name)]
    command += ["--remount-ro", "/", "--chdir", str(workdir)]
    if as_root:
        setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
        command += [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                    "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all"]
    return command + inner


_NETWORK: list[list[str]] = []


def network_unshare() -> list[str]:
    """``[unshare, --net, --]`` where this host lets root start a child without network (the ``"user"``
    sandbox's only network isolation), else ``[]``; probed once."""
    if not _NETWORK:
        unshare = shutil.which("unshare")
        works = False
        if unshare and os.geteuid() == 0:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                works = subprocess.run([unshare, "--net", "--", sys.executable, "-I", "-c", "pass"],
                                       capture_output=True, timeout=60).returncode == 0
        _NETWORK.append([unshare, "--net", "--"] if works else [])
    return list(_NETWORK[0])


def drop_root_command(uid: int) -> list[str]:
    """The prefix that runs a command as ``uid`` with no groups, capabilities or new privileges, and
    without network where :func:`network_unshare` can (the ``"user"`` sandbox; needs root and setpriv)."""
    if os.geteuid() != 0:
        raise ValueError("sandbox='user' needs the grader to run as root (it drops to an unprivileged uid)")
    setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
    return network_unshare() + [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs",
            "--inh-caps=-all", "--bounding-set=-all"]


def sandbox_problem() -> str | None:
    """Why the bubblewrap sandbox cannot run here (None when it works)."""
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    as_root = os.geteuid() == 0
    if as_root and shutil.which("setpriv") is None:
        return "setpriv (util-linux) is needed to drop root inside the sandbox"
    with tempfile.TemporaryDirectory(prefix="sandbox-check-") as folder:
        workdir = Path(folder) / "work"
        workdir.mkdir()
        probe = ("import os, socket, sys\nopen('probe', 'w').write('x')\n"
                 "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=1); print('network')\n"
                 "except OSError:\n    pass\n"
                 "try:\n    open(sys.argv[1], 'w').write('x'); print('escaped')\nexcept OSError:\n    pass\n"
                 "print('uid', os.getuid())")
        outside = Path(folder) / "outside"
        command = bwrap_command(workdir, [sys.executable, "-I", "-c", probe, str(outside)], as_root)
        try:
            result = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"bubblewrap failed to start: {error}"
        if result.returncode != 0 or "uid" not in result.stdout:
            return f"bubblewrap failed: {(result.stderr or result.stdout).strip()[:300]}"
        if "network" in result.stdout:
            return "the sandbox could reach the network"
        if "escaped" in result.stdout or outside.exists():
            return "the sandbox could write outside its folder"
        if as_root and f"uid {SANDBOX_UID_BASE}" not in result.stdout:
            return "the sandbox did not drop root"
    return None


def kernel_command(limits: Limits, workdir: Path, slot: int, files: list[Path], view: Path | None = None) -> list[str]:
    """The command that starts a kernel: in bubblewrap, as the slot's uid (``user``), or as is (``none``).
    ``view`` is the package the kernel imports (see :func:`bwrap_command`; elsewhere, :func:`kernel_env`)."""
    inner = [sys.executable, "-c", "from transformer_course.course.kernel import kernel_main; kernel_main()"]
    if limits.sandbox == "none":
        return inner
    if limits.sandbox == "user":
        return drop_root_command(sandbox_uid(slot)) + inner
    return bwrap_command(workdir, inner, os.geteuid() == 0, sandbox_uid(slot), files, limits.work_mb, view)


SHARED_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
"""World-writable folders outside the ``user`` sandbox's own: emptied of its uid's files after each kernel."""


def clean_shared_folders(uid: int, folders: tuple[str, ...] = SHARED_FOLDERS) -> list[str]:
    """Remove what ``uid`` left in ``folders`` (the ``user`` sandbox's stand-in for a fresh /tmp per
    kernel); returns the paths removed."""
    removed = []
    for folder in folders:
        with contextlib.suppress(OSError):
            with os.scandir(folder) as entries:
                for entry in list(entries):
                    with contextlib.suppress(OSError):
                        if entry.stat(follow_symlinks=False).st_uid == uid:
                            remove_tree(Path(entry.path))
                            removed.append(entry.path)
    return removed


def kernel_env(workdir: Path, view: Path | None = None) -> dict[str, str]:
    """The kernel's environment: its folder as HOME and TMPDIR, one thread, the package (or ``view``)."""
    keep = ("PATH", "LANG", "LC_ALL", "PYTHONHASHSEED")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update(HOME=str(workdir), TMPDIR=str(workdir / ".tmp"), MPLBACKEND="Agg",
               MPLCONFIGDIR=str(workdir / ".tmp"), IPYTHONDIR=str(workdir / ".tmp" / "ipython"),
               PYTHONPATH=str(view.parent if view is not None else package_root()), PYTHONDONTWRITEBYTECODE="1",
               OMP_NUM_THREADS="1",
               MKL_NUM_THREADS="1", PYTHONHASHSEED=os.environ.get("PYTHONHASHSEED", "0"),
               TORCH_HOME=str(workdir / ".tmp"), XDG_CACHE_HOME=str(workdir / ".tmp"))
    return env


def restrict(limits: Limits, cpu_seconds: int, cgroup: CgroupSlot | None):
    """The pre-exec function of a kernel: its cgroup, then per-process limits inherited by the sandbox."""

    def apply() -> None:
        if cgroup is not None:
            cgroup.enter()
        if cgroup is None or limits.sandbox == "none":
            memory = limits.memory_mb * 2**20
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 5))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_mb * 2**20,) * 2)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if os.geteuid() == 0 and limits.sandbox != "none":  # counts the processes of this slot's uid
            resource.setrlimit(resource.RLIMIT_NPROC, (SANDBOX_PIDS, SANDBOX_PIDS))

    return apply
