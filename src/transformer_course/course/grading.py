"""Grade submitted chapters exercise by exercise, with the student's code in a sandbox.

Four kinds of process take part, each bounded:

* a **worker** per notebook (:func:`grade_many` forks one per submission, ``jobs`` at a time) runs
  the grading of that notebook. It has a wall-clock budget; if it dies (killed, out of memory,
  crashed) or overruns, only that notebook's row says so, and the others are graded as usual.
* the **kernel** (:mod:`~transformer_course.course.kernel`) runs the student's cells in the sandbox
  (:mod:`~transformer_course.course.sandbox`): a job slot's own uid, cgroup where the host has one,
  a sized tmpfs as its folder, no network, a read-only view of the system and nothing else. It never
  receives a hidden test's code or expected value.
* a **checker** per exercise, forked from the worker, runs that exercise's test cell on the names
  the kernel hands back (plain data; functions stay in the kernel and are called there), with its
  own memory limit and deadline, callbacks into the test's functions included. A checker that
  runs out of memory or time costs its exercise only.
* the calling process collects the results and writes the files.

Time is bounded per exercise: its new cells get ``timeout`` seconds, the replay of earlier cells
after a restart one more ``timeout`` in all (however many restarts and cells), and its checks
another ``timeout``. A cell that overruns is killed with its kernel; the exercise scores 0 as
"timed out", a fresh kernel replays the earlier cells without the runaway one, and grading goes on.

An exercise scores 0 as "flagged" when its answer is computed with a package function the exercise
asks the student to write (guards record such calls at run time, however the function is reached;
see :mod:`~transformer_course.course.kernel`), or when a function of the student's is a copy of
that function's source (:func:`~transformer_course.course.plans.copied_references`). Every exercise
from a student's cell on that could switch the guards off (a closure, a frame, the arming hook, the
shell's transformers, ``gc``, code built at run time: :func:`~transformer_course.course.tampering.tampering`)
is "flagged" without running that cell, with what was found.
"""

from __future__ import annotations

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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from transformer_course.course.feedback import describe_error, feedback_html, safe_text  # noqa: F401 (re-exported)
from transformer_course.course.kernel import (GRADER_MODULE, PACKAGE_HIT, Kernel, KernelGone,  # noqa: F401
                                              KernelTimeout, RemoteError, RemoteObject, code_print)
from transformer_course.course.plans import (ExercisePlan, InvalidNotebook, anchors, answer_closure,  # noqa: F401
                                             course_cell_key,
                                             armed_statements, copied_references, exercise_plans,
                                             read_submission, reference_fingerprints, references_in_answers,
                                             released_sources, split_hidden)
from transformer_course.course.sandbox import (CgroupSlot, Limits, RefusedFile, cgroup_problem,  # noqa: F401
                                               kernel_command, kernel_env, make_cgroup, read_regular_file,
                                               remove_cgroup, remove_tree, restrict, sandbox_problem, sandbox_uid)
from transformer_course.course.tampering import tampering


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

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), ensure_ascii=True).encode("ascii")

    @classmethod
    def from_json(cls, data: bytes) -> NotebookResult:
        raw = json.loads(data.decode("ascii"))
        return cls([ExerciseResult(**e) for e in raw["exercises"]], raw["status"], raw["seconds"], raw["cpu_seconds"])


def not_graded(plans: list[ExercisePlan], reason: str, seconds: float = 0.0) -> NotebookResult:
    return NotebookResult([ExerciseResult(p.label, p.title, 0.0, p.max_points, "not graded", reason) for p in plans],
                          reason, seconds)


# --- running the cells ----------------------------------------------------------------------------

START_SECONDS = 120.0
"""Longest a kernel may take to start (the grader's own code: Python, torch, IPython, the guards)."""

MAX_RESTARTS = 3
"""Restarts one exercise's replay may need (each skips a cell that overran); then it times out."""

class _Runner:
    """Runs one notebook's cells in a kernel, restarting it (without the runaway cell) when needed."""

    def __init__(self, cells: list[dict[str, Any]], workdir: Path, limits: Limits, cpu_limit: int,
                 slot: int, files: list[Path], cgroup: CgroupSlot | None, targets: list[tuple[str, str]]) -> None:
        self.cells, self.workdir, self.limits, self.cpu_limit = cells, workdir, limits, cpu_limit
        self.slot, self.files, self.cgroup, self.targets = slot, files, cgroup, targets
        self.kernel: Kernel | None = None
        self.position = 0  # the next cell to run in the current kernel
        self.reached = 0  # cells before this one have run (or been skipped) once
        self.cpu_seconds = 0.0  # of the kernels so far, as they reported it
        self.skipped: set[int] = set()
        self.errors: dict[int, tuple[str, bool]] = {}  # cell -> (error, raised while the kernel was clean)
        self.hits: dict[int, set[str]] = {}  # cell -> guarded references called in its armed statements
        self.durations: dict[int, float] = {}  # cell -> seconds its first run took
        self.clean = True  # the current kernel has run no hidden check yet
        self.tampered: tuple[int, str] | None = None  # (cell, what) once a kernel found its hooks changed

    def _start(self, deadline: float) -> Kernel:
        kernel = Kernel(kernel_command(self.limits, self.workdir, self.slot, self.files), self.workdir,
                        kernel_env(self.workdir), restrict(self.limits, self.cpu_limit, self.cgroup))
        try:
            kernel.start(deadline)
            kernel.guard(self.targets)
        except KernelGone:
            kernel.kill()
            raise
        self.clean = True
        return kernel

    def stop(self) -> None:
        if self.kernel is not None:
            self.kernel.kill()
            self.cpu_seconds += self.kernel.cpu_seconds
            self.kernel = None
        if self.cgroup is not None:
            self.cgroup.kill()

    def run_until(self, end: int, budget: float, armed: dict[int, tuple[int, ...]]) -> tuple[str, int | None]:
        """Run cells up to (excluding) ``end``: ("ok", None) or ("timed out"/"stopped", cell).

        The new cells share ``budget`` seconds, counted from the first of them. The replay of cells
        that ran before shares one more budget in all, however many cells and restarts it takes:
        ``limits.timeout`` plus twice what those cells took the first time (a cell slow only when
        replayed gains nothing); a cell that overruns in a replay is skipped too, and the replay
        starts again within what is left, at most ``MAX_RESTARTS`` times. A kernel's start runs
        only the grader's code and has a deadline of its own.
        """
        deadline = None
        replay_budget = self.limits.timeout + 2 * sum(
            seconds for index, seconds in self.durations.items() if index < min(end, self.reached))
        replay_deadline = None
        restarts = 0
        while True:
            if self.kernel is None:
                self.position = 0
                restarts += 1
                if restarts > MAX_RESTARTS + 1:
                    return "timed out", None
                try:  # a start runs only the grader's code: its own deadline, not the student's budget
                    self.kernel = self._start(time.monotonic() + max(self.limits.timeout, START_SECONDS))
                except KernelGone as gone:
                    return ("timed out" if gone.timed_out else "stopped"), None
                if replay_deadline is None:
                    replay_deadline = time.monotonic() + replay_budget
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
                    self.kernel.deadline = replay_deadline if replay else deadline
                    self.kernel.hits = set()
                    started = time.monotonic()
                    error = self.kernel.run_cell(cell["source"], armed.get(index, ()))
                    if not replay:
                        self.durations[index] = time.monotonic() - started
                    if self.kernel.hits:
                        self.hits.setdefault(index, set()).update(self.kernel.hits)
                    if self.kernel.tampered and self.tampered is None:
                        self.tampered = (index, self.kernel.tampered)
                    if error:
                        self.errors[index] = (error, self.clean)
                    self.position += 1
                    self.reached = max(self.reached, self.position)
                return "ok", None
            except KernelGone as gone:
                self.stop()
                if current is None:
                    return ("timed out" if gone.timed_out else "stopped"), None
                self.skipped.add(current)
                if current < self.reached:
                    if replay_deadline is not None and time.monotonic() < replay_deadline:
                        continue
                    return ("timed out" if gone.timed_out else "stopped"), current
                self.reached = current + 1
                return ("timed out" if gone.timed_out else "stopped"), current


# --- the checks, in a process of their own ------------------------------------------------------

def _virtual_memory() -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _reference_prints(targets: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """code_print -> reference name, for the reference functions and the methods of reference classes."""
    import importlib

    found = {}
    for module_name, name in targets:
        try:
            obj = getattr(importlib.import_module(module_name), name)
        except (ImportError, AttributeError):
            continue
        for function in ([obj] if not isinstance(obj, type) else list(vars(obj).values())):
            printed = code_print(function)
            if printed:
                found[printed] = name
    return found


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
    kernel.callbacks, kernel.hits = [], set()
    hidden, hidden_started = False, False
    namespace: dict[str, Any] = {"__name__": GRADER_MODULE, "__builtins__": builtins}
    outcome = {"result": "passed", "message": "", "kernel_ok": True}
    try:
        fetched = kernel.request(("get", list(plan.names)))
        if isinstance(fetched, dict):
            namespace.update({k: v for k, v in fetched.items() if k in plan.names})
            prints = _reference_prints(plan.targets)
            for value in fetched.values():  # a function compiled from the reference's source
                if isinstance(value, RemoteObject) and value._code in prints:
                    kernel.hits.add(prints[value._code])
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
    outcome.update(hits=sorted(kernel.hits), hidden_started=hidden_started, tampered=kernel.tampered)
    return outcome


def _write_all(fd: int, payload: bytes) -> None:
    """Write every byte of ``payload`` to the pipe ``fd`` (``os.write`` may write only part of it)."""
    view = memoryview(payload)
    while view:
        view = view[os.write(fd, view):]


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
    chunks, deadline = [], time.monotonic() + limits.timeout + min(10.0, limits.timeout)
    try:
        while True:
            left = deadline - time.monotonic()
            ready = select.select([read_fd], [], [], max(left, 0))[0] if left > 0 else []
            if not ready:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return {"result": "timed out", "kernel_ok": False, "hits": [], "hidden_started": True,
                        "message": f"timed out: the tests ran longer than {limits.timeout:g} s on your answer "
                                   "and were stopped; the other exercises were graded without it"}
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    try:
        outcome = json.loads(b"".join(chunks))
        if isinstance(outcome, dict) and outcome.get("result") in ("passed", "failed", "timed out"):
            return outcome
    except ValueError:
        pass
    how = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"status {os.waitstatus_to_exitcode(status)}"
    return {"result": "failed", "kernel_ok": False, "hits": [], "hidden_started": True,
            "message": f"the tests stopped on your answer ({how}: out of memory or CPU time?)"}


def _check_exercise(runner: _Runner, plan: ExercisePlan, cells: list[dict[str, Any]], limits: Limits,
                    segment: tuple[int, int], armed_cells: dict[int, set[str]],
                    copies: dict[str, str], armed: dict[int, tuple[int, ...]], closure: set[str]) -> ExerciseResult:
    """Grade one exercise: reference calls recorded so far, then its test cell in a checker."""
    def result(points: float, outcome: str, message: str) -> ExerciseResult:
        return ExerciseResult(plan.label, plan.title, points, plan.max_points, outcome, safe_text(message, 1000))

    references = set(plan.references)
    start, end = segment
    used = set()
    for index, names in runner.hits.items():
        if index < end and (start <= index or armed_cells.get(index, set()) & set(plan.answers)):
            used |= (names & references) | _unexpected(names, plan)
    copied = {reference for name, reference in copies.items() if name in closure} & references
    if not used and not copied:
        outcome = _checker(runner.kernel, plan, limits, runner.clean)
        if outcome.get("hidden_started"):
            runner.clean = False
        if not outcome.get("kernel_ok"):
            runner.stop()
        used |= (set(outcome.get("hits") or []) & references) | _unexpected(set(outcome.get("hits") or []), plan)
        if outcome.get("tampered"):  # the student's code changed the kernel's hooks while the tests ran
            runner.tampered = runner.tampered or (start, str(outcome["tampered"]))
            return result(0.0, "flagged", f"your code changed the grader's hooks while the tests ran "
                          f"({outcome['tampered']}); every exercise from here on scores 0 and is flagged "
                          "for your instructor to review")
        if outcome.get("visible_unclean") and not used:
            # The full message of a failed visible check comes from a kernel that never ran a hidden
            # check: a fresh one, replayed to here (only failing exercises pay for it).
            runner.stop()
            if runner.run_until(end, limits.timeout, armed)[0] == "ok":
                again = _checker(runner.kernel, plan, limits, True)
                runner.clean = not again.get("hidden_started")
                if not again.get("kernel_ok"):
                    runner.stop()
                used |= (set(again.get("hits") or []) & references) | _unexpected(set(again.get("hits") or []), plan)
                if again["result"] == "failed" and not again.get("visible_unclean"):
                    outcome["message"] = again["message"]
    if used or copied:
        what = ", ".join(sorted(used | copied))
        how = "is computed with" if used else "copies the source of"
        return result(0.0, "flagged", f"your answer {how} {what} from transformer_course, which this exercise "
                      "asks you to write yourself (or does not give you); it scores 0 (checking your answer "
                      "against it in a separate line, with print or assert, is fine)")
    if outcome["result"] == "passed":
        return result(plan.max_points, "passed", "")
    if outcome["result"] == "timed out":
        return result(0.0, "timed out", outcome["message"])
    solution = next((i for i, c in enumerate(cells) if c["grade_id"] == f"{plan.label}-solution"), None)
    if runner.errors.get(solution, ("", True))[0].startswith("NotImplementedError"):
        return result(0.0, "failed", "not answered: the solution cell still raises NotImplementedError")
    message = str(outcome.get("message", ""))
    segment_errors = [(f"cell {cells[i]['index']} raised {text}" if clean else
                       f"cell {cells[i]['index']} raised an exception")
                      for i, (text, clean) in sorted(runner.errors.items()) if start <= i < end]
    if segment_errors:
        message += " (" + "; ".join(segment_errors)[:400] + ")"
    return result(0.0, "failed", message)


def _unexpected(hits: set[str], plan: ExercisePlan) -> set[str]:
    """The watched package functions among ``hits`` that the exercise's solution and tests never name,
    as ``qualname`` (``"dilated_sliding_window_mask"``, ``"RollingAttentionCache.attend"``)."""
    found = set()
    for hit in hits:
        if hit.startswith(PACKAGE_HIT) and ":" in hit:
            qualname = hit.split(":", 1)[1]
            if qualname.split(".")[0] not in plan.allowed:
                found.add(qualname)
    return found


def _tampering_result(plan: ExercisePlan, cell: int, found: list[tuple[int, str]]) -> ExerciseResult:
    """An exercise graded after a cell that reaches into the grader: flagged, with what was found."""
    what = "; ".join(f"line {line}: {text}" if line else text for line, text in found[:5]) + \
        ("; ..." if len(found) > 5 else "")
    message = (f"cell {cell} reaches into the grading machinery ({what}); a graded notebook may not, so every "
               "exercise from that cell on scores 0 and is flagged for your instructor to review")
    return ExerciseResult(plan.label, plan.title, 0.0, plan.max_points, "flagged", safe_text(message, 1000))


# --- one notebook -------------------------------------------------------------------------------

def grade_notebook(submission: Path | bytes, instructor_notebook: Path, released_folder: Path | None,
                   limits: Limits = Limits(), slot: int = 0, cgroup: CgroupSlot | None = None) -> NotebookResult:
    """Grade one student's notebook against the instructor's test cells.

    Args:
        submission: the student's ``.ipynb`` (a regular file, read once) or its bytes.
        instructor_notebook: ``course/source/<chapter>/<chapter>.ipynb`` (read here, never shown
            to the kernel).
        released_folder: ``course/release/<chapter>/``; its other files are shown read-only next
            to the notebook in the sandbox, and its notebook says which cells the student wrote.
        limits: time, memory and sandbox settings.
        slot: the job slot (its uid in the sandbox); cgroup: the slot's cgroup, if any.

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
    released = released_sources(released_folder / f"{chapter}.ipynb" if released_folder else None)
    student = {i for i, c in enumerate(cells) if course_cell_key(c["source"]) not in released and not c["test"]}
    anchored = anchors(cells, plans)
    targets = sorted({t for p in plans for t in p.targets})
    student_sources = [cells[i]["source"] for i in sorted(student)]
    closure = answer_closure(student_sources, tuple(a for p in plans for a in p.answers))
    armed = {i: armed_statements(cells[i]["source"], closure) for i in student}
    binds = {i: answer_closure([cells[i]["source"]], ()) | _bound(cells[i]["source"]) for i in student}
    copies = copied_references(student_sources, reference_fingerprints(tuple(targets)))
    tampered = next(((i, found) for i in sorted(student) if (found := tampering(cells[i]["source"]))), None)
    results: dict[str, ExerciseResult] = {}
    timed_out: list[str] = []
    cpu_limit = int(limits.timeout * (3 * len(plans) + 2) + 60)
    folder = Path(tempfile.mkdtemp(prefix="grading-"))
    runner = None
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
        for path in [folder, stage, *files]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        workdir = folder / "work"
        if limits.sandbox in ("none", "user"):
            shutil.copytree(stage, workdir)
            (workdir / ".tmp").mkdir()
            if limits.sandbox == "user":  # the kernel runs as the slot's uid: its folder is its own
                for path in [workdir, workdir / ".tmp", *workdir.iterdir()]:
                    os.chown(path, sandbox_uid(slot), sandbox_uid(slot))
        else:
            workdir.mkdir()  # the kernel's cwd on the host; in the sandbox a tmpfs is mounted there
        runner = _Runner(cells, workdir, limits, cpu_limit, slot, files, cgroup, targets)
        previous_end = 0
        for plan, anchor in anchored:
            end = len(cells) if anchor is None else anchor + 1
            if tampered is not None and tampered[0] < end:  # the cell would run before this exercise's checks
                results[plan.label] = _tampering_result(plan, cells[tampered[0]]["index"], tampered[1])
                continue
            state, cell = runner.run_until(end, limits.timeout, armed)
            if runner.tampered is not None:  # seen by the kernel itself: a route the static reading missed
                results[plan.label] = _tampering_result(plan, cells[runner.tampered[0]]["index"],
                                                        [(0, runner.tampered[1])])
                continue
            segment = (previous_end, end)
            previous_end = max(previous_end, end)
            if state != "ok":
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
            results[plan.label] = _check_exercise(runner, plan, cells, limits, segment, binds, copies, armed,
                                                  answer_closure(student_sources, plan.answers))
            if results[plan.label].result == "timed out":
                timed_out.append(plan.label)
    finally:
        if runner is not None:
            runner.stop()
        remove_tree(folder)
    ordered = [results[p.label] for p in plans]
    status = "graded" if not timed_out else f"graded; timed out in {', '.join(sorted(timed_out))}"
    return NotebookResult(ordered, status, time.monotonic() - start,
                          _cpu_time() - cpu_start + (runner.cpu_seconds if runner else 0.0))


def _bound(source: str) -> set[str]:
    import ast

    from transformer_course.course.coursework import bound_names
    from transformer_course.course.plans import _python_source

    try:
        tree = ast.parse(_python_source(source))
    except (SyntaxError, ValueError):
        return set()
    return {name for statement in tree.body for name in bound_names(statement)}


def _cpu_time() -> float:
    """CPU seconds used by this process and its waited-for children (the checkers)."""
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
    (its cells, one replay, its checks), kernel starts, and a margin."""
    return limits.timeout * (3 * exercises + 2) + 120


def grade_many(tasks: list[Task], limits: Limits, jobs: int = 1,
               on_done: Any = None) -> tuple[dict[Any, NotebookResult | str], str | None]:
    """Grade ``tasks``, ``jobs`` at a time, each in a forked worker process with its own job slot.

    Returns:
        Per key a :class:`NotebookResult`, or a string saying why that notebook's grading died
        (killed, out of memory, over its budget); and why sandboxes got no cgroup (None if they did).
    """
    jobs = max(1, int(jobs))
    import torch  # imported once here, not in every worker

    from transformer_course.course.plans import _python_source

    torch.set_num_threads(1)
    _python_source("pass")
    for chapter in {t.instructor_notebook for t in tasks}:  # warms the imports the plans need
        with contextlib.suppress(Exception):
            reference_fingerprints(tuple({x for p in exercise_plans(chapter) for x in p.targets}))
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
                    _worker(task, limits, slot, groups.get(slot), read_fd, write_fd)
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
                if chunk:
                    running[pid][3].append(chunk)
                else:
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
    return results, cgroup_note


def _worker(task: Task, limits: Limits, slot: int, cgroup: CgroupSlot | None, read_fd: int, write_fd: int) -> None:
    """The forked worker: grade one notebook, write its result as JSON, exit (never returns)."""
    code = 0
    try:
        os.close(read_fd)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        try:
            import torch

            torch.set_num_threads(1)
            result = grade_notebook(task.data, task.instructor_notebook, task.released_folder, limits, slot, cgroup)
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
