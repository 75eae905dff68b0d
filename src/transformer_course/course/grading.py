"""Grade submitted chapters exercise by exercise, with the student's code in a sandbox.

Nothing that runs in the sandbox is trusted, and nothing the grades depend on is decided there.

* **The course's own run.** Once per chapter, the released notebook's own cells (not the student's)
  run in a sandboxed kernel with the whole package (:func:`course_data`); what each cell binds is
  kept as data (a pickle made by the course's code, relayed to the student's kernels unread, or a
  module's name).
* **One kernel per exercise.** Each exercise is graded in a fresh kernel (:mod:`~.kernel`), in a
  fresh sandbox (:mod:`~.sandbox`: its own folder and /tmp, no network, limits on memory, CPU time
  and processes), that sees the package *without* the functions and classes the exercise asks
  students to write, nor any other public function of ``nn``, ``measure`` or ``experiments`` its
  solution and tests do not name (:mod:`~.view`). The kernel replays the notebook up to the
  exercise's test cell in the student's order: the student's cells run, the course's cells are
  supplied as the data of the course's run. An answer computed with what the exercise forbids
  therefore fails like any wrong answer, however the student reached for it, in whichever cell.
* **A checker** per exercise, forked from the worker, runs that exercise's test cell on the names
  the kernel hands back (plain data, decoded within bounds; functions stay in the kernel and are
  called there), with its own memory limit and deadline. A checker that runs out of memory or time
  costs its exercise only.
* **A worker** per notebook (:func:`grade_many` forks one per submission, ``jobs`` at a time) under
  limits on memory and CPU time and a wall-clock budget; if it dies or overruns, only that
  notebook's row says so.

Time is bounded per exercise: its new cells get ``timeout`` seconds, the replay of cells that ran
in an earlier exercise's kernel twice what they took there, and its checks another ``timeout``.
A cell that overruns is killed with its kernel; the exercise scores 0 as "timed out", and later
exercises replay without that cell.

A function of the student's whose source is a copy of a package function (up to names and
docstrings, :func:`~.plans.copied_references`) is named in the feedback for the instructor to
review; it does not change the score. So is a use of a library function the exercise puts off
limits (PyTorch's ``F.layer_norm`` in a layer-norm exercise, :func:`~.plans.library_calls`): PyTorch
must stay within the student's reach, so such a call is flagged, not prevented.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import io
import json
import os
import resource
import select
import shutil
import signal
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from transformer_course._validation import check_int
from transformer_course.course.feedback import describe_error, feedback_html, safe_text  # noqa: F401 (re-exported)
from transformer_course.course.kernel import (GRADER_MODULE, Kernel, KernelGone, KernelTimeout,  # noqa: F401
                                              RemoteError, RemoteObject)
from transformer_course.course.plans import (ExercisePlan, InvalidNotebook, anchors, copied_references,  # noqa: F401
                                             library_calls,
                                             course_cell_key, exercise_plans, python_source, read_submission,
                                             reference_fingerprints, released_sources, split_hidden)
from transformer_course.course.sandbox import (CgroupSlot, Limits, RefusedFile, cgroup_problem,  # noqa: F401
                                               clean_shared_folders, kernel_command, kernel_env, make_cgroup,
                                               read_regular_file, remove_cgroup, remove_tree, restrict,
                                               sandbox_problem, sandbox_uid)
from transformer_course.course.view import package_view


# --- results ------------------------------------------------------------------------------------

@dataclass
class ExerciseResult:
    """One exercise's grade and the message shown to the student.

    Attributes:
        label: ``dlNNNN-exK``.
        title: the exercise's title.
        points, max_points: the score.
        result: ``"passed"``, ``"failed"``, ``"timed out"`` or ``"not graded"``.
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

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), ensure_ascii=True).encode("ascii")

    @classmethod
    def from_json(cls, data: bytes) -> NotebookResult:
        raw = json.loads(data.decode("ascii"))
        return cls([ExerciseResult(**e) for e in raw["exercises"]], raw["status"], raw["seconds"], raw["cpu_seconds"])


def not_graded(plans: list[ExercisePlan], reason: str, seconds: float = 0.0) -> NotebookResult:
    return NotebookResult([ExerciseResult(p.label, p.title, 0.0, p.max_points, "not graded", reason) for p in plans],
                          reason, seconds)


# --- the course's own cells, run once per chapter -------------------------------------------------

START_SECONDS = 120.0
"""Longest a kernel may take to start (the grader's own code: Python, torch, IPython)."""

COURSE_SECONDS = 900.0
"""Longest the course's own cells of one chapter may take together (they run once per grading run)."""


@dataclass
class CourseCell:
    """What one of the course's cells left behind: its names as data, or that it must run itself."""

    values: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    run: bool = False
    seconds: float = 0.0


def _bound(source: str) -> list[str]:
    """The names a cell's top-level statements bind (a cell that does not parse binds none)."""
    from transformer_course.course.coursework import bound_names

    try:
        tree = ast.parse(python_source(source))
    except (SyntaxError, ValueError):
        return []
    names = set()
    for statement in tree.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(statement.name)
        else:
            names |= {n for n in bound_names(statement) if not any(
                isinstance(a, ast.arg) and a.arg == n for a in ast.walk(statement))}
    return sorted(n for n in names if n.isidentifier())


def _readable_folder(parent: Path) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="view-", dir=parent))
    os.chmod(folder, 0o755)  # the ``user`` sandbox's uid imports the package from here
    return folder


def _sandbox_folder(parent: Path, files: list[Path], limits: Limits, slot: int) -> Path:
    """A fresh working folder for one kernel (in the ``user``/``none`` sandboxes, a copy of the files)."""
    workdir = Path(tempfile.mkdtemp(prefix="work-", dir=parent))
    os.chmod(workdir, 0o755)
    if limits.sandbox in ("none", "user"):
        (workdir / ".tmp").mkdir()
        for path in files:
            shutil.copyfile(path, workdir / path.name)
        if limits.sandbox == "user":  # the kernel runs as the slot's uid: its folder is its own
            for path in [workdir, workdir / ".tmp", *[workdir / p.name for p in files]]:
                os.chown(path, sandbox_uid(slot), sandbox_uid(slot))
    return workdir


class _Session:
    """Starts one notebook's kernels: a fresh folder and sandbox each, the exercise's view of the package."""

    def __init__(self, folder: Path, files: list[Path], limits: Limits, cpu_limit: int, slot: int,
                 cgroup: CgroupSlot | None, views: dict[frozenset, Path]) -> None:
        self.folder, self.files, self.limits, self.cpu_limit = folder, files, limits, cpu_limit
        self.slot, self.cgroup, self.views = slot, cgroup, views
        self.kernel: Kernel | None = None
        self.workdir: Path | None = None
        self.cpu_seconds = 0.0  # of the kernels so far (they are killed, never waited for by a parent)

    def view(self, absent: frozenset) -> Path | None:
        if not absent and self.limits.sandbox == "none":  # elsewhere the package's own files may be root's only
            return None
        if absent not in self.views:
            self.views[absent] = package_view(sorted(absent), _readable_folder(self.folder))[0]
        return self.views[absent]

    def start(self, absent: frozenset, deadline: float) -> Kernel:
        self.stop()
        self.workdir = _sandbox_folder(self.folder, self.files, self.limits, self.slot)
        view = self.view(absent)
        kernel = Kernel(kernel_command(self.limits, self.workdir, self.slot, self.files, view), self.workdir,
                        kernel_env(self.workdir, view if self.limits.sandbox != "bwrap" else None),
                        restrict(self.limits, self.cpu_limit, self.cgroup))
        self.kernel = kernel
        kernel.start(deadline)
        return kernel

    def stop(self) -> None:
        if self.kernel is not None:
            self.cpu_seconds += self.kernel.cpu_seconds()
            self.kernel.kill()
            self.kernel = None
        if self.cgroup is not None:
            self.cgroup.kill()
        if self.limits.sandbox == "user":
            clean_shared_folders(sandbox_uid(self.slot))
        if self.workdir is not None:
            remove_tree(self.workdir)
            self.workdir = None


def course_data(released_notebook: Path, limits: Limits, slot: int = 0,
                cgroup: CgroupSlot | None = None) -> dict[str, CourseCell]:
    """Run the course's own cells of a released notebook once, in a sandboxed kernel with the whole
    package; per cell (:func:`~.plans.course_cell_key`), the values it binds as data, or ``run=True``
    where one cannot travel (a function the cell defines) or the cell raised."""
    import nbformat

    notebook = nbformat.read(released_notebook, as_version=4)
    sources = [c.source for c in notebook.cells if c.cell_type == "code" and c.source.strip()
               and "NotImplementedError" not in c.source
               and not (c.metadata.get("nbgrader", {}).get("grade") or
                        str(c.metadata.get("nbgrader", {}).get("grade_id", "")).endswith("-tests"))]
    found: dict[str, CourseCell] = {}
    folder = Path(tempfile.mkdtemp(prefix="course-"))
    os.chmod(folder, 0o755)
    files = [p for p in sorted(released_notebook.parent.iterdir()) if p.is_file() and not p.is_symlink()]
    session = _Session(folder, files, limits, int(COURSE_SECONDS) + 60, slot, cgroup, {})
    try:
        deadline = time.monotonic() + COURSE_SECONDS
        kernel = session.start(frozenset(), time.monotonic() + START_SECONDS)
        kernel.deadline = deadline
        for source in sources:
            started = time.monotonic()
            error = kernel.run_cell(source)
            cell = CourseCell(seconds=time.monotonic() - started, run=error is not None)
            for name in _bound(source) if error is None else ():
                item = kernel.dump(name)
                if item is None:
                    cell.run = True
                    break
                cell.values.append((name, item))
            if cell.run:
                cell.values = []
            found[course_cell_key(source)] = cell
    except KernelGone:
        pass  # the cells not reached run in the student's kernels
    finally:
        session.stop()
        remove_tree(folder)
    return found


_slot: tuple[int, CgroupSlot | None] = (0, None)
"""The job slot (uid in the sandbox) and its cgroup of this :func:`course_data_many` worker process."""


def _take_slot(free_slots: Any, groups: dict[int, CgroupSlot | None]) -> None:
    global _slot
    slot = free_slots.get()
    _slot = (slot, groups.get(slot))


def _course_data_in_slot(released_notebook: Path, limits: Limits) -> dict[str, CourseCell]:
    return course_data(released_notebook, limits, *_slot)


def course_data_many(released_notebooks: list[Path], limits: Limits, jobs: int,
                     groups: dict[int, CgroupSlot | None]) -> list[dict[str, CourseCell] | None]:
    """:func:`course_data` of each released notebook, ``jobs`` chapters at a time.

    Each of the ``jobs`` worker processes (``concurrent.futures``, forked) holds one job slot, 0 to
    ``jobs - 1``, for its life, so two kernels never share a slot's uid or cgroup; a chapter goes to
    whichever worker is free. A chapter whose run raised (or whose worker died) gets None.
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    jobs = check_int("jobs", jobs, minimum=1)
    if not released_notebooks:
        return []
    context = multiprocessing.get_context("fork")  # the grader runs where bubblewrap does: Linux
    free_slots = context.SimpleQueue()
    workers = min(jobs, len(released_notebooks))
    for slot in range(workers):
        free_slots.put(slot)
    found: list[dict[str, CourseCell] | None] = []
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_take_slot,
                             initargs=(free_slots, groups)) as pool:
        futures = [pool.submit(_course_data_in_slot, path, limits) for path in released_notebooks]
        for future in futures:
            try:
                found.append(future.result())
            except Exception:  # noqa: BLE001 (each worker then says what is wrong with its chapter)
                found.append(None)
    return found


# --- replaying one exercise -------------------------------------------------------------------------

MAX_RESTARTS = 3
"""Restarts one exercise's replay may need (each skips a cell that overran); then it times out."""


class _Replay:
    """One notebook's exercises, each replayed in a fresh kernel up to its test cell."""

    def __init__(self, cells: list[dict[str, Any]], course: dict[str, CourseCell], session: _Session,
                 student: set[int]) -> None:
        self.cells, self.course, self.session, self.student = cells, course, session, student
        self.skipped: set[int] = set()
        self.durations: dict[int, float] = {}  # cell -> seconds its first run took
        self.errors: dict[int, str] = {}  # cell -> its error, in the last replay that ran it
        self.read: dict[int, set[str]] = {}  # cell -> the names it may read

    def _reads(self, index: int) -> set[str]:
        """Every identifier, attribute and identifier-like string a cell mentions (what it may read)."""
        if index not in self.read:
            try:
                tree = ast.parse(python_source(self.cells[index]["source"]))
                self.read[index] = {n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute)
                                    else n.value for n in ast.walk(tree) if isinstance(n, (ast.Name, ast.Attribute))
                                    or isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.isidentifier()}
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                self.read[index] = set()
        return self.read[index]

    def run(self, end: int, absent: frozenset, timeout: float, names: tuple[str, ...] = ()) -> tuple[str, int | None]:
        """Replay cells up to (excluding) ``end``: ("ok", None) or ("timed out"/"stopped", cell).

        A course cell's values are supplied when the test (``names``), a student's cell or a course
        cell that runs may read them."""
        needed = set(names)
        for index in range(end):
            data = self.course.get(course_cell_key(self.cells[index]["source"]))
            if index in self.student or data is None or data.run:
                needed |= self._reads(index)
        for _ in range(MAX_RESTARTS + 1):
            known = sum(s for i, s in self.durations.items() if i < end and i not in self.skipped)
            course = sum(self.course[k].seconds for i in range(end)
                         if (k := course_cell_key(self.cells[i]["source"])) in self.course and self.course[k].run)
            try:
                kernel = self.session.start(absent, time.monotonic() + max(timeout, START_SECONDS))
            except KernelGone as gone:
                return ("timed out" if gone.timed_out else "stopped"), None
            kernel.deadline = time.monotonic() + timeout + 2 * (known + course)
            current = None
            try:
                for index in range(end):
                    cell = self.cells[index]
                    if index in self.skipped or cell["test"] or not cell["source"].strip():
                        continue
                    current = index
                    data = self.course.get(course_cell_key(cell["source"])) if index not in self.student else None
                    if data is not None and not data.run:
                        for name, item in data.values:
                            if name in needed:
                                kernel.inject(name, item)
                        continue
                    started = time.monotonic()
                    error = kernel.run_cell(cell["source"])
                    self.durations.setdefault(index, time.monotonic() - started)
                    if error:
                        self.errors[index] = error
                    else:
                        self.errors.pop(index, None)
                return "ok", None
            except KernelGone as gone:
                self.session.stop()
                if current is None:
                    return ("timed out" if gone.timed_out else "stopped"), None
                self.skipped.add(current)
                if current not in self.durations:  # a new cell of this exercise: it times out
                    self.durations[current] = 0.0
                    return ("timed out" if gone.timed_out else "stopped"), current
        return "timed out", None


# --- the checks, in a process of their own ------------------------------------------------------

def _virtual_memory() -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _run_checks(kernel: Kernel, plan: ExercisePlan, timeout: float, clean: bool) -> dict[str, Any]:
    """In the checker: fetch the names, run the test cell's parts; a JSON-ready outcome."""
    import torch

    import transformer_course.course.checks as checks

    def named(check: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return check(*args, **kwargs)
            except checks.ExerciseError as error:
                name = args[0] if args else kwargs.get("name")
                error.check_name = name if isinstance(name, str) else None
                raise

        return wrapper

    for attribute in dir(checks):
        if attribute.startswith("check_"):
            setattr(checks, attribute, named(getattr(checks, attribute)))
    torch.manual_seed(0)  # the same random test inputs for every student and every run
    kernel.deadline = time.monotonic() + timeout
    kernel.callbacks = []
    hidden, hidden_started = False, False
    namespace: dict[str, Any] = {"__name__": GRADER_MODULE, "__builtins__": builtins}
    outcome = {"result": "passed", "message": "", "kernel_ok": True}
    try:
        fetched = kernel.request(("get", list(plan.names)))
        if isinstance(fetched, dict):
            namespace.update({k: v for k, v in fetched.items() if k in plan.names})
        for code, hidden in plan.parts:
            hidden_started = hidden_started or hidden
            with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()):
                warnings.simplefilter("ignore")
                exec(compile(code, f"<{plan.label} tests>", "exec"), namespace)  # noqa: S102
    except KernelTimeout:
        outcome = {"result": "timed out", "kernel_ok": False,
                   "message": f"timed out: your code ran longer than {timeout:g} s during the tests and was "
                              "stopped; the other exercises were graded without it"}
    except KernelGone as gone:
        outcome = {"result": "failed", "kernel_ok": False,
                   "message": f"your code stopped the notebook's process during the tests ({gone})"}
    except MemoryError:
        outcome = {"result": "failed", "kernel_ok": False,
                   "message": "the tests ran out of memory on your answer (is it far larger than asked?)"}
    except Exception as error:  # noqa: BLE001 (any failure of the tests is the student's to read)
        clean_here = clean and not (hidden_started and not hidden)
        outcome = {"result": "failed", "kernel_ok": True, "visible_unclean": not hidden and not clean_here,
                   "message": describe_error(error, hidden, clean_here, getattr(error, "check_name", None))}
    outcome.update(hidden_started=hidden_started)
    return outcome


def _write_all(fd: int, payload: bytes) -> None:
    """Write every byte of ``payload`` to the pipe ``fd`` (``os.write`` may write only part of it)."""
    view = memoryview(payload)
    while view:
        view = view[os.write(fd, view):]


def _read_bounded(fd: int, deadline: float, limit: int) -> bytes | None:
    """Everything written to ``fd`` until it closes; None past ``deadline`` or beyond ``limit`` bytes."""
    chunks, total = [], 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > limit:
            return None
        chunks.append(chunk)


def _checker(kernel: Kernel, plan: ExercisePlan, limits: Limits, clean: bool) -> dict[str, Any]:
    """Run :func:`_run_checks` in a forked process with its own memory, CPU and wall-clock limits."""
    read_fd, write_fd = os.pipe()
    extra = limits.check_mb * 2**20
    pid = os.fork()
    if pid == 0:  # the checker
        code = 0
        try:
            os.close(read_fd)
            memory = _virtual_memory() + extra
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
            cpu = int(limits.timeout) + 5
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
            _write_all(write_fd, json.dumps(_run_checks(kernel, plan, limits.timeout, clean), ensure_ascii=True).encode())
        except BaseException:  # noqa: BLE001
            code = 3
        finally:
            os._exit(code)
    os.close(write_fd)
    try:
        data = _read_bounded(read_fd, time.monotonic() + limits.timeout + min(10.0, limits.timeout), 2**20)
    finally:
        os.close(read_fd)
    if data is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return {"result": "timed out", "kernel_ok": False, "hidden_started": True,
                "message": f"timed out: the tests ran longer than {limits.timeout:g} s on your answer "
                           "and were stopped; the other exercises were graded without it"}
    _, status = os.waitpid(pid, 0)
    with contextlib.suppress(ValueError):
        outcome = json.loads(data)
        if isinstance(outcome, dict) and outcome.get("result") in ("passed", "failed", "timed out"):
            return outcome
    how = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"status {os.waitstatus_to_exitcode(status)}"
    return {"result": "failed", "kernel_ok": False, "hidden_started": True,
            "message": f"the tests stopped on your answer ({how}: out of memory or CPU time?)"}


def _check_exercise(replay: _Replay, plan: ExercisePlan, end: int, absent: frozenset, limits: Limits,
                    segment: tuple[int, int], copies: dict[str, str], student_sources: list[str]) -> ExerciseResult:
    """Grade one exercise: its test cell in a checker, against the kernel its replay left."""
    def result(points: float, outcome: str, message: str) -> ExerciseResult:
        review = [f"{name} copies the package's {reference}" for name, reference in sorted(copies.items())
                  if name in plan.answers]
        review += [f"your code names {name}, which this exercise puts off limits"
                   for name in library_calls(student_sources, plan.forbidden)]
        if review:
            message = (message + " " if message else "") + \
                f"(for your instructor to review: {'; '.join(review)})"
        return ExerciseResult(plan.label, plan.title, points, plan.max_points, outcome, safe_text(message, 1000))

    outcome = _checker(replay.session.kernel, plan, limits, True)
    if outcome.get("visible_unclean"):
        # The full message of a failed visible check comes from a kernel that never ran a hidden
        # check: a fresh one, replayed to here (only failing exercises pay for it).
        if replay.run(end, absent, limits.timeout, plan.names)[0] == "ok":
            again = _checker(replay.session.kernel, plan, limits, True)
            if again["result"] == "failed" and not again.get("visible_unclean"):
                outcome["message"] = again["message"]
    replay.session.stop()
    if outcome["result"] == "passed":
        return result(plan.max_points, "passed", "")
    if outcome["result"] == "timed out":
        return result(0.0, "timed out", outcome["message"])
    cells = replay.cells
    solution = next((i for i, c in enumerate(cells) if c["grade_id"] == f"{plan.label}-solution"), None)
    if replay.errors.get(solution, "").startswith("NotImplementedError"):
        return result(0.0, "failed", "not answered: the solution cell still raises NotImplementedError")
    message = str(outcome.get("message", ""))
    start, stop = segment
    segment_errors = [f"cell {cells[i]['index']} raised {text}" for i, text in sorted(replay.errors.items())
                      if start <= i < stop and i in replay.student]
    if segment_errors:
        message += " (" + "; ".join(segment_errors)[:400] + ")"
    missing = sorted(name for name in plan.references if any(
        f"'{name}'" in replay.errors[i] for i in replay.errors if i < stop and i in replay.student))
    if missing:
        message += (f"; {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not available while this "
                    "exercise is graded: the exercise asks you to write it")
    return result(0.0, "failed", message)


# --- one notebook -------------------------------------------------------------------------------

def grade_notebook(submission: Path | bytes, instructor_notebook: Path, released_folder: Path | None,
                   limits: Limits = Limits(), slot: int = 0, cgroup: CgroupSlot | None = None,
                   course: dict[str, CourseCell] | None = None,
                   views: dict[frozenset, Path] | None = None) -> NotebookResult:
    """Grade one student's notebook against the instructor's test cells.

    Args:
        submission: the student's ``.ipynb`` (a regular file, read once) or its bytes.
        instructor_notebook: ``course/source/<chapter>/<chapter>.ipynb`` (read here, never shown
            to the kernel).
        released_folder: ``course/release/<chapter>/``; its other files are shown read-only next
            to the notebook in the sandbox, and its notebook says which cells the student wrote.
        limits: time, memory and sandbox settings.
        slot: the job slot (its uid in the sandbox); cgroup: the slot's cgroup, if any.
        course: the chapter's :func:`course_data` (computed here when not given).
        views: package views already built, by the names they lack (reused across notebooks).

    Returns:
        The exercises' results and a status line ("graded", "graded; timed out in dl0028-ex2",
        "invalid notebook: ...").
    """
    start, cpu_start = time.monotonic(), _cpu_time()
    plans = exercise_plans(instructor_notebook)
    try:
        data = submission if isinstance(submission, bytes) else \
            read_regular_file(submission, limits.notebook_mb * 2**20)
        cells = read_submission(data)
    except (InvalidNotebook, RefusedFile) as error:
        return not_graded(plans, str(error), time.monotonic() - start)
    chapter = instructor_notebook.stem
    released_notebook = released_folder / f"{chapter}.ipynb" if released_folder else None
    released = released_sources(released_notebook)
    if course is None:
        course = course_data(released_notebook, limits, slot, cgroup) \
            if released_notebook is not None and released_notebook.is_file() else {}
    student = {i for i, c in enumerate(cells) if course_cell_key(c["source"]) not in released and not c["test"]}
    copies = copied_references([cells[i]["source"] for i in sorted(student)],
                               reference_fingerprints(tuple(sorted({t for p in plans for t in p.targets}))))
    results: dict[str, ExerciseResult] = {}
    timed_out: list[str] = []
    cpu_limit = int(limits.timeout * (3 * len(plans) + 2) + 60)
    folder = Path(tempfile.mkdtemp(prefix="grading-"))
    os.chmod(folder, 0o755)
    session = None
    try:
        stage = folder / "files"
        stage.mkdir()
        files = []
        if released_folder is not None and released_folder.is_dir():
            for item in sorted(released_folder.iterdir()):
                if item.suffix != ".ipynb" and item.is_file() and not item.is_symlink():
                    shutil.copyfile(item, stage / item.name)
                    files.append(stage / item.name)
        (stage / f"{chapter}.ipynb").write_bytes(data)
        files.append(stage / f"{chapter}.ipynb")
        for path in [stage, *files]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        session = _Session(folder, files, limits, cpu_limit, slot, cgroup, {} if views is None else views)
        replay = _Replay(cells, course, session, student)
        previous_end = 0
        for plan, anchor in anchors(cells, plans):
            end = len(cells) if anchor is None else anchor + 1
            absent = frozenset(plan.absent)
            segment = (previous_end, end)
            previous_end = max(previous_end, end)
            state, cell = replay.run(end, absent, limits.timeout, plan.names)
            if state != "ok":
                session.stop()
                where = f"cell {cells[cell]['index']}" if cell is not None else "starting the notebook"
                what = (f"timed out: {where} ran longer than the time left ({limits.timeout:g} s per exercise) "
                        "and was stopped" if state == "timed out" else
                        f"stopped: the notebook's process ended in {where} (crash, memory or CPU limit)")
                results[plan.label] = ExerciseResult(plan.label, plan.title, 0.0, plan.max_points,
                                                     "timed out" if state == "timed out" else "failed",
                                                     what + "; the other exercises were graded without it")
                if state == "timed out":
                    timed_out.append(plan.label)
                continue
            results[plan.label] = _check_exercise(replay, plan, end, absent, limits, segment, copies,
                                                  [cells[i]["source"] for i in sorted(student)])
            if results[plan.label].result == "timed out":
                timed_out.append(plan.label)
    finally:
        if session is not None:
            session.stop()
        remove_tree(folder)
    ordered = [results[p.label] for p in plans]
    status = "graded" if not timed_out else f"graded; timed out in {', '.join(sorted(timed_out))}"
    return NotebookResult(ordered, status, time.monotonic() - start,
                          _cpu_time() - cpu_start + (session.cpu_seconds if session else 0.0))


def _cpu_time() -> float:
    """CPU seconds used by this process and its waited-for children (kernels and checkers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


# --- many notebooks, each in a worker of its own ------------------------------------------------

@dataclass
class Task:
    """One notebook to grade: a key for the caller, the bytes read once, where its chapter lives."""

    key: Any
    data: bytes
    instructor_notebook: Path
    released_folder: Path | None
    budget: float


def notebook_budget(limits: Limits, exercises: int) -> float:
    """Wall-clock seconds after which a notebook's worker is killed: every budget of every exercise
    (its cells, its replay, its checks), kernel starts, and a margin."""
    return limits.timeout * (3 * exercises + 2) + 120 + 15 * exercises


WORKER_MB = 4096
"""Memory (address space) a notebook's worker may use on top of what the grader had when it forked."""


def grade_many(tasks: list[Task], limits: Limits, jobs: int = 1,
               on_done: Any = None) -> tuple[dict[Any, NotebookResult | str], str | None]:
    """Grade ``tasks``, ``jobs`` at a time, each in a forked worker process with its own job slot.

    The course's own run of each chapter (:func:`course_data`, ``jobs`` chapters at a time) and the
    package views are made once, here, and shared by the workers.

    Returns:
        Per key a :class:`NotebookResult`, or a string saying why that notebook's grading died
        (killed, out of memory, over its budget); and why sandboxes got no cgroup (None if they did).
    """
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ValueError(f"jobs: expected a positive int, got {jobs!r}")
    import torch  # imported once here, not in every worker

    torch.set_num_threads(1)
    python_source("pass")
    groups: dict[int, CgroupSlot | None] = {}
    cgroup_note = None
    if limits.sandbox != "none":
        for slot in range(jobs):
            group = make_cgroup(slot, limits, jobs)
            if isinstance(group, str):
                cgroup_note = group
                for made in groups.values():
                    if made is not None:
                        remove_cgroup(made)
                groups = {}
                break
            groups[slot] = group
    shared = Path(tempfile.mkdtemp(prefix="grading-views-"))
    os.chmod(shared, 0o755)
    views: dict[frozenset, Path] = {}
    courses: dict[Path, dict[str, CourseCell]] = {}
    released_of: dict[Path, Path] = {}  # chapter -> its released notebook, for the chapters that have one
    for task in tasks:
        chapter = task.instructor_notebook
        if chapter in courses:
            continue
        courses[chapter] = {}
        released = task.released_folder / f"{chapter.stem}.ipynb" if task.released_folder else None
        if released is not None and released.is_file():
            released_of[chapter] = released
        try:
            for plan in exercise_plans(chapter):
                absent = frozenset(plan.absent)
                if absent and absent not in views:
                    views[absent] = package_view(sorted(absent), _readable_folder(shared))[0]
        except Exception:  # noqa: BLE001 (each worker then says what is wrong with its chapter)
            released_of.pop(chapter, None)
    for chapter, found in zip(released_of, course_data_many(list(released_of.values()), limits, jobs, groups)):
        courses[chapter] = found if found is not None else {}
    results: dict[Any, NotebookResult | str] = {}
    pending = list(tasks)
    running: dict[int, tuple[Task, int, int, list[bytes], float, float]] = {}
    free = list(range(jobs))
    try:
        while pending or running:
            while pending and free:
                task, slot = pending.pop(0), free.pop(0)
                read_fd, write_fd = os.pipe()
                pid = os.fork()
                if pid == 0:
                    _worker(task, limits, slot, groups.get(slot), read_fd, write_fd,
                            courses.get(task.instructor_notebook), views)
                os.close(write_fd)
                running[pid] = (task, slot, read_fd, [], time.monotonic() + task.budget, time.monotonic())
            now = time.monotonic()
            wait = max(0.0, min(r[4] for r in running.values()) - now)
            fds = {r[2]: pid for pid, r in running.items()}
            ready = select.select(list(fds), [], [], wait)[0]
            finished = []
            for fd in ready:
                pid = fds[fd]
                chunk = os.read(fd, 1 << 16)
                if chunk and sum(map(len, running[pid][3])) < 2**22:
                    running[pid][3].append(chunk)
                elif not chunk:
                    finished.append((pid, None))
            now = time.monotonic()
            for pid, r in running.items():
                if r[4] <= now and all(pid != f for f, _ in finished):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                    finished.append((pid, f"grader error: grading this notebook took longer than its budget of "
                                          f"{r[0].budget:.0f} s and was stopped"))
            for pid, reason in finished:
                task, slot, fd, chunks, _, started = running.pop(pid)
                os.close(fd)
                _, status = os.waitpid(pid, 0)
                if groups.get(slot) is not None:
                    groups[slot].kill()
                if reason is None:
                    try:
                        results[task.key] = NotebookResult.from_json(b"".join(chunks))
                    except (ValueError, KeyError, TypeError):
                        how = (f"killed by signal {os.WTERMSIG(status)}" + (" (out of memory?)" if
                                                                           os.WTERMSIG(status) == 9 else "")
                               if os.WIFSIGNALED(status) else f"exit status {os.waitstatus_to_exitcode(status)}")
                        results[task.key] = (f"grader error: the process grading this notebook ended ({how}) "
                                             f"after {time.monotonic() - started:.0f} s")
                else:
                    results[task.key] = reason
                free.append(slot)
                if on_done is not None:
                    on_done(task.key)
    finally:
        for pid, r in running.items():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        for group in groups.values():
            if group is not None:
                remove_cgroup(group)
        remove_tree(shared)
    return results, cgroup_note


def _worker(task: Task, limits: Limits, slot: int, cgroup: CgroupSlot | None, read_fd: int, write_fd: int,
            course: dict[str, CourseCell] | None, views: dict[frozenset, Path]) -> None:
    """The forked worker: grade one notebook under limits on memory and CPU time, write its result
    as JSON, exit (never returns)."""
    code = 0
    try:
        os.close(read_fd)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        memory = _virtual_memory() + WORKER_MB * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        cpu = int(task.budget) + 60
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        try:
            import torch

            torch.set_num_threads(1)
            result = grade_notebook(task.data, task.instructor_notebook, task.released_folder, limits, slot, cgroup,
                                    course, views)
            payload = result.to_json()
        except Exception as error:  # noqa: BLE001 (one broken submission never stops the others)
            payload = json.dumps({"exercises": [], "status": safe_text(f"grader error: {type(error).__name__}: "
                                                                        f"{error}", 300),
                                  "seconds": 0.0, "cpu_seconds": 0.0}, ensure_ascii=True).encode()
        _write_all(write_fd, payload)
    except BaseException:  # noqa: BLE001
        code = 3
    finally:
        os._exit(code)
