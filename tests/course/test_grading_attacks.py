"""Attacks on the grader that need no sandbox run (issue 22): each test is one attack class.

The attacks that need a student's code to run (unbounded checks, reference answers reached by any
path, hidden tests leaking through feedback) are in test_coursework_grading.py, in its shared run.

class                                              test
1 a worker killed (OOM) costs only its notebook     test_a_killed_worker_costs_only_its_notebook
1 a worker that overruns costs only its notebook    test_a_worker_over_its_budget_costs_only_its_notebook
1 test code or a callback that never returns       test_checks_that_never_return_are_stopped_at_the_deadline
1 test code that builds a list of 10**9 items      test_checks_that_grow_without_bound_run_out_of_their_own_memory
1 lone surrogates, Latin-1 file names               test_text_no_encoder_accepts_still_gives_the_grades_files
2 symlinked notebooks and student folders           test_links_are_never_followed
2 FIFOs and devices named like a chapter            test_pipes_and_devices_are_refused_unread
2 a size cap, read once                             test_an_oversized_notebook_is_refused_unread
3 a tensor carrying Python state                    test_a_tensor_comes_back_without_python_state
4 hidden feedback names only the property           test_hidden_feedback_names_only_the_property
5 the instructor's list decides "missing"           test_the_instructors_list_decides_the_missing_rows
5 student ids with a newline                        test_a_student_id_must_match_whole
5 spreadsheet formula injection                     test_csv_cells_are_never_formulas
5 a 3,000-deep tree                                 test_deep_trees_are_listed_and_removed_without_recursion
5 a uid per job, a sized folder                     test_each_job_slot_has_its_own_uid_and_a_sized_folder
5 a cgroup per sandbox (or why not)                 test_a_sandbox_cgroup_bounds_memory_and_processes_or_grading_says_why_not
6 a forged reply (stack walk, pickle bomb)          test_a_forged_reply_holding_a_pickle_bomb_is_refused_at_once_without_unpickling
6 no secret in the kernel's process                 test_the_kernel_loop_holds_no_secret_a_cell_could_read
6 pickles, 5,000-digit ints, deep nesting, bad
  tensors, unknown shapes in a reply                 test_every_reply_is_parsed_within_bounds_or_refused
6 an oversized reply                                test_a_reply_over_the_size_limit_is_refused_before_it_is_read
6 workers under memory and CPU-time limits          test_a_worker_runs_under_limits_on_memory_and_cpu_time
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
from pathlib import Path

import jupytext
import pytest

from coursework_tool_loader import tool  # noqa: E402  (tools/coursework.py, loaded once)
from transformer_course.course import grading
from transformer_course.course.feedback import csv_cell, describe_error, feedback_html
from transformer_course.course.sandbox import RefusedFile, read_regular_file, remove_tree, walk_files

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_MD = ROOT / "tests" / "fixtures" / "coursework" / "dl9001_coursework_fixture.myst.md"
FIXTURE = "dl9001_coursework_fixture"
OTHER = "dl9002_other_chapter"


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    """A course folder with two released chapters, made without nbgrader (only source/ and release/)."""
    course = tmp_path_factory.mktemp("course")
    for name in (FIXTURE, OTHER):
        for kind in ("source", "release"):
            (course / kind / name).mkdir(parents=True)
            jupytext.write(jupytext.read(FIXTURE_MD), course / kind / name / f"{name}.ipynb", fmt="ipynb")
    (course / "nbgrader_config.py").write_text("")
    return course


def _totals(out: Path) -> dict:
    with open(out / "totals.csv", encoding="utf-8") as handle:
        return {(row["student"], row["chapter"]): row for row in csv.DictReader(handle)}


# --- 1. a bounded grader ------------------------------------------------------------------------

def _task(key, course: Path) -> grading.Task:
    return grading.Task(key, b"{}", course / "source" / FIXTURE / f"{FIXTURE}.ipynb",
                        course / "release" / FIXTURE, 60.0)


def test_a_killed_worker_costs_only_its_notebook(course, monkeypatch):
    def grade_or_die(data, *args, **kwargs):
        if data == b"die":
            os.kill(os.getpid(), 9)  # what the OOM killer does
        return grading.NotebookResult([], "graded", 1.0)

    monkeypatch.setattr(grading, "grade_notebook", grade_or_die)
    tasks = [_task(k, course) for k in range(5)]
    tasks[1].data = b"die"
    results, _ = grading.grade_many(tasks, grading.Limits(sandbox="none"), jobs=2)
    assert results[1].startswith("grader error: the process grading this notebook ended (killed by signal 9")
    assert all(results[k].status == "graded" for k in (0, 2, 3, 4))


def test_a_worker_over_its_budget_costs_only_its_notebook(course, monkeypatch):
    import time

    def grade_or_hang(data, *args, **kwargs):
        if data == b"hang":
            time.sleep(600)
        return grading.NotebookResult([], "graded", 1.0)

    monkeypatch.setattr(grading, "grade_notebook", grade_or_hang)
    tasks = [_task(k, course) for k in range(3)]
    tasks[0].data, tasks[0].budget = b"hang", 2.0
    start = time.monotonic()
    results, _ = grading.grade_many(tasks, grading.Limits(sandbox="none"), jobs=2)
    assert time.monotonic() - start < 60
    assert "took longer than its budget of 2 s" in results[0]
    assert results[1].status == results[2].status == "graded"


def test_text_no_encoder_accepts_still_gives_the_grades_files(course, tmp_path):
    result = grading.NotebookResult([grading.ExerciseResult("dl9001-ex1", "t", 0, 3, "failed", "got \udcff")], "graded")
    page = feedback_html("ada", FIXTURE, result)
    (tmp_path / "page.html").write_text(page, encoding="utf-8")  # would raise UnicodeEncodeError before
    submissions = tmp_path / "s"
    (submissions / "ada").mkdir(parents=True)
    (submissions / "ada" / os.fsdecode(b"caf\xe9.txt")).write_text("a Latin-1 name")  # not UTF-8
    (submissions / "ada" / f"{FIXTURE}.ipynb").write_text("not json")
    tool.grade(course, submissions, tmp_path / "g", sandbox=False, chapters=[FIXTURE])
    totals = _totals(tmp_path / "g")
    assert totals["ada", "TOTAL"]["max_points"] == "6"
    assert any(row["file"].startswith("ada/caf\\udce9") for row in totals.values())


# --- 2. only regular files ----------------------------------------------------------------------

def test_links_are_never_followed(course, tmp_path):
    submissions = tmp_path / "s"
    (submissions / "alice").mkdir(parents=True)
    (submissions / "alice" / f"{FIXTURE}.ipynb").write_text("not json")
    (submissions / "mallory").mkdir()
    instructor = course / "source" / FIXTURE / f"{FIXTURE}.ipynb"
    (submissions / "mallory" / f"{FIXTURE}.ipynb").symlink_to(instructor)  # the solutions
    (submissions / "bob").symlink_to(submissions / "alice")  # alice's marks
    found, rows = tool.find_submissions(submissions, [FIXTURE])
    assert list(found) == [("alice", FIXTURE)]
    reasons = {row.file: row.status for row in rows}
    assert reasons["mallory/dl9001_coursework_fixture.ipynb"].startswith("refused: a symbolic link")
    assert reasons["bob"].startswith("refused: a symbolic link")
    with pytest.raises(RefusedFile, match="symbolic link"):
        read_regular_file(submissions / "mallory" / f"{FIXTURE}.ipynb", 2**20)


def test_pipes_and_devices_are_refused_unread(course, tmp_path):
    submissions = tmp_path / "s"
    (submissions / "eve").mkdir(parents=True)
    os.mkfifo(submissions / "eve" / f"{FIXTURE}.ipynb")  # opening it for reading would block
    (submissions / "zed").mkdir()
    (submissions / "zed" / f"{FIXTURE}.ipynb").symlink_to("/dev/zero")  # reading it never ends
    found, rows = tool.find_submissions(submissions, [FIXTURE])
    assert found == {}
    reasons = {row.file: row.status for row in rows}
    assert reasons["eve/dl9001_coursework_fixture.ipynb"] == "refused: not a regular file (a pipe, device or socket)"
    assert reasons["zed/dl9001_coursework_fixture.ipynb"].startswith("refused: a symbolic link")
    with pytest.raises(RefusedFile, match="not a regular file"):
        read_regular_file(submissions / "eve" / f"{FIXTURE}.ipynb", 2**20)


def test_an_oversized_notebook_is_refused_unread(course, tmp_path):
    submissions = tmp_path / "s"
    (submissions / "big").mkdir(parents=True)
    with open(submissions / "big" / f"{FIXTURE}.ipynb", "wb") as handle:
        handle.truncate(3 * 2**20)
    tool.grade(course, submissions, tmp_path / "g", sandbox=False, chapters=[FIXTURE], notebook_mb=2)
    row = _totals(tmp_path / "g")["big", FIXTURE]
    assert row["status"] == "refused: larger than 2 MB (3.0 MB)"
    assert (row["points"], row["max_points"]) == ("0", "6")


# --- 3. nothing but plain data comes back -------------------------------------------------------

def test_a_tensor_comes_back_without_python_state():
    import torch

    from transformer_course.course.kernel import Kernel, encode, parse_reply

    tensor = torch.zeros(3)
    tensor.sum = 6.0  # Python state on the tensor: it never travels
    payload = json.dumps({"kind": "value", "value": encode(tensor, {})}).encode()
    decoded = Kernel.decode(object.__new__(Kernel), parse_reply(payload)["value"])
    assert type(decoded) is torch.Tensor and "sum" not in vars(decoded)
    assert float(decoded.sum()) == 0.0


# --- 4. nothing hidden reaches the student ------------------------------------------------------

def test_hidden_feedback_names_only_the_property():
    from transformer_course.course.checks import ExerciseError
    from transformer_course.course.kernel import RemoteError

    leak = RemoteError("Inputs_1_7_64", "t was 64")  # an exception type the student named after the inputs
    assert describe_error(leak, hidden=True, clean=True) == "your code raised an exception in a hidden check"
    error = ExerciseError("allowed_pairs(64): expected 2080, got 7", "allowed_pairs(64): wrong value, got 7")
    message = describe_error(error, hidden=True, clean=True, check_name="allowed_pairs(64)")
    assert message == "allowed_pairs(64): wrong, in a hidden check"
    # a visible check after a hidden one ran in the same kernel shows no value the student's code chose
    after = describe_error(ExerciseError("allowed_pairs(4): expected 10, got 64"), hidden=False, clean=False,
                           check_name="allowed_pairs(4)")
    assert "64" not in after and after.startswith("allowed_pairs(4): wrong, in a visible check")


# --- 5. isolation between students --------------------------------------------------------------

def test_the_instructors_list_decides_the_missing_rows(course, tmp_path):
    submissions = tmp_path / "s"
    for student in ("ada", "mallory"):
        (submissions / student).mkdir(parents=True)
        (submissions / student / f"{FIXTURE}.ipynb").write_text("not json")
    (submissions / "mallory" / f"{OTHER}.ipynb").write_text("x")  # one byte named after another chapter
    tool.grade(course, submissions, tmp_path / "g", sandbox=False, chapters=[FIXTURE])
    totals = _totals(tmp_path / "g")
    assert ("ada", OTHER) not in totals
    assert totals["ada", "TOTAL"]["max_points"] == totals["mallory", "TOTAL"]["max_points"] == "6"
    assert totals["mallory", OTHER]["status"].startswith("not graded: this chapter is not in the list")
    # Default: the chapters more than half of the students handed in. Mallory alone cannot add one.
    tool.grade(course, submissions, tmp_path / "default", sandbox=False)
    totals = _totals(tmp_path / "default")
    assert ("ada", OTHER) not in totals and totals["ada", "TOTAL"]["max_points"] == "6"
    assert totals["mallory", OTHER]["status"].startswith("not graded: this chapter is not in the list")
    (submissions / "ada" / f"{OTHER}.ipynb").write_text("x")  # now both handed it in
    tool.grade(course, submissions, tmp_path / "both", sandbox=False)
    totals = _totals(tmp_path / "both")
    assert totals["ada", "TOTAL"]["max_points"] == totals["mallory", "TOTAL"]["max_points"] == "12"


def test_the_default_chapters_are_those_more_than_half_of_the_students_handed_in():
    found = {("a", "ch1"): Path("a/ch1.ipynb"), ("b", "ch1"): Path("b/ch1.ipynb"), ("c", "ch2"): Path("c/ch2.ipynb"),
             ("b", "ch3"): Path("b/ch3.ipynb"), ("c", "ch3"): Path("c/ch3.ipynb")}
    assert tool.handed_in(found, []) == ["ch1", "ch3"]  # 2 of 3 each; ch2 by one student only
    two = [tool.Graded("a", "ch2", "two candidates for ch2: x, y; keep one")]
    assert tool.handed_in(found, two) == ["ch1", "ch2", "ch3"]
    assert tool.handed_in({}, []) == []


def test_a_student_id_must_match_whole(tmp_path):
    submissions = tmp_path / "s"
    (submissions / "alice").mkdir(parents=True)
    (submissions / "alice\n").mkdir()
    (submissions / "alice\n" / f"{FIXTURE}.ipynb").write_text("{}")
    found, rows = tool.find_submissions(submissions, [FIXTURE])
    assert found == {}
    assert [row.student for row in rows if row.status.startswith("invalid student folder name")] == [tool.NO_STUDENT]


def test_csv_cells_are_never_formulas(tmp_path):
    for text in ("=HYPERLINK(\"http://x\")", "+1", "-2+3", "@SUM(A1)", "\t=1", "\uff1d1"):
        assert csv_cell(text).startswith("'"), text
    assert csv_cell("ada") == "ada" and csv_cell(3) == 3
    rows = [tool.Graded("=cmd|' /C calc'!A0", "dl9001", "graded", [("dl9001-ex1", 1.0, 3.0, "passed")], "@x")]
    tool.write_csvs(rows, tmp_path)
    for name in ("grades.csv", "totals.csv"):
        for row in csv.reader(open(tmp_path / name, encoding="utf-8")):
            assert not any(cell[:1] in ("=", "+", "-", "@") for cell in row), row


@pytest.mark.slow  # 3,000 folders made, listed and removed: about 20 s on a loaded machine
def test_deep_trees_are_listed_and_removed_without_recursion(tmp_path):
    top = tmp_path / "deep"
    top.mkdir()
    fd = os.open(top, os.O_RDONLY)
    for _ in range(3000):  # deeper than the recursion limit and than PATH_MAX
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    with open(os.open("last.ipynb", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as handle:
        handle.write("{}")
    os.close(fd)
    files = walk_files(top)
    assert len(files) == 1 and files[0].endswith("/last.ipynb") and files[0].count("d/") == 3000
    remove_tree(top)
    assert not top.exists()
    assert shutil.which("true")  # (the interpreter survived: no RecursionError)


def test_a_sandbox_cgroup_bounds_memory_and_processes_or_grading_says_why_not():
    import subprocess
    import sys

    from transformer_course.course.sandbox import Limits, cgroup_problem, make_cgroup, remove_cgroup

    problem = cgroup_problem()
    group = make_cgroup(7, Limits(memory_mb=200), jobs=2)
    if problem is not None:  # this host has no usable cgroups: grading runs, and says so
        assert isinstance(group, str) and group
        return
    try:
        hog = subprocess.run([sys.executable, "-c", "x = bytearray(400 * 2**20); x[::4096] = b'1' * len(x[::4096])"],
                             preexec_fn=group.enter, capture_output=True)
        assert hog.returncode == -9  # the memory of the whole group is bounded
        forks = subprocess.run(["sh", "-c", "for i in $(seq 300); do sleep 5 & done; wait"], preexec_fn=group.enter,
                               capture_output=True, text=True)
        assert "Cannot fork" in forks.stderr  # and its number of processes
    finally:
        remove_cgroup(group)


def test_each_job_slot_has_its_own_uid_and_a_sized_folder(tmp_path):
    from transformer_course.course.sandbox import SANDBOX_UID_BASE, Limits, kernel_command

    limits = Limits(work_mb=128)
    commands = [kernel_command(limits, tmp_path / "work", slot, []) for slot in (0, 1)]
    for slot, command in enumerate(commands):
        tmpfs = command.index(str(tmp_path / "work")) - 1
        assert command[tmpfs] == "--tmpfs" and command[tmpfs - 1] == str(128 * 2**20)  # a 128 MiB folder
        if os.geteuid() == 0:
            assert f"--reuid={SANDBOX_UID_BASE + slot}" in command
        else:
            assert "--unshare-user" in command  # a user namespace of its own


# --- 1. the checks themselves are bounded (test code, and callbacks into it) -----------------------

class _NoKernel:
    """A kernel stand-in for checks that never get as far as the student's code."""

    callbacks: list = []
    deadline = None

    def request(self, message):
        return {}


def _plan(code: str) -> grading.ExercisePlan:
    return grading.ExercisePlan("dl9001-ex1", "t", 3.0, ((code, True),), (), (), ())


def test_checks_that_never_return_are_stopped_at_the_deadline():
    import time

    start = time.monotonic()  # a test's own function, called back by the student's code, that loops
    outcome = grading._checker(_NoKernel(), _plan("def _callback():\n    while True:\n        pass\n_callback()"),
                               grading.Limits(timeout=1.0), True)
    assert outcome["result"] == "timed out" and not outcome["kernel_ok"]
    assert time.monotonic() - start < 10


def test_checks_that_grow_without_bound_run_out_of_their_own_memory():
    outcome = grading._checker(_NoKernel(), _plan("_pairs = list(range(10**9))"),
                               grading.Limits(timeout=30.0, check_mb=512), True)
    assert outcome["result"] == "failed"
    assert outcome["message"] == "the tests ran out of memory on your answer (is it far larger than asked?)"


# --- 6. nothing from the kernel is trusted (issue 37) ----------------------------------------------

@pytest.fixture
def kernel(tmp_path):
    import time

    from transformer_course.course.kernel import Kernel
    from transformer_course.course.sandbox import kernel_command, kernel_env, restrict

    limits = grading.Limits(sandbox="none", timeout=60.0)
    (tmp_path / ".tmp").mkdir()
    started = Kernel(kernel_command(limits, tmp_path, 0, []), tmp_path, kernel_env(tmp_path), restrict(limits, 300, None))
    started.start(time.monotonic() + 120)
    started.deadline = time.monotonic() + 60
    yield started
    started.kill()


PICKLE_BOMB = """
import os, pickle, struct, sys
level = []
for _ in range(60):  # a pickle of a few hundred bytes whose str() would never end (each level shares the last)
    level = [level, level]
bomb = pickle.dumps(level)
import gc  # the kernel loop's own send(), found among the live objects, and the pipe in its closure
send = next(f for f in gc.get_objects() if getattr(f, "__qualname__", "") == "kernel_main.<locals>.send")
pipe = dict(zip(send.__code__.co_freevars, (c.cell_contents for c in send.__closure__)))["proto_out"]
os.write(pipe, struct.pack("<Q", len(bomb)) + bomb)
"""


def test_a_forged_reply_holding_a_pickle_bomb_is_refused_at_once_without_unpickling(kernel):
    import time

    from transformer_course.course.kernel import KernelGone

    assert kernel.run_cell("x = 1") is None
    start = time.monotonic()
    with pytest.raises(KernelGone, match="not readable"):
        kernel.run_cell(PICKLE_BOMB)
    assert time.monotonic() - start < 20


def test_the_kernel_loop_holds_no_secret_a_cell_could_read(kernel):
    """The stack of a running cell, walked to the kernel's loop: no token, key or grader state there."""
    walk = ("import gc\nsend = next(f for f in gc.get_objects() if getattr(f, '__qualname__', '') == "
            "'kernel_main.<locals>.send')\nfound = [n for n in send.__code__.co_freevars if n in "
            "('token', 'key', 'secret', 'hits', 'state')]")
    assert kernel.run_cell(walk) is None
    assert kernel.request(("get", ["found"])) == {"found": []}


@pytest.mark.parametrize("payload, said", [
    (b"\x80\x04\x95" + b"x" * 40, "not readable"),  # a pickle: never unpickled
    (b'{"kind": "value", "value": ' + b"9" * 5000 + b"}", "not readable"),  # a 5,000-digit integer
    (b'{"kind": "value", "value": ' + b"[" * 200_000 + b"]" * 200_000 + b"}", "not readable"),
    (b'{"kind": "value", "value": ' + b'{"__tuple__": [' * 60 + b"]}" * 60 + b"}", "nested too deep"),
    (b'{"kind": "value", "value": {"__tensor__": ["float32", [1000000, 1000000], "AAAA"]}}', "bytes do not match"),
    (b'{"kind": "value", "value": {"__tensor__": ["object", [1], "AAAA"]}}', "a tensor"),
    (b'{"kind": "value", "value": {"__set__": [[1], [2]]}}', "unhashable"),
    (b'{"kind": "value", "value": {"__class__": "os.system"}}', "unknown shape"),
    (b'{"kind": "value", "value": {"__dict__": [[[1], 2]]}}', "a dict key"),
    (b"[1, 2]", "out of turn"),
])
def test_every_reply_is_parsed_within_bounds_or_refused(payload, said):
    from transformer_course.course.kernel import Kernel, KernelGone, parse_reply

    with pytest.raises(KernelGone, match=said):
        Kernel.decode(object.__new__(Kernel), parse_reply(payload)["value"])


def test_a_reply_over_the_size_limit_is_refused_before_it_is_read():
    from transformer_course.course.kernel import MAX_REPLY, KernelGone, _read_frame

    read_fd, write_fd = os.pipe()
    os.write(write_fd, (MAX_REPLY + 1).to_bytes(8, "little"))
    try:
        with pytest.raises(KernelGone, match="more than"):
            _read_frame(read_fd, None, MAX_REPLY)
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_a_worker_runs_under_limits_on_memory_and_cpu_time(course, monkeypatch):
    import resource

    def report_limits(*args, **kwargs):
        memory = resource.getrlimit(resource.RLIMIT_AS)[0]
        cpu = resource.getrlimit(resource.RLIMIT_CPU)[0]
        return grading.NotebookResult([], f"limits {memory} {cpu}", 1.0)

    monkeypatch.setattr(grading, "grade_notebook", report_limits)
    results, _ = grading.grade_many([_task(0, course)], grading.Limits(sandbox="none"), jobs=1)
    _, memory, cpu = results[0].status.split()
    assert int(memory) != resource.RLIM_INFINITY and int(memory) > 0
    assert 0 < int(cpu) <= 60 + 60 + 5


# --- 7. the Gradescope fallback sandbox (``user``): fresh folders, no network (issue 37) ------------

@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="the user sandbox needs root and setpriv (as on Gradescope)")
def test_the_user_sandbox_gives_each_kernel_a_fresh_folder_and_tmp_and_no_network(tmp_path):
    import socket
    import time

    from transformer_course.course.sandbox import network_unshare

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.setblocking(False)
    port = server.getsockname()[1]
    folder = tmp_path / "grading"
    folder.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(folder, 0o755)
    limits = grading.Limits(sandbox="user", timeout=60.0)
    session = grading._Session(folder, [], limits, 300, 0, None, {})
    try:
        first = session.start(frozenset(), time.monotonic() + 120)
        first.deadline = time.monotonic() + 60
        assert first.run_cell("import os\nopen('/tmp/leak-37', 'w').write('hidden 1 7 64')\n"
                              "open('carried', 'w').write('hidden')\nhere = os.getcwd()") is None
        here = first.request(("get", ["here"]))["here"]
        session.stop()
        assert not os.path.exists("/tmp/leak-37") and not os.path.exists(here)
        second = session.start(frozenset(), time.monotonic() + 120)
        second.deadline = time.monotonic() + 60
        probe = (f"import glob, os, socket\nseen = glob.glob('/tmp/leak-*') + glob.glob({str(folder)!r} + '/*/carried')\n"
                 f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n    reached = True\n"
                 "except OSError:\n    reached = False")
        assert second.run_cell(probe) is None
        values = second.request(("get", ["seen", "reached"]))
        assert values["seen"] == []
        assert values["reached"] is (not network_unshare())
    finally:
        session.stop()
        server.close()
